"""Log ingest: what one poll of a growing trainer_log.jsonl costs, as the run gets longer.

1. One poll that finds 10 new lines (JsonlTail.poll + parse_metric + MetricSeries.extend,
   what RunMonitor does for the loss log) on a log of 1,000 and of 100,000 lines.
   Goal: the 100k poll costs at most 1.5x the 1k poll.
2. The same new lines found by re-reading and re-parsing the whole 100k file, as
   LlamaBoard does every 2 s (control.get_trainer_info reads the file, json.loads every line
   and draws a matplotlib figure of all points). Goal: RocBoard's poll at least 100x cheaper
   than the bare re-read (json.loads of every line, no figure). LlamaBoard's own function,
   figure and PNG included, is timed too.
3. Redrawing the loss chart (loss_figure + the JSON payload the page ships) of a run that
   logged 1k, 10k and 100k points: the series keeps its drawn points up to date as points
   arrive (backend/runs/logs.py DrawnCurve), so a redraw reads those only; and 10 new points
   appended to the 100k series, then the chart redrawn. Goal: at most 10 ms at 100k, flat
   (at most 1.5x) from 1k to 100k. For comparison, the same chart computed from scratch from
   a list of the series' points (what a caller holding only the points pays).

`python -m bench.bench_ingest [--quick]`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import Workspace, bench_arguments, conditions, conditions_line, goal_row, show, spread, trainer_log_line

SMALL_LINES = 1_000
MEDIUM_LINES = 10_000
LARGE_LINES = 100_000
NEW_LINES_PER_POLL = 10


def write_log(path: Path, lines: int) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(trainer_log_line(step, lines * 2) for step in range(1, lines + 1))


class LossLogReader:
    """The loss-log half of RunMonitor.poll: tail, parse, extend the series."""

    def __init__(self, path: Path):
        from backend.runs.logs import JsonlTail, MetricSeries

        self.tail = JsonlTail(path)
        self.series = MetricSeries()
        self.steps_read: list[int] = []  # every step handed to the series, in order

    def poll(self) -> int:
        from backend.runs.logs import parse_metric

        points = [p for p in map(parse_metric, self.tail.poll()) if p is not None]
        self.series.extend(points)
        self.steps_read.extend(p.step for p in points)
        return len(points)

    def read_history(self) -> None:
        """The whole file, as a tab that first shows the run reads it (the tail reads a
        bounded chunk per poll, so a long history takes several)."""
        while self.poll():
            pass


def time_polls(path: Path, lines: int, repeats: int) -> dict[str, Any]:
    """Median cost of a poll that finds 10 new lines, on a log of `lines` lines."""
    write_log(path, lines)
    reader = LossLogReader(path)
    reader.read_history()  # once, when a tab first shows the run
    next_step = lines + 1
    durations, found = [], []
    with open(path, "a", encoding="utf-8") as log:
        for _ in range(repeats):
            log.write("".join(trainer_log_line(step, lines * 2) for step in range(next_step, next_step + NEW_LINES_PER_POLL)))
            log.flush()
            next_step += NEW_LINES_PER_POLL
            started = time.perf_counter()
            found.append(reader.poll())
            durations.append(time.perf_counter() - started)
    idle = []
    for _ in range(repeats):
        started = time.perf_counter()
        reader.poll()
        idle.append(time.perf_counter() - started)
    return {
        "lines": lines,
        "file_mib": path.stat().st_size / 2**20,
        "poll_10_new": spread(durations),
        "poll_nothing_new": spread(idle),
        "points_found_per_poll": sorted(set(found)),
        "series_points_after": len(reader.series.points),
        # Each line reached the series once, in order. (The series itself keeps at most
        # logs.MAX_POINTS, thinning the older ones, so its length is not the measure.)
        "series_complete": reader.steps_read == list(range(1, lines + repeats * NEW_LINES_PER_POLL + 1)),
    }


def full_reread(path: Path) -> int:
    """Every line read and parsed again: LlamaBoard's way of finding what is new."""
    from backend.runs.logs import parse_metric

    with open(path, encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle]
    return len([p for p in map(parse_metric, records) if p is not None])


