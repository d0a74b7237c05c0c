"""Which torch `make` installs (backend/doctor/torch_choice.py): the detection on simulated
/sys, /dev and /opt/rocm trees, `amd-smi version`'s real output, the script run with no
site-packages (it runs before anything is installed), and the Makefile's own recipe run by
make with a stand-in for the venv's python that records what pip was asked (nothing is
downloaded)."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from backend.doctor import torch_choice
from backend.doctor.torch_choice import DEFAULT_SPEC, Choice, amd_gpu_evidence, choose, install_command, parse_amd_smi_version

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "backend" / "doctor" / "torch_choice.py"
ROCM72 = ("torch==2.14.1", "torchvision==0.29.1", "--index-url", "https://download.pytorch.org/whl/rocm7.2")

# `amd-smi version` as it prints on real machines (amdsmi 24.7 with no ROCm, 26.2 on ROCm
# 7.2.0, TheRock's 7.12 on a Strix Halo, 26.2 on ROCm 7.1.1), and amdsmi 27's table.
AMD_SMI_7_2 = "AMDSMI Tool: 26.2.1+fc0010cf6a | AMDSMI Library version: 26.2.1 | ROCm version: 7.2.0 | amdgpu version: 6.16.13 | hsmp version: N/A\n"
AMD_SMI_7_1 = "AMDSMI Tool: 26.2.0+021c61fc | AMDSMI Library version: 26.2.0 | ROCm version: 7.1.1 | amdgpu version: 6.16.6 | amd_hsmp version: N/A\n"
AMD_SMI_7_12 = "AMDSMI Tool: 26.3.0+2bd1678d3d | AMDSMI Library version: 26.3.0 | ROCm version: 7.12.0 | amdgpu version: 6.16.13 | hsmp version: N/A\n"
AMD_SMI_NO_ROCM = "AMDSMI Tool: 24.7.1+b446d6c-dirty | AMDSMI Library version: 24.7.2.0 | ROCm version: N/A | amdgpu version: 6.10.10 | hsmp version: 2.2\n"
AMD_SMI_TABLE = (
    "+------------------------------------------------------------------------------+\n"
    "| AMD-SMI            27.0.0+6b0e43f3                                           |\n"
    "| amdgpu Version:    7.1.3.31500000                                            |\n"
    "| ROCm Version:      10.0.0                                                    |\n"
    "| VBIOS Version:     00182096                                                  |\n"
    "+------------------------------------------------------------------------------+\n"
)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def machine(root: Path, gpu: str = "", rocm: str | None = None) -> Path:
    """A simulated machine under `root`: gpu "drm" (a DRM card of vendor 0x1002), "pci-display"
    (an MI250-like display controller), "pci-accel" (an MI300X-like accelerator), "kfd" (only
    /dev/kfd), "nvidia", "amd-audio" (only a Radeon's HDMI audio function), or "" (none);
    `rocm` the text of /opt/rocm/.info/version."""
    (root / "sys" / "class").mkdir(parents=True, exist_ok=True)
    (root / "dev").mkdir(parents=True, exist_ok=True)
    pci = root / "sys" / "bus" / "pci" / "devices"
    write(pci / "0000:00:00.0" / "vendor", "0x8086\n")  # the host bridge every machine has
    write(pci / "0000:00:00.0" / "class", "0x060000\n")
    if gpu == "drm":
        write(root / "sys" / "class" / "drm" / "card1" / "device" / "vendor", "0x1002\n")
        (root / "sys" / "class" / "drm" / "card1-DP-1").mkdir(parents=True)
    elif gpu in ("pci-display", "pci-accel", "nvidia", "amd-audio"):
        vendor, pci_class = {"pci-display": ("0x1002", "0x038000"), "pci-accel": ("0x1002", "0x120000"), "nvidia": ("0x10de", "0x030000"), "amd-audio": ("0x1002", "0x040300")}[gpu]
        write(pci / "0000:c1:00.0" / "vendor", vendor + "\n")
        write(pci / "0000:c1:00.0" / "class", pci_class + "\n")
    elif gpu == "kfd":
        (root / "dev" / "kfd").touch()
    if rocm is not None:
        write(root / "opt" / "rocm" / ".info" / "version", rocm)
    return root


def choose_on(root: Path, env: dict[str, str] | None = None, amd_smi: str | None = None) -> Choice:
    return choose(env or {}, root / "sys", root / "dev", root / "opt" / "rocm", amd_smi=lambda: amd_smi)


# --- detection ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpu", "evidence"),
    [
        ("drm", "/sys/class/drm/card1/device/vendor = 0x1002"),
        ("pci-display", "/sys/bus/pci/devices/0000:c1:00.0 (vendor 0x1002, class 0x038000)"),
        ("pci-accel", "/sys/bus/pci/devices/0000:c1:00.0 (vendor 0x1002, class 0x120000)"),
        ("kfd", "/dev/kfd"),
        ("nvidia", None),
        ("amd-audio", None),  # a Radeon's HDMI audio alone is no GPU to train on
        ("", None),
    ],
)
def test_an_amd_gpu_is_found_by_its_vendor_and_class_or_by_dev_kfd(tmp_path: Path, gpu: str, evidence: str | None) -> None:
    root = machine(tmp_path, gpu)
    assert amd_gpu_evidence(root / "sys", root / "dev") == evidence


def test_without_an_amd_gpu_the_default_spec_is_installed_and_it_is_the_makefiles(tmp_path: Path) -> None:
    for gpu in ("", "nvidia", "amd-audio"):
        choice = choose_on(machine(tmp_path / (gpu or "none"), gpu, rocm="7.2.0"), amd_smi=AMD_SMI_7_2)
        assert choice.pip_args == ("torch==2.14.1", "torchvision==0.29.1") and choice.gpu is None
    makefile = (ROOT / "Makefile").read_text()
    default = re.search(r"^TORCH_SPEC \?= (.+)$", makefile, re.M)
    assert default is not None and default.group(1) == DEFAULT_SPEC


# --- the ROCm version and its index ------------------------------------------------------------


@pytest.mark.parametrize(
    ("version_file", "amd_smi", "rocm", "source"),
    [
        ("7.2.0-43\n", None, "7.2.0-43", "/opt/rocm/.info/version"),
        ("7.2.1\n", AMD_SMI_7_1, "7.2.1", "/opt/rocm/.info/version"),  # the file first, amd-smi not asked
        (None, AMD_SMI_7_2, "7.2.0", "amd-smi version"),
        ("garbage\n", AMD_SMI_7_2, "7.2.0", "amd-smi version"),
        (None, AMD_SMI_7_12, "7.12.0", "amd-smi version"),  # newer than every index: the newest below
        (None, AMD_SMI_TABLE, "10.0.0", "amd-smi version"),
    ],
)
def test_an_amd_box_gets_the_rocm_wheels_for_the_rocm_it_has(tmp_path: Path, version_file: str | None, amd_smi: str | None, rocm: str, source: str) -> None:
    choice = choose_on(machine(tmp_path, "drm", rocm=version_file), amd_smi=amd_smi)
    assert choice.pip_args == ROCM72
    assert (choice.rocm, (choice.rocm_source or "").replace(str(tmp_path), "")) == (rocm, source)
    assert choice.index_url == "https://download.pytorch.org/whl/rocm7.2"
    assert ("newest below it" in choice.reason) == (not rocm.startswith("7.2"))


def test_torch_rocm_given_wins_even_without_a_gpu(tmp_path: Path) -> None:
    choice = choose_on(machine(tmp_path, "", rocm="6.4.1"), env={"TORCH_ROCM": "7.2"})
    assert choice.pip_args == ROCM72 and choice.rocm_source == "TORCH_ROCM"
    assert install_command(choice, "/venv/bin/python") == (
        "/venv/bin/python -m pip install --force-reinstall torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/rocm7.2"
    )


@pytest.mark.parametrize(
    ("env", "version_file", "amd_smi", "said", "command"),
    [
        ({}, None, None, "is not installed or failed", "TORCH_ROCM=7.2 make run"),
        ({}, None, AMD_SMI_NO_ROCM, "named no ROCm version", "TORCH_ROCM=7.2 make run"),
        ({}, "6.4.1-120\n", None, "ROCm 6.4.1-120 (", "upgrade ROCm to 7.2 or later, or try the wheels on this one: TORCH_ROCM=7.2 make run"),
        ({}, None, AMD_SMI_7_1, "ROCm 7.1.1 (amd-smi version) is older", "TORCH_ROCM=7.2 make run"),
        ({"TORCH_ROCM": "latest"}, "7.2.0", None, "TORCH_ROCM='latest' is not a ROCm version", "TORCH_ROCM=7.2 make run"),
    ],
)
def test_where_it_cannot_be_decided_it_stops_with_the_command(tmp_path: Path, env: dict[str, str], version_file: str | None, amd_smi: str | None, said: str, command: str) -> None:
    choice = choose_on(machine(tmp_path, "kfd", rocm=version_file), env=env, amd_smi=amd_smi)
    assert choice.stopped and choice.pip_args == () and install_command(choice) == ""
    assert said in choice.reason and command in choice.command
    if not env:  # an AMD APU whose owner wants only the CPU demo is told how, too
        assert "for the CPU demo only: TORCH_SPEC='torch==2.14.1 torchvision==0.29.1' make run" in choice.command


@pytest.mark.parametrize(
    ("output", "version"),
    [(AMD_SMI_7_2, "7.2.0"), (AMD_SMI_7_1, "7.1.1"), (AMD_SMI_7_12, "7.12.0"), (AMD_SMI_TABLE, "10.0.0"), (AMD_SMI_NO_ROCM, None), ("amd-smi: command failed\n", None), ("", None)],
)
def test_amd_smi_version_is_read_from_its_real_output(output: str, version: str | None) -> None:
    assert parse_amd_smi_version(output) == version


def test_index_for_takes_the_newest_index_not_above_the_version() -> None:
    indexes = {(6, 4): "i64", (7, 0): "i70", (7, 2): "i72"}
    assert [torch_choice.index_for(v, indexes) for v in [(6, 3), (6, 4), (7, 1), (7, 2), (7, 12), (10, 0)]] == [None, "i64", "i70", "i72", "i72", "i72"]


# --- the script, before anything is installed -------------------------------------------------


def run_script(root: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # -S: no site-packages (no pyyaml, no torch), as on a machine where nothing is installed yet
    clean = {"PATH": os.environ.get("PATH", ""), **(env or {})}
    return subprocess.run([sys.executable, "-S", str(SCRIPT), "--root", str(root)], capture_output=True, text=True, timeout=30, env=clean, cwd=root)


def test_the_script_prints_the_pip_arguments_using_the_standard_library_only(tmp_path: Path) -> None:
    done = run_script(machine(tmp_path, "pci-accel", rocm="7.2.0\n"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == " ".join(ROCM72) + "\n"
    assert "ROCm 7.2.0 (" in done.stderr and "/opt/rocm/.info/version)" in done.stderr


def test_the_script_stops_with_exit_2_and_the_command_on_stderr(tmp_path: Path) -> None:
    done = run_script(machine(tmp_path, "drm", rocm="6.3.0\n"))
    assert (done.returncode, done.stdout) == (2, "")
    assert "ROCm 6.3.0" in done.stderr and "Run: upgrade ROCm to 7.2 or later, or try the wheels on this one: TORCH_ROCM=7.2 make run" in done.stderr


# --- the Makefile's recipe, run by make -------------------------------------------------------

FAKE_PYTHON = """#!/bin/bash
# the venv's python with no torch: pip only records what it was asked; torch_choice.py runs for
# real, on the simulated machine
case "$1" in
  -c) exit 1 ;;
  -m) shift; shift; echo "pip $*" >> "$PIP_LOG"; exit 0 ;;
  backend/doctor/torch_choice.py) shift; exec "$REAL_PYTHON" -S backend/doctor/torch_choice.py "$@" --root "$SIM_ROOT" ;;
