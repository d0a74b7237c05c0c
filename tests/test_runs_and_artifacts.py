import os
import zipfile

import pytest

from backend.runs import RunNotFound, RunStore
from backend.runs.artifacts import NoAdapter, build_adapter_zip


def test_create_is_whole_or_nothing(tmp_path, monkeypatch):
    store = RunStore(tmp_path)
    run = store.create("demo", "cpu-demo", "/m", {"config.yaml": "a: 1\n"})
    assert (tmp_path / run.id / "config.yaml").read_text() == "a: 1\n"
    assert store.read(run.id).state == "starting"

    def broken_write(self, *args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("pathlib.Path.write_text", broken_write)
    with pytest.raises(OSError):
        store.create("other", "cpu-demo", "/m", {"config.yaml": "a: 1\n"})
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == [run.id]  # no half-made run, no staging dir


def test_run_ids_never_leave_the_runs_dir(tmp_path):
    store = RunStore(tmp_path / "runs")
    store.ensure_root()
    (tmp_path / "state.json").write_text("{}")
    for bad in ["..", "../", "../runs", "/etc", "a/b", "%2e%2e", "", ".hidden", None]:
        with pytest.raises(RunNotFound):
            store.run_dir(bad)


def test_two_runs_in_the_same_second_get_distinct_ids(tmp_path):
    store = RunStore(tmp_path)
    a = store.create("x", "p", "m", {})
    b = store.create("x", "p", "m", {})
    assert a.id != b.id
    assert {s.id for s in store.list()} == {a.id, b.id}


def adapter_run(tmp_path):
    store = RunStore(tmp_path / "runs")
    run = store.create("demo", "cpu-demo", "/m", {"config.yaml": "model_name_or_path: /m\n"})
    run_dir = store.run_dir(run.id)
    out = run_dir / "output"
    out.mkdir()
    (out / "adapter_model.safetensors").write_bytes(b"weights")
    (out / "adapter_config.json").write_text("{}")
    (out / "tokenizer.json").write_text("{}")
    (out / "tokenizer_config.json").write_text("{}")
    (out / "trainer_log.jsonl").write_text("")
    return run_dir


def test_zip_holds_adapter_tokenizer_and_config_only(tmp_path):
    run_dir = adapter_run(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("do not serve")
    os.symlink(secret, run_dir / "output" / "special_tokens_map.json")  # planted link
    archive = build_adapter_zip(run_dir)
    assert archive.parent == run_dir
    names = set(zipfile.ZipFile(archive).namelist())
    assert names == {"adapter_model.safetensors", "adapter_config.json", "tokenizer.json", "tokenizer_config.json", "config.yaml"}


def test_a_symlinked_adapter_is_not_an_adapter(tmp_path):
    run_dir = adapter_run(tmp_path)
    weights = run_dir / "output" / "adapter_model.safetensors"
    weights.unlink()
    os.symlink("/etc/passwd", weights)
    with pytest.raises(NoAdapter):
        build_adapter_zip(run_dir)


def test_no_adapter_yet(tmp_path):
    run_dir = adapter_run(tmp_path)
    (run_dir / "output" / "adapter_config.json").unlink()
    with pytest.raises(NoAdapter):
        build_adapter_zip(run_dir)


def test_the_adapters_a_run_offers_chat_evaluate_and_export(tmp_path):
    """One listing serves the three tabs: the final adapter, checkpoint-N folders that hold
    one (highest step first), never a planted link or a name outside output/."""
    from backend.runs.artifacts import adapter_checkpoints, adapter_folder, has_adapter_at, runs_with_adapters

    run_dir = adapter_run(tmp_path)
    out = run_dir / "output"
    for step in (50, 100, 7):
        (out / f"checkpoint-{step}").mkdir()
        (out / f"checkpoint-{step}" / "adapter_model.safetensors").write_bytes(b"w")
        (out / f"checkpoint-{step}" / "adapter_config.json").write_text("{}")
    (out / "checkpoint-200").mkdir()  # a checkpoint without an adapter (full fine-tuning, or cut short)
    os.symlink(out / "checkpoint-50", out / "checkpoint-300")  # a link is not a checkpoint
    assert adapter_checkpoints(run_dir) == ["checkpoint-100", "checkpoint-50", "checkpoint-7"]
    assert has_adapter_at(run_dir) and has_adapter_at(run_dir, "checkpoint-7")
    for hostile in ("../output", "checkpoint-1/../..", "/etc", "checkpoint-", "checkpoint-300/.."):
        assert adapter_folder(hostile) is None and not has_adapter_at(run_dir, hostile)
    assert not has_adapter_at(run_dir, "checkpoint-200") and not has_adapter_at(run_dir, "checkpoint-300")

    store = RunStore(tmp_path / "runs")
    assert runs_with_adapters(store) == []  # still starting: not offered while it may train
    store.update(run_dir.name, state="finished")
    assert [s.id for s in runs_with_adapters(store)] == [run_dir.name]
    (out / "adapter_config.json").unlink()  # only checkpoints left: still offered
    assert [s.id for s in runs_with_adapters(store)] == [run_dir.name]
    store.update(run_dir.name, kind="evaluate")  # an evaluation's folder is never a source
    assert runs_with_adapters(store) == []


def test_a_listing_reads_again_only_the_state_files_written_since_the_last(tmp_path, monkeypatch):
    """The node panel lists the runs every 3 s: an unchanged state file (written over 2 s ago,
    same lstat) is not read again, and any change, by this store or another process's, is seen."""
    store = RunStore(tmp_path / "runs")
    runs = [store.create(name=f"r{n}", preset="cpu-demo", model="m", files={}) for n in range(3)]
    old = 1_700_000_000_000_000_000
    for run in runs:
        os.utime(store.run_dir(run.id) / "state.json", ns=(old, old))  # settled
    reads: list[str] = []
    real_read = RunStore.read
    monkeypatch.setattr(RunStore, "read", lambda self, run_id: (reads.append(run_id), real_read(self, run_id))[1])
    assert {s.id for s in store.list()} == {r.id for r in runs} and len(reads) == 3
    reads.clear()
    assert [s.state for s in store.list()] == ["starting"] * 3 and reads == []
    assert store.read_listed(runs[0].id).name == "r0" and reads == []
    RunStore(tmp_path / "runs").update(runs[1].id, state="stopped")  # another process's write
    reads.clear()
    listed = {s.id: s.state for s in store.list()}
    assert listed[runs[1].id] == "stopped" and reads == [runs[1].id]  # read again: written just now
    assert store.read_listed(runs[1].id).state == "stopped"
    store.delete(runs[2].id)
    assert {s.id for s in store.list()} == {runs[0].id, runs[1].id}
    # Rewritten in place (same size, same inode: an editor, not the store's atomic write): seen.
    path = store.run_dir(runs[0].id) / "state.json"
    path.write_text(path.read_text().replace('"r0"', '"R0"'))
    assert store.read_listed(runs[0].id).name == "R0"
    assert next(s for s in store.list() if s.id == runs[0].id).name == "R0"
