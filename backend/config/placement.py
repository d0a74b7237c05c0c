"""Where a run executes: a named, typed choice made on the form (schema.PLACEMENT_FIELDS).

- `LocalPlacement`: this machine. The launcher starts the trainer here (backend/runs/launcher.py);
  a second Start while a run trains here waits in the local queue (backend/runs/queue.py).
- `SlurmPlacement`: a batch job on a Slurm cluster whose nodes share the runs directory
  (backend/slurm/). Its fields become #SBATCH lines; empty text and 0 leave the option to the
  cluster's defaults. Slurm is then the queue.

`parse_placement_form` turns the page's raw values into one of the two with every finding
about them (each bad value falls back to its default, as every field of the form does); it
asks the cluster nothing: backend/slurm/preflight.py compares the request with what the
cluster has, before anything is created. Nothing here runs a command.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from backend.config import NotANumber, NumberTooLarge, field_noun, huge_finding, not_a_number_finding, parse_number, parse_text, range_finding, schema, shown
from backend.config.schema import SBATCH_EXTRA_MAX_LINES
from backend.findings import Finding
from backend.slurm.parse import parse_memory_mb, parse_time_limit

if TYPE_CHECKING:
    from backend.config.distributed import DistributedPlan


@dataclass(frozen=True)
class LocalPlacement:
    """This machine. `gpus`: the GPU indices (the node's slots, as the run's own
    HIP_VISIBLE_DEVICES names them: gpu_slots.node_gpus; CPU slots on a machine without
    GPUs) the run asks for by name; (): the node picks free ones."""

    gpus: tuple[int, ...] = ()
    kind: Literal["local"] = "local"


@dataclass(frozen=True)
class SlurmPlacement:
    """A Slurm batch job: one task per node (torchrun starts that node's workers)."""

    partition: str = ""  # "": the cluster's default partition
    account: str = ""  # "": the user's default account
    nodes: int = 1
    gpus_per_node: int = 0  # 0: no GPU asked for (the CPU demo)
    cpus_per_task: int = 0  # 0: Slurm's default (one)
    memory: str = ""  # --mem, per node (= per task): "64G"; "": the partition's default
    time_limit: str = ""  # --time as typed ("04:00:00", "2-00:00:00"); "": the partition's default
    extra: tuple[tuple[str, str], ...] = ()  # more #SBATCH options: (long name, value or "")
    kind: Literal["slurm"] = "slurm"

    @property
    def time_limit_s(self) -> int | None:
        """The time limit in seconds; None when none is asked for (or it is unlimited)."""
        try:
            return parse_time_limit(self.time_limit) if self.time_limit else None
        except ValueError:
            return None

    @property
    def memory_mb(self) -> int | None:
        try:
            return parse_memory_mb(self.memory) if self.memory else None
        except ValueError:
            return None


Placement = LocalPlacement | SlurmPlacement

# A partition, account, QOS or reservation name as Slurm allows them in practice.
_SLURM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$")

# The extra #SBATCH options a user may add, by long name -> whether it takes a value
# ("optional": `--exclusive` or `--exclusive=user`). Every other option is refused: the ones
# RocBoard writes itself from the form (SBATCH_OWN_OPTIONS), Slurm's mail options
# (SBATCH_MAIL_OPTIONS), and any that moves files or runs something else (--output, --chdir,
# --wrap, --export, --uid, --container, --bb...). Each value is held to its option's own
# shape (SBATCH_VALUE_SHAPES).
SBATCH_EXTRA_OPTIONS: dict[str, str] = {
    "qos": "value",
    "constraint": "value",
    "reservation": "value",
    "exclusive": "optional",
    "exclude": "value",
    "nodelist": "value",
    "comment": "value",
    "nice": "optional",
    "begin": "value",
    "hint": "value",
    "requeue": "none",
    "no-requeue": "none",
    "gres": "value",
    "gpu-bind": "value",
    "gpus-per-task": "value",
    "mem-per-gpu": "value",
    "switches": "value",
    "licenses": "value",
    "wckey": "value",
    "priority": "value",
    "deadline": "value",
}
# Refused with their own reason: the cluster would mail any address a page user types, from
# the account RocBoard runs under (job names, nodes and states to anyone).
SBATCH_MAIL_OPTIONS = frozenset({"mail-type", "mail-user"})
# Options the form's own fields (and RocBoard) set: each is named with the field to use.
SBATCH_OWN_OPTIONS: dict[str, str] = {
    "partition": "slurm_partition",
    "account": "slurm_account",
    "time": "slurm_time",
    "nodes": "slurm_nodes",
    "gpus-per-node": "slurm_gpus_per_node",
    "gpus": "slurm_gpus_per_node",
    "cpus-per-task": "slurm_cpus_per_task",
    "mem": "slurm_mem",
    "mem-per-cpu": "slurm_mem",
    "job-name": "run_name",
    "ntasks": "slurm_nodes",
    "ntasks-per-node": "slurm_nodes",
}
# One-letter forms of the options above (sbatch's own).
SBATCH_SHORT_OPTIONS: dict[str, str] = {
    "q": "qos", "C": "constraint", "x": "exclude", "w": "nodelist", "p": "partition", "A": "account",
    "t": "time", "N": "nodes", "G": "gpus", "c": "cpus-per-task", "J": "job-name", "n": "ntasks",
    "o": "output", "e": "error", "D": "chdir", "i": "input",
}  # fmt: skip
# A whole extra line, `#SBATCH` and all: the longest option name and a value of 256.
SBATCH_LINE_MAX_CHARS = 300
# Any value first: nothing a shell or sbatch's own parser could take for more than one value.
_SBATCH_VALUE = re.compile(r"^[A-Za-z0-9_.,:@+/%=\[\]()|&*!-]{1,256}$")
_SBATCH_OPTION = re.compile(r"^(?:#SBATCH\s+)?(?P<dashes>--?)(?P<name>[A-Za-z][A-Za-z0-9-]*)(?:(?:=|\s+)(?P<value>\S.*))?$")

# Then the shape of each option's value, as Slurm's own documentation writes them.
_NAMES = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}(?:,[A-Za-z0-9][A-Za-z0-9_.+-]{0,63})*$")
# A Slurm hostlist: names with bracketed ranges, comma-separated (`node[01-04,07],gpu7`).
# Never a "/": sbatch reads a --nodelist / --exclude value holding one as a file's name.
_HOST = r"[A-Za-z0-9][A-Za-z0-9_.-]*(?:\[\d{1,9}(?:-\d{1,9})?(?:,\d{1,9}(?:-\d{1,9})?)*\][A-Za-z0-9_.-]*)*"
_HOSTLIST = re.compile(rf"^{_HOST}(?:,{_HOST})*$")
_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.&|,\[\]()*!-]+$")
# A time as sbatch's --begin and --deadline read it (Slurm's parse_time): words, dates, times
# and `now+N[unit]`, joined by "-" or "T"; or `uts` and seconds since the epoch.
_WHEN_PART = (
    r"(?:today|tomorrow|midnight|noon|fika|teatime"
    r"|now(?:[+-]\d{1,9}(?:seconds?|minutes?|hours?|days?|weeks?)?)?"
    r"|\d{1,2}:\d{2}(?::\d{2})?(?:am|pm)?"
    r"|\d{4}-\d{1,2}-\d{1,2}"
    r"|\d{1,2}[/.]?\d{1,2}(?:[/.]?\d{2})?)"
)
_WHEN = re.compile(rf"(?i)^(?:uts\d{{7,12}}|{_WHEN_PART}(?:[-T]{_WHEN_PART})*)$")
_GRES = re.compile(r"^(?:none|(?:[A-Za-z][A-Za-z0-9_-]*(?::[A-Za-z0-9_.-]+)?(?::\d{1,9}[KMGTkmgt]?)?)(?:,[A-Za-z][A-Za-z0-9_-]*(?::[A-Za-z0-9_.-]+)?(?::\d{1,9}[KMGTkmgt]?)?)*)$")
_GPU_BIND = re.compile(
    r"^(?:verbose,)?(?:closest|none|single:\d{1,4}|per_task:\d{1,4}"
    r"|map_gpu:\d{1,3}(?:\*\d{1,4})?(?:,\d{1,3}(?:\*\d{1,4})?)*"
    r"|mask_gpu:(?:0x)?[0-9A-Fa-f]{1,16}(?:\*\d{1,4})?(?:,(?:0x)?[0-9A-Fa-f]{1,16}(?:\*\d{1,4})?)*)$"
)
_GPUS_PER_TASK = re.compile(r"^(?:[A-Za-z0-9_.-]+:)?\d{1,4}(?:,(?:[A-Za-z0-9_.-]+:)?\d{1,4})*$")
_LICENSE = r"[A-Za-z0-9][A-Za-z0-9_.@-]*(?::\d{1,9})?"
_LICENSES = re.compile(rf"^{_LICENSE}(?:[,|]{_LICENSE})*$")


