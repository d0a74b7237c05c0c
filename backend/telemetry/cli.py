"""`python app.py telemetry [--json] [--sysfs-root DIR]`: one snapshot from the command line.

Detects the sources as the app does, reads the chart's source once, and prints a line per
GPU (or one JSON document) with the hints for the sources that do not work here.
Exit status 0 whenever a snapshot was printed, GPU or not: a CPU-only machine is not an error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from backend.telemetry.base import Reading, SourceStatus
from backend.telemetry.detect import detect_sources

GIB = 1024**3


def _fmt(value: float | None, fmt: str, unit: str) -> str:
    return "n/a" if value is None else f"{value:{fmt}}{unit}"


def format_reading(reading: Reading) -> str:
    used = reading.used_bytes / GIB if reading.used_bytes is not None else None
    total = reading.total_bytes / GIB if reading.total_bytes is not None else None
    return (
        f"{reading.label or f'GPU {reading.gpu}'}: "
        f"memory {_fmt(used, '.2f', '')} / {_fmt(total, '.2f', ' GiB')}, "
        f"use {_fmt(reading.util_pct, '.0f', ' %')}, "
        f"{_fmt(reading.temp_c, '.1f', ' °C')}, "
        f"{_fmt(reading.power_w, '.1f', ' W')} "
        f"[{reading.source}]"
    )


def format_status(status: SourceStatus) -> str:
    if status.available:
        return f"  {status.name}: works ({status.detail})"
    hint = f"\n      hint: {status.hint}" if status.hint else ""
    return f"  {status.name}: unavailable: {status.detail}{hint}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="app.py telemetry", description="Print one telemetry snapshot.")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    parser.add_argument(
        "--sysfs-root", type=Path, default=Path("/sys"), metavar="DIR", help="read DIR instead of /sys"
    )
    parser.add_argument("--pid", type=int, default=None, help="measure this process tree's memory")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    sources, statuses = detect_sources(args.sysfs_root, os.environ, lambda: args.pid)
    chart = sources[0]
    readings = chart.read()
    if args.json:
        document = {
            "chart_source": chart.name,
            "readings": [r.to_json() for r in readings],
            "sources": [
                {"name": s.name, "available": s.available, "detail": s.detail, "hint": s.hint} for s in statuses
            ],
        }
        print(json.dumps(document, indent=2))
        return 0
    if chart.name == "process":
        print("No GPU telemetry source works here; the chart shows the training process's memory.")
    for reading in readings:
        print(format_reading(reading))
    if not readings:
        print(f"No readings from {chart.name}" + (" (no process given: --pid)" if chart.name == "process" else ""))
    print("Sources (in order of cost):")
    for status in statuses:
        print(format_status(status))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
