"""What Slurm's commands print, as typed values: pure functions, each tested on the real
output of Slurm 22.05 (tests/fixtures/slurm/, captured from the test cluster byte for byte).

- `parse_squeue`: `squeue --noheader --format=SQUEUE_FORMAT` lines -> JobInfo
- `parse_show_job`: `scontrol show job --oneliner ID` -> JobInfo (with the exit code)
- `parse_sacct`: `sacct --noheader --parsable2 --format=SACCT_FIELDS` -> JobInfo
- `parse_show_partitions`, `parse_show_nodes`: `scontrol show partition|node --oneliner`
- `parse_sbatch_job_id`: `sbatch --parsable` ("123" or "123;cluster")
- `parse_sbatch_refusal`: sbatch's error lines -> a rule (a message id) and its values
- `parse_time_limit`: Slurm's time formats -> seconds (None: unlimited)
- `parse_memory_mb`: Slurm's memory sizes (`--mem`) -> megabytes

Nothing here runs a command (backend/slurm/client.py does); nothing raises on odd text: a
field that cannot be read is None or "", and a line that is not a job is skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The columns asked of squeue, in order: id, state, reason, nodes, node count, time used,
# time limit, start time (expected, while pending). None of them holds a "|".
SQUEUE_FORMAT = "%i|%T|%r|%N|%D|%M|%l|%S"
SACCT_FIELDS = "JobIDRaw,State,ExitCode,NodeList,Elapsed,Timelimit,Start"

# Slurm's job states (squeue %T, scontrol JobState, sacct State), by what they mean for a run.
WAITING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT", "SUSPENDED", "STOPPED", "RESIZING"})
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT"})
ENDED_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED"})
KNOWN_STATES = WAITING_STATES | RUNNING_STATES | ENDED_STATES

MAX_FIELD_CHARS = 512  # a value longer than this is not one Slurm wrote for a job of ours


@dataclass(frozen=True)
class JobInfo:
    """One job as Slurm reports it. `state` is the base state ("CANCELLED by 0" ->
    "CANCELLED"); "" for what a command did not say."""

    job_id: str
    state: str
    reason: str = ""  # why it waits (PENDING) or ended; "" for None
    nodes: str = ""  # the node list, as Slurm writes it ("n[1-2]")
    node_count: int | None = None
    elapsed: str = ""  # time used, as written ("1:07", "00:01:07")
    time_limit_s: int | None = None  # None: unlimited, or not said
    start_time: str = ""  # ISO time: when it started, or is expected to (PENDING); "" if unknown
    exit_code: int | None = None  # the batch script's exit code (ExitCode=code:signal)
    exit_signal: int | None = None  # the signal that ended it, 0 for none

    @property
    def waiting(self) -> bool:
        return self.state in WAITING_STATES

    @property
    def running(self) -> bool:
        return self.state in RUNNING_STATES

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool = False
    state: str = ""  # UP, DOWN, DRAIN, INACTIVE
    max_time_s: int | None = None  # None: unlimited
    max_nodes: int | None = None  # None: unlimited
    total_nodes: int | None = None
    nodes: str = ""  # the node list expression
    allow_accounts: str = "ALL"


@dataclass(frozen=True)
class Node:
    name: str
    cpus: int | None = None  # CPUTot
    memory_mb: int | None = None  # RealMemory
    gpus: int = 0  # GPUs in its Gres
    partitions: tuple[str, ...] = ()
    state: str = ""
    address: str = ""  # NodeAddr


@dataclass(frozen=True)
class SbatchRefusal:
    """Why sbatch refused a job: `rule` is also the message id of its words
    (`check.<rule>.problem` / `.fix`); `detail` is sbatch's own line."""

    rule: str
    detail: str = ""
    value: str = ""  # what it named (the partition...), when it named one


def _bounded(value: str) -> str:
    return value[:MAX_FIELD_CHARS]


def is_number(text: str, digits: int = 18) -> bool:
    """ASCII digits only ("١٢".isdigit() is True too), at most `digits` of them."""
    return 0 < len(text) <= digits and text.isascii() and text.isdigit()


