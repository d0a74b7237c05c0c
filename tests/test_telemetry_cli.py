"""`app.py telemetry` / `python -m backend.telemetry.cli`: one snapshot, lines or JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from backend.telemetry.cli import main
from backend.telemetry.fake_sysfs import build_fake_sysfs

ROOT = Path(__file__).resolve().parent.parent


def test_json_snapshot_of_the_fake_tree(tmp_path, monkeypatch, capsys):
    root = build_fake_sysfs(tmp_path / "sys")
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("ROCR_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert main(["--json", "--sysfs-root", str(root)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["chart_source"] == "sysfs"
    assert [(g["gpu"], g["total_bytes"], g["source"]) for g in document["readings"]] == [
        (0, 25753026560, "sysfs"),
        (1, 17163091968, "sysfs"),
    ]
    assert [s["name"] for s in document["sources"]] == ["sysfs", "process"]


def test_line_snapshot_with_hints(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    assert main(["--sysfs-root", str(tmp_path / "empty")]) == 0
    out = capsys.readouterr().out
    assert "the chart shows the training process's memory" in out
    assert "amd-smi: unavailable: amd-smi not found on PATH" in out
    assert "hint: Install amd-smi" in out


def test_module_entry_point_on_this_machine():
    # The real /sys and the real (driverless) rocm-smi, as a user would run it.
    result = subprocess.run(
        [sys.executable, "-m", "backend.telemetry.cli", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    names = [s["name"] for s in document["sources"]]
    assert names[0] == "sysfs" and names[-1] == "process"
    if Path("/usr/bin/rocm-smi").exists() and document["chart_source"] == "process":
        rocm = next(s for s in document["sources"] if s["name"] == "rocm-smi")
        assert (rocm["available"], rocm["detail"]) == (False, "Driver not initialized (amdgpu not found in modules)")
        assert rocm["hint"]
