"""Which queued runs start now, and on which GPUs: the node's allocator (issue 30 §1). `decide`
is pure (no file, no process, no clock): the run manager gives it what it knows and does what
it says; `node_gpus` reads which GPUs the app sees, once, when the app starts.

Its inputs:
- the node: the GPU indices the app may use (as a run's HIP_VISIBLE_DEVICES names them,
  `node_gpus`), or on a CPU machine a number of
  slots (0..n-1; one by default, which is "one run at a time" as before);
- what each live run holds (run id -> its GPU indices);
- the queue, in order: each run asks for a count of GPUs (from its multi-GPU plan) or for
  named indices (the plan's GPU list).

The rule (no run is starved): the queue is walked in order. A run whose GPUs are free, and
not reserved by a run ahead of it, starts on them (a count takes the lowest free indices).
A run that cannot start reserves what it waits for: named indices reserve those indices
(held ones included: when they free up they are its); a count reserves every GPU free now
(fewer than it needs), so each GPU that frees up goes to it until it has enough. Runs behind
it start only on GPUs no run ahead of them reserved: backfill that never delays an earlier
run. So a 2-GPU run at the head waits only for GPUs to free, never for a stream of 1-GPU
runs queued after it; a run asking for more GPUs than the node has, or for an index the node
does not have, can never start and is reported as such (it reserves nothing).

GPUs in `avoid` (those a chat server uses: it lets go of its GPU for a run that is given it)
are given to a count last: a run displaces a chat only when no other GPU is free for it. A
chat asks like a 1-GPU run queued behind every other (`guest_gpu`): it never takes a GPU
held by a run or kept for a queued one.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

MAX_GPUS = 64  # indices a node may have (0..63), and GPUs one run may ask for
MAX_QUEUED = 1000  # backend/runs/queue.py QUEUE_MAX
MAX_CPU_SLOTS = 64

WaitReason = Literal["busy", "reserved", "impossible"]


class SlotsError(ValueError):
    """Input outside the allocator's bounds (too many GPUs or runs, a bad index or count)."""


@dataclass(frozen=True)
class Ask:
    """What one queued run needs: `count` GPUs, or exactly `indices` when given."""

    run_id: str
    count: int = 1
    indices: tuple[int, ...] = ()

    @property
    def wanted(self) -> int:
        return len(self.indices) if self.indices else self.count


@dataclass(frozen=True)
class Grant:
    run_id: str
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class Wait:
    """A queued run that does not start now, and why: its GPUs are held ("busy"), reserved for
    a run ahead of it ("reserved"; `behind` names that run), or can never be had on this node
    ("impossible")."""

    run_id: str
    reason: WaitReason
    held_by: tuple[str, ...] = ()  # the live runs holding GPUs it waits for
    behind: str | None = None


@dataclass(frozen=True)
class Decision:
    start: tuple[Grant, ...] = ()
    waiting: tuple[Wait, ...] = ()
    reserved: Mapping[int, str] = field(default_factory=dict)  # GPU -> the waiting run it is kept for
    free: tuple[int, ...] = ()  # GPUs nobody holds or was given, after this decision


@dataclass(frozen=True)
class NodeView:
    """The node as the page or a script shows it: each GPU's holder, and the queue's waits."""

    node: tuple[int, ...]
    held: Mapping[str, tuple[int, ...]]  # live run -> its GPUs
    decision: Decision  # what the queue would do now (nothing was started for it)
    chat: Mapping[int, str] = field(default_factory=dict)  # GPU -> the run a chat server there serves
    addresses: Mapping[int, str] = field(default_factory=dict)  # GPU -> its PCI address, where known

    def holder(self, gpu: int) -> str | None:
        return next((run_id for run_id, gpus in self.held.items() if gpu in gpus), None)


def cpu_slots(count: int = 1) -> tuple[int, ...]:
    """The node of a machine without GPUs: `count` slots (the demo default: one)."""
    if not 1 <= count <= MAX_CPU_SLOTS:
        raise SlotsError(f"CPU slots are 1-{MAX_CPU_SLOTS}, not {count}")
    return tuple(range(count))


