"""Ending a child the app talks to over a pipe (a chat server, the LLaMA-Factory helper): each
exits on its own when its stdin closes, so closing it is the stop; a child still there after
a bounded wait is killed."""

from __future__ import annotations

import subprocess
from collections.abc import Callable


def close_and_wait(process: subprocess.Popen, wait_s: float, kill_wait_s: float = 2.0, before_kill: Callable[[], object] | None = None) -> None:
    """Closes `process`'s stdin and waits `wait_s` for it to exit; if it has not, runs
    `before_kill` (a chat server's process tree is signalled), kills it and waits at most
    `kill_wait_s` more. Bounded: never raises for a child that is gone or will not die."""
    try:
        if process.stdin is not None:
            process.stdin.close()
    except OSError:
        pass
    try:
        process.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        if before_kill is not None:
            before_kill()
        try:
            process.kill()
            process.wait(timeout=kill_wait_s)
        except (OSError, subprocess.TimeoutExpired):
            pass
