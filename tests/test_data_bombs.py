"""Hostile dataset files through the Data tab's own path (the data desk: an upload and a path
on this machine), issue 26 items 5-7.

- Decoding bombs in every format: a small file that decodes to gigabytes (Parquet's dictionary
  and compression, ten million rows in 56 KB), one huge field or line, a line whose JSON holds
  millions of tiny values. Each runs in a fresh process that measures the web process's peak
  memory and the reading child's: the web process stays within WEB_BUDGET_MIB whatever the
  file, the reader within its cap (docs/datasets.md "Limits").
- JSON nested a thousand levels deep is a finding with its line, never Python's recursion
  error (a data file, an upload, and RocBoard's own dataset_info.json).
- A header one letter off a role name is read as that role and said so; a role column empty
  in every row is refused.

The bombs are built inside each test (sparse files where the bulk is zeros: no disk, no
memory), never kept in the repository.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from backend.data.layout import ColumnMapping
from backend.findings import translate_finding
from backend.service.data_desk import DataDesk, MappingForm

ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20
UPLOAD_LIMIT = 512 * MIB
WEB_BUDGET_MIB = 64  # the web process's peak may grow by this much reading any file
READER_BUDGET_MIB = 256 + 64  # the reading child: its address-space cap, plus what it inherited

pytestmark = pytest.mark.hostile

# A fresh "web process": the desk the page uses, its readers warmed on small files first (so
# their imports are in the baseline), then one read of the bomb. The code before issue 26 read
# in this process: an address-space cap of +3 GiB keeps such a run from taking the machine.
MEASURE = r"""
import json, resource, sys, time
from pathlib import Path
from backend.service.data_desk import DataDesk

kind, source, runs, root, *warm = sys.argv[1:]
desk = DataDesk(Path(runs), [Path(root)], 512 * 2**20)
for name in warm:
    desk.read_path(name)
page = resource.getpagesize()
vm, rss = [int(v) * page for v in open("/proc/self/statm").read().split()[:2]]
resource.setrlimit(resource.RLIMIT_AS, (vm + 3 * 2**30, resource.getrlimit(resource.RLIMIT_AS)[1]))
print(rss, flush=True)  # the baseline: the sampler counts from here
started = time.perf_counter()
try:
    shown = desk.read_upload(source) if kind == "upload" else desk.read_path(source)
    answer = {"findings": shown.findings, "usable": shown.usable, "rows": shown.summary.split("\n")[0]}
except BaseException as error:
    answer = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
answer["seconds"] = round(time.perf_counter() - started, 2)
print(json.dumps(answer))
"""


def _warm_files(folder: Path) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(exist_ok=True)
    (folder / "w.jsonl").write_text('{"instruction": "q", "output": "a"}\n', encoding="utf-8")
    (folder / "w.json").write_text('[{"instruction": "q", "output": "a"}]', encoding="utf-8")
    (folder / "w.csv").write_text("instruction,output\nq,a\n", encoding="utf-8")
    pq.write_table(pa.table({"instruction": ["q"], "output": ["a"]}), folder / "w.parquet")
    return [str(folder / name) for name in ("w.jsonl", "w.json", "w.csv", "w.parquet")]


def measure(tmp_path: Path, kind: str, source: Path) -> dict:
    """The MEASURE process's answer, with the peak resident memory above its baseline of the
    process itself (the web process) and of any process it started (the reader), sampled from
    outside every 10 ms: the kernel's own high-water mark misses peaks that are given back."""
    import psutil

    runs = tmp_path / "runs"
    runs.mkdir(exist_ok=True)
    warm = _warm_files(tmp_path / "warm")
    command = [sys.executable, "-c", MEASURE, kind, str(source), str(runs), str(tmp_path), *warm]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    web, reader = psutil.Process(process.pid), 0
    web_peak = 0
    deadline = time.monotonic() + 240
    try:
        while process.poll() is None and time.monotonic() < deadline:
            try:
                web_peak = max(web_peak, web.memory_info().rss)
                for child in web.children(recursive=True):
                    reader = max(reader, child.memory_info().rss)
            except psutil.Error:
                pass
            time.sleep(0.01)
    finally:
        if process.poll() is None:
            process.kill()
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err[-3000:]
    lines = out.strip().splitlines()
    base = int(lines[0])
    answer = json.loads(lines[-1])
    answer["web_growth_mib"] = round(max(0, web_peak - base) / MIB, 1)
    answer["reader_growth_mib"] = round(max(0, reader - base) / MIB, 1)
    print(f"{source.name} ({kind}): {answer}")
    return answer


