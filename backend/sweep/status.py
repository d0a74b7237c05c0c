"""`python app.py status --sweep ID` (backend/runs_cli.py hands it here): a sweep's runs ranked,
best first, as text or JSON. Apart from backend/sweep/cli.py so that runs_cli, which calls it,
and the sweep command, which uses runs_cli's helpers, do not import each other."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

from backend.i18n import translate
from backend.sweep.desk import SweepView

EXIT_OK, EXIT_USAGE = 0, 2


def values_text(values: tuple[tuple[str, Any], ...]) -> str:
    from backend.sweep.spec import value_tag

    return " ".join(f"{name}={value_tag(value)}" for name, value in values)


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def sweep_status(runs_dir: Any, sweep_id: str, metric: str, as_json: bool, locale: str, out: TextIO, err: TextIO) -> int:
    """`status --sweep ID`: the sweep's runs ranked best first (or its JSON)."""
    from backend.service import RocBoard
    from backend.sweep.record import SweepNotFound
    from backend.sweep.spec import SweepRefused

    board = RocBoard(Path(runs_dir))
    try:
        view = board.sweeps.view(sweep_id, metric, locale)
    except SweepNotFound:
        err.write(translate("sweep.cli.not-found", locale, id=str(sweep_id)[:80]) + "\n")
        return EXIT_USAGE
    except SweepRefused as refused:
        err.write(translate("sweep.cli.refused", locale, reason=refused.message.text(locale)) + "\n")
        return EXIT_USAGE
    if as_json:
        out.write(json.dumps(view.to_json(), indent=2, ensure_ascii=False) + "\n")
        return EXIT_OK
    print_view(view, locale, out)
    return EXIT_OK


def print_view(view: SweepView, locale: str, out: TextIO) -> None:
    """The ranked runs as lines: the header, one line per run, the best run, whether it ended."""
    out.write(translate("sweep.cli.header", locale, id=view.record.id, metric=translate(f"sweep.metric.{view.metric}", locale), runs=len(view.rows)) + "\n")
    for place, row in enumerate(view.rows, 1):
        state = translate(f"state.{row.state}", locale) if row.state != "deleted" else translate("sweep.state.deleted", locale)
        rate = "-" if row.tokens_per_s is None else f"{row.tokens_per_s:,.0f}"
        time_s = "-" if row.duration_s is None else f"{row.duration_s:.0f}"
        out.write(
            translate("sweep.cli.row", locale, place=place, run=row.run_id, values=values_text(row.values), state=state, metric=_number(row.metric(view.metric)), rate=rate, seconds=time_s)
            + "\n"
        )
    if view.best_run_id:
        out.write(translate("sweep.cli.best", locale, run=view.best_run_id) + "\n")
    if view.finished:
        out.write(translate("sweep.cli.finished", locale) + "\n")



__all__ = ["print_view", "sweep_status", "values_text"]
