"""Which torch to install on this machine: `python3 backend/doctor/torch_choice.py`.

It runs before anything is installed (the Makefile's `$(VENV)/.deps` recipe, when no torch is
importable), so only the standard library is used, and it is run as a file, not as
`-m backend.doctor.torch_choice` (that would import backend/doctor/__init__.py and its
dependencies). The doctor imports it too, to name the same command for a CUDA torch found on
an AMD box.

The decision:
- `TORCH_ROCM` given (e.g. "7.2"): the ROCm wheels for that version, GPU or not (a login node
  without a GPU may build the environment for its compute nodes).
- an AMD GPU present (PCI vendor 0x1002 on a DRM card or on a display / accelerator PCI
  device, or /dev/kfd): the ROCm version from /opt/rocm/.info/version, else from
  `amd-smi version` ("... | ROCm version: 7.2.0 | ..."), mapped to PyTorch's ROCm wheel index;
  where it cannot be told, or no index fits, it stops with the command to run.
- no AMD GPU: DEFAULT_SPEC from the default index, as before (a CUDA build that also runs on
  the CPU).

The ROCm wheel indexes for torch 2.14.x (ROCM_INDEXES): download.pytorch.org/whl/rocm7.2.
PyTorch publishes each release for a few ROCm versions; 7.2 is the one this project found
published for torch 2.14 (`2.14.0+rocm7.2`). A newer ROCm than the newest index (7.12, 10.0,
...) gets the newest index below it: the wheels carry their own ROCm user-space libraries and
need only the amdgpu kernel driver. An older ROCm stops: the driver may be too old for them.
When PyTorch adds an index, add it to ROCM_INDEXES.

Output: the pip arguments on one line on stdout (the Makefile passes them to `pip install`),
the reason on stderr; exit 0. Where nothing can be decided: the message and the command to
run on stderr, exit 2. These words are English only: they print before the app's own
message catalogue (backend/i18n, which needs pyyaml) is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

TORCH_VERSION = "2.14.1"
TORCHVISION_VERSION = "0.29.1"
DEFAULT_SPEC = f"torch=={TORCH_VERSION} torchvision=={TORCHVISION_VERSION}"
INDEX_BASE = "https://download.pytorch.org/whl/rocm"
# ROCm (major, minor) -> PyTorch's wheel index holding torch TORCH_VERSION for it.
ROCM_INDEXES: dict[tuple[int, int], str] = {(7, 2): f"{INDEX_BASE}7.2"}
AMD_VENDOR_ID = "0x1002"
# PCI classes of a GPU: display controllers (0x03xxxx; Radeon, MI100-MI250) and processing
# accelerators (0x12xxxx; MI300 and later show as "Processing accelerators").
GPU_CLASS_PREFIXES = ("0x03", "0x12")
AMD_SMI_TIMEOUT_S = 10.0
MAX_READ = 4096  # a version file or amd-smi's answer: a line, never more than this is read
# "ROCm version: 7.2.0" (the one-line `amd-smi version` of amdsmi 24-26) or the table's
# "| ROCm Version:      10.0.0    |" (amdsmi 27); "N/A" when amd-smi found no ROCm.
AMD_SMI_ROCM = re.compile(r"ROCm version:\s*([0-9]+(?:\.[0-9]+)*|N/A)", re.IGNORECASE)
VERSION = re.compile(r"^\s*([0-9]+)\.([0-9]+)")
STOP = 2


@dataclass(frozen=True)
class Choice:
    """What to install. `pip_args` empty: nothing can be decided, `message` says why and
    `command` what to run instead."""

    pip_args: tuple[str, ...]
    reason: str  # why this install (or why none), in one sentence
    gpu: str | None = None  # the evidence of an AMD GPU ("/dev/kfd", a sysfs vendor file), None: none
    rocm: str | None = None  # the ROCm version found or given ("7.2.0")
    rocm_source: str | None = None  # where it was found: TORCH_ROCM, /opt/rocm/.info/version, amd-smi version
    index_url: str | None = None  # the ROCm wheel index chosen
    command: str = ""  # when stopped: what to run

    @property
    def stopped(self) -> bool:
        return not self.pip_args


def _read(path: Path) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(MAX_READ)
    except OSError:
        return None


def amd_gpu_evidence(sys_root: Path = Path("/sys"), dev_root: Path = Path("/dev")) -> str | None:
    """Where an AMD GPU shows ("/sys/class/drm/card0/device/vendor = 0x1002", "/dev/kfd"),
    None when none does. The paths named are the real ones, whatever the roots."""
    cards = sorted((sys_root / "class" / "drm").glob("card*"))
    for card in cards:
        if not re.fullmatch(r"card[0-9]+", card.name):
            continue  # card0-DP-1 and the like are connectors
        vendor = _read(card / "device" / "vendor")
        if vendor is not None and vendor.strip().lower() == AMD_VENDOR_ID:
            return f"/sys/class/drm/{card.name}/device/vendor = {AMD_VENDOR_ID}"
    for device in sorted((sys_root / "bus" / "pci" / "devices").glob("*")):
        vendor, pci_class = _read(device / "vendor"), _read(device / "class")
        if vendor is None or pci_class is None:
            continue
        if vendor.strip().lower() == AMD_VENDOR_ID and pci_class.strip().lower().startswith(GPU_CLASS_PREFIXES):
            return f"/sys/bus/pci/devices/{device.name} (vendor {AMD_VENDOR_ID}, class {pci_class.strip()})"
    if os.path.lexists(dev_root / "kfd"):
        return "/dev/kfd"
    return None


def parse_version(text: str | None) -> tuple[int, int] | None:
    """"7.2.0", "6.4.1-120", "7.12.0" -> (major, minor); None for anything else."""
    found = VERSION.match(text or "")
    return (int(found.group(1)), int(found.group(2))) if found else None


def parse_amd_smi_version(output: str) -> str | None:
    """The ROCm version in `amd-smi version`'s output ("AMDSMI Tool: 26.2.1+fc0010cf6a |
    AMDSMI Library version: 26.2.1 | ROCm version: 7.2.0 | amdgpu version: 6.16.13 | hsmp
    version: N/A"); None when it says "N/A" or has no such field."""
    found = AMD_SMI_ROCM.search(output)
    if found is None or found.group(1).upper() == "N/A":
        return None
    return found.group(1)