# --- the bombs ----------------------------------------------------------------------------------


def _sparse(path: Path, head: bytes, hole: int, tail: bytes) -> Path:
    """`head`, `hole` zero bytes the file system stores as nothing, then `tail`."""
    with path.open("wb") as handle:
        handle.write(head)
        handle.seek(len(head) + hole)
        handle.write(tail)
    return path


def parquet_dictionary(path: Path) -> Path:
    """895 bytes: 300 rows whose answer is one 4 MiB string, dictionary-encoded (1.2 GB decoded)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    answer = pa.DictionaryArray.from_arrays(pa.array([0] * 300, pa.int32()), pa.array(["x" * (4 * MIB)]))
    pq.write_table(pa.table({"instruction": ["q"] * 300, "output": answer}), path, compression="zstd", dictionary_pagesize_limit=16 * MIB)
    assert path.stat().st_size < 2000
    return path


def parquet_ten_million_rows(path: Path) -> Path:
    """~56 KB: ten million rows of the same two words."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    indices = pa.array(np.zeros(10_000_000, dtype=np.int32))
    table = pa.table({"instruction": pa.DictionaryArray.from_arrays(indices, pa.array(["q"])), "output": pa.DictionaryArray.from_arrays(indices, pa.array(["a"]))})
    pq.write_table(table, path, compression="zstd")
    assert path.stat().st_size < 200_000
    return path


def parquet_plain_huge_rows(path: Path) -> Path:
    """Three rows of 64 MiB each, plain-encoded and compressed to a few KB."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"instruction": ["q"] * 3, "output": ["y" * (64 * MIB)] * 3}), path, compression="zstd", use_dictionary=False)
    assert path.stat().st_size < 100_000
    return path


def csv_one_huge_field(path: Path) -> Path:
    """A CSV whose second row's instruction is a 400 MiB field (no newline in it)."""
    return _sparse(path, b'instruction,output\nq,a\n"', 400 * MIB, b'",b\n')


def csv_many_large_rows(path: Path) -> Path:
    """60 rows of 8 MiB each (480 MiB): one 2,000-row chunk of pandas would hold them all."""
    with path.open("wb") as handle:
        handle.write(b"instruction,output\n")
        for _ in range(60):
            handle.write(b'"')
            handle.seek(8 * MIB, os.SEEK_CUR)
            handle.write(b'",a\n')
    return path


def jsonl_one_huge_line(path: Path) -> Path:
    """A JSON line of 1 GiB (a path on this machine: over the upload limit)."""
    return _sparse(path, b'{"instruction": "q", "output": "a"}\n{"instruction": "', 2**30, b'", "output": "a"}\n')


def _tiny_values(count: int) -> bytes:
    return b"[" + b"[]," * (count - 1) + b"[]]"


def jsonl_many_tiny_values(path: Path) -> Path:
    """One 15 MB line holding five million empty lists: some 400 MB once decoded."""
    path.write_bytes(b'{"instruction": "q", "output": "a", "meta": ' + _tiny_values(5_000_000) + b"}\n")
    return path


def json_many_tiny_values(path: Path) -> Path:
    """The same inside a .json list, as its second element."""
    path.write_bytes(b'[{"instruction": "q", "output": "a"},\n{"instruction": "q", "output": "a", "meta": ' + _tiny_values(5_000_000) + b"}]")
    return path


@dataclass(frozen=True)
class Bomb:
    id: str
    file_name: str
    build: Callable[[Path], Path]
    kind: str  # "upload" or "path"
    refused: str  # what the English findings must say ("" when the file may be read)
    seconds: float = 120.0  # the read answers within this (on a loaded 2-core machine; the fast ones are refused unread)


