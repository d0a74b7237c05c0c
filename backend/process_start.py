"""A process's start key: with its pid, it names one process for good.

psutil's create_time() is the process's start in clock ticks since boot plus /proc/stat's
`btime`, and the kernel recomputes btime from the wall clock: each time the clock is stepped
(NTP or chrony's makestep, a VM's time sync, a resume) a live process's create_time() moves with
it. A create_time() recorded when a run started and compared to 0.01 s an hour later can then
call the run's own live starter gone (CI saw exactly that after 65 minutes: btime had moved by
one second). The start key is the kernel's boot id and the start in clock ticks since boot
(/proc/<pid>/stat, field 22): neither changes while the process lives, and a reboot changes
the boot id. psutil names processes the same way for its own pid-reuse check."""

from __future__ import annotations

import functools
from pathlib import Path

PROC = Path("/proc")
START_KEY_MAX_CHARS = 64  # a boot id (36) + ':' + a tick count; anything longer is not ours
_STAT_MAX_BYTES = 4096  # /proc/<pid>/stat is one short line; the command name is at most 64 bytes
_START_TICKS_FIELD = 22  # proc(5): starttime, in clock ticks since boot


@functools.cache
def _boot_id() -> str | None:
    try:
        text = (PROC / "sys/kernel/random/boot_id").read_text(encoding="ascii")[:64].strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


def parse_start_ticks(stat: bytes) -> int | None:
    """The start in clock ticks since boot from the text of /proc/<pid>/stat, or None. The
    command name (field 2, in parentheses) may hold spaces and ')': fields are counted from
    the last ')'."""
    _, closing, rest = stat.rpartition(b")")
    fields = rest.split()
    index = _START_TICKS_FIELD - 3  # fields after the name start at field 3 (the state)
    if not closing or len(fields) <= index or not fields[index].isdigit():
        return None
    return int(fields[index])


def start_ticks(pid: int) -> int | None:
    """The start of live process `pid` in clock ticks since boot, or None (no such process)."""
    try:
        with open(PROC / str(pid) / "stat", "rb") as stat:
            return parse_start_ticks(stat.read(_STAT_MAX_BYTES))
    except OSError:
        return None


def start_key(pid: int) -> str | None:
    """The start key of live process `pid` ("<boot id>:<start ticks>"), or None where /proc
    cannot tell (no such process, another system)."""
    boot = _boot_id()
    ticks = None if boot is None else start_ticks(pid)
    return None if ticks is None else f"{boot}:{ticks}"
