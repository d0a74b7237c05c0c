"""GPU health alerts: how long after its condition has held for its stated time an alert is
in the run's folder, in sampler intervals.

The app's own parts, as `python app.py` composes them: one Sampler at its default interval
(1 s) reading a simulated three-GPU AMD sysfs tree (backend/telemetry/fake_sysfs.py), a
RocBoard whose RunDecisions watches the run with no tab open, and a stand-in trainer (a
Python process printing a line every 0.2 s into train.log, launched as the run manager
launches one). For each kind, in turns, the condition is made at t0 (the fake driver's files
changed; for a stall the stand-in also SIGSTOPped), and the bench polls alerts.jsonl every
10 ms until the alert is there (t1). The delay is t1 - (t0 + the kind's time), in sampler
intervals: what RocBoard adds to the threshold the user set. Its parts: up to one interval
until the sampler reads the changed files, ticks to cover the time, and the decisions' look,
which follows each sampler round (Sampler.after_round; backend/service/decisions.py).

Goal (issue 29): <= 2 sampler intervals, every repetition. Beside it, what the decision
itself costs per sampler tick (HealthWatch.observe on 8 and 64 GPUs' readings), a figure only.

`python -m bench.bench_health [--quick]`.
"""

from __future__ import annotations

import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import bench_arguments, conditions, conditions_line, goal_row, show, spread

