"""The monitors: the live state of each run, read incrementally from its files.

One monitor per run and per app, not per browser tab: ten tabs watching one run, and the
backend's own decisions (backend/service/decisions.py), share one set of readers.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from backend.charts import MemorySeries
from backend.runs import LOG_FILE, SAMPLES_FILE, RunState, RunStore, artifacts, safe_files
from backend.runs.logs import AttemptMark, Entry, JsonlTail, MetricPoint, MetricSeries, TextTail, parse_trainer_print
from backend.runs.trainer_log import LiveTrainerLog
from backend.snapshot import RunSnapshot
from backend.telemetry.base import Reading

# How often one run's files are re-read at most, however many tabs ask.
POLL_INTERVAL_S = 0.5
LOG_TAIL_LINES = 40

# What a monitor keeps of a run, however long its files grow (see backend/runs/logs.py for the
# curve): the grad norms the alert looks at, and telemetry readings per series.
MAX_GRAD_NORMS = 1_000
MAX_READINGS = 20_000
MAX_HEALTH_FEED = 4096  # readings kept for the health watch between two of its looks (newest)
MAX_NODES = 1024  # nodes of one Slurm run whose samples are charted
NODES_LOOK_S = 2.0  # how often a monitor looks for nodes that started sampling
# A trainer log longer than this, met on a monitor's first poll (a long run opened after a
# restart), is caught up by sampling all but its last CATCH_UP_TAIL_BYTES, which are read
# line by line: the page shows the whole curve at once, never after minutes of polls.
CATCH_UP_SAMPLE_BYTES = 32 * 1024 * 1024
CATCH_UP_TAIL_BYTES = 4 * 1024 * 1024
# Two readings of one series further apart than this (the sampler reads every second or two)
# mean nothing was measured in between (no process, the app down): the chart breaks its line.
MEMORY_GAP_S = 15.0


class RunMonitor:
    """Incremental view of one run's files; polled by every tab, reads at most every 0.5 s.

    Every file is opened inside the run without following links; each poll reads a bounded
    number of bytes per file, and what is kept is bounded too (points, grad norms, readings)."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.trainer_log = LiveTrainerLog(run_dir, sample_above=CATCH_UP_SAMPLE_BYTES, tail_bytes=CATCH_UP_TAIL_BYTES)
        self.samples_tail = JsonlTail(run_dir / SAMPLES_FILE, run_dir=run_dir)
        # A Slurm run's nodes each sample themselves into nodes/<rank>/samples.jsonl
        # (backend/slurm/node_task.py); found as they appear, looked for every NODES_LOOK_S.
        self.node_tails: dict[str, JsonlTail] = {}
        self._nodes_looked = float("-inf")
        self.console_tail = TextTail(run_dir / LOG_FILE, run_dir=run_dir)  # for grad_norm, which only train.log has
        from backend.slurm import NODES_DIR

        # What each poll stats in one walk: the three files read, and the nodes/ folder only a Slurm run has.
        self._relatives = [str(tail.relative) for tail in (self.trainer_log.tail, self.console_tail, self.samples_tail)] + [NODES_DIR]
        self.grad_norms: list[float] = []
        self.series = MetricSeries()
        self.memory: dict[tuple[str, str, int], MemorySeries] = {}
        self.memory_label = ""
        self.first_sample_at: float | None = None
        # Every reading as it arrives, for the backend's health watch (take_readings), once
        # it asked (feed_health): a finished run a tab opens keeps none.
        self.health_feed: deque[Reading] | None = None
        self.counter = 0  # bumps whenever new points or readings arrive
        # When the trainer last wrote a line (the newer mtime of its trainer log and
        # train.log, None while neither is there), as of the last poll: the health watch's
        # stall clock, from the stats each poll takes anyway.
        self.last_log_at: float | None = None
        self._last_poll = 0.0
        self._alert_seen: tuple[int, Any] | None = None  # (counter, what alert() found then)
        self._lock = threading.Lock()

    def poll(self, force: bool = False) -> None:
        """Reads what the files gained; at most every POLL_INTERVAL_S unless `force`d."""
        with self._lock:
            now = time.monotonic()
            if now - self._last_poll < POLL_INTERVAL_S and not force:
                return
            self._last_poll = now
            changed = False
            # One walk for the three files' stats (no link followed): a file that has not
            # changed since it was read to its end is not opened (GrowingFile.unchanged).
            trainer_found, console_found, samples_found, nodes_found = safe_files.lstat_many(self.run_dir, self._relatives)
            self.last_log_at = max((found.st_mtime for found in (trainer_found, console_found) if found is not None), default=None)
            if not self.trainer_log.tail.unchanged(trainer_found):
                for batch in self.trainer_log.poll():
                    changed = self.series.extend(batch) or changed
            if not self.console_tail.unchanged(console_found):
                for line in self.console_tail.poll():
                    printed = parse_trainer_print(line)
                    if printed is not None and "grad_norm" in printed:
                        self.grad_norms.append(printed["grad_norm"])
                        changed = True
            if len(self.grad_norms) > MAX_GRAD_NORMS:
                del self.grad_norms[: len(self.grad_norms) - MAX_GRAD_NORMS]
            samples_tail = [] if self.samples_tail.unchanged(samples_found) else [self.samples_tail]
            for tail in (*samples_tail, *self._node_tails(now, nodes_found)):
                for record in tail.poll():
                    try:
                        reading = Reading.from_json(record)
                    except TypeError:
                        continue
                    self._add_reading(reading)
                    changed = True
            if changed:
                self.counter += 1

    def _node_tails(self, now: float, nodes_found: os.stat_result | None) -> list[JsonlTail]:
        """The samples files of a Slurm run's nodes (none for a local run: no nodes/ folder).
        `nodes_found`: the folder's lstat (not listed when it is no folder: list_dir would find nothing)."""
        if now - self._nodes_looked >= NODES_LOOK_S and nodes_found is not None and stat.S_ISDIR(nodes_found.st_mode):
            self._nodes_looked = now
            from backend.slurm import NODE_SAMPLES_FILE, NODES_DIR
            from backend.slurm.parse import is_number

            for name, found in safe_files.list_dir(self.run_dir, NODES_DIR):
                if len(self.node_tails) >= MAX_NODES:
                    break
                if is_number(name, 7) and stat.S_ISDIR(found.st_mode) and name not in self.node_tails:
                    self.node_tails[name] = JsonlTail(self.run_dir / NODES_DIR / name / NODE_SAMPLES_FILE, run_dir=self.run_dir)
        return [self.node_tails[name] for name in sorted(self.node_tails, key=int)]

    def alert(self) -> str | None:
        """NaN/inf loss or exploding gradients in the newest points, else None."""
        from backend.diagnose import loss_alert

        with self._lock:
            # Asked at every look of the decisions loop and every tab's refresh: the answer
            # changes only with the points and grad norms, which bump the counter.
            if self._alert_seen is not None and self._alert_seen[0] == self.counter:
                return self._alert_seen[1]
            counter = self.counter
            recent = self.series.points[-50:]
            start = max(0, len(self.grad_norms) - 200)
            grad_norms = self.grad_norms[start:]
        found = loss_alert([{"step": p.step, "loss": p.loss} for p in recent if p.loss is not None]) or loss_alert([{"grad_norm": g} for g in grad_norms])
        with self._lock:
            self._alert_seen = (counter, found)
        return found

    def feed_health(self) -> None:
        """From now on, keep each reading read for take_readings (at most MAX_HEALTH_FEED)."""
        with self._lock:
            if self.health_feed is None:
                self.health_feed = deque(maxlen=MAX_HEALTH_FEED)

    def take_readings(self) -> list[Reading]:
        """The readings that arrived since the last call (the newest MAX_HEALTH_FEED), in
        the order they were read: backend/service/decisions.py's health watch sees each once."""
        with self._lock:
            if self.health_feed is None:
                return []
            taken = list(self.health_feed)
            self.health_feed.clear()
            return taken

    def _add_reading(self, reading: Reading) -> None:
        if self.health_feed is not None and reading.source != "process":
            self.health_feed.append(reading)
        if self.first_sample_at is None:
            self.first_sample_at = reading.at
        key = (reading.node, reading.source, reading.gpu)
        series = self.memory.get(key)
        if series is None:
            label = reading.label or (f"GPU {reading.gpu}" if reading.source != "process" else "training process")
            if reading.node:
                label = f"{reading.node} · {label}"  # every GPU of every node of a Slurm job
            series = self.memory[key] = MemorySeries(reading.gpu, label)
        at = reading.at - self.first_sample_at
        if series.times and at - series.times[-1] > MEMORY_GAP_S:
            series.breaks.append(at)  # nothing was measured for a while: a gap, not a line across
        series.add(
            at,
            reading.used_bytes,
            reading.total_bytes,
            reading.util_pct,
            reading.temp_c,
            reading.power_w,
            reading.source,
        )
        if len(series.times) > MAX_READINGS:
            # Halve the older readings; the latest stay (the table shows them).
            columns: tuple[list[Any], ...] = (series.times, series.used_gib, series.total_gib)
            for column in columns:
                column[: MAX_READINGS // 2] = column[: MAX_READINGS // 2 : 2]
        self.memory_label = (
            "CPU RAM of the training process" if reading.source == "process" else f"GPU memory ({reading.source})"
        )

    def contents(self) -> tuple[list[MetricPoint], list[MemorySeries], str, int, int, dict[str, list[Entry]], tuple[AttemptMark, ...], float | None]:
        """(points, memory series, memory label, garbage lines, counter, the loss chart's
        drawn curves, where each resumed attempt begins, the time of the first reading),
        copied under the lock: the backend's watcher may be polling while a tab reads. The
        drawn curves are kept up to date point by point (MetricSeries.chart): a chart costs
        what it draws, not what the run logged."""
        with self._lock:
            return (
                list(self.series.points),
                list(self.memory.values()),
                self.memory_label,
                self.trainer_log.garbage_lines,
                self.counter,
                self.series.chart(),
                tuple(self.series.attempts),
                self.first_sample_at,
            )


def log_tail(run_dir: Path, lines: int = LOG_TAIL_LINES, max_bytes: int = 64_000, name: str = LOG_FILE) -> str:
    """The last lines of the run's train.log (or another log of the run: `name`), read from
    its end (the log can be large), opened inside the run without following a link (a
    planted link shows nothing)."""
    try:
        data = safe_files.read_tail(run_dir, name, max_bytes)
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace").replace("\r", "\n")
    kept = [line for line in text.splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


class Monitors:
    """The registry: one RunMonitor per run, made on first use, dropped when the run is
    deleted, vanishes, or is resumed (its curve is re-read whole, resumed steps included)."""

    def __init__(self, store: RunStore):
        self.store = store
        self._monitors: dict[str, RunMonitor] = {}
        self._lock = threading.Lock()

    def get(self, run_id: str) -> RunMonitor:
        with self._lock:
            monitor = self._monitors.get(run_id)
            if monitor is None:
                monitor = self._monitors[run_id] = RunMonitor(self.store.run_dir(run_id))
            return monitor

    def forget(self, run_id: str) -> None:
        with self._lock:
            self._monitors.pop(run_id, None)

    def clear(self) -> None:
        with self._lock:
            self._monitors.clear()

    def snapshot(self, state: RunState) -> RunSnapshot:
        """What the run's files say now, for a run in `state` (read fresh by the caller)."""
        monitor = self.get(state.id)
        # A run that ended is read to its end: its last view is drawn once (the page stops
        # polling it), and the backend's watcher may have polled just before the last lines.
        monitor.poll(force=not state.active)
        run_dir = self.store.run_dir(state.id)
        points, memory, memory_label, garbage_lines, counter, chart, attempts, first_sample_at = monitor.contents()
        adapter = artifacts.has_adapter(run_dir)
        return RunSnapshot(
            run=state,
            points=points,
            memory=memory,
            memory_label=memory_label,
            log_tail="" if state.active else log_tail(run_dir),
            has_adapter=adapter,
            garbage_lines=garbage_lines,
            alert=monitor.alert(),
            chart=chart,
            version=_version(state, counter, adapter),
            attempts=attempts,
            # The memory chart's x is seconds since the first reading: each resume there.
            memory_breaks=tuple((a.attempt, a.at - first_sample_at) for a in attempts if a.at is not None and first_sample_at is not None),
        )

    def version(self, state: RunState) -> tuple:
        """What `snapshot(state).version` would be, without copying the run's points: the
        watcher's cheap question, asked once a second while a run trains."""
        monitor = self.get(state.id)
        monitor.poll(force=not state.active)
        return _version(state, monitor.counter, artifacts.has_adapter(self.store.run_dir(state.id)))


def _version(state: RunState, counter: int, adapter: bool) -> tuple:
    # Changes whenever anything the page shows of the run changes: its state, a new point
    # or reading (the monitor's counter), the adapter appearing, the stop settings, what
    # Slurm says of its job.
    return (
        state.state, state.exit_code, counter, adapter, state.stop_reason, state.stop_on_nan,
        state.slurm_state, state.slurm_reason, state.slurm_nodes, state.stop_requested,
    )  # fmt: skip


__all__ = [
    "CATCH_UP_SAMPLE_BYTES",
    "CATCH_UP_TAIL_BYTES",
    "LOG_TAIL_LINES",
    "MAX_GRAD_NORMS",
    "MAX_READINGS",
    "MEMORY_GAP_S",
    "Monitors",
    "POLL_INTERVAL_S",
    "RunMonitor",
    "log_tail",
]