def _whole_in(low: int, high: int) -> Callable[[str], bool]:
    def check(value: str) -> bool:
        return re.fullmatch(r"-?\d{1,10}", value) is not None and low <= int(value) <= high

    return check


def _one_of(*choices: str) -> Callable[[str], bool]:
    return lambda value: value in choices


def _matches(pattern: re.Pattern[str]) -> Callable[[str], bool]:
    return lambda value: pattern.match(value) is not None


def _memory(value: str) -> bool:
    try:
        parse_memory_mb(value)
    except ValueError:
        return False
    return True


def _switches(value: str) -> bool:
    """`count[@max-time]`: at most that many switches, waiting at most that long for them."""
    count, at, wait = value.partition("@")
    if not re.fullmatch(r"\d{1,4}", count):
        return False
    if not at:
        return True
    try:
        return parse_time_limit(wait) is not None
    except ValueError:
        return False


# option -> (is its value of the option's shape, an example shown in the fix).
SBATCH_VALUE_SHAPES: dict[str, tuple[Callable[[str], bool], str]] = {
    "qos": (_matches(_SLURM_NAME), "high"),
    "wckey": (_matches(_SLURM_NAME), "proj1"),
    "reservation": (_matches(_NAMES), "maint"),
    "constraint": (_matches(_CONSTRAINT), "mi300x&ib"),
    "exclusive": (_one_of("user", "mcs", "topo"), "user"),
    "exclude": (_matches(_HOSTLIST), "node[05-06]"),
    "nodelist": (_matches(_HOSTLIST), "node[01-04],gpu7"),
    "comment": (_matches(_SBATCH_VALUE), "nightly-sweep"),
    "nice": (_whole_in(-2147483645, 2147483645), "10"),
    "priority": (lambda value: value.upper() == "TOP" or _whole_in(0, 4294967293)(value), "100"),
    "begin": (_matches(_WHEN), "now+1hour"),
    "deadline": (_matches(_WHEN), "now+2days"),
    "hint": (_one_of("compute_bound", "memory_bound", "multithread", "nomultithread"), "nomultithread"),
    "gres": (_matches(_GRES), "gpu:mi300x:8"),
    "gpu-bind": (_matches(_GPU_BIND), "closest"),
    "gpus-per-task": (_matches(_GPUS_PER_TASK), "1"),
    "mem-per-gpu": (_memory, "64G"),
    "switches": (_switches, "1@01:00:00"),
    "licenses": (_matches(_LICENSES), "matlab:2"),
}
SBATCH_VALUE_EXAMPLES: dict[str, str] = {name: example for name, (_, example) in SBATCH_VALUE_SHAPES.items()}
# The options whose value sbatch reads as a file's name when it holds a "/".
_HOSTLIST_OPTIONS = frozenset({"nodelist", "exclude"})


