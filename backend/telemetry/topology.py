"""Which GPUs the training run can see, and what the run calls them.

Card numbers (`/sys/class/drm/cardN`, rocm-smi's `GPU[N]`, amd-smi's `gpu`) are not the
device indices HIP gives the run. HIP enumerates the GPU nodes of the KFD topology
(`/sys/class/kfd/kfd/topology/nodes/N/properties`) in node order; `ROCR_VISIBLE_DEVICES`
filters and reorders that list first, then `HIP_VISIBLE_DEVICES` (or, failing it,
`CUDA_VISIBLE_DEVICES`, which HIP also honours) indexes into what is left. We match cards
to nodes by PCI address (`location_id` + `domain`), falling back to the DRM render minor.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from backend.telemetry.base import Reading

# The variables that decide which GPUs a process sees, in the order they are applied.
VISIBILITY_VARIABLES = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")

# "VRAM" this small is an integrated GPU's carve-out from system RAM: not worth a chart line.
CARVE_OUT_MAX_BYTES = 2 * 1024**3


@dataclass(frozen=True)
class KfdGpu:
    """One GPU node of the KFD topology, in the order ROCr enumerates them."""

    node: int
    pci_address: str | None  # "0000:03:00.0"
    render_minor: int | None  # 128 for /dev/dri/renderD128
    gfx: str | None  # "gfx1100"
    unique_id: int | None  # ROCR_VISIBLE_DEVICES may name a GPU as "GPU-<unique_id in hex>"
    integrated: bool  # an APU: the node has CPU cores as well as SIMDs


@dataclass(frozen=True)
class VisibleGpu:
    """A GPU the run sees, under the index the run uses for it."""

    index: int
    pci_address: str | None
    render_minor: int | None
    gfx: str | None
    integrated: bool


def parse_kfd_properties(text: str) -> dict[str, int]:
    """`key value` lines of a KFD node's properties file; non-integer values are skipped."""
    props: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                props[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return props


def pci_address(location_id: int, domain: int = 0) -> str:
    """KFD `location_id` is bus << 8 | device << 3 | function."""
    return f"{domain:04x}:{location_id >> 8 & 0xFF:02x}:{location_id >> 3 & 0x1F:02x}.{location_id & 0x7:x}"


def gfx_name(target_version: int) -> str | None:
    """KFD `gfx_target_version` 110000 -> "gfx1100", 90010 -> "gfx90a", 90402 -> "gfx942"."""
    if target_version <= 0:
        return None
    major, minor, step = target_version // 10000, target_version // 100 % 100, target_version % 100
    return f"gfx{major}{minor:x}{step:x}"


def read_kfd_gpus(sysfs_root: Path) -> list[KfdGpu] | None:
    """GPU nodes in ROCr's order, or None when there is no KFD topology to read."""
    nodes_dir = sysfs_root / "class" / "kfd" / "kfd" / "topology" / "nodes"
    try:
        node_ids = sorted(int(p.name) for p in nodes_dir.iterdir() if p.name.isdigit())
    except OSError:
        return None
    gpus: list[KfdGpu] = []
    for node_id in node_ids:
        try:
            props = parse_kfd_properties((nodes_dir / str(node_id) / "properties").read_text())
        except OSError:
            continue
        if props.get("simd_count", 0) <= 0:
            continue  # a CPU node
        location = props.get("location_id")
        minor = props.get("drm_render_minor")
        gpus.append(
            KfdGpu(
                node=node_id,
                pci_address=pci_address(location, props.get("domain", 0)) if location else None,
                render_minor=minor if minor and minor > 0 else None,
                gfx=gfx_name(props.get("gfx_target_version", 0)),
                unique_id=props.get("unique_id"),
                integrated=props.get("cpu_cores_count", 0) > 0,
            )
        )
    return gpus


def apply_visible_devices(count: int, spec: str | None, uuids: Sequence[str | None] = ()) -> list[int]:
    """Positions (0..count-1) a `*_VISIBLE_DEVICES` value keeps, in its order.

    Unset keeps all. Like the runtimes, the list stops at the first entry that names no
    device; an empty value hides every device. Entries may be indices or "GPU-<uuid>".
    """
    if spec is None:
        return list(range(count))
    kept: list[int] = []
    for entry in (e.strip() for e in spec.split(",")):
        position: int | None = None
        if re.fullmatch(r"\d+", entry):
            position = int(entry)
        elif entry.upper().startswith("GPU-"):
            wanted = entry[4:].lower()
            position = next((i for i, u in enumerate(uuids) if u is not None and u == wanted), None)
        if position is None or position >= count or position in kept:
            break
        kept.append(position)
    return kept


def visible_positions(count: int, env: Mapping[str, str], uuids: Sequence[str | None] = ()) -> list[int]:
    """Positions in the runtime's enumeration (0..count-1) a process started with `env`
    sees, in the order it numbers them: ROCR_VISIBLE_DEVICES first, then HIP's variable."""
    uuids = list(uuids) or [None] * count
    rocr = apply_visible_devices(count, env.get("ROCR_VISIBLE_DEVICES"), uuids)
    hip_spec = env.get("HIP_VISIBLE_DEVICES", env.get("CUDA_VISIBLE_DEVICES"))
    return [rocr[i] for i in apply_visible_devices(len(rocr), hip_spec, [uuids[p] for p in rocr])]


def slot_positions(kfd_gpus: Sequence[KfdGpu], env: Mapping[str, str]) -> list[int]:
    """The GPUs a process started with `env` may use, as indices a child's own
    HIP_VISIBLE_DEVICES names them by, ascending: positions among the GPUs left after
    ROCR_VISIBLE_DEVICES (which a child inherits, so HIP numbers after it there too), kept by
    the process's HIP_VISIBLE_DEVICES (or CUDA_VISIBLE_DEVICES), which a child's value
    replaces. A process with HIP_VISIBLE_DEVICES=2,3 may use 2 and 3 (not 0 and 1, its own
    names for them): a child given HIP_VISIBLE_DEVICES=2 runs on the first of them."""
    uuids = [f"{g.unique_id:016x}" if g.unique_id else None for g in kfd_gpus]
    rocr = apply_visible_devices(len(kfd_gpus), env.get("ROCR_VISIBLE_DEVICES"), uuids)
    hip_spec = env.get("HIP_VISIBLE_DEVICES", env.get("CUDA_VISIBLE_DEVICES"))
    return sorted(apply_visible_devices(len(rocr), hip_spec, [uuids[p] for p in rocr]))


def slot_addresses(kfd_gpus: Sequence[KfdGpu], env: Mapping[str, str]) -> dict[int, str]:
    """Each of `slot_positions`' GPUs' PCI address (where KFD gives one): what rocm-smi
    (`--showbus`), amd-smi and lspci name a GPU by, whose own row numbers follow their own
    order (often PCI order, not HIP's)."""
    uuids = [f"{g.unique_id:016x}" if g.unique_id else None for g in kfd_gpus]
    rocr = apply_visible_devices(len(kfd_gpus), env.get("ROCR_VISIBLE_DEVICES"), uuids)
    return {slot: address for slot in slot_positions(kfd_gpus, env) if (address := kfd_gpus[rocr[slot]].pci_address)}


def visible_gpus(kfd_gpus: Sequence[KfdGpu], env: Mapping[str, str]) -> list[VisibleGpu]:
    """The GPUs a process started with `env` sees, numbered as it numbers them."""
    uuids = [f"{g.unique_id:016x}" if g.unique_id else None for g in kfd_gpus]
    seen = [kfd_gpus[p] for p in visible_positions(len(kfd_gpus), env, uuids)]
    return [VisibleGpu(i, g.pci_address, g.render_minor, g.gfx, g.integrated) for i, g in enumerate(seen)]


@dataclass(frozen=True)
class CardIdentity:
    """How a tool or sysfs names one card, so it can be matched to a KFD node."""

    card: int  # the tool's own number for it
    pci_address: str | None = None
    render_minor: int | None = None


def run_cards(
    cards: Sequence[int],
    identities: Mapping[int, CardIdentity],
    gpus: Sequence[VisibleGpu] | None,
    env: Mapping[str, str],
) -> list[tuple[VisibleGpu, int]]:
    """The cards (by card number) the run sees, each with the GPU it is to the run, in the
    run's device order: to_run_indices's matching, which needs no reading, so a source can
    read only these cards (a run on one GPU of eight reads one card a tick, not eight).

    Without a KFD topology (`gpus` None), or when no card has a PCI address or render node,
    cards are taken in card order (what HIP does on a machine with no other GPUs) and the
    visible-device variables are applied to that order.
    """
    ordered = sorted(cards)
    identified = any((i := identities.get(card)) is not None and (i.pci_address or i.render_minor is not None) for card in ordered)
    if gpus is None or not identified:
        return [(VisibleGpu(index, None, None, None, False), ordered[position]) for index, position in enumerate(visible_positions(len(ordered), env))]
    matched: list[tuple[VisibleGpu, int]] = []
    for gpu in gpus:
        card = next((c for c in ordered if _same_card(identities.get(c), gpu)), None)
        if card is not None:
            matched.append((gpu, card))
    return matched


def to_run_indices(
    readings: Sequence[Reading],
    identities: Mapping[int, CardIdentity],
    gpus: Sequence[VisibleGpu] | None,
    env: Mapping[str, str],
) -> list[Reading]:
    """Readings keyed by card number -> readings keyed by the run's device index, keeping
    only GPUs the run sees (run_cards), dropping carve-out iGPUs and labelling larger
    integrated ones."""
    by_card: dict[int, Reading] = {}
    for reading in sorted(readings, key=lambda r: r.gpu):
        by_card.setdefault(reading.gpu, reading)
    return as_run_readings([(gpu, by_card[card]) for gpu, card in run_cards(list(by_card), identities, gpus, env)])


def as_run_readings(matched: Sequence[tuple[VisibleGpu, Reading]]) -> list[Reading]:
    """Each card's reading as the GPU it is to the run (run_cards), dropping carve-out iGPUs
    and labelling larger integrated ones."""
    out: list[Reading] = []
    for gpu, reading in matched:
        if reading.total_bytes is not None and reading.total_bytes <= CARVE_OUT_MAX_BYTES:
            continue  # an integrated GPU's carve-out (or a card nobody fine-tunes on)
        details = [d for d in (gpu.gfx, "integrated" if gpu.integrated else None) if d]
        label = f"GPU {gpu.index} ({', '.join(details)})" if details else f"GPU {gpu.index}"
        out.append(replace(reading, gpu=gpu.index, label=label))
    return out


def _same_card(identity: CardIdentity | None, gpu: VisibleGpu) -> bool:
    if identity is None:
        return False
    if identity.pci_address and gpu.pci_address:
        return identity.pci_address.lower() == gpu.pci_address.lower()
    return identity.render_minor is not None and identity.render_minor == gpu.render_minor


def with_visibility(env: Mapping[str, str], run_env: Mapping[str, str]) -> dict[str, str]:
    """`env` with its visible-device variables replaced by those of `run_env` (the training
    process's own environment: the launcher may set them for the run only)."""
    merged = {k: v for k, v in env.items() if k not in VISIBILITY_VARIABLES}
    merged.update({k: run_env[k] for k in VISIBILITY_VARIABLES if k in run_env})
    return merged
