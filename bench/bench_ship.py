"""After training: what chatting with, evaluating and exporting a run cost on this machine.

One CPU-demo run is trained (the real llamafactory-cli), then, in turns, `repeats` times each:

- **chat:** loading the adapter server (a cold process: torch and LLaMA-Factory imported, the
  base and the adapter loaded), the first streamed piece of a greedy answer after the question,
  the whole answer, and the side-by-side load (two servers at once);
- **evaluate:** an evaluation run of 12 held-out rows, 16 new tokens each (start to end);
- **export:** a merge into a fresh folder, and a merge with GGUF q8_0 when llama.cpp's converter
  is installed (`make gguf`).

Goals: the first streamed piece within 0.5 s of the question (the demo's model is tiny: this is
RocBoard's and LLaMA-Factory's serving path, not the model); nothing left running afterwards
(chat servers, the export's child).

`python -m bench.bench_ship [--quick]`.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from bench import bench_arguments, conditions, conditions_line, goal_row
from tests.harness import train_demo_run, wait_until

FIRST_PIECE_GOAL_S = 0.5
PROMPT = "What is the opposite of up?"
EXPORT_LABELS = {"merge": "merge", "merge_gguf_q8_0": "merge + GGUF q8_0"}


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _load(board, run_id: str, side_by_side: bool) -> float:
    started = time.perf_counter()
    last = None
    for status in board.chat.load(run_id, side_by_side=side_by_side):
        last = status
    if last is None or last.state != "ready":
        raise RuntimeError(f"chat load ended {last.state if last else 'without a status'}: {[f.problem for f in (last.findings if last else ())]}")
    return time.perf_counter() - started


def _ask(board) -> tuple[float, float]:
    from backend.chat.server import GenerationSettings

    started = time.perf_counter()
    first = None
    for event in board.chat.ask(PROMPT, "", GenerationSettings(temperature=0.0, max_new_tokens=32)):
        if event.error:
            raise RuntimeError(f"chat answer failed: {event.error}")
        if event.delta and first is None:
            first = time.perf_counter() - started
    return (first if first is not None else float("nan")), time.perf_counter() - started


def _leftovers(runs_dir: Path) -> list[int]:
    """Processes still working in the runs dir (chat servers, export children)."""
    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(str(runs_dir) in part for part in process.info["cmdline"] or []):
                found.append(process.pid)
        except (psutil.Error, TypeError):
            continue
    return found


def run(quick: bool = False) -> dict[str, Any]:
    from backend.service import RocBoard

    repeats = 1 if quick else 3
    result: dict[str, Any] = {"conditions": conditions(), "repeats": repeats}
    with tempfile.TemporaryDirectory(prefix="bench-ship-") as folder:
        runs_dir = Path(folder) / "runs"
        exports = Path(folder) / "exports"
        run_id = train_demo_run(runs_dir)
        board = RocBoard(runs_dir, export_roots=[exports])
        try:
            loads, side_loads, firsts, wholes = [], [], [], []
            for _ in range(repeats):
                loads.append(_load(board, run_id, side_by_side=False))
                for _ in range(3):
                    first, whole = _ask(board)
                    firsts.append(first)
                    wholes.append(whole)
                board.chat.unload()
                side_loads.append(_load(board, run_id, side_by_side=True))
                board.chat.unload()
            result["chat"] = {"load_s": loads, "side_by_side_load_s": side_loads, "first_piece_s": firsts, "whole_answer_s": wholes}

            # The Evaluate tab never offers what a run trained on: the demo's first rows, in a
            # file of their own, registered as the Data tab does (the same 12 rows are predicted).
            from backend.demo import DEMO_DIR

            sample = Path(folder) / "demo-sample.json"
            sample.write_text(json.dumps(json.loads((DEMO_DIR / "data" / "demo.json").read_text())[:50]))
            if board.data.add("upload", str(sample), "demo-sample").name is None:
                raise RuntimeError("the held-out sample could not be registered")
            evaluations = []
            for _ in range(repeats):
                started = time.perf_counter()
                answer = board.evaluations.start(run_id, "data:demo-sample", max_samples=12, max_new_tokens=16)
                if answer.run is None:
                    raise RuntimeError(f"evaluation refused: {[f.problem for f in answer.findings]}")

                def evaluated(eval_id: str = answer.run.id) -> bool:
                    return not board.is_active(eval_id)

                wait_until(evaluated, 600, interval=0.25, what="the evaluation")
                evaluations.append(time.perf_counter() - started)
            result["evaluate_s"] = evaluations

            exports_s: dict[str, list[float]] = {"merge": [], "merge_gguf_q8_0": []}
            kinds = ("merge", "merge_gguf_q8_0") if board.exports.converter() is not None else ("merge",)
            result["gguf_available"] = board.exports.converter() is not None
            for n in range(repeats):
                for kind in kinds:
                    request = board.exports.request(run_id, str(exports / f"{kind}-{n}"), "", 1, "cpu", "q8_0" if "gguf" in kind else "none", False)
                    started = time.perf_counter()
                    export = board.exports.start(request)
                    if not export.started:
                        raise RuntimeError(f"export refused: {[f.problem for f in export.findings]}")
                    progress = board.exports.wait(900)
                    if progress is None or progress.phase != "done":
                        raise RuntimeError(f"export ended {progress.phase if progress else None}: {[f.problem for f in (progress.findings if progress else [])]}")
                    exports_s[kind].append(time.perf_counter() - started)
            result["export_s"] = {kind: times for kind, times in exports_s.items() if times}
        finally:
            board.close()
        time.sleep(0.5)
        result["leftover_pids"] = _leftovers(runs_dir)
    first = _median(result["chat"]["first_piece_s"])
    chat_loads = result["chat"]["load_s"]
    result["goals"] = [
        goal_row("chat: first streamed piece after the question", f"≤ {FIRST_PIECE_GOAL_S} s", f"{first:.3f} s (median)", first <= FIRST_PIECE_GOAL_S),
        goal_row("processes left after the app's close", "0", str(len(result["leftover_pids"])), not result["leftover_pids"]),
        goal_row("chat: load the adapter server", "—", f"{_median(chat_loads):.1f} s (median)", None),
    ]
    return result


def report(result: dict[str, Any]) -> str:
    chat = result["chat"]
    lines = [
        conditions_line(result["conditions"]),
        f"Repeats: {result['repeats']} (medians; all values in the JSON).",
        "",
        "| What | Median | Values |",
        "|---|---|---|",
    ]

    def row(name: str, values: list[float]) -> None:
        lines.append(f"| {name} | {_median(values):.3f} s | {', '.join(f'{v:.3f}' for v in values)} |")

    row("chat: load the adapter server (cold process)", chat["load_s"])
    row("chat: load side by side (two servers)", chat["side_by_side_load_s"])
    row("chat: first streamed piece after the question", chat["first_piece_s"])
    row("chat: whole greedy answer (32 tokens at most)", chat["whole_answer_s"])
    row("evaluate: 12 rows, 16 new tokens, start to end", result["evaluate_s"])
    for kind, values in result["export_s"].items():
        row(f"export: {EXPORT_LABELS[kind]} (start to done)", values)
    if not result.get("gguf_available"):
        lines.append("\nGGUF not measured: llama.cpp's converter is not installed (`make gguf`).")
    return "\n".join(lines)


if __name__ == "__main__":
    outcome = run(quick=bench_arguments())
    print(report(outcome))
    for goal in outcome["goals"]:
        print(goal)
