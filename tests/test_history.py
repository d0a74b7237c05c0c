"""The runs view: summaries from each run's files, the table rows, the overlay chart,
deleting a run. Run directories are built by hand as LLaMA-Factory lays them out."""

from __future__ import annotations

import json
import os
import re

import pytest

from backend.runs import OUTPUT_DIR, RunStore, history, trainer_log
from backend.runs.history import (
    HISTORY_HEADERS,
    format_duration,
    overlay_figure,
    short_model,
    summaries_table,
    summarize_runs,
)
from backend.runs.logs import TRAINER_LOG
from backend.runs.trainer_log import read_log_tail


def log_text(steps, total, loss=lambda s: 5.0 - s / 100, final=True) -> str:
    lines = [
        json.dumps({"current_steps": s, "total_steps": total, "loss": loss(s), "lr": 1e-4, "epoch": s / 10, "percentage": s / total * 100, "elapsed_time": "0:00:01", "remaining_time": "0:00:01"})
        for s in steps
    ]
    if final:  # LLaMA-Factory's last line: the last step again, without a loss
        lines.append(json.dumps({"current_steps": steps[-1], "total_steps": total, "epoch": 1.0, "percentage": 100, "elapsed_time": "0:00:09", "remaining_time": "0:00:00"}))
    return "\n".join(lines) + "\n"


def add_run(store: RunStore, name: str, state: str, log: str | None, **changes) -> str:
    run = store.create(name, "cpu-demo", "/work/main/demo/model", {"config.yaml": "{}\n"})
    if log is not None:
        output = store.run_dir(run.id) / OUTPUT_DIR
        output.mkdir()
        (output / TRAINER_LOG).write_text(log)
    store.update(run.id, state=state, **changes)
    return run.id


@pytest.fixture
def store(tmp_path):
    return RunStore(tmp_path / "runs")


def test_summaries_read_state_and_log_tail(store):
    done = add_run(store, "done", "finished", log_text(list(range(1, 31)), 30), started_at=100.0, ended_at=165.0, exit_code=0)
    fresh = add_run(store, "fresh", "running", None, started_at=1000.0)
    summaries = {s.id: s for s in summarize_runs(store, now=1012.0)}

    s = summaries[done]
    assert (s.name, s.preset, s.state, s.step, s.total_steps, s.exit_code) == ("done", "cpu-demo", "finished", 30, 30, 0)
    assert s.last_loss == pytest.approx(5.0 - 30 / 100)  # the last line with a loss, not the summary line
    assert s.duration_s == pytest.approx(65.0)
    f = summaries[fresh]
    assert (f.step, f.total_steps, f.last_loss) == (None, None, None)
    assert f.duration_s == pytest.approx(12.0)  # still training: up to now
    assert [s.id for s in summarize_runs(store)] == [fresh, done]  # newest first


def test_tail_reads_only_the_end_and_grows_its_window_when_needed(tmp_path, monkeypatch):
    path = tmp_path / TRAINER_LOG
    # 20 000 steps: ~4 MB. Only the end should be read.
    path.write_text(log_text(list(range(1, 20001)), 20000))
    reads = []
    real_open = open
    real_read_window = trainer_log._read_window

    def counting_read_window(handle, start, length):
        data = real_read_window(handle, start, length)
        reads.append(len(data))
        return data

    # Every byte of a log tail is read through _read_window (the file is opened without
    # following links, by descriptor, so builtins.open never sees it).
    monkeypatch.setattr(trainer_log, "_read_window", counting_read_window)
    tail = read_log_tail(path)
    assert (tail.step, tail.total_steps) == (20000, 20000)
    assert tail.last_loss == pytest.approx(5.0 - 20000 / 100)
    assert sum(reads) <= trainer_log.TAIL_BYTES
    assert os.path.getsize(path) > 100 * trainer_log.TAIL_BYTES

    # Cached: the same size and mtime are not read again.
    reads.clear()
    assert read_log_tail(path) == tail
    assert reads == []

    # A tail of lines without loss (e.g. eval lines) makes the window grow until one is found.
    with real_open(path, "a") as handle:
        for step in range(20001, 20400):
            handle.write(json.dumps({"current_steps": step, "total_steps": 20400}) + "\n")
    tail = read_log_tail(path)
    assert (tail.step, tail.last_loss) == (20399, pytest.approx(5.0 - 20000 / 100))
    assert sum(reads) > trainer_log.TAIL_BYTES


