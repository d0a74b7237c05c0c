"""GPU telemetry for RocBoard: one module per source (sysfs, amd-smi, rocm-smi, nvidia-smi,
process memory), each a pure parser plus a thin reader; `detect_sources` picks the
cheapest that works; one `Sampler` per app caches readings and writes them to the run.

Light on purpose: it runs inside the web process and imports no gradio, torch or transformers.
"""

from backend.telemetry.base import Reading, Source, SourceStatus
from backend.telemetry.sampler import Sampler, read_samples

__all__ = ["Reading", "Sampler", "Source", "SourceStatus", "read_samples"]
