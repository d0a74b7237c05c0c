"""What the page shows, as text and HTML, computed from snapshots and findings.

Kept out of ui/ so the widgets only wire events to these functions, and so the
wording can be tested (and translated) without a browser.
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass

from backend.findings import Finding
from backend.service import RunSnapshot

# Which form field a config key's finding belongs next to.
KEY_TO_FIELD = {
    "model_name_or_path": "model_path",
    "per_device_train_batch_size": "batch_size",
    "gradient_accumulation_steps": "grad_accum",
    "bf16": "precision",
    "fp16": "precision",
    "dataset": "dataset",
    "datasets": "dataset",
}

STATE_BADGES = {
    "starting": ("#6b7280", "starting"),
    "running": ("#2563eb", "running"),
    "finished": ("#16a34a", "finished"),
    "failed": ("#dc2626", "failed"),
    "stopped": ("#d97706", "stopped"),
}


def field_for(key: str) -> str:
    return KEY_TO_FIELD.get(key, key)


def field_messages(findings: list[Finding], fields: tuple[str, ...]) -> dict[str, str]:
    """The message to show next to each form field (empty where nothing is wrong)."""
    messages: dict[str, list[str]] = {name: [] for name in fields}
    for finding in findings:
        name = field_for(finding.key)
        if name in messages:
            mark = "⚠" if finding.severity == "problem" else "ℹ"
            messages[name].append(f"{mark} {finding.problem} {finding.fix}")
    return {name: " ".join(lines) for name, lines in messages.items()}


def findings_markdown(findings: list[Finding]) -> str:
    if not findings:
        return ""
    lines = []
    for f in findings:
        label = "Problem" if f.severity == "problem" else "Warning"
        lines.append(f"- **{label}** `{f.key}`: {f.problem} **Fix:** {f.fix}")
    return "\n".join(lines)


@dataclass(frozen=True)
class Progress:
    step: int
    total: int
    percent: float
    elapsed: str
    remaining: str
    throughput: float | None


def wall_time(snapshot: RunSnapshot, now: float | None = None) -> str:
    """Time since the trainer started (model loading included), as H:MM:SS."""
    run = snapshot.run
    if run.started_at is None:
        return ""
    end = run.ended_at if run.ended_at is not None else (time.time() if now is None else now)
    seconds = max(0, int(end - run.started_at))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def progress_of(snapshot: RunSnapshot, now: float | None = None) -> Progress | None:
    latest = snapshot.points[-1] if snapshot.points else None
    if latest is None:
        return None
    total = max(latest.total_steps, 1)
    percent = latest.percentage if latest.percentage is not None else 100.0 * latest.step / total
    throughput = next((p.throughput for p in reversed(snapshot.points) if p.throughput), None)
    return Progress(latest.step, latest.total_steps, float(percent), wall_time(snapshot, now), latest.remaining, throughput)


def progress_html(snapshot: RunSnapshot | None) -> str:
    progress = progress_of(snapshot) if snapshot else None
    if progress is None:
        waiting = snapshot is not None and snapshot.run.active
        text = "Loading the model and data; the first step is on its way…" if waiting else "No run yet."
        return _bar(0.0, text)
    parts = [f"Step {progress.step} / {progress.total}", f"{progress.percent:.0f} %"]
    if progress.elapsed:
        parts.append(f"elapsed {progress.elapsed}")
    if snapshot is not None and snapshot.run.active and progress.remaining:
        parts.append(f"ETA {progress.remaining}")
    if progress.throughput:
        parts.append(f"{progress.throughput:,.0f} tokens/s")
    return _bar(progress.percent, " · ".join(parts))


def _bar(percent: float, text: str) -> str:
    width = max(0.0, min(100.0, percent))
    return (
        f'<div class="rb-progress" role="progressbar" aria-valuenow="{width:.0f}" aria-valuemin="0" aria-valuemax="100">'
        f'<div class="rb-progress-track"><div class="rb-progress-fill" style="width:{width:.1f}%"></div></div>'
        f'<div class="rb-progress-text">{html.escape(text)}</div></div>'
    )


def status_markdown(snapshot: RunSnapshot | None, cause: str = "", fix: str = "") -> str:
    if snapshot is None:
        return "**Status:** idle — fill the form and press Start."
    run = snapshot.run
    _, word = STATE_BADGES.get(run.state, ("", run.state))
    lines = [f"**Status: {word}** — run `{run.id}`"]
    if run.state == "failed":
        code = "unknown" if run.exit_code is None else str(run.exit_code)
        lines.append(f"Exit code {code}. {run.stop_reason}".strip())
        if cause:
            lines.append(f"**Cause:** {cause}")
        if fix:
            lines.append(f"**Fix:** {fix}")
    elif run.state == "stopped":
        lines.append(run.stop_reason or "Stopped.")
        if snapshot.has_adapter:
            lines.append("The adapter saved at the stop can be downloaded.")
    elif run.state == "finished":
        lines.append("Training finished." + (" The adapter is ready to download." if snapshot.has_adapter else ""))
    if snapshot.garbage_lines:
        lines.append(f"({snapshot.garbage_lines} unreadable line(s) in the trainer log were skipped.)")
    return "  \n".join(lines)


PROGRESS_CSS = """
.rb-progress-track { background: #e5e7eb; border-radius: 6px; height: 14px; overflow: hidden; }
.rb-progress-fill { background: #ed1c24; height: 100%; transition: width 0.4s; }
.rb-progress-text { margin-top: 4px; font-size: 0.95em; }
"""