def _int(text: str) -> int | None:
    text = text.strip()
    return int(text) if is_number(text) else None


def base_state(text: str) -> str:
    """"CANCELLED by 0" -> "CANCELLED"; "RUNNING+" -> "RUNNING"; unknown words -> as written."""
    word = text.strip().split(" ", 1)[0].rstrip("+").upper()
    return _bounded(word)


def _reason(text: str) -> str:
    text = text.strip()
    return "" if text in ("None", "(null)", "") else _bounded(text)


def _start(text: str) -> str:
    text = text.strip()
    return "" if text in ("N/A", "Unknown", "None", "") else _bounded(text)


_TIME = re.compile(r"^(?:(?P<days>\d{1,5})-)?(?P<rest>\d{1,6}(?::\d{1,2}){0,2})$", re.ASCII)


def parse_time_limit(text: str) -> int | None:
    """Seconds of a Slurm time: "30" (minutes), "30:00" (MM:SS), "1:00:00", "2-12",
    "2-12:30", "2-12:30:00"; "UNLIMITED", "INFINITE", "Partition_Limit", "NONE" -> None.
    ValueError for anything else (the form's check names it)."""
    value = str(text).strip()
    if value.upper() in ("UNLIMITED", "INFINITE", "PARTITION_LIMIT", "NONE", "N/A", ""):
        return None
    match = _TIME.match(value)
    if match is None:
        raise ValueError(f"not a Slurm time: {value!r}")
    days = int(match.group("days") or 0)
    parts = [int(part) for part in match.group("rest").split(":")]
    if match.group("days") is not None:
        # D-HH, D-HH:MM, D-HH:MM:SS
        hours, minutes, seconds = (parts + [0, 0])[:3]
    elif len(parts) == 1:
        hours, minutes, seconds = 0, parts[0], 0  # minutes
    elif len(parts) == 2:
        hours, minutes, seconds = 0, parts[0], parts[1]  # MM:SS
    else:
        hours, minutes, seconds = parts
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def format_time_limit(seconds: int | None) -> str:
    """Seconds as Slurm writes a time ("1-02:03:04", "00:30:00"); None -> "UNLIMITED"."""
    if seconds is None:
        return "UNLIMITED"
    days, rest = divmod(int(seconds), 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def _time_limit_or_none(text: str) -> int | None:
    try:
        return parse_time_limit(text)
    except ValueError:
        return None


_MEMORY = re.compile(r"^(?P<number>\d{1,12})(?P<unit>[KMGT]?)B?$", re.IGNORECASE | re.ASCII)
_MB_PER_UNIT = {"K": 1 / 1024, "M": 1, "": 1, "G": 1024, "T": 1024 * 1024}


def parse_memory_mb(text: str) -> int:
    """Megabytes of a Slurm memory size ("4000", "4000M", "64G", "1T"; sbatch's default
    unit is MB). ValueError for anything else."""
    match = _MEMORY.match(str(text).strip())
    if match is None:
        raise ValueError(f"not a memory size: {text!r}")
    return max(1, int(int(match.group("number")) * _MB_PER_UNIT[match.group("unit").upper()]))


def parse_exit_code(text: str) -> tuple[int | None, int | None]:
    """"3:0" -> (3, 0); "0:15" -> (0, 15) (ended by signal 15); anything else -> (None, None)."""
    code, _, signal = text.strip().partition(":")
    return _int(code), _int(signal) if signal else None


def parse_squeue(text: str) -> list[JobInfo]:
    """Jobs from `squeue --noheader --format=SQUEUE_FORMAT` (a line that is not one, skipped)."""
    jobs = []
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) != 8 or not fields[0].strip():
            continue
        job_id, state, reason, nodes, count, elapsed, limit, start = (field.strip() for field in fields)
        jobs.append(
            JobInfo(
                job_id=_bounded(job_id),
                state=base_state(state),
                reason=_reason(reason),
                nodes=_bounded(nodes),
                node_count=_int(count),
                elapsed=_bounded(elapsed),
                time_limit_s=_time_limit_or_none(limit),
                start_time=_start(start),
            )
        )
    return jobs