BOMBS = [
    Bomb("parquet-dictionary-upload", "dict.parquet", parquet_dictionary, "upload", "decodes to", seconds=5),
    Bomb("parquet-dictionary-path", "dict.parquet", parquet_dictionary, "path", ""),
    Bomb("parquet-ten-million-rows", "rows.parquet", parquet_ten_million_rows, "path", "10,000,000 rows", seconds=5),
    Bomb("parquet-plain-huge-rows", "plain.parquet", parquet_plain_huge_rows, "upload", "rows 1-3", seconds=5),
    Bomb("csv-one-huge-field", "field.csv", csv_one_huge_field, "upload", "Line 3", seconds=5),
    Bomb("csv-many-large-rows", "rows.csv", csv_many_large_rows, "upload", ""),
    Bomb("jsonl-one-huge-line", "line.jsonl", jsonl_one_huge_line, "path", "Line 2", seconds=5),
    Bomb("jsonl-many-tiny-values", "values.jsonl", jsonl_many_tiny_values, "upload", "line 1"),
    Bomb("json-many-tiny-values", "values.json", json_many_tiny_values, "path", "row 2"),
]


@pytest.mark.parametrize("bomb", BOMBS, ids=[bomb.id for bomb in BOMBS])
def test_a_decoding_bomb_stays_within_the_memory_budget(bomb: Bomb, tmp_path: Path, starts_memory_probe) -> None:
    source = bomb.build(tmp_path / bomb.file_name)
    answer = measure(tmp_path, bomb.kind, source)
    assert "error" not in answer, answer
    assert answer["web_growth_mib"] < WEB_BUDGET_MIB, answer
    assert answer["reader_growth_mib"] < READER_BUDGET_MIB, answer
    assert answer["seconds"] < bomb.seconds, answer
    text = answer["findings"].replace("\\", "")
    assert "MemoryError" not in text and "Traceback" not in text
    if bomb.refused:
        assert not answer["usable"], answer
        assert bomb.refused in text and bomb.file_name in text, text
    assert not list((tmp_path / "runs").rglob("*.parquet")) and not list((tmp_path / "runs").rglob("*.csv"))


def test_a_refused_bomb_is_not_added(tmp_path: Path) -> None:
    desk = DataDesk(tmp_path / "runs", [tmp_path], UPLOAD_LIMIT)
    added = desk.add("upload", str(parquet_dictionary(tmp_path / "dict.parquet")), "bomb")
    assert added.name is None and "decodes to" in added.message.replace("\\", "")
    assert desk.names() == []
    files = tmp_path / "runs" / "datasets" / "files"
    assert not files.exists() or not list(files.iterdir())


# --- nested a thousand levels deep --------------------------------------------------------------


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


DEEP = [
    ("deep.jsonl", ('{"instruction": "q", "output": "a"}\n{"instruction": "q", "output": "a", "x": ' + _deep(1000) + "}\n"), "line 2"),
    ("objects.jsonl", '{"instruction": "q", "output": "a"}\n' + '{"a": ' * 1000 + "1" + "}" * 1000 + "\n", "line 2"),
    ("deep.json", '[{"instruction": "q", "output": "a"},\n{"instruction": "q", "output": ' + _deep(1000) + "}]", "line 2"),
    ("deeper.json", "[" * 100_000 + "]" * 100_000, "line 1"),
    ("shallow-but-deep.jsonl", '{"instruction": "q", "output": "a", "x": ' + _deep(150) + "}\n", "line 1"),
]


@pytest.mark.parametrize("file_name,text,where", DEEP, ids=[d[0] for d in DEEP])
@pytest.mark.parametrize("kind", ["upload", "path"])
def test_deep_nesting_is_a_finding_with_its_line(kind: str, file_name: str, text: str, where: str, tmp_path: Path) -> None:
    desk = DataDesk(tmp_path / "runs", [tmp_path], UPLOAD_LIMIT)
    path = tmp_path / file_name
    path.write_text(text, encoding="utf-8")
    shown = desk.read_upload(str(path)) if kind == "upload" else desk.read_path(str(path))
    assert not shown.usable
    findings = shown.findings.replace("\\", "")
    assert "recursion" not in findings.lower()
    assert file_name in findings and where in findings.lower(), findings
    assert "100 levels" in findings, findings
    added = desk.add(kind, str(path), "deep")
    assert added.name is None and "recursion" not in added.message.lower()
    assert desk.names() == []
    zh = DataDesk(tmp_path / "runs", [tmp_path], UPLOAD_LIMIT).read_path(str(path), locale="zh-CN").findings
    assert "100" in zh and "levels" not in zh


