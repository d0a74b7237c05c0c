"""nvidia-smi, for the odd NVIDIA machine (the app is for AMD, but the chart should not be blank).

`nvidia-smi --query-gpu=index,memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw
--format=csv,noheader,nounits` prints one line per GPU, memory in MiB; a field the GPU
cannot report reads "[N/A]" or "[Not Supported]". Only CUDA_VISIBLE_DEVICES (by index)
is applied; the run's numbering is nvidia-smi's when it is unset.

Which NVIDIA GPUs the machine has (the node's slots where there are no AMD ones:
backend/runs/gpu_slots.py `node_gpus`) is read from the driver's /proc/driver/nvidia/gpus/
instead: one folder per GPU, named by its PCI address, whose `information` file says its UUID
and whether it is excluded. No process to start or wait for; a container's runtime shows only
the GPUs given to it there. nvidia-smi and CUDA number the GPUs in PCI order (CUDA's own
"fastest first" order is the same on a node of one model), so the folders sorted by address
are the GPUs' indices.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from backend.i18n import Message
from backend.telemetry.base import Reading, SourceStatus
from backend.telemetry.command import CommandSource
from backend.telemetry.tool import ToolOutput
from backend.telemetry.topology import CardIdentity, apply_visible_devices, to_run_indices

NVIDIA_GPUS_DIR = Path("/proc/driver/nvidia/gpus")
NVIDIA_GPUS_MAX = 256  # folders looked at (a node has at most 64 GPUs: gpu_slots.MAX_GPUS)
INFORMATION_MAX_BYTES = 4096  # an `information` file is ~400 bytes
_PCI_ADDRESS = re.compile(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")

NVIDIA_SMI_ARGS = [
    "nvidia-smi",
    "--query-gpu=index,memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw",
    "--format=csv,noheader,nounits",
]
MIB = 1024**2


def _field(text: str) -> float | None:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]", "N/A"


def parse_nvidia_smi(text: str, at: float | None = None) -> list[Reading]:
    """One reading per well-formed CSV line; lines that are not six fields with an integer index are skipped."""
    at = time.time() if at is None else at
    readings = []
    for line in text.splitlines():
        fields = line.split(",")
        if len(fields) != 6 or not fields[0].strip().isdigit():
            continue
        used, total, util, temp, power = (_field(f) for f in fields[1:])
        readings.append(
            Reading(
                gpu=int(fields[0]),
                used_bytes=int(used * MIB) if used is not None else None,
                total_bytes=int(total * MIB) if total is not None else None,
                util_pct=util,
                temp_c=temp,
                power_w=power,
                source="nvidia-smi",
                at=at,
                label=f"gpu{int(fields[0])}",
            )
        )
    return readings


@dataclass(frozen=True)
class NvidiaGpu:
    pci_address: str
    uuid: str | None  # without its "GPU-", lower case (as CUDA_VISIBLE_DEVICES may name it)
    excluded: bool = False  # the driver was told to leave it alone (NVreg_ExcludedGpus)


def parse_nvidia_information(pci_address: str, text: str) -> NvidiaGpu:
    """One GPU from its /proc/driver/nvidia/gpus/<address>/information text ("Key:", tabs,
    the value, a line each: Model, IRQ, GPU UUID, ..., GPU Excluded). Other lines are ignored."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, colon, value = line.partition(":")
        if colon:
            fields.setdefault(key.strip().lower(), value.strip())
    uuid = fields.get("gpu uuid", "")
    return NvidiaGpu(
        pci_address=pci_address.lower(),
        uuid=uuid[4:].lower() if uuid.upper().startswith("GPU-") and len(uuid) > 4 else None,
        excluded=fields.get("gpu excluded", "no").lower().startswith("yes"),
    )


def read_nvidia_gpus(gpus_dir: Path = NVIDIA_GPUS_DIR) -> list[NvidiaGpu]:
    """The NVIDIA GPUs the driver lists under `gpus_dir`, in PCI order (nvidia-smi's and CUDA's
    numbering), excluded ones included (they keep their place); [] without the driver. At most
    NVIDIA_GPUS_MAX folders; a folder whose `information` cannot be read counts, without UUID."""
    try:
        names = sorted(entry.name for entry in islice(Path(gpus_dir).iterdir(), NVIDIA_GPUS_MAX))
    except OSError:
        return []
    gpus = []
    for name in names:
        if not _PCI_ADDRESS.fullmatch(name):
            continue
        try:
            with open(Path(gpus_dir) / name / "information", "rb") as handle:
                text = handle.read(INFORMATION_MAX_BYTES).decode("utf-8", "replace")
        except OSError:
            text = ""
        gpus.append(parse_nvidia_information(name, text))
    return gpus


def visible_nvidia_positions(gpus: list[NvidiaGpu], env: Mapping[str, str]) -> list[int]:
    """The positions (nvidia-smi's indices) of the GPUs a process started with `env` may use:
    its CUDA_VISIBLE_DEVICES applied as CUDA applies it (indices or GPU-<uuid>, up to the first
    entry naming no GPU; empty: none), excluded GPUs left out. A child given one of these
    indices in CUDA_VISIBLE_DEVICES (which replaces its parent's) gets that GPU."""
    kept = apply_visible_devices(len(gpus), env.get("CUDA_VISIBLE_DEVICES"), [g.uuid for g in gpus])
    return [p for p in kept if not gpus[p].excluded]


class NvidiaSmiSource(CommandSource):
    name = "nvidia-smi"
    tool = "nvidia-smi"
    install_hint = Message("telemetry.hint.nvidia_only")

    def argv(self) -> list[str]:
        return list(NVIDIA_SMI_ARGS)

    def parse(self, output: ToolOutput) -> tuple[list[Reading], dict[int, CardIdentity]]:
        return parse_nvidia_smi(output.stdout), {}

    def unavailable(self, output: ToolOutput) -> SourceStatus | None:
        if "NVIDIA-SMI has failed" in output.stdout + output.stderr:
            return SourceStatus(self.name, False, Message("telemetry.nvidia.no_driver"), self.install_hint)
        return None

    def to_run_indices(self, readings: list[Reading], identities: dict[int, CardIdentity]) -> list[Reading]:
        # KFD topology and ROCR/HIP variables are AMD's; CUDA's variable alone decides here.
        cuda_only = {k: v for k, v in self.env.items() if k == "CUDA_VISIBLE_DEVICES"}
        return to_run_indices(readings, {}, None, cuda_only)