# A key of scontrol's one-line output: letters, digits and the few marks Slurm's keys have
# ("AllocNode:Sid", "CPUs/Task", "ReqB:S:C:T", "NtasksPerN:B:S:C").
_KEY_AT = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")


def parse_key_values(line: str) -> dict[str, str]:
    """`Key=value Key2=a value with spaces ...` (scontrol's --oneliner) -> {key: value}.

    A value runs until the next ` Key=`: Command=/a path/with spaces stays whole."""
    pairs: dict[str, str] = {}
    matches = list(_KEY_AT.finditer(line))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(line)
        pairs.setdefault(match.group(1), _bounded(line[match.end() : end].strip()))
    return pairs


def parse_show_job(text: str) -> JobInfo | None:
    """The first job of `scontrol show job --oneliner ID`; None for none (an unknown id)."""
    for line in text.splitlines():
        values = parse_key_values(line)
        if "JobId" not in values or "JobState" not in values:
            continue
        code, signal = parse_exit_code(values.get("ExitCode", ""))
        return JobInfo(
            job_id=values["JobId"],
            state=base_state(values["JobState"]),
            reason=_reason(values.get("Reason", "")),
            nodes=values.get("NodeList", "") if values.get("NodeList", "") != "(null)" else "",
            node_count=_int(values.get("NumNodes", "").split("-")[0]),
            elapsed=values.get("RunTime", ""),
            time_limit_s=_time_limit_or_none(values.get("TimeLimit", "")),
            start_time=_start(values.get("StartTime", "")),
            exit_code=code,
            exit_signal=signal,
        )
    return None


def parse_sacct(text: str, job_id: str) -> JobInfo | None:
    """The job's own line (not its steps') of `sacct --noheader --parsable2
    --format=SACCT_FIELDS --jobs=ID`; None when sacct does not know it."""
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) < 7 or fields[0].strip() != job_id:
            continue
        code, signal = parse_exit_code(fields[2])
        return JobInfo(
            job_id=job_id,
            state=base_state(fields[1]),
            nodes=_bounded(fields[3].strip()) if fields[3].strip() not in ("None assigned", "") else "",
            elapsed=_bounded(fields[4].strip()),
            time_limit_s=_time_limit_or_none(fields[5]),
            start_time=_start(fields[6]),
            exit_code=code,
            exit_signal=signal,
        )
    return None


def parse_show_partitions(text: str) -> list[Partition]:
    partitions = []
    for line in text.splitlines():
        values = parse_key_values(line)
        if "PartitionName" not in values:
            continue
        max_nodes = values.get("MaxNodes", "")
        partitions.append(
            Partition(
                name=values["PartitionName"],
                default=values.get("Default", "").upper() == "YES",
                state=values.get("State", "").upper(),
                max_time_s=_time_limit_or_none(values.get("MaxTime", "")),
                max_nodes=None if max_nodes.upper() == "UNLIMITED" else _int(max_nodes),
                total_nodes=_int(values.get("TotalNodes", "")),
                nodes=values.get("Nodes", ""),
                allow_accounts=values.get("AllowAccounts", "ALL"),
            )
        )
    return partitions


def gres_gpus(gres: str) -> int:
    """GPUs in a node's Gres: "gpu:8", "gpu:mi300x:8(S:0-1)", "gpu:4,nic:1" -> 8, 8, 4;
    "(null)" -> 0."""
    total = 0
    for item in gres.split(","):
        parts = re.sub(r"\(.*?\)", "", item).strip().split(":")
        if parts and parts[0] == "gpu":
            count = _int(parts[-1]) if len(parts) > 1 else 1
            total += count or 0
    return total


def parse_show_nodes(text: str) -> list[Node]:
    nodes = []
    for line in text.splitlines():
        values = parse_key_values(line)
        if "NodeName" not in values:
            continue
        partitions = tuple(p for p in values.get("Partitions", "").split(",") if p)
        nodes.append(
            Node(
                name=values["NodeName"],
                cpus=_int(values.get("CPUTot", "")),
                memory_mb=_int(values.get("RealMemory", "")),
                gpus=gres_gpus(values.get("Gres", "")),
                partitions=partitions,
                state=values.get("State", "").upper(),
                address=values.get("NodeAddr", ""),
            )
        )
    return nodes


