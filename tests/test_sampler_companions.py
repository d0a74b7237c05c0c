"""Side by side, each run's sampler is a companion of the app's (Sampler.companion): one that
reads in-process (sysfs here, on the project's fake AMD sysfs) is ticked on the app sampler's
thread; one charting through a tool keeps its own, so a hung tool holds up nobody; the app
sampler's end hands its companions back threads of their own; `after_round` is told after
each round that read something, and only then."""

from __future__ import annotations

import threading
from pathlib import Path

from backend.telemetry.base import Reading, SourceStatus
from backend.telemetry.fake_sysfs import build_fake_sysfs, server_cards
from backend.telemetry.sampler import Sampler
from tests.harness import wait_until


def sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "rocboard-telemetry" and t.is_alive()]


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def grows(path: Path, timeout: float = 10.0) -> None:
    before = lines(path)
    wait_until(lambda: lines(path) > before, timeout, what=f"{path.parent.name}'s samples to grow")


class BlockingTool:
    """A tool-like source (not read in-process) whose read hangs until released."""

    name = "blocking-tool"

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def probe(self) -> SourceStatus:
        return SourceStatus(self.name, True, "stand-in")

    def read(self) -> list[Reading]:
        self.entered.set()
        self.release.wait(30)
        return [Reading(0, 1, 2, 3.0, None, None, self.name, 0.0, "GPU 0")]


def test_companions_reading_in_process_are_ticked_on_the_app_samplers_thread(tmp_path):
    sysfs = build_fake_sysfs(tmp_path / "sys", server_cards(4), bmc_vga=False)
    app = Sampler(interval_s=0.05, sysfs_root=sysfs)
    app.start()
    companions = [app.companion() for _ in range(3)]
    samples = [tmp_path / f"run{i}" / "telemetry.jsonl" for i in range(3)]
    try:
        for companion, path in zip(companions, samples, strict=True):
            companion.start()
            companion.watch(path, pid=None)
        for path in samples:
            grows(path)
            grows(path)  # ticked again, after its own thread handed over
        # Detected on threads of their own, then ticked on the app's: one thread for four samplers.
        wait_until(lambda: not any(c._thread.is_alive() for c in companions), 10, what="the companions' own threads to end")
        assert app._thread in sampler_threads() and set(app._companions) == set(companions)
        assert all(c.source_name == "sysfs" for c in companions)

        # One stopped: its file stops growing; the others go on.
        companions[0].stop()
        stopped_at = lines(samples[0])
        grows(samples[1])
        grows(samples[1])
        assert lines(samples[0]) == stopped_at

        # The app's sampler stops: the companions still watching get threads of their own back.
        app.stop()
        wait_until(lambda: all(c._thread in sampler_threads() for c in companions[1:]), 10, what="the two companions' threads")
        assert not companions[0]._thread.is_alive() and not app._thread.is_alive()
        grows(samples[1])
        grows(samples[2])
    finally:
        for companion in companions:
            companion.stop()
        app.stop()


def test_a_companion_charting_through_a_tool_keeps_its_own_thread_and_a_hang_there_holds_up_nobody(tmp_path):
    sysfs = build_fake_sysfs(tmp_path / "sys", server_cards(2), bmc_vga=False)
    app = Sampler(interval_s=0.05, sysfs_root=sysfs)
    app.start()
    tool = BlockingTool()
    through_tool = app.companion([tool])
    in_process = app.companion()
    try:
        through_tool.start()
        through_tool.watch(tmp_path / "tool-run" / "telemetry.jsonl", pid=None)
        in_process.start()
        in_process.watch(tmp_path / "run" / "telemetry.jsonl", pid=None)
        assert tool.entered.wait(10)  # its read hangs now
        grows(tmp_path / "run" / "telemetry.jsonl")
        grows(tmp_path / "run" / "telemetry.jsonl")
        tool.release.set()  # the tool answers from now on: still on its own thread
        grows(tmp_path / "tool-run" / "telemetry.jsonl")
        grows(tmp_path / "tool-run" / "telemetry.jsonl")
        assert through_tool._thread is not None and through_tool._thread.is_alive()
        assert through_tool not in app._companions and in_process in app._companions
    finally:
        tool.release.set()
        for sampler in (through_tool, in_process, app):
            sampler.stop()


def test_after_round_is_told_after_each_round_that_read_something_and_only_then(tmp_path):
    sysfs = build_fake_sysfs(tmp_path / "sys", server_cards(2), bmc_vga=False)
    app = Sampler(interval_s=0.05, sysfs_root=sysfs, idle_after_s=0.0)  # nobody watching: no reads after detection
    rounds: list[int] = []
    app.after_round(lambda: rounds.append(lines(tmp_path / "run" / "telemetry.jsonl")))
    app.after_round(lambda: 1 / 0)  # a listener's bug stops nothing
    app.start()
    try:
        wait_until(lambda: app.source_name == "sysfs", 10, what="detection")
        told = len(rounds)
        threading.Event().wait(0.5)  # ten intervals with nothing to read
        assert len(rounds) == told
        app.watch(tmp_path / "run" / "telemetry.jsonl", pid=None)
        wait_until(lambda: len(rounds) >= told + 3, 10, what="three rounds told")
        # told after the round's samples were written
        assert all(written > 0 for written in rounds[told:])
        companion = app.companion()
        companion.start()
        app.watch(None, None)  # the app's own sampler reads nothing now; its companion does
        companion.watch(tmp_path / "other" / "telemetry.jsonl", pid=None)
        wait_until(lambda: companion in app._companions, 10, what="the companion to be adopted")
        now = len(rounds)
        wait_until(lambda: len(rounds) >= now + 3, 10, what="rounds of the companion alone told")
        companion.stop()
    finally:
        app.stop()
