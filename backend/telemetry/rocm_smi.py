"""rocm-smi (ROCm 5.x and 6.x; deprecated in favour of amd-smi from ROCm 6).

`rocm-smi --showmeminfo vram --showuse --showtemp --showpower --showbus --json` prints
`{"card0": {...}}` with every value a string ("25753026560", "49.0", "N/A"); a metric that
fails is left out. Quirks this parser handles, each with a fixture:
- from ROCm 6.0 some cards report "Current Socket Graphics Package Power (W)" instead of
  "Average Graphics Package Power (W)";
- with nothing to report it logs "WARNING: No JSON data to report";
- ROCm 5.x plain text reads `GPU[0]\t\t: VRAM Total Used Memory (B): 108814336`;
- with no driver it prints "ERROR:root:Driver not initialized (amdgpu not found in
  modules)" to stderr and exits 0;
- with --showtemp on a GDDR card the HBM sensors fail and it exits 2 having printed
  everything, so stdout is parsed whatever the exit code;
- "GFX Activity" is an accumulating counter, not a percentage: ignored.
rocm-smi's card numbers are its own; "PCI Bus" (from --showbus) matches them to the run's GPUs.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping

from backend.i18n import Message
from backend.telemetry.base import Reading, SourceStatus
from backend.telemetry.command import DRIVER_HINT, GROUPS_HINT, CommandSource, extract_json, tool_said
from backend.telemetry.tool import ToolOutput
from backend.telemetry.topology import CardIdentity

ROCM_SMI_ARGS = ["rocm-smi", "--showmeminfo", "vram", "--showuse", "--showtemp", "--showpower", "--showbus", "--json"]

USED_KEY = "VRAM Total Used Memory (B)"
TOTAL_KEY = "VRAM Total Memory (B)"
UTIL_KEY = "GPU use (%)"
TEMPERATURE_KEYS = (
    "Temperature (Sensor edge) (C)",
    "Temperature (Sensor junction) (C)",
    "Temperature (Sensor memory) (C)",
)
POWER_KEYS = (
    "Average Graphics Package Power (W)",
    "Current Socket Graphics Package Power (W)",  # ROCm 6.0+, some cards
    "Current Graphics Package Power (W)",
)
PCI_KEY = "PCI Bus"
NO_DATA = "No JSON data to report"
NO_DRIVER = "Driver not initialized"


def _number(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _int(value: object) -> int | None:
    number = _number(value)
    return int(number) if number is not None else None


def _first(fields: Mapping[str, object], keys: tuple[str, ...]) -> float | None:
    for key in keys:
        number = _number(fields.get(key))
        if number is not None:
            return number
    return None


def reading_from_fields(card: int, fields: Mapping[str, object], at: float) -> Reading:
    """One card's `{"VRAM Total Memory (B)": "...", ...}` as a reading; "N/A" and missing are None."""
    return Reading(
        gpu=card,
        used_bytes=_int(fields.get(USED_KEY)),
        total_bytes=_int(fields.get(TOTAL_KEY)),
        util_pct=_number(fields.get(UTIL_KEY)),
        temp_c=_first(fields, TEMPERATURE_KEYS),
        power_w=_first(fields, POWER_KEYS),
        source="rocm-smi",
        at=at,
        label=f"card{card}",
    )


def _has_metrics(fields: Mapping[str, object]) -> bool:
    keys = (USED_KEY, TOTAL_KEY, UTIL_KEY, *TEMPERATURE_KEYS, *POWER_KEYS)
    return any(k in fields for k in keys)


def parse_rocm_smi_fields(text: str) -> dict[int, dict[str, str]]:
    """{card: {key: value}} from either the JSON or the ROCm 5.x plain-text output."""
    data = extract_json(text)
    cards: dict[int, dict[str, str]] = {}
    if isinstance(data, dict):
        for key, fields in data.items():
            match = re.fullmatch(r"card(\d+)", str(key))
            if match and isinstance(fields, dict):
                cards[int(match.group(1))] = {str(k): str(v) for k, v in fields.items()}
        return cards
    for match in re.finditer(r"^GPU\[(\d+)\]\s*:\s*(.+?):\s*(.*?)\s*$", text, re.MULTILINE):
        cards.setdefault(int(match.group(1)), {})[match.group(2).strip()] = match.group(3)
    return cards


def parse_rocm_smi(text: str, at: float | None = None) -> list[Reading]:
    """Readings numbered by rocm-smi's card number; cards with no metric at all are left out."""
    at = time.time() if at is None else at
    fields_by_card = parse_rocm_smi_fields(text)
    return [reading_from_fields(card, f, at) for card, f in sorted(fields_by_card.items()) if _has_metrics(f)]


def parse_rocm_smi_identities(text: str) -> dict[int, CardIdentity]:
    """{card: identity} from the "PCI Bus" field, where rocm-smi printed one."""
    identities: dict[int, CardIdentity] = {}
    for card, fields in parse_rocm_smi_fields(text).items():
        address = fields.get(PCI_KEY, "").strip().lower()
        valid = re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", address)
        identities[card] = CardIdentity(card, address if valid else None)
    return identities


def diagnose_rocm_smi(stdout: str, stderr: str) -> SourceStatus | None:
    """An "unavailable" status when the output says rocm-smi cannot work here, else None."""
    both = f"{stderr}\n{stdout}"
    if NO_DRIVER in both or "amdgpu not found" in both:
        line = next((ln for ln in both.splitlines() if NO_DRIVER in ln), NO_DRIVER)
        return SourceStatus("rocm-smi", False, tool_said(line.replace("ERROR:root:", "").strip()), DRIVER_HINT)
    if "Permission denied" in both or "permission" in both.lower() and "ERROR" in both:
        printed = next((ln.strip() for ln in both.splitlines() if "ermission" in ln), None)
        return SourceStatus("rocm-smi", False, tool_said(printed) if printed else Message("telemetry.permission_denied"), GROUPS_HINT)
    return None


class RocmSmiSource(CommandSource):
    name = "rocm-smi"
    tool = "rocm-smi"
    install_hint = Message("telemetry.hint.install_rocm_smi")

    def argv(self) -> list[str]:
        return list(ROCM_SMI_ARGS)

    def parse(self, output: ToolOutput) -> tuple[list[Reading], dict[int, CardIdentity]]:
        return parse_rocm_smi(output.stdout), parse_rocm_smi_identities(output.stdout)

    def unavailable(self, output: ToolOutput) -> SourceStatus | None:
        return diagnose_rocm_smi(output.stdout, output.stderr)