def parse_sbatch_lines(text: str) -> tuple[tuple[tuple[str, str], ...], list[Finding]]:
    """The extra #SBATCH lines (one option a line, `#SBATCH` optional, blank lines and
    `# comments` skipped) -> ((long name, value), ...), and a finding for each refused line."""
    options: list[tuple[str, str]] = []
    findings: list[Finding] = []
    lines = [line.strip() for line in str(text).splitlines()]
    lines = [line for line in lines if line and not (line.startswith("#") and not line.upper().startswith("#SBATCH"))]
    if len(lines) > SBATCH_EXTRA_MAX_LINES:
        return (), [Finding.of("slurm_extra", "too-many-items", field=field_noun("slurm_extra"), count=len(lines), limit=SBATCH_EXTRA_MAX_LINES)]
    for number, line in enumerate(lines, start=1):
        if len(line) > SBATCH_LINE_MAX_CHARS:
            findings.append(Finding.of("slurm_extra", "sbatch-line-too-long", number=number, length=len(line), limit=SBATCH_LINE_MAX_CHARS))
            continue
        match = _SBATCH_OPTION.match(line)
        if match is None:
            findings.append(Finding.of("slurm_extra", "sbatch-line-syntax", number=number, line=shown(line, 80)))
            continue
        name = match.group("name")
        if match.group("dashes") == "-":
            if len(name) != 1:
                findings.append(Finding.of("slurm_extra", "sbatch-line-syntax", number=number, line=shown(line, 80)))
                continue
            name = SBATCH_SHORT_OPTIONS.get(name, name)
        value = (match.group("value") or "").strip()
        if name in SBATCH_OWN_OPTIONS:
            findings.append(Finding.of("slurm_extra", "sbatch-option-own", number=number, option=f"--{name}", field=field_noun(SBATCH_OWN_OPTIONS[name])))
            continue
        if name in SBATCH_MAIL_OPTIONS:
            findings.append(Finding.of("slurm_extra", "sbatch-option-refused", message="sbatch-option-mail", number=number, option=f"--{name}"))
            continue
        takes = SBATCH_EXTRA_OPTIONS.get(name)
        if takes is None:
            findings.append(Finding.of("slurm_extra", "sbatch-option-refused", number=number, option=shown(f"--{name}", 60), allowed=", ".join(f"--{option}" for option in SBATCH_EXTRA_OPTIONS)))
            continue
        if takes == "value" and not value or takes == "none" and value:
            findings.append(Finding.of("slurm_extra", "sbatch-option-value", message="sbatch-option-needs-value" if takes == "value" else "sbatch-option-no-value", number=number, option=f"--{name}"))
            continue
        if value and not _SBATCH_VALUE.match(value):
            findings.append(Finding.of("slurm_extra", "sbatch-option-value", number=number, option=f"--{name}", value=shown(value, 60)))
            continue
        if value and name in _HOSTLIST_OPTIONS and "/" in value:
            example = SBATCH_VALUE_EXAMPLES[name]
            findings.append(Finding.of("slurm_extra", "sbatch-option-value", message="sbatch-option-file", number=number, option=f"--{name}", value=shown(value, 60), example=example))
            continue
        if value:
            fits, example = SBATCH_VALUE_SHAPES[name]
            if not fits(value):
                findings.append(Finding.of("slurm_extra", "sbatch-option-value", message="sbatch-option-shape", number=number, option=f"--{name}", value=shown(value, 60), example=example))
                continue
        options.append((name, value))
    return tuple(options), findings


