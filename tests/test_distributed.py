"""Multi-GPU / multi-node launch plans, and real torchrun runs of the demo model on the CPU.

The pure parts (environment, YAML keys, DeepSpeed JSON, per-node commands, Slurm script) are
checked against what LLaMA-Factory's launcher and torchrun actually read: the commands are
executed by bash against LLaMA-Factory's real launcher with a recording `torchrun`, and the
Slurm batch script is tested against a real Slurm (tests/test_slurm_cluster.py). Then two real runs, no mocks:
2 DDP workers under one torchrun (trains, logs, stops to zero processes), and 2 "nodes"
(two torchrun agents on loopback) that train one model together.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shlex
import shutil
import stat
import subprocess
import textwrap
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
import yaml

from backend.config import parse_form, to_llamafactory_args
from backend.config.distributed import (
    DEFAULT_RCCL_ENV,
    DistributedPlan,
    check_plan,
    deepspeed_config,
    deepspeed_file_name,
    deepspeed_files,
    distributed_env,
    extra_args,
    free_port,
    launch_env,
    network_env,
    node_commands,
    parse_env_lines,
    parse_gpu_list,
    parse_plan_form,
    plan_for_preset,
    plan_to_form,
    torchrun_dir,
    write_deepspeed_json,
)
from backend.config.presets import load_presets
from backend.runs import CONFIG_FILE, LOG_FILE, OUTPUT_DIR, RunStore
from backend.runs.logs import TRAINER_LOG, JsonlTail, parse_metric
from tests.harness import wait_for
from tests.tiers import starts

LF_LAUNCHER = Path(importlib.util.find_spec("llamafactory").origin).parent / "launcher.py"

# What a 2 x 8 MI300X job over Ethernet looks like.
TWO_NODES = DistributedPlan(
    gpus=tuple(range(8)),
    nproc=8,
    nnodes=2,
    master_addr="10.0.0.1",
    master_port=29600,
    ddp_timeout_s=5400,
    rccl_env=DEFAULT_RCCL_ENV + network_env("ens50f0", infiniband=False) + (("NCCL_DEBUG_SUBSYS", "INIT,NET"),),
)


def rules(findings):
    return {f.rule for f in findings if f.severity == "problem"}


def warnings(findings):
    return {f.rule for f in findings if f.severity == "warning"}


def split_command(line: str) -> tuple[str | None, dict[str, str], list[str]]:
    """(cd target, NAME=value prefix, the program and its arguments) of one node command."""
    tokens = shlex.split(line)
    directory = None
    if tokens[:1] == ["cd"]:
        assert tokens[2] == "&&", line
        directory, tokens = tokens[1], tokens[3:]
    env: dict[str, str] = {}
    while tokens and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", tokens[0]):
        name, _, value = tokens.pop(0).partition("=")
        env[name] = value
    return directory, env, tokens


def write_executable(path: Path, text: str) -> None:
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


# --- plans, environment and YAML keys -------------------------------------------------------


def test_single_node_ddp_env_and_yaml_keys():
    plan = DistributedPlan(gpus=(2, 3, 5), nproc=3, master_port=29611, ddp_timeout_s=900)
    assert check_plan(plan) == []
    env = distributed_env(plan)
    assert env["FORCE_TORCHRUN"] == "1"
    assert (env["NNODES"], env["NODE_RANK"], env["NPROC_PER_NODE"]) == ("1", "0", "3")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.1", "29611")
    assert env["HIP_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"] == "2,3,5"
    assert "ROCR_VISIBLE_DEVICES" not in env  # applied before HIP's; left to Slurm/containers
    assert env["NCCL_DEBUG"] == "WARN" and env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    # DDP: only the timeout; the backend is left to transformers (nccl = RCCL on ROCm).
    assert extra_args(plan) == {"ddp_timeout": 900}


def test_cpu_plan_uses_gloo_and_sets_no_device_variables():
    plan = DistributedPlan(on_cpu=True, nproc=2)
    assert check_plan(plan) == []
    env = distributed_env(plan)
    assert "HIP_VISIBLE_DEVICES" not in env and "CUDA_VISIBLE_DEVICES" not in env
    assert extra_args(plan) == {"ddp_timeout": 3600, "ddp_backend": "gloo", "use_cpu": True}


def test_launch_env_finds_this_environments_torchrun_first(tmp_path):
    decoy = tmp_path / "bin"
    decoy.mkdir()
    write_executable(decoy / "torchrun", "#!/bin/sh\nexit 3\n")
    env = launch_env(DistributedPlan(on_cpu=True, nproc=2), inherited_path=str(decoy))
    found = shutil.which("torchrun", path=env["PATH"])
    assert found is not None and Path(found).parent == torchrun_dir()
    assert env["PATH"].endswith(str(decoy))  # the inherited PATH is kept after it


@pytest.mark.parametrize(
    "strategy, offload, file_name, stage, offloaded",
    [
        ("zero2", False, "ds_z2_config.json", 2, set()),
        ("zero2", True, "ds_z2_offload_config.json", 2, {"offload_optimizer"}),
        ("zero3", False, "ds_z3_config.json", 3, set()),
        ("zero3", True, "ds_z3_offload_config.json", 3, {"offload_optimizer", "offload_param"}),
    ],
)
def test_deepspeed_json_is_written_beside_config_and_named_in_yaml(tmp_path, strategy, offload, file_name, stage, offloaded):
    plan = DistributedPlan(gpus=(0, 1), nproc=2, strategy=strategy, offload=offload)
    assert check_plan(plan) == []
    assert deepspeed_file_name(strategy, offload) == file_name
    assert extra_args(plan)["deepspeed"] == file_name
    path = write_deepspeed_json(plan, tmp_path)
    assert path == tmp_path / file_name
    written = json.loads(path.read_text())
    assert written == deepspeed_config(strategy, offload) == json.loads(deepspeed_files(plan)[file_name])
    zero = written["zero_optimization"]
    assert zero["stage"] == stage
    assert {k for k in zero if k.startswith("offload_")} == offloaded
    assert all(zero[k]["device"] == "cpu" for k in offloaded)
    # Batch sizes and precision are left to the trainer, so the JSON never contradicts the YAML.
    assert written["train_micro_batch_size_per_gpu"] == written["gradient_accumulation_steps"] == "auto"
    assert written["bf16"]["enabled"] == written["fp16"]["enabled"] == "auto"
    # Accelerate (which the HF Trainer hands the file to) reads the stage and offload as meant.
    from accelerate.utils.deepspeed import HfDeepSpeedConfig

    parsed = HfDeepSpeedConfig(str(path))
    assert parsed.is_zero3() == (stage == 3)
    assert parsed.is_offload() == bool(offloaded)
    assert [p.name for p in tmp_path.iterdir()] == [file_name]  # no partial file left behind


def test_ddp_writes_no_deepspeed_json(tmp_path):
    plan = DistributedPlan(gpus=(0, 1), nproc=2)
    assert write_deepspeed_json(plan, tmp_path) is None
    assert deepspeed_files(plan) == {} and "deepspeed" not in extra_args(plan)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError):
        deepspeed_config("ddp")


def test_check_plan_names_each_problem():
    good = DistributedPlan(gpus=(0, 1), nproc=2)
    assert check_plan(good) == []
    assert "nproc-over-gpus" in rules(check_plan(replace(good, nproc=3)))
    assert "idle-gpus" in warnings(check_plan(replace(good, nproc=1)))
    assert "duplicate-gpu" in rules(check_plan(replace(good, gpus=(0, 0))))
    assert "no-gpus" in rules(check_plan(replace(good, gpus=())))
    assert "offload-without-zero" in rules(check_plan(replace(good, offload=True)))
    assert "zero-on-cpu" in rules(check_plan(DistributedPlan(on_cpu=True, strategy="zero3")))
    assert "cpu-with-gpus" in rules(check_plan(DistributedPlan(on_cpu=True, gpus=(0,))))
    assert "node-rank-range" in rules(check_plan(replace(good, nnodes=2, node_rank=2)))
    assert "bad-port" in rules(check_plan(replace(good, master_port=70000)))
    assert "bad-timeout" in rules(check_plan(replace(good, ddp_timeout_s=0)))
    assert "env-overrides-plan" in rules(check_plan(replace(good, rccl_env=(("NNODES", "4"),))))
    assert "bad-env-name" in rules(check_plan(replace(good, rccl_env=(("NCCL DEBUG", "INFO"),))))
    # Several "nodes" on loopback is legal (the test below does it) but worth a warning.
    loopback = replace(good, nnodes=2)
    assert rules(check_plan(loopback)) == set() and "loopback-master" in warnings(check_plan(loopback))
    assert check_plan(TWO_NODES) == []


def test_form_parsers():
    assert parse_gpu_list("0, 2 4-6") == (0, 2, 4, 5, 6)
    assert parse_gpu_list("") == ()
    with pytest.raises(ValueError, match="'x'"):
        parse_gpu_list("0,x")
    with pytest.raises(ValueError):
        parse_gpu_list("3-1")
    assert parse_env_lines("# comment\nNCCL_DEBUG=INFO\n\nNCCL_SOCKET_IFNAME = eth0 \n") == (
        ("NCCL_DEBUG", "INFO"),
        ("NCCL_SOCKET_IFNAME", "eth0"),
    )
    with pytest.raises(ValueError, match="line 1"):
        parse_env_lines("NCCL_DEBUG")


def test_plan_form_round_trip_and_bad_fields():
    back, findings = parse_plan_form(plan_to_form(TWO_NODES))
    assert back == TWO_NODES and findings == []
    broken = {**plan_to_form(TWO_NODES), "dist_gpus": "0,a", "dist_nproc": "two", "dist_rccl_env": "NCCL_DEBUG", "dist_strategy": "fsdp"}
    plan, findings = parse_plan_form(broken)
    assert {"bad-gpu-list", "not-a-number", "bad-env-line", "bad-strategy"} <= rules(findings)
    assert [f.key for f in findings if f.rule == "not-a-number"] == ["dist_nproc"]
    cpu, findings = parse_plan_form({"dist_nproc": "2", "dist_gpus": "0,1"}, on_cpu=True)
    assert cpu.on_cpu and cpu.gpus == () and cpu.nproc == 2 and findings == []


def test_plans_from_the_shipped_presets():
    presets, errors = load_presets()
    assert errors == []
    mi300x = plan_for_preset(presets["mi300x"])
    assert mi300x.gpus == tuple(range(8)) and mi300x.nproc == 8 and not mi300x.on_cpu
    assert check_plan(mi300x) == []
    cpu = plan_for_preset(presets["cpu-demo"])
    assert cpu.on_cpu and cpu.nproc == 1 and check_plan(cpu) == []


# --- what each node runs ---------------------------------------------------------------------


def test_node_commands_for_two_nodes_of_eight_gpus(tmp_path):
    config = tmp_path / "runs dir" / "run-1" / "config.yaml"  # a space: the quoting must hold
    commands = node_commands(TWO_NODES, config, extra_env={"PYTORCH_HIP_ALLOC_CONF": "expandable_segments:True"})
    assert len(commands) == 2
    for rank, line in enumerate(commands):
        directory, env, program = split_command(line)
        assert directory == str(config.parent)
        assert program == ["llamafactory-cli", "train", "config.yaml"]
        assert env["FORCE_TORCHRUN"] == "1"
        assert env["NNODES"] == "2" and env["NODE_RANK"] == str(rank) and env["NPROC_PER_NODE"] == "8"
        assert env["MASTER_ADDR"] == "10.0.0.1" and env["MASTER_PORT"] == "29600"
        assert env["HIP_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
        assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "ens50f0"
        assert env["NCCL_IB_DISABLE"] == "1" and env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
        assert env["PYTORCH_HIP_ALLOC_CONF"] == "expandable_segments:True"
        assert "PATH" not in env  # commands are portable: no path of this machine
    # The two nodes differ in NODE_RANK only.
    first, second = (split_command(c)[1] for c in commands)
    assert {k for k in first if first[k] != second[k]} == {"NODE_RANK"}
    # The timeout is in the shared YAML, not in the environment.
    assert extra_args(TWO_NODES)["ddp_timeout"] == 5400


def test_llamafactory_launcher_reads_the_variables_we_set():
    """Guard against a LLaMA-Factory upgrade renaming what its launcher reads."""
    source = LF_LAUNCHER.read_text()
    read = set(re.findall(r'os\.getenv\("([A-Z_]+)"', source)) | set(re.findall(r'is_env_enabled\("([A-Z_]+)"', source))
    assert {"FORCE_TORCHRUN", "NNODES", "NODE_RANK", "NPROC_PER_NODE", "MASTER_ADDR", "MASTER_PORT"} <= read
    assert "--nnodes {nnodes} --node_rank {node_rank} --nproc_per_node {nproc_per_node}" in source
    assert "--master_addr {master_addr} --master_port {master_port}" in source


@starts("trainer")
def test_node_command_makes_llamafactory_run_the_right_torchrun(tmp_path):
    """Node 1's command, run by bash, through LLaMA-Factory's real launcher; a recording
    `torchrun` stands in for the real one (there are no 8 GPUs here)."""
    fake_bin = tmp_path / "fake-bin"
    fake_bin.mkdir()
    record = tmp_path / "record"
    record.mkdir()
    write_executable(
        fake_bin / "torchrun",
        """
        #!/bin/sh
        printf '%s\\n' "$@" > "$RECORD_DIR/argv"
        env > "$RECORD_DIR/env"
        """,
    )
    run_dir = tmp_path / "run dir"
    run_dir.mkdir()
    (run_dir / CONFIG_FILE).write_text("stage: sft\n")
    line = node_commands(TWO_NODES, run_dir / CONFIG_FILE)[1]
    env = dict(os.environ, RECORD_DIR=str(record), PATH=os.pathsep.join([str(fake_bin), str(torchrun_dir()), os.environ["PATH"]]))
    for name in ("NNODES", "NODE_RANK", "NPROC_PER_NODE", "MASTER_ADDR", "MASTER_PORT", "FORCE_TORCHRUN", "RDZV_ID"):
        env.pop(name, None)  # only the command line may set them
    done = subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    argv = (record / "argv").read_text().splitlines()
    assert argv == [
        "--nnodes", "2", "--node_rank", "1", "--nproc_per_node", "8",
        "--master_addr", "10.0.0.1", "--master_port", "29600",
        str(LF_LAUNCHER), CONFIG_FILE,
    ]  # fmt: skip
    seen = dict(line.split("=", 1) for line in (record / "env").read_text().splitlines() if "=" in line)
    # torchrun (and so every worker) inherits the RCCL settings and the visible devices.
    assert seen["NCCL_SOCKET_IFNAME"] == "ens50f0" and seen["NCCL_IB_DISABLE"] == "1"
    assert seen["HIP_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert seen["PWD"] == str(run_dir)  # the trainer starts beside config.yaml (and the DeepSpeed JSON)


# --- real torchrun runs of the demo model on the CPU ----------------------------------------


def demo_args(demo_assets, output_dir: Path, plan: DistributedPlan, **overrides) -> dict:
    from backend.service import demo_form

    # Pinned here: the epoch arithmetic below depends on them, whatever the demo's defaults become.
    pinned = {"batch_size": DEMO_BATCH, "grad_accum": 1, "learning_rate": 5e-3, "logging_steps": 1}
    config, findings = parse_form({**demo_form(), **pinned, **overrides}, use_cpu=True)
    assert findings == []
    args = to_llamafactory_args(config, output_dir)
    args.update(extra_args(plan))
    return args


def new_run(store: RunStore, name: str, args: dict) -> str:
    state = store.create(name, "cpu-demo", args["model_name_or_path"], {CONFIG_FILE: yaml.safe_dump(args, sort_keys=False), LOG_FILE: ""}, run_id=name)
    return state.id


def points_of(run_dir: Path) -> list:
    path = run_dir / OUTPUT_DIR / TRAINER_LOG
    return [p for p in map(parse_metric, JsonlTail(path).poll()) if p is not None] if path.exists() else []


def workers_of(root: psutil.Process) -> list[psutil.Process]:
    """The trainer processes: children of the torchrun agent under `root`."""
    workers = []
    for process in root.children(recursive=True):
        try:
            if any("torchrun" in part for part in process.cmdline()[:3]):
                workers += process.children()
        except psutil.NoSuchProcess:
            continue
    return workers


def isolated_env(tmp_path: Path, node: str) -> dict[str, str]:
    # Each "node" gets its own datasets cache, as separate machines would.
    return {"HF_DATASETS_CACHE": str(tmp_path / f"datasets-cache-{node}")}


DEMO_BATCH = 4  # per worker (demo_form)


def two_worker_steps_per_epoch(log: str) -> int:
    """Optimizer steps per epoch with 2 workers, from the example count the trainer logged:
    the sampler gives each worker half the examples (padded), so an epoch takes about half
    the steps one process alone would need."""
    examples = int(re.search(r"Num examples = ([\d,]+)", log).group(1).replace(",", ""))
    per_epoch = math.ceil(math.ceil(examples / 2) / DEMO_BATCH)
    assert per_epoch < math.ceil(examples / DEMO_BATCH)  # distinguishable from 1 process
    return per_epoch


@starts("trainer")
def test_two_ddp_workers_on_cpu_train_log_and_stop_to_zero_processes(launcher, tmp_path, demo_assets):
    plan = DistributedPlan(on_cpu=True, nproc=2, master_port=free_port(), ddp_timeout_s=300)
    assert check_plan(plan) == []
    store = launcher.store
    store.ensure_root()
    run_id = new_run(store, "ddp2", demo_args(demo_assets, store.root / "ddp2" / OUTPUT_DIR, plan, max_steps=3000, save_steps=5000))
    run_dir = store.run_dir(run_id)
    state = launcher.start(run_id, {**launch_env(plan), **isolated_env(tmp_path, "0")})
    root = psutil.Process(state.pid)

    def twelve_losses():
        points = points_of(run_dir)
        return points if sum(p.loss is not None for p in points) >= 12 else None

    points = wait_for(twelve_losses, timeout=240)
    log = (run_dir / LOG_FILE).read_text(errors="replace")
    assert points, f"no loss points arrived\n{log[-3000:]}"
    # Two workers under one torchrun agent, both in the process group.
    workers = workers_of(root)
    assert len(workers) == 2, [w.cmdline() for w in workers]
    assert all(str(LF_LAUNCHER) in " ".join(w.cmdline()) for w in workers)
    assert "Process rank: 0, world size: 2" in log and "Process rank: 1, world size: 2" in log
    assert f"Total train batch size (w. parallel, distributed & accumulation) = {2 * DEMO_BATCH}" in log
    # Each optimizer step consumed both workers' batches: the epoch advances twice as fast.
    per_epoch = two_worker_steps_per_epoch(log)
    for point in points:
        assert point.epoch == pytest.approx(point.step / per_epoch)
    losses = [p.loss for p in points if p.loss is not None]
    assert sum(losses[-3:]) < sum(losses[:3])
    assert [p.step for p in points] == sorted({p.step for p in points})

    tree = [root, *root.children(recursive=True)]
    assert len(tree) >= 4  # llamafactory-cli, torchrun, 2 workers
    final = launcher.stop(run_id)
    assert final.state == "stopped"
    survivors = [p.pid for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert survivors == []


@starts("trainer")
def test_two_nodes_on_loopback_train_one_model(launcher, tmp_path, demo_assets):
    plan = DistributedPlan(on_cpu=True, nproc=1, nnodes=2, master_addr="127.0.0.1", master_port=free_port(), ddp_timeout_s=300)
    assert rules(check_plan(plan)) == set()
    store = launcher.store
    store.ensure_root()
    # The same config file on both nodes (node 0's output dir; node 1 writes nothing there).
    args = demo_args(demo_assets, store.root / "node0" / OUTPUT_DIR, plan, max_steps=6, save_steps=100)
    runs = [new_run(store, f"node{rank}", args) for rank in (0, 1)]
    for rank, run_id in enumerate(runs):
        launcher.start(run_id, {**launch_env(replace(plan, node_rank=rank)), **isolated_env(tmp_path, str(rank))})
    ended = wait_for(lambda: all(not store.read(r).active for r in runs), timeout=300, interval=0.5)
    logs = [(store.run_dir(r) / LOG_FILE).read_text(errors="replace") for r in runs]
    assert ended, "the two-node run did not end in time\n" + "\n---\n".join(log[-2000:] for log in logs)
    for run_id, log in zip(runs, logs, strict=True):
        state = store.read(run_id)
        assert (state.state, state.exit_code) == ("finished", 0), log[-3000:]
    assert "Multi-node training enabled: num nodes: 2, node rank: 1" in logs[1]
    assert "Process rank: 0, world size: 2" in logs[0] and "Process rank: 1, world size: 2" in logs[1]
    output = store.run_dir(runs[0]) / OUTPUT_DIR
    points = points_of(store.run_dir(runs[0]))
    assert [p.step for p in points if p.loss is not None] == [1, 2, 3, 4, 5, 6]
    assert points[-1].epoch == pytest.approx(6 / two_worker_steps_per_epoch(logs[0]))
    assert (output / "adapter_model.safetensors").is_file()
    assert not (store.run_dir(runs[1]) / OUTPUT_DIR / TRAINER_LOG).exists()  # only global rank 0 logs
