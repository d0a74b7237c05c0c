"""amd-smi (ROCm 6.x and 7.x): `amd-smi metric --usage --power --temperature --mem-usage --json`.

The layout changed between versions, each with a fixture:
- ROCm 6.0: a list of `{"gpu": 0, "usage": {"gfx_activity": 37}, "mem_usage":
  {"total_vram": 24560, ...}}` with plain integers (memory in MB, which amd-smi computes
  as bytes // 2**20);
- ROCm 6.1 on: every value is `{"value": N, "unit": "MB"}`;
- amd-smi 26+ (ROCm 7): the list is wrapped as `{"gpu_data": [...]}`;
- a field that failed reads "N/A"; Python warnings can precede the JSON on stdout; one
  release printed nothing at all.
amd-smi's `gpu` numbers are its own; `amd-smi list --json` gives each one's PCI address (bdf).
"""

from __future__ import annotations

import re
import time
from typing import Any

from backend.i18n import Message
from backend.telemetry.base import Reading, SourceStatus
from backend.telemetry.command import DRIVER_HINT, GROUPS_HINT, CommandSource, iter_json, tool_said
from backend.telemetry.tool import ToolOutput, run_tool
from backend.telemetry.topology import CardIdentity

AMD_SMI_ARGS = ["amd-smi", "metric", "--usage", "--power", "--temperature", "--mem-usage", "--json"]
AMD_SMI_PLAIN_ARGS = ["amd-smi", "metric", "--json"]  # for releases that name the options differently
AMD_SMI_LIST_ARGS = ["amd-smi", "list", "--json"]

# amd-smi's "MB" is bytes // 2**20 (MiB); units it has printed for memory.
MEMORY_UNITS = {"B": 1, "KB": 1024, "KIB": 1024, "MB": 1024**2, "MIB": 1024**2, "GB": 1024**3, "GIB": 1024**3}
POWER_KEYS = ("socket_power", "current_socket_power", "average_socket_power")
TEMPERATURE_KEYS = ("edge", "hotspot", "mem")


def value_and_unit(field: Any) -> tuple[float | None, str | None]:
    """42 / {"value": 42, "unit": "%"} / "42 %" / "N/A" -> (number or None, unit or None)."""
    if isinstance(field, dict):
        number, _ = value_and_unit(field.get("value"))
        unit = field.get("unit")
        return number, str(unit) if unit is not None else None
    if isinstance(field, bool):
        return None, None
    if isinstance(field, (int, float)):
        return float(field), None
    if isinstance(field, str):
        match = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z%]*)\s*", field)
        if match:
            return float(match.group(1)), match.group(2) or None
    return None, None


def memory_bytes(field: Any) -> int | None:
    number, unit = value_and_unit(field)
    if number is None:
        return None
    return int(number * MEMORY_UNITS.get((unit or "MB").upper(), 1024**2))


def _number(field: Any) -> float | None:
    return value_and_unit(field)[0]


def _first(section: Any, keys: tuple[str, ...]) -> float | None:
    if not isinstance(section, dict):
        return None
    for key in keys:
        number = _number(section.get(key))
        if number is not None:
            return number
    return None


def gpu_entries(data: Any) -> list[dict[str, Any]]:
    """The per-GPU objects, whether bare (ROCm 6) or under "gpu_data" (amd-smi 26+)."""
    if isinstance(data, dict):
        data = data.get("gpu_data", [data] if "gpu" in data else [])
    if not isinstance(data, list):
        return []
    return [entry for entry in data if isinstance(entry, dict) and isinstance(entry.get("gpu"), int)]


def parse_amd_smi_metric(text: str, at: float | None = None) -> list[Reading]:
    """Readings numbered by amd-smi's `gpu`; [] for empty or non-JSON output."""
    at = time.time() if at is None else at
    readings: list[Reading] = []
    seen: set[int] = set()
    for entry in (e for value in iter_json(text) for e in gpu_entries(value)):
        if entry["gpu"] in seen:
            continue  # the same GPU again (the duplicate-output bug): first answer wins
        if not any(k in entry for k in ("mem_usage", "usage", "power", "temperature")):
            continue  # not a metric answer (e.g. `amd-smi list`)
        seen.add(entry["gpu"])
        memory = usage if isinstance(usage := entry.get("mem_usage"), dict) else {}
        readings.append(
            Reading(
                gpu=entry["gpu"],
                used_bytes=memory_bytes(memory.get("used_vram")),
                total_bytes=memory_bytes(memory.get("total_vram")),
                util_pct=_first(entry.get("usage"), ("gfx_activity",)),
                temp_c=_first(entry.get("temperature"), TEMPERATURE_KEYS),
                power_w=_first(entry.get("power"), POWER_KEYS),
                source="amd-smi",
                at=at,
                label=f"gpu{entry['gpu']}",
            )
        )
    return readings


def parse_amd_smi_list(text: str) -> dict[int, CardIdentity]:
    """{gpu: identity} from `amd-smi list --json` (its "bdf" is the PCI address)."""
    identities: dict[int, CardIdentity] = {}
    for entry in (e for value in iter_json(text) for e in gpu_entries(value)):
        bdf = entry.get("bdf")
        bdf = bdf.strip().lower() if isinstance(bdf, str) else ""
        valid = re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", bdf)
        identities[entry["gpu"]] = CardIdentity(entry["gpu"], bdf if valid else None)
    return identities


def diagnose_amd_smi(stdout: str, stderr: str) -> SourceStatus | None:
    both = f"{stderr}\n{stdout}"
    lowered = both.lower()
    if any(s in lowered for s in ("driver_not_loaded", "driver not loaded", "driver not initialized",
                                  "amdgpu not found", "unable to detect any gpu", "modprobe amdgpu")):
        line = next((ln.strip() for ln in both.splitlines() if "driver" in ln.lower() or "gpu" in ln.lower()), "")
        return SourceStatus("amd-smi", False, tool_said(line) if line else Message("telemetry.amd_smi.no_driver"), DRIVER_HINT)
    if "no_perm" in lowered or "permission denied" in lowered:
        printed = next((ln.strip() for ln in both.splitlines() if "perm" in ln.lower()), None)
        return SourceStatus("amd-smi", False, tool_said(printed) if printed else Message("telemetry.permission_denied"), GROUPS_HINT)
    return None


class AmdSmiSource(CommandSource):
    name = "amd-smi"
    tool = "amd-smi"
    install_hint = Message("telemetry.hint.install_amd_smi")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._argv = list(AMD_SMI_ARGS)
        self._identities: dict[int, CardIdentity] = {}

    def argv(self) -> list[str]:
        return list(self._argv)

    def parse(self, output: ToolOutput) -> tuple[list[Reading], dict[int, CardIdentity]]:
        return parse_amd_smi_metric(output.stdout), self._identities

    def unavailable(self, output: ToolOutput) -> SourceStatus | None:
        status = diagnose_amd_smi(output.stdout, output.stderr)
        if status is None and output.returncode not in (0, None) and "usage:" in output.stderr.lower():
            # This release names the metric options differently: fall back to everything.
            self._argv = list(AMD_SMI_PLAIN_ARGS)
        return status

    def probe(self) -> SourceStatus:
        status = super().probe()
        if not status.available and self._argv == AMD_SMI_PLAIN_ARGS:
            status = super().probe()
        return status

    def after_probe(self) -> None:
        listing = run_tool(AMD_SMI_LIST_ARGS, self.probe_timeout_s, self.env)
        self._identities = parse_amd_smi_list(listing.stdout) if not listing.error else {}