def node_gpus(
    sysfs_root: Path = Path("/sys"),
    env: Mapping[str, str] | None = None,
    cpu_slot_count: int = 1,
    nvidia_gpus_dir: Path | None = None,
) -> tuple[int, ...]:
    """The node's slots: the AMD GPUs this process may use (KFD's topology under
    `sysfs_root`, after this process's ROCR_VISIBLE_DEVICES and then its HIP_VISIBLE_DEVICES
    or CUDA_VISIBLE_DEVICES), numbered as a child's HIP_VISIBLE_DEVICES names them, which
    replaces this process's but counts after the ROCR_VISIBLE_DEVICES it inherits
    (topology.slot_positions: an app started with HIP_VISIBLE_DEVICES=2,3 has the slots 2
    and 3; docs/multi-gpu.md), indices below MAX_GPUS; where there are none, the NVIDIA GPUs it sees (the driver's folders under
    `nvidia_gpus_dir`, after its CUDA_VISIBLE_DEVICES; numbered as nvidia-smi numbers them,
    since a run's CUDA_VISIBLE_DEVICES replaces the app's: backend/telemetry/nvidia_smi.py);
    on a machine without either, `cpu_slot_count` CPU slots. `nvidia_gpus_dir` None: the
    driver's own /proc/driver/nvidia/gpus with the real /sys, none with a fake sysfs tree (a
    simulated node is only what the tree says)."""
    from backend.telemetry.nvidia_smi import NVIDIA_GPUS_DIR, read_nvidia_gpus, visible_nvidia_positions
    from backend.telemetry.topology import read_kfd_gpus, slot_positions

    env = os.environ if env is None else env
    kfd = read_kfd_gpus(Path(sysfs_root)) or []
    usable = [p for p in slot_positions(kfd, env) if p < MAX_GPUS]
    if usable:
        return tuple(usable)
    if nvidia_gpus_dir is None and Path(sysfs_root) == Path("/sys"):
        nvidia_gpus_dir = NVIDIA_GPUS_DIR
    if nvidia_gpus_dir is not None:
        nvidia = [p for p in visible_nvidia_positions(read_nvidia_gpus(nvidia_gpus_dir), env) if p < MAX_GPUS]
        if nvidia:
            return tuple(nvidia)
    return cpu_slots(cpu_slot_count)


def node_gpu_addresses(sysfs_root: Path = Path("/sys"), env: Mapping[str, str] | None = None) -> dict[int, str]:
    """The PCI address of each AMD GPU slot `node_gpus` gives (none for NVIDIA or CPU slots):
    the node panel shows it beside the slot, so a user of rocm-smi or amd-smi, whose row
    numbers may differ from HIP's, knows which GPU it is."""
    from backend.telemetry.topology import read_kfd_gpus, slot_addresses

    env = os.environ if env is None else env
    return {slot: address for slot, address in slot_addresses(read_kfd_gpus(Path(sysfs_root)) or [], env).items() if slot < MAX_GPUS}


def ask_problem(ask: Ask, node: Sequence[int]) -> str | None:
    """Why `ask` can never start on `node` (None: it can, once its GPUs are free)."""
    if ask.indices:
        missing = sorted(set(ask.indices) - set(node))
        if missing:
            return f"GPU {', '.join(map(str, missing))} is not on this node (it has {', '.join(map(str, node)) or 'none'})"
        return None
    if ask.count > len(node):
        return f"{ask.count} GPUs asked, the node has {len(node)}"
    return None


def _check(node: Sequence[int], held: Mapping[str, Sequence[int]], queue: Sequence[Ask]) -> None:
    if len(node) > MAX_GPUS or len(set(node)) != len(node) or any(not 0 <= g < MAX_GPUS for g in node):
        raise SlotsError(f"a node has at most {MAX_GPUS} distinct GPUs, indices 0-{MAX_GPUS - 1}")
    if len(queue) > MAX_QUEUED:
        raise SlotsError(f"at most {MAX_QUEUED} queued runs, not {len(queue)}")
    if len(held) > MAX_GPUS * 4:
        raise SlotsError(f"at most {MAX_GPUS * 4} live runs, not {len(held)}")
    for ask in queue:
        if ask.indices:
            if len(ask.indices) > MAX_GPUS or len(set(ask.indices)) != len(ask.indices) or any(not 0 <= g < MAX_GPUS for g in ask.indices):
                raise SlotsError(f"run {ask.run_id}: GPU indices are distinct, 0-{MAX_GPUS - 1}")
        elif not 1 <= ask.count <= MAX_GPUS:
            raise SlotsError(f"run {ask.run_id}: a run asks for 1-{MAX_GPUS} GPUs, not {ask.count}")


