"""Reading a user's dataset file: what checking it costs in time and memory, by size.

The Data tab reads every row of a file before it registers it (backend/data/dataset_file.py:
JSONL line by line, a .json list element by element, CSV in chunks, Parquet in batches).
For alpaca files of each format at two sizes, a fresh process runs `inspect_dataset` once;
the bench records the wall time, the rows per second and the process's peak memory above
what the same process holds after importing the module (its baseline).

Goals: the peak above baseline stays under 200 MiB for every file, and does not grow with the
file (the larger file's peak at most 1.5x the smaller's + 20 MiB): memory holds one row or one
chunk, never the file. The same file is then read as the page reads it (backend/data/reading.py:
in a fork capped at 256 MiB), and the time that costs beyond the in-process read is reported.

`python -m bench.bench_data [--quick]`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import bench_arguments, conditions, conditions_line, goal_row
from tests.harness import PYTHON, ROOT

FORMATS = ("jsonl", "json", "csv", "parquet")
PEAK_GOAL_MIB = 200

MEASURE = """
import json, resource, sys, time
from pathlib import Path
from backend.data.dataset_file import inspect_dataset
from backend.data.reading import inspect_bounded
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
found = inspect_dataset(Path(sys.argv[1]), Path(sys.argv[1]).name)
seconds = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
bounded = inspect_bounded(Path(sys.argv[1]), Path(sys.argv[1]).name)  # the page's read: a capped fork
bounded_seconds = time.perf_counter() - started
assert bounded.rows == found.rows and bounded.findings == found.findings, (bounded.findings, found.findings)
print(json.dumps({"rows": found.rows, "usable": found.usable, "seconds": seconds, "bounded_seconds": bounded_seconds, "peak_above_base_kib": peak - base}))
"""


def rows(count: int) -> list[dict[str, str]]:
    return [{"instruction": f"Answer question number {n} in one sentence.", "input": "context " * (n % 40), "output": f"Here is answer {n}. " * 8} for n in range(count)]


def write(path: Path, file_format: str, count: int) -> Path:
    data = rows(count)
    if file_format == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in data), encoding="utf-8")
    elif file_format == "json":
        path.write_text(json.dumps(data), encoding="utf-8")
    elif file_format == "csv":
        import pandas as pd

        pd.DataFrame(data).to_csv(path, index=False)
    else:
        import pandas as pd

        pd.DataFrame(data).to_parquet(path, index=False)
    return path


def measure(path: Path) -> dict[str, Any]:
    out = subprocess.run([PYTHON, "-c", MEASURE, str(path)], cwd=ROOT, capture_output=True, text=True, timeout=1800, check=True)
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    answer["file_mib"] = path.stat().st_size / 2**20
    answer["peak_above_base_mib"] = answer.pop("peak_above_base_kib") / 1024
    return answer


def run(quick: bool = False) -> dict[str, Any]:
    sizes = (20_000, 100_000) if quick else (50_000, 500_000)
    result: dict[str, Any] = {"conditions": conditions(), "sizes": list(sizes), "files": {}}
    with tempfile.TemporaryDirectory(prefix="bench-data-") as folder:
        for file_format in FORMATS:
            for count in sizes:
                path = write(Path(folder) / f"data-{count}.{file_format}", file_format, count)
                result["files"][f"{file_format}-{count}"] = measure(path)
                path.unlink()
    small, large = sizes
    peaks = [f["peak_above_base_mib"] for f in result["files"].values()]
    flat = all(
        result["files"][f"{fmt}-{large}"]["peak_above_base_mib"] <= 1.5 * result["files"][f"{fmt}-{small}"]["peak_above_base_mib"] + 20 for fmt in FORMATS
    )
    overhead = max(f["bounded_seconds"] - f["seconds"] for f in result["files"].values())
    result["goals"] = [
        goal_row("peak memory above baseline, any file", f"< {PEAK_GOAL_MIB} MiB", f"{max(peaks):.0f} MiB", max(peaks) < PEAK_GOAL_MIB),
        goal_row(f"peak at {large:,} rows vs {small:,} rows", "≤ 1.5x + 20 MiB (flat)", "flat" if flat else "grows", flat),
        goal_row("the page's read in a capped fork, beyond reading in process (worst file)", "—", f"{overhead:+.2f} s", None),
    ]
    return result


def report(result: dict[str, Any]) -> str:
    lines = ["Checking a dataset file (inspect_dataset, every row), one fresh process per file:"]
    for name, f in result["files"].items():
        lines.append(
            f"  {name:>16}: {f['file_mib']:7.1f} MiB, {f['rows']:>7,} rows in {f['seconds']:6.2f} s"
            f" ({f['rows'] / max(f['seconds'], 1e-9):>9,.0f} rows/s), peak +{f['peak_above_base_mib']:.0f} MiB;"
            f" in a capped fork {f['bounded_seconds']:6.2f} s"
        )
    lines.append(conditions_line(result["conditions"]))
    return "\n".join(lines)


if __name__ == "__main__":
    outcome = run(quick=bench_arguments())
    print(report(outcome))
    for row in outcome["goals"]:
        print(row)
    sys.exit(0)
