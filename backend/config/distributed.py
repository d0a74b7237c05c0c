"""Multi-GPU and multi-node launches on the engines LLaMA-Factory already uses.

RocBoard does not launch workers itself. LLaMA-Factory's own launcher
(`llamafactory/launcher.py`) turns `llamafactory-cli train config.yaml` into

    torchrun --nnodes $NNODES --node_rank $NODE_RANK --nproc_per_node $NPROC_PER_NODE \
             --master_addr $MASTER_ADDR --master_port $MASTER_PORT .../launcher.py config.yaml

when FORCE_TORCHRUN=1, and the Trainer brings up DDP or DeepSpeed from the YAML. So a
distributed run is the ordinary run plus three things, all computed here from one typed
`DistributedPlan`:

- environment variables for the trainer (`launch_env`, `distributed_env`),
- keys merged into the LLaMA-Factory YAML (`extra_args`), and
- for ZeRO, a DeepSpeed JSON beside config.yaml (`deepspeed_files`, `write_deepspeed_json`).

For clusters it writes what each node runs (`node_commands`), and what a Slurm run's node
tasks give their trainers (`slurm_launch_env`; the batch script itself is backend/slurm/script.py).
Nothing here imports torch: the web process builds plans and commands.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from backend.config import NUMBER_RANGES, NotANumber, NumberTooLarge, field_noun, huge_finding, not_a_number_finding, parse_number, parse_text, range_finding, schema, shown, too_many_finding
from backend.config.presets import HardwarePreset
from backend.config.schema import DEFAULT_DDP_TIMEOUT_S, DEFAULT_MASTER_PORT, DEFAULT_RCCL_ENV, STRATEGIES
from backend.findings import Finding
from backend.i18n import Message
from backend.security.child_env import ENV_NAME as _ENV_NAME  # the one shell-name rule
from backend.security.child_env import MAX_NAME_LENGTH, MAX_VALUE_LENGTH, Refusal, allowed_settings, refusal, value_refusal

Strategy = Literal["ddp", "zero2", "zero3"]

# The defaults, STRATEGIES and the plan's form fields live in backend/config/schema.py (PLAN_FIELDS).

# Prefixes of variables that belong to the collective-communication layer; a preset's env
# entries with these prefixes become the plan's editable rccl_env. Which variables may be
# set at all is backend/security/child_env.py's rule (`refusal`), checked in check_plan.
RCCL_ENV_PREFIXES: tuple[str, ...] = ("NCCL_", "RCCL_", "TORCH_NCCL_", "GLOO_", "HSA_FORCE_FINE_GRAIN")

# The variables RocBoard itself sets from the plan; rccl_env may not override them.
PLAN_VARIABLES: tuple[str, ...] = (
    "FORCE_TORCHRUN",
    "NNODES",
    "NODE_RANK",
    "NPROC_PER_NODE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "HIP_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
)
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "0.0.0.0")
# Set by launch_env for a CPU plan of several processes; the launcher turns it into the
# trainer's PYTHONPATH (RocBoard's own trainer_site folder): never a user's setting.
CPU_WORKERS_VARIABLE = "ROCBOARD_CPU_WORKERS"


@dataclass(frozen=True)
class DistributedPlan:
    """How one run is spread over processes, GPUs and nodes.

    `gpus` and `nproc` are per node: every node of a multi-node job runs the same plan with
    its own `node_rank`."""

    gpus: tuple[int, ...] = ()  # device indices on each node (HIP_VISIBLE_DEVICES); () on CPU
    nproc: int = 1  # worker processes per node, normally one per GPU
    strategy: Strategy = "ddp"
    offload: bool = False  # ZeRO only: optimizer state (ZeRO-2) and parameters (ZeRO-3) in CPU RAM
    master_port: int = DEFAULT_MASTER_PORT
    ddp_timeout_s: int = DEFAULT_DDP_TIMEOUT_S
    rccl_env: tuple[tuple[str, str], ...] = DEFAULT_RCCL_ENV  # editable NCCL_*/RCCL_* settings, in order
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    on_cpu: bool = False  # CPU workers over gloo (the demo and the tests); no GPU variables

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc

    @property
    def multi_node(self) -> bool:
        return self.nnodes > 1


def gpus_asked(plan: DistributedPlan | None) -> int:
    """How many GPUs (slots) a local run asks for side by side: its plan's GPU count; one for
    a run without a plan or on the CPU (its workers share its one slot). The plan's list is a
    count here: the node's allocator picks which GPUs (backend/runs/gpu_slots.py), unless the
    run names them (the placement's `local_gpus`, which must be as many)."""
    if plan is None or plan.on_cpu or not plan.gpus:
        return 1
    return len(plan.gpus)


# --- the form boundary ----------------------------------------------------------------------


class GpuListTooLarge(ValueError):
    """A GPU index above NUMBER_RANGES["dist_gpus"], or more entries than a node has GPUs."""

    def __init__(self, index: int | None = None, count: int | None = None):
        super().__init__(f"GPU index {index} is too large" if index is not None else f"{count} or more GPUs listed")
        self.index, self.count = index, count


class BadGpuEntry(ValueError):
    """A part of a GPU list that is neither an index nor a range."""

    def __init__(self, part: str):
        super().__init__(f"{part} is not a GPU index or a range like 0-3")
        self.part = part


class BadEnvLine(ValueError):
    """A line of the RCCL settings that is not NAME=value."""

    def __init__(self, number: int, line: str):
        super().__init__(f"line {number} ({line!r}) is not NAME=value")
        self.number, self.line = number, line


def parse_gpu_list(text: str) -> tuple[int, ...]:
    """`"0,1, 2"` -> (0, 1, 2); ranges as `"0-3"`. ValueError names the bad part;
    GpuListTooLarge (checked before a range is expanded: `0-1000000` must cost nothing)
    for an index or a count beyond NUMBER_RANGES["dist_gpus"]."""
    highest = int(NUMBER_RANGES["dist_gpus"].high)
    gpus: list[int] = []
    for part in re.split(r"[,\s]+", str(text).strip()):
        if not part:
            continue
        bounds = part.split("-")
        try:
            if len(bounds) > 2 or any(not bound.isdigit() or not bound.isascii() for bound in bounds):
                raise ValueError
            if any(len(bound) > 6 for bound in bounds):  # int() of thousands of digits is slow
                raise GpuListTooLarge(index=10**6)
            first, last = int(bounds[0]), int(bounds[-1])
            if last < first:
                raise ValueError
        except GpuListTooLarge:
            raise
        except ValueError:
            raise BadGpuEntry(shown(part)) from None
        if last > highest:
            raise GpuListTooLarge(index=last)
        if len(gpus) + last - first + 1 > highest + 1:
            raise GpuListTooLarge(count=len(gpus) + last - first + 1)
        gpus.extend(range(first, last + 1))
    return tuple(gpus)


def parse_env_lines(text: str) -> tuple[tuple[str, str], ...]:
    """`NAME=value` lines (blank lines and # comments skipped) -> ordered pairs.
    BadEnvLine names the first line that is not NAME=value."""
    pairs: list[tuple[str, str]] = []
    for number, line in enumerate(str(text).splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not _ENV_NAME.match(name):
            raise BadEnvLine(number, line)
        pairs.append((name, value.strip()))
    return tuple(pairs)


def format_env_lines(pairs: tuple[tuple[str, str], ...]) -> str:
    return "\n".join(f"{name}={value}" for name, value in pairs)


def rccl_env_from_preset(preset_env: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """The defaults, overlaid with the preset's NCCL_*/RCCL_*/TORCH_NCCL_*/GLOO_* entries
    (only those child_env lets a user set: load_presets already refused the others)."""
    merged = dict(DEFAULT_RCCL_ENV)
    merged.update((k, v) for k, v in allowed_settings(preset_env) if k.startswith(RCCL_ENV_PREFIXES))
    return tuple(merged.items())


def plan_for_preset(preset: HardwarePreset, master_port: int = DEFAULT_MASTER_PORT) -> DistributedPlan:
    """The plan a preset starts from: every GPU of one node, DDP, the preset's RCCL settings."""
    rccl_env = rccl_env_from_preset(preset.env)
    if preset.use_cpu:
        return DistributedPlan(gpus=(), nproc=1, on_cpu=True, master_port=master_port, rccl_env=rccl_env)
    count = max(1, preset.devices_per_node)
    return DistributedPlan(gpus=tuple(range(count)), nproc=count, master_port=master_port, rccl_env=rccl_env)


def network_env(interface: str = "", infiniband: bool = True) -> tuple[tuple[str, str], ...]:
    """RCCL network settings for multi-node jobs.

    `interface` pins the socket transport (bootstrap and, without InfiniBand/RoCE, the data)
    to one NIC; gloo (used by torchrun's rendezvous-side collectives and the CPU object
    gathers) gets the same one, or the nodes can pick NICs that cannot see each other."""
    pairs: list[tuple[str, str]] = []
    if interface:
        pairs += [("NCCL_SOCKET_IFNAME", interface), ("GLOO_SOCKET_IFNAME", interface)]
    if not infiniband:
        pairs.append(("NCCL_IB_DISABLE", "1"))
    return tuple(pairs)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now, for a single-node run's MASTER_PORT.

    There is a short window between closing this socket and torchrun binding the port; a
    collision there fails the start loudly (EADDRINUSE in train.log), never silently."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


# The page's fields for a plan (backend/config/schema.py PLAN_FIELDS) and what each holds before
# the user touches it. form.json keeps them, so a run's plan can be rebuilt from its directory.
PLAN_FORM_DEFAULTS: dict[str, Any] = schema.plan_form_defaults()


def _plan_form_value(form_field: schema.Field, plan: DistributedPlan) -> Any:
    value = getattr(plan, form_field.path)
    if form_field.kind == "gpus":
        return visible_devices(plan)
    if form_field.kind == "env_lines":
        return format_env_lines(value)
    return value


def plan_to_form(plan: DistributedPlan) -> dict[str, Any]:
    """The page's field values that show `plan` (the inverse of parse_plan_form)."""
    return {f.name: _plan_form_value(f, plan) for f in schema.plan_fields()}


# The plan's fields Slurm decides for a Slurm run (its nodes, each node's rank, the master and
# its port, the GPUs it hands the job): a Slurm run's form.json keeps their defaults.
SLURM_DECIDES: tuple[str, ...] = ("dist_nnodes", "dist_node_rank", "dist_master_addr", "dist_master_port", "dist_gpus")
# What a run's form.json holds, and reading it back: backend/config/run_form.py.

def parse_plan_form(values: Mapping[str, Any], on_cpu: bool = False, check: bool = True) -> tuple[DistributedPlan, list[Finding]]:
    """A plan from the page's raw field values, and every finding about it (unparseable
    fields fall back to their defaults with a finding each, then check_plan runs, unless
    `check` is False: the caller checks the plan it makes of this one)."""
    findings: list[Finding] = []

    defaults = schema.plan_form_defaults()

    def raw(name: str) -> Any:
        value = values.get(name, defaults[name])
        return value.strip() if isinstance(value, str) else value

    def whole(name: str) -> int:
        """A whole number inside NUMBER_RANGES[name], else a finding and the default (so the
        plan never holds 100,000 nodes: the preview writes one command per node)."""
        value, what = raw(name), field_noun(name)
        try:
            number = int(parse_number(value, int))
        except NumberTooLarge:
            findings.append(huge_finding(name, value, what))
            return int(defaults[name])
        except NotANumber:
            findings.append(not_a_number_finding(name, value, what, int))
            return int(defaults[name])
        out_of_range = range_finding(name, number, what)
        if out_of_range is not None:
            findings.append(out_of_range)
            return int(defaults[name])
        return number

    gpus: tuple[int, ...] = ()
    if not on_cpu:
        listed = raw("dist_gpus")
        if isinstance(listed, int) and not isinstance(listed, bool) and 0 <= listed < 10**6:
            listed = str(listed)  # one index, sent as a number
        text, bad_text = parse_text(listed, field_noun("dist_gpus"), schema.field("dist_gpus").max_chars, key="dist_gpus")
        try:
            if bad_text is not None:
                findings.append(bad_text)
            else:
                gpus = parse_gpu_list(text)
        except GpuListTooLarge as error:
            highest = int(NUMBER_RANGES["dist_gpus"].high)
            if error.index is not None:
                findings.append(range_finding("dist_gpus", error.index, field_noun("dist_gpu_index")))  # type: ignore[arg-type]  # out of range by construction
            else:
                findings.append(too_many_finding("dist_gpus", field_noun("dist_gpus"), error.count or highest + 2, highest + 1))
        except BadGpuEntry as error:
            findings.append(Finding.of("dist_gpus", "bad-gpu-list", part=error.part))
    try:
        rccl_env = parse_env_lines(str(raw("dist_rccl_env") or ""))
    except BadEnvLine as error:
        findings.append(Finding.of("dist_rccl_env", "bad-env-line", number=error.number, line=repr(error.line)))
        rccl_env = DEFAULT_RCCL_ENV
    strategy = raw("dist_strategy")
    # 253: the longest DNS name; an address goes into every node's command line.
    master_addr, bad_addr = parse_text(raw("dist_master_addr"), field_noun("dist_master_addr"), schema.field("dist_master_addr").max_chars, key="dist_master_addr")
    if bad_addr is not None:
        findings.append(bad_addr)
        master_addr = str(defaults["dist_master_addr"])
    strategy = strategy if isinstance(strategy, str) and len(strategy) <= 64 else shown(strategy)  # check_plan refuses it
    plan = DistributedPlan(
        gpus=gpus,
        nproc=whole("dist_nproc"),
        strategy=strategy,  # type: ignore[arg-type]  # check_plan reports a bad one
        offload=bool(raw("dist_offload")),
        master_port=whole("dist_master_port"),
        ddp_timeout_s=whole("dist_ddp_timeout_s"),
        rccl_env=rccl_env,
        nnodes=whole("dist_nnodes"),
        node_rank=whole("dist_node_rank"),
        master_addr=master_addr,
        on_cpu=on_cpu,
    )
    return plan, findings + (check_plan(plan) if check else [])


# --- checks --------------------------------------------------------------------------------


def check_plan(plan: DistributedPlan) -> list[Finding]:
    """Problems (block the start) and warnings in a plan, each with its fix."""
    findings: list[Finding] = []
    add = findings.append

    if plan.strategy not in STRATEGIES:
        add(Finding.of("strategy", "bad-strategy", strategy=shown(plan.strategy), choices=", ".join(STRATEGIES)))
    # Each number inside its range of the schema (parse_plan_form already refused form
    # values outside them; this holds for a plan built in code or read back).
    for form_field in schema.plan_fields():
        if form_field.kind == "int" and form_field.range is not None and form_field.name != "dist_node_rank":
            out_of_range = range_finding(form_field.name, getattr(plan, form_field.path), field_noun(form_field.name), key=form_field.path)
            if out_of_range is not None:
                add(replace(out_of_range, patch={}))
    if plan.nnodes >= 1 and not 0 <= plan.node_rank < plan.nnodes:
        add(Finding.of("node_rank", "node-rank-range", rank=plan.node_rank, last=plan.nnodes - 1))
    if 1 <= plan.master_port < 1024:
        add(Finding.of("master_port", "privileged-port", severity="warning", port=plan.master_port))
    highest_gpu = int(NUMBER_RANGES["dist_gpus"].high)
    if len(plan.gpus) > highest_gpu + 1:
        add(too_many_finding("gpus", field_noun("dist_gpus"), len(plan.gpus), highest_gpu + 1))
    elif plan.gpus and max(plan.gpus) > highest_gpu:
        beyond = range_finding("dist_gpus", max(plan.gpus), field_noun("dist_gpu_index"), key="gpus")
        if beyond is not None:  # always: the index is past the highest
            add(replace(beyond, patch={}))
    if not plan.master_addr.strip():
        add(Finding.of("master_addr", "no-master-addr"))
    elif plan.multi_node and plan.master_addr.strip() in _LOOPBACK_HOSTS:
        # A warning, not a problem: several "nodes" on one machine is a valid test.
        add(Finding.of("master_addr", "loopback-master", severity="warning", address=plan.master_addr))

    if plan.on_cpu:
        if plan.gpus:
            add(Finding.of("gpus", "cpu-with-gpus"))
        if plan.strategy != "ddp":
            add(Finding.of("strategy", "zero-on-cpu"))
    else:
        gpus = len(set(plan.gpus))
        if not plan.gpus:
            add(Finding.of("gpus", "no-gpus"))
        if any(g < 0 for g in plan.gpus):
            add(Finding.of("gpus", "negative-gpu"))
        if gpus != len(plan.gpus):
            add(Finding.of("gpus", "duplicate-gpu"))
        if plan.gpus and plan.nproc > gpus:
            add(Finding.of("nproc", "nproc-over-gpus", nproc=plan.nproc, gpus=gpus))
        elif plan.gpus and plan.nproc < gpus:
            add(Finding.of("nproc", "idle-gpus", severity="warning", idle=gpus - plan.nproc, nproc=plan.nproc, gpus=gpus))
    if plan.offload and plan.strategy == "ddp":
        add(Finding.of("offload", "offload-without-zero"))

    for name, value in plan.rccl_env:
        # These lines become the trainer's environment, where a name like PYTHONWARNINGS,
        # BROWSER, PYTHONPATH or LD_PRELOAD runs code: child_env's allow-list decides.
        if _ENV_NAME.match(name) and name in PLAN_VARIABLES:
            add(Finding.of("rccl_env", "env-overrides-plan", name=name))
            refused = value_refusal(name, value)
        else:
            refused = refusal(name, value)
        if refused is not None:
            add(_refusal_finding(refused, name))
    return findings


def _refusal_finding(refused: Refusal, name: str) -> Finding:
    """child_env's refusal of one RCCL line, as a finding from its message id."""
    shown_name = repr(name) if refused.rule == "bad-env-name" else name
    limit = MAX_NAME_LENGTH if refused.rule == "env-name-too-long" else MAX_VALUE_LENGTH
    return Finding.of("rccl_env", refused.rule, name=shown_name, limit=limit)


# --- what the trainer gets ------------------------------------------------------------------


def visible_devices(plan: DistributedPlan) -> str:
    return ",".join(str(g) for g in plan.gpus)


def distributed_env(plan: DistributedPlan) -> dict[str, str]:
    """The variables every node exports, in a readable order; portable (no local paths)."""
    env: dict[str, str] = {
        # Without it LLaMA-Factory runs torchrun only when it counts more than one device, and
        # never on the CPU; with it the same code path serves 1 GPU, 8 GPUs and many nodes.
        "FORCE_TORCHRUN": "1",
        "NNODES": str(plan.nnodes),
        "NODE_RANK": str(plan.node_rank),
        "NPROC_PER_NODE": str(plan.nproc),
        "MASTER_ADDR": plan.master_addr,
        "MASTER_PORT": str(plan.master_port),
    }
    if not plan.on_cpu:
        # The HIP runtime applies ROCR_VISIBLE_DEVICES first (set by Slurm, containers, or
        # the user) and HIP_VISIBLE_DEVICES then picks among what is left, so these indices
        # are relative to any ROCR_VISIBLE_DEVICES. HIP_VISIBLE_DEVICES wins over
        # CUDA_VISIBLE_DEVICES on ROCm; CUDA_VISIBLE_DEVICES is set to the same list so a
        # value inherited from the shell cannot disagree, and so CUDA builds honour it too.
        devices = visible_devices(plan)
        env["HIP_VISIBLE_DEVICES"] = devices
        env["CUDA_VISIBLE_DEVICES"] = devices
    # check_plan reports a refused line as a problem before any start; a plan that skipped
    # it (resumed from an old form.json, built in code) still exports only allowed settings,
    # and never one that would contradict the plan.
    env.update((name, value) for name, value in allowed_settings(plan.rccl_env) if name not in PLAN_VARIABLES)
    return env


def slurm_launch_env(plan: DistributedPlan) -> dict[str, str]:
    """What a Slurm run's node tasks give every trainer of the plan (backend/slurm/node_task.py
    adds its own NODE_RANK and the MASTER_ADDR / MASTER_PORT the batch script found). No
    device list: the GPUs are the ones Slurm gives the job (it sets ROCR_VISIBLE_DEVICES or
    CUDA_VISIBLE_DEVICES itself), which the trainer inherits."""
    env = distributed_env(plan)
    for name in ("NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        env.pop(name, None)
    return env


def torchrun_dir() -> Path:
    """Where the `torchrun` of this Python lives (a venv's bin/)."""
    return Path(sys.executable).parent


def launch_env(plan: DistributedPlan, inherited_path: str | None = None) -> dict[str, str]:
    """`distributed_env` plus a PATH that finds this environment's torchrun first.

    LLaMA-Factory's launcher runs the bare name `torchrun`; when RocBoard is started as
    `.venv/bin/python app.py` without activating the venv, that name is not on PATH and the
    launch fails with FileNotFoundError. Pass it to Launcher.start as (part of) preset_env."""
    env = distributed_env(plan)
    path = os.environ.get("PATH", "") if inherited_path is None else inherited_path
    env["PATH"] = os.pathsep.join(p for p in (str(torchrun_dir()), path) if p)
    if plan.on_cpu and plan.world_size > 1:
        # Its workers get RocBoard's trainer_site on their path, so that a resume can load
        # the checkpoint's optimizer (backend/runs/trainer_site/sitecustomize.py says why).
        env[CPU_WORKERS_VARIABLE] = "1"
    return env


def deepspeed_file_name(strategy: str, offload: bool = False) -> str | None:
    """LLaMA-Factory's name for the DeepSpeed JSON of a strategy (examples/deepspeed/)."""
    if strategy == "ddp":
        return None
    stage = {"zero2": "z2", "zero3": "z3"}[strategy]
    return f"ds_{stage}_offload_config.json" if offload else f"ds_{stage}_config.json"


def deepspeed_config(strategy: str, offload: bool = False) -> dict[str, Any]:
    """The DeepSpeed config LLaMA-Factory ships for `strategy` (its examples/deepspeed/ files).

    "auto" values are filled by the HF Trainer from the YAML (batch size, accumulation,
    clipping, fp16/bf16), so the JSON never contradicts the run's own settings. ValueError
    for DDP, which has no DeepSpeed config."""
    if strategy not in ("zero2", "zero3"):
        raise ValueError(f"no DeepSpeed config for strategy {strategy!r}")
    config: dict[str, Any] = {
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        # LLaMA-Factory may hand DeepSpeed an optimizer it has not tested (e.g. from the HF
        # Trainer's list); without this ZeRO refuses to start.
        "zero_allow_untested_optimizer": True,
        "fp16": {
            "enabled": "auto",
            "loss_scale": 0,
            "loss_scale_window": 1000,
            "initial_scale_power": 16,
            "hysteresis": 2,
            "min_loss_scale": 1,
        },
        "bf16": {"enabled": "auto"},
    }
    offload_to_cpu = {"device": "cpu", "pin_memory": True}
    if strategy == "zero2":
        zero: dict[str, Any] = {"stage": 2}
        if offload:
            zero["offload_optimizer"] = dict(offload_to_cpu)
        zero.update(
            allgather_partitions=True,
            allgather_bucket_size=5e8,
            overlap_comm=False,
            reduce_scatter=True,
            reduce_bucket_size=5e8,
            contiguous_gradients=True,
            round_robin_gradients=True,
        )
    else:
        zero = {"stage": 3}
        if offload:
            zero["offload_optimizer"] = dict(offload_to_cpu)
            zero["offload_param"] = dict(offload_to_cpu)
        zero.update(
            overlap_comm=False,
            contiguous_gradients=True,
            sub_group_size=1e9,
            reduce_bucket_size="auto",
            stage3_prefetch_bucket_size="auto",
            stage3_param_persistence_threshold="auto",
            stage3_max_live_parameters=1e9,
            stage3_max_reuse_distance=1e9,
            # Save a whole 16-bit model (and LoRA adapter) rather than only ZeRO shards.
            stage3_gather_16bit_weights_on_model_save=True,
        )
    config["zero_optimization"] = zero
    return config


def deepspeed_files(plan: DistributedPlan) -> dict[str, str]:
    """{file name: JSON text} to put beside config.yaml (empty for DDP); suits RunStore.create's
    `files`, so the run directory appears with its DeepSpeed config or not at all."""
    name = deepspeed_file_name(plan.strategy, plan.offload)
    if name is None:
        return {}
    return {name: json.dumps(deepspeed_config(plan.strategy, plan.offload), indent=2) + "\n"}


def write_deepspeed_json(plan: DistributedPlan, run_dir: Path) -> Path | None:
    """Writes the plan's DeepSpeed JSON into `run_dir`; None for DDP (nothing to write)."""
    files = deepspeed_files(plan)
    if not files:
        return None
    (name, text), = files.items()
    path = Path(run_dir) / name
    partial = path.with_name(f".{name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
    return path


def extra_args(plan: DistributedPlan) -> dict[str, Any]:
    """Keys to merge into the LLaMA-Factory YAML args for this plan.

    The DeepSpeed path is the bare file name: the trainer runs in the run directory (the
    launcher's cwd, and `cd` in the node commands), so the same config.yaml works unchanged
    on every node that has a copy of the run directory."""
    args: dict[str, Any] = {"ddp_timeout": int(plan.ddp_timeout_s)}
    if plan.on_cpu:
        # Transformers would pick gloo on the CPU by itself; saying so keeps the YAML honest
        # and stops a CPU run from trying nccl (RCCL) when a GPU happens to be visible.
        args["ddp_backend"] = "gloo"
        args["use_cpu"] = True
    name = deepspeed_file_name(plan.strategy, plan.offload)
    if name is not None:
        args["deepspeed"] = name
    return args


# --- what each node runs --------------------------------------------------------------------


def _shell_assignments(env: Mapping[str, str]) -> str:
    return " ".join(f"{name}={shlex.quote(value)}" for name, value in env.items())


def node_commands(
    plan: DistributedPlan,
    config_file: str | Path,
    extra_env: Mapping[str, str] | None = None,
) -> list[str]:
    """One shell line per node (index = NODE_RANK), ready to paste into a terminal there.

    `config_file` is the run's config.yaml as the nodes see it (a shared filesystem, or a copy
    at the same path); each line changes into its directory first so the DeepSpeed JSON named
    in it is found. `extra_env` (the preset's variables, say) goes before the plan's."""
    config = Path(config_file)
    directory = str(config.parent)
    commands: list[str] = []
    for rank in range(plan.nnodes):
        env = dict(extra_env or {})
        env.update(distributed_env(replace(plan, node_rank=rank)))
        line = f"{_shell_assignments(env)} llamafactory-cli train {shlex.quote(config.name)}"
        if directory not in ("", "."):
            line = f"cd {shlex.quote(directory)} && {line}"
        commands.append(line)
    return commands


def describe(plan: DistributedPlan) -> Message:
    """One line for the page: what will run where (a message: the preview shows it in the
    page's language)."""
    where: str = "CPU" if plan.on_cpu else Message("plan.describe.gpus", gpus=visible_devices(plan))
    method: str = Message(f"strategy.{plan.strategy}") if plan.strategy in STRATEGIES else plan.strategy
    if plan.offload and plan.strategy != "ddp":
        method = Message("plan.describe.offload", method=method)
    nodes: str = Message("plan.describe.nodes", nnodes=plan.nnodes) if plan.multi_node else ""
    return Message("plan.describe", processes=plan.world_size, nproc=plan.nproc, where=where, nodes=nodes, method=method)


__all__ = [
    "DEFAULT_DDP_TIMEOUT_S",
    "DEFAULT_RCCL_ENV",
    "DistributedPlan",
    "STRATEGIES",
    "check_plan",
    "deepspeed_config",
    "deepspeed_file_name",
    "deepspeed_files",
    "describe",
    "distributed_env",
    "extra_args",
    "format_env_lines",
    "free_port",
    "gpus_asked",
    "launch_env",
    "network_env",
    "node_commands",
    "PLAN_FORM_DEFAULTS",
    "parse_env_lines",
    "parse_plan_form",
    "plan_to_form",
    "parse_gpu_list",
    "plan_for_preset",
    "rccl_env_from_preset",
    "slurm_launch_env",
    "write_deepspeed_json",
]
