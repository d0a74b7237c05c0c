"""Incremental readers for the JSON-lines files a run grows: the trainer's loss log and
the telemetry samples.

After TensorBoard's event-file loader: the reader keeps a byte offset and yields each
record exactly once however often it is polled; a half-written last line is left for the
next poll (not parsed, not lost); a file that shrank or was replaced is noticed and read
again from the start; a garbage line is counted and skipped, never raised.

Bounded whatever the file holds: a poll reads at most `max_chunk` bytes (the rest waits for
the next poll); a line longer than MAX_LINE_BYTES is dropped up to its end and counted,
never kept whole; a curve keeps at most MAX_POINTS points (older ones thinned, the recent
ones kept). Files are opened inside their run without following links (backend.runs.safe_files):
a symlink planted at a log is read as no file at all.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from collections.abc import Iterator
from typing import Any

from backend.runs import safe_files

TRAINER_LOG = "trainer_log.jsonl"  # LLaMA-Factory's name, written into output_dir

# A trainer-log line is ~300 bytes and a telemetry reading ~200: a line a thousand times
# longer is not one of theirs.
MAX_LINE_BYTES = 256 * 1024
# Read per poll at most (~13 000 trainer-log lines): a 4-hour run logging every step has
# ~5 MB of trainer log in all, so a live run is always caught up within a poll or two.
MAX_CHUNK_BYTES = 4 * 1024 * 1024
# Points a curve keeps: the chart shows 600 of them; 20 000 keep its shape at any zoom.
MAX_POINTS = 20_000
RECENT_POINTS = 2_000  # never thinned: the alerts and the live end of the chart look here


class GrowingFile:
    """The complete lines appended to a file since the last read, as bytes.

    Keeps a byte offset; a half-written last line stays unread until its newline arrives;
    a file that was replaced (new inode) or shrank is read again from its start. A read
    takes at most `max_chunk` bytes (the rest waits for the next poll). The file is opened
    within `run_dir` (default: its own directory) without following a link."""

    line_ends: tuple[bytes, ...] = (b"\n",)

    def __init__(self, path: Path, max_chunk: int = MAX_CHUNK_BYTES, run_dir: Path | None = None, max_line: int = MAX_LINE_BYTES):
        self.path = Path(path)
        self.run_dir = Path(run_dir) if run_dir is not None else self.path.parent
        self.relative = self.path.relative_to(self.run_dir) if run_dir is not None else Path(self.path.name)
        self.offset = 0
        self.max_chunk = max_chunk
        self.max_line = max_line
        self.restarts = 0  # times the file was replaced or truncated under us
        self.overlong_lines = 0  # lines dropped for being longer than max_line
        self._skipping = False  # inside an overlong line: dropped up to its end
        self._identity: tuple[int, int] | None = None

    def size(self) -> int | None:
        """The file's size now, or None when it cannot be opened safely."""
        try:
            fd = safe_files.open_in_run(self.run_dir, self.relative)
        except OSError:
            return None
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def read_new(self) -> bytes:
        try:
            fd = safe_files.open_in_run(self.run_dir, self.relative)
        except OSError:
            return b""
        with os.fdopen(fd, "rb") as handle:
            found = os.fstat(fd)
            identity = (found.st_dev, found.st_ino)
            if self._identity is not None and (identity != self._identity or found.st_size < self.offset):
                self.offset = 0
                self.restarts += 1
                self._skipping = False
            self._identity = identity
            if found.st_size <= self.offset:
                return b""
            try:
                handle.seek(self.offset)
                chunk = handle.read(min(found.st_size - self.offset, self.max_chunk))
            except OSError:
                return b""
        return self._complete_lines(chunk)

    def skip_to_line_after(self, offset: int) -> None:
        """Continue reading at the first line that starts after `offset` (the lines before
        were read some other way, e.g. sampled)."""
        self.offset = max(self.offset, offset)
        self._skipping = offset > 0

    def _first_end(self, chunk: bytes) -> int:
        found = [i for i in (chunk.find(end) for end in self.line_ends) if i >= 0]
        return min(found) if found else -1

    def _last_end(self, chunk: bytes) -> int:
        return max(chunk.rfind(end) for end in self.line_ends)

    def _complete_lines(self, chunk: bytes) -> bytes:
        start = 0
        if self._skipping:
            first = self._first_end(chunk)
            if first < 0:
                self.offset += len(chunk)
                return b""
            self._skipping = False
            start = first + 1
        end = self._last_end(chunk)
        if end < start:  # no complete line in what was read
            if len(chunk) - start > self.max_line:
                # Longer than any real line: drop it up to its end, whenever that comes,
                # instead of re-reading it on every poll.
                self.overlong_lines += 1
                self._skipping = True
                self.offset += len(chunk)
            else:
                self.offset += start  # a half-written line: wait for its end
            return b""
        self.offset += end + 1
        return chunk[start:end]


