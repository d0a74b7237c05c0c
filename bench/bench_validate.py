"""The validation path on the demo: the whole of rungs 1-3 (`python app.py validate` with its
defaults: the CPU demo preset, 2 gloo workers, 24 steps per run), and RocBoard's own overhead
per rung (the rung's wall time less its trainers' own: the pre-launch checks, LLaMA-Factory's
parser in a helper, the waits between polls, the drill's kill and resume).

Goal (issue 29): rungs 1-3 in <= 5 min on two cores. The figures come from the report the
path itself writes (backend/validate/report.py), so they are the ones a user reads.

`python -m bench.bench_validate [--quick]` (quick: the same path; it is one run either way).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import bench_arguments, conditions, conditions_line, goal_row

ROOT = Path(__file__).resolve().parent.parent
GOAL_S = 300.0


def run(quick: bool = False) -> dict[str, Any]:
    from backend.validate.report import list_reports

    with tempfile.TemporaryDirectory(prefix="rocboard-bench-validate-") as folder:
        runs = Path(folder) / "runs"
        began = time.monotonic()
        done = subprocess.run([sys.executable, str(ROOT / "app.py"), "validate", "--runs-dir", str(runs)], capture_output=True, text=True, timeout=1200, cwd=ROOT)
        wall = time.monotonic() - began
        if done.returncode != 0:
            raise RuntimeError(f"app.py validate exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        [report] = list_reports(runs)
    rungs = {
        rung.rung: {
            "status": rung.status,
            "wall_s": rung.figures.get("rung_wall_s"),
            "overhead_s": rung.figures.get("rocboard_overhead_s"),
            "trainer_s": rung.figures.get("trainer_s"),
            "tokens_per_s": rung.figures.get("tokens_per_s"),
            "max_loss_gap": rung.figures.get("max_loss_gap"),
            "scaling_efficiency": rung.figures.get("scaling_efficiency"),
        }
        for rung in report.rungs
    }
    goals = [goal_row("rungs 1-3 on the demo, wall time", f"<= {GOAL_S:.0f} s", f"{wall:.0f} s", wall <= GOAL_S)]
    for name, figures in rungs.items():
        goals.append(goal_row(f"{name}: RocBoard's own overhead", "figure", f"{figures['overhead_s']} s of {figures['wall_s']} s", None))
    return {"wall_s": round(wall, 1), "rungs": rungs, "goals": goals, "conditions": conditions()}


def report(result: dict[str, Any]) -> str:
    lines = [f"Rungs 1-3 of `python app.py validate` on the demo: {result['wall_s']} s in all (goal <= {GOAL_S:.0f} s).", ""]
    lines.append("| rung | verdict | wall (s) | trainers (s) | RocBoard overhead (s) | tokens/s | largest loss gap | scaling efficiency |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for name, f in result["rungs"].items():
        cells = [name, f["status"], f["wall_s"], f["trainer_s"], f["overhead_s"], f["tokens_per_s"], f["max_loss_gap"], f["scaling_efficiency"]]
        lines.append("| " + " | ".join("-" if cell is None else str(cell) for cell in cells) + " |")
    lines += ["", conditions_line(result["conditions"])]
    return "\n".join(lines)


if __name__ == "__main__":
    outcome = run(quick=bench_arguments())
    print(report(outcome))
