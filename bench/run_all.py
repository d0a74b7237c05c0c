"""Runs every benchmark in sequence, prints each report, and writes BENCHMARKS.md.

    python -m bench.run_all [--quick] [--only NAME ...] [--out FILE]

`make bench` runs it. Each section's figures come from one run on this machine, so the
ratios inside a section (measured side by side, in turns) are what to compare; absolute
times move with the machine and its load. A bench that fails is written down as failed,
with its error, and the others still run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import conditions, load_average
from tests.harness import ROOT

# (key, section title, module), in the order of BENCHMARKS.md and of the run.
SECTIONS: tuple[tuple[str, str, str], ...] = (
    ("ingest", "1. Log ingest", "bench.bench_ingest"),
    ("overhead", "2. Dashboard overhead during a run", "bench.bench_overhead"),
    ("latency", "3. Latency", "bench.bench_latency"),
    ("first_loss", "4. Click to first loss point: RocBoard vs LlamaBoard", "bench.bench_first_loss"),
    ("telemetry", "5. Telemetry sample cost per source", "bench.bench_telemetry"),
    ("data", "6. Checking a dataset file", "bench.bench_data"),
    ("ship", "7. After training: chat, evaluate, export", "bench.bench_ship"),
    ("slurm", "8. Slurm runs and the queue", "bench.bench_slurm"),
    ("health", "9. GPU health alerts", "bench.bench_health"),
    ("validate", "10. The validation path: one GPU, N GPUs, a fault drill", "bench.bench_validate"),
    ("slots", "11. GPU slots: the queue's decision", "bench.bench_slots"),
    ("node", "12. The node view with 8 runs live", "bench.bench_node"),
)

INTRO = """\
Written by `make bench` (`python -m bench.run_all`); the scripts are in [bench/](bench/README.md).
Every figure below comes from the one run described under *Conditions*. Absolute times move
with the machine and its load; what to compare are the figures measured side by side in the
same section (taken in turns, so that a change in the machine's load falls on both sides).
Where a goal is missed the figure is written all the same, with what the bench found about why.
"""


def run_section(key: str, module_name: str, quick: bool) -> dict[str, Any]:
    """One bench: its result, report and goal rows, or the error it failed with."""
    module = importlib.import_module(module_name)
    started = time.monotonic()
    load_before = load_average()
    outcome: dict[str, Any] = {"key": key, "load_before": load_before}
    try:
        if key == "telemetry":
            # bench_telemetry predates run(quick): its knob is the sampler's window.
            result = module.run(sampler_seconds=3.0 if quick else 10.0)
        else:
            result = module.run(quick=quick)
        outcome["result"] = result
        outcome["report"] = module.report(result)
        outcome["goals"] = result.get("goals") or goal_rows_for(key, result)
    except Exception:  # a failed bench is a finding too; the others still run
        outcome["error"] = traceback.format_exc()
        outcome["report"] = f"FAILED:\n{outcome['error']}"
        outcome["goals"] = []
    outcome["seconds"] = time.monotonic() - started
    outcome["load_after"] = load_average()
    return outcome


def goal_rows_for(key: str, result: dict[str, Any]) -> list[dict[str, Any]]:
    """Goal rows for a bench whose result carries none of its own (bench_telemetry)."""
    if key != "telemetry":
        return []
    from bench import goal_row

    sysfs = result["sources"]["sysfs_fake_tree_per_sample"]
    tool = result["sources"]["rocm_smi_per_sample"]
    ratio = result["sources"]["rocm_smi_over_sysfs_median_ratio"]
    sampler = result["sampler"]
    return [
        goal_row(
            f"one sample, sysfs (fake tree, {sysfs['gpus_per_sample']} GPUs)", "-", f"median {sysfs['median_us']:.1f} µs (p10-p90 {sysfs['p10_us']:.1f}-{sysfs['p90_us']:.1f}, n={sysfs['n']})", None
        ),
        goal_row(
            "one sample, rocm-smi subprocess + parse",
            "-",
            f"median {tool['median_us'] / 1000:.1f} ms (p10-p90 {tool['p10_us'] / 1000:.1f}-{tool['p90_us'] / 1000:.1f}, n={tool['n']}); {tool['tool']}",
            None,
        ),
        goal_row("rocm-smi / sysfs", ">= 100x", f"{ratio:,.0f}x", ratio >= 100),
        goal_row(
            f"sampler CPU at {sampler['interval_s']:g} s interval (sysfs, writing samples)",
            "< 1 % of one core",
            f"{sampler['cpu_percent_of_one_core']:.3f} % ({sampler['ticks']} ticks)",
            sampler["under_1_percent"],
        ),
    ]


def met_text(met: bool | str | None) -> str:
    """yes / no, "-" for a figure without a goal, or a bench's own word (e.g. not resolvable)."""
    if isinstance(met, str):
        return met
    return "-" if met is None else ("yes" if met else "**no**")


def table(rows: list[dict[str, Any]], section: str | None = None) -> list[str]:
    head = ("| section " if section is not None else "") + "| figure | goal | measured | met? |"
    rule = ("|---" if section is not None else "") + "|---|---|---|---|"
    lines = [head, rule]
    for row in rows:
        cells = [row["figure"], row["goal"], row["measured"], met_text(row["met"])]
        if section is not None:
            cells.insert(0, row.get("section", ""))
        lines.append("| " + " | ".join(str(cell).replace("|", "\\|") for cell in cells) + " |")
    return lines


def markdown(outcomes: list[dict[str, Any]], started: datetime, seconds: float, quick: bool, before: dict[str, Any], after_load: list[float]) -> str:
    from bench import conditions_line

    goals = [dict(row, section=title.split(".")[0]) for outcome, (_, title, _) in zip(outcomes, SECTIONS, strict=True) for row in outcome["goals"] if row["met"] is not None]
    met = sum(1 for row in goals if row["met"] is True)
    lines = [
        "# RocBoard benchmarks",
        "",
        INTRO,
        "## Conditions",
        "",
        f"- Run: {started.strftime('%Y-%m-%d %H:%M UTC')}, {seconds / 60:.1f} min in all" + (" (`--quick`: fewer repetitions)" if quick else "") + ".",
        f"- Machine: {conditions_line(before)}.",
        f"- Load average (1, 5, 15 min) at the start {before['load_average_1m_5m_15m']}, at the end {after_load}; per section below."
        " The machine was shared with other work while the benches ran, so single runs vary; every figure is a median of repetitions,"
        " with its spread.",
        "",
        f"## Goals at a glance ({met} of {len(goals)} met)",
        "",
        *table(goals, section=""),
        "",
    ]
    for outcome, (_, title, module) in zip(outcomes, SECTIONS, strict=True):
        lines += [
            f"## {title}",
            "",
            f"`python -m {module}` · {outcome['seconds']:.0f} s · load average before {outcome['load_before']}, after {outcome['load_after']}",
            "",
        ]
        if "error" in outcome:
            lines += ["**The bench failed:**", "", "```", outcome["error"].rstrip(), "```", ""]
            continue
        lines += [*table(outcome["goals"]), "", "```", outcome["report"].rstrip(), "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run_all", description="Run RocBoard's benchmarks and write BENCHMARKS.md.")
    parser.add_argument("--quick", action="store_true", help="one repetition of the training benches, shorter windows (a first look, not figures to keep)")
    parser.add_argument("--only", nargs="*", choices=[key for key, _, _ in SECTIONS], help="run only these sections (BENCHMARKS.md is then not written)")
    parser.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"), help="where to write the markdown (default BENCHMARKS.md)")
    parser.add_argument("--json", default=None, help="also write every raw result to this JSON file")
    args = parser.parse_args(argv)

    started_at = datetime.now(UTC)
    started = time.monotonic()
    before = conditions()
    outcomes = []
    for key, title, module in SECTIONS:
        if args.only and key not in args.only:
            continue
        print(f"\n=== {title} ({module}) ===", flush=True)
        outcome = run_section(key, module, args.quick)
        print(outcome["report"], flush=True)
        print(f"({outcome['seconds']:.0f} s)", flush=True)
        outcomes.append(outcome)
    seconds = time.monotonic() - started
    print(f"\nAll benches: {seconds / 60:.1f} min", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(outcomes, indent=2, default=str), encoding="utf-8")
    if args.only:
        print("(--only: BENCHMARKS.md not written)")
    else:
        Path(args.out).write_text(markdown(outcomes, started_at, seconds, args.quick, before, load_average()), encoding="utf-8")
        print(f"Wrote {args.out}")
    return 1 if any("error" in outcome for outcome in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