class JsonlTail(GrowingFile):
    """Yields the JSON objects appended to a file since the last poll."""

    def __init__(self, path: Path, run_dir: Path | None = None, max_chunk: int = MAX_CHUNK_BYTES):
        super().__init__(path, max_chunk=max_chunk, run_dir=run_dir)
        self.garbage_lines = 0

    def poll(self) -> list[dict[str, Any]]:
        records = parse_records(self.read_new().split(b"\n"), self.max_line)
        self.garbage_lines += records.garbage
        return records.records

    def read_all(self) -> Iterator[list[dict[str, Any]]]:
        """The records up to the file's current end, a poll's worth at a time."""
        size = self.size() or 0
        while self.offset < size:
            before = self.offset
            yield self.poll()
            if self.offset == before:
                break


@dataclass
class ParsedRecords:
    records: list[dict[str, Any]]
    garbage: int


def parse_records(lines: list[bytes], max_line: int = MAX_LINE_BYTES) -> ParsedRecords:
    """The JSON objects among `lines`; blank lines ignored, anything else counted as garbage."""
    parsed = ParsedRecords([], 0)
    for line in lines:
        if not line.strip():
            continue
        if len(line) > max_line:
            parsed.garbage += 1
            continue
        try:
            record = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            parsed.garbage += 1
            continue
        if isinstance(record, dict):
            parsed.records.append(record)
        else:
            parsed.garbage += 1
    return parsed


def sampled_lines(handle: Any, start: int, end: int, windows: int, window_bytes: int) -> Iterator[list[bytes]]:
    """The complete lines of each of `windows` evenly spaced windows of bytes [start, end) of
    a file, one window at a time: a bounded look at a file too long to read whole (at most
    windows * window_bytes read, one window held at a time)."""
    if end <= start:
        return
    span = end - start
    if span <= windows * window_bytes:
        positions, window_bytes = [start], span
    else:
        step = span // windows
        positions = [start + i * step for i in range(windows)]
    for position in positions:
        handle.seek(position)
        data = handle.read(min(window_bytes, end - position))
        parts = data.split(b"\n")
        if position > 0:
            parts = parts[1:]  # cut by the window's start
        if position + len(data) < end or not data.endswith(b"\n"):
            parts = parts[:-1]  # cut by the window's end
        yield parts


class TextTail(GrowingFile):
    """Yields the complete lines appended to a text log since the last poll.

    Progress bars rewrite their line with carriage returns; each rewrite counts as a line,
    so a metrics dict printed after a bar is seen as soon as its newline arrives."""

    line_ends = (b"\n", b"\r")

    def poll(self) -> list[str]:
        text = self.read_new().decode("utf-8", errors="replace")
        return [line for line in re.split(r"[\r\n]+", text) if line.strip() and len(line) <= self.max_line]


