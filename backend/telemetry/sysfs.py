"""amdgpu's own sysfs files: the cheapest source (a few small reads, no process, no root).

Per card, under `/sys/class/drm/cardN/device/`: `mem_info_vram_used` and
`mem_info_vram_total` (bytes), `gpu_busy_percent`, and in `hwmon/hwmonM/`: `tempK_input`
(millidegrees C, named by `tempK_label`: edge, junction, mem) and `power1_average` or, on
newer kernels for RDNA3 and later, `power1_input` (microwatts). Only AMD cards (vendor
0x1002) count. The root is a parameter so tests can build a fake tree.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from backend.i18n import Message
from backend.telemetry.base import Reading, SourceStatus
from backend.telemetry.topology import (
    CardIdentity,
    KfdGpu,
    VisibleGpu,
    as_run_readings,
    read_kfd_gpus,
    run_cards,
    to_run_indices,
    visible_gpus,
    with_visibility,
)

AMD_VENDOR_ID = "0x1002"
# Which sensor a chart line shows when a card has several: the edge sensor is what
# rocm-smi's summary shows; the others stand in when it is missing.
TEMPERATURE_PREFERENCE = ("edge", "junction", "mem")


@dataclass(frozen=True)
class SysfsCard:
    card: int  # N of /sys/class/drm/cardN
    device_dir: Path
    hwmon_dir: Path | None
    pci_address: str | None
    render_minor: int | None
    # Found once, read every tick: globbing hwmon and reading labels each time doubled the cost.
    temperature_inputs: tuple[tuple[str, Path], ...] = ()  # (label, tempK_input)
    power_files: tuple[Path, ...] = ()  # power1_average, then power1_input


def parse_uevent_pci_address(text: str) -> str | None:
    """PCI_SLOT_NAME from a device's uevent file."""
    match = re.search(r"^PCI_SLOT_NAME=(\S+)$", text, re.MULTILINE)
    return match.group(1) if match else None


def pick_temperature(by_label: Mapping[str, float]) -> float | None:
    """The chart's temperature from {label: degrees C}; unlabelled sensors come as "temp1"."""
    for label in TEMPERATURE_PREFERENCE:
        if label in by_label:
            return by_label[label]
    return next(iter(by_label.values()), None)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _read_int(path: Path) -> int | None:
    # os-level read: these run every tick, and Path.read_text's text layer costs several times more.
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            data = os.read(fd, 64)
        finally:
            os.close(fd)
    except OSError:
        return None
    try:
        return int(data.strip())
    except ValueError:
        return None


def find_amd_cards(sysfs_root: Path) -> list[SysfsCard]:
    """AMD cards under `<root>/class/drm`, in card order (connectors and render nodes skipped)."""
    drm = sysfs_root / "class" / "drm"
    try:
        names = [p.name for p in drm.iterdir()]
    except OSError:
        return []
    cards: list[SysfsCard] = []
    for name in sorted((n for n in names if re.fullmatch(r"card\d+", n)), key=lambda n: int(n[4:])):
        device = drm / name / "device"
        vendor = (_read(device / "vendor") or "").strip().lower()
        if vendor != AMD_VENDOR_ID:
            continue
        uevent = _read(device / "uevent") or ""
        address = parse_uevent_pci_address(uevent)
        if address is None:
            resolved = os.path.basename(os.path.realpath(device))
            address = resolved if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", resolved) else None
        render_minor = None
        try:
            render = [p.name for p in (device / "drm").iterdir() if re.fullmatch(r"renderD\d+", p.name)]
            render_minor = int(render[0][7:]) if render else None
        except OSError:
            pass
        hwmons = sorted((device / "hwmon").glob("hwmon*")) if (device / "hwmon").is_dir() else []
        hwmon = hwmons[0] if hwmons else None
        cards.append(
            SysfsCard(
                int(name[4:]),
                device,
                hwmon,
                address,
                render_minor,
                _temperature_inputs(hwmon) if hwmon else (),
                (hwmon / "power1_average", hwmon / "power1_input") if hwmon else (),
            )
        )
    return cards


def _temperature_inputs(hwmon: Path) -> tuple[tuple[str, Path], ...]:
    found: dict[str, Path] = {}
    for temp_input in sorted(hwmon.glob("temp*_input")):
        label = (_read(temp_input.with_name(temp_input.name.replace("_input", "_label"))) or "").strip()
        found.setdefault(label or temp_input.name.split("_")[0], temp_input)
    return tuple(found.items())


