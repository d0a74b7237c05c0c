"""What the Chat tab shows, in the page's language: decided here, drawn by ui/chat_tab.py."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from backend.charts import memory_figure
from backend.i18n import translate as t
from backend.view import memory_chart_names

if TYPE_CHECKING:
    from backend.runs import RunState
    from backend.service.chat_desk import ChatDesk, ChatStatus


def run_choices(runs: list[RunState]) -> list[tuple[str, str]]:
    return [(f"{run.name} · {run.id}" if run.name and run.name not in run.id else run.id, run.id) for run in runs]


def checkpoint_choices(checkpoints: list[str], locale: str = "en") -> list[tuple[str, str]]:
    """The final adapter ("") first, then each checkpoint-N."""
    return [(t("chat.final_adapter", locale), ""), *((name, name) for name in checkpoints)]


def _what(status: ChatStatus, locale: str) -> str:
    checkpoint = status.checkpoint or t("chat.final_adapter", locale)
    return t(f"chat.what.{status.mode}", locale, checkpoint=checkpoint)


def status_markdown(status: ChatStatus, locale: str = "en") -> str:
    """The status line (and the findings, when refused or failed)."""
    if status.state == "loading":
        stages = ", ".join(f"{t(f'chat.which.{which}', locale)} · {t(f'chat.stage.{stage}', locale)}" for which, stage in status.stages.items())
        return "… " + t("chat.status.loading", locale, what=_what(status, locale), run_id=status.run_id, stages=stages, seconds=f"{status.elapsed_s:.0f}")
    if status.state == "ready":
        return "✓ " + t("chat.status.ready", locale, what=_what(status, locale), run_id=status.run_id, seconds=f"{status.load_s or 0:.1f}")
    if status.state in ("refused", "failed"):
        lines = ["✗ " + t(f"chat.status.{status.state}", locale)]
        for finding in status.findings:
            problem, fix = finding.text(locale)
            lines.append(f"- {shown(problem)} {shown(fix)}")  # a log line may hold anything
        return "\n".join(lines)
    if status.state == "idle_stopped":
        return "💤 " + t("chat.status.idle_stopped", locale, minutes=f"{status.idle_minutes:g}")
    if status.state in ("died", "stopped"):
        return t(f"chat.status.{status.state}", locale)
    return t("chat.status.unloaded", locale)


def error_text(message_id: str, params: dict | None = None, locale: str = "en") -> str:
    return t(message_id, locale, **(params or {}))


def shown(text: str) -> str:
    """Text as the chat shows it. Gradio's Chatbot renders a message as HTML (sanitized, but
    `<img src=x>` or `<b>` would still be elements): a user's or a model's words are text,
    so they are escaped and shown exactly as typed."""
    return html.escape(text, quote=False)


def history_for_model(history: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The chat's messages as the model was told them (the inverse of `shown`)."""
    out = []
    for message in history or []:
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            out.append({**message, "content": html.unescape(message["content"])})
    return out


def memory_chart(desk: ChatDesk, locale: str = "en") -> dict:
    """The chat server's memory, drawn by the run panel's chart code."""
    series = desk.memory_series()
    for one in series:
        if one.source == "process":
            one.label = t("chat.memory_series", locale)
    return memory_figure(series, t("chat.memory_title", locale), names=memory_chart_names(locale))


__all__ = ["checkpoint_choices", "error_text", "history_for_model", "memory_chart", "run_choices", "shown", "status_markdown"]
