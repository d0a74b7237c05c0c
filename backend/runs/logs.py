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
import math
import os
import re
import secrets
import stat
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter
from pathlib import Path
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
# Points a chart draws per curve at most (backend/charts.py), however many were logged.
DISPLAY_POINTS = 600
SMOOTHING = 0.8  # TensorBoard-style exponential moving average weight of the drawn loss


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

    def unchanged(self, found: os.stat_result | None) -> bool:
        """Whether `found` (the file's lstat, no link followed) says a read_new now would find
        nothing and change nothing: the same file as last read, every byte of it read (no half
        line waiting). Asked before a read so a look at a quiet file costs one stat."""
        return found is not None and stat.S_ISREG(found.st_mode) and (found.st_dev, found.st_ino) == self._identity and found.st_size == self.offset and not self._skipping

    def read_new(self) -> bytes:
        try:
            fd = safe_files.open_in_run(self.run_dir, self.relative)
        except OSError:
            return b""
        try:  # os-level: polled every second or so, mostly to find nothing new
            found = os.fstat(fd)
            identity = (found.st_dev, found.st_ino)
            if self._identity is not None and (identity != self._identity or found.st_size < self.offset):
                self.offset = 0
                self.restarts += 1
                self._skipping = False
            self._identity = identity
            if found.st_size <= self.offset:
                return b""
            wanted = min(found.st_size - self.offset, self.max_chunk)
            parts: list[bytes] = []
            while wanted > 0:
                part = os.pread(fd, wanted, self.offset + sum(map(len, parts)))
                if not part:
                    break
                parts.append(part)
                wanted -= len(part)
            chunk = b"".join(parts)
        except OSError:
            return b""
        finally:
            os.close(fd)
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
    # The loss on the held-out data (val_size / eval_dataset): LLaMA-Factory writes an evaluation
    # as a line of its own at the step it evaluated, with `eval_loss` and no `loss` (after the
    # training line of that step, when the step logged one too).
    eval_loss: float | None = None


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
    if not isinstance(step, int) or not isinstance(total, int) or isinstance(step, bool) or isinstance(total, bool):
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
        eval_loss=_number(record.get("eval_loss")),
    )


# The line RocBoard appends to trainer_log.jsonl when it resumes a run (backend/runs/resume.py),
# before the resumed trainer writes its first one: which attempt begins, after which step,
# the tokens the checkpoint had counted, and when. LLaMA-Factory never reads the file; every
# reader of the curve meets the line exactly where the new attempt begins.
ATTEMPT_KEY = "rocboard_attempt"


@dataclass(frozen=True)
class AttemptStart:
    """Where a resumed attempt begins in a run's curve: it trains the steps after `from_step`
    (its checkpoint's). `tokens`: the tokens the checkpoint had seen (LLaMA-Factory counts on
    from it); `at`: time.time() of the resume. None where unknown (a log resumed before these
    lines existed: the attempt is then told by its step going back)."""

    attempt: int
    from_step: int
    tokens: int | None = None
    at: float | None = None

    def record(self) -> dict[str, Any]:
        record: dict[str, Any] = {ATTEMPT_KEY: self.attempt, "resumed_from_step": self.from_step}
        if self.tokens is not None:
            record["checkpoint_tokens"] = self.tokens
        if self.at is not None:
            record["at"] = round(self.at, 3)
        return record


def parse_attempt(record: dict[str, Any]) -> AttemptStart | None:
    """The AttemptStart of a resume line, or None when the record is not one."""
    attempt, step = record.get(ATTEMPT_KEY), record.get("resumed_from_step")
    if not isinstance(attempt, int) or isinstance(attempt, bool) or not isinstance(step, int) or isinstance(step, bool) or attempt < 2 or step < 0:
        return None
    tokens, at = record.get("checkpoint_tokens"), _number(record.get("at"))
    return AttemptStart(
        attempt,
        step,
        tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0 else None,
        at if at is not None and math.isfinite(at) else None,
    )