def format_sbatch_lines(options: tuple[tuple[str, str], ...]) -> str:
    return "\n".join(f"--{name}={value}" if value else f"--{name}" for name, value in options)


def _whole(values: Mapping[str, Any], name: str, findings: list[Finding]) -> int:
    """A whole number inside the field's range, else a finding and the default."""
    default = schema.field(name).default
    value = values.get(name, default)
    value = value.strip() if isinstance(value, str) else value
    what = field_noun(name)
    try:
        number = int(parse_number(value, int))
    except NumberTooLarge:
        findings.append(huge_finding(name, value, what))
        return int(default)
    except NotANumber:
        findings.append(not_a_number_finding(name, value, what, int))
        return int(default)
    out_of_range = range_finding(name, number, what)
    if out_of_range is not None:
        findings.append(out_of_range)
        return int(default)
    return number


def _text(values: Mapping[str, Any], name: str, findings: list[Finding]) -> str:
    form_field = schema.field(name)
    text, bad = parse_text(values.get(name, form_field.default), field_noun(name), form_field.max_chars, key=name)
    if bad is not None:
        findings.append(bad)
        return str(form_field.default)
    return text.strip()


def _slurm_name(values: Mapping[str, Any], name: str, findings: list[Finding]) -> str:
    """A partition or account name, else a finding and "" (the cluster's default)."""
    text = _text(values, name, findings)
    if text and not _SLURM_NAME.match(text):
        findings.append(Finding.of(name, "slurm-bad-name", field=field_noun(name), value=shown(text, 64)))
        return ""
    return text