def run_amd_smi(env: Mapping[str, str] = os.environ, timeout_s: float = AMD_SMI_TIMEOUT_S) -> str | None:
    """`amd-smi version`'s output, None when it is not installed, fails or hangs."""
    tool = shutil.which("amd-smi", path=env.get("PATH", os.defpath)) or ("/opt/rocm/bin/amd-smi" if os.access("/opt/rocm/bin/amd-smi", os.X_OK) else None)
    if tool is None:
        return None
    try:
        done = subprocess.run([tool, "version"], capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout[:MAX_READ] if done.returncode == 0 else None


def index_for(version: tuple[int, int], indexes: Mapping[tuple[int, int], str] = ROCM_INDEXES) -> str | None:
    """The index for `version`: its own, else the newest one below it; None when every
    index is for a newer ROCm."""
    below = [known for known in indexes if known <= version]
    return indexes[max(below)] if below else None


def _shown(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def rocm_pip_args(index_url: str) -> tuple[str, ...]:
    return (f"torch=={TORCH_VERSION}", f"torchvision=={TORCHVISION_VERSION}", "--index-url", index_url)


def choose(
    env: Mapping[str, str] = os.environ,
    sys_root: Path = Path("/sys"),
    dev_root: Path = Path("/dev"),
    rocm_root: Path = Path("/opt/rocm"),
    amd_smi: Callable[[], str | None] | None = None,
    indexes: Mapping[tuple[int, int], str] = ROCM_INDEXES,
) -> Choice:
    """What to install on the machine under these roots (tests give simulated trees and an
    `amd_smi` that returns a recorded output)."""
    newest = _shown(max(indexes))
    go_ahead = f"TORCH_ROCM={newest} make run"
    # an AMD APU or a card without ROCm whose owner wants only the CPU demo: today's install
    cpu_only = f"for the CPU demo only: TORCH_SPEC='{DEFAULT_SPEC}' make run"
    given = env.get("TORCH_ROCM", "").strip()
    gpu = amd_gpu_evidence(sys_root, dev_root)
    if given:
        version = parse_version(given)
        if version is None:
            return Choice((), f"TORCH_ROCM={given!r} is not a ROCm version such as {newest}.", gpu, given, "TORCH_ROCM", command=go_ahead)
        return _for_version(version, given, "TORCH_ROCM", gpu, indexes, cpu_only)
    if gpu is None:
        return Choice(tuple(DEFAULT_SPEC.split()), "No AMD GPU found (no sysfs vendor 0x1002, no /dev/kfd): the default torch build.")
    info = rocm_root / ".info" / "version"
    text = _read(info)
    if text is not None and parse_version(text) is not None:
        return _for_version(parse_version(text) or (0, 0), text.strip(), f"{rocm_root}/.info/version", gpu, indexes, cpu_only)
    output = (amd_smi or (lambda: run_amd_smi(env)))()
    found = parse_amd_smi_version(output) if output else None
    if found is not None and parse_version(found) is not None:
        return _for_version(parse_version(found) or (0, 0), found, "amd-smi version", gpu, indexes, cpu_only)
    why = f"{info} is missing or unreadable, and `amd-smi version` " + ("named no ROCm version" if output else "is not installed or failed")
    return Choice(
        (),
        f"An AMD GPU is here ({gpu}) but its ROCm version cannot be told: {why}. Installing the default torch "
        "would give a CUDA build that cannot use it.",
        gpu,
        command=f"{go_ahead}   (or install ROCm first: https://rocm.docs.amd.com; {cpu_only})",
    )


def _for_version(version: tuple[int, int], shown: str, source: str, gpu: str | None, indexes: Mapping[tuple[int, int], str], cpu_only: str) -> Choice:
    index = index_for(version, indexes)
    if index is None:
        oldest = _shown(min(indexes))
        return Choice(
            (),
            f"ROCm {shown} ({source}) is older than every ROCm that torch {TORCH_VERSION} has wheels for "
            f"({', '.join(_shown(v) for v in sorted(indexes))}): its driver may be too old for them.",
            gpu,
            shown,
            source,
            command=f"upgrade ROCm to {oldest} or later, or try the wheels on this one: TORCH_ROCM={oldest} make run   ({cpu_only})",
        )
    exact = version in indexes
    note = "" if exact else f" (no index for {_shown(version)}: the newest below it)"
    return Choice(rocm_pip_args(index), f"ROCm {shown} ({source}): torch {TORCH_VERSION} from {index}{note}.", gpu, shown, source, index)


def install_command(choice: Choice, python: str = "python") -> str:
    """The shell command that installs `choice` (for a message), "" when it stopped."""
    return f"{python} -m pip install --force-reinstall {' '.join(choice.pip_args)}" if choice.pip_args else ""


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    root = Path(args[args.index("--root") + 1]) if "--root" in args else Path("/")  # the tests' simulated machine
    choice = choose(os.environ, root / "sys", root / "dev", root / "opt" / "rocm")
    if choice.stopped:
        print(f"torch: {choice.reason}\n  Run: {choice.command}", file=sys.stderr)
        return STOP
    print(f"torch: {choice.reason}", file=sys.stderr)
    print(" ".join(choice.pip_args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