def read_card(card: SysfsCard, at: float | None = None) -> Reading:
    """One reading of one card, numbered by its card number; unreadable files are None."""
    temps: dict[str, float] = {}
    for label, temp_input in card.temperature_inputs:
        millideg = _read_int(temp_input)
        if millideg is not None:
            temps[label] = millideg / 1000.0
    power_uw = None
    for power_file in card.power_files:
        power_uw = _read_int(power_file)
        if power_uw is not None:
            break
    busy = _read_int(card.device_dir / "gpu_busy_percent")
    return Reading(
        gpu=card.card,
        used_bytes=_read_int(card.device_dir / "mem_info_vram_used"),
        total_bytes=_read_int(card.device_dir / "mem_info_vram_total"),
        util_pct=float(busy) if busy is not None else None,
        temp_c=pick_temperature(temps),
        power_w=power_uw / 1e6 if power_uw is not None else None,
        source="sysfs",
        at=time.time() if at is None else at,
        label=f"card{card.card}",
    )


class SysfsSource:
    """amdgpu sysfs, numbered and filtered as the run sees its GPUs."""

    name = "sysfs"
    # Read in-process (a few small files, no tool to wait on): a companion sampler charting
    # through it may be ticked on another sampler's thread (Sampler.companion).
    in_process = True

    def __init__(self, sysfs_root: Path = Path("/sys"), env: Mapping[str, str] | None = None) -> None:
        self.sysfs_root = Path(sysfs_root)
        self.env = dict(os.environ if env is None else env)
        self.last_failure = ""
        self._cards: list[SysfsCard] = []
        self._identities: dict[int, CardIdentity] = {}
        self._kfd: list[KfdGpu] | None = None
        self._gpus: list[VisibleGpu] | None = None
        self._seen: list[tuple[VisibleGpu, SysfsCard]] | None = None  # the cards the run sees (None: not yet worked out)

    def probe(self) -> SourceStatus:
        self._cards = find_amd_cards(self.sysfs_root)
        self._identities = {c.card: CardIdentity(c.card, c.pci_address, c.render_minor) for c in self._cards}
        self._kfd = read_kfd_gpus(self.sysfs_root)
        self._gpus = visible_gpus(self._kfd, self.env) if self._kfd is not None else None
        self._seen = None
        if not self._cards:
            return SourceStatus(
                self.name,
                False,
                Message("telemetry.sysfs.no_card", vendor=AMD_VENDOR_ID, folder=str(self.sysfs_root / "class" / "drm")),
                Message("telemetry.hint.load_amdgpu"),
            )
        memory_files = [c.device_dir / "mem_info_vram_total" for c in self._cards]
        if not any(f.exists() for f in memory_files):
            return SourceStatus(
                self.name,
                False,
                Message("telemetry.sysfs.no_vram_file"),
                Message("telemetry.hint.newer_kernel"),
            )
        if all(_read(f) is None for f in memory_files):
            return SourceStatus(
                self.name,
                False,
                Message("telemetry.sysfs.unreadable"),
                Message("telemetry.hint.groups"),
            )
        shown = to_run_indices(read_sysfs_cards(self._cards), self._identities, self._gpus, self.env)
        cards = ", ".join(f"card{c.card}" for c in self._cards)
        return SourceStatus(self.name, True, Message("telemetry.sysfs.works", count=len(self._cards), cards=cards, shown=len(shown)))

    def set_run_environment(self, run_env: Mapping[str, str]) -> None:
        """Show the GPUs the run sees, by the run's own *_VISIBLE_DEVICES (after probe)."""
        self.env = with_visibility(self.env, run_env)
        self._gpus = visible_gpus(self._kfd, self.env) if self._kfd is not None else None
        self._seen = None

    def read(self) -> list[Reading]:
        # Only the cards the run sees are read (which they are needs no reading): side by
        # side, each run's sampler reads its own GPUs, so each GPU is read once a tick.
        seen = self._cards_seen()
        readings = read_sysfs_cards([card for _, card in seen])
        readable = any(r.total_bytes is not None for r in readings)
        if not readable:  # none of its cards (or it sees none): is any card readable at all?
            others = [card for card in self._cards if all(card is not mine for _, mine in seen)]
            readable = any(r.total_bytes is not None for r in read_sysfs_cards(others))
        self.last_failure = "" if readable else "no card's VRAM could be read"
        return as_run_readings([(gpu, reading) for (gpu, _), reading in zip(seen, readings, strict=True)])

    def _cards_seen(self) -> list[tuple[VisibleGpu, SysfsCard]]:
        """The cards the run sees, each with the GPU it is to the run, in the run's order."""
        if self._seen is None:
            by_number = {c.card: c for c in self._cards}
            self._seen = [(gpu, by_number[card]) for gpu, card in run_cards(list(by_number), self._identities, self._gpus, self.env)]
        return self._seen


def read_sysfs_cards(cards: list[SysfsCard]) -> list[Reading]:
    at = time.time()
    return [read_card(card, at) for card in cards]
