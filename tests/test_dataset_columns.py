"""The pre-launch column check (issue 13): the first rows of a dataset file against the layout
its dataset_info.json entry declares, and the diagnosis of the trainer's `KeyError: 'output'`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from backend.config import FORM_DEFAULTS, parse_form
from backend.config.checks import check_config
from backend.config.presets import load_presets
from backend.data.entry_check import COLUMNS_READ_MAX_BYTES
from backend.diagnose import diagnose, summarize_failure
from backend.findings import Finding
from backend.i18n import translate
from tests.tiers import starts

PRESETS, _ = load_presets()
LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"
TINY_LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000, "max_position_embeddings": 512}
ALPACA_ROWS = [{"instruction": f"Say {i}", "input": "", "output": str(i)} for i in range(30)]
SHAREGPT_ROWS = [{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}] * 5


def write_dataset(root: Path, entry: dict[str, Any], rows: Any, file_name: str = "d.json") -> Path:
    directory = root / "data"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "dataset_info.json").write_text(json.dumps({"mine": {"file_name": file_name, **entry}}), encoding="utf-8")
    path = directory / file_name
    if isinstance(rows, str):
        path.write_text(rows, encoding="utf-8")
    elif file_name.endswith(".jsonl"):
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    else:
        path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return directory


def dataset_findings(tmp_path: Path, directory: Path) -> list[Finding]:
    model = tmp_path / "model"
    if not model.exists():
        model.mkdir()
        (model / "config.json").write_text(json.dumps(TINY_LLAMA))
        (model / "model.safetensors").write_bytes(b"\0" * 16)
        (model / "tokenizer_config.json").write_text("{}")
    preset = PRESETS["rx7900xtx"]
    values = {**FORM_DEFAULTS, "preset": "rx7900xtx", "model_path": str(model), "dataset_dir": str(directory),
              "dataset": "mine", "template": "llama3", "run_name": "r1"}
    config, findings = parse_form(values, preset.env, preset.use_cpu)
    assert config is not None, findings
    return [f for f in check_config(config, preset, offline=True, bnb_available=lambda: True) if f.key == "dataset"]


def test_answer_instead_of_output_is_a_problem_naming_both_in_english_and_chinese(tmp_path: Path) -> None:
    rows = [{"instruction": r["instruction"], "input": "", "answer": r["output"]} for r in ALPACA_ROWS]
    found = dataset_findings(tmp_path, write_dataset(tmp_path, {}, rows))
    assert [f.rule for f in found] == ["dataset-columns-missing"]
    finding = found[0]
    assert finding.severity == "problem"
    for locale in ("en", "zh-CN"):
        problem, fix = finding.text(locale)
        assert "'output'" in problem and "'answer'" in problem and "'mine'" in problem
        # the mapping lists every column: a `columns` entry drops the ones it leaves out
        assert '"columns": {"prompt": "instruction", "query": "input", "response": "answer"}' in fix
        assert "dataset_info.json" in fix
    assert "KeyError" in finding.problem and "列" in finding.text("zh-CN")[0]


def test_the_suggested_mapping_makes_the_finding_go_away(tmp_path: Path) -> None:
    rows = [{"instruction": r["instruction"], "input": "", "answer": r["output"]} for r in ALPACA_ROWS]
    columns = {"prompt": "instruction", "query": "input", "response": "answer"}
    assert dataset_findings(tmp_path, write_dataset(tmp_path, {"columns": columns}, rows)) == []


def test_remapped_columns_without_input_pass(tmp_path: Path) -> None:
    rows = [{"question": "q", "answer": "a", "extra": 1}] * 3
    entry = {"formatting": "alpaca", "columns": {"prompt": "question", "response": "answer"}}
    assert dataset_findings(tmp_path, write_dataset(tmp_path, entry, rows)) == []


def test_a_remapped_column_the_rows_lack_is_named(tmp_path: Path) -> None:
    rows = [{"question": "q", "reply": "a", "notes": "n"}] * 3
    entry = {"columns": {"prompt": "question", "response": "answer"}}
    found = dataset_findings(tmp_path, write_dataset(tmp_path, entry, rows))
    assert [f.message for f in found] == ["dataset-columns-missing-no-guess"]
    assert "'answer'" in found[0].problem and "'reply'" in found[0].problem


def test_sharegpt_rows_declared_without_formatting_suggest_sharegpt(tmp_path: Path) -> None:
    found = dataset_findings(tmp_path, write_dataset(tmp_path, {}, SHAREGPT_ROWS))
    assert [f.message for f in found] == ["dataset-looks-sharegpt"]
    for locale in ("en", "zh-CN"):
        problem, fix = found[0].text(locale)
        assert '"formatting": "sharegpt"' in fix and "'conversations'" in problem
    assert dataset_findings(tmp_path / "ok", write_dataset(tmp_path / "ok", {"formatting": "sharegpt"}, SHAREGPT_ROWS)) == []


def test_openai_style_messages_get_the_columns_and_tags_to_add(tmp_path: Path) -> None:
    rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}] * 3
    found = dataset_findings(tmp_path, write_dataset(tmp_path, {}, rows, "d.jsonl"))
    assert [f.message for f in found] == ["dataset-looks-sharegpt"]
    assert '"columns": {"messages": "messages"}' in found[0].fix and '"role_tag": "role"' in found[0].fix


def test_sharegpt_turns_with_other_keys_name_the_tags(tmp_path: Path) -> None:
    rows = [{"conversations": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}] * 3
    found = dataset_findings(tmp_path, write_dataset(tmp_path, {"formatting": "sharegpt"}, rows))
    assert [f.message for f in found] == ["dataset-message-keys-missing"]
    assert "'from'" in found[0].problem and "'role'" in found[0].problem and '"tags"' in found[0].fix


def test_an_extra_column_or_one_missing_from_some_rows_only_is_fine(tmp_path: Path) -> None:
    rows = [{**row, "source": "web"} for row in ALPACA_ROWS]
    rows[0] = {"instruction": "x", "output": "y"}  # datasets fills a column a row lacks with None
    assert dataset_findings(tmp_path, write_dataset(tmp_path, {}, rows)) == []


def big_jsonl(directory: Path, first: dict[str, Any], late: str) -> Path:
    """A 50 MB JSONL: `first` rows, then one `late` line far past the read bound."""
    directory.mkdir(parents=True)
    (directory / "dataset_info.json").write_text(json.dumps({"mine": {"file_name": "big.jsonl"}}))
    line = json.dumps(first) + "\n"
    with open(directory / "big.jsonl", "w", encoding="utf-8") as handle:
        handle.write(line * (50 * 1024 * 1024 // len(line) + 1))
        handle.write(late + "\n")
    assert (directory / "big.jsonl").stat().st_size > 50 * 1024 * 1024
    return directory


def test_only_the_start_of_a_big_jsonl_is_read(tmp_path: Path) -> None:
    """50 MB whose only bad line is far past the bound: the check passes, and quickly."""
    good = {"instruction": "x" * 400, "input": "", "output": "y" * 500}
    directory = big_jsonl(tmp_path / "a", good, '{"conversations": [{"from": "human"}], broken')
    started = time.monotonic()
    assert dataset_findings(tmp_path, directory) == []
    assert time.monotonic() - started < 5
    # the other way round: rows with `answer` first, the only `output` row at the end; had the
    # whole file been read, the column would exist (datasets fills the others with None)
    bad = {"instruction": "x" * 400, "input": "", "answer": "y" * 500}
    directory = big_jsonl(tmp_path / "b", bad, json.dumps({"instruction": "x", "input": "", "output": "late"}))
    assert [f.rule for f in dataset_findings(tmp_path, directory)] == ["dataset-columns-missing"]


def test_a_big_json_list_cut_by_the_bound_is_checked_on_its_whole_first_items(tmp_path: Path) -> None:
    rows = [{"instruction": "i" * 3000, "input": "", "answer": "a"} for _ in range(40)]
    directory = write_dataset(tmp_path, {}, rows)
    assert (directory / "d.json").stat().st_size > COLUMNS_READ_MAX_BYTES
    found = dataset_findings(tmp_path, directory)
    assert [f.rule for f in found] == ["dataset-columns-missing"] and "'answer'" in found[0].problem


def test_csv_header_is_checked_and_parquet_is_skipped(tmp_path: Path) -> None:
    found = dataset_findings(tmp_path, write_dataset(tmp_path, {}, "instruction,input,answer\nq,,a\n", "d.csv"))
    assert [f.rule for f in found] == ["dataset-columns-missing"]
    assert dataset_findings(tmp_path / "p", write_dataset(tmp_path / "p", {}, "PAR1 not really", "d.parquet")) == []


@pytest.mark.hostile
def test_a_hostile_first_row_does_not_break_the_check(tmp_path: Path) -> None:
    # deep nesting: refused as unreadable JSON, no crash (RecursionError), no column finding
    text = "[" + "[" * 50000 + "]" * 50000 + ', {"instruction": "a", "input": "", "output": "b"}]'
    found = dataset_findings(tmp_path, write_dataset(tmp_path, {}, text))
    assert [f.rule for f in found] == ["dataset-file-unreadable"] and "nested too deeply" in found[0].problem
    # the same in a JSONL line
    rows = "[" * 50000 + "]" * 50000 + "\n" + '[1, 2]\n{"instruction": "a", "input": "", "output": "b"}\n'
    found = dataset_findings(tmp_path / "l", write_dataset(tmp_path / "l", {}, rows, "d.jsonl"))
    assert [f.rule for f in found] == ["dataset-file-unreadable"]


@starts("lf_helper")
def test_the_demo_dataset_passes_the_preview_with_no_new_finding(tmp_path: Path) -> None:
    from backend.service import RocBoard, demo_form

    preview = RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports").preview(demo_form())
    assert [f for f in preview.findings if f.rule == "dataset-columns-missing"] == []
    assert not [f for f in preview.findings if f.key == "dataset"]


# --- diagnosis of a failed run -------------------------------------------------------------


def test_the_real_converter_keyerror_is_named() -> None:
    log = (LOGS / "real_dataset_column_missing.log").read_text(encoding="utf-8")
    assert 'llamafactory/data/converter.py", line 117, in __call__' in log
    summary = summarize_failure(log, 1)
    assert summary.diagnosis is not None and summary.diagnosis.rule == "dataset_column_missing"
    assert summary.diagnosis.evidence == "KeyError: 'output'"
    assert summary.diagnosis.cause == translate("diagnose.dataset_column_missing.cause", "en")
    assert "sharegpt" in summary.diagnosis.text("zh-CN")[1]


def test_an_unrelated_keyerror_is_not_a_dataset_column() -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "/x/.venv/lib/python3.11/site-packages/transformers/configuration_utils.py", line 210, in __getattribute__\n'
        "    return super().__getattribute__(key)\n"
        "KeyError: 'rope_scaling'\n"
    )
    assert [d.rule for d in diagnose(log)] == []
    # and the converter's own line with no KeyError is nothing either
    assert diagnose('  File "/x/llamafactory/data/converter.py", line 420, in align_dataset\n') == []