def test_a_deeply_nested_dataset_info_is_a_broken_registry_not_a_crash(tmp_path: Path) -> None:
    desk = DataDesk(tmp_path / "runs", [tmp_path], UPLOAD_LIMIT)
    folder = tmp_path / "runs" / "datasets"
    folder.mkdir(parents=True)
    info = folder / "dataset_info.json"
    info.write_text('{"a": ' + _deep(5000) + "}", encoding="utf-8")
    assert desk.names() == []
    good = tmp_path / "good.jsonl"
    good.write_text('{"instruction": "q", "output": "a"}\n', encoding="utf-8")
    added = desk.add("path", str(good), "good")
    assert added.name is None
    message = added.message.replace("\\", "")
    assert "dataset_info.json" in message and "recursion" not in message.lower()
    assert info.read_text(encoding="utf-8").startswith('{"a": [[[')  # never written over


def test_lengths_of_a_deeply_nested_dataset_info_is_a_finding(tmp_path: Path) -> None:
    from backend.data.lengths import measure_lengths

    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "dataset_info.json").write_text('{"mine": ' + _deep(5000) + "}", encoding="utf-8")
    model = tmp_path / "model"
    model.mkdir()
    report, findings = measure_lengths(str(model), "llama3", str(folder), "mine", 1024)
    assert report is None and findings
    assert all("recursion" not in f.problem.lower() for f in findings)


# --- a header one letter off ----------------------------------------------------------------------


