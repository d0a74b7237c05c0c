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

The data fingerprint of a run (`record_data_fingerprint(run_dir)`): the hash of its tokenized
training examples, computed by LLaMA-Factory's own preprocessing in the helper process
(backend/data/lengths.py fingerprint_dataset; which bytes are hashed: lengths_worker.py's
doc) with the run's saved model, template, datasets, cutoff_len and max_samples; kept in the
run as DATA_FINGERPRINT_FILE (written atomically, read without following a link) and shown on
the run panel (`read_data_fingerprint`). A run of several datasets: sha256 over
"<name>\t<digest>\n" of each, in the run's order. Stages other than sft and pt (pairs: dpo,
kto, rm) are not fingerprinted: the helper encodes single examples only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import re
import subprocess
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.doctor.probe import installed_version
from backend.findings import Finding
from backend.runs import safe_files
from backend.security.child_env import child_env

if TYPE_CHECKING:
    from backend.config.presets import HardwarePreset

log = logging.getLogger(__name__)

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
DATA_FINGERPRINT_FILE = "data_fingerprint.json"
DATA_FINGERPRINT = re.compile(r"sha256:[0-9a-f]{64}")
DATA_FINGERPRINT_MAX_BYTES = 64 * 1024
FINGERPRINT_STAGES = ("sft", "pt")
RUN_FINGERPRINT_EXAMPLES = 10_000  # what a started run hashes (record_in_background)
SET_HEADER = b"rocboard-data-fingerprint-set-v1\n"
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


# --- the data fingerprint of a run ---------------------------------------------------------------


def combine_fingerprints(parts: list[tuple[str, str]]) -> str:
    """One dataset: its own digest; several: sha256 over SET_HEADER and "<name>\t<digest>\n"
    of each, in the run's order."""
    if len(parts) == 1:
        return parts[0][1]
    digest = hashlib.sha256(SET_HEADER)
    for name, part in parts:
        digest.update(f"{name}\t{part}\n".encode())
    return "sha256:" + digest.hexdigest()


def record_data_fingerprint(
    run_dir: Path, timeout_s: float = 300, max_examples: int | None = None, helper_only: bool = False
) -> tuple[str | None, list[Finding]]:
    """Computes the run's data fingerprint (in the helper process) and keeps it in the run;
    (digest, []) or (None, why not: findings of backend/data/lengths.py). A stage the helper
    cannot encode gives (None, []), and so does `helper_only` without the app's warm helper.
    The examples hashed: the run's max_samples, at most `max_examples` (the worker's limit)."""
    from backend.config.run_form import read_saved_run
    from backend.data.lengths import MAX_EXAMPLES_LIMIT, fingerprint_dataset

    config = read_saved_run(Path(run_dir)).config
    stage = config.method.stage
    if stage not in FINGERPRINT_STAGES or not config.data.datasets:
        return None, []
    limit = min(config.data.max_samples or MAX_EXAMPLES_LIMIT, max_examples or MAX_EXAMPLES_LIMIT, MAX_EXAMPLES_LIMIT)
    parts: list[tuple[str, str]] = []
    examples = 0
    seconds = 0.0
    for name in config.data.datasets:
        found, findings = fingerprint_dataset(
            config.model.model_name_or_path, config.model.template, config.data.dataset_dir, name, config.data.cutoff_len, stage, limit, timeout_s, helper_only
        )
        if found is None:
            return None, findings
        parts.append((name, found.digest))
        examples += found.examples
        seconds += found.seconds
    digest = combine_fingerprints(parts)
    record = {
        "fingerprint": digest,
        "examples": examples,
        "datasets": [{"name": name, "fingerprint": part} for name, part in parts],
        "cutoff_len": config.data.cutoff_len,
        "stage": stage,
        "seconds": round(seconds, 3),
    }
    safe_files.write_atomic(Path(run_dir), DATA_FINGERPRINT_FILE, json.dumps(record, indent=1).encode("utf-8"))
    return digest, []


def record_in_background(run_dir: Path) -> threading.Thread:
    """record_data_fingerprint for a run that just started, in a daemon thread, through the
    app's warm helper only (RunManager.launch): the first RUN_FINGERPRINT_EXAMPLES examples,
    so a large dataset costs the helper seconds, not the minutes the trainer's own
    preprocessing takes. Failures are logged, never raised (nothing waits for it)."""

    def work() -> None:
        try:
            record_data_fingerprint(run_dir, max_examples=RUN_FINGERPRINT_EXAMPLES, helper_only=True)
        except Exception:  # a run deleted meanwhile, a helper that went: the run trains on
            log.info("no data fingerprint for %s", run_dir, exc_info=True)

    thread = threading.Thread(target=work, name=f"data-fingerprint-{Path(run_dir).name}", daemon=True)
    thread.start()
    return thread


def path_data_fingerprint(run_dirs: list[Path]) -> str | None:
    """The data fingerprint a validation report shows: that of the first of its runs that has
    one, recorded now (helper, else the one-shot worker) when none was; None when no run can
    be fingerprinted. Every rung trains on the same data, so one stands for all."""
    for run_dir in run_dirs:
        digest = read_data_fingerprint(run_dir)
        if digest is not None:
            return digest
    for run_dir in run_dirs[:1]:
        try:
            return record_data_fingerprint(run_dir)[0]
        except (OSError, ValueError):
            return None
    return None


def read_data_fingerprint(run_dir: Path) -> str | None:
    """The run's recorded data fingerprint; None when there is none (or the file is a link,
    too large, or not one RocBoard wrote)."""
    try:
        data = json.loads(safe_files.read_bytes(Path(run_dir), DATA_FINGERPRINT_FILE, DATA_FINGERPRINT_MAX_BYTES))
    except (OSError, ValueError, RecursionError):
        return None
    digest = data.get("fingerprint") if isinstance(data, dict) else None
    return digest if isinstance(digest, str) and DATA_FINGERPRINT.fullmatch(digest) else None


__all__ = [
    "ABSENT",
    "DATA_FINGERPRINT_FILE",
    "PACKAGES",
    "combine_fingerprints",
    "hip_version",
    "machine_fingerprint",
    "package_versions",
    "path_data_fingerprint",
    "read_data_fingerprint",
    "record_data_fingerprint",
    "record_in_background",
]
