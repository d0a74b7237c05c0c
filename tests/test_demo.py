"""The offline demo builder: what it writes, that it writes it once, and the same every time.

Training on the demo is another test's job; these only build (a few seconds) and inspect.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from backend import demo
from backend.demo import DemoPaths, build_demo, demo_paths

REPO_ROOT = Path(__file__).resolve().parent.parent
LLAMA3_SPECIALS = ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> DemoPaths:
    return build_demo(tmp_path_factory.mktemp("demo-a") / "demo")


@pytest.fixture(scope="module")
def tokenizer(built: DemoPaths):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(built.model_dir)


def test_paths_follow_the_output_folder(tmp_path: Path) -> None:
    paths = demo_paths(tmp_path / "x")
    assert paths == DemoPaths(model_dir=tmp_path / "x" / "model", dataset_dir=tmp_path / "x" / "data", dataset_name="demo")
    assert demo.DEMO_DIR == REPO_ROOT / "demo"


def test_importing_the_module_loads_no_ml_library() -> None:
    code = "import sys, backend.demo; print(sorted(m for m in ('torch', 'transformers', 'tokenizers') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_build_writes_model_tokenizer_dataset_and_stamp(built: DemoPaths) -> None:
    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (built.model_dir / name).is_file(), name
    assert (built.dataset_dir / "dataset_info.json").is_file()
    assert demo.is_demo_current(built.model_dir.parent)


def test_model_vocabulary_and_special_ids_match_the_tokenizer(built: DemoPaths, tokenizer) -> None:
    from transformers import AutoConfig, GenerationConfig

    config = AutoConfig.from_pretrained(built.model_dir)
    generation = GenerationConfig.from_pretrained(built.model_dir)
    assert config.model_type == "llama"
    assert config.vocab_size == len(tokenizer)
    assert tokenizer.bos_token == "<|begin_of_text|>"
    assert tokenizer.eos_token == "<|eot_id|>"
    assert tokenizer.pad_token is not None and tokenizer.pad_token != tokenizer.eos_token
    for ids in (config, generation):
        assert (ids.bos_token_id, ids.eos_token_id, ids.pad_token_id) == (
            tokenizer.bos_token_id,
            tokenizer.eos_token_id,
            tokenizer.pad_token_id,
        )


def test_chat_template_renders_llama3_with_special_tokens_as_single_ids(tokenizer) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Who are you?"},
        {"role": "assistant", "content": "A demo."},
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    assert text == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWho are you?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nA demo.<|eot_id|>"
    )
    prompt = tokenizer.apply_chat_template(messages[1:2], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")

    ids = tokenizer.encode(text, add_special_tokens=False)
    special_ids = {token: tokenizer.convert_tokens_to_ids(token) for token in LLAMA3_SPECIALS}
    assert all(isinstance(i, int) and i != tokenizer.unk_token_id for i in special_ids.values())
    assert ids[0] == special_ids["<|begin_of_text|>"]
    assert ids.count(special_ids["<|start_header_id|>"]) == 3
    assert ids.count(special_ids["<|end_header_id|>"]) == 3
    assert ids.count(special_ids["<|eot_id|>"]) == 3
    assert tokenizer.decode(ids) == text


def test_llamafactory_llama3_template_adds_no_token(built: DemoPaths) -> None:
    """The trainer's template must find every token it needs, so the vocabulary is never resized."""
    from llamafactory.data.template import get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(built.model_dir)
    size_before = len(tokenizer)
    template = get_template_and_fix_tokenizer(tokenizer, DataArguments(template="llama3"))
    assert len(tokenizer) == size_before
    assert tokenizer.eos_token == "<|eot_id|>"
    prompt_ids, answer_ids = template.encode_oneturn(
        tokenizer, [{"role": "user", "content": "Who are you?"}, {"role": "assistant", "content": "A demo."}]
    )
    assert prompt_ids[0] == tokenizer.bos_token_id
    assert answer_ids[-1] == tokenizer.eos_token_id