def parse_placement_form(values: Mapping[str, Any], use_cpu: bool = False, gpus_per_preset: int = 0) -> tuple[Placement, list[Finding]]:
    """Where the form's run executes, and every finding about it. `use_cpu` and
    `gpus_per_preset`: the preset's (a GPU preset on Slurm must ask for GPUs)."""
    findings: list[Finding] = []
    run_on = values.get("run_on", "local")
    if run_on not in schema.RUN_ON:
        findings.append(Finding.of("run_on", "bad-choice", field=field_noun("run_on"), value=shown(run_on), choices=", ".join(schema.RUN_ON)))
        return LocalPlacement(), findings
    if run_on == "local":
        return LocalPlacement(gpus=_local_gpus(values, findings)), findings
    partition, account = (_slurm_name(values, name, findings) for name in ("slurm_partition", "slurm_account"))
    time_limit = _text(values, "slurm_time", findings)
    if time_limit:
        try:
            seconds = parse_time_limit(time_limit)
        except ValueError:
            seconds = -1
        if seconds is not None and seconds <= 0:
            findings.append(Finding.of("slurm_time", "slurm-time-format", value=shown(time_limit, 32)))
            time_limit = ""
    memory = _text(values, "slurm_mem", findings)
    if memory:
        try:
            parse_memory_mb(memory)
        except ValueError:
            findings.append(Finding.of("slurm_mem", "slurm-mem-format", value=shown(memory, 32)))
            memory = ""
    raw_extra = values.get("slurm_extra", "")
    if raw_extra is None:
        raw_extra = ""
    if not isinstance(raw_extra, str):
        findings.append(Finding.of("slurm_extra", "text-not-text", field=field_noun("slurm_extra"), value=shown(raw_extra)))
        raw_extra = ""
    elif len(raw_extra) > schema.field("slurm_extra").max_chars:
        findings.append(Finding.of("slurm_extra", "text-too-long", field=field_noun("slurm_extra"), length=len(raw_extra), limit=schema.field("slurm_extra").max_chars))
        raw_extra = ""
    extra, extra_findings = parse_sbatch_lines(raw_extra)
    findings += extra_findings
    placement = SlurmPlacement(
        partition=partition,
        account=account,
        nodes=_whole(values, "slurm_nodes", findings),
        gpus_per_node=_whole(values, "slurm_gpus_per_node", findings),
        cpus_per_task=_whole(values, "slurm_cpus_per_task", findings),
        memory=memory,
        time_limit=time_limit,
        extra=extra,
    )
    if not use_cpu and placement.gpus_per_node == 0:
        findings.append(Finding.of("slurm_gpus_per_node", "slurm-no-gpus", patch={"slurm_gpus_per_node": max(1, gpus_per_preset)}, gpus=max(1, gpus_per_preset)))
    if use_cpu and placement.gpus_per_node > 0:
        findings.append(Finding.of("slurm_gpus_per_node", "slurm-gpus-on-cpu", severity="warning", patch={"slurm_gpus_per_node": 0}, gpus=placement.gpus_per_node))
    return placement, findings


def _local_gpus(values: Mapping[str, Any], findings: list[Finding]) -> tuple[int, ...]:
    """The GPU indices `local_gpus` names ("0,1", "2-3"; empty: none named), each once; () with
    a finding for anything else (the node is not asked here: RunManager checks the indices
    against it, and `check_local_gpus` the count against the plan)."""
    from backend.config.distributed import BadGpuEntry, GpuListTooLarge, parse_gpu_list

    listed = values.get("local_gpus", "")
    if listed is None:
        listed = ""
    if isinstance(listed, int) and not isinstance(listed, bool) and 0 <= listed < 10**6:
        listed = str(listed)  # one index, sent as a number
    text, bad_text = parse_text(listed, field_noun("local_gpus"), schema.field("local_gpus").max_chars, key="local_gpus")
    if bad_text is not None:
        findings.append(bad_text)
        return ()
    highest = schema.GPUS_PER_NODE_MAX - 1
    try:
        gpus = parse_gpu_list(text)
    except GpuListTooLarge as error:
        if error.index is not None:
            findings.append(Finding.of("local_gpus", "local-gpus-index", patch={"local_gpus": ""}, index=shown(error.index), highest=highest))
        else:
            findings.append(Finding.of("local_gpus", "local-gpus-too-many", patch={"local_gpus": ""}, limit=highest + 1))
        return ()
    except BadGpuEntry as error:
        findings.append(Finding.of("local_gpus", "local-gpus-bad", patch={"local_gpus": ""}, part=error.part))
        return ()
    repeated = next((gpu for position, gpu in enumerate(gpus) if gpu in gpus[:position]), None)
    if repeated is not None:
        findings.append(Finding.of("local_gpus", "local-gpus-duplicate", patch={"local_gpus": ",".join(map(str, dict.fromkeys(gpus)))}, gpu=repeated))
        return ()
    return gpus


