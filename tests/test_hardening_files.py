"""Run files are opened without following links, and read within bounds.

Each hostile case plants what an attacker with write access to a run directory could plant
(a symlink at a file the app reads or writes, a link at a directory on the way, a FIFO, a
hard link, an endless line, a huge log) and checks the app refuses it: the file outside is
neither read, written, packed nor deleted, and nothing hangs or eats the memory.
Also the download crash: a finished run's adapter is handed out any number of times.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from itertools import pairwise
from pathlib import Path

import pytest

from backend.runs import RunNotFound, RunStore, artifacts, history, safe_files, trainer_log
from backend.runs.artifacts import NoAdapter, build_adapter_zip, has_adapter
from backend.runs.logs import MAX_LINE_BYTES, JsonlTail, MetricPoint, MetricSeries, TextTail

SECRET = "SECRET-OUTSIDE-4f7a"
ROOT = Path(__file__).resolve().parent.parent


def log_line(step: int, total: int = 10, loss: float | None = 1.0) -> str:
    record = {"current_steps": step, "total_steps": total, "percentage": step / total * 100}
    if loss is not None:
        record["loss"] = loss
    return json.dumps(record) + "\n"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "secret.txt").write_text(SECRET)
    return directory


@pytest.fixture
def board(tmp_path: Path, demo_assets):
    from backend.service import RocBoard

    return RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports")


def finished_run(store: RunStore, name: str = "done") -> tuple[str, Path]:
    """A finished run with an adapter, as a demo run leaves it."""
    state = store.create(name, "cpu-demo", "/m", {"config.yaml": "model_name_or_path: /m\n", "form.json": "{}", "train.log": "trained fine\n"})
    store.update(state.id, state="finished", exit_code=0)
    run_dir = store.run_dir(state.id)
    output = run_dir / "output"
    output.mkdir()
    (output / "adapter_model.safetensors").write_bytes(b"\0" * 256)
    (output / "adapter_config.json").write_text('{"peft_type": "LORA"}')
    (output / "tokenizer.json").write_text("{}")
    (output / "trainer_log.jsonl").write_text("".join(log_line(step) for step in range(1, 11)))
    return state.id, run_dir


def replace_with_link(path: Path, target: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        import shutil

        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    path.symlink_to(target)


# --- writing: a planted link is replaced, never written through -----------------------------------


@pytest.mark.hostile
@pytest.mark.parametrize("name", [".adapter.zip.partial", "adapter.zip"])
def test_a_link_at_the_zip_or_its_old_temp_name_is_not_written_through(board, outside: Path, name: str) -> None:
    _, run_dir = finished_run(board.store)
    victim = outside / "victim.txt"
    victim.write_text("must stay")
    (run_dir / name).symlink_to(victim)
    archive = build_adapter_zip(run_dir)
    assert victim.read_text() == "must stay"
    assert not archive.is_symlink() and zipfile.is_zipfile(archive)
    assert not any(p.name.endswith(".tmp") for p in run_dir.iterdir())  # no temp name left


@pytest.mark.hostile
def test_the_zips_temp_name_cannot_be_guessed(board) -> None:
    names = {safe_files.temp_name("adapter.zip") for _ in range(50)}
    assert len(names) == 50 and all(n.startswith(".adapter.zip.") and len(n) > len(".adapter.zip..tmp") + 12 for n in names)


@pytest.mark.hostile
def test_a_link_in_the_export_dir_is_not_written_through(board, outside: Path) -> None:
    run_id, _ = finished_run(board.store)
    victim = outside / "victim.txt"
    victim.write_text("must stay")
    export = board.export_dir / run_id
    export.mkdir(parents=True)
    for planted in (f"{run_id}-adapter.partial", f".{run_id}-adapter.zip.partial"):
        (export / planted).symlink_to(victim)
    served = board.adapter_download(run_id)
    assert victim.read_text() == "must stay"
    assert zipfile.is_zipfile(served) and not served.is_symlink()


@pytest.mark.hostile
def test_a_link_at_state_json_is_replaced_on_update_not_followed(board, outside: Path) -> None:
    _, run_dir = finished_run(board.store)
    victim = outside / "victim.json"
    victim.write_text("{}")
    safe_files.write_atomic(run_dir, "form.json", b"{}")  # the helper behind every state write
    (run_dir / "form.json").unlink()
    (run_dir / "form.json").symlink_to(victim)
    safe_files.write_atomic(run_dir, "form.json", b'{"a": 1}')
    assert victim.read_text() == "{}"
    assert not (run_dir / "form.json").is_symlink()


@pytest.mark.hostile
def test_the_resume_does_not_append_to_a_linked_log_nor_archive_into_a_linked_dir(board, outside: Path) -> None:
    from backend.runs.resume import archive_attempt, repair_trainer_log

    _, run_dir = finished_run(board.store)
    victim = outside / "victim.log"
    victim.write_text(log_line(1)[:-1])  # a cut-off last line: a repair would append to it
    replace_with_link(run_dir / "output" / "trainer_log.jsonl", victim)
    checkpoint = checkpoint_dir(run_dir / "output", 5)
    from backend.runs.resume import checkpoint_info

    info = checkpoint_info(checkpoint, run_dir)
    assert info is not None
    with pytest.raises(OSError):
        repair_trainer_log(run_dir / "output", info)
    assert victim.read_text() == log_line(1)[:-1]

    elsewhere = outside / "attempts"
    elsewhere.mkdir()
    (run_dir / "attempts").symlink_to(elsewhere)
    with pytest.raises(OSError):
        archive_attempt(run_dir, 1)
    assert list(elsewhere.iterdir()) == []


@pytest.mark.hostile
def test_the_log_note_of_a_resume_is_not_appended_through_a_link(board, outside: Path) -> None:
    from backend.runs.resume import ResumeRefused, prepare_resume

    run_id, run_dir = finished_run(board.store)
    board.store.update(run_id, state="stopped")
    checkpoint_dir(run_dir / "output", 5, max_steps=10)
    victim = outside / "victim.log"
    victim.write_text("must stay")
    replace_with_link(run_dir / "train.log", victim)
    with pytest.raises((OSError, ResumeRefused)):
        prepare_resume(board.store, run_id)
    assert victim.read_text() == "must stay"


# --- reading: a planted link shows nothing of what it points at -----------------------------------


@pytest.mark.hostile
def test_a_train_log_linked_to_a_secret_is_not_shown(board, outside: Path) -> None:
    run_id, run_dir = finished_run(board.store)
    board.store.update(run_id, state="failed", exit_code=1)
    (outside / "secret.txt").write_text(SECRET + "\n{'loss': '1.0', 'grad_norm': 'nan'}\nCUDA out of memory\n")
    replace_with_link(run_dir / "train.log", outside / "secret.txt")
    snapshot = board.snapshot(run_id)
    assert SECRET not in snapshot.log_tail
    assert board.monitor(run_id).grad_norms == []
    assert board.failure_cause(run_id) == ("", "")


@pytest.mark.hostile
def test_a_train_log_that_is_a_fifo_does_not_hang_the_page(board) -> None:
    run_id, run_dir = finished_run(board.store)
    (run_dir / "train.log").unlink()
    os.mkfifo(run_dir / "train.log")
    started = time.monotonic()
    snapshot = board.snapshot(run_id)
    assert snapshot.log_tail == "" and time.monotonic() - started < 10


@pytest.mark.hostile
@pytest.mark.parametrize("name", ["output/trainer_log.jsonl", "samples.jsonl"])
def test_a_linked_metrics_file_draws_nothing(board, outside: Path, name: str) -> None:
    run_id, run_dir = finished_run(board.store)
    sample = json.dumps({"at": 1.0, "source": "sysfs", "gpu": 0, "used_bytes": 1, "total_bytes": 2})
    (outside / "metrics.jsonl").write_text("".join(log_line(step, 99, 7.0) for step in range(1, 51)) + sample + "\n")
    replace_with_link(run_dir / name, outside / "metrics.jsonl")
    board.monitors.clear()
    snapshot = board.snapshot(run_id)
    if name == "samples.jsonl":
        assert snapshot.memory == []
    else:
        assert snapshot.points == []
        summary = next(s for s in history.summarize_runs(board.store) if s.id == run_id)
        assert summary.step is None and summary.last_loss is None
        assert trainer_log.read_curve(run_dir / name, run_dir) == []


@pytest.mark.hostile
def test_a_linked_output_dir_is_not_packed_nor_read(board, outside: Path) -> None:
    run_id, run_dir = finished_run(board.store)
    fake = outside / "fake-output"
    fake.mkdir()
    (fake / "adapter_model.safetensors").write_bytes(b"\0" * 8)
    (fake / "adapter_config.json").write_text("{}")
    (fake / "tokenizer.json").write_text(SECRET)
    (fake / "trainer_log.jsonl").write_text(log_line(3, 3, 9.0))
    replace_with_link(run_dir / "output", fake)
    assert not has_adapter(run_dir)
    assert not board.snapshot(run_id).has_adapter
    with pytest.raises(NoAdapter):
        board.adapter_download(run_id)
    assert board.snapshot(run_id).points == []


@pytest.mark.hostile
@pytest.mark.parametrize("how", ["symlink", "hardlink"])
def test_the_zip_holds_only_regular_files_with_one_name(board, outside: Path, how: str) -> None:
    run_id, run_dir = finished_run(board.store)
    tokenizer = run_dir / "output" / "tokenizer.json"
    tokenizer.unlink()
    (os.symlink if how == "symlink" else os.link)(outside / "secret.txt", tokenizer)
    with zipfile.ZipFile(board.adapter_download(run_id)) as archive:
        assert "tokenizer.json" not in archive.namelist()
        assert all(SECRET.encode() not in archive.read(name) for name in archive.namelist())


@pytest.mark.hostile
def test_a_planted_zip_with_a_future_mtime_is_rebuilt(board) -> None:
    run_id, run_dir = finished_run(board.store)
    with zipfile.ZipFile(run_dir / "adapter.zip", "w") as planted:
        planted.writestr("tokenizer.json", SECRET)
    future = time.time() + 3600
    os.utime(run_dir / "adapter.zip", (future, future))
    with zipfile.ZipFile(board.adapter_download(run_id)) as archive:
        assert SECRET.encode() not in archive.read("tokenizer.json")
        assert "adapter_model.safetensors" in archive.namelist()


@pytest.mark.hostile
@pytest.mark.parametrize("name", ["state.json", "form.json", "config.yaml"])
def test_a_linked_small_file_is_not_read(board, outside: Path, name: str) -> None:
    run_id, run_dir = finished_run(board.store)
    real = (run_dir / name).read_text()
    (outside / name).write_text(real.replace("model_name_or_path", "SECRET_KEY") if name != "form.json" else '{"secret": 1}')
    replace_with_link(run_dir / name, outside / name)
    if name == "state.json":
        with pytest.raises(RunNotFound):
            board.store.read(run_id)
        assert run_id not in board.run_ids()
    elif name == "form.json":
        assert board.store.read_form(run_id) == {}
    else:
        with zipfile.ZipFile(board.adapter_download(run_id)) as archive:
            assert "config.yaml" not in archive.namelist()
        board.store.update(run_id, state="stopped")
        checkpoint_dir(run_dir / "output", 5, max_steps=10)
        result = board.resume(run_id)
        assert not result.started and "config.yaml" in result.findings[0].problem


def checkpoint_dir(output: Path, step: int, max_steps: int = 10) -> Path:
    path = output / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "adapter_model.safetensors").write_bytes(b"\0" * 8)
    history_ = [{"step": n, "loss": 1.0} for n in range(1, step + 1)]  # what a resume would append
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step, "max_steps": max_steps, "log_history": history_}))
    return path


@pytest.mark.hostile
@pytest.mark.parametrize("what", ["checkpoint-dir", "trainer-state", "weights"])
def test_a_linked_checkpoint_is_never_resumed_from(board, outside: Path, what: str) -> None:
    from backend.runs.resume import latest_checkpoint

    _, run_dir = finished_run(board.store)
    output = run_dir / "output"
    good = checkpoint_dir(output, 2)
    elsewhere = checkpoint_dir(outside, 8)
    if what == "checkpoint-dir":
        (output / "checkpoint-8").symlink_to(elsewhere)
    else:
        inside = checkpoint_dir(output, 8)
        name = "trainer_state.json" if what == "trainer-state" else "adapter_model.safetensors"
        replace_with_link(inside / name, elsewhere / name)
    assert latest_checkpoint(run_dir) == good


@pytest.mark.hostile
def test_deleting_a_run_full_of_links_touches_nothing_outside(board, outside: Path) -> None:
    run_id, run_dir = finished_run(board.store)
    (run_dir / "output" / "escape").symlink_to(outside)
    (run_dir / "output" / "tokenizer.model").symlink_to(outside / "secret.txt")
    (run_dir / "attempts").symlink_to(outside)
    board.delete(run_id)
    assert (outside / "secret.txt").read_text() == SECRET
    assert not run_dir.exists() and [p.name for p in board.store.root.iterdir()] == []


@pytest.mark.hostile
@pytest.mark.parametrize("relative", ["../outside/secret.txt", "/etc/passwd", "output/../../x", "a\0b"])
def test_a_path_that_leaves_the_run_is_refused(board, relative: str) -> None:
    _, run_dir = finished_run(board.store)
    with pytest.raises((safe_files.UnsafePath, ValueError)):
        safe_files.open_in_run(run_dir, relative)


# --- bounded reads ---------------------------------------------------------------------------------


@pytest.mark.hostile
def test_an_endless_line_is_dropped_not_reread_forever(tmp_path: Path) -> None:
    path = tmp_path / "trainer_log.jsonl"
    path.write_bytes(b"x" * (MAX_LINE_BYTES * 3))  # no newline at all
    tail = JsonlTail(path, max_chunk=MAX_LINE_BYTES * 2)
    assert tail.poll() == []
    assert tail.overlong_lines == 1 and tail.offset == MAX_LINE_BYTES * 2  # moved on, not stuck
    with open(path, "ab") as handle:
        handle.write(b"x" * 100 + b"\n" + log_line(4).encode())
    polled = tail.poll() + tail.poll()
    assert [r["current_steps"] for r in polled] == [4]


@pytest.mark.hostile
def test_a_long_line_in_train_log_is_not_kept(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_text("y" * (MAX_LINE_BYTES + 10) + "\n{'loss': '1.0', 'grad_norm': '2.0'}\n")
    assert TextTail(path).poll() == ["{'loss': '1.0', 'grad_norm': '2.0'}"]


def test_a_curve_keeps_a_bounded_number_of_points() -> None:
    series = MetricSeries(max_points=1000, recent=100)
    series.extend([MetricPoint(step, 100_000, 1.0, None, None, None, "", "") for step in range(1, 100_001)])
    assert len(series.points) <= 1000
    assert [p.step for p in series.points[-100:]] == list(range(99_901, 100_001))  # the recent ones whole
    assert series.points[0].step == 1


@pytest.mark.hostile
def test_a_summary_of_a_huge_log_without_loss_reads_a_bounded_tail(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "trainer_log.jsonl"
    line = log_line(1, 10, None).encode()
    with open(path, "wb") as handle:
        handle.write(log_line(1).encode())
        handle.write(line * (24 * 1024 * 1024 // len(line)))  # 24 MiB, no loss after the first line
    reads = []
    real = trainer_log._read_window
    monkeypatch.setattr(trainer_log, "_read_window", lambda h, s, n: reads.append(n) or real(h, s, n))
    tail = trainer_log.read_log_tail(path)
    assert tail.step == 1 and tail.last_loss is None  # the loss 24 MiB back is not looked for
    assert sum(reads) <= 2 * trainer_log.TAIL_MAX_BYTES


def test_an_overlay_curve_of_a_huge_log_is_sampled(tmp_path: Path) -> None:
    path = tmp_path / "trainer_log.jsonl"
    with open(path, "w") as handle:
        for step in range(1, 300_001):
            handle.write(log_line(step, 300_000, 5.0 - step / 100_000))
    assert path.stat().st_size > trainer_log.CURVE_READ_BYTES
    curve = trainer_log.read_curve(path)
    assert 1000 < len(curve) <= 20_000
    assert curve[0].step < 1000 and curve[-1].step > 299_000
    assert all(a.step < b.step for a, b in pairwise(curve))


@pytest.mark.timeout(300)
def test_a_monitor_opening_a_huge_log_catches_up_by_sampling(tmp_path: Path) -> None:
    from backend.service import CATCH_UP_SAMPLE_BYTES, RunMonitor

    run_dir = tmp_path / "run"
    (run_dir / "output").mkdir(parents=True)
    with open(run_dir / "output" / "trainer_log.jsonl", "w") as handle:
        step = 0
        while handle.tell() < CATCH_UP_SAMPLE_BYTES + 1024 * 1024:
            step += 1
            handle.write(log_line(step, 10**7, 2.0))
        final = step
    monitor = RunMonitor(run_dir)
    monitor.poll()
    assert monitor.series.points[-1].step == final  # the end at once, not after minutes
    assert len(monitor.series.points) <= 20_000


# --- the download crash: a finished run viewed again and again ------------------------------------


def test_a_finished_runs_adapter_is_handed_out_every_time(board) -> None:
    run_id, run_dir = finished_run(board.store)
    served = [board.adapter_download(run_id) for _ in range(5)]  # reload, reload, reload, Open, language
    assert len(set(served)) == 1 and zipfile.is_zipfile(served[0])
    assert [p.name for p in served[0].parent.iterdir()] == [served[0].name]  # no temp copy left behind
    # A newer adapter: the next view hands out the new archive.
    time.sleep(0.01)
    (run_dir / "output" / "adapter_model.safetensors").write_bytes(b"\1" * 512)
    os.utime(run_dir / "output" / "adapter_model.safetensors", (time.time() + 5, time.time() + 5))
    with zipfile.ZipFile(board.adapter_download(run_id)) as archive:
        assert archive.read("adapter_model.safetensors") == b"\1" * 512


def test_the_old_crash_state_is_recovered_from(board) -> None:
    """What the old code left behind (a hard-linked `.partial` beside the copy) breaks nothing."""
    run_id, run_dir = finished_run(board.store)
    first = board.adapter_download(run_id)
    os.link(run_dir / artifacts.ADAPTER_ZIP, first.with_suffix(".partial"))
    for _ in range(3):
        assert zipfile.is_zipfile(board.adapter_download(run_id))


def test_a_fresh_process_hands_out_the_adapter_five_times(tmp_path: Path, demo_assets) -> None:
    """On a real process, as the app would after each reload."""
    store = RunStore(tmp_path / "runs")
    run_id, _ = finished_run(store)
    script = (
        "import sys, zipfile\n"
        "from pathlib import Path\n"
        "from backend.service import RocBoard\n"
        "board = RocBoard(Path(sys.argv[1]), export_dir=Path(sys.argv[2]))\n"
        "paths = {str(board.adapter_download(sys.argv[3])) for _ in range(5)}\n"
        "assert len(paths) == 1 and zipfile.is_zipfile(paths.pop())\n"
        "print('OK')\n"
    )
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path / "runs"), str(tmp_path / "exports"), run_id], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-2000:]


# --- the launcher and the sampler write into a run too ---------------------------------------------


@pytest.mark.hostile
def test_the_trainer_output_is_not_written_through_a_linked_train_log(board, outside: Path) -> None:
    state = board.store.create("linked-log", "cpu-demo", "/m", {"config.yaml": "model_name_or_path: /m\n", "form.json": "{}"})
    run_dir = board.store.run_dir(state.id)
    replace_with_link(run_dir / "train.log", outside / "secret.txt")
    with pytest.raises(OSError):
        board.launcher.start(state.id, {}, command=[sys.executable, "-c", "print('OVERWRITTEN')"])
    assert (outside / "secret.txt").read_text() == SECRET


@pytest.mark.hostile
def test_a_linked_trainer_log_does_not_make_a_run_finished(board, outside: Path) -> None:
    from backend.runs.launcher import derive_final_state

    run_id, run_dir = finished_run(board.store, "linked-metrics")
    (outside / "log.jsonl").write_text(log_line(10))  # the last line of a finished run
    replace_with_link(run_dir / "output" / "trainer_log.jsonl", outside / "log.jsonl")
    assert derive_final_state(run_dir)[0] == "failed"
    (run_dir / "output" / "trainer_log.jsonl").unlink()
    (run_dir / "output" / "trainer_log.jsonl").write_text(log_line(10))
    assert derive_final_state(run_dir)[0] == "finished"  # the same line, as a regular file


@pytest.mark.hostile
def test_the_sampler_does_not_write_through_a_linked_samples_file(tmp_path: Path, outside: Path) -> None:
    from backend.telemetry.base import Reading
    from backend.telemetry.sampler import Sampler

    samples = tmp_path / "run" / "samples.jsonl"
    samples.parent.mkdir()
    samples.symlink_to(outside / "secret.txt")
    sampler = Sampler([])
    sampler.watch(samples, None)
    with sampler._lock:
        sampler._write_samples([Reading(gpu=0, used_bytes=1, total_bytes=2, util_pct=None, temp_c=None, power_w=None, source="process", at=1.0)])
    assert (outside / "secret.txt").read_text() == SECRET


@pytest.mark.hostile
def test_one_walk_of_stats_follows_no_link(board, outside: Path) -> None:
    # safe_files.lstat_many (a look at a live run's files in one walk) says what lstat_in_run
    # says of each: a link's own stat, never its target's; None past a linked folder.
    _, run_dir = finished_run(board.store)
    replace_with_link(run_dir / "train.log", outside / "secret.txt")
    names = ["train.log", "output/trainer_log.jsonl", "output/missing", "state.json", "nope/x"]
    many = safe_files.lstat_many(run_dir, names)
    one_by_one = [safe_files.lstat_in_run(run_dir, name) for name in names]
    assert [None if s is None else (s.st_ino, s.st_mode) for s in many] == [None if s is None else (s.st_ino, s.st_mode) for s in one_by_one]
    assert many[0] is not None and many[0].st_ino != (outside / "secret.txt").stat().st_ino and many[2] is None and many[4] is None
    replace_with_link(run_dir / "output", outside)
    (outside / "trainer_log.jsonl").write_text(log_line(1))
    assert safe_files.lstat_many(run_dir, ["output/trainer_log.jsonl", "state.json"])[0] is None
    moved = run_dir.with_name("moved")
    run_dir.rename(moved)
    run_dir.symlink_to(moved)  # the run itself a link: nothing in it is looked at
    assert safe_files.lstat_many(run_dir, ["state.json", "train.log"]) == [None, None]
