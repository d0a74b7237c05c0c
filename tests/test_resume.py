"""Resume: which checkpoint, when it is refused, what it rewrites, and that the curve a user
sees afterwards has every step once. Run directories are built by hand, laid out as
LLaMA-Factory 0.9.5 and transformers 5.6 write them (checked against real runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from backend.runs import CONFIG_FILE, LOG_FILE, OUTPUT_DIR, RunStore
from backend.runs.logs import TRAINER_LOG, JsonlTail, MetricSeries, parse_attempt, parse_curve_records
from backend.runs.resume import (
    ATTEMPTS_DIR,
    Refusal,
    ResumePlan,
    ResumeRefused,
    checkpoint_info,
    latest_checkpoint,
    prepare_resume,
    resume_plan,
)

TOTAL = 30


def log_line(step: int, total: int = TOTAL, loss: float | None = None) -> str:
    record = {"current_steps": step, "total_steps": total, "lr": 0.005, "epoch": step / 89, "percentage": round(step / total * 100, 2), "elapsed_time": "0:00:01", "remaining_time": "0:00:02"}
    if loss is not None:
        record["loss"] = loss
    return json.dumps(record) + "\n"


def loss_at(step: int) -> float:
    return 7.0 - step * 0.1


def write_checkpoint(output: Path, step: int, *, weights: bool = True, state: str | None = None, max_steps: int = TOTAL) -> Path:
    path = output / f"checkpoint-{step}"
    path.mkdir(parents=True)
    if weights:
        (path / "adapter_model.safetensors").write_bytes(b"\0" * 64)
        (path / "adapter_config.json").write_text("{}")
    (path / "optimizer.pt").write_bytes(b"\0" * 16)
    history = [{"step": s, "loss": loss_at(s), "learning_rate": 0.005, "epoch": s / 89, "grad_norm": 1.0} for s in range(1, step + 1)]
    text = state if state is not None else json.dumps({"global_step": step, "max_steps": max_steps, "log_history": history})
    (path / "trainer_state.json").write_text(text)
    return path


def make_run(store: RunStore, *, state: str = "stopped", logged: int = 13, checkpoints=(5, 10), final_line: bool = True) -> str:
    """A run as a stop at step `logged` leaves it: log, checkpoints, the saved adapter."""
    config = {
        "model_name_or_path": "/models/tiny",
        "stage": "sft",
        "do_train": True,
        "output_dir": "PLACEHOLDER",
        "save_steps": 5,
        "overwrite_output_dir": True,
        "max_steps": TOTAL,
    }
    run = store.create("demo", "cpu-demo", "/models/tiny", {CONFIG_FILE: yaml.safe_dump(config, sort_keys=False), LOG_FILE: "attempt one output\n"})
    run_dir = store.run_dir(run.id)
    output = run_dir / OUTPUT_DIR
    config["output_dir"] = str(output)
    (run_dir / CONFIG_FILE).write_text(yaml.safe_dump(config, sort_keys=False))
    output.mkdir()
    text = "".join(log_line(s, loss=loss_at(s)) for s in range(1, logged + 1))
    if final_line:
        text += log_line(logged)  # LLaMA-Factory's end-of-training line: same step, no loss
    (output / TRAINER_LOG).write_text(text)
    (output / "running_log.txt").write_text("[INFO] attempt one\n")
    (output / "adapter_model.safetensors").write_bytes(b"\1" * 64)
    for step in checkpoints:
        write_checkpoint(output, step)
    store.update(run.id, state=state, started_at=1000.0, ended_at=1060.0, pid=None, pid_started=None)
    return run.id


def curve(path: Path) -> list:
    series = MetricSeries()
    series.extend(parse_curve_records(JsonlTail(path).poll()))
    return series.points


def append_resumed_trainer(path: Path, from_step: int, to_step: int = TOTAL) -> None:
    """What the resumed trainer appends: steps after the checkpoint, then its end line."""
    with open(path, "a") as handle:
        handle.writelines(log_line(step, loss=loss_at(step) - 0.01) for step in range(from_step + 1, to_step + 1))
        handle.write(log_line(to_step))


@pytest.fixture
def store(tmp_path):
    return RunStore(tmp_path / "runs")


# --- which checkpoint -------------------------------------------------------------------


def test_latest_checkpoint_is_the_newest_complete_one(store):
    run_id = make_run(store, checkpoints=(5, 10))
    output = store.run_dir(run_id) / OUTPUT_DIR
    assert latest_checkpoint(store.run_dir(run_id)) == output / "checkpoint-10"
    # Newer ones, each half written in its own way, are passed over.
    write_checkpoint(output, 15, state='{"global_step": 15, "log_hist')  # cut off mid-write
    write_checkpoint(output, 20, weights=False)  # trainer_state.json without weights
    (output / "checkpoint-25").mkdir()  # only just created
    (output / "checkpoint-25" / "adapter_model.safetensors").write_bytes(b"\0" * 8)
    write_checkpoint(output, 35, state=json.dumps({"global_step": 34}))  # not its own step
    assert latest_checkpoint(store.run_dir(run_id)) == output / "checkpoint-10"
    # Numbers sort as numbers: checkpoint-100 is newer than checkpoint-20.
    write_checkpoint(output, 100, max_steps=200)
    assert latest_checkpoint(store.run_dir(run_id)) == output / "checkpoint-100"


def test_sharded_weights_count_only_when_every_shard_is_there(tmp_path):
    output = tmp_path / OUTPUT_DIR
    path = write_checkpoint(output, 10, weights=False)
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    (path / "model-00001-of-00002.safetensors").write_bytes(b"\0")
    assert checkpoint_info(path) is None
    (path / "model-00002-of-00002.safetensors").write_bytes(b"\0")
    info = checkpoint_info(path)
    assert info is not None and info.step == 10 and info.max_steps == TOTAL


def test_no_checkpoint_at_all(tmp_path):
    assert latest_checkpoint(tmp_path) is None
    (tmp_path / OUTPUT_DIR / "checkpoint-5").mkdir(parents=True)
    assert latest_checkpoint(tmp_path) is None


# --- when a resume is refused -----------------------------------------------------------


@pytest.mark.parametrize(
    "state, checkpoints, rule, words",
    [
        ("finished", (5, 10), "run-finished", "finished"),
        ("running", (5, 10), "run-active", "running"),
        ("starting", (5, 10), "run-active", "starting"),
        ("failed", (), "no-checkpoint", "every 5 steps"),
        ("stopped", (30,), "all-steps-done", "all 30 steps"),
    ],
)
def test_refusals_say_why_and_what_to_do(store, state, checkpoints, rule, words):
    run_id = make_run(store, state=state, checkpoints=checkpoints, logged=3 if not checkpoints else 13)
    before = (store.run_dir(run_id) / CONFIG_FILE).read_text()
    plan = resume_plan(store, run_id)
    assert isinstance(plan, Refusal), plan
    assert plan.rule == rule
    assert words in plan.problem and plan.fix
    assert plan.finding().rule == f"resume-{rule}"
    with pytest.raises(ResumeRefused) as refused:
        prepare_resume(store, run_id)
    assert refused.value.refusal.rule == rule
    # A refusal changes nothing on disk.
    assert (store.run_dir(run_id) / CONFIG_FILE).read_text() == before
    assert store.read(run_id).attempts == 1
    assert not (store.run_dir(run_id) / ATTEMPTS_DIR).exists()


def test_unknown_run_and_missing_config_are_refused(store):
    assert resume_plan(store, "no-such-run").rule == "run-missing"
    assert resume_plan(store, "../etc").rule == "run-missing"
    run_id = make_run(store)
    (store.run_dir(run_id) / CONFIG_FILE).write_text("- not\n- a mapping\n")
    assert resume_plan(store, run_id).rule == "no-config"
    (store.run_dir(run_id) / CONFIG_FILE).unlink()
    assert resume_plan(store, run_id).rule == "no-config"
    assert not (store.run_dir(run_id) / ATTEMPTS_DIR).exists()


def test_half_written_newer_checkpoint_is_named_in_the_plan(store):
    run_id = make_run(store, state="failed", logged=16)
    write_checkpoint(store.run_dir(run_id) / OUTPUT_DIR, 15, state="{")
    plan = resume_plan(store, run_id)
    assert isinstance(plan, ResumePlan)
    assert plan.checkpoint.name == "checkpoint-10" and plan.skipped == ("checkpoint-15",)
    assert (plan.checkpoint_step, plan.total_steps, plan.logged_step, plan.attempt) == (10, TOTAL, 16, 2)
    assert "checkpoint-15" in plan.describe() and "11–16" in plan.describe()


# --- what a resume rewrites -------------------------------------------------------------


def test_prepare_resume_rewrites_config_and_keeps_every_byte(store):
    run_id = make_run(store, state="stopped")
    run_dir = store.run_dir(run_id)
    output = run_dir / OUTPUT_DIR
    old_config = (run_dir / CONFIG_FILE).read_text()
    old_log = (output / TRAINER_LOG).read_bytes()

    state = prepare_resume(store, run_id)

    config = yaml.safe_load((run_dir / CONFIG_FILE).read_text())
    assert config["resume_from_checkpoint"] == str((output / "checkpoint-10").resolve())
    # True would make LLaMA-Factory's LogCallback.on_init_end delete trainer_log.jsonl.
    assert config["overwrite_output_dir"] is False
    assert config["output_dir"] == str(output)
    untouched = {k: v for k, v in yaml.safe_load(old_config).items() if k not in ("overwrite_output_dir", "output_dir")}
    assert {k: config[k] for k in untouched} == untouched
    assert (state.state, state.attempts, state.resumed_from) == ("stopped", 2, "output/checkpoint-10")
    # The log is only appended to: here nothing was missing, so only the line that says where
    # attempt 2 begins (after the checkpoint's step, with the tokens it had counted).
    log = (output / TRAINER_LOG).read_bytes()
    assert log.startswith(old_log)
    added = [json.loads(line) for line in log[len(old_log) :].decode().splitlines()]
    assert len(added) == 1 and parse_attempt(added[0]) is not None
    assert (parse_attempt(added[0]).attempt, parse_attempt(added[0]).from_step) == (2, 10)
    # The first attempt's files are kept, whatever the trainer deletes or rewrites next.
    archive = run_dir / ATTEMPTS_DIR / "1"
    assert (archive / CONFIG_FILE).read_text() == old_config
    assert json.loads((archive / "state.json").read_text())["attempts"] == 1
    assert (archive / OUTPUT_DIR / TRAINER_LOG).read_bytes() == old_log
    assert (archive / OUTPUT_DIR / "running_log.txt").read_text() == "[INFO] attempt one\n"
    assert (archive / OUTPUT_DIR / "adapter_model.safetensors").read_bytes() == b"\1" * 64
    manifest = json.loads((archive / "manifest.json").read_text())
    assert manifest["attempt"] == 1 and f"{OUTPUT_DIR}/{TRAINER_LOG}" in manifest["copied"]
    assert not any(name.startswith("checkpoint-") for name in manifest["copied"])
    assert "attempt one output" in (run_dir / LOG_FILE).read_text()
    assert "attempt 2 resumes from output/checkpoint-10" in (run_dir / LOG_FILE).read_text()


def test_curve_after_resume_has_each_step_once_for_live_and_fresh_readers(store):
    run_id = make_run(store, state="stopped", logged=13)
    path = store.run_dir(run_id) / OUTPUT_DIR / TRAINER_LOG
    live_tail, live = JsonlTail(path), MetricSeries()
    live.extend(parse_curve_records(live_tail.poll()))
    prepare_resume(store, run_id)
    append_resumed_trainer(path, from_step=10)

    live.extend(parse_curve_records(live_tail.poll()))
    lines = [json.loads(line).get("current_steps", "attempt 2") for line in path.read_text().splitlines()]
    assert lines[12:17] == [13, 13, "attempt 2", 11, 12]  # the file holds both attempts
    for points in (live.points, curve(path)):
        assert [p.step for p in points] == list(range(1, TOTAL + 1))
        # Steps 11-13 are the resumed attempt's, not the superseded ones.
        assert [p.loss for p in points[10:13]] == pytest.approx([loss_at(s) - 0.01 for s in (11, 12, 13)])


def test_kill_9_leftovers_are_repaired_so_no_point_is_lost(store):
    """A kill -9 can cut the last log line and lose the lines of the steps just before a
    checkpoint (the trainer writes them from a thread pool)."""
    run_id = make_run(store, state="failed", logged=8, final_line=False, checkpoints=(5, 10))
    path = store.run_dir(run_id) / OUTPUT_DIR / TRAINER_LOG
    with open(path, "a") as handle:
        handle.write('{"current_steps": 9, "total_st')
    old = path.read_bytes()

    prepare_resume(store, run_id)
    repaired = path.read_bytes()
    assert repaired.startswith(old)  # appended to, never rewritten
    added = [json.loads(line) for line in repaired[len(old) + 1 :].decode().splitlines()]
    marker = parse_attempt(added.pop())  # the last line says where attempt 2 begins
    assert marker is not None and (marker.attempt, marker.from_step, marker.tokens) == (2, 10, None)
    assert [r["current_steps"] for r in added] == [9, 10]
    assert all(r["recovered_from"] == "checkpoint-10" for r in added)
    assert [r["loss"] for r in added] == pytest.approx([loss_at(9), loss_at(10)])

    append_resumed_trainer(path, from_step=10)
    tail = JsonlTail(path)
    series = MetricSeries()
    series.extend(parse_curve_records(tail.poll()))
    assert [p.step for p in series.points] == list(range(1, TOTAL + 1))
    assert all(p.loss is not None for p in series.points[:-1])
    assert tail.garbage_lines == 1  # the cut line, skipped and counted, not glued to step 11


def test_second_resume_archives_the_second_attempt(store):
    run_id = make_run(store, state="stopped", logged=13)
    prepare_resume(store, run_id)
    run_dir = store.run_dir(run_id)
    output = run_dir / OUTPUT_DIR
    append_resumed_trainer(output / TRAINER_LOG, from_step=10, to_step=22)
    write_checkpoint(output, 15)
    write_checkpoint(output, 20)
    store.update(run_id, state="failed")

    state = prepare_resume(store, run_id)
    assert (state.attempts, state.resumed_from) == (3, "output/checkpoint-20")
    assert yaml.safe_load((run_dir / "attempts" / "2" / CONFIG_FILE).read_text())["resume_from_checkpoint"].endswith("checkpoint-10")
    assert yaml.safe_load((run_dir / CONFIG_FILE).read_text())["resume_from_checkpoint"].endswith("checkpoint-20")
    append_resumed_trainer(output / TRAINER_LOG, from_step=20)
    assert [p.step for p in curve(output / TRAINER_LOG)] == list(range(1, TOTAL + 1))


def test_end_of_training_line_keeps_the_last_loss(tmp_path):
    path = tmp_path / TRAINER_LOG
    path.write_text("".join(log_line(s, loss=loss_at(s)) for s in range(1, TOTAL + 1)) + log_line(TOTAL))
    assert [p.step for p in curve(path) if p.loss is not None] == list(range(1, TOTAL + 1))


# The real thing (LLaMA-Factory trains, is killed, stopped at a checkpoint and resumed twice,
# through the page) is the first drill in tests/test_drills.py.


# --- the numbers a resumed run shows (issue 27, item 5) -------------------------------------


def tokens_line(step: int, tokens: int, throughput: float, elapsed: str, remaining: str, total: int = TOTAL) -> str:
    """A trainer-log line as LLaMA-Factory's LogCallback writes one with token counting on."""
    record = json.loads(log_line(step, total, loss=loss_at(step)))
    record.update(total_tokens=tokens, throughput=throughput, elapsed_time=elapsed, remaining_time=remaining)
    return json.dumps(record) + "\n"


