"""The doctor's facts that need torch, gathered in a subprocess: `python -m backend.doctor.probe`.

The web process never imports torch (slow to import, and a broken ROCm install can hang or
crash in it). This script imports torch, asks it what it was built for and which GPUs it sees,
imports bitsandbytes and flash_attn (whose backends only show at import), and prints one
line: MARKER followed by a JSON object. Libraries print banners and warnings on stdout, so the
reader takes the marked line, not the whole output.

Only the standard library and the probed packages are imported here.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
from typing import Any

MARKER = "ROCBOARD_DOCTOR_PROBE "


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()[:500]


def installed_version(distribution: str) -> str | None:
    """The installed version of a distribution, from its metadata (nothing is imported)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def probe_torch() -> dict[str, Any]:
    try:
        import torch
    except Exception as exc:  # a broken install is a fact to report, not a crash
        return {"import_error": _error(exc)}
    facts: dict[str, Any] = {
        "version": torch.__version__,
        "hip_version": getattr(torch.version, "hip", None),
        "cuda_version": getattr(torch.version, "cuda", None),
        "arch_list": [],
        "gpus": [],
        "device_error": None,
        "bf16_reported": None,
    }
    try:
        facts["arch_list"] = list(torch.cuda.get_arch_list())
    except Exception:
        pass
    try:  # the NCCL (on ROCm: RCCL) torch was built with; a CPU-only build has none
        nccl = torch.cuda.nccl.version()
        facts["nccl_version"] = ".".join(str(part) for part in nccl) if isinstance(nccl, tuple) else str(nccl)
    except Exception:
        facts["nccl_version"] = None
    try:
        count = torch.cuda.device_count()
        for index in range(count):
            props = torch.cuda.get_device_properties(index)
            facts["gpus"].append(
                {
                    "index": index,
                    "name": props.name,
                    "gfx_target": getattr(props, "gcnArchName", None) or None,
                    "total_memory_bytes": int(props.total_memory),
                }
            )
        if count:
            # on ROCm this says True even on RDNA2, which has no bf16: recorded, not trusted
            facts["bf16_reported"] = bool(torch.cuda.is_bf16_supported())
        elif facts["hip_version"] or facts["cuda_version"]:
            torch.cuda.init()  # raises with the runtime's own reason ("No HIP GPUs are available")
    except Exception as exc:
        facts["device_error"] = _error(exc)
    return facts


def probe_bitsandbytes() -> dict[str, Any]:
    facts: dict[str, Any] = {"version": installed_version("bitsandbytes"), "backend": None, "error": None}
    if facts["version"] is None:
        return facts
    try:
        import bitsandbytes  # noqa: F401 - importing it is the check
        from bitsandbytes import cextension

        facts["backend"] = getattr(cextension, "BNB_BACKEND", None)
        lib = getattr(cextension, "lib", None)
        # a failed native load leaves a stand-in object (or None) instead of the library
        if lib is None or "ErrorHandler" in type(lib).__name__ or "Mock" in type(lib).__name__:
            facts["error"] = "the native bitsandbytes library did not load"
    except Exception as exc:
        facts["error"] = _error(exc)
    return facts


def probe_flash_attn() -> dict[str, Any]:
    facts: dict[str, Any] = {"version": installed_version("flash_attn") or installed_version("flash-attn"), "backend": None, "error": None}
    if facts["version"] is None:
        return facts
    try:
        import flash_attn  # noqa: F401 - importing it is the check
        import torch

        if getattr(torch.version, "hip", None):
            triton = os.environ.get("FLASH_ATTENTION_TRITON_AMD_ENABLE", "").upper() == "TRUE"
            facts["backend"] = "ROCm (Triton)" if triton else "ROCm (CK)"
        elif getattr(torch.version, "cuda", None):
            facts["backend"] = "CUDA"
    except Exception as exc:
        facts["error"] = _error(exc)
    return facts


def probe() -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "torch": probe_torch(),
        "bitsandbytes": probe_bitsandbytes(),
        "flash_attn": probe_flash_attn(),
    }


def main() -> int:
    facts = probe()
    sys.stdout.flush()
    print(MARKER + json.dumps(facts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