def test_tail_of_a_cut_or_garbage_log(tmp_path):
    path = tmp_path / TRAINER_LOG
    path.write_text(log_text([1, 2, 3], 10, final=False) + "not json\n" + '{"current_steps": 4, "tot')
    tail = read_log_tail(path)
    assert (tail.step, tail.total_steps, tail.last_loss) == (3, 10, pytest.approx(4.97))
    assert read_log_tail(tmp_path / "missing.jsonl") == trainer_log.LogTail(None, None, None)


def test_cached_summary_follows_a_growing_log(store):
    run_id = add_run(store, "grows", "running", log_text([1, 2], 10, final=False), started_at=0.0)
    assert summarize_runs(store, now=1.0)[0].step == 2
    path = store.run_dir(run_id) / OUTPUT_DIR / TRAINER_LOG
    with open(path, "a") as handle:
        handle.write(log_text([3], 10, loss=lambda s: float("nan"), final=False))
    summary = summarize_runs(store, now=1.0)[0]
    assert summary.step == 3 and summary.last_loss != summary.last_loss  # NaN, shown as such
    assert summaries_table([summary])[0][HISTORY_HEADERS.index("Last loss")] == "nan"


def test_duration_adds_up_the_attempts_of_a_resumed_run(store):
    run_id = add_run(store, "resumed", "finished", log_text([1, 2], 2), started_at=500.0, ended_at=530.0, attempts=3)
    attempts = store.run_dir(run_id) / "attempts"
    # attempts/2-2: a resume that failed to launch archived attempt 2 again; counted once.
    for name, (start, end) in {"1": (100.0, 160.0), "2": (200.0, 210.0), "2-2": (200.0, 210.0)}.items():
        (attempts / name).mkdir(parents=True)
        (attempts / name / "state.json").write_text(json.dumps({"started_at": start, "ended_at": end}))
    summary = summarize_runs(store, now=9999.0)[0]
    assert summary.duration_s == pytest.approx(60 + 10 + 30)
    assert summaries_table([summary])[0][HISTORY_HEADERS.index("State")] == "finished (attempt 3)"


def test_table_rows_match_the_headers(store):
    add_run(store, "done", "finished", log_text(list(range(1, 31)), 30), started_at=100.0, ended_at=165.0)
    rows = summaries_table(summarize_runs(store))
    assert len(rows) == 1 and len(rows[0]) == len(HISTORY_HEADERS)
    row = dict(zip(HISTORY_HEADERS, rows[0], strict=True))
    assert row["Name"] == "done" and row["Model"] == "demo/model" and row["State"] == "finished"
    assert row["Steps"] == "30 / 30" and row["Last loss"] == "4.7000" and row["Duration"] == "1m 05s"
    assert len(row["Started"]) == len("2026-01-01 00:00")
    assert all(isinstance(cell, (str, int, float)) for cell in rows[0])


@pytest.mark.parametrize("seconds, text", [(None, ""), (0, "0s"), (59.4, "59s"), (61, "1m 01s"), (3600 + 120, "1h 02m")])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize("seconds, text", [(None, ""), (2, "2 秒"), (11, "11 秒"), (65, "1 分 05 秒"), (3600 + 120, "1 小时 02 分")])
def test_format_duration_speaks_chinese(seconds, text):
    assert format_duration(seconds, "zh-CN") == text


