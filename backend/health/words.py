"""A run's health alerts in words, in the page's language: the run panel's lines (Markdown),
the runs table's mark and `app.py status`'s (plain text). Everything is a message id of
`health.*` (backend/i18n/locales/*.yaml) filled with the alert's figures."""

from __future__ import annotations

from pathlib import Path

from backend.health import HealthAlert
from backend.health.record import read_alerts
from backend.i18n import translate


def alert_text(alert: HealthAlert, ended: float | None, locale: str = "en") -> str:
    """What was seen and whether it is over, plain text (one line)."""
    seen = alert.message().text(locale)
    state = translate("health.ended", locale, seconds=f"{max(0.0, ended - alert.at):.0f}") if ended is not None else translate("health.still", locale)
    return translate("health.line", locale, kind=translate(f"health.kind.{alert.kind}", locale), seen=seen, state=state)


def alerts_markdown(run_dir: Path, locale: str = "en") -> str:
    """The run panel's health lines: each alert with its fix; "" when none was recorded."""
    from backend.view import escape_markdown

    alerts = read_alerts(run_dir)
    if not alerts:
        return ""
    lines = [f"⚠ **{translate('health.title', locale)}**"]
    for alert, ended in alerts:
        lines.append(f"- {escape_markdown(alert_text(alert, ended, locale), limit=2000)}  \n  {alert.fix().text(locale)}")
    return "\n".join(lines)


def table_mark(run_dir: Path, state_words: str, locale: str = "en") -> str:
    """The runs table's state cell with the count of health alerts, when there are any."""
    count = len(read_alerts(run_dir))
    return translate("health.runs_mark", locale, state=state_words, count=count) if count else state_words


def status_lines(run_dir: Path, locale: str = "en") -> list[dict[str, object]]:
    """The alerts as `app.py status --json` gives them: kind, GPU, times, words and fix."""
    return [
        {
            "kind": alert.kind, "node": alert.node, "gpu": alert.gpu, "since": alert.since, "at": alert.at, "ended": ended,
            "text": alert_text(alert, ended, locale), "fix": alert.fix().text(locale).replace("`", ""),
        }
        for alert, ended in read_alerts(run_dir)
    ]  # fmt: skip


def status_mark(run_dir: Path, locale: str = "en") -> str:
    """`app.py status`'s mark on a run's line: how many alerts and the latest, or ""."""
    alerts = read_alerts(run_dir)
    if not alerts:
        return ""
    last, ended = alerts[-1]
    return translate("health.status_mark", locale, count=len(alerts), last=alert_text(last, ended, locale))


__all__ = ["alert_text", "alerts_markdown", "status_lines", "status_mark", "table_mark"]
