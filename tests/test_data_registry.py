"""backend/data/registry.py: RocBoard's own dataset folder. An add lands whole or not at all,
server paths stay inside the allowed roots, and LLaMA-Factory reads the entries it writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import backend.data.readers as inspect_module  # the reading limits the cases patch
from backend.data.layout import ColumnMapping
from backend.data.registry import DATASETS_DIRNAME, DatasetRegistry
from tests.test_data_file import BAD_CASES, Bad, assert_explained, write_case
from tests.tiers import starts

ROOT = Path(__file__).resolve().parent.parent
MB = 2**20


def _registry(tmp_path: Path, roots: list[Path] | None = None, max_upload_bytes: int = 64 * MB) -> DatasetRegistry:
    runs = tmp_path / "runs"
    runs.mkdir(exist_ok=True)
    return DatasetRegistry(runs, roots or [], max_upload_bytes)


def _alpaca_file(path: Path, rows: int = 3) -> Path:
    path.write_text(json.dumps([{"instruction": f"q{i}", "input": "", "output": f"a{i}"} for i in range(rows)]), encoding="utf-8")
    return path


def assert_nothing_left(registry: DatasetRegistry) -> None:
    assert registry.names() == []
    files = registry.folder / "files"
    assert not files.exists() or list(files.iterdir()) == []
    info = registry.folder / "dataset_info.json"
    assert not info.exists() or json.loads(info.read_text(encoding="utf-8")) == {}


# --- refused adds leave nothing -------------------------------------------------------------


@pytest.mark.parametrize("case", BAD_CASES, ids=[case.id for case in BAD_CASES])
def test_a_refused_upload_leaves_nothing(case: Bad, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in case.patch.items():
        monkeypatch.setattr(inspect_module, name, value)
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    uploaded = write_case(case, uploads)
    registry = _registry(tmp_path, max_upload_bytes=case.max_bytes or 64 * MB)
    result = registry.add_upload("mine", uploaded, case.file_name, case.mapping)
    assert result.name is None
    wanted = "data-upload-too-big" if case.max_bytes else case.message
    finding = next(f for f in result.findings if (f.message or f.rule) == wanted)
    assert finding.severity == "problem"
    if not case.max_bytes:
        assert_explained(finding, case)
    assert_nothing_left(registry)


@pytest.mark.parametrize("case", BAD_CASES[:12], ids=[case.id for case in BAD_CASES[:12]])
def test_a_refused_server_path_leaves_nothing(case: Bad, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    path = write_case(case, data)
    registry = _registry(tmp_path, [data])
    result = registry.add_server_path("mine", str(path), case.mapping)
    assert result.name is None
    assert any((f.message or f.rule) == case.message for f in result.findings)
    assert_nothing_left(registry)


def test_an_upload_over_the_limit_names_the_limit_and_the_flag(tmp_path: Path) -> None:
    uploaded = _alpaca_file(tmp_path / "x.json", rows=2000)
    registry = _registry(tmp_path, max_upload_bytes=1000)
    result = registry.add_upload("big", uploaded, "x.json")
    assert result.name is None
    finding = result.findings[0]
    assert finding.rule == "data-upload-too-big"
    assert "--max-upload-mb" in finding.fix and "x.json" in finding.problem
    assert_nothing_left(registry)


# --- good adds --------------------------------------------------------------------------------


def test_an_upload_is_copied_and_registered(tmp_path: Path) -> None:
    uploaded = _alpaca_file(tmp_path / "gradio_tmp_upload")
    registry = _registry(tmp_path)
    result = registry.add_upload("my-data", uploaded, r"C:\Users\me\train set.json")
    assert result.name == "my-data", [f.problem for f in result.findings]
    assert registry.names() == ["my-data"]
    assert registry.folder == tmp_path / "runs" / DATASETS_DIRNAME
    entry = registry.entry("my-data")
    assert entry["file_name"] == "files/my-data.json"
    assert entry["formatting"] == "alpaca"
    # "input" is empty in every row: RocBoard's guess does not read it as the query (and says so).
    assert entry["columns"] == {"prompt": "instruction", "response": "output"}
    assert [f.message for f in result.findings] == ["data-column-all-empty-left-out"]
    assert entry["rocboard"]["source"] == "upload"
    assert entry["rocboard"]["original_name"] == "train set.json"
    assert entry["rocboard"]["rows"] == 3
    copy = registry.file_of("my-data")
    assert copy == registry.folder / "files" / "my-data.json"
    assert copy.read_bytes() == uploaded.read_bytes()
    assert sorted(p.name for p in (registry.folder / "files").iterdir()) == ["my-data.json"]  # no temporary left


def test_a_remapped_csv_upload(tmp_path: Path) -> None:
    uploaded = tmp_path / "qa.csv"
    uploaded.write_text("question,answer\nWhy?,Because.\n", encoding="utf-8")
    registry = _registry(tmp_path)
    mapping = ColumnMapping("alpaca", (("prompt", "question"), ("response", "answer")))
    result = registry.add_upload("qa", uploaded, "qa.csv", mapping)
    assert result.name == "qa"
    assert registry.entry("qa")["columns"] == {"prompt": "question", "response": "answer"}
    assert registry.file_of("qa").name == "qa.csv"


def test_a_server_path_inside_a_root_is_registered_by_its_real_path(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    path = _alpaca_file(data / "sub" / "train.json")
    registry = _registry(tmp_path, [data])
    result = registry.add_server_path("server", str(data / "sub" / ".." / "sub" / "train.json"))
    assert result.name == "server", [f.problem for f in result.findings]
    entry = registry.entry("server")
    assert entry["file_name"] == str(path.resolve())
    assert entry["rocboard"]["source"] == "path"
    assert registry.file_of("server") == path.resolve()  # os.path.join keeps an absolute path
    assert not (registry.folder / "files").exists() or list((registry.folder / "files").iterdir()) == []


def test_a_link_inside_the_root_to_a_file_inside_is_followed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    real = _alpaca_file(data / "real.json")
    (data / "link.json").symlink_to(real)
    registry = _registry(tmp_path, [data])
    found, findings = registry.check_server_path(str(data / "link.json"))
    assert findings == [] and found == real.resolve()


# --- server paths refused ---------------------------------------------------------------------


def _refusal(registry: DatasetRegistry, raw: str) -> str:
    found, findings = registry.check_server_path(raw)
    assert found is None and len(findings) == 1
    finding = findings[0]
    assert finding.rule.startswith("data-path-")
    from backend.findings import translate_finding

    chinese = translate_finding(finding, "zh-CN")
    assert any("\u4e00" <= ch <= "\u9fff" for ch in chinese.problem) and "{" not in chinese.problem
    inspection = registry.inspect_server_path(raw)
    assert not inspection.usable and inspection.findings == tuple(findings)
    return finding.rule


def test_server_paths_that_are_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    outside = _alpaca_file(tmp_path / "outside.json")
    (data / "out-link.json").symlink_to(outside)
    (data / "folder").mkdir()
    os.mkfifo(data / "pipe.json")
    registry = _registry(tmp_path, [data])
    assert _refusal(registry, "") == "data-path-empty"
    assert _refusal(registry, "data/x.json") == "data-path-not-absolute"
    assert _refusal(registry, str(data / "a\0b")) == "data-path-unusable"
    assert _refusal(registry, str(outside)) == "data-path-outside"
    assert _refusal(registry, str(data / ".." / "outside.json")) == "data-path-outside"
    assert _refusal(registry, str(data / "out-link.json")) == "data-path-link-outside"
    assert _refusal(registry, str(data / "missing.json")) == "data-path-not-found"
    assert _refusal(registry, str(data / "folder")) == "data-path-is-dir"
    assert _refusal(registry, str(data / "pipe.json")) == "data-path-not-file"
    assert _refusal(_registry(tmp_path, []), str(outside)) == "data-path-no-roots"
    result = registry.add_server_path("linked", str(data / "out-link.json"))
    assert result.name is None and result.findings[0].rule == "data-path-link-outside"
    assert_nothing_left(registry)


# --- names --------------------------------------------------------------------------------------


def test_names_are_checked_and_a_taken_name_is_refused_with_a_free_one(tmp_path: Path) -> None:
    registry = _registry(tmp_path)
    for bad in ("", "-x", "a b", "x" * 65, "../up", "名字"):
        assert [f.rule for f in registry.check_name(bad)] == ["data-name-invalid"], bad
    uploaded = _alpaca_file(tmp_path / "a.json")
    assert registry.add_upload("set", uploaded, "a.json").name == "set"
    assert registry.add_upload("set-2", _alpaca_file(tmp_path / "a2.json", rows=4), "a.json").name == "set-2"
    before = (registry.folder / "files" / "set.json").read_bytes()
    other = tmp_path / "b.json"
    other.write_text(json.dumps([{"instruction": "other", "output": "x"}]), encoding="utf-8")
    result = registry.add_upload("set", other, "b.json")
    assert result.name is None
    finding = result.findings[0]
    assert finding.rule == "data-name-taken"
    assert "'set'" in finding.problem and "'set-3'" in finding.fix
    assert registry.names() == ["set", "set-2"]
    assert (registry.folder / "files" / "set.json").read_bytes() == before  # never overwritten


def test_a_broken_dataset_info_is_never_written_over(tmp_path: Path) -> None:
    registry = _registry(tmp_path)
    registry.folder.mkdir()
    (registry.folder / "dataset_info.json").write_text("{not json", encoding="utf-8")
    result = registry.add_upload("x", _alpaca_file(tmp_path / "a.json"), "a.json")
    assert result.name is None and result.findings[0].rule == "data-registry-broken"
    assert (registry.folder / "dataset_info.json").read_text(encoding="utf-8") == "{not json"
    assert registry.names() == []


def test_a_linked_datasets_folder_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    registry = _registry(tmp_path)
    registry.folder.symlink_to(elsewhere)
    result = registry.add_upload("x", _alpaca_file(tmp_path / "a.json"), "a.json")
    assert result.name is None and result.findings[0].rule in ("data-registry-broken", "data-registry-unwritable")
    assert list(elsewhere.iterdir()) == []


# --- concurrency --------------------------------------------------------------------------------


def test_two_adds_at_once_both_land(tmp_path: Path) -> None:
    registry = _registry(tmp_path)
    # Six different files (the same file twice would be named, not added again).
    uploads = [_alpaca_file(tmp_path / f"u{i}.json", rows=200 + i) for i in range(6)]
    barrier = threading.Barrier(len(uploads))
    results = {}

    def add(index: int) -> None:
        barrier.wait()
        # each thread its own registry object, as two requests would be
        results[index] = DatasetRegistry(registry.runs_dir, [], 64 * MB).add_upload(f"d{index}", uploads[index], f"u{index}.json")

    threads = [threading.Thread(target=add, args=(i,)) for i in range(len(uploads))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(results[i].name == f"d{i}" for i in range(len(uploads))), [r.findings for r in results.values()]
    assert sorted(registry.names()) == [f"d{i}" for i in range(len(uploads))]
    assert sorted(p.name for p in (registry.folder / "files").iterdir()) == [f"d{i}.json" for i in range(len(uploads))]


def test_the_same_name_twice_at_once_lands_once(tmp_path: Path) -> None:
    registry = _registry(tmp_path)
    uploads = [_alpaca_file(tmp_path / f"u{i}.json", rows=50 + i) for i in range(4)]
    barrier = threading.Barrier(len(uploads))
    results = []

    def add(index: int) -> None:
        barrier.wait()
        results.append(registry.add_upload("same", uploads[index], f"u{index}.json"))

    threads = [threading.Thread(target=add, args=(i,)) for i in range(len(uploads))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(r.name == "same" for r in results) == 1
    assert registry.names() == ["same"]
    assert [p.name for p in (registry.folder / "files").iterdir()] == ["same.json"]
    rows = registry.entry("same")["rocboard"]["rows"]
    assert len(json.loads(registry.file_of("same").read_text(encoding="utf-8"))) == rows  # the copy is the one registered


# --- LLaMA-Factory reads what RocBoard writes ---------------------------------------------------

_LLAMAFACTORY_READS = r"""
import json, sys
from types import SimpleNamespace
from llamafactory.data.parser import get_dataset_list
from llamafactory.data.converter import get_dataset_converter

