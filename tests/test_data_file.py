"""backend/data/dataset_file.py on real files: every bad case a file written to tmp_path, each
finding naming the file and the line or row, in English and in Chinese; the good layouts
guessed and mapped as LLaMA-Factory reads them."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import backend.data.readers as inspect_module  # the reading limits the cases patch
from backend.data.dataset_file import inspect_dataset
from backend.data.layout import LAYOUTS, ColumnMapping, dataset_info_entry, roles_of
from backend.findings import translate_finding

CHINESE = re.compile(r"[\u4e00-\u9fff]")
UNFILLED = re.compile(r"\{[A-Za-z_]+\}")


def _jsonl(*rows: Any) -> bytes:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode("utf-8")


def _parquet(rows: list[dict]) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)

    return write


SHAREGPT_USER_ASSISTANT = ColumnMapping(
    "sharegpt",
    (("messages", "conversations"),),
    (("role_tag", "from"), ("content_tag", "value"), ("user_tag", "user"), ("assistant_tag", "assistant"), ("system_tag", "system")),
)


@dataclass(frozen=True)
class Bad:
    id: str
    file_name: str
    content: bytes | Callable[[Path], None]
    message: str  # the finding's message id (rule or its variant)
    where: str | None  # what the English problem must say of the line / row (None: the whole file)
    mapping: ColumnMapping | None = None
    patch: dict[str, Any] = field(default_factory=dict)  # module constants of inspect.py
    max_bytes: int | None = None
    also: str = ""  # more English the problem or fix must hold
    names_file: bool = True  # False: a finding about the mapping itself, whatever the file


ALPACA_ROW = {"instruction": "Say hi", "input": "", "output": "hi"}

BAD_CASES = [
    Bad("empty-file", "empty.jsonl", b"", "data-empty", None),
    Bad("blank-lines-only", "blank.jsonl", b"\n  \n\n", "data-empty", None),
    Bad("header-only-csv", "header.csv", b"instruction,output\n", "data-empty", None),
    Bad("empty-json-list", "empty.json", b"[]", "data-empty", None),
    Bad(
        "invalid-json-line",
        "broken.jsonl",
        _jsonl(ALPACA_ROW, ALPACA_ROW) + b'{"instruction": "x", "output": \n',
        "data-json-invalid",
        "Line 3",
        also="Expecting value",
    ),
    Bad("invalid-json-document", "broken.json", b'[\n{"instruction": "a", "output": "b"},\n{"instruction": \n', "data-json-invalid", "Line 4"),
    Bad("json-one-object", "object.json", json.dumps({"data": [ALPACA_ROW]}).encode(), "data-json-not-list", None, also="'data'"),
    Bad("json-list-of-strings", "strings.json", json.dumps(["a", "b"]).encode(), "data-row-not-object", "row 1", also="text"),
    Bad("jsonl-row-not-object", "numbers.jsonl", _jsonl(ALPACA_ROW, 42), "data-row-not-object", "line 2", also="a number"),
    Bad(
        # Too far off to be read as those roles (a header one letter off is: test_data_bombs.py).
        "csv-misspelled-columns",
        "typo.csv",
        b"quest,respo\na,b\n",
        "data-layout-unknown-near",
        None,
        also="'quest' → 'question'",
    ),
    Bad("layout-not-detected", "odd.csv", b"alpha,beta\n1,2\n", "data-layout-unknown", None, also="'alpha', 'beta'"),
    Bad(
        "mixed-layouts",
        "mixed.jsonl",
        _jsonl(ALPACA_ROW, ALPACA_ROW, {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}),
        "data-mixed-layout",
        "line 3",
        also="sharegpt",
    ),
    Bad(
        "roles-not-the-tags",
        "roles.jsonl",
        _jsonl({"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}),
        "data-roles-unknown",
        "line 1",
        mapping=SHAREGPT_USER_ASSISTANT,
        also='"user_tag": "human"',
    ),
    Bad("not-utf8-jsonl", "latin.jsonl", _jsonl(ALPACA_ROW) + '{"instruction": "caf\xe9", "output": "x"}\n'.encode("latin-1"), "data-not-utf8", "line 2", also="0xe9"),
    Bad("not-utf8-csv", "gbk.csv", "instruction,output\na,b\n你好,c\n".encode("gbk"), "data-not-utf8", "line 3", also="byte offset 23"),
    Bad("utf8-bom-csv", "excel.csv", b"\xef\xbb\xbfinstruction,output\na,b\n", "data-bom", "line 1", also="BOM"),
    Bad("not-utf8-json", "latin.json", '[{"instruction": "caf\xe9", "output": "x"}]'.encode("latin-1"), "data-not-utf8", "line 1"),
    Bad(
        "empty-responses",
        "noanswer.json",
        json.dumps([ALPACA_ROW, {**ALPACA_ROW, "output": ""}, ALPACA_ROW, {**ALPACA_ROW, "output": "  "}]).encode(),
        "data-response-empty",
        "rows 2, 4",
        also="2 rows",
    ),
    Bad(
        "turns-not-alternating",
        "twice.jsonl",
        _jsonl({"conversations": [{"from": "human", "value": "q"}, {"from": "human", "value": "q2"}, {"from": "gpt", "value": "a"}]}),
        "data-turns-not-alternating",
        "line 1",
        also="turn 2",
    ),
    Bad(
        "ends-without-assistant",
        "unanswered.jsonl",
        _jsonl(
            {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]},
            {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}, {"from": "human", "value": "q2"}]},
        ),
        "data-ends-without-assistant",
        "line 2",
    ),
    Bad(
        "openai-ends-without-assistant",
        "chat.jsonl",
        _jsonl({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]}),
        "data-ends-without-assistant",
        "line 1",
        also="user",
    ),
    Bad("multimodal-column", "vision.json", json.dumps([{**ALPACA_ROW, "images": ["a.png"]}]).encode(), "data-multimodal", None, also="'images'"),
    Bad("unknown-extension", "data.txt", b"hello\n", "data-extension", None, also=".parquet"),
    Bad("parquet-not-parquet", "fake.parquet", b"instruction,output\na,b\n", "data-parquet-bad", None),
    Bad("csv-malformed-row", "ragged.csv", b"instruction,output\na,b\nc,d,e\n", "data-csv-malformed", "line 3", also="Expected 2 fields"),
    Bad("over-size-cap", "big.jsonl", _jsonl(ALPACA_ROW, ALPACA_ROW), "data-too-big", None, max_bytes=20),
    Bad(
        "mapping-names-missing-column",
        "remap.csv",
        b"instruction,output\na,b\n",
        "data-mapping-column-missing",
        None,
        mapping=ColumnMapping("alpaca", (("prompt", "instructions"), ("response", "output"))),
        also="Did you mean 'instruction'",
    ),
    Bad(
        "mapping-misses-a-role",
        "norole.csv",
        b"instruction,output\na,b\n",
        "data-mapping-role-missing",
        None,
        mapping=ColumnMapping("alpaca", (("prompt", "instruction"),)),
        also="response",
        names_file=False,
    ),
    Bad(
        "jsonl-line-too-long",
        "long.jsonl",
        _jsonl(ALPACA_ROW, {**ALPACA_ROW, "output": "x" * 200}),
        "data-line-too-long",
        "Line 2",
        patch={"LINE_MAX_BYTES": 100},
    ),
    Bad("json-over-its-cap", "whole.json", json.dumps([ALPACA_ROW] * 5).encode(), "data-json-too-big", None, patch={"JSON_MAX_BYTES": 50}, also="jq"),
    Bad("messages-as-text-in-csv", "chat.csv", b'conversations\n"[{""from"": ""human""}]"\n', "data-messages-not-list", "row 1", also="text"),
    Bad(
        "turn-without-keys",
        "keys.jsonl",
        _jsonl({"conversations": [{"from": "human", "text": "q"}, {"from": "gpt", "value": "a"}]}),
        "data-turn-bad",
        "line 1",
        also="'text'",
    ),
    Bad("answer-not-text", "number.json", json.dumps([{"instruction": "1+1", "output": 2}]).encode(), "data-value-not-text", "row 1", also="a number"),
    Bad("conversation-empty", "none.jsonl", _jsonl({"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}, {"conversations": []}), "data-conversation-empty", "lines 2"),
    Bad("text-empty", "pt.parquet", _parquet([{"text": "hello world"}, {"text": ""}, {"text": "more"}]), "data-text-empty", "rows 2"),
    Bad(
        "history-not-pairs",
        "history.json",
        json.dumps([{**ALPACA_ROW, "history": ["q", "a"]}]).encode(),
        "data-history-bad",
        "row 1",
    ),
    Bad("layout-unknown-in-mapping", "layout.csv", b"instruction,output\na,b\n", "data-mapping-layout-unknown", None, mapping=ColumnMapping("chatml", (("prompt", "instruction"),)), names_file=False),
]


def write_case(case: Bad, folder: Path) -> Path:
    path = folder / case.file_name
    if callable(case.content):
        case.content(path)
    else:
        path.write_bytes(case.content)
    return path


def assert_explained(finding: Any, case: Bad) -> None:
    """The finding names the file and where, and reads as Chinese with every value filled."""
    english = f"{finding.problem} {finding.fix}"
    assert case.file_name in english or not case.names_file, english
    if case.where:
        assert case.where in finding.problem, finding.problem
    if case.also:
        assert case.also in english, english
    chinese = translate_finding(finding, "zh-CN")
    for text in (chinese.problem, chinese.fix):
        assert CHINESE.search(text), text
        assert not UNFILLED.search(text), text
    assert case.file_name in chinese.problem + chinese.fix or not case.names_file


def test_there_are_at_least_25_distinct_bad_cases() -> None:
    assert len({case.id for case in BAD_CASES}) == len(BAD_CASES) >= 25
    assert len({case.message for case in BAD_CASES}) >= 25


@pytest.mark.parametrize("case", BAD_CASES, ids=[case.id for case in BAD_CASES])
def test_bad_data_gets_a_clear_finding(case: Bad, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in case.patch.items():
        monkeypatch.setattr(inspect_module, name, value)
    path = write_case(case, tmp_path)
    kwargs = {"max_bytes": case.max_bytes} if case.max_bytes else {}
    inspection = inspect_dataset(path, case.file_name, case.mapping, **kwargs)
    assert not inspection.usable
    matching = [f for f in inspection.findings if (f.message or f.rule) == case.message]
    assert matching, [(f.message or f.rule, f.problem) for f in inspection.findings]
    finding = matching[0]
    assert finding.severity == "problem"
    assert finding.key == "data_file"
    assert finding.rule.startswith("data-")
    assert_explained(finding, case)


def test_a_finding_names_the_shown_name_not_the_temporary_path(tmp_path: Path) -> None:
    path = tmp_path / "gradio_tmp_abc123"
    path.write_bytes(b"")
    inspection = inspect_dataset(path, "my data.jsonl")
    assert "my data.jsonl" in inspection.findings[0].problem
    assert "gradio_tmp_abc123" not in inspection.findings[0].problem


# --- good files -------------------------------------------------------------------------------


def test_alpaca_json_is_guessed_and_previewed(tmp_path: Path) -> None:
    rows = [{"instruction": f"q{i}", "input": "" if i % 3 else "ctx", "output": f"a{i}", "system": "be brief"} for i in range(30)]
    path = tmp_path / "alpaca.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    inspection = inspect_dataset(path, "alpaca.json")
    assert inspection.usable, [f.problem for f in inspection.findings]
    assert inspection.file_format == "json"
    assert inspection.rows == 30
    assert inspection.columns == ("instruction", "input", "output", "system")
    assert inspection.mapping == ColumnMapping("alpaca", (("prompt", "instruction"), ("query", "input"), ("response", "output"), ("system", "system")))
    assert inspection.guessed
    assert not [f for f in inspection.findings if f.rule == "data-layout-guessed"]  # exact names: no alias warning
    assert len(inspection.preview) == 20
    assert inspection.preview[0] == ("q0", "ctx", "a0", "be brief")
    assert dict(inspection.empty_share)["input"] == pytest.approx(20 / 30, abs=1e-3)
    entry = dataset_info_entry(inspection.mapping, "files/alpaca.json")
    assert entry == {
        "file_name": "files/alpaca.json",
        "formatting": "alpaca",
        "columns": {"prompt": "instruction", "query": "input", "response": "output", "system": "system"},
    }


def test_alpaca_csv(tmp_path: Path) -> None:
    path = tmp_path / "alpaca.csv"
    path.write_text('instruction,input,output\n"Add, please",1 2,3\nName a colour,,blue\n', encoding="utf-8")
    inspection = inspect_dataset(path, "alpaca.csv")
    assert inspection.usable, [f.problem for f in inspection.findings]
    assert inspection.rows == 2 and inspection.file_format == "csv"
    assert inspection.mapping.layout == "alpaca"
    assert inspection.preview[0] == ("Add, please", "1 2", "3")


def test_sharegpt_jsonl_with_a_system_turn(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    turn = [{"from": "system", "value": "s"}, {"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]
    path.write_bytes(_jsonl({"conversations": turn}, {"conversations": turn[1:]}))
    inspection = inspect_dataset(path, "chat.jsonl")
    assert inspection.usable, [f.problem for f in inspection.findings]
    assert inspection.mapping.layout == "sharegpt"
    entry = dataset_info_entry(inspection.mapping, "chat.jsonl")
    assert entry["formatting"] == "sharegpt"
    assert entry["columns"] == {"messages": "conversations"}
    assert entry["tags"]["user_tag"] == "human" and entry["tags"]["assistant_tag"] == "gpt"


def test_openai_jsonl_becomes_sharegpt_with_role_tags(tmp_path: Path) -> None:
    path = tmp_path / "openai.jsonl"
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    path.write_bytes(_jsonl({"messages": messages}, {"messages": messages}))
    inspection = inspect_dataset(path, "openai.jsonl")
    assert inspection.usable, [f.problem for f in inspection.findings]
    assert inspection.mapping.layout == "openai"
    entry = dataset_info_entry(inspection.mapping, "openai.jsonl")
    assert entry["formatting"] == "sharegpt"
    assert entry["tags"] == {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant", "system_tag": "system"}


def test_text_parquet(tmp_path: Path) -> None:
    path = tmp_path / "corpus.parquet"
    _parquet([{"text": f"document {i} " * 100} for i in range(2500)])(path)
    inspection = inspect_dataset(path, "corpus.parquet")
    assert inspection.usable, [f.problem for f in inspection.findings]
    assert inspection.rows == 2500 and inspection.file_format == "parquet"
    assert inspection.mapping == ColumnMapping("text", (("prompt", "text"),))
    assert all(len(cell) <= 300 for row in inspection.preview for cell in row)
    assert dataset_info_entry(inspection.mapping, "corpus.parquet") == {"file_name": "corpus.parquet", "formatting": "alpaca", "columns": {"prompt": "text"}}


def test_question_answer_csv_is_a_guess_to_confirm_and_a_remap_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "qa.csv"
    path.write_text("id,question,answer\n1,Why?,Because.\n2,How?,Like so.\n", encoding="utf-8")
    guessed = inspect_dataset(path, "qa.csv")
    assert guessed.usable and guessed.guessed
    assert dict(guessed.mapping.columns) == {"prompt": "question", "response": "answer"}
    assert "data-layout-guessed" in {f.rule for f in guessed.findings}
    assert all(f.severity == "warning" for f in guessed.findings)
    mapping = ColumnMapping("alpaca", (("prompt", "question"), ("response", "answer")))
    remapped = inspect_dataset(path, "qa.csv", mapping)
    assert remapped.usable and not remapped.guessed
    assert remapped.mapping == mapping
    assert "data-layout-guessed" not in {f.rule for f in remapped.findings}
    assert {f.rule for f in remapped.findings} == {"data-columns-unread"}  # the id column


def test_json_lines_in_a_json_file_are_read_line_by_line(tmp_path: Path) -> None:
    path = tmp_path / "lines.json"
    path.write_bytes(_jsonl(ALPACA_ROW, ALPACA_ROW, ALPACA_ROW))
    inspection = inspect_dataset(path, "lines.json")
    assert inspection.usable and inspection.rows == 3 and inspection.file_format == "jsonl"


def test_a_mostly_empty_prompt_column_is_a_warning(tmp_path: Path) -> None:
    rows = [{"instruction": "", "input": "ctx", "output": "a"}] * 3 + [ALPACA_ROW]
    path = tmp_path / "sparse.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    inspection = inspect_dataset(path, "sparse.json")
    assert inspection.usable
    warning = next(f for f in inspection.findings if f.rule == "data-column-mostly-empty")
    assert warning.severity == "warning" and "75%" in warning.problem


def test_roles_of_each_layout() -> None:
    assert set(LAYOUTS) == {"alpaca", "sharegpt", "openai", "text"}
    assert dict(roles_of("alpaca")) == {"prompt": True, "query": False, "response": True, "system": False, "history": False}
    assert dict(roles_of("sharegpt")) == {"messages": True, "system": False}
    assert dict(roles_of("text")) == {"prompt": True}
    assert roles_of("nope") == ()


def test_a_big_jsonl_is_streamed_and_only_the_preview_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "many.jsonl"
    with path.open("wb") as handle:
        for i in range(20_000):
            handle.write(_jsonl({"instruction": f"q{i}", "output": "" if i in (5000, 19_999) else "a"}))
    inspection = inspect_dataset(path, "many.jsonl")
    assert inspection.rows == 20_000 and len(inspection.preview) == 20
    empty = next(f for f in inspection.findings if f.rule == "data-response-empty")
    assert "lines 5001, 20000" in empty.problem
