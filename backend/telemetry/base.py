"""What every telemetry source returns: typed readings, `None` for what is unknown.

Two tiers of failure (after nvitop): a source that cannot work on this machine at all
(tool missing, no driver) says so once, with a hint the user can act on; one field that
fails on one tick is `None` in that reading and never raises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Reading:
    """One sample of one GPU (or of the training process, for CPU runs)."""

    gpu: int  # index as the run sees it (after ROCR/HIP_VISIBLE_DEVICES); 0 for process memory
    used_bytes: int | None
    total_bytes: int | None
    util_pct: float | None
    temp_c: float | None
    power_w: float | None
    source: str  # "sysfs", "amd-smi", "rocm-smi", "nvidia-smi", "process"
    at: float  # time.time() of the sample
    label: str = ""  # what the line on the chart is called, e.g. "GPU 0 (gfx1100)"
    # The node it was read on, for a run on several machines (a Slurm job's node name, written
    # by that node's own sampler); "" on this machine.
    node: str = ""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if not self.node:
            del data["node"]  # a reading of this machine is written as before nodes existed
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Reading:
        values: dict[str, Any] = {k: data.get(k) for k in cls.__dataclass_fields__}
        values["node"] = str(values["node"] or "")[:64]
        return cls(**values)


@dataclass(frozen=True)
class SourceStatus:
    """Whether a source works on this machine, and if not, what the user can do."""

    name: str
    available: bool
    # Where the words are RocBoard's, a backend.i18n Message (`telemetry.*`: a str in English,
    # rendered in the page's language by the Doctor); a tool's own line is kept as it printed it.
    detail: str = ""  # what was seen, e.g. "Driver not initialized (amdgpu not found in modules)"
    hint: str = ""  # what to do, e.g. "Add your user to the render and video groups"


class Source(Protocol):
    """A telemetry source. `probe` runs once; `read` runs every tick and never raises."""

    name: str

    def probe(self) -> SourceStatus: ...

    def read(self) -> list[Reading]: ...


# The process-memory source needs to know which process tree to measure.
PidProvider = Callable[[], "int | None"]