folder, names = sys.argv[1], sys.argv[2:]
out = {}
for attr in get_dataset_list(names, folder):
    # the first row of the file as LLaMA-Factory's converter turns it into a conversation
    path = attr.dataset_name if attr.dataset_name.startswith("/") else folder + "/" + attr.dataset_name
    if path.endswith(".jsonl"):
        row = json.loads(open(path, encoding="utf-8").readline())
    elif path.endswith(".csv"):
        import csv
        row = next(csv.DictReader(open(path, encoding="utf-8")))
    else:
        row = json.load(open(path, encoding="utf-8"))[0]
    converted = get_dataset_converter(attr.formatting, attr, SimpleNamespace(media_dir=folder))(row)
    out[repr(attr)] = {
        "load_from": attr.load_from, "file": attr.dataset_name, "formatting": attr.formatting,
        "prompt": attr.prompt, "query": attr.query, "response": attr.response, "messages": attr.messages,
        "role_tag": attr.role_tag, "user_tag": attr.user_tag, "assistant_tag": attr.assistant_tag,
        "_prompt": converted["_prompt"], "_response": converted["_response"], "_system": converted["_system"],
    }
print(json.dumps(out))
"""


@starts("lf_helper")
def test_llamafactory_accepts_the_entries(tmp_path: Path) -> None:
    registry = _registry(tmp_path, [tmp_path / "data"])
    (tmp_path / "data").mkdir()
    alpaca = tmp_path / "up.csv"
    alpaca.write_text("question,answer\nWhy?,Because.\n", encoding="utf-8")
    mapping = ColumnMapping("alpaca", (("prompt", "question"), ("response", "answer")))
    assert registry.add_upload("qa", alpaca, "qa.csv", mapping).name == "qa"
    chat = tmp_path / "data" / "chat.jsonl"
    messages = [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    chat.write_text(json.dumps({"messages": messages}) + "\n", encoding="utf-8")
    assert registry.add_server_path("chat", str(chat)).name == "chat"
    done = subprocess.run(
        [sys.executable, "-c", _LLAMAFACTORY_READS, str(registry.folder), "qa", "chat"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    read = json.loads(done.stdout.strip().splitlines()[-1])
    qa = read["files/qa.csv"]
    assert (qa["load_from"], qa["formatting"], qa["prompt"], qa["query"], qa["response"]) == ("file", "alpaca", "question", None, "answer")
    assert qa["_prompt"] == [{"role": "user", "content": "Why?"}] and qa["_response"] == [{"role": "assistant", "content": "Because."}]
    conversation = read[str(chat.resolve())]
    assert conversation["formatting"] == "sharegpt" and conversation["messages"] == "messages"
    assert (conversation["role_tag"], conversation["user_tag"], conversation["assistant_tag"]) == ("role", "user", "assistant")
    assert conversation["_system"] == "Be kind."
    assert conversation["_prompt"] == [{"role": "user", "content": "Hi"}]
    assert conversation["_response"] == [{"role": "assistant", "content": "Hello!"}]


def test_a_file_added_before_is_named_not_added_again(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    registry = _registry(tmp_path, roots=[data])
    first = _alpaca_file(data / "a.json", rows=5)
    assert registry.add_upload("set", first, "a.json").name == "set"
    entry = json.loads((registry.folder / "dataset_info.json").read_text(encoding="utf-8"))["set"]
    assert entry["rocboard"]["bytes"] == first.stat().st_size and len(entry["rocboard"]["sha256"]) == 64

    # The same bytes under another file name, and under another dataset name: named, not added.
    copy = tmp_path / "copy of a.json"
    copy.write_bytes(first.read_bytes())
    assert registry.same_dataset(copy, registry.inspect_upload(copy, copy.name).mapping) == "set"
    again = registry.add_upload("set-again", copy, copy.name)
    assert (again.name, again.existing, [f.rule for f in again.findings]) == (None, "set", ["data-already-added"])
    assert "'set'" in again.findings[0].problem
    # ... even when the name asked for is the taken one: what the file is comes first.
    assert registry.add_upload("set", copy, copy.name).existing == "set"
    # Read another way (prompt and response swapped), it is another dataset.
    other_way = ColumnMapping("alpaca", (("prompt", "output"), ("response", "instruction")))
    assert registry.same_dataset(copy, other_way) is None
    assert registry.add_upload("set-prompt-only", copy, copy.name, other_way).name == "set-prompt-only"
    # Other bytes of the same size are not the same file.
    lookalike = tmp_path / "b.json"
    lookalike.write_bytes(first.read_bytes().replace(b"q1", b"q9"))
    assert lookalike.stat().st_size == first.stat().st_size
    assert registry.add_upload("lookalike", lookalike, "b.json").name == "lookalike"

    # A file on this machine named twice: the same path, whatever its name; its bytes
    # uploaded are that dataset too.
    served = _alpaca_file(data / "served.json", rows=7)
    assert registry.add_server_path("served", str(served)).name == "served"
    assert registry.add_server_path("served-2", str(data / "." / "served.json")).existing == "served"
    uploaded_copy = tmp_path / "served-upload.json"
    uploaded_copy.write_bytes(served.read_bytes())
    assert registry.add_upload("served-up", uploaded_copy, "served.json").existing == "served"
    assert registry.names() == ["set", "set-prompt-only", "lookalike", "served"]
