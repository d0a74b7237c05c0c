"""The one reader of a run's trainer log, `output/trainer_log.jsonl` (LLaMA-Factory's LogCallback
writes it; RocBoard appends its own lines at a resume).

After TensorBoard's one loader behind its data provider: every part of RocBoard that looks at
the file asks here, none opens it itself.

- the runs table: `read_log_tail` (last step, total, last loss), `read_best_eval_loss`;
- the overlay chart: `read_curve`;
- the monitor of a live run: `LiveTrainerLog` (each record once, however often it is polled);
- a resume: `read_log_tail(...).cut_off` and `append_records` (the log made gap-free and safe
  to append to), `mark_attempt` (the line that says where an attempt begins);
- an evaluation's progress: `parse_tail` / `read_log_tail` (a prediction logs its batches);
- a run whose trainer ended unwatched: `LogTail.finished`.

The records are backend.runs.logs' typed ones: a trainer line is a MetricPoint (parse_metric),
a resume's line an AttemptStart (parse_attempt); both are told apart in one place,
`parse_curve_records`, which every curve reader (live or fresh) goes through. The end of the
log (`read_log_tail`) counts the trainer's own lines only: an attempt's line says where the
next one begins, not a step that was logged. A line that is neither, a garbage line or one
longer than MAX_LINE_BYTES is skipped, never raised.

Bounded whatever the file holds: the end is read in windows from TAIL_BYTES doubling up to
TAIL_MAX_BYTES; a curve reads a log up to CURVE_READ_BYTES whole, a longer one in evenly spaced
windows; the best eval loss scans each byte once. A half-written last line (a trainer killed
mid-write, or still writing) is never parsed: the live reader leaves it for the next poll, a
resume closes it with a newline before appending. What was read is kept while the file's size
and mtime stay the same (backend.runs.file_cache). The file is opened inside its run without
following links (backend.runs.safe_files): a symlink planted at the log is no log.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from backend.runs import OUTPUT_DIR, safe_files
from backend.runs.file_cache import cache_lock, file_key, in_run, memo, prune
from backend.runs.logs import (
    MAX_LINE_BYTES,
    TRAINER_LOG,
    AttemptStart,
    JsonlTail,
    MetricPoint,
    MetricSeries,
    parse_curve_records,
    parse_metric,
    parse_records,
    sampled_lines,
)

RELATIVE = f"{OUTPUT_DIR}/{TRAINER_LOG}"  # inside the run's folder

TAIL_BYTES = 16 * 1024  # ~50 trainer-log lines; doubled until a line with a loss turns up
# ... up to this window (~13 000 lines; 8 MiB read in all): a log whose last 4 MiB hold no
# loss is summed up by its last step, without a loss.
TAIL_MAX_BYTES = 4 * 1024 * 1024
# A curve reads a log up to this size whole; a longer one in CURVE_WINDOWS evenly spaced
# windows of CURVE_WINDOW_BYTES (the same 16 MiB at most): its shape, not every step.
CURVE_READ_BYTES = 16 * 1024 * 1024
CURVE_WINDOWS = 2048
CURVE_WINDOW_BYTES = CURVE_READ_BYTES // CURVE_WINDOWS


def log_path(run_dir: Path) -> Path:
    """Where a run's trainer log is."""
    return Path(run_dir) / OUTPUT_DIR / TRAINER_LOG


@dataclass(frozen=True)
class LogTail:
    """What the end of a trainer log says."""

    step: int | None  # the last step logged
    total_steps: int | None
    last_loss: float | None  # the loss of the last line that has one
    cut_off: bool = False  # the file's last line has no newline yet (half written, or being written)

    @property
    def finished(self) -> bool:
        """The last step logged is the last one planned (LLaMA-Factory's closing line)."""
        return self.step is not None and bool(self.total_steps) and self.step == self.total_steps


NO_TAIL = LogTail(None, None, None)

# path -> ((size, mtime), what was read); path -> (bytes scanned so far, lowest eval_loss in them)
_tail_cache: dict[Path, tuple[tuple[int, int], LogTail]] = {}
_end_cache: dict[Path, tuple[tuple[int, int], LogTail]] = {}  # read_log_tail(loss=False)
_curve_cache: dict[Path, tuple[tuple[int, int], tuple[MetricPoint, ...]]] = {}
_eval_cache: dict[Path, tuple[int, float | None]] = {}