def _csv(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", ["upload", "path"])
def test_a_misspelled_instruction_header_is_read_as_the_instruction(kind: str, tmp_path: Path) -> None:
    desk = DataDesk(tmp_path / "runs", [tmp_path], UPLOAD_LIMIT)
    path = _csv(tmp_path / "typo.csv", "instrution,input,output\nSay hi,,hi\nAdd 1 and 1,,2\nName a colour,,blue\n")
    shown = desk.read_upload(str(path)) if kind == "upload" else desk.read_path(str(path))
    assert shown.usable, shown.findings
    assert dict(shown.mapping.columns)["prompt"] == "instrution"
    assert dict(shown.mapping.columns).get("query") != "input"  # empty in every row: not the prompt, not read
    findings = shown.findings.replace("\\", "")
    assert "'instrution'" in findings and "instruction" in findings and "prompt" in findings, findings
    added = desk.add(kind, str(path), "typo")
    assert added.name == "typo", added.message
    entry = json.loads((tmp_path / "runs" / "datasets" / "dataset_info.json").read_text(encoding="utf-8"))["typo"]
    assert entry["columns"] == {"prompt": "instrution", "response": "output"}


def test_the_near_name_notice_reads_in_chinese(tmp_path: Path) -> None:
    from backend.data.dataset_file import inspect_dataset

    path = _csv(tmp_path / "typo.csv", "instrution,input,output\nSay hi,,hi\n")
    notice = next(f for f in inspect_dataset(path, "typo.csv").findings if "instrution" in f.problem)
    assert notice.severity == "warning"
    chinese = translate_finding(notice, "zh-CN")
    assert "instrution" in chinese.problem and "prompt" in chinese.problem
    assert not any(word in chinese.problem + chinese.fix for word in ("column", "read as", "Rename"))


@pytest.mark.parametrize("kind", ["upload", "path"])
def test_a_prompt_column_empty_in_every_row_is_refused(kind: str, tmp_path: Path) -> None:
    desk = DataDesk(tmp_path / "runs", [tmp_path], UPLOAD_LIMIT)
    path = _csv(tmp_path / "noq.csv", "instruction,output\n,hi\n ,2\n,blue\n")
    shown = desk.read_upload(str(path)) if kind == "upload" else desk.read_path(str(path))
    assert not shown.usable
    assert "'instruction'" in shown.findings.replace("\\", "") and "every row" in shown.findings
    added = desk.add(kind, str(path), "noq")
    assert added.name is None and "every row" in added.message
    assert desk.names() == []
    assert not (tmp_path / "runs" / "datasets" / "files").exists() or not list((tmp_path / "runs" / "datasets" / "files").iterdir())


def test_a_chosen_role_column_empty_in_every_row_is_refused(tmp_path: Path) -> None:
    desk = DataDesk(tmp_path / "runs", [tmp_path], UPLOAD_LIMIT)
    path = _csv(tmp_path / "q.csv", "instruction,input,output\nSay hi,,hi\nAdd,,2\n")
    choices = MappingForm("alpaca", {"prompt": "instruction", "query": "input", "response": "output"})
    shown = desk.read_path(str(path), choices)
    assert not shown.usable and "'input'" in shown.findings.replace("\\", "") and "query" in shown.findings
    assert desk.add("path", str(path), "q", choices).name is None and desk.names() == []
    guessed = desk.read_path(str(path))  # RocBoard's own guess leaves the empty column out
    assert guessed.usable and "query" not in dict(guessed.mapping.columns)
    assert guessed.mapping == ColumnMapping("alpaca", (("prompt", "instruction"), ("response", "output")))


# --- what no check sees before decoding: the reading process's own cap ---------------------------


def _rss() -> int:
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_csv_field_cut_into_lines_inside_its_quotes_meets_the_memory_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every line is short, so the line check passes; the field is 96 MB: over a 32 MiB cap,
    the read stops with a finding naming the row, and this process does not grow."""
    from backend.data import reading

    monkeypatch.setattr(reading, "READ_MEMORY_MIB", 32)
    path = tmp_path / "quoted.csv"
    with path.open("wb") as handle:
        handle.write(b'instruction,output\n"')
        handle.write(b"ab\n" * (32 * MIB))
        handle.write(b'",x\n')

    before = _rss()
    shown = DataDesk(tmp_path / "runs", [tmp_path], UPLOAD_LIMIT).read_upload(str(path))
    assert _rss() - before < WEB_BUDGET_MIB * MIB
    assert not shown.usable and "quoted.csv" in shown.findings.replace("\\", "")
    assert "32 MB of memory" in shown.findings and "row 1" in shown.findings


def test_a_parquet_encoding_that_expands_on_its_own_meets_the_memory_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DELTA_BYTE_ARRAY stores each value as the previous one's prefix plus a suffix: 20
    copies of 4 MiB take 800 bytes, and the metadata says 4 MiB uncompressed. Under a 32 MiB
    cap, the first batch (80 MiB decoded) ends the read with a finding."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from backend.data import reading

    monkeypatch.setattr(reading, "READ_MEMORY_MIB", 32)
    path = tmp_path / "delta.parquet"
    table = pa.table({"instruction": ["q"] * 20, "output": ["y" * (4 * MIB)] * 20})
    pq.write_table(table, path, use_dictionary=False, column_encoding={"output": "DELTA_BYTE_ARRAY"}, compression="zstd")
    del table
    assert path.stat().st_size < 4000 and pq.ParquetFile(path).metadata.row_group(0).column(1).total_uncompressed_size < 8 * MIB
    before = _rss()
    shown = DataDesk(tmp_path / "runs", [tmp_path], UPLOAD_LIMIT).read_upload(str(path))
    assert _rss() - before < WEB_BUDGET_MIB * MIB
    assert not shown.usable and "32 MB of memory" in shown.findings and "delta.parquet" in shown.findings.replace("\\", "")


def test_a_reader_that_dies_or_hangs_is_a_finding_and_leaves_no_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    import psutil

    from backend.data import reading

    path = tmp_path / "ok.jsonl"
    path.write_text('{"instruction": "q", "output": "a"}\n', encoding="utf-8")
    desk = DataDesk(tmp_path / "runs", [tmp_path], UPLOAD_LIMIT)
    # In a whole session this process has children of its own already (the browser of the
    # browser tests, a Slurm cluster): only the reader's forks must be gone.
    before = {child.pid for child in psutil.Process().children()}
    monkeypatch.setattr(reading, "inspect_dataset", lambda *a, **k: os.kill(os.getpid(), signal.SIGSEGV))
    died = desk.read_path(str(path))
    assert not died.usable and "SIGSEGV" in died.findings and "ok.jsonl" in died.findings.replace("\\", "")
    monkeypatch.setattr(reading, "READ_TIMEOUT_S", 0.5)
    monkeypatch.setattr(reading, "inspect_dataset", lambda *a, **k: time.sleep(30))
    started = time.monotonic()
    hung = desk.add("path", str(path), "hung")
    assert time.monotonic() - started < 5
    assert hung.name is None and "longer than 0.5 s" in hung.message.replace("\\", "")
    assert desk.names() == []
    assert [child for child in psutil.Process().children() if child.pid not in before] == []
