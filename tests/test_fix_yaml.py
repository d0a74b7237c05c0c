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
)
from backend.config.yaml_lines import patch_yaml_text
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
    # compute_type: bf16 on the CPU: its finding says the run trains in fp32, and the fix
    # writes just that (no bf16 written, then taken out again by a second round).
    (finding,) = [f for f in page.original.findings if f.key == "compute_type"]
    assert finding.message == "yaml-compute-type-bf16-fp32" and "fp32" in finding.fix
    assert "compute_type" not in page.result.args and "bf16" not in page.result.args
    assert f"with {page.count} fix" in cli_out and f"checked against the preset {CPU}" in cli_out
    assert page.comments_kept and "# my run" in cli_text and "# local copy" in cli_text


@pytest.mark.parametrize("preset", [None, *PRESETS])
def test_the_command_line_writes_what_the_page_writes_for_each_preset(board: RocBoard, tmp_path: Path, preset: str | None) -> None:
    text = (FIXTURES / "cuda_guide_mistakes.yaml").read_text(encoding="utf-8") + "compute_type: bf16  # use bfloat16\nfinetuning_type: qlora\n"
    source, target = tmp_path / "in.yaml", tmp_path / "out.yaml"
    source.write_text(text, encoding="utf-8")
    out = io.StringIO()
    check_main([str(source), *(["--preset", preset] if preset else []), "--fix", "--no-llamafactory", "--output", str(target)], out)
    page = board.fix_yaml(text, preset) if preset else fix_yaml_text(text, None)
    assert target.read_text(encoding="utf-8") == page.text
    assert ("checked against the preset " + preset if preset else "checked against no preset") in out.getvalue().splitlines()[0]


def test_a_later_round_never_takes_back_what_a_fix_wrote() -> None:
    # `bf61: true` is bf16 misspelled: the fix renames it. On the CPU a second round would
    # take bf16 out again: it is left, listed with what is still wrong, and the file says
    # what the first finding said.
    text = "model_name_or_path: /m\ndataset: demo\ntemplate: llama3\ndo_train: true\nbf61: true\n"
    fix = fix_yaml_text(text, PRESETS[CPU])
    assert _parsed(fix.text)["bf16"] is True and "bf61" not in _parsed(fix.text)
    assert [f.rule for f in fix.applied] == ["yaml-unknown-key"]
    assert "bf16-unsupported" in {f.rule for f in fix.result.findings}
    # A fix a round uncovers that takes back nothing is still applied: the typo is renamed,
    # then `qlora` (now under its right name) becomes LoRA on a 4-bit model.
    fix = fix_yaml_text(text.replace("bf61", "bf16") + "finetunig_type: qlora\n", PRESETS["mi300x"])
    assert [f.rule for f in fix.applied] == ["yaml-unknown-key", "yaml-finetuning-qlora"]
    assert _parsed(fix.text)["finetuning_type"] == "lora" and _parsed(fix.text)["quantization_bit"] == 4


# --- what a finding says its fix writes, the fixed file holds ------------------------------

_BASE = {
    "model_name_or_path": "/m", "stage": "sft", "do_train": True, "finetuning_type": "lora", "lora_rank": 8, "lora_target": "all",
    "dataset": "demo", "dataset_dir": "/d", "template": "llama3", "cutoff_len": 1024, "per_device_train_batch_size": 1,
    "gradient_accumulation_steps": 8, "learning_rate": 1.0e-4, "num_train_epochs": 3.0, "bf16": True,
}
# Beside the import's own bad inputs (tests/test_yaml_import.py CASES): each value of
# compute_type, QLoRA's bits, a misspelled precision key, evaluation without data.
_MORE_CHANGES = [
    {"compute_type": "fp16", "bf16": None}, {"compute_type": "pure_bf16", "bf16": None}, {"compute_type": "fp32", "bf16": None},
    {"compute_type": "amp", "bf16": None}, {"finetuning_type": "qlora", "quantization_bit": 8}, {"disable_flash_attn": False},
    {"eval_strategy": "steps"}, {"bf16": None, "bf61": True}, {"flash_attn": "fa2"}, {"bf16": None, "compute_type": "bf16"},
]
# Rules whose fix writes a key other than the one flagged: the corpus must hold each.
CROSS_KEY_RULES = {
    "yaml-compute-type", "yaml-disable-flash-attn", "yaml-finetuning-qlora", "yaml-unknown-key", "yaml-bf16-and-fp16",
    "yaml-precision-unset", "bf16-unsupported", "eval-without-data",
}


def _corpus() -> list[str]:
    from tests.test_yaml_import import CASES, _override

    texts = [path.read_text(encoding="utf-8") for path in sorted(FIXTURES.glob("*.yaml"))]
    texts += [yaml.safe_dump(_override(_BASE, case[1]), sort_keys=False) for case in CASES]
    texts += [yaml.safe_dump(_override(_BASE, changes), sort_keys=False) for changes in _MORE_CHANGES]
    return texts


def _holds(args: dict, key: str, value) -> bool:
    if value is None:
        return key not in args
    return key in args and json.dumps(args[key]) == json.dumps(value)


