"""What the Sweeps tab shows, rendered here (ui/sweep_tab.py only wires widgets): the spec read
from the tab's boxes, the plan (run count and cost before Start), the ranked table, refusals.
Every value shown is escaped (run names are sanitized already; values are the form's)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backend.i18n import Message, translate
from backend.sweep.desk import SweepPlan, SweepView
from backend.sweep.spec import MAX_FIELDS, Axis, SweepRefused, SweepSpec, parse_vary, value_tag
from backend.sweep.view import METRICS
from backend.view import code_span, escape_markdown

GIB = 1024**3
SEEDS_BOX_MAX_CHARS = 16


def metric_choices(locale: str) -> list[tuple[str, str]]:
    return [(translate(f"sweep.metric.{name}", locale), name) for name in METRICS]


def spec_from_page(lines: Sequence[Any], seeds: Any) -> SweepSpec:
    """The spec of the tab's boxes: each non-empty box `field=v1,v2`, and the seeds (a whole
    number, empty or 0 for none). SweepRefused for anything else."""
    axes = tuple(parse_vary(str(line)) for line in lines[:MAX_FIELDS] if isinstance(line, str) and line.strip())
    text = "" if seeds is None else str(seeds).strip()
    if text in ("", "0", "0.0"):
        count = 0
    else:
        try:
            number = float(text[:SEEDS_BOX_MAX_CHARS])
            if number != int(number):
                raise ValueError
            count = int(number)
        except (ValueError, OverflowError):
            raise SweepRefused(Message("sweep.seeds-range", seeds=text[:SEEDS_BOX_MAX_CHARS], limit=64)) from None
    return SweepSpec(axes, count)


def added_axes(text: Any) -> tuple[Axis, ...]:
    """The values typed to add to a sweep (`field=v1,v2`; empty: none, which the desk refuses)."""
    return (parse_vary(text),) if isinstance(text, str) and text.strip() else ()


def pick_first() -> SweepRefused:
    return SweepRefused(Message("sweep.tab.pick_first"))


def not_found(sweep_id: Any) -> SweepRefused:
    return SweepRefused(Message("sweep.not-found", id=str(sweep_id)[:80]))


def _values(values: Sequence[tuple[str, Any]]) -> str:
    return ", ".join(f"{name}={value_tag(value)}" for name, value in values)


def plan_markdown(plan: SweepPlan, locale: str) -> str:
    """The runs a sweep would make, each with its cost, and the totals (nothing started)."""
    lines = [translate("sweep.tab.plan", locale, runs=len(plan.runs), gpus=plan.total_gpus, gib=f"{plan.total_device_bytes / GIB:.1f}"), ""]
    lines.append(f"| {translate('sweep.tab.col.run', locale)} | {translate('sweep.tab.col.values', locale)} | GiB | GPU |")
    lines.append("|---|---|---|---|")
    for cost in plan.costs:
        lines.append(f"| {escape_markdown(cost.name)} | {escape_markdown(_values(cost.values))} | {cost.device_bytes / GIB:.1f} | {cost.gpus} |")
    return "\n".join(lines)


def refusal_markdown(refused: SweepRefused, locale: str) -> str:
    text = translate("sweep.cli.refused", locale, reason=refused.message.text(locale))
    findings = getattr(refused, "findings", [])
    extra = [f"- {escape_markdown(finding.text(locale)[0])}" for finding in findings[:5]]
    return "\n".join([escape_markdown(text), *extra])


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def view_markdown(view: SweepView, locale: str) -> str:
    """The sweep's runs ranked, best first: values, state, the metric, tokens/s, time."""
    head = translate("sweep.cli.header", locale, id=view.record.id, metric=translate(f"sweep.metric.{view.metric}", locale), runs=len(view.rows))
    lines = [f"**{escape_markdown(head)}**", ""]
    lines.append(
        "| # | "
        + " | ".join(translate(f"sweep.tab.col.{name}", locale) for name in ("run", "values", "state"))
        + f" | {translate(f'sweep.metric.{view.metric}', locale)} | {translate('sweep.tab.col.rate', locale)} | {translate('sweep.tab.col.seconds', locale)} |"
    )
    lines.append("|---|---|---|---|---|---|---|")
    for place, row in enumerate(view.rows, 1):
        state = translate(f"state.{row.state}", locale) if row.state != "deleted" else translate("sweep.state.deleted", locale)
        rate = "-" if row.tokens_per_s is None else f"{row.tokens_per_s:,.0f}"
        seconds = "-" if row.duration_s is None else f"{row.duration_s:.0f}"
        lines.append(f"| {place} | {code_span(row.run_id)} | {escape_markdown(_values(row.values))} | {state} | {_number(row.metric(view.metric))} | {rate} | {seconds} |")
    lines.append("")
    lines.append(translate("sweep.tab.best", locale, run=code_span(view.best_run_id)) if view.best_run_id else translate("sweep.tab.no-best", locale))
    if view.finished:
        lines.append("")
        lines.append(translate("sweep.cli.finished", locale))
    return "\n".join(lines)


__all__ = ["added_axes", "metric_choices", "not_found", "pick_first", "plan_markdown", "refusal_markdown", "spec_from_page", "view_markdown"]
