"""A user's dataset file is read in a child process, never in the web process.

`inspect_dataset` (dataset_file.py) bounds what it decodes before it decodes it (line and row
sizes, nesting, row counts, a Parquet file's metadata); what no check can see before decoding
(a row of five million empty lists, a CSV field cut into lines inside its quotes, a
Parquet encoding that expands on its own) would still be paid in memory. So the page's reads
run `inspect_dataset` in a fork of the web process:

- the fork starts in about a millisecond with everything imported (pandas and pyarrow are
  already loaded by the web process): the Data tab's preview costs what the reading costs,
  not a new interpreter's start (0.5-1.5 s on two cores for pandas and pyarrow);
- its address space may grow by READ_MEMORY_MIB beyond what it inherited (RLIMIT_AS): past
  that, an allocation fails, and the read ends as a `data-memory` finding naming the row;
- it is killed after READ_TIMEOUT_S, and dies with the web process (PR_SET_PDEATHSIG);
- it answers one JSON document (never a pickle: a child that a file took over could not
  make the web process run anything), at most ANSWER_MAX_BYTES: the web process grows by
  what the page shows, whatever the file holds.

The fork keeps only the thread that forked. It touches no lock another thread may have held:
it reads one file, writes to its own pipe, and leaves with os._exit (no atexit, no flush of
the parent's buffers); the parent's objects are frozen out of its garbage collector, so it
copies few of the parent's pages. Where fork is missing (not Linux/macOS), the read runs in
process as before.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import select
import signal
import time
from pathlib import Path
from typing import Any

from backend.data import dataset_file
from backend.data.dataset_file import DEFAULT_MAX_BYTES, KEY, Inspection, inspect_dataset
from backend.data.layout import ColumnMapping
from backend.findings import Finding, Severity
from backend.i18n import Message

READ_MEMORY_MIB = dataset_file.READ_MEMORY_MIB  # the reading child's address space may grow by this much
READ_TIMEOUT_S = 600.0  # a 4 GB file's check takes minutes at most on two cores
ANSWER_MAX_BYTES = 16 * 2**20  # the JSON the child answers (20 preview rows of 1,000 columns fit)

_PR_SET_PDEATHSIG = 1


def _prctl() -> Any:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError, ImportError):
        return None


_PRCTL = _prctl() if hasattr(os, "fork") else None  # looked up here: the child imports nothing


def inspect_bounded(path: Path, shown_name: str, mapping: ColumnMapping | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> Inspection:
    """`inspect_dataset` in a child process capped at READ_MEMORY_MIB and READ_TIMEOUT_S;
    its Inspection, or one finding saying why the child gave none."""
    path = Path(path)
    if not hasattr(os, "fork"):
        return inspect_dataset(path, shown_name, mapping, max_bytes)
    _import_readers(shown_name, path)
    read_end, write_end = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        _child(write_end, parent, path, shown_name, mapping, max_bytes)
    os.close(write_end)
    try:
        data, timed_out = _read_answer(read_end, time.monotonic() + READ_TIMEOUT_S)
    finally:
        os.close(read_end)
        status = _reap(pid)
    def refused(finding: Finding) -> Inspection:
        return Inspection(path, "", 0, (), (), (), mapping, (finding,))

    if timed_out:
        return refused(Finding.of(KEY, "data-read-timeout", file=shown_name, seconds=f"{READ_TIMEOUT_S:g}"))
    try:
        answer = json.loads(data.decode("utf-8", "surrogatepass")) if data is not None else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        if data is None:
            return refused(Finding.of(KEY, "data-read-failed", message="data-read-answer-too-big", file=shown_name, limit=f"{ANSWER_MAX_BYTES / 2**20:.0f}"))
        return refused(Finding.of(KEY, "data-read-failed", file=shown_name, status=_status_text(status)))
    if answer.get("memory"):
        return refused(Finding.of(KEY, "data-memory", message="data-memory-whole", file=shown_name, limit=f"{READ_MEMORY_MIB}"))
    if "inspection" not in answer:
        return refused(Finding.of(KEY, "data-read-failed", file=shown_name, status=str(answer.get("error", ""))[:100]))
    return decode_inspection(answer["inspection"])


def _import_readers(shown_name: str, path: Path) -> None:
    """The libraries a format's reader needs, imported here once (the web process has them
    already): importing pandas in each child would cost its time and its memory cap (numpy's
    BLAS reserves its buffers on import)."""
    extension = (os.path.splitext(shown_name)[1] or path.suffix).lower()
    # Imported for their side effect (loaded once, before the fork's cap): a linter's "unused
    # import" fix must not take them out, or each capped child imports them and runs out.
    if extension == ".csv":
        import pandas  # noqa: F401
    elif extension == ".parquet":
        import numpy  # noqa: F401
        import pyarrow  # noqa: F401
        import pyarrow.compute  # noqa: F401
        import pyarrow.parquet  # noqa: F401


def _child(write_end: int, parent: int, path: Path, shown_name: str, mapping: ColumnMapping | None, max_bytes: int) -> None:
    code = 0
    try:
        gc.freeze()  # the parent's objects: never traversed, so their pages stay shared
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the web process is already gone
            os._exit(1)
        # Its listening sockets, its pipes to other children: none of this child's business.
        os.closerange(3, write_end)
        os.closerange(write_end + 1, 1 << 16)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _cap_memory(READ_MEMORY_MIB * 2**20)
        dataset_file.READ_MEMORY_MIB = READ_MEMORY_MIB  # what its findings name (this process only)
        try:
            inspection = inspect_dataset(path, shown_name, mapping, max_bytes)
            answer = _encode_answer(inspection)
        except MemoryError:
            inspection = None
            answer = b'{"memory": true}'
        _write_all(write_end, answer)
    except BaseException as error:  # never back into the web process's frames
        code = 3
        try:
            _write_all(write_end, json.dumps({"error": type(error).__name__}).encode())
        except BaseException:
            pass
    finally:
        os._exit(code)


def _cap_memory(budget: int) -> None:
    try:
        with open("/proc/self/statm", "rb") as handle:
            inherited = int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        inherited = 0
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = inherited + budget if inherited else budget * 8
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft == resource.RLIM_INFINITY or cap < soft:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    _arrow_on_the_system_allocator()


def _arrow_on_the_system_allocator() -> None:
    """pyarrow's default allocator (jemalloc) reserves address space ahead of use: under an
    address-space cap, the system allocator fails only when memory is really asked for."""
    import sys

    arrow = sys.modules.get("pyarrow")
    if arrow is None:
        os.environ["ARROW_DEFAULT_MEMORY_POOL"] = "system"
        return
    try:
        arrow.set_memory_pool(arrow.system_memory_pool())
    except Exception:
        pass


def _encode_answer(inspection: Inspection) -> bytes:
    """The inspection as JSON, at most ANSWER_MAX_BYTES: fewer preview rows when the rows are
    wide, then none (the checks' findings are what matters)."""
    encoded = encode_inspection(inspection)
    for keep in (None, 5, 0):
        if keep is not None:
            encoded["preview"] = encoded["preview"][:keep]
        data = json.dumps({"inspection": encoded}, ensure_ascii=False).encode("utf-8", "surrogatepass")
        if len(data) <= ANSWER_MAX_BYTES:
            return data
    finding = Finding.of(KEY, "data-read-failed", message="data-read-answer-too-big", file=inspection.source.name, limit=f"{ANSWER_MAX_BYTES / 2**20:.0f}")
    small = {**encoded, "columns": [], "empty_share": [], "preview": [], "findings": [encode_finding(finding)]}
    return json.dumps({"inspection": small}, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view[: 1 << 20])
        view = view[written:]


def _read_answer(fd: int, deadline: float) -> tuple[bytearray | None, bool]:
    """(the bytes the child wrote, None when over ANSWER_MAX_BYTES; whether time ran out)."""
    data = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None, True
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if not ready:
            continue
        block = os.read(fd, 1 << 20)
        if not block:
            return data, False
        data += block
        if len(data) > ANSWER_MAX_BYTES + 4096:
            return None, False


def _reap(pid: int) -> int | None:
    """The child's wait status; it is killed first if it still runs (timed out, or its answer
    was too big). None when someone else reaped it."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == 0:
            os.kill(pid, signal.SIGKILL)
            done, status = os.waitpid(pid, 0)
        return status
    except ChildProcessError:
        return None
    except ProcessLookupError:
        try:
            return os.waitpid(pid, 0)[1]
        except ChildProcessError:
            return None


def _status_text(status: int | None) -> str:
    if status is None:
        return "?"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return signal.Signals(number).name
        except ValueError:
            return f"signal {number}"
    return f"exit {os.WEXITSTATUS(status)}" if os.WIFEXITED(status) else str(status)


# --- the answer as JSON -----------------------------------------------------------------------


def _encode_value(value: Any) -> Any:
    if isinstance(value, Message):
        return {"message": value.key, "params": {name: _encode_value(v) for name, v in value.params.items()}}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _decode_value(value: Any) -> Any:
    if isinstance(value, dict):
        return Message(str(value.get("message", "")), **{str(k): _decode_value(v) for k, v in (value.get("params") or {}).items()})
    return value


def encode_finding(finding: Finding) -> dict[str, Any]:
    return {
        "key": finding.key,
        "rule": finding.rule,
        "message": finding.message,
        "severity": finding.severity,
        "params": {name: _encode_value(value) for name, value in (finding.params or {}).items()},
    }


def decode_finding(data: dict[str, Any]) -> Finding:
    params = {str(name): _decode_value(value) for name, value in (data.get("params") or {}).items()}
    severity: Severity = "warning" if data.get("severity") == "warning" else "problem"
    return Finding.of(str(data["key"]), str(data["rule"]), message=str(data.get("message") or ""), severity=severity, **params)


def encode_inspection(inspection: Inspection) -> dict[str, Any]:
    mapping = inspection.mapping
    return {
        "source": str(inspection.source),
        "file_format": inspection.file_format,
        "rows": inspection.rows,
        "columns": list(inspection.columns),
        "empty_share": [[column, share] for column, share in inspection.empty_share],
        "preview": [list(row) for row in inspection.preview],
        "mapping": None if mapping is None else {"layout": mapping.layout, "columns": [list(p) for p in mapping.columns], "tags": [list(p) for p in mapping.tags]},
        "findings": [encode_finding(f) for f in inspection.findings],
        "guessed": inspection.guessed,
    }


def decode_inspection(data: dict[str, Any]) -> Inspection:
    mapping = data.get("mapping")
    return Inspection(
        source=Path(data["source"]),
        file_format=str(data["file_format"]),
        rows=int(data["rows"]),
        columns=tuple(str(c) for c in data["columns"]),
        empty_share=tuple((str(c), float(s)) for c, s in data["empty_share"]),
        preview=tuple(tuple(str(cell) for cell in row) for row in data["preview"]),
        mapping=None
        if mapping is None
        else ColumnMapping(str(mapping["layout"]), tuple((str(r), str(c)) for r, c in mapping["columns"]), tuple((str(t), str(v)) for t, v in mapping["tags"])),
        findings=tuple(decode_finding(f) for f in data["findings"]),
        guessed=bool(data["guessed"]),
    )


__all__ = ["ANSWER_MAX_BYTES", "READ_MEMORY_MIB", "READ_TIMEOUT_S", "inspect_bounded"]