def forget_gone_runs(root: Path, live_dirs: set[Path]) -> None:
    """Forgets what was read of `root`'s runs that are no longer on disk."""
    prune((_tail_cache, _end_cache, _curve_cache, _eval_cache), root, live_dirs)


def _read_window(handle: Any, start: int, length: int) -> bytes:
    handle.seek(start)
    return handle.read(length)


# --- the end of the log ----------------------------------------------------------------


def _parse_tail(data: bytes, whole: bool, last_try: bool = False, loss: bool = True) -> LogTail | None:
    """LogTail from the last bytes of a log; None when they hold no loss and more is left
    (and this is not the last window it may read). Without `loss`, the last step is enough."""
    lines = data.split(b"\n")
    if not whole:
        lines = lines[1:]  # the first line is probably cut by the window
    step = total = None
    for line in reversed(lines):
        if len(line) > MAX_LINE_BYTES:
            continue
        try:
            record = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            continue  # garbage, or the half-written last line
        point = parse_metric(record) if isinstance(record, dict) else None
        if point is None:
            continue  # not the trainer's (a resume's line: where the next attempt begins)
        if step is None:
            step, total = point.step, point.total_steps
        if point.loss is not None or not loss:
            return LogTail(step, total, point.loss)
    return LogTail(step, total, None) if whole or last_try else None


def parse_tail(data: bytes) -> LogTail:
    """What a whole trainer log (or its captured end, from a line start) says: pure."""
    tail = _parse_tail(data, whole=True)
    assert tail is not None
    return replace(tail, cut_off=bool(data) and not data.endswith(b"\n"))


def read_log_tail(path: Path, run_dir: Path | None = None, loss: bool = True) -> LogTail:
    """The last step, total and last loss of a trainer log, and whether its last line is cut
    off, reading only its end: windows from TAIL_BYTES doubling up to TAIL_MAX_BYTES
    (2 * TAIL_MAX_BYTES read at most). Without `loss` (the last step is enough: a resume, a
    prediction's progress, a run that ended unwatched), the loss is that of the last line, and
    the reading stops at it. Cached by size and mtime."""
    key = file_key(path, run_dir)
    if key is None:
        return NO_TAIL

    def read() -> LogTail:
        window = TAIL_BYTES
        tail: LogTail | None = None
        cut_off = False
        with safe_files.opened(*in_run(path, run_dir)) as handle:
            size = key[0]
            while tail is None:
                window = min(window, TAIL_MAX_BYTES)
                start = max(0, size - window)
                data = _read_window(handle, start, size - start)
                cut_off = bool(data) and not data.endswith(b"\n")  # every window ends at the file's end
                tail = _parse_tail(data, whole=start == 0, last_try=window >= TAIL_MAX_BYTES, loss=loss)
                window *= 2
        return replace(tail, cut_off=cut_off)

    try:
        return memo(_tail_cache if loss else _end_cache, path, key, read)
    except OSError:  # not kept: the next call reads again
        return NO_TAIL


# --- the curve ---------------------------------------------------------------------------


def read_curve(path: Path, run_dir: Path | None = None) -> list[MetricPoint]:
    """The curve of a trainer log, as the live chart draws it (a resumed run's repeated
    steps replace the superseded ones); a log longer than CURVE_READ_BYTES is sampled in
    evenly spaced windows. Cached by size and mtime."""
    key = file_key(path, run_dir)
    if key is None:
        return []

    def read() -> tuple[MetricPoint, ...]:
        series = MetricSeries()
        if key[0] <= CURVE_READ_BYTES:
            for records in JsonlTail(path, run_dir=in_run(path, run_dir)[0]).read_all():
                series.extend(parse_curve_records(records))
        else:
            try:
                with safe_files.opened(*in_run(path, run_dir)) as handle:
                    for lines in sampled_lines(handle, 0, key[0], CURVE_WINDOWS, CURVE_WINDOW_BYTES):
                        series.extend(parse_curve_records(parse_records(lines).records))
            except OSError:
                pass
        return tuple(series.points)

    return list(memo(_curve_cache, path, key, read))


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def read_best_eval_loss(path: Path, run_dir: Path | None = None) -> float | None:
    """The lowest `eval_loss` in a trainer log. Each byte is scanned once (a growing log is
    read from where the last scan stopped), at most CURVE_READ_BYTES a call: a log that grew
    by more since is scanned over its last CURVE_READ_BYTES only."""
    key = file_key(path, run_dir)
    if key is None:
        return None
    size = key[0]
    with cache_lock:
        offset, best = _eval_cache.get(path, (0, None))
    if offset > size:  # rewritten, not appended to
        offset, best = 0, None
    if offset == size:
        return best
    start = max(offset, size - CURVE_READ_BYTES)
    try:
        with safe_files.opened(*in_run(path, run_dir)) as handle:
            data = _read_window(handle, start, size - start)
    except OSError:
        return best
    end = data.rfind(b"\n") + 1  # whole lines only: one being written is read next time
    lines = data[:end].split(b"\n")
    if start > offset:
        lines = lines[1:]  # cut by the window
    for line in lines:
        if b"eval_loss" not in line or len(line) > MAX_LINE_BYTES:
            continue
        try:
            record = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            continue
        loss = _finite(record.get("eval_loss")) if isinstance(record, dict) else None
        if loss is not None and (best is None or loss < best):
            best = loss
    with cache_lock:
        _eval_cache[path] = (start + end, best)
    return best