@pytest.mark.parametrize("preset", [None, *PRESETS])
def test_every_fix_writes_what_its_finding_says(preset: str | None) -> None:
    """"compute_type ... Fix: write `bf16: true`" and the fixed file has bf16: true: for every
    finding with a fix the page shows, on every preset (and none, the command line's default),
    the fixed text, read back, holds its patch's values. A renamed typo's value may be fixed
    by a later round (`lerning_rate: 0` -> `learning_rate: 0.0001`): its key is there."""
    for text in _corpus():
        hardware = PRESETS[preset] if preset else None
        shown = import_yaml(text, hardware)
        fixed = _parsed(fix_yaml_text(text, hardware).text)
        for finding in shown.fixable:
            removed = [json.dumps(shown.args[k]) for k, v in finding.patch.items() if v is None and k in shown.args]
            for key, value in finding.patch.items():
                renamed = finding.rule == "yaml-unknown-key" and value is not None and json.dumps(value) in removed
                ok = key in fixed if renamed else _holds(fixed, key, value)
                assert ok, f"{finding.key} ({finding.message or finding.rule}) says {key}: {value!r}; the fixed file has {fixed.get(key, '<nothing>')!r}\n{text}"


def test_the_corpus_holds_every_rule_whose_fix_writes_another_key() -> None:
    seen = set()
    for preset in [None, *PRESETS]:
        for text in _corpus():
            for finding in import_yaml(text, PRESETS[preset] if preset else None).fixable:
                if set(finding.patch) - {finding.key}:
                    seen.add(finding.rule)
    assert CROSS_KEY_RULES <= seen, CROSS_KEY_RULES - seen


@pytest.mark.parametrize(
    ("preset", "value", "written", "fix_words"),
    [
        ("mi300x", "bf16", {"bf16": True}, "`bf16: true`"),
        ("rx6900xt", "bf16", {"fp16": True, "bf16": None}, "`fp16: true`"),
        (CPU, "bf16", {"bf16": None, "fp16": None}, "fp32"),
        ("mi300x", "pure_bf16", {"pure_bf16": True, "bf16": True}, "`pure_bf16: true`"),
        (CPU, "pure_bf16", {"pure_bf16": None, "bf16": None}, "fp32"),
        ("rx6900xt", "amp", {"fp16": True, "bf16": None}, "`fp16: true`"),
        (None, "amp", {"bf16": True}, "`bf16: true`"),
    ],
)
def test_compute_type_says_what_it_writes_on_the_preset(preset: str | None, value: str, written: dict, fix_words: str) -> None:
    text = f"model_name_or_path: /m\ndataset: demo\ntemplate: llama3\ndo_train: true\ncompute_type: {value}\n"
    hardware = PRESETS[preset] if preset else None
    (finding,) = [f for f in import_yaml(text, hardware).findings if f.key == "compute_type"]
    for locale in ("en", "zh-CN"):
        assert fix_words in finding.text(locale)[1], (locale, finding.text(locale))
    fixed = _parsed(fix_yaml_text(text, hardware).text)
    assert "compute_type" not in fixed
    for key, want in written.items():
        assert _holds(fixed, key, want), (key, fixed)
    # The precision warning does not also answer for the same line with another precision.
    assert "yaml-precision-unset" not in {f.rule for f in import_yaml(text, hardware).findings}


def test_qlora_writes_the_bits_it_names_or_plain_lora_where_the_preset_has_none() -> None:
    text = "model_name_or_path: /m\ndataset: demo\ntemplate: llama3\ndo_train: true\nbf16: true\nfinetuning_type: qlora\nquantization_bit: 8\n"
    (on_gpu,) = [f for f in import_yaml(text, PRESETS["mi300x"]).findings if f.rule == "yaml-finetuning-qlora"]
    assert on_gpu.patch == {"finetuning_type": "lora", "quantization_bit": 8} and "`quantization_bit: 8`" in on_gpu.fix
    assert _parsed(fix_yaml_text(text, PRESETS["mi300x"]).text)["quantization_bit"] == 8
    (on_cpu,) = [f for f in import_yaml(text, PRESETS[CPU]).findings if f.rule == "yaml-finetuning-qlora"]
    assert on_cpu.message == "yaml-finetuning-qlora-not-offered" and "quantization_bit" not in _parsed(fix_yaml_text(text, PRESETS[CPU]).text)


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
    # The new key takes the removed one's place, and its comment: it was about that setting.
    assert fix.text == "# c\nmodel_name_or_path: /m\nflash_attn: disabled # old flag\ndataset: demo\ntemplate: llama3\nbf16: true\ndo_train: true\n"