def snapshot_of(path: Path, run_state):
    """What the page is given of a run whose trainer log is `path`: one monitor's reading."""
    from backend.service.monitors import RunMonitor
    from backend.snapshot import RunSnapshot

    monitor = RunMonitor(path.parent.parent)
    monitor.poll(force=True)
    points, memory, label, garbage, counter, chart, attempts, _ = monitor.contents()
    return RunSnapshot(run_state, points, memory, label, "", False, garbage, None, (counter,), chart, attempts)


def test_a_resume_cuts_the_curve_back_to_its_checkpoint_at_once_and_marks_the_attempt(store):
    """The step shown never goes back once attempt 2 shows: from the Resume on, the curve (and
    the step) is the checkpoint's, then counts on; a fresh reader sees the same."""
    from backend.runs.logs import AttemptMark
    from backend.service.monitors import RunMonitor

    run_id = make_run(store, state="stopped", logged=13)
    run_dir = store.run_dir(run_id)
    path = run_dir / OUTPUT_DIR / TRAINER_LOG
    monitor = RunMonitor(run_dir)
    monitor.poll(force=True)
    assert monitor.series.latest.step == 13 and monitor.series.attempts == []

    prepare_resume(store, run_id)
    monitor.poll(force=True)  # the resumed trainer has not logged yet
    assert [p.step for p in monitor.series.points] == list(range(1, 11))
    [mark] = monitor.series.attempts
    assert (mark.attempt, mark.from_step) == (2, 10) and mark.at is not None

    shown = []
    with open(path, "a") as handle:
        for step in range(11, TOTAL + 1):
            handle.write(log_line(step, loss=loss_at(step) - 0.01))
            handle.flush()
            monitor.poll(force=True)
            shown.append(monitor.series.latest.step)
    assert shown == list(range(11, TOTAL + 1))  # counts on from the checkpoint, never back
    assert [p.step for p in monitor.series.points] == list(range(1, TOTAL + 1))
    assert monitor.series.attempts == [mark]
    fresh = MetricSeries()
    fresh.extend(parse_curve_records(JsonlTail(path).poll()))
    assert fresh.attempts == [AttemptMark(2, 10, mark.at)]
    assert [p.loss for p in fresh.points[10:13]] == pytest.approx([loss_at(s) - 0.01 for s in (11, 12, 13)])


