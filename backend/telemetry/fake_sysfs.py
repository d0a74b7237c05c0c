"""Build a fake amdgpu sysfs tree, laid out as the kernel lays it out, for tests, the
benchmark and trying the app without a GPU (`app.py telemetry --sysfs-root DIR`).

The default machine: a desktop whose integrated GPU (512 MiB carve-out) is card0, with an
RX 7900 XTX as card1 and a 16 GB RX 7800 XT as card2. KFD enumerates GPUs in PCI order,
so HIP calls the 7900 XTX device 0 and the 7800 XT device 1: card numbers are not HIP
indices. There is also a BMC's VGA (vendor 0x1a03) and the usual connector and render
entries, which a reader must skip.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class FakeCard:
    card: int
    pci_address: str  # "0000:03:00.0"
    render_minor: int
    vram_total: int
    vram_used: int
    busy_pct: int | None = 0
    temps_millideg: dict[str, int] = field(default_factory=dict)  # label -> millidegrees
    power_uw: int | None = None
    power_file: str = "power1_average"  # newer kernels on RDNA3+ give power1_input only
    gfx_target_version: int = 110000
    vendor: str = "0x1002"
    unique_id: int = 0
    integrated: bool = False


DEFAULT_CARDS = (
    FakeCard(0, "0000:7c:00.0", 128, 512 * 1024**2, 97 * 1024**2, 3,
             {"edge": 41000}, 9_000_000, "power1_input", 100306, integrated=True),
    FakeCard(1, "0000:03:00.0", 129, 25753026560, 794341376, 37,
             {"edge": 49000, "junction": 57000, "mem": 53000}, 19_000_000, "power1_average", 110000,
             unique_id=0x1F2E3D4C5B6A7988),
    FakeCard(2, "0000:0c:00.0", 130, 17163091968, 4294967296, 82,
             {"edge": 71000, "junction": 79000, "mem": 75000}, 187_000_000, "power1_input", 110001,
             unique_id=0x0A1B2C3D4E5F6071),
)


def server_cards(count: int = 4, vram_total: int = 64 * 1024**3, gfx_target_version: int = 90010) -> tuple[FakeCard, ...]:
    """A training server's GPUs (MI210-like by default: 64 GiB, gfx90a), idle: card N is HIP
    device N, each on its own PCI bus."""
    return tuple(
        FakeCard(n, f"0000:{0x10 + 0x10 * n:02x}:00.0", 128 + n, vram_total, 300 * 1024**2, 0,
                 {"edge": 35000, "junction": 38000}, 40_000_000, "power1_average", gfx_target_version,
                 unique_id=0x5EED0000 + n)
        for n in range(count)
    )  # fmt: skip


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _location_id(pci_address: str) -> int:
    _, bus, rest = pci_address.split(":")
    device, function = rest.split(".")
    return int(bus, 16) << 8 | int(device, 16) << 3 | int(function, 16)


def build_fake_sysfs(root: Path, cards: tuple[FakeCard, ...] = DEFAULT_CARDS, *, bmc_vga: bool = True) -> Path:
    """Write the tree under `root` (which stands in for /sys) and return `root`."""
    root = Path(root)
    drm = root / "class" / "drm"
    drm.mkdir(parents=True, exist_ok=True)
    for spec in cards:
        # /sys/class/drm/cardN/device is a link to the PCI device, as on a real machine.
        device = root / "devices" / "pci0000:00" / spec.pci_address
        _write(device / "vendor", f"{spec.vendor}\n")
        _write(device / "uevent", f"DRIVER=amdgpu\nPCI_CLASS=30000\nPCI_SLOT_NAME={spec.pci_address}\n")
        _write(device / "mem_info_vram_total", f"{spec.vram_total}\n")
        _write(device / "mem_info_vram_used", f"{spec.vram_used}\n")
        if spec.busy_pct is not None:
            _write(device / "gpu_busy_percent", f"{spec.busy_pct}\n")
        (device / "drm" / f"card{spec.card}").mkdir(parents=True, exist_ok=True)
        (device / "drm" / f"renderD{spec.render_minor}").mkdir(parents=True, exist_ok=True)
        hwmon = device / "hwmon" / f"hwmon{spec.card + 2}"
        for number, (label, millideg) in enumerate(spec.temps_millideg.items(), start=1):
            _write(hwmon / f"temp{number}_input", f"{millideg}\n")
            _write(hwmon / f"temp{number}_label", f"{label}\n")
        if spec.power_uw is not None:
            _write(hwmon / spec.power_file, f"{spec.power_uw}\n")
        _write(hwmon / "name", "amdgpu\n")
        card_dir = drm / f"card{spec.card}"
        card_dir.mkdir(exist_ok=True)
        os.symlink(os.path.relpath(device, card_dir), card_dir / "device")
        (drm / f"card{spec.card}-DP-{spec.card + 1}").mkdir(exist_ok=True)
        (drm / f"renderD{spec.render_minor}").mkdir(exist_ok=True)
    if bmc_vga:
        other = root / "devices" / "pci0000:00" / "0000:e1:00.0"
        _write(other / "vendor", "0x1a03\n")  # ASPEED: a server's BMC display, not a GPU to chart
        card_dir = drm / f"card{max((c.card for c in cards), default=-1) + 1}"
        card_dir.mkdir()
        os.symlink(os.path.relpath(other, card_dir), card_dir / "device")
    _write(drm / "version", "drm 1.1.0 20060810\n")
    _write_kfd(root, cards)
    return root


def _write_kfd(root: Path, cards: tuple[FakeCard, ...]) -> None:
    nodes = root / "class" / "kfd" / "kfd" / "topology" / "nodes"
    _write(nodes / "0" / "properties", _properties(cpu_cores_count=16, simd_count=0, gfx_target_version=0,
                                                   location_id=0, domain=0, drm_render_minor=0, unique_id=0))
    gpus = sorted((c for c in cards if c.vendor == "0x1002"), key=lambda c: c.pci_address)
    for node, spec in enumerate(gpus, start=1):
        _write(
            nodes / str(node) / "properties",
            _properties(
                cpu_cores_count=0,
                simd_count=192 if not spec.integrated else 4,
                gfx_target_version=spec.gfx_target_version,
                location_id=_location_id(spec.pci_address),
                domain=int(spec.pci_address.split(":")[0], 16),
                drm_render_minor=spec.render_minor,
                unique_id=spec.unique_id,
            ),
        )


def _properties(**values: int) -> str:
    # The real file has ~40 keys in this "name value" form; these are the ones we read.
    ordered = {"cpu_cores_count": 0, "simd_count": 0, "mem_banks_count": 1, "caches_count": 0,
               "io_links_count": 1, "cpu_core_id_base": 0, "simd_id_base": 0, "max_waves_per_simd": 16}
    ordered.update(values)
    return "".join(f"{key} {value}\n" for key, value in ordered.items())


def _replace(path: Path, text: str) -> None:
    """Writes `path` as the kernel's value changes: a reader sees the old value or the new,
    never an empty or half-written file (a temporary beside it, renamed over it)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def set_vram_used(root: Path, card: int, used_bytes: int) -> None:
    """Change what the fake driver reports, as a training run allocating memory would."""
    _replace(Path(root) / "class" / "drm" / f"card{card}" / "device" / "mem_info_vram_used", f"{used_bytes}\n")


def set_busy_percent(root: Path, card: int, percent: int) -> None:
    """Change the card's gpu_busy_percent, as its load rises and falls (0-100)."""
    if not 0 <= percent <= 100:
        raise ValueError(f"a busy percent is 0-100, not {percent}")
    _replace(Path(root) / "class" / "drm" / f"card{card}" / "device" / "gpu_busy_percent", f"{percent}\n")


def set_load(root: Path, loads: Mapping[int, tuple[int | None, int | None]]) -> None:
    """Several cards at once: card -> (VRAM used in bytes, busy percent), None leaving one as
    it is. The files change one after another, as a sampler between two of them may see."""
    for card, (used_bytes, percent) in loads.items():
        if used_bytes is not None:
            set_vram_used(root, card, used_bytes)
        if percent is not None:
            set_busy_percent(root, card, percent)
