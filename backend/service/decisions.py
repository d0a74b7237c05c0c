"""Decisions about a run that the backend takes on its own, whether or not a tab is open:

- stop the run when its loss turns NaN/inf or its gradients explode, if the run's own
  saved setting (`RunState.stop_on_nan`) says so;
- build the run's adapter.zip once its trainer has ended with an adapter saved.

A page only shows what was decided. One thread follows the runs that train (one, normally)
and ends when none is left; a start, a resume or a re-attach wakes it again.
"""

from __future__ import annotations

import logging
import threading
import time

from backend.runs import RunNotFound, artifacts
from backend.service.monitors import POLL_INTERVAL_S, Monitors
from backend.service.run_manager import RunManager

log = logging.getLogger(__name__)


class RunDecisions:
    def __init__(self, manager: RunManager, monitors: Monitors, interval_s: float = POLL_INTERVAL_S):
        self.manager = manager
        self.monitors = monitors
        self.interval_s = interval_s
        # run id -> how many times it was followed: a run re-followed (resumed) while its
        # previous end was being dealt with is not dropped with that end.
        self._followed: dict[str, int] = {}
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def follow(self, run_id: str) -> None:
        """Watches `run_id` until it has ended and its end was dealt with."""
        with self._lock:
            self._followed[run_id] = self._followed.get(run_id, 0) + 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True, name="run-decisions")
                self._thread.start()

    def following(self) -> set[str]:
        with self._lock:
            return set(self._followed)

    def decide(self, run_id: str) -> bool:
        """One look at the run, acting on what is seen; False once nothing is left to do."""
        try:
            state = self.manager.refresh(run_id)
        except RunNotFound:
            return False  # gone; its trainer was stopped by refresh
        if state.active:
            monitor = self.monitors.get(run_id)
            monitor.poll()
            if state.stop_on_nan and monitor.alert() is not None:
                self.manager.stop_for_alert(run_id)
            return True
        self._build_adapter_zip(run_id)
        return False

    def _build_adapter_zip(self, run_id: str) -> None:
        """Built once, at the end, so that a download is ready when a page asks (it is
        rebuilt on demand only if the adapter changes after, e.g. by a resume)."""
        try:
            run_dir = self.manager.store.run_dir(run_id)
            if artifacts.has_adapter(run_dir):
                artifacts.build_adapter_zip(run_dir)
        except (OSError, RunNotFound) as error:
            log.warning("adapter.zip of run %s not built: %s", run_id, error)

    def _loop(self) -> None:
        while True:
            with self._lock:
                if not self._followed:
                    self._thread = None
                    return
                followed = dict(self._followed)
            for run_id, generation in sorted(followed.items()):
                try:
                    keep = self.decide(run_id)
                except Exception:  # a bug here must not end the watching of every run
                    log.exception("deciding about run %s failed", run_id)
                    keep = True
                if not keep:
                    with self._lock:
                        if self._followed.get(run_id) == generation:
                            del self._followed[run_id]
            time.sleep(self.interval_s)


__all__ = ["RunDecisions"]
