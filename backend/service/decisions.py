"""Decisions about a run that the backend takes on its own, whether or not a tab is open:

- stop the run when its loss turns NaN/inf or its gradients explode, if the run's own
  saved setting (`RunState.stop_on_nan`) says so;
- build the run's adapter.zip once its trainer has ended with an adapter saved;
- watch its GPUs' health (backend/health: imbalance, a lost rank, a stall), recording each
  alert once in the run's alerts.jsonl, and stop a stalled run if the app's
  stop-on-stall setting says so (`python app.py --health-stop-on-stall`);
- send word of a run's end (finished, failed with its cause, stopped on NaN) and of a stall
  alert to the app's Notifier (backend/notify: the webhook, the tabs' notifications), once.

A page only shows what was decided. One thread follows the runs that train (one, or one per
GPU side by side) and ends when none is left; a start, a resume or a re-attach wakes it again.
It looks at every run right after each round of the app's sampler (`wake`, given to
Sampler.after_round: once a second by default, the runs' new readings just written), and at
the latest every LOOK_AT_LEAST_S when no round comes (a Slurm run's nodes sample themselves).
A look a second, not two: with 8 runs side by side the looks were the web process's largest
cost (BENCHMARKS.md, section 12), and a reading is only new once a second.
"""

from __future__ import annotations

import logging
import threading
import time

from backend.health import HealthAlert, HealthSettings, HealthWatch
from backend.health.record import append_events, read_events
from backend.notify import Notifier, RunEvent
from backend.runs import RunNotFound, RunState, RunStore, artifacts
from backend.runs.trainer_log import log_path, read_best_eval_loss, read_log_tail
from backend.service.failure import failure_cause_id
from backend.service.monitors import Monitors, RunMonitor
from backend.service.run_manager import QUEUE_KEEPER_INTERVAL_S, RunManager

log = logging.getLogger(__name__)

# How often a live run's state is read again (and a re-attached trainer's process checked)
# while its state file does not change: as often as the queue keeper looks at the queue.
PROCESS_LOOK_S = QUEUE_KEEPER_INTERVAL_S
# The longest wait between two looks at the runs, when no sampler round wakes the loop
# sooner: longer than the sampler's default interval (1 s), so that a round's wake, not this
# timeout, sets the pace while the sampler reads.
LOOK_AT_LEAST_S = 1.5


