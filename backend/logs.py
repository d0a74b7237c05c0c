"""Incremental readers for the JSON-lines files a run grows: the trainer's loss log and
the telemetry samples.

After TensorBoard's event-file loader: the reader keeps a byte offset and yields each
record exactly once however often it is polled; a half-written last line is left for the
next poll (not parsed, not lost); a file that shrank or was replaced is noticed and read
again from the start; a garbage line is counted and skipped, never raised.
A poll that finds nothing new costs one stat() call, whatever the file's length.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

TRAINER_LOG = "trainer_log.jsonl"  # LLaMA-Factory's name, written into output_dir


class GrowingFile:
    """The complete lines appended to a file since the last read, as bytes.

    Keeps a byte offset; a half-written last line stays unread until its newline arrives;
    a file that was replaced (new inode) or shrank is read again from its start. A read
    takes at most `max_chunk` bytes (the rest waits for the next poll)."""

    def __init__(self, path: Path, max_chunk: int = 16_000_000):
        self.path = Path(path)
        self.offset = 0
        self.max_chunk = max_chunk
        self.restarts = 0  # times the file was replaced or truncated under us
        self._identity: tuple[int, int] | None = None

    def read_new(self) -> bytes:
        try:
            stat = os.stat(self.path)
        except OSError:
            return b""
        identity = (stat.st_dev, stat.st_ino)
        if self._identity is not None and (identity != self._identity or stat.st_size < self.offset):
            self.offset = 0
            self.restarts += 1
        self._identity = identity
        if stat.st_size <= self.offset:
            return b""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read(min(stat.st_size - self.offset, self.max_chunk))
        except OSError:
            return b""
        end = chunk.rfind(b"\n")
        if end < 0:
            return b""  # only a partial line so far: wait for its newline
        self.offset += end + 1
        return chunk[:end]


class JsonlTail(GrowingFile):
    """Yields the JSON objects appended to a file since the last poll."""

    def __init__(self, path: Path):
        super().__init__(path)
        self.garbage_lines = 0

    def poll(self) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        for line in self.read_new().split(b"\n"):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (ValueError, UnicodeDecodeError):
                self.garbage_lines += 1
                continue
            if isinstance(record, dict):
                records.append(record)
            else:
                self.garbage_lines += 1
        return records


class TextTail(GrowingFile):
    """Yields the complete lines appended to a text log since the last poll.

    Progress bars rewrite their line with carriage returns; each rewrite counts as a line,
    so a metrics dict printed after a bar is seen as soon as its newline arrives."""

    def poll(self) -> list[str]:
        text = self.read_new().decode("utf-8", errors="replace")
        return [line for line in re.split(r"[\r\n]+", text) if line.strip()]


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
    )


class MetricSeries:
    """The points of one run's curve, kept gap-free and without duplicate steps.

    A resumed run logs again from its checkpoint's step (`... 24, 25, 21, 22 ...`): the
    steps it repeats replace the old ones, so the curve continues from the checkpoint.
    """

    def __init__(self) -> None:
        self.points: list[MetricPoint] = []

    def extend(self, new_points: list[MetricPoint]) -> bool:
        changed = False
        for point in new_points:
            last = self.latest
            # LLaMA-Factory's closing line repeats the last step without a loss: keep the loss.
            if last is not None and point.step == last.step and point.loss is None and last.loss is not None:
                point = replace(point, loss=last.loss, lr=point.lr if point.lr is not None else last.lr)
            while self.points and self.points[-1].step >= point.step:
                self.points.pop()
            self.points.append(point)
            changed = True
        return changed

    @property
    def latest(self) -> MetricPoint | None:
        return self.points[-1] if self.points else None