# --- a live run --------------------------------------------------------------------------


class LiveTrainerLog:
    """A live run's trainer log, followed: each `poll()` yields, in batches, the records
    appended since the last one (MetricPoint and AttemptStart, in the log's order), each
    exactly once; a half-written last line waits for its newline.

    A log longer than `sample_above` bytes, met on the first poll (a long run opened after a
    restart), is caught up by sampling all but its last `tail_bytes` in evenly spaced windows
    (bounded reads), then read line by line from there: the whole curve at once, never after
    minutes of polls."""

    def __init__(self, run_dir: Path, sample_above: int, tail_bytes: int):
        self.run_dir = Path(run_dir)
        self.tail = JsonlTail(log_path(self.run_dir), run_dir=self.run_dir)
        self.sample_above = sample_above
        self.tail_bytes = tail_bytes

    @property
    def garbage_lines(self) -> int:
        """Lines read so far that were not JSON objects."""
        return self.tail.garbage_lines

    def poll(self) -> Iterator[list[MetricPoint | AttemptStart]]:
        yield from self._catch_up_by_sampling()
        yield parse_curve_records(self.tail.poll())

    def _catch_up_by_sampling(self) -> Iterator[list[MetricPoint | AttemptStart]]:
        tail = self.tail
        if tail.offset or tail._identity is not None:
            return
        size = tail.size()
        if size is None or size <= self.sample_above:
            return
        boundary = size - self.tail_bytes
        try:
            with safe_files.opened(self.run_dir, tail.relative) as handle:
                for lines in sampled_lines(handle, 0, boundary, CURVE_WINDOWS, CURVE_WINDOW_BYTES):
                    yield parse_curve_records(parse_records(lines).records)  # one window at a time
        except OSError:
            return  # read line by line from the start instead
        tail.skip_to_line_after(boundary)


# --- what a resume writes ----------------------------------------------------------------


def append_records(run_dir: Path, records: Sequence[dict[str, Any]], close_cut_line: bool) -> None:
    """Appends `records`, one JSON line each, after closing a cut-off last line with a newline
    when `close_cut_line` (the half line stays, closed: a resumed trainer's first line is not
    glued onto it). Only appends: not a byte already in the file changes. Opened inside the
    run without following a link: a planted link is refused, never appended to."""
    text = ("\n" if close_cut_line else "") + "".join(json.dumps(record) + "\n" for record in records)
    with safe_files.opened(Path(run_dir), RELATIVE, "ab") as handle:
        handle.write(text.encode("utf-8"))


def mark_attempt(run_dir: Path, start: AttemptStart) -> None:
    """Appends the line that says where attempt `start.attempt` begins (after the log was
    repaired, before the trainer starts): every curve reader cuts the curve back to its
    checkpoint there (backend.runs.logs.parse_attempt reads it back)."""
    append_records(run_dir, [start.record()], close_cut_line=False)


__all__ = [
    "CURVE_READ_BYTES",
    "CURVE_WINDOWS",
    "CURVE_WINDOW_BYTES",
    "NO_TAIL",
    "RELATIVE",
    "TAIL_BYTES",
    "TAIL_MAX_BYTES",
    "LiveTrainerLog",
    "LogTail",
    "append_records",
    "forget_gone_runs",
    "log_path",
    "mark_attempt",
    "parse_tail",
    "read_best_eval_loss",
    "read_curve",
    "read_log_tail",
]