def test_tokens_per_second_and_time_left_of_a_resumed_attempt_are_its_own(store):
    """LLaMA-Factory divides every token since step 0 by the time since its own process began:
    the first step of a resume read ~15x the real rate (and its ETA far too short). The page
    shows the attempt's own: tokens since the checkpoint over that time."""
    from backend import view
    from backend.runs import RunState

    run_id = make_run(store, state="stopped", logged=13, checkpoints=())
    run_dir = store.run_dir(run_id)
    output = run_dir / OUTPUT_DIR
    # Attempt 1 trained 100 tokens a step at 200 tokens/s: step 13 at 6.5 s.
    (output / TRAINER_LOG).write_text("".join(tokens_line(s, 100 * s, 200.0, f"0:00:0{s // 2}", "0:00:09") for s in range(1, 14)))
    checkpoint = write_checkpoint(output, 10)
    saved = json.loads((checkpoint / "trainer_state.json").read_text())
    (checkpoint / "trainer_state.json").write_text(json.dumps({**saved, "num_input_tokens_seen": 1000}))

    prepare_resume(store, run_id)
    state = store.read(run_id)
    snapshot = snapshot_of(output / TRAINER_LOG, RunState(**{**state.__dict__, "state": "running"}))
    words = view.progress_parts(snapshot)[1]
    # Right after the Resume: the checkpoint's step, the attempt named, no rate of attempt 1.
    assert words.startswith("Step 10 / 30") and "attempt 2, resumed from step 10" in words, words
    assert "tokens/s" not in words and view.progress_of(snapshot).remaining_s is None

    # The resumed trainer, 2 s in at step 12: 1,200 tokens counted since step 0, so
    # LLaMA-Factory writes 600 tokens/s and 2 s x 18 / 12 = 3 s remaining.
    with open(output / TRAINER_LOG, "a") as handle:
        handle.write(tokens_line(12, 1200, 600.0, "0:00:02", "0:00:03"))
    snapshot = snapshot_of(output / TRAINER_LOG, RunState(**{**state.__dict__, "state": "running"}))
    progress = view.progress_of(snapshot)
    assert progress.throughput == pytest.approx(100.0)  # 200 tokens of this attempt in 2 s
    assert progress.remaining_s == 18.0  # 2 s for 2 steps, 18 steps to go
    assert "100 tokens/s" in view.progress_parts(snapshot)[1]