def parse_curve_records(records: list[dict[str, Any]]) -> list[MetricPoint | AttemptStart]:
    """What a MetricSeries is extended with, in the log's order: each record's point, and the
    start of each resumed attempt; other records are left out."""
    items: list[MetricPoint | AttemptStart] = []
    for record in records:
        item = parse_metric(record) or parse_attempt(record)
        if item is not None:
            items.append(item)
    return items


def _seconds(text: str) -> float | None:
    """LLaMA-Factory's "H:MM:SS" (str(timedelta)), in seconds; None if it is not one."""
    days = 0
    if " day" in text:  # "1 day, 2:03:04"
        head, _, text = text.partition(",")
        try:
            days = int(head.split()[0])
        except ValueError:
            return None
    parts = text.strip().split(":")
    if len(parts) != 3:
        return None
    try:
        hours, minutes, seconds = int(parts[0]), int(parts[1]), float(parts[2])
    except ValueError:
        return None
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


def _clock_text(seconds: float) -> str:
    """Seconds as LLaMA-Factory writes a time (str(timedelta) of whole seconds)."""
    from datetime import timedelta

    return str(timedelta(seconds=int(max(0.0, seconds))))


@dataclass(frozen=True)
class AttemptMark:
    """An attempt of a resumed run as its curve shows it: attempt `attempt` trained the steps
    after `from_step`; `at`: when it was resumed (time.time()), None where unknown."""

    attempt: int
    from_step: int
    at: float | None = None


# An entry of a drawn curve: (its index in the curve, step, value, smoothed value or None).
Entry = tuple[int, int, float, float | None]


