"""One sampler for the whole app: a daemon thread reads the chart's source once per tick.

Callers (every open browser tab, the run page, the CLI) only ever read the cached result,
so ten tabs cost one read and a slow or hung tool never blocks a request. Samples are
appended to the watched run's file as JSON lines, so the chart can be rebuilt from disk
after a page reload or a server restart.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import IO

import psutil

from backend.i18n import Message
from backend.telemetry.backoff import Backoff
from backend.telemetry.base import Reading, Source, SourceStatus

log = logging.getLogger(__name__)

DETECTING = "detecting"


class Sampler:
    """Samples the first working source every `interval_s` seconds on one daemon thread.

    `sources=None` detects them (sysfs, amd-smi, rocm-smi, nvidia-smi, then process memory)
    on the sampler thread, so constructing and starting it never waits on a slow tool.
    Explicit `sources` are probed there too; the first available one is the chart's.
    """

    def __init__(
        self,
        sources: list[Source] | None = None,
        interval_s: float = 1.0,
        *,
        ttl_s: float | None = None,
        idle_after_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        sysfs_root: Path = Path("/sys"),
        node: str = "",
    ) -> None:
        self.interval_s = interval_s
        # The node every reading written is labelled with (a Slurm job's node task samples
        # its own node); "" for this machine.
        self.node = node
        self.sysfs_root = Path(sysfs_root)  # a fake tree stands in for /sys in tests and demos
        # A cached tick older than this is not shown as "now" (the source is stuck or backed off).
        self.ttl_s = ttl_s if ttl_s is not None else max(10.0, 5 * interval_s)
        # With no run watched and nobody asking for `latest()`, the thread stops reading tools.
        self.idle_after_s = idle_after_s
        self._clock = clock
        self._given_sources = sources
        self._lock = threading.Lock()  # guards the cache, statuses and samples file; held briefly
        self._tick_lock = threading.Lock()
        self._sources: list[Source] | None = None
        self._statuses: list[SourceStatus] = []
        self._backoffs: dict[str, Backoff] = {}
        self._last_read: dict[str, float] = {}
        self._latest: list[Reading] = []
        self._latest_at = float("-inf")
        self._samples_path: Path | None = None
        self._samples_file: IO[str] | None = None
        self._pid: int | None = None
        self._run_env_pending = False  # a new pid: read its *_VISIBLE_DEVICES on the next tick
        self._last_demand = clock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # ----- what callers use -------------------------------------------------------------

    def start(self) -> None:
        """Start the sampling thread (once; later calls do nothing)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stopping.clear()
            self._thread = threading.Thread(target=self._loop, name="rocboard-telemetry", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the thread and close the samples file. Waits at most a moment: a tool that
        hangs is left to its own timeout on the daemon thread."""
        self._stopping.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)
        with self._lock:
            self._close_samples_file()

    def watch(self, samples_path: Path | None, pid: int | None) -> None:
        """Append every tick's readings to `samples_path` (None: stop writing) and measure
        the process tree rooted at `pid` with the process-memory source."""
        with self._lock:
            if samples_path != self._samples_path:
                self._close_samples_file()
                self._samples_path = Path(samples_path) if samples_path is not None else None
            if pid != self._pid and pid is not None:
                self._run_env_pending = True
            self._pid = pid
        self._wake.set()

    def latest(self) -> list[Reading]:
        """The last tick's readings ([] before the first tick or when they are stale)."""
        now = self._clock()
        with self._lock:
            woke_from_idle = now - self._last_demand > self.idle_after_s
            self._last_demand = now
            fresh = now - self._latest_at <= self.ttl_s
            readings = list(self._latest) if fresh else []
        if woke_from_idle:
            self._wake.set()
        return readings

    def statuses(self) -> list[SourceStatus]:
        """Every source probed, in order of cost, with hints for those that do not work;
        the chart's source says so in its detail when it is being backed off."""
        with self._lock:
            out = []
            for status in self._statuses:
                backoff = self._backoffs.get(status.name)
                if status.available and backoff is not None and backoff.backed_off:
                    status = SourceStatus(
                        status.name,
                        status.available,
                        Message("telemetry.backed_off", seconds=f"{backoff.pause_s:g}", failures=backoff.failures, error=backoff.last_error),
                        status.hint,
                    )
                out.append(status)
            return out

    @property
    def source_name(self) -> str:
        """Which source the chart uses: "detecting" until detection has run, "none" if none works."""
        with self._lock:
            if self._sources is None:
                return DETECTING
            return self._sources[0].name if self._sources else "none"

    # ----- the sampler thread -----------------------------------------------------------

    def tick(self) -> list[Reading]:
        """Take one sample now, on the calling thread (the sampler thread calls this; tests
        and the CLI may too). Never raises."""
        try:
            with self._tick_lock:  # the thread and a direct caller never read a source at once
                return self._tick()
        except Exception:  # the thread must survive anything a source or the disk throws
            log.exception("telemetry tick failed")
            return []

    def _loop(self) -> None:
        while not self._stopping.is_set():
            if self._sources is None or self._wanted():
                self.tick()
            self._wake.wait(self.interval_s)
            self._wake.clear()

    def _wanted(self) -> bool:
        with self._lock:
            watching = self._samples_path is not None or self._pid is not None
            return watching or self._clock() - self._last_demand <= self.idle_after_s

    def _tick(self) -> list[Reading]:
        self._ensure_detected()
        sources = self._sources or []
        if not sources:
            return []
        if self._run_env_pending:
            self._apply_run_environment(sources)
        source = sources[0]
        now = self._clock()
        backoff = self._backoffs.setdefault(source.name, Backoff())
        min_interval = float(getattr(source, "min_interval_s", 0.0))
        if not backoff.ready(now) or now - self._last_read.get(source.name, float("-inf")) < min_interval:
            return []
        self._last_read[source.name] = now
        try:
            readings = list(source.read())
            failure = str(getattr(source, "last_failure", "") or "")
        except Exception as exc:
            readings, failure = [], f"{type(exc).__name__}: {exc}"
        if failure:
            backoff.failed(self._clock(), failure)
            if backoff.failures == backoff.threshold:
                log.warning("telemetry source %s failed %d times in a row, backing off: %s",
                            source.name, backoff.failures, failure)
            return []
        backoff.succeeded()
        with self._lock:
            self._latest = readings
            self._latest_at = self._clock()
            self._write_samples(readings)
        return readings

    def _ensure_detected(self) -> None:
        if self._sources is not None:
            return
        if self._given_sources is None:
            from backend.telemetry.detect import detect_sources  # detection needs the sampler's pid

            sources, statuses = detect_sources(sysfs_root=self.sysfs_root, pid_provider=lambda: self._pid)
        else:
            sources, statuses = [], []
            for source in self._given_sources:
                try:
                    status = source.probe()
                except Exception as exc:
                    status = SourceStatus(getattr(source, "name", "?"), False, Message("telemetry.probe_failed", error=str(exc)))
                statuses.append(status)
                if status.available:
                    sources.append(source)
        with self._lock:
            self._statuses = statuses
            self._sources = sources

    def _apply_run_environment(self, sources: list[Source]) -> None:
        """Chart the GPUs the watched run sees: the launcher may set ROCR_/HIP_VISIBLE_DEVICES
        for the training process only, so they are read from that process, not from ours."""
        self._run_env_pending = False
        pid = self._pid
        if pid is None:
            return
        try:
            run_env = psutil.Process(pid).environ()
        except (psutil.Error, OSError):
            return  # gone already, or not ours to read: keep the web process's view
        for source in sources:
            apply = getattr(source, "set_run_environment", None)
            if apply is not None:
                apply(run_env)

    def _write_samples(self, readings: list[Reading]) -> None:
        """Append one JSON line per reading and flush (called with the lock held)."""
        if self._samples_path is None or not readings or self._stopping.is_set():
            return  # after stop(), a tick that was still running must not reopen the file
        try:
            if self._samples_file is None:
                self._samples_path.parent.mkdir(parents=True, exist_ok=True)
                # O_NOFOLLOW: a link planted at the samples file must not redirect our writes.
                fd = os.open(self._samples_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
                self._samples_file = os.fdopen(fd, "a", encoding="utf-8")
            if self.node:
                readings = [replace(r, node=self.node) for r in readings]
            self._samples_file.write("".join(json.dumps(r.to_json()) + "\n" for r in readings))
            self._samples_file.flush()
        except OSError as exc:  # disk full, run directory deleted: keep sampling, say so once
            log.warning("could not write telemetry samples to %s: %s", self._samples_path, exc)
            self._close_samples_file()
            self._samples_path = None

    def _close_samples_file(self) -> None:
        if self._samples_file is not None:
            try:
                self._samples_file.close()
            except OSError:
                pass
            self._samples_file = None


def read_samples(path: Path) -> list[Reading]:
    """Readings written by a sampler to `path`; a half-written last line is skipped."""
    readings: list[Reading] = []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        return readings
    for line in text.splitlines():
        try:
            readings.append(Reading.from_json(json.loads(line)))
        except (ValueError, TypeError):
            continue
    return readings