def decide(node: Sequence[int], held: Mapping[str, Sequence[int]], queue: Sequence[Ask], avoid: Collection[int] = ()) -> Decision:
    """The runs of `queue` that start now and their GPUs, and why each other one waits (the
    module's rule). `held`: the GPUs of each live run (a GPU held twice counts once); `avoid`:
    GPUs a count is given only when too few others are free (a chat's)."""
    _check(node, held, queue)
    avoided = frozenset(avoid)
    on_node = frozenset(node)
    holder: dict[int, str] = {}
    for run_id, gpus in held.items():
        for gpu in gpus:
            holder.setdefault(gpu, run_id)
    free = sorted(on_node - holder.keys())
    reserved: dict[int, str] = {}
    starts: list[Grant] = []
    waits: list[Wait] = []
    for ask in queue:
        if ask_problem(ask, node) is not None:
            waits.append(Wait(ask.run_id, "impossible"))
            continue
        open_now = [g for g in free if g not in reserved]
        if ask.indices:
            if all(g in open_now for g in ask.indices):
                gpus = tuple(ask.indices)
            else:
                gpus = ()
                blocked = [g for g in ask.indices if g not in open_now]
        else:
            preferred = sorted(open_now, key=lambda g: g in avoided)  # stable: lowest first, avoided last
            gpus = tuple(sorted(preferred[: ask.count])) if len(open_now) >= ask.count else ()
            blocked = [] if gpus else sorted(on_node - set(open_now))
        if gpus:
            starts.append(Grant(ask.run_id, gpus))
            taken = set(gpus)
            free = [g for g in free if g not in taken]
            holder.update((g, ask.run_id) for g in gpus)
            continue
        ahead = next((reserved[g] for g in blocked if g in reserved), None)
        # "reserved": enough GPUs are free, but a run ahead keeps them; "busy": they are held
        only_reserved = all(g in free for g in ask.indices) if ask.indices else len(free) >= ask.count
        if only_reserved:
            waits.append(Wait(ask.run_id, "reserved", (), ahead))
        else:
            held_by = tuple(dict.fromkeys(holder[g] for g in blocked if g in holder))
            waits.append(Wait(ask.run_id, "busy", held_by, ahead))
        for gpu in ask.indices or open_now:
            reserved.setdefault(gpu, ask.run_id)
    return Decision(tuple(starts), tuple(waits), reserved, tuple(free))


GUEST = ""  # the id of a chat's ask: never a run's (run ids are never empty)


def guest_gpu(node: Sequence[int], held: Mapping[str, Sequence[int]], queue: Sequence[Ask]) -> tuple[int | None, Wait | None]:
    """The GPU a chat server may take now: the one a 1-GPU run queued behind all of `queue`
    would be given (free, not held by a live run nor kept for a queued one, nor given to a
    queued run that starts now); else None and why it would wait (busy: `held_by` names the
    runs holding GPUs, queued runs that start now included; reserved: `behind` names the
    queued run they are kept for)."""
    decision = decide(node, held, [*queue, Ask(GUEST)])
    grant = next((g for g in decision.start if g.run_id == GUEST), None)
    if grant is not None:
        return grant.gpus[0], None
    return None, next(w for w in decision.waiting if w.run_id == GUEST)


__all__ = ["GUEST", "MAX_GPUS", "MAX_QUEUED", "Ask", "Decision", "Grant", "NodeView", "SlotsError", "Wait", "ask_problem", "cpu_slots", "decide", "guest_gpu", "node_gpu_addresses", "node_gpus"]