def test_a_log_resumed_before_attempt_lines_still_marks_its_attempt(tmp_path):
    """A log whose resume wrote no attempt line (an older RocBoard): the step going back starts
    attempt 2 after the last step kept, its tokens counted from that step's."""
    from backend.runs.logs import AttemptMark

    path = tmp_path / TRAINER_LOG
    lines = [tokens_line(s, 100 * s, 200.0, "0:00:05", "0:00:10") for s in range(1, 14)]
    lines.append(tokens_line(11, 1100, 1100.0, "0:00:01", "0:00:02"))
    path.write_text("".join(lines))
    series = MetricSeries()
    series.extend(parse_curve_records(JsonlTail(path).poll()))
    assert [p.step for p in series.points] == list(range(1, 12))
    assert series.attempts == [AttemptMark(2, 10, None)]
    assert series.latest.throughput == pytest.approx(100.0)  # (1100 - 1000) tokens in 1 s
    # A log started again from step 1 (the file replaced) is a new start, not an attempt.
    series.extend(parse_curve_records([json.loads(tokens_line(1, 100, 200.0, "0:00:00", "0:00:10"))]))
    assert series.attempts == [] and [p.step for p in series.points] == [1]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_real_resumed_demo_run_shows_its_attempts_own_numbers(demo_assets, tmp_path):
    """The real thing: LLaMA-Factory trains the demo, is stopped past a checkpoint and resumed.
    What a fresh reader makes of its files: each step once, attempt 2 marked at the checkpoint,
    and the tokens per second of attempt 2's own tokens (the checkpoint's count taken off)."""
    from backend import view
    from backend.service import RocBoard, demo_form
    from tests.harness import wait_until

    board = RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports")
    started = board.start({**demo_form(), "run_name": "resumed", "max_steps": 5000, "save_steps": 10})
    assert started.run is not None, started.findings
    run_id = started.run.id
    path = board.store.run_dir(run_id) / OUTPUT_DIR / TRAINER_LOG

    def records() -> list[dict]:
        try:
            return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        except (OSError, ValueError):
            return []

    def last_step() -> int:
        return max((r["current_steps"] for r in records() if "current_steps" in r), default=0)

    try:
        wait_until(lambda: last_step() >= 14, 300, 0.05, what="the demo to pass its first checkpoint")
        board.stop(run_id)
        wait_until(lambda: not board.is_active(run_id), 120, what="the stop")
        resumed = board.resume(run_id)
        assert resumed.run is not None, resumed.findings
        at = next(i for i, record in enumerate(records()) if parse_attempt(record))
        marker = parse_attempt(records()[at])
        assert marker.attempt == 2 and marker.tokens, records()[at]
        wait_until(lambda: len(records()) >= at + 6, 300, 0.05, what="the resumed trainer to log")
        board.stop(run_id)
        wait_until(lambda: not board.is_active(run_id), 120, what="the second stop")
    finally:
        if board.is_active(run_id):
            board.stop(run_id)

    snapshot = RocBoard(tmp_path / "runs", export_dir=tmp_path / "viewer").snapshot(run_id)
    steps = [p.step for p in snapshot.points]
    assert steps == list(range(1, steps[-1] + 1))
    assert [(m.attempt, m.from_step) for m in snapshot.attempts] == [(2, marker.from_step)]
    checkpoint = json.loads((board.store.run_dir(run_id) / OUTPUT_DIR / f"checkpoint-{marker.from_step}" / "trainer_state.json").read_text())
    assert marker.tokens == checkpoint["num_input_tokens_seen"]
    # The last line of attempt 2 that counted tokens: LLaMA-Factory's rate, and the attempt's own.
    last = [r for r in records()[at + 1 :] if r.get("throughput")][-1]
    own = last["throughput"] * (last["total_tokens"] - marker.tokens) / last["total_tokens"]
    assert view.progress_of(snapshot).throughput == pytest.approx(own)
    assert own < 0.9 * last["throughput"]  # the correction is not a rounding
    words = view.progress_parts(snapshot)[1]
    assert f"attempt 2, resumed from step {marker.from_step}" in words and f"{own:,.0f} tokens/s" in words, words