def check_local_gpus(placement: Placement, asked: int) -> list[Finding]:
    """Named GPUs whose count is not the `asked` count of the run's multi-GPU plan
    (`DistributedPlan.gpus_asked`): a problem, before anything is made."""
    if not isinstance(placement, LocalPlacement) or not placement.gpus or len(placement.gpus) == asked:
        return []
    return [Finding.of("local_gpus", "local-gpus-count", named=len(placement.gpus), gpus=",".join(map(str, placement.gpus)), asked=asked)]


def placement_to_form(placement: Placement) -> dict[str, Any]:
    """The page's field values that show `placement` (the inverse of parse_placement_form)."""
    values = schema.placement_form_defaults()
    if isinstance(placement, LocalPlacement):
        values["local_gpus"] = ",".join(map(str, placement.gpus))
    if isinstance(placement, SlurmPlacement):
        values.update(
            run_on="slurm",
            slurm_partition=placement.partition,
            slurm_account=placement.account,
            slurm_time=placement.time_limit,
            slurm_nodes=placement.nodes,
            slurm_gpus_per_node=placement.gpus_per_node,
            slurm_cpus_per_task=placement.cpus_per_task,
            slurm_mem=placement.memory,
            slurm_extra=format_sbatch_lines(placement.extra),
        )
    return values


def plan_on_slurm(plan: DistributedPlan, placement: SlurmPlacement) -> DistributedPlan | None:
    """The plan a Slurm run runs: the form's strategy, offload, timeout and RCCL settings, on
    the nodes Slurm gives it, one worker per GPU asked for (CPU workers: the form's count).
    None for one process on one node (no torchrun, as locally)."""
    from dataclasses import replace

    nproc = placement.gpus_per_node if not plan.on_cpu and placement.gpus_per_node else plan.nproc
    if placement.nodes == 1 and nproc == 1:
        return None
    return replace(
        plan,
        nnodes=placement.nodes,
        node_rank=0,
        nproc=nproc,
        gpus=() if plan.on_cpu else tuple(range(nproc)),
        master_addr=SLURM_MASTER,
    )


# The master a Slurm run's plan names: the batch script finds the real one (the allocation's
# first node) when the job starts.
SLURM_MASTER = "first-node-of-the-job"


def plan_findings_on_slurm(values: Mapping[str, Any]) -> list[Finding]:
    """The Multi-GPU fields Slurm decides instead (nodes, node rank, master address): a
    warning where the form asks for something else, so the page never shows a plan it will
    not run."""
    findings = []
    nnodes = values.get("dist_nnodes", 1)
    if str(nnodes).strip() not in ("", "1"):
        findings.append(Finding.of("dist_nnodes", "slurm-decides-nodes", severity="warning", patch={"dist_nnodes": 1, "slurm_nodes": nnodes}, nodes=shown(nnodes)))
    return findings


__all__ = [
    "LocalPlacement",
    "Placement",
    "SBATCH_EXTRA_OPTIONS",
    "SBATCH_LINE_MAX_CHARS",
    "SBATCH_MAIL_OPTIONS",
    "SBATCH_VALUE_EXAMPLES",
    "SBATCH_VALUE_SHAPES",
    "SlurmPlacement",
    "check_local_gpus",
    "format_sbatch_lines",
    "parse_placement_form",
    "parse_sbatch_lines",
    "placement_to_form",
    "plan_on_slurm",
    "plan_findings_on_slurm",
]
