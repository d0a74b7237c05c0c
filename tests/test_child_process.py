"""What the children the app talks to share: how they are ended (backend/child_process.py), the
quiet environment of every helper that imports LLaMA-Factory to answer a question
(backend/llama_factory/quiet_env.py), and the fields a run's new attempt clears."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time

import pytest

from backend.child_process import close_and_wait
from backend.runs import RunState, attempt_fields
from tests.harness import ROOT


def test_a_child_that_exits_on_eof_is_only_closed():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    killed = []
    close_and_wait(child, 30.0, before_kill=lambda: killed.append(True))
    assert child.returncode == 0 and killed == []


def test_a_child_that_ignores_eof_is_killed_after_the_wait():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdin=subprocess.PIPE)
    killed = []
    began = time.monotonic()
    close_and_wait(child, 0.5, kill_wait_s=5.0, before_kill=lambda: killed.append(child.poll()))
    assert killed == [None]  # asked before the kill, while the child still ran
    assert child.returncode == -9 and time.monotonic() - began < 10


def _by_path(relative: str):
    spec = importlib.util.spec_from_file_location(f"helper_{relative.replace('/', '_')}", ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("relative", "function"),
    [("backend/llama_factory/worker.py", "_quiet_environment"), ("backend/llama_factory/keys_worker.py", "_quiet_environment"), ("backend/data/lengths_worker.py", "quiet_environment")],
)
def test_every_lf_helper_answers_in_the_same_quiet_environment(relative, function, monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "ALLOW_EXTRA_ARGS", "USE_MCA", "FORCE_TORCHRUN"):
        monkeypatch.setenv(name, "1")
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "HF_DATASETS_DISABLE_PROGRESS_BARS", "LLAMAFACTORY_VERBOSITY", "TRANSFORMERS_VERBOSITY"):
        monkeypatch.setenv(name, "unset by the test")
    getattr(_by_path(relative), function)()
    assert {name: os.environ.get(name) for name in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "ALLOW_EXTRA_ARGS", "USE_MCA", "FORCE_TORCHRUN")} == dict.fromkeys(
        ("WORLD_SIZE", "RANK", "MASTER_ADDR", "ALLOW_EXTRA_ARGS", "USE_MCA", "FORCE_TORCHRUN")
    )
    assert (os.environ["CUDA_VISIBLE_DEVICES"], os.environ["HIP_VISIBLE_DEVICES"]) == ("", "")
    assert os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] == "1" and os.environ["LLAMAFACTORY_VERBOSITY"] == "WARN" and os.environ["TRANSFORMERS_VERBOSITY"] == "error"


def test_a_new_attempt_clears_the_last_ones_process_end_and_starter():
    ended = RunState(
        "r", "r", "2026", "p", "m", state="failed", pid=7, pid_started=1.0, exit_code=1, stop_reason="reason.x", stop_reason_params={"a": 1},
        started_at=2.0, ended_at=3.0, starter_pid=9, starter_started=4.0,
    )  # fmt: skip
    fields = attempt_fields(state="running", pid=8, pid_started=5.0, started_at=6.0)
    fresh = RunState(**{**ended.to_json(), **fields, "command": ()})
    assert (fresh.pid, fresh.pid_started, fresh.started_at, fresh.state) == (8, 5.0, 6.0, "running")
    assert (fresh.exit_code, fresh.stop_reason, fresh.stop_reason_params, fresh.ended_at, fresh.starter_pid, fresh.starter_started) == (None, "", {}, None, None, None)
    assert attempt_fields()["pid"] is None and attempt_fields()["stop_reason_params"] is not attempt_fields()["stop_reason_params"]
