"""The queue's decision time: how long backend/runs/gpu_slots.decide takes to say which queued
runs start on which GPUs, with 100 runs queued on an 8-GPU node (and the worst the bounds
allow: 1000 queued, 64 GPUs, for scale).

The queue is a mix as a busy node has it: mostly 1-GPU runs, some asking 2 or 4, a few naming
their GPUs; half the GPUs held by live runs, so most of the queue waits and the reservation
rule is walked for each. Each case is timed over many calls, in turns with the others.

Goal (issue 30): <= 5 ms with 100 queued and 8 GPUs.

`python -m bench.bench_slots [--quick]`.
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any

from bench import bench_arguments, conditions, conditions_line, goal_row, show, spread

GOAL_MS = 5.0


def _case(gpus: int, queued: int, seed: int) -> tuple[tuple[int, ...], dict[str, tuple[int, ...]], list[Any]]:
    from backend.runs.gpu_slots import Ask

    rng = random.Random(seed)
    node = tuple(range(gpus))
    held: dict[str, tuple[int, ...]] = {f"live{n}": (n,) for n in range(0, gpus, 2)}
    queue = []
    for n in range(queued):
        roll = rng.random()
        if roll < 0.1:
            queue.append(Ask(f"q{n}", indices=tuple(sorted(rng.sample(node, min(2, gpus))))))
        elif roll < 0.25:
            queue.append(Ask(f"q{n}", count=min(gpus, rng.choice((2, 4)))))
        else:
            queue.append(Ask(f"q{n}"))
    return node, held, queue


def run(quick: bool = False) -> dict[str, Any]:
    from backend.runs.gpu_slots import decide

    cases = {"100 queued, 8 GPUs": (8, 100), "1000 queued, 64 GPUs": (64, 1000)}
    rounds = 5 if quick else 20
    calls = 20 if quick else 100
    times_ms: dict[str, list[float]] = {name: [] for name in cases}
    started: dict[str, int] = {}
    for turn in range(rounds):
        for name, (gpus, queued) in cases.items():
            node, held, queue = _case(gpus, queued, seed=turn)
            begin = time.perf_counter()
            for _ in range(calls):
                decision = decide(node, held, queue)
            times_ms[name].append((time.perf_counter() - begin) / calls * 1000)
            started[name] = len(decision.start)
    main = "100 queued, 8 GPUs"
    worst = max(times_ms[main])
    goals = [
        goal_row("queue decision, 100 queued runs on 8 GPUs (half held)", f"<= {GOAL_MS:g} ms", show(spread(times_ms[main]), "ms", digits=3) + f", max {worst:.3f}", worst <= GOAL_MS),
        goal_row("queue decision, 1000 queued runs on 64 GPUs (the bounds)", "none (scale)", show(spread(times_ms["1000 queued, 64 GPUs"]), "ms", digits=3), None),
    ]
    return {"rounds": rounds, "calls_per_round": calls, "ms": {name: spread(values) for name, values in times_ms.items()}, "started_last_round": started, "goals": goals, "conditions": conditions()}


def report(result: dict[str, Any]) -> str:
    lines = [f"Queue decision time (gpu_slots.decide), {result['rounds']} rounds of {result['calls_per_round']} calls, in turns:"]
    for name, summary in result["ms"].items():
        lines.append(f"  {name:>22}: {show(summary, 'ms', digits=3)} per decision; {result['started_last_round'][name]} runs started in the last")
    lines.append(conditions_line(result["conditions"]))
    return "\n".join(lines)


if __name__ == "__main__":
    outcome = run(quick=bench_arguments())
    print(report(outcome))
    for row in outcome["goals"]:
        print(row)
    sys.exit(0)