class RunDecisions:
    def __init__(self, manager: RunManager, monitors: Monitors, interval_s: float = LOOK_AT_LEAST_S, health: HealthSettings | None = None, notifier: Notifier | None = None):
        self.manager = manager
        self.monitors = monitors
        self.interval_s = interval_s  # the longest wait between looks (LOOK_AT_LEAST_S)
        self._wake = threading.Event()
        self.health = health or HealthSettings()
        self.notifier = notifier
        # run id -> the end last announced (its attempt and end time): one word per end.
        self._announced: dict[str, tuple[int, float | None]] = {}
        # runs this app stopped on NaN: their end may be seen before the reason is written over it
        self._nan_stopped: set[str] = set()
        # run id -> (the monitor whose readings it watches, the watch): a new monitor (the run
        # resumed, its readings read again from the start) gets a watch seeded from the record.
        self._watches: dict[str, tuple[RunMonitor, HealthWatch]] = {}
        # run id -> how many times it was followed: a run re-followed (resumed) while its
        # previous end was being dealt with is not dropped with that end.
        self._followed: dict[str, int] = {}
        # run id -> (its state file's key, the state refresh gave, when): see _state.
        self._looked: dict[str, tuple[tuple[int, int, int, int], RunState, float]] = {}
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def follow(self, run_id: str) -> None:
        """Watches `run_id` until it has ended and its end was dealt with."""
        with self._lock:
            self._followed[run_id] = self._followed.get(run_id, 0) + 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True, name="run-decisions")
                self._thread.start()

    def wake(self) -> None:
        """Look at the runs now (the sampler's round has just written their new readings).
        Called on the sampler's thread: it only sets an event."""
        self._wake.set()

    def following(self) -> set[str]:
        with self._lock:
            return set(self._followed)

    def decide(self, run_id: str) -> bool:
        """One look at the run, acting on what is seen; False once nothing is left to do."""
        try:
            state = self._state(run_id)
        except RunNotFound:
            self._watches.pop(run_id, None)
            self._looked.pop(run_id, None)
            return False  # gone; its trainer was stopped by refresh
        if state.active:
            monitor = self.monitors.get(run_id)
            monitor.feed_health()  # before its first poll: a restarted app's watch sees the run's readings from the start
            monitor.poll()
            if state.stop_on_nan and monitor.alert() is not None:
                self._nan_stopped.add(run_id)
                self.manager.stop_for_alert(run_id)
                return True
            self._watch_health(state, monitor)
            return True
        self._watches.pop(run_id, None)
        self._looked.pop(run_id, None)
        self._build_adapter_zip(run_id)
        self._announce_end(state)
        return False

    def _state(self, run_id: str) -> RunState:
        """The run's state as manager.refresh says it, read again only when its state file
        changed or PROCESS_LOOK_S passed since it was last read. An end this app records
        (its launcher's wait thread, a stop) is written to the state file, so seen at the next
        look as before; a re-attached trainer's process is checked every PROCESS_LOOK_S, as
        often as the queue keeper looks, rather than at every look."""
        key = self.manager.store.state_key(run_id)  # taken before the read: a write after it changes it
        now = time.monotonic()
        looked = self._looked.get(run_id)
        if key is not None and looked is not None and looked[0] == key and now - looked[2] < PROCESS_LOOK_S:
            return looked[1]
        state = self.manager.refresh(run_id)
        if key is not None and state.active:
            self._looked[run_id] = (key, state, now)
        else:
            self._looked.pop(run_id, None)
        return state

    def health_seen(self, run_id: str) -> float | None:
        """Up to when (a reading's time) the run's GPU health has been decided; None before its
        first reading (tests and the bench wait on it, rather than on a sleep)."""
        watched = self._watches.get(run_id)
        return None if watched is None else watched[1].now

    def _watch_health(self, state: RunState, monitor: RunMonitor) -> None:
        """The run's new readings through its health watch; what it says goes to the run's
        alerts.jsonl, and a stall stops the run when the app's setting says so."""
        readings = monitor.take_readings()
        run_dir = monitor.run_dir  # store.run_dir's checks again at every look add nothing: each read below refuses a link itself
        watched = self._watches.get(state.id)
        if watched is None or watched[0] is not monitor:
            watched = self._watches[state.id] = (monitor, HealthWatch(self.health, read_events(run_dir)))
        if not readings:
            return
        events = watched[1].observe(readings, monitor.last_log_at, training=state.state == "running")  # as of decide's poll just now
        try:
            append_events(run_dir, events)
        except OSError as error:  # a link planted at alerts.jsonl, the disk full: the watch goes on
            log.warning("health alerts of run %s not recorded: %s", state.id, error)
        stall = next((e for e in events if isinstance(e, HealthAlert) and e.kind == "stall"), None)
        if stall is not None and self.notifier is not None:
            seen = stall.message()
            self.notifier.send(RunEvent("run_stalled", state.id, state.state, seen.key, dict(seen.params), run_figures(self.manager.store, state), run_name=state.name))
        if stall is not None and self.health.stop_on_stall:
            # A message id: the page renders it in its own language (view.stop_reason_text). The
            # trainer's end is recorded with it by whichever thread sees the end.
            self.manager.stop(state.id, "reason.stopped_on_stall", {"seconds": f"{stall.at - stall.since:.0f}"})

    def _announce_end(self, state: RunState) -> None:
        """Word of the run's end to the Notifier, once per end (a run resumed ends again)."""
        if self.notifier is None or self._announced.get(state.id) == (state.attempts, state.ended_at):
            return
        self._announced[state.id] = (state.attempts, state.ended_at)
        nan_stop = state.id in self._nan_stopped
        self._nan_stopped.discard(state.id)
        try:
            event = end_event(self.manager.store, state, nan_stop)
        except (OSError, RunNotFound) as error:
            log.warning("the end of run %s not announced: %s", state.id, error)
            return
        if event is not None:
            self.notifier.send(event)

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
            self._wake.wait(self.interval_s)
            self._wake.clear()


def run_figures(store: RunStore, state: RunState) -> dict[str, object]:
    """What a word about the run says of it: its last step (of how many), last loss, best
    eval loss and minutes of training, those known."""
    run_dir = store.run_dir(state.id)
    tail = read_log_tail(log_path(run_dir), run_dir)
    figures: dict[str, object] = {"step": tail.step, "total": tail.total_steps, "loss": tail.last_loss, "eval_loss": read_best_eval_loss(log_path(run_dir), run_dir)}
    if state.started_at is not None:
        figures["minutes"] = round(((state.ended_at or time.time()) - state.started_at) / 60, 1)
    return {name: value for name, value in figures.items() if value is not None}


def end_event(store: RunStore, state: RunState, nan_stop: bool = False) -> RunEvent | None:
    """The word a run's end is worth: finished, failed (with its cause), stopped on NaN; None
    for a stop the user asked for (they know), a stop on stall (its alert was the word) and a
    run cancelled in the queue. `nan_stop`: this app stopped it on NaN (its state may not say so yet)."""
    cause: tuple[str, dict[str, object]] = ("", {})
    if state.state == "finished":
        kind = "run_finished"
    elif state.state == "failed":
        kind, cause = "run_failed", failure_cause_id(store, state)
    elif state.state == "stopped" and (nan_stop or state.stop_reason == "reason.stopped_on_nan"):
        kind, cause = "run_nan_stop", ("reason.stopped_on_nan", {})
    else:
        return None
    return RunEvent(kind, state.id, state.state, cause[0], dict(cause[1]), run_figures(store, state), run_name=state.name)


__all__ = ["RunDecisions", "end_event", "run_figures"]