@pytest.mark.parametrize(
    "model, short",
    [("/work/main/demo/model", "demo/model"), ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B"), ("./m", "./m"), ("/m", "/m")],
)
def test_short_model(model, short):
    assert short_model(model) == short


def test_overlay_has_one_smoothed_line_per_run(store):
    a = add_run(store, "demo", "finished", log_text(list(range(1, 31)), 30))
    b = add_run(store, "demo", "stopped", log_text(list(range(1, 11)), 30, loss=lambda s: 9.0 - s / 10, final=False))
    c = add_run(store, "other", "failed", None)
    figure = overlay_figure(store, [a, b, c, a, "gone-run"])
    lines = figure["data"]
    assert len(lines) == 3  # each asked-for run once; a missing one is said in the title
    assert [line["name"] for line in lines] == [f"demo ({a})", f"demo ({b})", "other"]
    assert lines[0]["x"][:3] == [1, 2, 3] and lines[1]["x"] == list(range(1, 11)) and lines[2]["x"] == []
    # Smoothed: the first value is the first loss, later ones lag a falling loss.
    assert lines[1]["y"][0] == pytest.approx(8.9)
    assert lines[1]["y"][-1] > 9.0 - 10 / 10
    assert len({line["line"]["color"] for line in lines}) == 3
    assert "gone-run" in figure["layout"]["title"]["text"]
    json.dumps(figure)  # plain JSON for the browser


def test_overlay_downsamples_long_runs_and_keeps_the_last_step(store):
    run_id = add_run(store, "long", "finished", log_text(list(range(1, 5001)), 5000, final=False))
    line = overlay_figure(store, [run_id], max_points=300)["data"][0]
    assert len(line["x"]) <= 300 and line["x"][-1] == 5000 and line["x"][0] == 1


def test_overlay_of_nothing_says_so(store):
    figure = overlay_figure(store, [])
    assert figure["data"] == [] and "No loss points" in figure["layout"]["annotations"][0]["text"]


def test_overlay_of_a_resumed_run_draws_each_step_once(store):
    resumed = log_text(list(range(1, 14)), 30) + log_text(list(range(11, 31)), 30, loss=lambda s: 1.0)
    run_id = add_run(store, "resumed", "finished", resumed)
    line = overlay_figure(store, [run_id])["data"][0]
    assert line["x"] == sorted(set(line["x"])) and line["x"][:29] == list(range(1, 30))
    # From step 11 on the curve is the resumed attempt's (loss 1.0), pulled down by it.
    assert line["y"][28] < line["y"][9] and line["y"][28] < 2.0


def test_table_shows_learning_rate_length_dataset_and_best_eval_loss(store):
    log = log_text([1, 2, 3, 4], 4, final=False)
    log += json.dumps({"current_steps": 2, "total_steps": 4, "eval_loss": 2.5, "epoch": 0.5}) + "\n"
    log += json.dumps({"current_steps": 4, "total_steps": 4, "eval_loss": 2.25, "epoch": 1.0}) + "\n"
    run_id = add_run(store, "tuned", "finished", log, started_at=0.0, ended_at=10.0)
    run_dir = store.run_dir(run_id)
    (run_dir / "config.yaml").write_text("learning_rate: 2.0e-05\nnum_train_epochs: 3.0\nmax_steps: 0\ndataset: alpaca_en,my_data\n")
    row = dict(zip(HISTORY_HEADERS, summaries_table(summarize_runs(store))[0], strict=True))
    assert row["Learning rate"] == "2e-05" and row["Epochs / max steps"] == "3 epochs"
    assert row["Dataset"] == "alpaca_en,my_data" and row["Best eval loss"] == "2.2500"
    assert dict(zip(HISTORY_HEADERS, summaries_table(summarize_runs(store), "zh-CN")[0], strict=True))["Epochs / max steps"] == "3 轮"

    # max_steps > 0 overrides the epochs; an eval loss appended later is found (the log grew).
    (run_dir / "config.yaml").write_text("learning_rate: 0.0001\nnum_train_epochs: 3.0\nmax_steps: 200\ndataset: demo\n")
    with open(run_dir / OUTPUT_DIR / TRAINER_LOG, "a") as handle:
        handle.write(json.dumps({"current_steps": 5, "total_steps": 4, "eval_loss": 1.5}) + "\n")
        handle.write('{"current_steps": 6, "eval_loss": 0.1')  # still being written: not read yet
    row = dict(zip(HISTORY_HEADERS, summaries_table(summarize_runs(store))[0], strict=True))
    assert row["Learning rate"] == "0.0001" and row["Epochs / max steps"] == "200 steps" and row["Dataset"] == "demo"
    assert row["Best eval loss"] == "1.5000"


def test_settings_fall_back_to_the_form_and_a_run_without_eval_has_no_best(store):
    run_id = add_run(store, "old", "finished", log_text([1, 2], 2), started_at=0.0, ended_at=1.0)
    run_dir = store.run_dir(run_id)
    (run_dir / "config.yaml").write_text("- not a mapping\n")
    (run_dir / "form.json").write_text(json.dumps({"learning_rate": 0.001, "num_train_epochs": 1, "max_steps": 0, "dataset": "demo_data"}))
    row = dict(zip(HISTORY_HEADERS, summaries_table(summarize_runs(store))[0], strict=True))
    assert (row["Learning rate"], row["Epochs / max steps"], row["Dataset"], row["Best eval loss"]) == ("0.001", "1 epochs", "demo_data", "")


def test_history_headers_are_translated_in_both_locales():
    from backend.runs.history import HISTORY_COLUMNS, history_headers

    assert history_headers("en") == list(HISTORY_HEADERS) and len(HISTORY_COLUMNS) == len(HISTORY_HEADERS)
    zh = history_headers("zh-CN")
    assert "学习率" in zh and "数据集" in zh and len(set(zh)) == len(zh)


def test_cells_sort_by_numbers_where_the_table_shows_numbers(store):
    from backend.runs.history import summaries_sort_values

    add_run(store, "done", "finished", log_text(list(range(1, 31)), 30), started_at=100.0, ended_at=165.0)
    summaries = summarize_runs(store)
    shown, values = summaries_table(summaries), summaries_sort_values(summaries)
    assert len(values[0]) == len(shown[0]) == len(HISTORY_HEADERS)
    value = dict(zip(HISTORY_HEADERS, values[0], strict=True))
    assert value["Steps"] == 30 and value["Last loss"] == pytest.approx(4.7) and value["Duration"] == pytest.approx(65.0)
    assert value["Name"] is None and value["State"] is None  # the shown words sort right
    # A NaN loss is shown as "nan" but sorts as no value (JSON has no NaN).
    nan = history.RunSummary(**{**summaries[0].__dict__, "last_loss": float("nan")})
    assert summaries_sort_values([nan])[0][HISTORY_HEADERS.index("Last loss")] is None


# --- the Runs tab: its columns, a run's details, the delete question, the queues (issue 27) ---


def test_the_table_shows_its_columns_and_the_details_every_column_escaped(store):
    from backend.runs.history import TABLE_COLUMNS, history_headers
    from backend.view import run_details_markdown

    run_id = add_run(store, "<img src=x onerror=alert(1)>", "finished", log_text(range(1, 31), 30), attempts=2, started_at=0.0, ended_at=75.0)
    (store.run_dir(run_id) / "config.yaml").write_text("dataset: '[x](javascript:alert(1))'\nlearning_rate: 0.0002\nmax_steps: 30\n")
    summaries = summarize_runs(store)
    headers = history_headers("zh-CN", TABLE_COLUMNS)
    row = dict(zip(headers, summaries_table(summaries, "zh-CN", TABLE_COLUMNS)[0], strict=True))
    assert list(row) == ["运行", "名称", "状态", "运行位置", "最新损失", "最佳验证损失", "分数（BLEU-4 · ROUGE-L）", "时长", "开始时间"]
    assert row["状态"] == "已完成（第 2 次尝试）" and row["时长"] == format_duration(75, "zh-CN")

    details = run_details_markdown(summaries, [run_id, "no-such-run", run_id], "en")
    assert details.count(f"`{run_id}`") == 1  # each chosen run once; an unknown one left out
    for label, value in (("Preset", "cpu-demo"), ("Learning rate", "0.0002"), ("Epochs / max steps", "30 steps"), ("Steps", "30 / 30"), ("Kind", "training")):
        assert f"| {label} | {value} |" in re.sub(r"\\(.)", r"\1", details), (label, details)  # as read, escapes off
    assert "<img" not in details and "](javascript" not in details  # user text shown as text
    assert run_details_markdown(summaries, ["no-such-run"], "en") == ""


def test_the_delete_question_says_one_run_or_several():
    from backend.view import delete_confirm_markdown

    assert delete_confirm_markdown(["a"], "en") == "Delete run `a`? This removes its directory, its checkpoints and its adapter."
    assert delete_confirm_markdown(["a", "b"], "en") == "Delete these 2 runs: `a`, `b`? This removes their directories, checkpoints and adapters."
    assert delete_confirm_markdown(["a"], "zh-CN").startswith("删除运行 `a`？这会删除它的目录")
    assert delete_confirm_markdown(["a", "b"], "zh-CN").startswith("删除这 2 个运行：`a`、`b`？这会删除它们的目录")


def test_the_slurm_queue_shows_where_slurm_is_set_up_or_a_run_used_it(tmp_path):
    from backend.service import RocBoard
    from backend.slurm.client import SlurmClient

    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("sbatch", "squeue", "scontrol", "scancel"):
        (tools / tool).write_text("#!/bin/sh\nexit 0\n")
        (tools / tool).chmod(0o755)
    conf = tmp_path / "slurm.conf"
    assert not SlurmClient(env={"PATH": str(tmp_path / "none")}).configured()  # no commands
    assert not SlurmClient(env={"PATH": str(tools), "SLURM_CONF": str(conf)}).configured()  # no conf
    conf.write_text("ClusterName=test\n")
    assert SlurmClient(env={"PATH": str(tools), "SLURM_CONF": str(conf)}).configured()

    board = RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports")
    board.run_manager.slurm.client = SlurmClient(env={"PATH": str(tmp_path / "none")})
    queues = board.queue_view("en")
    assert (queues.queued, queues.slurm, queues.slurm_shown) == ([], "", False)
    assert "No run is queued here." in queues.local
    run_id = add_run(board.store, "on-slurm", "finished", None, executor="slurm", job_id="7")
    queues = board.queue_view("zh-CN")
    assert queues.slurm_shown and "Slurm（它自己的队列）" in queues.slurm and run_id not in queues.slurm  # it waits no more
