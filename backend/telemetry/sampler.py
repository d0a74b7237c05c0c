"""One sampler for the whole app: a daemon thread reads the chart's source once per tick.

Callers (every open browser tab, the run page, the CLI) only ever read the cached result,
so ten tabs cost one read and a slow or hung tool never blocks a request. Samples are
appended to the watched run's file as JSON lines, so the chart can be rebuilt from disk
after a page reload or a server restart.

Side by side (several runs on a node's GPUs) each run has a sampler of its own, which charts
only its GPUs: a companion of the app's (`Sampler.companion`). A companion whose chart reads
in-process (sysfs, process memory) is ticked on the app sampler's thread, right after the
app's own tick, so 8 runs wake one thread a second rather than 8; one charting through a
tool (amd-smi, rocm-smi, nvidia-smi) keeps a thread of its own, so that a hung tool never
holds up the other runs' charts. After each round that read something the sampler tells
those who asked (`after_round`): the decisions loop looks at the runs then, on fresh readings.
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
        # The sampler whose thread ticks this one once its sources are known (companion()),
        # and the companions this one's thread ticks.
        self._driver: Sampler | None = None
        self._companions: list[Sampler] = []
        self._after_round: list[Callable[[], None]] = []

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

    def companion(self, sources: list[Source] | None = None) -> Sampler:
        """A sampler for another process on this machine (a run side by side, a chat server),
        with this one's interval and /sys (`sources`: None detects them, as the app does).
        Started, it detects its sources on a thread of its own; then, if its chart reads
        in-process, that thread ends and this sampler's thread ticks it after each of its own
        ticks (module docstring)."""
        companion = Sampler(sources, interval_s=self.interval_s, sysfs_root=self.sysfs_root, clock=self._clock)
        companion._driver = self
        return companion

    def after_round(self, callback: Callable[[], None]) -> None:
        """`callback()` on the sampler's thread after each round of ticks (its own and its
        companions') that read something. It must be quick and never block: it delays the
        next round."""
        with self._lock:
            self._after_round.append(callback)

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
        self._nudge()

    def latest(self) -> list[Reading]:
        """The last tick's readings ([] before the first tick or when they are stale)."""
        now = self._clock()
        with self._lock:
            woke_from_idle = now - self._last_demand > self.idle_after_s
            self._last_demand = now
            fresh = now - self._latest_at <= self.ttl_s
            readings = list(self._latest) if fresh else []
        if woke_from_idle:
            self._nudge()
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

    def _nudge(self) -> None:
        """Tick soon (a new process to watch, a tab back after idling): on this sampler's
        thread, or on its driver's once that ticks it."""
        self._wake.set()
        driver = self._driver
        if driver is not None:
            driver._wake.set()

    def _loop(self) -> None:
        try:
            while not self._stopping.is_set():
                read = bool(self.tick()) if self._sources is None or self._wanted() else False
                if self._driver is not None and self._driver._adopt(self):
                    return  # ticked on the driver's thread from now on
                read = self._tick_companions() or read
                if read:
                    self._tell_round()
                self._wake.wait(self.interval_s)
                self._wake.clear()
        finally:
            self._release_companions()  # none for a companion handed to its driver

    def _adopt(self, companion: Sampler) -> bool:
        """Takes `companion` onto this sampler's thread when its chart reads in-process and
        this thread is there to tick it (the companion's own thread then ends)."""
        sources = companion._sources
        if not sources or not getattr(sources[0], "in_process", False):
            return False
        with self._lock:
            thread = self._thread
            if self._stopping.is_set() or thread is None or not thread.is_alive():
                return False
            self._companions.append(companion)
        return True

    def _tick_companions(self) -> bool:
        """One tick of each companion that wants one; whether any read something."""
        with self._lock:
            self._companions = [c for c in self._companions if not c._stopping.is_set()]
            companions = list(self._companions)
        read = False
        for companion in companions:
            if companion._wanted():
                read = bool(companion.tick()) or read
        return read

    def _tell_round(self) -> None:
        with self._lock:
            callbacks = list(self._after_round)
        for callback in callbacks:
            try:
                callback()
            except Exception:  # a listener's bug must not stop the sampling
                log.exception("a telemetry round listener failed")

    def _release_companions(self) -> None:
        """This sampler's thread ends (stop()): its companions still watching go back to
        threads of their own."""
        with self._lock:
            companions, self._companions = self._companions, []
        for companion in companions:
            companion._driver = None
            if not companion._stopping.is_set():
                companion.start()

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
