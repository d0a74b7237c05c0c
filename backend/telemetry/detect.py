"""Find out once which telemetry sources work here, cheapest first.

Order of cost: sysfs (a few file reads), amd-smi, rocm-smi, nvidia-smi (a process each).
The first GPU source that works is the chart's; the process-memory source is always
appended, so a CPU run (or a machine whose GPU tools all fail) charts the training
process's RAM instead. Sources that do not work come back as statuses with hints.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from backend.i18n import Message
from backend.telemetry.amd_smi import AmdSmiSource
from backend.telemetry.base import PidProvider, Source, SourceStatus
from backend.telemetry.nvidia_smi import NvidiaSmiSource
from backend.telemetry.process import ProcessMemorySource
from backend.telemetry.rocm_smi import RocmSmiSource
from backend.telemetry.sysfs import SysfsSource


def _no_pid() -> int | None:
    return None


def gpu_sources(sysfs_root: Path = Path("/sys"), env: Mapping[str, str] = os.environ) -> list[Source]:
    """Every GPU source, in the order they are tried."""
    return [
        SysfsSource(sysfs_root, env),
        AmdSmiSource(env, sysfs_root),
        RocmSmiSource(env, sysfs_root),
        NvidiaSmiSource(env, sysfs_root),
    ]


def detect_sources(
    sysfs_root: Path = Path("/sys"),
    env: Mapping[str, str] = os.environ,
    pid_provider: PidProvider = _no_pid,
) -> tuple[list[Source], list[SourceStatus]]:
    """(working sources, chart's first; a status for every source tried).

    Probing stops at the first GPU source that works: the costlier ones are not run, and
    are not listed. The process source is always last in both lists.
    """
    sources: list[Source] = []
    statuses: list[SourceStatus] = []
    for source in gpu_sources(Path(sysfs_root), env):
        try:
            status = source.probe()
        except Exception as exc:  # a probe must not stop the app from starting
            status = SourceStatus(source.name, False, Message("telemetry.probe_failed", error=f"{type(exc).__name__}: {exc}"))
        statuses.append(status)
        if status.available:
            sources.append(source)
            break
    process = ProcessMemorySource(pid_provider)
    sources.append(process)
    statuses.append(process.probe())
    return sources, statuses
