"""A process named by its start key stays itself when the wall clock is stepped.

psutil's create_time() is the start in ticks since boot plus /proc/stat's btime, and the kernel
recomputes btime from the wall clock: a step (NTP, a VM's time sync) moves every live process's
create_time(). CI saw it: a run's own starter, recorded at the start of a 65-minute suite, read
as gone (btime had moved by a second) and the run as "failed". The clock step is simulated the
way the kernel shows it, by a btime one second later; everything else is real processes."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import psutil._pslinux as pslinux
import pytest

from backend.process_start import PROC, parse_start_ticks, start_key, start_ticks
from backend.runs import RunState, RunStore
from backend.runs.launcher import Launcher, ProcessIdentity, starter_alive
from backend.slurm.executor import SlurmExecutor
from ui.serve import app_dir_name, app_dir_owner_alive, process_stamp


def step_clock(monkeypatch, seconds: float) -> None:
    """From here on the kernel says the machine booted `seconds` later (the wall clock was
    stepped forward), as /proc/stat's btime does after a step; psutil's create_time() moves."""
    before = psutil.Process().create_time()
    booted = psutil.boot_time()
    monkeypatch.setattr(pslinux, "boot_time", lambda: booted + seconds)
    assert abs(psutil.Process().create_time() - before - seconds) < 0.01


@pytest.fixture
def sleeper():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def test_the_start_ticks_are_read_from_the_real_proc_stat_and_match_psutil():
    ticks = start_ticks(os.getpid())
    assert ticks is not None
    clock_ticks = os.sysconf("SC_CLK_TCK")
    assert abs(ticks / clock_ticks + psutil.boot_time() - psutil.Process().create_time()) < 0.02
    key = start_key(os.getpid())
    assert key is not None and key.endswith(f":{ticks}")
    assert key.partition(":")[0] == (PROC / "sys/kernel/random/boot_id").read_text().strip()
    assert start_key(2**22 + 12345) is None  # above any pid_max: no such process


def test_the_start_ticks_are_counted_from_the_last_parenthesis_of_the_command_name():
    real = (PROC / "self/stat").read_bytes()
    assert parse_start_ticks(real) == int(real.rpartition(b")")[2].split()[19])
    # A command name may hold spaces and parentheses (comm is whatever the program set).
    line = b"4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10"
    assert parse_start_ticks(line) == 987654
    assert parse_start_ticks(b"4242 (cut short) S 1 2 3") is None
    assert parse_start_ticks(b"no parenthesis 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21") is None
    assert parse_start_ticks(b"") is None


def test_a_live_process_stays_itself_after_the_clock_is_stepped_and_another_is_not(sleeper, monkeypatch):
    identity_before = ProcessIdentity.of(sleeper.pid)
    assert identity_before is not None and identity_before.start_key
    step_clock(monkeypatch, 1.0)
    # What psutil says moved with the clock: a record of it alone calls the process gone.
    assert ProcessIdentity(sleeper.pid, identity_before.started).process() is None
    assert identity_before.process() is not None
    # The same pid with another start (a reused pid) is not it, whatever its create_time.
    boot, _, ticks = identity_before.start_key.rpartition(":")
    assert ProcessIdentity(sleeper.pid, identity_before.started, f"{boot}:{int(ticks) + 1}").process() is None
    assert ProcessIdentity(sleeper.pid, identity_before.started, f"another-boot:{ticks}").process() is None
    assert ProcessIdentity.of(sleeper.pid).process() is not None  # recorded after the step
    sleeper.kill()
    sleeper.wait()
    assert identity_before.process() is None and ProcessIdentity.of(sleeper.pid) is None


def test_a_run_this_process_is_starting_is_still_its_own_after_the_clock_is_stepped(tmp_path, monkeypatch):
    """The two tests CI failed on, with the step made certain rather than waited for."""
    store = RunStore(tmp_path / "runs")
    local = store.create(name="t", preset="cpu-demo", model="m", files={"config.yaml": "x: 1\n", "train.log": ""})
    slurm = store.create(name="s", preset="cpu-demo", model="m", files={}, executor="slurm")
    assert local.starter_start_key == slurm.starter_start_key == start_key(os.getpid())
    step_clock(monkeypatch, 1.0)
    assert starter_alive(local)
    assert Launcher(store).refresh(local.id).state == "starting"

    class Refusing:
        def __getattr__(self, name):
            raise AssertionError(f"Slurm asked: {name}")

    assert SlurmExecutor(store, client=Refusing()).refresh(slurm).state == "starting"


def test_a_trainer_recorded_before_the_step_is_found_again_by_another_launcher(tmp_path, sleeper, monkeypatch):
    store = RunStore(tmp_path / "runs")
    run = store.create(name="t", preset="cpu-demo", model="m", files={"config.yaml": "x: 1\n", "train.log": ""})
    launched = Launcher(store).start(run.id, {}, command=[sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert launched.pid_start_key == start_key(launched.pid)
        step_clock(monkeypatch, -1.0)  # stepped back this time
        assert Launcher(store).refresh(run.id).state == "running"  # a restarted app re-attaching
    finally:
        Launcher(store).stop(run.id)


def test_an_app_folder_stays_its_owners_after_the_clock_is_stepped(monkeypatch):
    name = app_dir_name(os.getpid(), process_stamp(os.getpid()))
    step_clock(monkeypatch, 1.0)
    assert app_dir_owner_alive(name)
    assert not app_dir_owner_alive(app_dir_name(os.getpid(), (process_stamp(os.getpid()) or 0) + 1))


@pytest.mark.parametrize("value", [12, None, "x" * 65, "é:1", ["a"]])
def test_a_start_key_that_is_not_one_is_dropped_when_a_state_file_is_read(value):
    state = RunState.from_json({"id": "r", "name": "r", "created": "", "preset": "p", "model": "m", "pid_start_key": value, "starter_start_key": value})
    assert (state.pid_start_key, state.starter_start_key) == ("", "")
    kept = RunState.from_json({"id": "r", "name": "r", "created": "", "preset": "p", "model": "m", "pid_start_key": "b:1"})
    assert kept.pid_start_key == "b:1"