def test_dataset_info_points_at_an_alpaca_file_with_its_columns(built: DemoPaths) -> None:
    info = json.loads((built.dataset_dir / "dataset_info.json").read_text(encoding="utf-8"))
    entry = info[built.dataset_name]
    assert entry.get("formatting", "alpaca") == "alpaca"
    rows = json.loads((built.dataset_dir / entry["file_name"]).read_text(encoding="utf-8"))
    columns = entry["columns"]
    assert 200 <= len(rows) <= 1000
    for row in rows:
        assert set(row) == {columns["prompt"], columns["query"], columns["response"]}
        assert row[columns["prompt"]] and row[columns["response"]]


def test_second_build_leaves_the_demo_alone(built: DemoPaths, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    def must_not_build(root: Path) -> None:
        raise AssertionError("rebuilt an up-to-date demo")

    monkeypatch.setattr(demo, "_build_into", must_not_build)
    out = built.model_dir.parent
    assert build_demo(out) == built
    assert demo.main(["--out", str(out)]) == 0
    assert "up to date" in capsys.readouterr().out


def _fake_build(root: Path) -> None:
    (root / "model").mkdir(parents=True)
    (root / "model" / "marker").write_text("new", encoding="utf-8")
    (root / demo.STAMP_FILE).write_text(demo.builder_stamp(), encoding="utf-8")


@pytest.mark.parametrize(
    "stale_stamp",
    [
        pytest.param(lambda: "rocboard-demo-0 " + demo.builder_stamp().split()[1], id="older-version"),
        pytest.param(lambda: demo.BUILDER_VERSION + " 0000000000000000", id="edited-builder"),
        pytest.param(lambda: None, id="never-finished"),
    ],
)
def test_stale_or_unfinished_demo_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stale_stamp) -> None:
    monkeypatch.setattr(demo, "_build_into", _fake_build)
    out = tmp_path / "demo"
    (out / "model").mkdir(parents=True)
    (out / "model" / "marker").write_text("old", encoding="utf-8")
    stamp = stale_stamp()
    if stamp is not None:
        (out / demo.STAMP_FILE).write_text(stamp, encoding="utf-8")

    build_demo(out)
    assert (out / "model" / "marker").read_text(encoding="utf-8") == "new"
    assert demo.is_demo_current(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo"]  # no staging or retired folders left


def test_force_rebuilds_a_current_demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "_build_into", _fake_build)
    out = tmp_path / "demo"
    build_demo(out)
    (out / "model" / "marker").write_text("edited", encoding="utf-8")
    build_demo(out)
    assert (out / "model" / "marker").read_text(encoding="utf-8") == "edited"
    build_demo(out, force=True)
    assert (out / "model" / "marker").read_text(encoding="utf-8") == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo"]


def test_interrupted_build_keeps_the_previous_demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def half_build(root: Path) -> None:
        (root / "model").mkdir(parents=True)
        (root / "model" / "marker").write_text("half", encoding="utf-8")
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "_build_into", half_build)
    fresh = tmp_path / "fresh" / "demo"
    with pytest.raises(KeyboardInterrupt):
        build_demo(fresh)
    assert not fresh.exists()
    assert list(fresh.parent.iterdir()) == []

    monkeypatch.setattr(demo, "_build_into", _fake_build)
    out = tmp_path / "kept" / "demo"
    build_demo(out)
    monkeypatch.setattr(demo, "_build_into", half_build)
    with pytest.raises(KeyboardInterrupt):
        build_demo(out, force=True)
    assert (out / "model" / "marker").read_text(encoding="utf-8") == "new"
    assert demo.is_demo_current(out)
    assert sorted(p.name for p in out.parent.iterdir()) == ["demo"]


def test_two_builds_are_byte_identical(built: DemoPaths, tmp_path: Path) -> None:
    other = build_demo(tmp_path / "demo")
    for relative in ("data/demo.json", "data/dataset_info.json", "model/tokenizer.json", "model/tokenizer_config.json", "model/config.json", "model/model.safetensors"):
        first = (built.model_dir.parent / relative).read_bytes()
        second = (other.model_dir.parent / relative).read_bytes()
        assert first == second, relative
