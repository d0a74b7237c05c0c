"""The app-wide sampler (JSON lines, TTL cache, back-off, never blocking) and the
process-memory source measuring real child processes."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest

from backend.telemetry.base import Reading, SourceStatus
from backend.telemetry.fake_sysfs import build_fake_sysfs, set_vram_used
from backend.telemetry.process import PROCESS_LABEL, ProcessMemorySource
from backend.telemetry.sampler import Sampler, read_samples
from backend.telemetry.sysfs import SysfsSource
from tests.harness import wait_until

MB = 1024**2


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingSource:
    """Returns one reading per call, numbered by how many calls it has had."""

    name = "fake"

    def __init__(self, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail

    def probe(self) -> SourceStatus:
        return SourceStatus(self.name, True, "fake")

    def read(self) -> list[Reading]:
        self.calls += 1
        if self.fail:
            raise RuntimeError("tool exploded")
        return [Reading(0, self.calls, 100, 50.0, None, None, "fake", float(self.calls), "GPU 0")]


def test_each_tick_appends_one_json_line_per_reading(tmp_path, fake_sys_root):
    samples = tmp_path / "run" / "telemetry.jsonl"
    source = SysfsSource(fake_sys_root, env={})
    sampler = Sampler([source])
    sampler.watch(samples, pid=None)
    sampler.tick()
    set_vram_used(fake_sys_root, 1, 3 * 1024**3)
    sampler.tick()
    lines = samples.read_text().splitlines()
    assert len(lines) == 4  # two GPUs, two ticks
    readings = [Reading.from_json(json.loads(line)) for line in lines]
    assert [(r.gpu, r.used_bytes) for r in readings] == [(0, 794341376), (1, 4294967296), (0, 3 * 1024**3), (1, 4294967296)]
    assert read_samples(samples) == readings
    sampler.watch(None, None)
    sampler.tick()
    assert len(samples.read_text().splitlines()) == 4  # stopped writing


def test_read_samples_skips_a_half_written_last_line(tmp_path):
    path = tmp_path / "s.jsonl"
    reading = Reading(0, 1, 2, None, None, None, "fake", 1.0)
    path.write_text(json.dumps(reading.to_json()) + "\n" + json.dumps(reading.to_json())[:-3])
    assert read_samples(path) == [reading]
    assert read_samples(tmp_path / "missing.jsonl") == []


def test_latest_is_a_cache_ten_callers_cost_no_read():
    clock = FakeClock()
    source = CountingSource()
    sampler = Sampler([source], interval_s=1.0, ttl_s=5.0, clock=clock)
    assert sampler.latest() == []  # nothing sampled yet, and asking does not sample
    sampler.tick()
    first = [sampler.latest() for _ in range(10)]
    assert source.calls == 1
    assert all(r == first[0] for r in first) and first[0][0].used_bytes == 1
    clock.now += 5.1
    assert sampler.latest() == []  # stale: not shown as current


def test_a_failing_source_is_backed_off_after_three_failures():
    clock = FakeClock()
    source = CountingSource(fail=True)
    sampler = Sampler([source], clock=clock)
    for _ in range(3):
        assert sampler.tick() == []
    assert source.calls == 3
    sampler.tick()
    sampler.tick()
    assert source.calls == 3  # backed off: not run
    detail = sampler.statuses()[0].detail
    assert "backed off for 2 s after 3 failures" in detail and "tool exploded" in detail
    clock.now += 2.0
    sampler.tick()
    assert source.calls == 4  # tried again once the pause is over, failed again
    clock.now += 2.0
    sampler.tick()
    assert source.calls == 4  # the pause doubled to 4 s
    clock.now += 2.0
    source.fail = False
    assert sampler.tick()[0].used_bytes == 5  # recovered
    assert sampler.statuses()[0].detail == "fake"
    sampler.tick()
    assert source.calls == 6  # and no longer paused


def test_backoff_is_capped():
    clock = FakeClock()
    source = CountingSource(fail=True)
    sampler = Sampler([source], clock=clock)
    for _ in range(20):
        sampler.tick()
        clock.now += 1000
    assert "backed off for 60 s" in sampler.statuses()[0].detail


def test_a_tool_failure_flag_counts_as_a_failure_too():
    class FlaggingSource(CountingSource):
        def read(self):
            self.calls += 1
            self.last_failure = "timed out after 5 s"
            return []

    source = FlaggingSource()
    sampler = Sampler([source], clock=FakeClock())
    for _ in range(5):
        sampler.tick()
    assert source.calls == 3


def test_latest_never_waits_for_a_hung_source():
    entered, release = threading.Event(), threading.Event()

    class HungSource(CountingSource):
        def read(self):
            entered.set()
            release.wait(30)
            return super().read()

    sampler = Sampler([HungSource()], interval_s=0.05)
    sampler.start()
    try:
        assert entered.wait(10)
        # The sampler thread is stuck inside read(); callers still get an answer.
        assert sampler.latest() == []
        assert sampler.source_name == "fake"
        assert [s.name for s in sampler.statuses()] == ["fake"]
    finally:
        release.set()
        sampler.stop()


def test_the_thread_samples_and_writes_until_stopped(tmp_path, fake_sys_root):
    samples = tmp_path / "telemetry.jsonl"
    sampler = Sampler([SysfsSource(fake_sys_root, env={})], interval_s=0.05)
    sampler.watch(samples, pid=None)
    before = set(threading.enumerate())  # another test's sampler may still be stopping: not this one's
    sampler.start()
    sampler.start()  # a second start does not add a second thread
    try:
        threads = [t for t in threading.enumerate() if t.name == "rocboard-telemetry" and t not in before]
        assert len(threads) == 1 and threads[0].daemon
        wait_until(lambda: samples.exists() and len(samples.read_text().splitlines()) >= 4, 20, 0.02, what="four lines in the samples file")
        assert {r.gpu for r in sampler.latest()} == {0, 1}
    finally:
        sampler.stop()
    assert not threads[0].is_alive()


def test_detection_runs_on_the_thread_and_the_pid_reaches_the_process_source(monkeypatch, tmp_path):
    import backend.telemetry.detect as detect

    empty = tmp_path / "no-sys"
    real_detect = detect.detect_sources
    monkeypatch.setattr(
        detect, "detect_sources", lambda sysfs_root=None, pid_provider=None: real_detect(empty, {"PATH": str(tmp_path)}, pid_provider)
    )
    sampler = Sampler(interval_s=0.05)
    assert sampler.source_name == "detecting"
    sampler.watch(None, pid=psutil.Process().pid)
    sampler.start()
    try:
        wait_until(lambda: sampler.latest() != [], 20, 0.02, what="a first sample")
        assert sampler.source_name == "process"
        assert sampler.latest()[0].label == PROCESS_LABEL
        assert [s.name for s in sampler.statuses()] == ["sysfs", "amd-smi", "rocm-smi", "nvidia-smi", "process"]
    finally:
        sampler.stop()


def test_a_source_whose_probe_fails_is_not_used():
    class Broken(CountingSource):
        name = "broken"

        def probe(self):
            raise OSError("no such device")

    working = CountingSource()
    sampler = Sampler([Broken(), working])
    sampler.tick()
    assert sampler.source_name == "fake"
    assert not sampler.statuses()[0].available and "no such device" in sampler.statuses()[0].detail


def test_an_unwritable_samples_path_does_not_stop_sampling(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    sampler = Sampler([CountingSource()])
    sampler.watch(blocker / "sub" / "telemetry.jsonl", pid=None)  # parent is a file
    assert sampler.tick()[0].used_bytes == 1
    assert sampler.tick()[0].used_bytes == 2


# ---- process memory -------------------------------------------------------------------

ALLOCATE_50_MB = "import sys, time; data = b'x' * (50 * 1024 * 1024); print('ready', flush=True); time.sleep(60)"


def _start(code: str) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    return child


def test_process_source_measures_a_real_child_allocating_50_mb():
    child = _start(ALLOCATE_50_MB)
    try:
        readings = ProcessMemorySource(lambda: child.pid).read()
    finally:
        child.kill()
        child.wait()
    assert len(readings) == 1
    reading = readings[0]
    assert reading.used_bytes >= 50 * MB
    assert reading.total_bytes == psutil.virtual_memory().total
    assert (reading.gpu, reading.source, reading.label) == (0, "process", PROCESS_LABEL)


def test_process_source_sums_the_whole_tree():
    parent_code = (
        "import subprocess, sys, time;"
        f"c = subprocess.Popen([sys.executable, '-c', {ALLOCATE_50_MB!r}], stdout=subprocess.PIPE, text=True);"
        "c.stdout.readline(); print('ready', flush=True); time.sleep(60)"
    )
    parent = _start(parent_code)
    try:
        own = psutil.Process(parent.pid).memory_info().rss
        reading = ProcessMemorySource(lambda: parent.pid).read()[0]
    finally:
        for proc in psutil.Process(parent.pid).children(recursive=True):
            proc.kill()
        parent.kill()
        parent.wait()
    assert own < 50 * MB  # the parent alone is small...
    assert reading.used_bytes >= own + 50 * MB  # ...the tree includes the child's 50 MB


def test_process_source_with_no_or_a_finished_process_reads_nothing():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert ProcessMemorySource(lambda: child.pid).read() == []
    assert ProcessMemorySource(lambda: None).read() == []
    assert ProcessMemorySource(lambda: 1 / 0).read() == []


# ---- helpers --------------------------------------------------------------------------


@pytest.fixture
def fake_sys_root(tmp_path: Path) -> Path:
    return build_fake_sysfs(tmp_path / "sys")


def test_the_watched_runs_own_visible_devices_decide_which_gpus_are_charted(tmp_path, fake_sys_root):
    # The web process sees both GPUs; the run was started with HIP_VISIBLE_DEVICES=1.
    code = "import time; print('ready', flush=True); time.sleep(60)"
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
        env={"PATH": "/usr/bin:/bin", "HIP_VISIBLE_DEVICES": "1"},
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        sampler = Sampler([SysfsSource(fake_sys_root, env={})])
        assert [r.total_bytes for r in sampler.tick()] == [25753026560, 17163091968]
        sampler.watch(tmp_path / "telemetry.jsonl", pid=child.pid)
        assert [(r.gpu, r.total_bytes) for r in sampler.tick()] == [(0, 17163091968)]
    finally:
        child.kill()
        child.wait()
