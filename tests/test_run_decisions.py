"""Decisions the backend takes about a run with no browser open, on stand-in trainers:
stop on a NaN loss (when the run's saved setting says so), build the adapter zip at the end.
Nothing here asks for a snapshot or a view: no page is polling."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import threading
import time
import zipfile
from pathlib import Path

import psutil
import pytest

from backend.runs import ADAPTER_ZIP, RunNotFound
from backend.runs import launcher as launcher_module
from backend.service import LlamaFactoryCheckCache, RocBoard, demo_form
from tests.harness import wait_until

# Lines as LLaMA-Factory's trainer_log.jsonl has them (json.dumps writes a NaN loss as NaN).
STAND_IN = textwrap.dedent(
    """
    import json, math, os, sys, time
    os.makedirs("output", exist_ok=True)
    losses = [float(v) for v in sys.argv[1].split(",")]
    with open("output/trainer_log.jsonl", "a") as log:
        for step, loss in enumerate(losses, 1):
            log.write(json.dumps({"current_steps": step, "total_steps": len(losses), "loss": loss}) + "\\n")
            log.flush()
    if sys.argv[2] == "adapter":
        for name in ("adapter_model.safetensors", "adapter_config.json"):
            with open(os.path.join("output", name), "w") as f:
                f.write("{}")
        sys.exit(0)
    time.sleep(120)
    """
)


@pytest.fixture
def board(tmp_path):
    board = RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports", lf_cache=LlamaFactoryCheckCache(check=lambda args: []))
    yield board
    for state in board.store.list():
        if state.active:
            board.stop(state.id)


def launch_stand_in(board: RocBoard, losses: str, then: str = "sleep", stop_on_nan: bool = False) -> str:
    state = board.store.create("stand-in", "cpu-demo", "m", {"config.yaml": "", "train.log": ""})
    board.store.update(state.id, stop_on_nan=stop_on_nan)
    board.run_manager.launch(state.id, {}, command=[sys.executable, "-c", STAND_IN, losses, then])
    return state.id


def state_on_disk(board: RocBoard, run_id: str) -> dict:
    return json.loads((board.store.root / run_id / "state.json").read_text())


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_stop_on_nan_stops_the_run_with_no_page_open(board):
    run_id = launch_stand_in(board, "2.5,2.1,nan", stop_on_nan=True)
    pid = state_on_disk(board, run_id)["pid"]
    began = time.monotonic()
    final = wait_until(lambda: (s := state_on_disk(board, run_id))["state"] == "stopped" and s, 20, what="the backend to stop the run")
    assert time.monotonic() - began < 15
    assert final["stop_reason"] == "reason.stopped_on_nan" and final["stop_on_nan"] is True
    assert not alive(pid)


class Looks:
    """Counts the backend watcher's looks at the runs (`RunDecisions.decide`), so a test waits
    for the looks that would have acted rather than for a time it hopes is long enough."""

    def __init__(self, board: RocBoard, monkeypatch: pytest.MonkeyPatch):
        self.count = 0
        self._changed = threading.Condition()
        decide = board.decisions.decide

        def counted(run_id: str) -> bool:
            try:
                return decide(run_id)
            finally:
                with self._changed:
                    self.count += 1
                    self._changed.notify_all()

        monkeypatch.setattr(board.decisions, "decide", counted)

    def wait_for_more(self, looks: int, timeout: float = 20) -> None:
        with self._changed:
            target = self.count + looks
            assert self._changed.wait_for(lambda: self.count >= target, timeout), f"the watcher looked {self.count - target + looks} of {looks} times in {timeout} s"


def test_a_run_without_the_setting_trains_on_until_it_is_switched_on(board, monkeypatch):
    looks = Looks(board, monkeypatch)
    run_id = launch_stand_in(board, "2.5,nan", stop_on_nan=False)
    wait_until(lambda: board.monitor(run_id).alert() is not None, 20, what="the backend to see the NaN")
    looks.wait_for_more(3)  # each would have stopped it, had the setting been on
    assert state_on_disk(board, run_id)["state"] == "running"
    board.set_stop_on_nan(run_id, True)  # the page's checkbox, ticked while it trains
    wait_until(lambda: state_on_disk(board, run_id)["state"] == "stopped", 20, what="the switched-on setting to stop it")
    assert state_on_disk(board, run_id)["stop_on_nan"] is True


def test_the_runs_are_looked_at_right_after_each_round_of_the_apps_sampler(tmp_path, monkeypatch):
    # The sampler's round (its tick and its companions') wakes the decisions loop: with its
    # own fallback wait made a minute long, the looks still come at the sampler's pace.
    from backend.telemetry.fake_sysfs import build_fake_sysfs
    from backend.telemetry.sampler import Sampler

    sampler = Sampler(interval_s=0.1, sysfs_root=build_fake_sysfs(tmp_path / "sys"))
    board = RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports", lf_cache=LlamaFactoryCheckCache(check=lambda args: []), sampler=sampler)
    board.decisions.interval_s = 60.0
    looks = Looks(board, monkeypatch)
    sampler.start()
    try:
        run_id = launch_stand_in(board, "2.5,2.1,nan", stop_on_nan=True)
        looks.wait_for_more(5, timeout=10)
        wait_until(lambda: state_on_disk(board, run_id)["state"] == "stopped", 10, what="the NaN stop, decided after a round")
    finally:
        for state in board.store.list():
            if state.active:
                board.stop(state.id)
        sampler.stop()


def test_a_look_reads_the_state_again_when_its_file_changed_even_at_the_same_size(board, monkeypatch):
    # A look at a run whose state file is unchanged takes the state it last read (the process
    # checked at most every PROCESS_LOOK_S); any write since (a new file, a rewrite in place
    # of the same size) is read. A separate RunDecisions: the app's own loop looks meanwhile.
    from backend.service import decisions as decisions_module
    from backend.service.decisions import RunDecisions

    run_id = launch_stand_in(board, "2.5")
    path = board.store.root / run_id / "state.json"
    reads: list[str] = []
    refresh = board.run_manager.refresh
    here = threading.current_thread()  # the looker's reads, not the app's loop's

    def counted(rid: str):
        if threading.current_thread() is here:
            reads.append(rid)
        return refresh(rid)

    monkeypatch.setattr(board.run_manager, "refresh", counted)
    looker = RunDecisions(board.run_manager, board.monitors)

    def age() -> int:  # as if written a minute ago: old enough for its key to be trusted
        old = time.time_ns() - 60 * 10**9
        os.utime(path, ns=(old, old))
        return old

    age()
    assert looker._state(run_id).name == "stand-in" and len(reads) == 1
    assert looker._state(run_id).name == "stand-in" and len(reads) == 1  # unchanged: not read
    # Rewritten in place, same size, just now: read.
    text = path.read_text()
    with open(path, "r+") as handle:
        handle.write(text.replace('"stand-in"', '"stand-ix"'))
    assert path.read_text() != text and len(path.read_text()) == len(text)
    assert looker._state(run_id).name == "stand-ix" and len(reads) == 2
    # Replaced by a file of the same size with the same (old) mtime: another inode, read.
    old = age()
    assert looker._state(run_id).name == "stand-ix" and len(reads) == 3
    replacement = path.with_name("new.json")
    replacement.write_text(text)
    os.utime(replacement, ns=(old, old))
    os.replace(replacement, path)
    assert looker._state(run_id).name == "stand-in" and len(reads) == 4
    # The process is still checked, every PROCESS_LOOK_S, with the file unchanged.
    monkeypatch.setattr(decisions_module, "PROCESS_LOOK_S", 0.0)
    looker._state(run_id)
    assert len(reads) == 5


def test_the_adapter_zip_is_built_when_the_run_ends_with_no_page_open(board):
    run_id = launch_stand_in(board, "2.5,2.0,1.5", then="adapter")
    run_dir = board.store.root / run_id
    wait_until(lambda: (run_dir / ADAPTER_ZIP).exists(), 20, what="the backend to build adapter.zip")
    assert state_on_disk(board, run_id)["state"] == "finished"
    with zipfile.ZipFile(run_dir / ADAPTER_ZIP) as archive:
        assert {"adapter_model.safetensors", "adapter_config.json"} <= set(archive.namelist())
    wait_until(lambda: run_id not in board.decisions.following(), 5, what="the watcher to let the ended run go")
    # The page then only hands out a copy of the archive the backend built.
    built = (run_dir / ADAPTER_ZIP).stat().st_mtime_ns
    view = board.run_view(run_id)
    assert view.download is not None and zipfile.is_zipfile(view.download)
    assert (run_dir / ADAPTER_ZIP).stat().st_mtime_ns == built


def test_start_saves_the_setting_with_the_run(board, monkeypatch, demo_assets):
    monkeypatch.setattr(launcher_module, "trainer_command", lambda config_file="config.yaml": [sys.executable, "-c", "import time; time.sleep(60)"])
    result = board.start({**demo_form(), "run_name": "nan-guard"}, stop_on_nan=True)
    assert result.started, result.findings
    assert state_on_disk(board, result.run.id)["stop_on_nan"] is True
    board.set_stop_on_nan(result.run.id, False)
    assert state_on_disk(board, result.run.id)["stop_on_nan"] is False
    board.stop(result.run.id)
    board.set_stop_on_nan(result.run.id, True)  # an ended run keeps the setting it ran with
    assert state_on_disk(board, result.run.id)["stop_on_nan"] is False


def test_the_run_view_names_what_the_panel_shows(board):
    run_id = launch_stand_in(board, "2.5,2.0,1.5", then="adapter")
    wait_until(lambda: state_on_disk(board, run_id)["state"] == "finished", 20, what="the run to end")
    view = board.run_view(run_id, "en")
    assert not view.active and not view.unchanged and view.run_id == run_id
    assert run_id in view.status and "rb-progress" in view.progress
    assert len(board.live(run_id, "en").charts["loss"]["data"][0]["x"]) == 3  # the charts come apart (ui/live.py)
    assert view.stop_on_nan is None  # an ended run's setting is not the page's next one
    again = board.run_view(run_id, "en", shown=view.version)
    assert again.unchanged and not again.active and again.status == ""
    assert board.run_view(run_id, "zh-CN", shown=view.version).unchanged is False  # another language redraws
    assert board.run_view(None, "zh-CN").status and board.run_view(None).run_id is None
    board.delete(run_id)
    gone = board.run_view(run_id)
    assert run_id in gone.status and not gone.active


def test_one_delete_path_refuses_a_training_run_and_a_missing_one(board):
    """The Runs tab's delete and the facade's are one path (the run manager's)."""
    run_id = launch_stand_in(board, "2.5", stop_on_nan=False)
    refused = board.delete(run_id)
    assert [f.rule for f in refused] == ["run-active"] and run_id in refused[0].problem
    assert refused[0].text("zh-CN") != refused[0].text("en")
    board.stop(run_id)
    assert board.delete(run_id) == []
    assert not (board.store.root / run_id).exists()
    with pytest.raises(RunNotFound):
        board.delete(run_id)
    assert [f.rule for f in board.delete_runs([run_id])] == ["run-missing"]


def test_the_llamafactory_cache_is_single_flight_and_bounded():
    calls: list[dict] = []
    gate = threading.Event()

    def check(args):
        calls.append(args)
        gate.wait(5)
        return []

    cache = LlamaFactoryCheckCache(max_entries=2, check=check)
    threads = [threading.Thread(target=cache.findings, args=({"a": 1},)) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(0.2)
    gate.set()
    for thread in threads:
        thread.join(5)
    assert len(calls) == 1
    cache.findings({"b": 1})
    cache.findings({"a": 1})  # used again: the newest
    cache.findings({"c": 1})  # evicts b, the least recently used
    assert len(cache) == 2 and len(calls) == 3
    cache.findings({"a": 1})
    assert len(calls) == 3
    cache.findings({"b": 1})
    assert len(calls) == 4


def test_the_service_package_imports_no_gradio_and_the_view_no_service():
    import ast

    root = Path(__file__).resolve().parents[1] / "backend"
    for path in [*root.glob("*.py"), *(root / "service").glob("*.py")]:
        tree = ast.parse(path.read_text())
        names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        names |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not any(name.split(".")[0] == "gradio" for name in names), path
        if path.name in ("view.py", "snapshot.py"):
            assert not any(name.startswith("backend.service") for name in names), path
