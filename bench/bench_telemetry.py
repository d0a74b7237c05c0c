"""Telemetry cost, side by side in one run (a benchmark, not a test).

1. Cost of one sample per source: sysfs against the fake tree vs one rocm-smi call
   (the machine's own rocm-smi when installed, else a stand-in script that prints the
   captured JSON), parse included. Expectation: sysfs at least 100x cheaper.
2. The sampler's CPU use at a 1 s interval (sysfs source, writing JSON lines), measured as
   process CPU time over ~10 s of wall time. Expectation: under 1 % of one core.

`run() -> dict` returns the figures for bench/run_all.py; `python -m bench.bench_telemetry`
prints them.
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from backend.telemetry.fake_sysfs import build_fake_sysfs
from backend.telemetry.rocm_smi import ROCM_SMI_ARGS, parse_rocm_smi
from backend.telemetry.sampler import Sampler
from backend.telemetry.sysfs import SysfsSource
from backend.telemetry.tool import run_tool
from tests.harness import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "telemetry" / "rocm-smi-5.2.3-json.stdout"


def summarize(seconds: list[float]) -> dict[str, float]:
    """Median and spread (10th-90th percentile, min, max) in microseconds."""
    micro = sorted(s * 1e6 for s in seconds)
    deciles = statistics.quantiles(micro, n=10) if len(micro) >= 2 else [micro[0]] * 9
    return {
        "n": len(micro),
        "median_us": statistics.median(micro),
        "p10_us": deciles[0],
        "p90_us": deciles[-1],
        "min_us": micro[0],
        "max_us": micro[-1],
    }


def time_calls(call: Callable[[], Any], repeats: int, warmup: int = 1) -> list[float]:
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples


def rocm_smi_command(workdir: Path) -> tuple[list[str], dict[str, str], str]:
    """The rocm-smi to time: the real one if present, else a script printing the capture."""
    real = shutil.which("rocm-smi")
    if real:
        return (
            list(ROCM_SMI_ARGS),
            dict(os.environ),
            f"real {real} ({tool_version('rocm-smi')}; no amdgpu driver here: it exits early after Python start-up)" if not Path("/sys/module/amdgpu").exists() else f"real {real}",
        )
    bin_dir = workdir / "bin"
    bin_dir.mkdir()
    script = bin_dir / "rocm-smi"
    script.write_text(f"#!/bin/sh\ncat {FIXTURE}\n")
    script.chmod(0o755)
    return list(ROCM_SMI_ARGS), {"PATH": f"{bin_dir}:/usr/bin:/bin"}, "stand-in shell script printing the captured JSON (no rocm-smi installed)"


def tool_version(package: str) -> str:
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True, timeout=5)
        return f"Debian package {out.stdout.strip()}" if out.returncode == 0 and out.stdout.strip() else "version unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "version unknown"


def conditions() -> dict[str, Any]:
    load1, load5, _ = os.getloadavg()
    return {
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "load_average_1m_5m": [round(load1, 2), round(load5, 2)],
        "python": platform.python_version(),
        "psutil": psutil.__version__,
        "kernel": platform.release(),
        "rocm_smi": tool_version("rocm-smi"),
    }


def bench_sources(workdir: Path, sysfs_repeats: int = 300, tool_repeats: int = 10) -> dict[str, Any]:
    root = build_fake_sysfs(workdir / "sys")
    sysfs = SysfsSource(root, env={})
    sysfs.probe()
    sysfs_times = time_calls(sysfs.read, sysfs_repeats, warmup=5)

    argv, env, which = rocm_smi_command(workdir)

    def one_rocm_smi_sample() -> None:
        output = run_tool(argv, 30.0, env)
        parse_rocm_smi(output.stdout)

    tool_times = time_calls(one_rocm_smi_sample, tool_repeats, warmup=1)
    sysfs_summary, tool_summary = summarize(sysfs_times), summarize(tool_times)
    ratio = tool_summary["median_us"] / sysfs_summary["median_us"]
    return {
        "sysfs_fake_tree_per_sample": {**sysfs_summary, "gpus_per_sample": len(sysfs.read())},
        "rocm_smi_per_sample": {**tool_summary, "tool": which},
        "rocm_smi_over_sysfs_median_ratio": ratio,
        "sysfs_at_least_100x_cheaper": ratio >= 100,
    }


def bench_sampler_cpu(workdir: Path, duration_s: float = 10.0, interval_s: float = 1.0) -> dict[str, Any]:
    root = build_fake_sysfs(workdir / "sys-sampler")
    sampler = Sampler([SysfsSource(root, env={})], interval_s=interval_s)
    samples = workdir / "run" / "telemetry.jsonl"
    sampler.watch(samples, pid=None)  # writing, as during a run
    cpu_before, wall_before = time.process_time(), time.monotonic()
    sampler.start()
    time.sleep(duration_s)  # the main thread idles; all CPU counted is the sampler's
    cpu = time.process_time() - cpu_before
    wall = time.monotonic() - wall_before
    sampler.stop()
    ticks = len(samples.read_text().splitlines()) // 2 if samples.exists() else 0
    percent = 100.0 * cpu / wall
    return {
        "interval_s": interval_s,
        "wall_s": wall,
        "process_cpu_s": cpu,
        "cpu_percent_of_one_core": percent,
        "ticks": ticks,
        "cpu_ms_per_tick": 1000.0 * cpu / ticks if ticks else None,
        "under_1_percent": percent < 1.0,
    }


def run(sampler_seconds: float = 10.0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-telemetry-") as tmp:
        workdir = Path(tmp)
        sources = bench_sources(workdir)
        sampler = bench_sampler_cpu(workdir, duration_s=sampler_seconds)
    return {"name": "telemetry", "conditions": conditions(), "sources": sources, "sampler": sampler}


def report(result: dict[str, Any]) -> str:
    sysfs = result["sources"]["sysfs_fake_tree_per_sample"]
    tool = result["sources"]["rocm_smi_per_sample"]
    sampler = result["sampler"]
    c = result["conditions"]

    def line(name: str, s: dict[str, float]) -> str:
        return (f"  {name:<22} median {s['median_us']:>10.1f} us   p10-p90 {s['p10_us']:.1f}-{s['p90_us']:.1f} us"
                f"   min-max {s['min_us']:.1f}-{s['max_us']:.1f} us   (n={s['n']})")

    return "\n".join([
        "Telemetry: cost of one sample per source",
        line("sysfs (fake tree)", sysfs) + f"  {sysfs['gpus_per_sample']} GPUs",
        line("rocm-smi subprocess", tool),
        f"    rocm-smi: {tool['tool']}",
        f"  rocm-smi / sysfs (medians): {result['sources']['rocm_smi_over_sysfs_median_ratio']:.0f}x"
        f"  -> {'OK' if result['sources']['sysfs_at_least_100x_cheaper'] else 'NOT'} at least 100x",
        f"Sampler at {sampler['interval_s']:g} s interval, sysfs source, writing JSON lines:",
        f"  {sampler['process_cpu_s'] * 1000:.1f} ms CPU over {sampler['wall_s']:.1f} s wall, {sampler['ticks']} ticks"
        f" = {sampler['cpu_percent_of_one_core']:.3f} % of one core"
        f"  -> {'OK' if sampler['under_1_percent'] else 'NOT'} under 1 %",
        f"Conditions: {c['logical_cores']} logical / {c['physical_cores']} physical cores, load {c['load_average_1m_5m']},"
        f" Python {c['python']}, psutil {c['psutil']}, kernel {c['kernel']}, rocm-smi {c['rocm_smi']}",
    ])


if __name__ == "__main__":
    print(report(run()))
