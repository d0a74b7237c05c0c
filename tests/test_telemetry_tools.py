"""Tool-based sources run as real subprocesses: fake tools on PATH (hanging, printing
garbage, printing fixtures), the machine's own rocm-smi, and detection order."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import psutil
import pytest

from backend.telemetry.amd_smi import AmdSmiSource
from backend.telemetry.detect import detect_sources
from backend.telemetry.fake_sysfs import build_fake_sysfs
from backend.telemetry.nvidia_smi import NvidiaSmiSource
from backend.telemetry.rocm_smi import RocmSmiSource
from backend.telemetry.tool import run_tool

FIXTURES = Path(__file__).parent / "fixtures" / "telemetry"
REAL_ROCM_SMI = Path("/usr/bin/rocm-smi")


def make_tool(bin_dir: Path, name: str, body: str) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def tool_env(bin_dir: Path) -> dict[str, str]:
    # Only the fake tools and the basics (sh, cat, sleep); never the machine's own tools.
    return {"PATH": f"{bin_dir}:/bin"}


def test_a_hanging_tool_is_killed_at_the_timeout_with_its_children(tmp_path):
    pid_file = tmp_path / "sleep.pid"
    make_tool(tmp_path / "bin", "rocm-smi", f"sleep 60 &\necho $! > {pid_file}\nwait")
    source = RocmSmiSource(env=tool_env(tmp_path / "bin"), sysfs_root=tmp_path, timeout_s=0.5)
    assert source.read() == []
    assert source.last_failure == "timed out after 0.5 s"
    sleeper = int(pid_file.read_text())
    # The grandchild held the output pipe open; it must be gone, not left to run out its 60 s.
    assert not psutil.pid_exists(sleeper) or psutil.Process(sleeper).status() == psutil.STATUS_ZOMBIE


def test_a_hanging_tool_makes_the_probe_unavailable(tmp_path):
    make_tool(tmp_path / "bin", "amd-smi", "sleep 60")
    status = AmdSmiSource(env=tool_env(tmp_path / "bin"), sysfs_root=tmp_path, probe_timeout_s=0.5).probe()
    assert not status.available
    assert "timed out" in status.detail


@pytest.mark.parametrize("source_class", [RocmSmiSource, AmdSmiSource, NvidiaSmiSource])
def test_a_tool_printing_garbage_fails_softly(tmp_path, source_class):
    make_tool(tmp_path / "bin", source_class.tool, f"cat {FIXTURES / 'garbage.stdout'}\nexit 139")
    source = source_class(env=tool_env(tmp_path / "bin"), sysfs_root=tmp_path, timeout_s=5)
    assert source.read() == []
    assert source.last_failure.startswith("no readings")
    status = source.probe()
    assert not status.available and "reported no GPU" in status.detail


def test_a_missing_tool_is_a_hint_not_an_error(tmp_path):
    status = AmdSmiSource(env=tool_env(tmp_path / "bin"), sysfs_root=tmp_path).probe()
    assert (status.available, status.detail) == (False, "amd-smi not found on PATH")
    assert "Install amd-smi" in status.hint


def test_rocm_smi_exiting_2_after_printing_everything_is_read(tmp_path):
    make_tool(tmp_path / "bin", "rocm-smi", f"cat {FIXTURES / 'rocm-smi-5.2.3-json.stdout'}\nexit 2")
    source = RocmSmiSource(env=tool_env(tmp_path / "bin"), sysfs_root=tmp_path)
    assert source.probe().available
    assert [(r.gpu, r.total_bytes) for r in source.read()] == [(0, 25753026560), (1, 17163091968)]


def test_rocm_smi_no_json_data_is_unavailable(tmp_path):
    make_tool(tmp_path / "bin", "rocm-smi", f"cat {FIXTURES / 'rocm-smi-no-json-data.stderr'} >&2")
    status = RocmSmiSource(env=tool_env(tmp_path / "bin"), sysfs_root=tmp_path).probe()
    assert not status.available
    assert "No JSON data to report" in status.detail


def test_rocm_smi_cards_are_mapped_to_hip_indices_by_pci_bus(tmp_path):
    # rocm-smi's card0 is PCI 03, card1 PCI 0c; with HIP_VISIBLE_DEVICES=1 the run sees only 0c.
    root = build_fake_sysfs(tmp_path / "sys")
    make_tool(tmp_path / "bin", "rocm-smi", f"cat {FIXTURES / 'rocm-smi-6.2-json.stdout'}")
    env = {**tool_env(tmp_path / "bin"), "HIP_VISIBLE_DEVICES": "1"}
    source = RocmSmiSource(env=env, sysfs_root=root)
    assert source.probe().available
    assert [(r.gpu, r.total_bytes, r.label) for r in source.read()] == [(0, 17163091968, "GPU 0 (gfx1101)")]


def test_amd_smi_26_with_listing_maps_and_reads(tmp_path):
    root = build_fake_sysfs(tmp_path / "sys")
    make_tool(
        tmp_path / "bin",
        "amd-smi",
        f'if [ "$1" = list ]; then cat {FIXTURES / "amd-smi-26-list.json"}; '
        f'else cat {FIXTURES / "amd-smi-26-metric.stdout"}; fi',
    )
    env = {**tool_env(tmp_path / "bin"), "ROCR_VISIBLE_DEVICES": "1"}
    source = AmdSmiSource(env=env, sysfs_root=root)
    assert source.probe().available
    assert [(r.gpu, r.total_bytes, r.source) for r in source.read()] == [(0, 16368 * 1024**2, "amd-smi")]


def test_amd_smi_falls_back_to_plain_metric_when_options_are_unknown(tmp_path):
    make_tool(
        tmp_path / "bin",
        "amd-smi",
        'if [ "$2" = "--usage" ]; then echo "usage: amd-smi metric [-h]" >&2; exit 2; fi\n'
        f"cat {FIXTURES / 'amd-smi-6.0-metric.json'}",
    )
    source = AmdSmiSource(env=tool_env(tmp_path / "bin"), sysfs_root=tmp_path)
    assert source.probe().available
    assert source.argv() == ["amd-smi", "metric", "--json"]
    assert [r.util_pct for r in source.read()] == [37.0]


def test_nvidia_smi_without_driver_is_unavailable(tmp_path):
    make_tool(tmp_path / "bin", "nvidia-smi", f"cat {FIXTURES / 'nvidia-smi-no-driver.stdout'}\nexit 9")
    status = NvidiaSmiSource(env=tool_env(tmp_path / "bin"), sysfs_root=tmp_path).probe()
    assert not status.available and "NVIDIA-SMI has failed" in status.detail


def test_run_tool_reports_exit_code_and_both_streams(tmp_path):
    make_tool(tmp_path / "bin", "t", "echo out; echo err >&2; exit 3")
    output = run_tool(["t"], 5.0, tool_env(tmp_path / "bin"))
    assert (output.stdout, output.stderr, output.returncode, output.error) == ("out\n", "err\n", 3, "")


@pytest.mark.skipif(not REAL_ROCM_SMI.exists(), reason="Debian's rocm-smi is not installed")
def test_the_real_rocm_smi_without_a_driver_is_unavailable_with_its_hint(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(REAL_ROCM_SMI, bin_dir / "rocm-smi")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    status = RocmSmiSource(env=env, sysfs_root=tmp_path, probe_timeout_s=30).probe()
    if status.available:
        pytest.skip("this machine has a working amdgpu driver")
    assert status.detail == "Driver not initialized (amdgpu not found in modules)"
    assert "modprobe amdgpu" in status.hint


# ---- detection ------------------------------------------------------------------------


def test_detect_prefers_sysfs_and_runs_no_tool(tmp_path):
    root = build_fake_sysfs(tmp_path / "sys")
    marker = tmp_path / "rocm-smi-ran"
    make_tool(tmp_path / "bin", "rocm-smi", f"touch {marker}")
    sources, statuses = detect_sources(root, tool_env(tmp_path / "bin"))
    assert [s.name for s in sources] == ["sysfs", "process"]
    assert [s.name for s in statuses] == ["sysfs", "process"]
    assert not marker.exists()


def test_detect_falls_through_to_rocm_smi_with_hints_for_the_rest(tmp_path):
    make_tool(tmp_path / "bin", "rocm-smi", f"cat {FIXTURES / 'rocm-smi-5.2.3-json.stdout'}")
    sources, statuses = detect_sources(tmp_path / "empty-sys", tool_env(tmp_path / "bin"))
    assert [s.name for s in sources] == ["rocm-smi", "process"]
    by_name = {s.name: s for s in statuses}
    assert [s.name for s in statuses] == ["sysfs", "amd-smi", "rocm-smi", "process"]
    assert not by_name["amd-smi"].available and "Install amd-smi" in by_name["amd-smi"].hint
    assert by_name["rocm-smi"].available


def test_detect_with_nothing_working_charts_process_memory(tmp_path):
    sources, statuses = detect_sources(tmp_path / "empty-sys", tool_env(tmp_path / "bin"), lambda: os.getpid())
    assert [s.name for s in sources] == ["process"]
    assert [s.available for s in statuses] == [False, False, False, False, True]
    assert all(s.hint for s in statuses if not s.available)
    assert sources[0].read()[0].used_bytes > 0


def test_real_machine_detection_never_raises():
    if shutil.which("rocm-smi") is None:
        pytest.skip("rocm-smi not installed")
    sources, statuses = detect_sources()
    assert sources[-1].name == "process"
    assert {"sysfs", "process"} <= {s.name for s in statuses}
