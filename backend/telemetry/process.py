"""Resident memory of the training process tree (psutil): the chart for CPU runs.

It always works, so it is the fallback when no GPU source does. RSS is summed over the
process and all its descendants (LLaMA-Factory's dataloader workers, torchrun children);
shared pages are counted once per process, which overstates a little, but USS would cost
a full /proc/PID/smaps walk per process per tick.
"""

from __future__ import annotations

import time

import psutil

from backend.telemetry.base import PidProvider, Reading, SourceStatus

PROCESS_LABEL = "CPU RAM of the training process"


def tree_rss_bytes(pid: int) -> int | None:
    """RSS summed over `pid` and its descendants; None when `pid` is gone."""
    try:
        root = psutil.Process(pid)
        members = [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    total = 0
    for member in members:
        try:
            total += member.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # a worker that exited between listing and reading
    return total


class ProcessMemorySource:
    """Measures the process tree whose root pid `pid_provider()` names (None: nothing to measure)."""

    name = "process"
    in_process = True  # psutil reads of /proc: see SysfsSource.in_process

    def __init__(self, pid_provider: PidProvider) -> None:
        self.pid_provider = pid_provider
        self.last_failure = ""  # not a tool: a finished process is not a failure to back off from

    def probe(self) -> SourceStatus:
        return SourceStatus(self.name, True, f"psutil {psutil.__version__}")

    def read(self) -> list[Reading]:
        try:
            pid = self.pid_provider()
        except Exception:  # a caller's provider must not break the sampler
            pid = None
        if pid is None:
            return []
        used = tree_rss_bytes(pid)
        if used is None:
            return []
        try:
            total: int | None = psutil.virtual_memory().total
        except Exception:
            total = None
        return [
            Reading(
                gpu=0,
                used_bytes=used,
                total_bytes=total,
                util_pct=None,
                temp_c=None,
                power_w=None,
                source=self.name,
                at=time.time(),
                label=PROCESS_LABEL,
            )
        ]
