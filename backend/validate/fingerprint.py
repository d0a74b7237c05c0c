"""The machine's fingerprint: what a validation report was proved on, as flat text facts.

`machine_fingerprint(preset)` -> {key: text}, every value a string and a missing fact
ABSENT (never an exception), so that two reports compare key by key (report.compare_reports):
- gpu.count, gpu.<i>.name, gpu.<i>.gfx: the GPUs torch sees (the doctor's probe, a helper
  process); gpu.kfd_targets: the gfx targets of the KFD topology (sysfs), sorted;
- driver.amdgpu: the amdgpu module's version (/sys/module/amdgpu/version, a DKMS driver has
  one; the kernel's in-tree driver has none: then `kernel` says which), kernel;
- rocm: /opt/rocm/.info/version; hip: `hipconfig --version` (bounded time), when installed;
- torch, torch.hip, torch.cuda, torch.nccl (RCCL on a ROCm build): from the probe, since the
  web process never imports torch; python;
- the versions of PACKAGES, from their installed metadata (importlib.metadata: nothing imported);
- preset, and env.<NAME> for each variable the preset exports for the trainer.
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.doctor.probe import installed_version
from backend.security.child_env import child_env

if TYPE_CHECKING:
    from backend.config.presets import HardwarePreset

ABSENT = "absent"
# distribution names as pip knows them (the first of several spellings that is installed wins)
PACKAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("llamafactory", ("llamafactory",)),
    ("transformers", ("transformers",)),
    ("accelerate", ("accelerate",)),
    ("peft", ("peft",)),
    ("datasets", ("datasets",)),
    ("flash-attn", ("flash_attn", "flash-attn")),
    ("bitsandbytes", ("bitsandbytes",)),
    ("deepspeed", ("deepspeed",)),
)
HIPCONFIG_TIMEOUT_S = 10
MAX_FACT_CHARS = 200
MAX_GPUS = 64


def _clean(value: Any) -> str:
    """A fact as one bounded line; None or empty is ABSENT."""
    if value is None:
        return ABSENT
    text = " ".join(str(value).split())[:MAX_FACT_CHARS]
    return text or ABSENT


def _read_first_line(path: Path) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return _clean(handle.readline(MAX_FACT_CHARS + 1))
    except OSError:
        return ABSENT


def hip_version(rocm_root: Path = Path("/opt/rocm"), timeout_s: float = HIPCONFIG_TIMEOUT_S) -> str:
    """`hipconfig --version` of the ROCm install (its bin/, else PATH), ABSENT when none
    answers within `timeout_s`."""
    candidates = [rocm_root / "bin" / "hipconfig"]
    for folder in os.environ.get("PATH", "").split(os.pathsep)[:64]:
        if folder:
            candidates.append(Path(folder) / "hipconfig")
    for candidate in candidates:
        if not (candidate.is_file() and os.access(candidate, os.X_OK)):
            continue
        try:
            done = subprocess.run([str(candidate), "--version"], capture_output=True, timeout=timeout_s, env=child_env(), check=False)
        except (OSError, subprocess.TimeoutExpired):
            return ABSENT
        line = done.stdout.decode("utf-8", "replace").strip().splitlines()
        return _clean(line[-1]) if done.returncode == 0 and line else ABSENT
    return ABSENT


def _torch_facts(data: Mapping[str, Any]) -> dict[str, str]:
    torch = data.get("torch") if isinstance(data.get("torch"), dict) else {}
    assert isinstance(torch, dict)
    facts = {
        "python": _clean(data.get("python") or platform.python_version()),
        "torch": _clean(torch.get("version")),
        "torch.hip": _clean(torch.get("hip_version")),
        "torch.cuda": _clean(torch.get("cuda_version")),
        "torch.nccl": _clean(torch.get("nccl_version")),
    }
    gpus = [gpu for gpu in torch.get("gpus") or () if isinstance(gpu, dict)][:MAX_GPUS]
    facts["gpu.count"] = str(len(gpus))
    for index, gpu in enumerate(gpus):
        facts[f"gpu.{index}.name"] = _clean(gpu.get("name"))
        facts[f"gpu.{index}.gfx"] = _clean(gpu.get("gfx_target"))
    return facts


def _kfd_targets(sysfs_root: Path) -> str:
    from backend.telemetry.topology import read_kfd_gpus

    try:
        gpus = read_kfd_gpus(sysfs_root)
    except (OSError, ValueError):
        return ABSENT
    if not gpus:
        return ABSENT
    return _clean(",".join(sorted(gpu.gfx or "unknown" for gpu in gpus)))


def package_versions() -> dict[str, str]:
    found = {}
    for name, spellings in PACKAGES:
        version = next((v for v in (installed_version(s) for s in spellings) if v), None)
        found[name] = _clean(version)
    return found


def machine_fingerprint(
    preset: HardwarePreset | None,
    *,
    probe: Callable[[], dict[str, Any]] | None = None,
    sysfs_root: Path = Path("/sys"),
    rocm_root: Path = Path("/opt/rocm"),
) -> dict[str, str]:
    """The fingerprint of this machine for a path run with `preset` (see the module's doc).
    `probe` is the doctor's torch probe (backend.doctor.run_probe, a subprocess: seconds);
    a probe that fails gives ABSENT torch facts, never an exception."""
    if probe is None:
        from backend.doctor import run_probe

        probe = run_probe
    try:
        data = probe()
    except Exception:  # a probe that cannot run is a machine without torch facts
        data = {}
    facts: dict[str, str] = {}
    facts.update(_torch_facts(data if isinstance(data, dict) else {}))
    facts["gpu.kfd_targets"] = _kfd_targets(Path(sysfs_root))
    facts["driver.amdgpu"] = _read_first_line(Path(sysfs_root) / "module" / "amdgpu" / "version")
    facts["kernel"] = _clean(platform.release())
    facts["rocm"] = _read_first_line(Path(rocm_root) / ".info" / "version")
    facts["hip"] = hip_version(Path(rocm_root))
    facts.update(package_versions())
    facts["preset"] = _clean(preset.id if preset is not None else None)
    for name, value in preset.env if preset is not None else ():
        facts[f"env.{name}"[:100]] = _clean(value)
    return facts


__all__ = ["ABSENT", "PACKAGES", "hip_version", "machine_fingerprint", "package_versions"]