def time_calls(call: Callable[[], Any], repeats: int) -> list[float]:
    durations = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        durations.append(time.perf_counter() - started)
    return durations


def time_llamaboard_refresh(path: Path, repeats: int) -> dict[str, Any]:
    """LlamaBoard's own refresh (llamafactory.webui.control.get_trainer_info) on the same
    file: read, json.loads every line, matplotlib figure of every point, and the image
    Gradio encodes when gr.Plot is built from the figure."""
    import os

    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    started = time.perf_counter()
    from llamafactory.webui.control import get_trainer_info

    import_s = time.perf_counter() - started
    output_dir = str(path.parent)
    durations = time_calls(lambda: get_trainer_info("en", output_dir, True), repeats)
    return {"import_s": import_s, "get_trainer_info": spread(durations)}


def time_chart(path: Path, repeats: int) -> dict[str, Any]:
    """Redraws of the loss chart of the run whose log is `path`, read the way a monitor
    reads it: from the series (its drawn points kept up to date) and, for comparison, from
    a plain list of the points the series keeps (computed from scratch)."""
    from backend.charts import loss_figure
    from ui.widgets import plot

    reader = LossLogReader(path)
    reader.read_history()
    series = reader.series
    points = list(series.points)
    figure = loss_figure(series)
    payload = plot(figure)
    return {
        "logged_points": len(reader.steps_read),
        "series_points": len(points),
        "displayed_points": len(figure["data"][0]["x"]),
        "loss_figure": spread(time_calls(lambda: loss_figure(series), repeats)),
        "figure_and_json": spread(time_calls(lambda: plot(loss_figure(series)), repeats)),
        "json_kib": len(payload.plot) / 1024 if payload is not None else 0,
        "from_list_figure_and_json": spread(time_calls(lambda: plot(loss_figure(points)), max(1, repeats // 3))),
    }


def time_append_and_redraw(path: Path, repeats: int) -> dict[str, Any]:
    """10 new points appended to the series of a 100k-point run, then the chart redrawn
    (figure + JSON): what each poll that finds new lines costs the chart. A merge of the
    drawn buckets lands on some of them (amortised O(1) a point): the max shows it."""
    from backend.charts import loss_figure
    from backend.runs.logs import parse_metric
    from ui.widgets import plot

    reader = LossLogReader(path)
    reader.read_history()
    series = reader.series
    next_step = series.points[-1].step + 1
    logged = len(reader.steps_read)
    batches = []
    for _ in range(repeats):
        lines = [trainer_log_line(step, 10**7) for step in range(next_step, next_step + NEW_LINES_PER_POLL)]
        batches.append([point for line in lines if (point := parse_metric(json.loads(line))) is not None])
        next_step += NEW_LINES_PER_POLL
    durations = []
    for batch in batches:
        started = time.perf_counter()
        series.extend(batch)
        plot(loss_figure(series))
        durations.append(time.perf_counter() - started)
    return {"logged_points": logged, "append_10_and_redraw": spread(durations)}


def run(quick: bool = False) -> dict[str, Any]:
    poll_repeats = 50 if quick else 300
    reread_repeats = 3 if quick else 7
    llamaboard_repeats = 1 if quick else 3
    chart_repeats = 10 if quick else 50
    append_repeats = 50 if quick else 300
    with Workspace("bench-ingest-") as workdir:
        small_dir, large_dir = workdir / "small", workdir / "large"
        small_dir.mkdir()
        large_dir.mkdir()
        # Interleaved small/large rounds, so a change in the machine's load hits both alike.
        rounds = 3
        small_rounds, large_rounds = [], []
        for round_index in range(rounds):
            small_rounds.append(time_polls(small_dir / f"trainer_log.{round_index}.jsonl", SMALL_LINES, poll_repeats // rounds))
            large_rounds.append(time_polls(large_dir / f"trainer_log.{round_index}.jsonl", LARGE_LINES, poll_repeats // rounds))
        large_log = large_dir / "trainer_log.jsonl"
        write_log(large_log, LARGE_LINES)
        reread = time_calls(lambda: full_reread(large_log), reread_repeats)
        chart = time_chart(large_log, chart_repeats)
        append_redraw = time_append_and_redraw(large_log, append_repeats)
        small_log = small_dir / "trainer_log.jsonl"
        write_log(small_log, SMALL_LINES)
        chart_small = time_chart(small_log, chart_repeats)
        medium_log = workdir / "trainer_log.10k.jsonl"
        write_log(medium_log, MEDIUM_LINES)
        chart_medium = time_chart(medium_log, chart_repeats)
        llamaboard = time_llamaboard_refresh(large_log, llamaboard_repeats)
    small = merge_rounds(small_rounds)
    large = merge_rounds(large_rounds)
    ratio_large_small = large["poll_10_new"]["median"] / small["poll_10_new"]["median"]
    reread_summary = spread(reread)
    ratio_reread = reread_summary["median"] / large["poll_10_new"]["median"]
    ratio_llamaboard = llamaboard["get_trainer_info"]["median"] / large["poll_10_new"]["median"]
    redraw_100k = max(chart["figure_and_json"]["median"], append_redraw["append_10_and_redraw"]["median"])
    ratio_chart = chart["figure_and_json"]["median"] / chart_small["figure_and_json"]["median"]
    redraw_met = redraw_100k <= 0.010 and ratio_chart <= 1.5
    result = {
        "name": "ingest",
        "conditions": conditions(),
        "small": small,
        "large": large,
        "full_reread_100k": reread_summary,
        "llamaboard_refresh_100k": llamaboard,
        "chart_100k": chart,
        "chart_10k": chart_medium,
        "chart_1k": chart_small,
        "chart_append_100k": append_redraw,
        "ratio_chart_100k_over_1k": ratio_chart,
        "redraw_met": redraw_met,
        "ratio_100k_over_1k": ratio_large_small,
        "ratio_reread_over_poll": ratio_reread,
        "ratio_llamaboard_over_poll": ratio_llamaboard,
    }
    result["goals"] = [
        goal_row("poll finding 10 new lines, 1k-line log", "-", show(small["poll_10_new"], "µs", 1e6, 1), None),
        goal_row("poll finding 10 new lines, 100k-line log", "-", show(large["poll_10_new"], "µs", 1e6, 1), None),
        goal_row("100k poll / 1k poll", "<= 1.5x", f"{ratio_large_small:.2f}x", ratio_large_small <= 1.5),
        goal_row("re-read + re-parse all 100k lines (LlamaBoard's way, no figure)", "-", show(reread_summary, "ms", 1e3, 0), None),
        goal_row("full re-read / 100k poll", ">= 100x", f"{ratio_reread:,.0f}x", ratio_reread >= 100),
        goal_row("LlamaBoard's refresh (get_trainer_info: re-read + figure + image), 100k lines", "-", show(llamaboard["get_trainer_info"], "s", 1, 2), None),
        *[
            goal_row(
                f"loss chart from {c['logged_points'] // 1000}k logged points (figure + JSON)",
                "-",
                f"{show(c['figure_and_json'], 'ms', 1e3, 2)}; {c['displayed_points']} points drawn, {c['json_kib']:.0f} KiB",
                None,
            )
            for c in (chart_small, chart_medium, chart)
        ],
        goal_row("10 points appended to a 100k series, then the chart redrawn (figure + JSON)", "-", show(append_redraw["append_10_and_redraw"], "ms", 1e3, 2), None),
        goal_row(
            "redraw cost at 100k logged points, flat from 1k to 100k",
            "<= 10 ms; 100k / 1k <= 1.5x",
            f"{redraw_100k * 1e3:.2f} ms; {ratio_chart:.2f}x",
            redraw_met,
        ),
        goal_row("the same chart from scratch, from a list of the series' points (100k logged)", "-", show(chart["from_list_figure_and_json"], "ms", 1e3, 1), None),
    ]
    return result


def merge_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One summary of several rounds' polls (their medians and extremes)."""
    merged = dict(rounds[0])
    merged["series_complete"] = all(r["series_complete"] for r in rounds)
    for key in ("poll_10_new", "poll_nothing_new"):
        medians = [r[key]["median"] for r in rounds]
        merged[key] = {
            "n": sum(r[key]["n"] for r in rounds),
            "median": sorted(medians)[len(medians) // 2],
            "p10": min(r[key]["p10"] for r in rounds),
            "p90": max(r[key]["p90"] for r in rounds),
            "min": min(r[key]["min"] for r in rounds),
            "max": max(r[key]["max"] for r in rounds),
            "round_medians": medians,
        }
    return merged


def report(result: dict[str, Any]) -> str:
    small, large, llamaboard = result["small"], result["large"], result["llamaboard_refresh_100k"]

    def micro(summary: dict[str, float]) -> str:
        return show(summary, "µs", 1e6, 1)

    lines = [
        "Log ingest: one poll of trainer_log.jsonl that finds 10 new lines (tail + parse + extend)",
        f"  {small['lines']:>7,} lines ({small['file_mib']:.1f} MiB): {micro(small['poll_10_new'])}",
        f"  {large['lines']:>7,} lines ({large['file_mib']:.1f} MiB): {micro(large['poll_10_new'])}",
        f"    per-round medians 1k {[round(m * 1e6, 1) for m in small['poll_10_new']['round_medians']]} µs,"
        f" 100k {[round(m * 1e6, 1) for m in large['poll_10_new']['round_medians']]} µs",
        f"    every line read exactly once: {'yes' if small['series_complete'] and large['series_complete'] else 'NO'}",
        f"  100k / 1k: {result['ratio_100k_over_1k']:.2f}x  -> {'OK' if result['ratio_100k_over_1k'] <= 1.5 else 'NOT'} at most 1.5x",
        f"  a poll that finds nothing: 1k {micro(small['poll_nothing_new'])}; 100k {micro(large['poll_nothing_new'])}",
        f"Re-reading and re-parsing all {large['lines']:,} lines (json.loads + parse_metric): {show(result['full_reread_100k'], 'ms', 1e3, 0)}",
        f"  / RocBoard's 100k poll: {result['ratio_reread_over_poll']:,.0f}x  -> {'OK' if result['ratio_reread_over_poll'] >= 100 else 'NOT'} at least 100x",
        "LlamaBoard's refresh on the same file (llamafactory.webui.control.get_trainer_info, every 2 s while training):",
        f"  read + parse + matplotlib figure + image: {show(llamaboard['get_trainer_info'], 's', 1, 2)}"
        f" = {result['ratio_llamaboard_over_poll']:,.0f}x RocBoard's 100k poll",
        "Loss chart redrawn (loss_figure from the series, whose drawn points are kept up to date as points arrive):",
        *[
            f"  {chart['logged_points']:>7,} logged: loss_figure {show(chart['loss_figure'], 'ms', 1e3, 2)};"
            f" figure + JSON payload {show(chart['figure_and_json'], 'ms', 1e3, 2)};"
            f" {chart['displayed_points']} points drawn, {chart['json_kib']:.0f} KiB sent; the series keeps {chart['series_points']:,}"
            for chart in (result["chart_1k"], result["chart_10k"], result["chart_100k"])
        ],
        f"  10 points appended to the {result['chart_append_100k']['logged_points']:,}-point series, then redrawn:"
        f" {show(result['chart_append_100k']['append_10_and_redraw'], 'ms', 1e3, 2)}",
        f"  100k / 1k: {result['ratio_chart_100k_over_1k']:.2f}x  -> {'OK' if result['redraw_met'] else 'NOT'} at most 10 ms at 100k, at most 1.5x 1k's",
        f"  from scratch, from a list of the points the series keeps: 1k {show(result['chart_1k']['from_list_figure_and_json'], 'ms', 1e3, 1)};"
        f" 100k {show(result['chart_100k']['from_list_figure_and_json'], 'ms', 1e3, 1)}",
        f"Conditions: {conditions_line(result['conditions'])}",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run(quick=bench_arguments())))
