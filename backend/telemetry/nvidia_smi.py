"""nvidia-smi, for the odd NVIDIA machine (the app is for AMD, but the chart should not be blank).

`nvidia-smi --query-gpu=index,memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw
--format=csv,noheader,nounits` prints one line per GPU, memory in MiB; a field the GPU
cannot report reads "[N/A]" or "[Not Supported]". Only CUDA_VISIBLE_DEVICES (by index)
is applied; the run's numbering is nvidia-smi's when it is unset.
"""

from __future__ import annotations

import time

from backend.i18n import Message
from backend.telemetry.base import Reading, SourceStatus
from backend.telemetry.command import CommandSource
from backend.telemetry.tool import ToolOutput
from backend.telemetry.topology import CardIdentity, to_run_indices

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