GIB = 2**30
INTERVAL_S = 1.0  # the app's sampler interval (ui/serve.py: Sampler() default)
HOLD_S = 2.0  # each kind's time in this bench (the defaults are minutes: same mechanics)
GOAL_INTERVALS = 2.0
Load = dict[int, tuple[int | None, int | None]]  # card -> (VRAM used, busy %), None: as it is
BALANCED: Load = {0: (20 * GIB, 92), 1: (20 * GIB, 88), 2: (20 * GIB, 95)}
CONDITIONS: dict[str, Load] = {
    "imbalance": {0: (50 * GIB, None), 1: (GIB // 4, None), 2: (GIB // 4, None)},
    "lost_rank": {2: (None, 0)},
    "stall": {0: (None, 0), 1: (None, 0), 2: (None, 0)},
}
STAND_IN = "import sys, time\nwhile True:\n    print('step', flush=True)\n    time.sleep(0.2)\n"


def _wait(predicate, timeout: float, every: float = 0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    return None


def decision_cost_us(gpus: int, ticks: int) -> dict[str, float]:
    """What one tick of a watch costs (its readings built beforehand), per tick, in µs."""
    from backend.health import HealthWatch
    from backend.telemetry.base import Reading

    batches = [[Reading(i, 20 * GIB, 64 * GIB, 90.0, 50.0, 300.0, "sysfs", float(t), f"GPU {i}") for i in range(gpus)] for t in range(ticks)]
    watch = HealthWatch()
    costs = []
    for batch in batches:
        started = time.perf_counter()
        watch.observe(batch, log_at=0.0)
        costs.append((time.perf_counter() - started) * 1e6)
    return spread(costs)


def run(quick: bool = False) -> dict[str, Any]:
    import psutil

    from backend.health import EpisodeEnd, HealthAlert, HealthSettings
    from backend.health.record import read_events
    from backend.service import RocBoard
    from backend.telemetry.fake_sysfs import build_fake_sysfs, server_cards, set_load
    from backend.telemetry.sampler import Sampler

    repetitions = 2 if quick else 6
    work = Path(tempfile.mkdtemp(prefix="rocboard-bench-health-"))
    gpus = build_fake_sysfs(work / "sys", server_cards(3), bmc_vga=False)
    set_load(gpus, BALANCED)
    sampler = Sampler(interval_s=INTERVAL_S, sysfs_root=gpus)
    sampler.start()
    board = RocBoard(work / "runs", sampler=sampler, export_dir=work / "exports", health=HealthSettings(lost_rank_s=HOLD_S, stall_s=HOLD_S, imbalance_s=HOLD_S))
    state = board.store.create("bench-health", "mi250", "m", {"config.yaml": "", "train.log": ""})
    board.run_manager.launch(state.id, {}, command=[sys.executable, "-c", STAND_IN])
    run_dir = board.store.run_dir(state.id)
    stand_in = psutil.Process(board.store.read(state.id).pid)
    delays: dict[str, list[float]] = {kind: [] for kind in CONDITIONS}
    decided: dict[str, list[float]] = {kind: [] for kind in CONDITIONS}
    missed: list[str] = []

    def events(kind: str, cls: type) -> list:
        return [e for e in read_events(run_dir) if isinstance(e, cls) and e.kind == kind]

    try:
        # Every GPU seen training before the first condition (a lost rank is a GPU that trained).
        _wait(lambda: board.decisions.health_seen(state.id) is not None, 30)
        time.sleep(2 * INTERVAL_S)
        for _ in range(repetitions):
            for kind, load in CONDITIONS.items():
                before = len(events(kind, HealthAlert))
                ends = len(events(kind, EpisodeEnd))
                t0 = time.time()
                if kind == "stall":
                    stand_in.send_signal(signal.SIGSTOP)
                set_load(gpus, load)
                fired = _wait(lambda k=kind, n=before: events(k, HealthAlert)[n:] and time.time(), 30)
                if not fired:
                    missed.append(kind)
                else:
                    delays[kind].append((fired - t0 - HOLD_S) / INTERVAL_S)
                    decided[kind].append((events(kind, HealthAlert)[before].at - t0 - HOLD_S) / INTERVAL_S)
                if kind == "stall":
                    stand_in.send_signal(signal.SIGCONT)
                set_load(gpus, BALANCED)
                _wait(lambda k=kind, n=ends: len(events(k, EpisodeEnd)) > n, 30)
                time.sleep(0.37 * INTERVAL_S)  # the next t0 at another phase of the sampler's tick
    finally:
        try:
            stand_in.send_signal(signal.SIGCONT)
        except psutil.Error:
            pass
        board.stop(state.id)
        sampler.stop()
    cost = {str(n): decision_cost_us(n, 500 if quick else 3000) for n in (8, 64)}
    worst = max((d for values in delays.values() for d in values), default=float("inf"))
    goals = [
        goal_row(
            f"{kind.replace('_', ' ')}: alert recorded after its {HOLD_S:g} s held (sampler every {INTERVAL_S:g} s)",
            f"<= {GOAL_INTERVALS:g} intervals",
            show(spread(delays[kind]), "intervals") + f", max {max(delays[kind], default=float('nan')):.2f}",
            bool(delays[kind]) and max(delays[kind]) <= GOAL_INTERVALS and kind not in missed,
        )
        for kind in CONDITIONS
    ] + [goal_row(f"the watch's decision per sampler tick, {n} GPUs", "-", show(summary, "µs", digits=1), None) for n, summary in cost.items()]
    return {
        "decision_us": cost,
        "interval_s": INTERVAL_S,
        "hold_s": HOLD_S,
        "repetitions": repetitions,
        "delay_intervals": {kind: spread(values) for kind, values in delays.items()},
        "decided_intervals": {kind: spread(values) for kind, values in decided.items()},
        "missed": missed,
        "worst_intervals": worst,
        "goals": goals,
        "conditions": conditions(),
    }


def report(result: dict[str, Any]) -> str:
    lines = [
        f"GPU health alerts: delay after the condition held {result['hold_s']:g} s, in sampler intervals "
        f"({result['interval_s']:g} s), {result['repetitions']} per kind, in turns:"
    ]
    for kind, summary in result["delay_intervals"].items():
        decided = result["decided_intervals"][kind]
        lines.append(f"  {kind:>10}: in alerts.jsonl {show(summary, 'intervals')}; the reading it was decided on {show(decided, 'intervals')}")
    for gpus, summary in result["decision_us"].items():
        lines.append(f"  the watch's decision per tick, {gpus} GPUs: {show(summary, 'µs', digits=1)}")
    if result["missed"]:
        lines.append(f"  missed (no alert within 30 s): {', '.join(result['missed'])}")
    lines.append(conditions_line(result["conditions"]))
    return "\n".join(lines)


if __name__ == "__main__":
    outcome = run(quick=bench_arguments())
    print(report(outcome))
    for row in outcome["goals"]:
        print(row)
    sys.exit(0)
