"""Fixing an imported YAML (backend/config/yaml_import.py fix_yaml_text): the page's "Apply
fixes" and `app.py check --fix` write the same file, its comments kept where the line
patcher can; and loading a YAML into the form (FormLoad, view.form_load_markdown)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import yaml

from backend.check_cli import main as check_main
from backend.config import schema
from backend.config.presets import DEFAULT_PRESET_ID, load_presets
from backend.config.yaml_import import (
    apply_fixes,
    fix_yaml_text,
    form_load,
    import_yaml,
    load_yaml_text,
    patch_yaml_text,
)
from backend.i18n import CATALOGUE
from backend.service import RocBoard, demo_form
from backend.view import form_load_markdown

PRESETS, _ = load_presets()
CPU = DEFAULT_PRESET_ID  # the CPU demo: bf16 is refused there, so a fix uncovers the next
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "yaml"

CPU_BF16 = """\
# my run
model_name_or_path: /models/tiny   # local copy
dataset: demo
template: llama3
compute_type: bf16
"""


@pytest.fixture
def board(tmp_path: Path) -> RocBoard:
    return RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports")


def _cli_fix(tmp_path: Path, text: str, preset: str) -> tuple[str, str]:
    source, target = tmp_path / "in.yaml", tmp_path / "out.yaml"
    source.write_text(text, encoding="utf-8")
    out = io.StringIO()
    check_main([str(source), "--preset", preset, "--fix", "--no-llamafactory", "--output", str(target)], out)
    return target.read_text(encoding="utf-8"), out.getvalue()


def _parsed(text: str) -> dict:
    args, findings = load_yaml_text(text)
    assert args is not None, findings
    return args


def _same(a: dict, b: dict) -> bool:
    """Equal as mappings, in the same order, with the same types (1 is not 1.0 nor true)."""
    return a == b and json.dumps(a, default=repr) == json.dumps(b, default=repr)


# --- one function for the page and the command line --------------------------------------


def test_page_and_command_line_write_the_same_file_on_the_cpu_preset(board: RocBoard, tmp_path: Path) -> None:
    page = board.fix_yaml(CPU_BF16, CPU)
    cli_text, cli_out = _cli_fix(tmp_path, CPU_BF16, CPU)
    assert page.text == cli_text  # byte for byte
    fixed, result = page  # unpacks as the page always did
    assert fixed == page.text and result is page.result
    # compute_type: bf16 became bf16: true, which the CPU refuses: the second round drops it.
    assert "compute_type" not in page.result.args and "bf16" not in page.result.args
    assert page.count >= 2 and f"with {page.count} fixes applied" in cli_out
    assert page.comments_kept and "# my run" in cli_text and "# local copy" in cli_text


def test_the_rounds_are_those_the_page_always_applied() -> None:
    # Apply-once (what the command line did) leaves bf16: true on the CPU preset.
    first = import_yaml(CPU_BF16, PRESETS[CPU])
    once = apply_fixes(first.args, first.findings)
    assert once.get("bf16") is True
    assert "bf16" not in fix_yaml_text(CPU_BF16, PRESETS[CPU]).result.args
    assert "bf16" in _parsed(fix_yaml_text(CPU_BF16, PRESETS[CPU], rounds=1).text)


# --- comments survive ------------------------------------------------------------------------


def test_comments_survive_a_rename_and_a_value_fix() -> None:
    text = (
        "# A config from a CUDA guide\n"
        "model_name_or_path: /m  # the model\n"
        "dataset: demo\n"
        "template: llama3\n"
        "\n"
        "# attention\n"
        "flash_attn: off   # was eager on CUDA\n"
        "lerning_rate: 2e-4 # the learning rate\n"
        "bf16: true\n"
        "do_train: true\n"
    )
    fix = fix_yaml_text(text, PRESETS["rx7900xtx"])
    assert fix.comments_kept
    lines = fix.text.splitlines()
    assert lines[:6] == ["# A config from a CUDA guide", "model_name_or_path: /m  # the model", "dataset: demo", "template: llama3", "", "# attention"]
    assert lines[6] == "flash_attn: disabled   # was eager on CUDA"  # the value replaced, the comment kept
    assert lines[7] == "learning_rate: 2e-4 # the learning rate"  # renamed in place, value as written
    assert _parsed(fix.text)["learning_rate"] == 2e-4
    assert {f.key for f in fix.applied} >= {"flash_attn", "lerning_rate"}


def test_a_removed_key_with_a_block_list_goes_whole() -> None:
    text = (
        "model_name_or_path: /m\n"
        "dataset: demo\n"
        "template: llama3\n"
        "bf16: true\n"
        "do_train: true\n"
        "device_map:\n"
        "  - cuda:0\n"
        "  # the second card\n"
        "  - cuda:1\n"
        "# kept: a comment between entries\n"
        "make_it_fast:\n"
        "- yes\n"
        "- please\n"
        "seed: 7  # mine\n"
    )
    fix = fix_yaml_text(text, PRESETS["rx7900xtx"])
    assert fix.comments_kept
    assert fix.text == (
        "model_name_or_path: /m\n"
        "dataset: demo\n"
        "template: llama3\n"
        "bf16: true\n"
        "do_train: true\n"
        "# kept: a comment between entries\n"
        "seed: 7  # mine\n"
    )


def test_new_keys_go_where_apply_fixes_puts_them() -> None:
    text = "# c\nmodel_name_or_path: /m\ndisable_flash_attn: true # old flag\ndataset: demo\ntemplate: llama3\nbf16: true"  # no final newline
    fix = fix_yaml_text(text, PRESETS["rx7900xtx"])
    assert fix.comments_kept
    assert fix.text == "# c\nmodel_name_or_path: /m\nflash_attn: disabled\ndataset: demo\ntemplate: llama3\nbf16: true\ndo_train: true\n"


@pytest.mark.parametrize(
    "text",
    [
        # flow style: one line the patcher does not edit
        "{model_name_or_path: /m, dataset: demo, template: llama3, compute_type: bf16}  # flow\n",
        # an anchor on the key the fix removes: its alias would dangle
        "# anchored\nmodel_name_or_path: /m\ndataset: demo\ntemplate: llama3\nbf16: true\ndo_train: true\nlerning_rate: &lr 2.0e-4\nlearning_rate: *lr\n",
    ],
    ids=["flow", "anchor"],
)
def test_what_the_patcher_cannot_edit_is_rewritten_whole_and_says_so(text: str) -> None:
    result = import_yaml(text, PRESETS["rx7900xtx"])
    assert patch_yaml_text(text, result.args, result.findings) is None
    fix = fix_yaml_text(text, PRESETS["rx7900xtx"], rounds=1)
    assert not fix.comments_kept and fix.message_id == "import.comments_lost"
    assert "#" not in fix.text
    assert _same(_parsed(fix.text), apply_fixes(result.args, result.findings))
    for locale in ("en", "zh-CN"):
        assert CATALOGUE[locale]["import.comments_lost"].strip()


def _fixable_texts() -> list[tuple[str, str, str]]:
    """(name, text, preset) of every fixture with a mechanical fix, and hand-made variants."""
    cases = []
    for path in sorted(FIXTURES.glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        for preset in ("rx7900xtx", "rx6900xt", CPU):
            if import_yaml(text, PRESETS[preset]).fixable:
                cases.append((f"{path.stem}-{preset}", text, preset))
    cases += [
        ("cpu-bf16", CPU_BF16, CPU),
        ("crlf", CPU_BF16.replace("\n", "\r\n"), CPU),
        ("quoted-keys", "'model_name_or_path': \"/m\"\n\"compute_type\": fp16 # q\ndataset: [a, b]\nflash_attn: 'off'\n", "rx7900xtx"),
        ("null-values", "model_name_or_path: /m\nflash_attn:\ndataset: demo\nmax_steps: -5\n", "rx7900xtx"),
        ("document-start", "---\n# head\nmodel_name_or_path: /m\nfinetuning_type: qlora\ntemplate: llama3\n", "rx7900xtx"),
        ("block-scalar", "model_name_or_path: /m\ncompute_device: |\n  cuda\n\n  more\ntemplate: llama3\n", "rx7900xtx"),
    ]
    return cases


@pytest.mark.parametrize(("text", "preset"), [c[1:] for c in _fixable_texts()], ids=[c[0] for c in _fixable_texts()])
def test_the_fixed_text_always_parses_as_apply_fixes_says(text: str, preset: str) -> None:
    result = import_yaml(text, PRESETS[preset])
    assert result.fixable
    expected = apply_fixes(result.args, result.findings)
    patched = patch_yaml_text(text, result.args, result.findings)
    if patched is not None:
        assert _same(_parsed(patched), expected)
        assert yaml.safe_load(patched).keys() == expected.keys()
    # Round by round, whatever fix_yaml_text writes parses as that round's apply_fixes.
    text_now = text
    for rounds in range(1, 5):
        fix = fix_yaml_text(text, PRESETS[preset], rounds=rounds)
        now = import_yaml(text_now, PRESETS[preset])
        if fix.text == text_now or not now.fixable:
            break
        assert _same(_parsed(fix.text), apply_fixes(now.args, now.findings)), rounds
        text_now = fix.text


def test_the_guide_fixture_keeps_its_comments() -> None:
    text = (FIXTURES / "cuda_guide_mistakes.yaml").read_text(encoding="utf-8")
    fix = fix_yaml_text(text, PRESETS["rx7900xtx"])
    assert fix.comments_kept and fix.text.startswith("# A config pieced together")
    assert list(_parsed(fix.text))[-2:] == ["flash_attn", "lora_rank"]


def test_an_unreadable_yaml_is_given_back_as_it_is() -> None:
    fix = fix_yaml_text("a: [1\n", PRESETS[CPU])
    assert fix.text == "a: [1\n" and fix.applied == [] and fix.comments_kept


# --- loading into the form -------------------------------------------------------------------

EPOCHS_YAML = "model_name_or_path: /m\ndataset: demo\ntemplate: llama3\nnum_train_epochs: 3\nfp16: false\n"


def test_loading_sets_what_the_yaml_says_and_resets_the_rest(board: RocBoard) -> None:
    current = {**demo_form(), "max_steps": 100, "dataset_dir": "/old/data", "dist_nproc": 4, "dist_master_addr": "10.0.0.1"}
    load = board.load_into_form(EPOCHS_YAML, CPU, current)
    page = [f.name for f in schema.page_fields()]
    assert list(load.values) == page  # a value for every field of the page
    assert set(load.set_fields) | set(load.reset_fields) | set(load.kept_fields) == set(page)
    assert not set(load.set_fields) & set(load.reset_fields) and not set(load.kept_fields) & (set(load.set_fields) | set(load.reset_fields))
    # It trains 3 epochs: the old Max steps = 100 does not survive the load.
    assert load.values["num_train_epochs"] == 3 and load.values["max_steps"] == 0
    assert "max_steps" in load.reset_fields and "num_train_epochs" in load.set_fields
    config, _, _ = board.parse(load.values)
    assert config.training.max_steps == 0 and config.training.num_train_epochs == 3
    # The old dataset folder is not the YAML's: it is reset too.
    assert "dataset_dir" in load.reset_fields and load.values["dataset_dir"] == ""
    # Not LLaMA-Factory keys: the preset and the multi-GPU plan stay as the form had them.
    assert {"preset", "dist_nproc", "dist_master_addr"} <= set(load.kept_fields)
    assert load.values["preset"] == current["preset"] and load.values["dist_nproc"] == 4 and load.values["dist_master_addr"] == "10.0.0.1"
    # The preset's own defaults, not the schema's, for what the YAML leaves out.
    assert load.values["batch_size"] == PRESETS[CPU].batch_size and load.values["learning_rate"] == schema.field("learning_rate").default
    assert load.findings == board.import_yaml(EPOCHS_YAML, CPU).findings


def test_a_yaml_with_max_steps_keeps_them() -> None:
    load = form_load(import_yaml(EPOCHS_YAML + "max_steps: 50\n", PRESETS[CPU]), {}, demo_form())
    assert load.values["max_steps"] == 50 and "max_steps" in load.set_fields


def test_an_unreadable_yaml_changes_nothing(board: RocBoard) -> None:
    current = {**demo_form(), "max_steps": 100}
    load = board.load_into_form("a: [1\n", CPU, current)
    assert not load.loaded and load.set_fields == () and load.reset_fields == ()
    assert all(load.values[name] == current.get(name, load.values[name]) for name in load.values)
    assert form_load_markdown(load, "en") and form_load_markdown(load, "zh-CN") != form_load_markdown(load, "en")


ENGLISH_WORDS = re.compile(r"[A-Za-z]{2,}(?:[ ,']+[A-Za-z]{2,}){2,}")  # three English words in a row


def test_the_summary_names_each_field_in_the_pages_language(board: RocBoard) -> None:
    text = EPOCHS_YAML.replace("/m", "/m [x](http://evil) <b>")
    load = board.load_into_form(text, CPU, {**demo_form(), "max_steps": 100})
    english = form_load_markdown(load, "en")
    assert CATALOGUE["en"]["label.max_steps"].split(" (")[0] in english  # reset, by its label
    assert "Hardware preset" in english and "Epochs" in english
    # The YAML's value is shown in a code span (literal), nowhere else: no link, no HTML.
    assert "`/m [x](http://evil) <b>`" in english
    assert "](http" not in re.sub(r"`[^`]*`", "", english) and "<b>" not in re.sub(r"`[^`]*`", "", english)
    chinese = form_load_markdown(load, "zh-CN")
    without_code = re.sub(r"`[^`]*`", "", chinese)
    assert not ENGLISH_WORDS.search(without_code), ENGLISH_WORDS.search(without_code)
    assert CATALOGUE["zh-CN"]["label.preset"] in chinese and "](http" not in without_code