# transformers prints one dict per logging step; from version 5 its values are strings:
# {'loss': '6.238', 'grad_norm': 'nan', 'learning_rate': '8.75e+08', 'epoch': '0.25'}
_TRAINER_PRINT = re.compile(r"\{'loss': '?(?P<loss>[^',}]+)'?, 'grad_norm': '?(?P<grad_norm>[^',}]+)'?")


def parse_trainer_print(line: str) -> dict[str, float] | None:
    """loss and grad_norm from a line where the trainer printed its logging dict."""
    match = _TRAINER_PRINT.search(line)
    if match is None:
        return None
    values = {name: _number_text(match.group(name)) for name in ("loss", "grad_norm")}
    return {name: value for name, value in values.items() if value is not None}


def _number_text(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None


@dataclass(frozen=True)
class MetricPoint:
    """One line of LLaMA-Factory's trainer_log.jsonl, typed."""

    step: int
    total_steps: int
    loss: float | None  # the last line of a run carries no loss
    lr: float | None
    epoch: float | None
    percentage: float | None
    elapsed: str
    remaining: str
    throughput: float | None = None  # tokens per second, when the trainer counts tokens
    total_tokens: int | None = None
    # Preference and reward stages (LLaMA-Factory's LogCallback, llamafactory/train/callbacks.py):
    # `accuracy` is the trainer's `rewards/accuracies` (dpo: how often the chosen answer's reward
    # beats the rejected one's), `reward` the mean reward ppo logs. Absent for pt / sft / kto / rm.
    accuracy: float | None = None
    reward: float | None = None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def parse_metric(record: dict[str, Any]) -> MetricPoint | None:
    """A MetricPoint from one trainer-log record, or None when it is not one."""
    step = record.get("current_steps")
    total = record.get("total_steps")
    if not isinstance(step, int) or not isinstance(total, int):
        return None
    tokens = record.get("total_tokens")
    return MetricPoint(
        step=step,
        total_steps=total,
        loss=_number(record.get("loss")),
        lr=_number(record.get("lr")),
        epoch=_number(record.get("epoch")),
        percentage=_number(record.get("percentage")),
        elapsed=str(record.get("elapsed_time", "")),
        remaining=str(record.get("remaining_time", "")),
        throughput=_number(record.get("throughput")),
        total_tokens=tokens if isinstance(tokens, int) else None,
        accuracy=_number(record.get("accuracy")),
        reward=_number(record.get("reward")),
    )


class MetricSeries:
    """The points of one run's curve, kept gap-free and without duplicate steps.

    A resumed run logs again from its checkpoint's step (`... 24, 25, 21, 22 ...`): the
    steps it repeats replace the old ones, so the curve continues from the checkpoint.
    """

    def __init__(self, max_points: int = MAX_POINTS, recent: int = RECENT_POINTS) -> None:
        self.points: list[MetricPoint] = []
        self.max_points = max(max_points, recent + 2)
        self.recent = recent

    def extend(self, new_points: list[MetricPoint]) -> bool:
        changed = False
        for point in new_points:
            last = self.latest
            # LLaMA-Factory's closing line repeats the last step without a loss: keep the loss.
            if last is not None and point.step == last.step and point.loss is None and last.loss is not None:
                point = replace(
                    point,
                    loss=last.loss,
                    lr=point.lr if point.lr is not None else last.lr,
                    accuracy=point.accuracy if point.accuracy is not None else last.accuracy,
                    reward=point.reward if point.reward is not None else last.reward,
                )
            while self.points and self.points[-1].step >= point.step:
                self.points.pop()
            self.points.append(point)
            changed = True
            if len(self.points) > self.max_points:
                self._thin()
        return changed

    def _thin(self) -> None:
        """Halves the older points (every other one goes; the first stays), keeping the
        recent ones whole: memory stays bounded however long the log grows."""
        older, recent = self.points[: -self.recent], self.points[-self.recent :]
        self.points = older[::2] + recent

    @property
    def latest(self) -> MetricPoint | None:
        return self.points[-1] if self.points else None