def parse_hostnames(text: str) -> list[str]:
    """`scontrol show hostnames LIST`: one node name a line."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def parse_sbatch_job_id(stdout: str) -> str | None:
    """`sbatch --parsable` prints "ID" or "ID;CLUSTER" (a line of warnings may come first)."""
    for line in reversed(stdout.strip().splitlines()):
        job_id = line.strip().split(";", 1)[0]
        if is_number(job_id):
            return job_id
    return None


# sbatch's error lines (src/sbatch and slurm_strerror), most specific first -> our rule.
_REFUSALS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"invalid partition specified: (?P<value>\S+)", re.I), "slurm-bad-partition"),
    (re.compile(r"Invalid partition name specified", re.I), "slurm-bad-partition"),
    (re.compile(r"Invalid account or account/partition combination", re.I), "slurm-bad-account"),
    (re.compile(r"Invalid qos specification", re.I), "slurm-bad-qos"),
    (re.compile(r"Requested time limit is invalid|Invalid --time specification", re.I), "slurm-bad-time"),
    (re.compile(r"Invalid generic resource \(gres\) specification|Invalid Trackable RESource \(TRES\) specification", re.I), "slurm-bad-gpus"),
    (re.compile(r"Memory specification can not be satisfied", re.I), "slurm-too-much-memory"),
    (re.compile(r"Node count specification invalid|Too many nodes requested", re.I), "slurm-bad-nodes"),
    (re.compile(r"Requested node configuration is not available", re.I), "slurm-no-such-node"),
    (re.compile(r"Job violates accounting/QOS policy|QOSMax\w+|AssocMax\w+", re.I), "slurm-policy"),
    (re.compile(r"Access/permission denied|User's group not permitted", re.I), "slurm-denied"),
    (re.compile(r"Unable to contact slurm controller|Socket timed out|Connection refused|Could not establish a configuration source|Zero Bytes were transmitted", re.I), "slurm-unreachable"),
)


def parse_sbatch_refusal(stderr: str) -> SbatchRefusal:
    """Why sbatch refused (its stderr); `slurm-refused` with its last error line when the
    words are none we know."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    text = "\n".join(lines)
    for pattern, rule in _REFUSALS:
        match = pattern.search(text)
        if match is not None:
            value = match.groupdict().get("value") or ""
            detail = next((line for line in lines if pattern.search(line)), "")
            return SbatchRefusal(rule, _bounded(detail), _bounded(value))
    errors = [line for line in lines if "error" in line.lower()]
    return SbatchRefusal("slurm-refused", _bounded((errors or lines or [""])[-1]))


_TEST_ONLY_START = re.compile(r"to start at (?P<at>\S+) using (?P<cpus>\d+) processors on nodes (?P<nodes>\S+)")


def parse_test_only(stderr: str) -> tuple[str, str] | None:
    """`sbatch --test-only`'s answer for a job it would take: (expected start, nodes)."""
    match = _TEST_ONLY_START.search(stderr)
    return (match.group("at"), match.group("nodes")) if match else None


__all__ = [
    "ENDED_STATES",
    "JobInfo",
    "KNOWN_STATES",
    "Node",
    "Partition",
    "RUNNING_STATES",
    "SACCT_FIELDS",
    "SQUEUE_FORMAT",
    "SbatchRefusal",
    "WAITING_STATES",
    "base_state",
    "format_time_limit",
    "gres_gpus",
    "parse_exit_code",
    "parse_hostnames",
    "parse_key_values",
    "parse_memory_mb",
    "parse_sacct",
    "parse_sbatch_job_id",
    "parse_sbatch_refusal",
    "parse_show_job",
    "parse_show_nodes",
    "parse_show_partitions",
    "parse_squeue",
    "parse_test_only",
    "parse_time_limit",
]
