"""Run a telemetry tool (argument list, no shell) with a hard timeout, never raising.

Why not `subprocess.run(timeout=...)`: on timeout it kills only the direct child and then
waits for the pipes to close; a wrapper script whose own child still holds stdout open
(`rocm-smi` is a Python script, vendor tools are often shell wrappers) would hang it.
We start the tool in its own session and kill the whole process group instead.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from backend.i18n import Message
from backend.i18n.errors import os_error
from backend.security.child_env import child_env


@dataclass(frozen=True)
class ToolOutput:
    """What one call of a tool produced. `error` is "" when the tool ran to completion
    (whatever its exit code: rocm-smi exits 2 after printing everything)."""

    argv: tuple[str, ...]
    stdout: str
    stderr: str
    returncode: int | None  # None when it did not run or was killed on timeout
    seconds: float
    error: str = ""  # "not found", "timed out after 2.0 s", "could not start: ..."

    @property
    def ran(self) -> bool:
        return not self.error


def find_tool(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """Full path of `name` on PATH (the given environment's PATH), or None."""
    path = (env if env is not None else os.environ).get("PATH", os.defpath)
    return shutil.which(name, path=path)


# What a tool may print before the rest is dropped: far above any answer RocBoard asks for
# (a node list of a 10,000-node cluster is ~5 MB), so a runaway tool cannot fill the memory.
MAX_OUTPUT_BYTES = 8 * 1024 * 1024


def run_tool(
    argv: Sequence[str],
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    *,
    own: Mapping[str, str] | None = None,
    input_text: str | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> ToolOutput:
    """Run `argv` (argv[0] is looked up on the env's PATH) and collect its output.

    `own`: variables RocBoard itself sets for the tool (child_env's `own`: SLURM_CONF for a
    Slurm client); `input_text`: what the tool reads on stdin (sbatch --test-only reads the
    script there)."""
    started = time.monotonic()
    argv = tuple(argv)
    exe = find_tool(argv[0], env) if os.sep not in argv[0] else argv[0]
    if exe is None:
        return ToolOutput(argv, "", "", None, 0.0, error=Message("telemetry.tool_not_found", tool=argv[0]))
    try:
        proc = subprocess.Popen(
            (exe, *argv[1:]),
            stdin=subprocess.DEVNULL if input_text is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # Only the allow-listed variables (PATH, HIP_*/ROCR_*/CUDA_* visibility, ...) reach
            # the tool: never ROCBOARD_AUTH or another secret of the web process.
            env=child_env(env, own=own),
            cwd=cwd,
            start_new_session=True,  # own process group, so a timeout kills the whole tree
        )
    except OSError as exc:
        return ToolOutput(argv, "", "", None, time.monotonic() - started, error=Message("telemetry.tool_could_not_start", error=os_error(exc)))
    try:
        out, err = proc.communicate(input=None if input_text is None else input_text.encode("utf-8"), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        try:
            out, err = proc.communicate(timeout=1.0)
        except subprocess.TimeoutExpired:  # a grandchild escaped the group and holds a pipe
            out, err = b"", b""
        return ToolOutput(
            argv,
            _text(out),
            _text(err),
            None,
            time.monotonic() - started,
            error=Message("telemetry.tool_timed_out", seconds=f"{timeout_s:g}"),
        )
    return ToolOutput(argv, _text(out), _text(err), proc.returncode, time.monotonic() - started)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _text(data: bytes | None) -> str:
    return (data or b"")[:MAX_OUTPUT_BYTES].decode("utf-8", errors="replace")