class DrawnCurve:
    """The points of one curve worth drawing, kept up to date as the curve grows: appending a
    point costs O(1) amortised and reading the drawn points O(drawn), never O(logged).

    The rule (the same as `from_values`, which applies it from scratch): the curve is cut into
    buckets of `width` consecutive points, `width` the smallest power of two that keeps the
    buckets at most `max_buckets`; a bucket shows its first point and, with `extremes`, its
    lowest and its highest value (NaN skipped; a tie shows the earliest low and the latest
    high), so a spike never disappears; the curve's last point is always shown. At most
    `max_points` points are drawn.

    Appending touches the last bucket only; when one bucket too many would open, neighbours
    merge pairwise and `width` doubles (what from-scratch bucketing at that width gives).
    `epoch` grows at each merge or truncation: then every drawn point may have changed.
    After a `truncate` (a resumed run going back), `width` stays as it was: the view may be
    coarser than from scratch, never over its bound."""

    __slots__ = ("extremes", "max_buckets", "width", "count", "buckets", "last", "epoch", "_prefix", "_prefix_key")

    def __init__(self, max_points: int = DISPLAY_POINTS, extremes: bool = True):
        self.extremes = extremes
        self.max_buckets = max(1, (max_points - 1) // (3 if extremes else 1))
        self.width = 1
        self.count = 0
        # Each bucket: [first, low, high, last] entries (low and high None without extremes,
        # or when every value in it is NaN).
        self.buckets: list[list[Any]] = []
        self.last: Entry | None = None
        self.epoch = 0
        self._prefix: list[Entry] = []  # the drawn entries of buckets[:n], cached
        self._prefix_key = (0, 0)  # (epoch, n) the cache was made for

    @classmethod
    def from_values(cls, steps: list[int], values: list[float], smoothed: list[float] | None = None, max_points: int = DISPLAY_POINTS, extremes: bool = True) -> DrawnCurve:
        """The curve built in one go (C-speed min/max per bucket); appending goes on from there."""
        curve = cls(max_points, extremes)
        n = len(values)
        width = 1
        while -(-n // width) > curve.max_buckets:
            width *= 2

        def entry(i: int) -> Entry:
            return (i, steps[i], values[i], smoothed[i] if smoothed is not None else None)

        for start in range(0, n, width):
            end = min(n, start + width)
            low = high = None
            if extremes:
                window = values[start:end]
                clean = [v for v in window if v == v]  # NaN is the value unequal to itself
                if clean:
                    low = entry(start + window.index(min(clean)))
                    high = entry(end - 1 - window[::-1].index(max(clean)))
            curve.buckets.append([entry(start), low, high, entry(end - 1)])
        curve.width, curve.count = width, n
        curve.last = entry(n - 1) if n else None
        return curve

    def add(self, step: int, value: float, smoothed: float | None = None) -> None:
        index = self.count
        if index // self.width >= self.max_buckets:
            self._merge()
        entry = (index, step, value, smoothed)
        self.count += 1
        self.last = entry
        ranked = self.extremes and value == value
        if index // self.width == len(self.buckets):
            self.buckets.append([entry, entry if ranked else None, entry if ranked else None, entry])
            return
        bucket = self.buckets[-1]
        bucket[3] = entry
        if ranked:
            low, high = bucket[1], bucket[2]
            if low is None or value < low[2]:
                bucket[1] = entry
            if high is None or value >= high[2]:
                bucket[2] = entry

    def _merge(self) -> None:
        buckets, merged = self.buckets, []
        for j in range(0, len(buckets) - 1, 2):
            a, b = buckets[j], buckets[j + 1]
            low = a[1] if b[1] is None or (a[1] is not None and a[1][2] <= b[1][2]) else b[1]
            high = a[2] if b[2] is None or (a[2] is not None and a[2][2] > b[2][2]) else b[2]
            merged.append([a[0], low, high, b[3]])
        if len(buckets) % 2:
            merged.append(buckets[-1])
        self.buckets = merged
        self.width *= 2
        self.epoch += 1

    def truncate(self, step: int) -> int | None:
        """Drops the buckets that hold a point at `step` or later; returns the first step of
        what was dropped (the caller appends again the points it keeps from there), or None
        when nothing was."""
        if self.last is None or self.last[1] < step:
            return None
        b = len(self.buckets) - 1
        while b > 0 and self.buckets[b][0][1] >= step:
            b -= 1
        if self.buckets[b][0][1] >= step:
            b = 0
        elif self.buckets[b][3][1] < step:
            b += 1
        dropped_from = self.buckets[b][0][1]
        del self.buckets[b:]
        self.count = b * self.width
        self.last = self.buckets[-1][3] if self.buckets else None
        self.epoch += 1
        return dropped_from

    @staticmethod
    def _bucket_entries(bucket: list[Any], out: list[Entry]) -> None:
        first, low, high = bucket[0], bucket[1], bucket[2]
        out.append(first)
        if low is None:
            return
        a, b = (low, high) if low[0] <= high[0] else (high, low)
        if a[0] != first[0]:
            out.append(a)
        if b[0] != a[0]:
            out.append(b)

    def drawn(self, from_bucket: int = 0) -> list[Entry]:
        """The drawn entries in order, from bucket `from_bucket` on (0: all)."""
        full = len(self.buckets) - 1  # every bucket but the last is complete: cached
        epoch, cached = self._prefix_key
        if epoch != self.epoch or cached > full:
            self._prefix, cached = [], 0
        for bucket in self.buckets[cached:full]:
            self._bucket_entries(bucket, self._prefix)
        self._prefix_key = (self.epoch, max(full, 0))
        if from_bucket <= 0:
            out = list(self._prefix)
        else:
            out = []
            for bucket in self.buckets[from_bucket:full]:
                self._bucket_entries(bucket, out)
        if self.buckets and from_bucket <= full:
            self._bucket_entries(self.buckets[-1], out)
        if self.last is not None and (not out or out[-1][0] != self.last[0]):
            out.append(self.last)
        return out


def ema(values: list[float], weight: float = SMOOTHING) -> list[float]:
    """Debiased exponential moving average, as TensorBoard draws it; NaN and inf are passed
    through and skipped (backend.charts.smooth, which MetricSeries computes point by point)."""
    out: list[float] = []
    last, count = 0.0, 0
    for value in values:
        if not math.isfinite(value):
            out.append(value)
            continue
        count += 1
        last = last * weight + (1 - weight) * value
        out.append(last / (1 - weight**count))
    return out


# The curves a loss chart draws: MetricPoint attribute and whether a bucket keeps its extremes
# (the learning rate follows its schedule: its first point per bucket is enough). The eval loss
# is a curve of its own (its few points drawn as markers, never smoothed).
CURVES: tuple[tuple[str, bool], ...] = (("loss", True), ("lr", False), ("accuracy", True), ("reward", True), ("eval_loss", True))
# The values a line without a training loss (an evaluation, the closing line) takes from the
# line before it at the same step, where it has none of its own.
_CARRIED = ("loss", "lr", "accuracy", "reward", "eval_loss")


def drawn_curves(points: Sequence[MetricPoint], max_points: int = DISPLAY_POINTS, weight: float = SMOOTHING) -> dict[str, DrawnCurve]:
    """The drawn curves of a list of points, from scratch (O(points)): what a MetricSeries
    keeps up to date point by point."""
    curves = {}
    all_steps = list(map(attrgetter("step"), points))
    for name, extremes in CURVES:
        raw = list(map(attrgetter(name), points))
        missing = raw.count(None)
        if missing == len(raw):  # a curve the run does not log (accuracy, reward for sft)
            steps, raw = [], []
        elif missing:
            kept = [i for i, v in enumerate(raw) if v is not None]
            steps, raw = [all_steps[i] for i in kept], [raw[i] for i in kept]
        else:
            steps = all_steps
        values = list(map(float, raw))
        smoothed = ema(values, weight) if name == "loss" else None
        curves[name] = DrawnCurve.from_values(steps, values, smoothed, max_points, extremes)
    return curves


def _json_number(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


class MetricSeries:
    """The points of one run's curve, kept gap-free and without duplicate steps.

    A resumed run logs again from its checkpoint's step (`... 24, 25, 21, 22 ...`): the
    steps it repeats replace the old ones, so the curve continues from the checkpoint. The
    line RocBoard writes at a resume (AttemptStart) cuts the curve back to the checkpoint
    at once, before the new attempt logs: the step shown then counts on from there, never
    back. `attempts` marks where each resumed attempt begins. Within a resumed attempt the
    trainer's tokens per second and time remaining are its own: LLaMA-Factory divides the
    tokens counted since step 0 (and the steps since step 0) by the time since *this*
    process began, ~15 times too many tokens per second at the first step of a resume.

    For the chart it also keeps, point by point, the loss's smoothed value (each computed
    once, when its point arrives) and each curve's drawn points (DrawnCurve): a redraw costs
    O(drawn points) however long the run. The drawn curves see every point that arrived (the
    thinning of `points` does not touch them); a resume going back re-appends, from `points`,
    the kept points of the last buckets it cut. `version` grows with each change;
    `chart_since(cursor)` gives what a browser holding an older view must redraw. The series
    is not thread-safe: read it under the lock its owner extends it under.
    """

    def __init__(self, max_points: int = MAX_POINTS, recent: int = RECENT_POINTS, display_points: int = DISPLAY_POINTS, smoothing: float = SMOOTHING) -> None:
        self.points: list[MetricPoint] = []
        self.max_points = max(max_points, recent + 2)
        self.recent = recent
        self.display_points = display_points
        self.smoothing = smoothing
        self.version = 0  # grows with each change of the points
        self.curves = {name: DrawnCurve(display_points, extremes) for name, extremes in CURVES}
        # The loss's EMA state after each of `points` (biased average, finite losses so far),
        # so a resume going back continues the smoothing from where it was.
        self._ema_sum = array("d")
        self._ema_count = array("q")
        self._nonce = secrets.token_hex(4)  # tells this series' cursors from another's
        self.attempts: list[AttemptMark] = []  # where each resumed attempt kept in the curve begins
        # The attempt the next points belong to, when it is a resumed one: the step it
        # resumed after, and the tokens counted before it (None: not known).
        self._attempt_from: int | None = None
        self._token_base: int | None = None

    def extend(self, new_points: Iterable[MetricPoint | AttemptStart]) -> bool:
        changed = False
        for point in new_points:
            if isinstance(point, AttemptStart):
                self._start_attempt(point.attempt, point.from_step, point.tokens, point.at)
                changed = True
                continue
            last = self.latest
            # LLaMA-Factory's closing line, and an evaluation's line, repeat the step of the line
            # before without a loss: one point per step, which keeps the loss (and the eval loss).
            if last is not None and point.step == last.step and point.loss is None:
                point = replace(point, **{name: getattr(last, name) for name in _CARRIED if getattr(point, name) is None})
            elif last is not None and (point.step < last.step or (point.step == last.step and point.loss is not None)):
                # A step logged again with no resume line before it: a log resumed before
                # RocBoard wrote those lines. The new attempt begins after the last step kept.
                kept = bisect_left(self.points, point.step, key=lambda p: p.step)
                if kept:
                    self._start_attempt(None, self.points[kept - 1].step, None, None)
                else:  # logged again from its first step: a new start, not a resume
                    self.attempts.clear()
                    self._attempt_from = self._token_base = None
            if self.points and self.points[-1].step >= point.step:
                self._go_back(point.step)
            self._append(self._within_attempt(point))
            changed = True
            if len(self.points) > self.max_points:
                self._thin()
        if changed:
            self.version += 1
        return changed

    def _start_attempt(self, attempt: int | None, from_step: int, tokens: int | None, at: float | None) -> None:
        """A resumed attempt begins after `from_step`: the points after it are dropped (they are
        trained again), and so are the marks of attempts that began at or after it."""
        if self.points and self.points[-1].step > from_step:
            self._go_back(from_step + 1)
        while self.attempts and self.attempts[-1].from_step >= from_step:
            self.attempts.pop()
        if attempt is None:
            attempt = self.attempts[-1].attempt + 1 if self.attempts else 2
        self.attempts.append(AttemptMark(attempt, from_step, at))
        if tokens is None:  # the tokens of the last step kept, when the trainer counted them
            tokens = next((p.total_tokens for p in reversed(self.points) if p.total_tokens is not None), None)
        self._attempt_from, self._token_base = from_step, tokens

    def _within_attempt(self, point: MetricPoint) -> MetricPoint:
        """`point` of a resumed attempt with the attempt's own tokens per second and time
        remaining (LLaMA-Factory's count from step 0 over this process's time)."""
        if self._attempt_from is None or point.step <= self._attempt_from:
            return point
        throughput = None
        if point.throughput is not None and point.total_tokens and self._token_base is not None and point.total_tokens > self._token_base:
            throughput = point.throughput * (point.total_tokens - self._token_base) / point.total_tokens
        remaining = point.remaining
        elapsed = _seconds(point.elapsed)
        done = point.step - self._attempt_from
        if elapsed is not None and point.total_steps >= point.step:
            remaining = _clock_text(elapsed * (point.total_steps - point.step) / done)
        return replace(point, throughput=throughput, remaining=remaining)

    def _append(self, point: MetricPoint) -> None:
        total, count = (self._ema_sum[-1], self._ema_count[-1]) if self.points else (0.0, 0)
        smoothed = None
        if point.loss is not None:
            loss = float(point.loss)
            if math.isfinite(loss):
                count += 1
                total = total * self.smoothing + (1 - self.smoothing) * loss
                smoothed = total / (1 - self.smoothing**count)
            else:
                smoothed = loss
            self.curves["loss"].add(point.step, loss, smoothed)
        self.points.append(point)
        self._ema_sum.append(total)
        self._ema_count.append(count)
        for name, _ in CURVES[1:]:
            value = getattr(point, name)
            if value is not None:
                self.curves[name].add(point.step, float(value))

    def _go_back(self, step: int) -> None:
        """Drops the points at `step` and after (a resume logs them again) from the points,
        the smoothing state and the drawn curves."""
        cut = bisect_left(self.points, step, key=lambda p: p.step)
        del self.points[cut:], self._ema_sum[cut:], self._ema_count[cut:]
        for name, curve in self.curves.items():
            start = curve.truncate(step)
            if start is None:
                continue
            for i in range(bisect_left(self.points, start, key=lambda p: p.step), len(self.points)):
                value = getattr(self.points[i], name)
                if value is None:
                    continue
                value = float(value)
                smoothed = None
                if name == "loss":
                    smoothed = self._ema_sum[i] / (1 - self.smoothing ** self._ema_count[i]) if math.isfinite(value) else value
                curve.add(self.points[i].step, value, smoothed)

    def _thin(self) -> None:
        """Halves the older points (every other one goes; the first stays), keeping the
        recent ones whole: memory stays bounded however long the log grows."""
        split = len(self.points) - self.recent
        self.points = self.points[:split:2] + self.points[split:]
        self._ema_sum = self._ema_sum[:split:2] + self._ema_sum[split:]
        self._ema_count = self._ema_count[:split:2] + self._ema_count[split:]

    @property
    def latest(self) -> MetricPoint | None:
        return self.points[-1] if self.points else None

    def smoothed(self) -> list[float | None]:
        """The smoothed loss after each of `points` (None where a point has no loss)."""
        w = self.smoothing
        out: list[float | None] = []
        for point, total, count in zip(self.points, self._ema_sum, self._ema_count, strict=True):
            if point.loss is None:
                out.append(None)
            elif math.isfinite(point.loss):
                out.append(total / (1 - w**count))
            else:
                out.append(float(point.loss))
        return out

    def chart(self) -> dict[str, list[Entry]]:
        """Each curve's drawn entries (index, step, value, smoothed), copied: what
        backend.charts.loss_figure draws. O(drawn points)."""
        return {name: curve.drawn() for name, curve in self.curves.items()}

    def chart_since(self, cursor: dict[str, Any] | None = None) -> dict[str, Any]:
        """What changed in the drawn curves since `cursor` (the `cursor` of an earlier answer;
        None: everything), JSON-able, O(points sent):

        {"version": int, "cursor": {...}, "curves": {name: {"reset": bool, "x": [steps],
        "y": [values], "smoothed": [...] (loss only)}}}

        A browser holding a curve drops, when `reset`, all its points, else those at a step
        >= x[0], then appends x/y (NaN and inf sent as None: a gap). A curve that did not
        change is left out. The view is re-bucketed now and then (its buckets merge as the
        run grows, or a resume cut it): then `reset` is true and the whole curve is sent."""
        seen = cursor.get("curves", {}) if isinstance(cursor, dict) and cursor.get("series") == self._nonce else {}
        answer: dict[str, Any] = {"version": self.version, "cursor": {"series": self._nonce, "version": self.version, "curves": {}}, "curves": {}}
        for name, curve in self.curves.items():
            mark = [curve.epoch, len(curve.buckets), curve.count]
            answer["cursor"]["curves"][name] = mark
            before = seen.get(name)
            if before == mark or (before is None and not curve.count):
                continue
            fresh = not (isinstance(before, list) and len(before) == 3 and before[0] == curve.epoch and 0 < before[1] <= len(curve.buckets))
            entries = curve.drawn() if fresh or not isinstance(before, list) else curve.drawn(before[1] - 1)
            sent: dict[str, Any] = {"reset": fresh, "x": [e[1] for e in entries], "y": [_json_number(e[2]) for e in entries]}
            if name == "loss":
                sent["smoothed"] = [_json_number(e[3]) for e in entries]
            answer["curves"][name] = sent
        return answer
