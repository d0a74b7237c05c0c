"""The node as the Runs tab shows it (issue 30 §1): one row per GPU (or CPU slot) with the run
holding it (or the chat server using it), its VRAM and busy % from the app's latest telemetry
readings, then each queued run and why it waits. Pure: it is given the allocator's view
(RunManager.node_view), the readings keyed by the node's GPU index, and the runs' names; it
reads nothing and starts nothing.

Every run name is the user's text: escaped (backend/view.escape_markdown), ids in code spans."""

from __future__ import annotations

from collections.abc import Mapping

from backend.i18n import translate
from backend.runs.gpu_slots import NodeView
from backend.telemetry.base import Reading
from backend.view import code_span, escape_markdown

GIB = 1024**3
MAX_WAITING_SHOWN = 50  # a longer queue is summed up in one line


def _run(run_id: str, names: Mapping[str, str]) -> str:
    name = names.get(run_id, "")
    return f"{escape_markdown(name, 120)} ({code_span(run_id, 120)})" if name else code_span(run_id, 120)


def _vram(reading: Reading | None) -> str:
    if reading is None or reading.used_bytes is None:
        return "—"
    if reading.total_bytes:
        return f"{reading.used_bytes / GIB:.1f} / {reading.total_bytes / GIB:.1f} GiB"
    return f"{reading.used_bytes / GIB:.1f} GiB"


def _busy(reading: Reading | None) -> str:
    if reading is None or reading.util_pct is None:
        return "—"
    return f"{reading.util_pct:.0f}%"


def node_markdown(view: NodeView, readings: Mapping[int, Reading], names: Mapping[str, str], locale: str = "en") -> str:
    """The node panel: a table of the node's GPUs (each by the index a run's
    HIP_VISIBLE_DEVICES and the form's GPU fields use, and its PCI address where known: the
    name rocm-smi --showbus and amd-smi give it, whose row numbers may differ; who holds each, VRAM used / total, busy %;
    "—" where no reading is at hand), then the queued runs: those that start at the queue's
    next step, and each waiting one with why (its GPUs held and by whom, kept for a run ahead,
    or never possible on this node)."""
    lines = [
        translate("node.heading", locale, count=len(view.node)),
        "",
        "| " + " | ".join(translate(f"node.col.{column}", locale) for column in ("gpu", "run", "vram", "busy")) + " |",
        "|---|---|---|---|",
    ]
    reserved = view.decision.reserved
    for gpu in view.node:
        holder = view.holder(gpu)
        if holder is not None:
            who = _run(holder, names)
        elif gpu in view.chat:  # a chat server there: it lets go when a run is given this GPU
            who = translate("node.chat", locale, run=_run(view.chat[gpu], names))
        elif gpu in reserved:
            who = translate("node.kept_for", locale, run=_run(reserved[gpu], names))
        else:
            who = translate("node.free", locale)
        reading = readings.get(gpu)
        address = view.addresses.get(gpu)  # rocm-smi's and amd-smi's rows are matched by it, not by number
        label = f"{gpu} · {code_span(address, 64)}" if address else str(gpu)
        lines.append(f"| {label} | {who} | {_vram(reading)} | {_busy(reading)} |")
    decision = view.decision
    queued = [translate("node.starts", locale, run=_run(grant.run_id, names), gpus=", ".join(map(str, grant.gpus))) for grant in decision.start]
    for wait in decision.waiting:
        run = _run(wait.run_id, names)
        if wait.reason == "impossible":
            queued.append(translate("node.wait_impossible", locale, run=run))
        elif wait.reason == "reserved":
            if wait.behind:
                queued.append(translate("node.wait_reserved", locale, run=run, ahead=_run(wait.behind, names)))
            else:
                queued.append(translate("node.wait_reserved_ahead", locale, run=run))
        elif wait.held_by:
            queued.append(translate("node.wait_busy", locale, run=run, holders=", ".join(_run(h, names) for h in wait.held_by)))
        else:
            queued.append(translate("node.wait_busy_unknown", locale, run=run))
    if queued:
        lines += ["", translate("node.waiting_heading", locale), ""]
        lines += [f"- {line}" for line in queued[:MAX_WAITING_SHOWN]]
        if len(queued) > MAX_WAITING_SHOWN:
            lines.append(f"- {translate('node.more_waiting', locale, count=len(queued) - MAX_WAITING_SHOWN)}")
    return "\n".join(lines)


def readings_on_node(gpus: tuple[int, ...], readings: list[Reading]) -> dict[int, Reading]:
    """A run's sampler readings (indexed as the run sees its GPUs: 0..n-1 after its
    HIP_VISIBLE_DEVICES) keyed by the node's GPU index; process-memory readings (a CPU run)
    and indices beyond the run's GPUs are left out."""
    out: dict[int, Reading] = {}
    for reading in readings:
        if reading.source == "process" or reading.node or not 0 <= reading.gpu < len(gpus):
            continue
        out.setdefault(gpus[reading.gpu], reading)
    return out


__all__ = ["node_markdown", "readings_on_node"]