esac
exit 3
"""


def run_make(tmp_path: Path, sim_root: Path, *make_args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "pip.log"
    run_env = {"PATH": os.environ.get("PATH", ""), "PIP_LOG": str(log), "REAL_PYTHON": sys.executable, "SIM_ROOT": str(sim_root), **(env or {})}
    done = subprocess.run(["make", "--no-print-directory", f"VENV={venv}", *make_args, f"{venv}/.deps"], cwd=ROOT, capture_output=True, text=True, timeout=60, env=run_env)
    return done, (log.read_text().splitlines() if log.exists() else [])


needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


@needs_make
def test_make_on_this_kind_of_machine_installs_the_default_torch_as_before(tmp_path: Path) -> None:
    done, pip = run_make(tmp_path, machine(tmp_path / "m", ""))
    assert done.returncode == 0, done.stderr
    assert pip == ["pip install torch==2.14.1 torchvision==0.29.1", "pip install -r requirements.txt", "pip install --no-deps -e ."]
    assert (tmp_path / "venv" / ".deps").exists()


@needs_make
def test_make_on_an_amd_box_installs_from_the_rocm_index(tmp_path: Path) -> None:
    done, pip = run_make(tmp_path, machine(tmp_path / "m", "drm"), env={"TORCH_ROCM": "7.2"})
    assert done.returncode == 0, done.stderr
    assert pip[0] == "pip install " + " ".join(ROCM72) and pip[1:] == ["pip install -r requirements.txt", "pip install --no-deps -e ."]


@needs_make
def test_make_stops_before_installing_anything_when_it_cannot_decide(tmp_path: Path) -> None:
    done, pip = run_make(tmp_path, machine(tmp_path / "m", "kfd", rocm="6.4.0\n"))
    assert done.returncode != 0 and pip == []
    assert "TORCH_ROCM=7.2 make run" in done.stderr and not (tmp_path / "venv" / ".deps").exists()


@needs_make
def test_torch_spec_given_is_installed_as_it_is(tmp_path: Path) -> None:
    done, pip = run_make(tmp_path, machine(tmp_path / "m", "kfd"), "TORCH_SPEC=torch==2.14.1+rocm7.2 --index-url https://example.invalid/whl")
    assert done.returncode == 0, done.stderr
    assert pip[0] == "pip install torch==2.14.1+rocm7.2 --index-url https://example.invalid/whl"