@pytest.mark.parametrize(
    ("preset", "line", "fixed_line"),
    [
        ("mi300x", "compute_type: bf16  # use bfloat16", "bf16: true  # use bfloat16"),
        ("rx6900xt", "compute_type: bf16  # use bfloat16", "fp16: true  # use bfloat16"),
        ("mi300x", "compute_type: pure_bf16 # all of it", "pure_bf16: true # all of it"),
        ("mi300x", "finetuning_type: qlora   # small card", "finetuning_type: lora   # small card"),
        ("mi300x", "flash_attn: eager  # was CUDA", "flash_attn: disabled  # was CUDA"),
        ("mi300x", "flash_attn:  # pick one", "flash_attn: disabled  # pick one"),
        ("mi300x", "ddp_backend: 'rccl'    # AMD", "ddp_backend: nccl    # AMD"),
        ("mi300x", "bf16: yes # fast", "bf16: yes # fast"),  # nothing to fix: the line as it was
    ],
)
def test_a_fixed_line_keeps_its_comment(preset: str, line: str, fixed_line: str) -> None:
    text = f"# mine\nmodel_name_or_path: /m\ndataset: demo\ntemplate: llama3\ndo_train: true\n{line}\nseed: 7  # seed\n"
    if not line.startswith(("bf16", "compute_type")):
        text = text.replace("do_train: true\n", "do_train: true\nbf16: true\n")
    fix = fix_yaml_text(text, PRESETS[preset])
    assert fix.comments_kept
    assert fixed_line in fix.text.splitlines(), fix.text
    assert "# mine" in fix.text and "seed: 7  # seed" in fix.text


def test_a_line_fixed_twice_keeps_its_comment() -> None:
    # `disable_flash_attn` writes flash_attn in the place of its line (with its comment); the
    # null flash_attn below is then fixed on its own line, comment kept too.
    text = "model_name_or_path: /m\ndisable_flash_attn: false  # old\ndataset: demo\ntemplate: llama3\ndo_train: true\nbf16: true\nflash_attn:   # pick\n"
    fix = fix_yaml_text(text, PRESETS["mi300x"])
    assert "flash_attn: disabled   # pick" in fix.text.splitlines(), fix.text


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
    assert load.values["batch_size"] == PRESETS[CPU].value("batch_size") and load.values["learning_rate"] == schema.field("learning_rate").default
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
    english = form_load_markdown(load, "en", PRESETS[CPU])
    assert CATALOGUE["en"]["label.max_steps"].split(" (")[0] in english  # reset, by its label
    assert "Epochs" in english and PRESETS[CPU].display_name.replace("(", "\\(").replace(")", "\\)") in english
    # The YAML's value is shown in a code span (literal), nowhere else: no link, no HTML.
    assert "`/m [x](http://evil) <b>`" in english
    assert "](http" not in re.sub(r"`[^`]*`", "", english) and "<b>" not in re.sub(r"`[^`]*`", "", english)
    chinese = form_load_markdown(load, "zh-CN", PRESETS[CPU])
    without_code = re.sub(r"`[^`]*`", "", chinese)
    assert not ENGLISH_WORDS.search(without_code.replace(PRESETS[CPU].name("zh-CN"), "")), ENGLISH_WORDS.search(without_code)
    assert CATALOGUE["zh-CN"]["label.num_train_epochs"].split("（")[0] in chinese and "](http" not in without_code


def _summary_parts(markdown: str) -> tuple[str, list[str]]:
    """(what shows before anything is unfolded, the <details> blocks)."""
    folded = re.findall(r"<details>.*?</details>", markdown, flags=re.DOTALL)
    return re.sub(r"<details>.*?</details>", "", markdown, flags=re.DOTALL), folded


@pytest.mark.parametrize("locale", ["en", "zh-CN"])
def test_the_summary_is_short_the_defaults_folded_and_other_keys_named(board: RocBoard, locale: str) -> None:
    text = EPOCHS_YAML + "report_to: none\nneftune_noise_alpha: 5\nmax_grad_norm: 0.5\n"
    load = board.load_into_form(text, "mi300x", {**demo_form(), "preset": "mi300x"})
    markdown = form_load_markdown(load, locale, PRESETS["mi300x"])
    visible, folded = _summary_parts(markdown)
    # First: the counts, naming the preset the YAML was checked against.
    other = len(load.other_keys)
    assert load.other_keys == ("neftune_noise_alpha", "max_grad_norm")
    assert markdown.splitlines()[0] == CATALOGUE[locale]["import.loaded"].format(
        preset=view_escape(PRESETS["mi300x"].name(locale)), set=len(load.set_fields) - 1, reset=len(load.reset_fields), other=other, kept=len(load.kept_fields) - 1
    )
    # Then what the YAML set, by label and value; the Other keys by name.
    for name in load.set_fields:
        if name != "other_keys":
            assert view_escape(re.split(r"\s*[（(]", CATALOGUE[locale][f"label.{name}"])[0]) in visible, name
    assert "`neftune_noise_alpha` · `max_grad_norm`" in visible
    # What was reset (and the page's own fields) is there, folded: the visible part is short.
    assert len(folded) == 2 and all("<summary>" in block for block in folded)
    assert str(len(load.reset_fields)) in folded[0] and "`0`" in folded[0]  # Max steps reset to 0
    assert len([line for line in visible.splitlines() if line.strip()]) == 3 and len(visible) < 700, visible


def view_escape(text: str) -> str:
    from backend.view import escape_markdown

    return escape_markdown(text)
