"""The LLaMA-Factory helper (backend/llama_factory/zygote.py + helper_client.py): checks and
trainers forked from one process that imported torch, transformers and llamafactory once.

Real throughout: the real parser, the real `llamafactory-cli train` of the CPU demo forked from
the helper. One helper serves the module (each start imports torch: ~7 s on two cores).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
import yaml

from backend.llama_factory import helper_client
from backend.llama_factory.check import check_many_with_llamafactory
from backend.llama_factory.helper_client import cold_reason, install_shared
from backend.runs import CONFIG_FILE, FORM_FILE, LOG_FILE, OUTPUT_DIR
from backend.runs.launcher import helper_env
from backend.service import RocBoard, demo_form
from tests.harness import wait_for
from tests.tiers import starts

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def helper(tmp_path_factory, starts_lf_helper):
    made = install_shared(lambda: helper_env(tmp_path_factory.mktemp("helper-runs")))
    assert made.wait_ready(180), made.ready_info
    yield made
    helper_client.close_shared()


@pytest.fixture
def board(tmp_path, demo_assets, helper, monkeypatch):
    monkeypatch.delenv("ROCBOARD_WARM_START", raising=False)
    board = RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports", warm_helper=True)
    assert board.helper is helper
    yield board
    for run in board.store.list():
        if run.active:
            board.stop(run.id)


def new_run(board: RocBoard, form: dict, name: str) -> str:
    """A run directory as RunManager makes it (config.yaml, form.json, train.log), not started."""
    config = board.parse({**form, "run_name": name})[0]
    run_id = board.store.new_run_id(name)
    board.store.create(
        name=name,
        preset="cpu-demo",
        model="demo",
        files={
            CONFIG_FILE: yaml.safe_dump(board.run_args(config, None, board.store.root / run_id / OUTPUT_DIR), sort_keys=False),
            FORM_FILE: json.dumps({**form, "run_name": name}),
            LOG_FILE: "",
        },
        run_id=run_id,
    )
    return run_id


def ended(board: RocBoard, run_id: str, timeout: float = 240):
    return wait_for(lambda: (lambda s: s if not s.active else None)(board.run_manager.refresh(run_id)), timeout, interval=0.2)


def first_log_line(board: RocBoard, run_id: str, timeout: float = 120) -> bool:
    log = board.store.run_dir(run_id) / OUTPUT_DIR / "trainer_log.jsonl"
    return bool(wait_for(lambda: log.exists() and log.stat().st_size > 0, timeout, interval=0.1))


# --- checks ------------------------------------------------------------------------------------


def test_a_check_through_the_helper_finds_what_the_one_shot_worker_finds(board, monkeypatch):
    config = board.parse(demo_form())[0]
    good = board.run_args(config, None, Path("/tmp/unused-output"))
    bad = {**good, "learning_rate": "abc", "lora_rnak": 8, "bf16": True, "fp16": True}
    warm = check_many_with_llamafactory([good, bad])
    assert warm.import_seconds == 0.0  # answered by a fork of the helper: nothing imported
    monkeypatch.setattr(helper_client, "_shared", None)  # no helper: the one-shot worker.py
    cold = check_many_with_llamafactory([good, bad])
    assert cold.import_seconds and cold.import_seconds > 0
    assert warm.findings == cold.findings
    assert warm.findings[0] == []
    keys = {f.key for f in warm.findings[1]}
    assert {"learning_rate", "lora_rnak"} <= keys, warm.findings[1]


# --- warm trainers ------------------------------------------------------------------------------


def test_a_demo_run_starts_warm_and_finishes(board):
    result = board.start(demo_form())
    assert result.started, [f.line() for f in result.findings]
    run = result.run
    assert run.launch == "warm", board.launcher.last_cold_reason
    assert run.command[-2:] == ("train", "config.yaml") and run.pid_started
    final = ended(board, run.id)
    log = (board.store.run_dir(run.id) / LOG_FILE).read_text()
    assert (final.state, final.exit_code) == ("finished", 0), log[-3000:]
    assert (board.store.run_dir(run.id) / OUTPUT_DIR / "adapter_model.safetensors").is_file()
    assert "train_runtime" in log  # the trainer's own output went to train.log


def test_the_runs_environment_reaches_the_warm_trainer_and_no_secret_does(board, monkeypatch):
    monkeypatch.setenv("ROCBOARD_AUTH", "alice:secret-value")  # in the web process only
    run_id = new_run(board, {**demo_form(), "max_steps": 400, "save_steps": 400}, "env")
    state = board.run_manager.launch(run_id, {"OMP_NUM_THREADS": "1", "HIP_VISIBLE_DEVICES": ""})
    assert state.launch == "warm", board.launcher.last_cold_reason
    environ = wait_for(lambda: (seen := psutil.Process(state.pid).environ()) and "HIP_VISIBLE_DEVICES" in seen and seen, timeout=20)
    assert environ["HIP_VISIBLE_DEVICES"] == "" and environ["OMP_NUM_THREADS"] == "1"
    assert environ["LLAMABOARD_WORKDIR"] == str(board.store.run_dir(run_id) / OUTPUT_DIR)
    assert not any(name.startswith(("ROCBOARD_", "GRADIO_")) or "secret-value" in value for name, value in environ.items())
    final = ended(board, run_id)
    assert final.state == "finished", (board.store.run_dir(run_id) / LOG_FILE).read_text()[-3000:]
    # LLaMA-Factory wrote its running log where LLAMABOARD_WORKDIR (set in the child only) said.
    assert (board.store.run_dir(run_id) / OUTPUT_DIR / "running_log.txt").is_file()


def test_stopping_a_warm_run_is_graceful(board):
    result = board.start({**demo_form(), "max_steps": 5000, "save_steps": 5000, "run_name": "stopme"})
    run = result.run
    assert run.launch == "warm"
    assert first_log_line(board, run.id)
    final = board.stop(run.id)
    assert final.state == "stopped" and final.stop_reason == "reason.stopped_by_user"
    assert final.exit_code == 0  # LLaMA-Factory's SIGABRT handler stopped it, not a kill
    assert wait_for(lambda: not psutil.pid_exists(run.pid) or psutil.Process(run.pid).status() == psutil.STATUS_ZOMBIE, 10)


def test_a_killed_helper_leaves_its_trainer_running_and_restarts_on_the_next_request(board, helper):
    result = board.start({**demo_form(), "max_steps": 300, "save_steps": 300, "run_name": "orphan"})
    run = result.run
    assert run.launch == "warm"
    starts = helper.starts
    os.kill(helper.pid, signal.SIGKILL)
    assert wait_for(lambda: helper.state in ("dead", "broken"), 10)
    assert psutil.Process(run.pid).is_running()  # its own session: the helper's end is not its
    assert wait_for(lambda: not board.launcher.is_child(run.id), 10)
    final = ended(board, run.id)
    assert (final.state, final.stop_reason) == ("finished", "reason.finished_unwatched")
    # The next request starts a new helper (and waits for its imports).
    config = board.parse(demo_form())[0]
    answer = check_many_with_llamafactory([board.run_args(config, None, Path("/tmp/unused-output"))], timeout_s=180)
    assert answer.findings == [[]]
    assert helper.starts == starts + 1 and helper.state == "ready"


@starts("lf_helper")
def test_the_helper_ends_when_its_stdin_closes_and_leaves_trainers_alone(tmp_path, demo_assets):
    own = helper_client.LlamaFactoryHelper(helper_env(tmp_path), preload_extra=False)
    own.start()
    assert own.wait_ready(180)
    pid = own.pid
    own.close(timeout=10)
    assert wait_for(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 10)


# --- the cold path ---------------------------------------------------------------------------------


def test_a_run_the_helper_did_not_import_for_starts_cold(board, tmp_path):
    run_id = new_run(board, demo_form(), "cache")
    state = board.launcher.start(run_id, {"OMP_NUM_THREADS": "1", "HF_DATASETS_CACHE": str(tmp_path / "other-cache")})
    assert state.launch == "cold" and "HF_DATASETS_CACHE" in board.launcher.last_cold_reason
    board.stop(run_id)
    custom = new_run(board, demo_form(), "custom")
    state = board.launcher.start(custom, {}, command=[sys.executable, "-c", "print('stand-in')"])
    assert state.launch == "cold" and board.launcher.last_cold_reason == "custom command"
    assert ended(board, custom).exit_code == 0


def test_which_environments_may_start_warm():
    base = {"PATH": "/venv/bin", "HF_HUB_OFFLINE": "1", "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
    same = {"PATH": "/venv/bin", "HF_HUB_OFFLINE": "1"}
    assert cold_reason(same, base) is None
    lazy = {**same, "HIP_VISIBLE_DEVICES": "1", "HSA_OVERRIDE_GFX_VERSION": "11.0.0", "PYTORCH_HIP_ALLOC_CONF": "expandable_segments:True", "NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "1"}
    assert cold_reason(lazy, base) is None
    assert cold_reason({**same, "HF_HOME": "/elsewhere"}, base) == "environment differs: HF_HOME"
    assert cold_reason({**same, "FORCE_TORCHRUN": "1"}, base) == "torchrun"
    assert cold_reason({**same, "NNODES": "2"}, base) == "multi-node"
    assert cold_reason({**same, "MASTER_PORT": "29500"}, base) is not None  # any launch plan
    assert cold_reason({**same, "OMP_NUM_THREADS": "all"}, base) == "OMP_NUM_THREADS"


@pytest.mark.hostile
def test_the_helper_refuses_a_run_dir_that_is_not_a_real_run_directory(helper, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / CONFIG_FILE).write_text("x: 1\n")
    link = tmp_path / "link"
    link.symlink_to(target)
    env = helper.env
    assert helper.train(tmp_path / "missing", env, ready_timeout=60) is None
    assert helper.train(link, env, ready_timeout=60) is None
    assert helper.train(Path("relative/dir"), env, ready_timeout=60) is None
    assert not (target / LOG_FILE).exists()


@pytest.mark.hostile
def test_a_train_log_link_planted_in_the_run_is_not_followed(board, tmp_path):
    run_id = new_run(board, demo_form(), "planted")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    log = board.store.run_dir(run_id) / LOG_FILE
    log.unlink()
    log.symlink_to(victim)
    child = board.helper.train(board.store.run_dir(run_id), board.helper.env)
    assert child is not None
    assert child.wait(60) != 0  # the child refused to open train.log through the link
    assert victim.read_text() == "keep me\n"


# --- the web process stays light ----------------------------------------------------------------------

LIGHT_SCRIPT = textwrap.dedent(
    """
    import json, sys, tempfile, time
    from pathlib import Path
    from backend.service import RocBoard, demo_form

    runs = Path(tempfile.mkdtemp())
    board = RocBoard(runs, warm_helper=True)
    form = demo_form()
    board.preview(form)                       # LLaMA-Factory's parser, in a fork of the helper
    result = board.start(form)
    while board.run_manager.refresh(result.run.id).active:
        time.sleep(0.2)
    state = board.store.read(result.run.id)
    board.close_helper()
    heavy = sorted(m for m in ("torch", "transformers", "llamafactory", "peft", "trl", "datasets") if m in sys.modules)
    print(json.dumps({"heavy": heavy, "launch": state.launch, "state": state.state}))
    """
)


@starts("lf_helper", "trainer")
def test_the_web_process_imports_nothing_heavy_with_the_helper(demo_assets):
    env = {k: v for k, v in os.environ.items() if k != "ROCBOARD_WARM_START"}
    result = subprocess.run([sys.executable, "-c", LIGHT_SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=280, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == {"heavy": [], "launch": "warm", "state": "finished"}, result.stderr[-3000:]
