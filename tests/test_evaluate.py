"""Evaluate: a trained run's adapter on held-out data with LLaMA-Factory's predict mode, as a
run of its own (kind "evaluate").

The parse functions are tested on files captured from a real predict run of the CPU demo
(tests/fixtures/evaluate/: 12 rows of `demo`, max_new_tokens 16; the trainer log is of a
71-row validation split at batch size 1). The rest runs the real llamafactory-cli on a copy
of the session's trained demo run.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import psutil
import pytest
import yaml

from backend.evaluate import (
    PREDICTIONS_FILE,
    RESULTS_FILE,
    format_scores,
    parse_predictions,
    parse_progress,
    parse_scores,
)
from backend.evaluate.plan import VALIDATION_SPLIT, HeldOut, bounded_int, predict_args
from backend.i18n import translate
from backend.runs import OUTPUT_DIR, RunState
from backend.runs.history import HISTORY_HEADERS, summaries_sort_values, summaries_table, summarize_runs
from backend.service import RocBoard
from tests.harness import copy_run, wait_until

FIXTURES = Path(__file__).parent / "fixtures" / "evaluate"
EVAL_TIMEOUT_S = 180.0
# Datasets the fixture registers (the Data tab's way) beside the trained demo run, which trained
# on the demo's `demo` without a validation split: 12 of its rows in a file of their own, all of
# them in reverse order (another file: long enough to stop an evaluation midway), and the demo's
# own file under another name (still what the run trained on).
SAMPLE, LONG, COPY = "data:demo-sample", "data:demo-reversed", "data:demo-copy"


# --- the parse functions, on real files -------------------------------------------------------


def test_scores_of_a_real_predict_results_file() -> None:
    scores = parse_scores((FIXTURES / "real_predict_results.json").read_text())
    assert scores is not None
    assert round(scores.bleu4, 2) == 41.57 and round(scores.rougel, 2) == 44.92
    assert round(scores.rouge1, 2) == 45.94 and round(scores.rouge2, 2) == 21.82
    assert scores.runtime_s == pytest.approx(0.9753)
    assert format_scores(scores) == "41.6 · 44.9"


def test_what_is_not_a_results_file_has_no_scores() -> None:
    assert parse_scores("not json") is None
    assert parse_scores("[1, 2]") is None
    assert parse_scores('{"train_loss": 1.2}') is None
    assert parse_scores('{"predict_bleu-4": NaN, "predict_rouge-l": "high"}') is None
    assert format_scores(None) == ""


def test_predictions_of_a_real_file_keep_prompt_reference_and_prediction() -> None:
    data = (FIXTURES / "real_generated_predictions.jsonl").read_bytes()
    rows = parse_predictions(data)
    assert len(rows) == 12
    assert rows[0].label == "The opposite of down is up."
    assert "Give the opposite of the word." in rows[0].prompt
    assert all(row.predict for row in rows)
    assert len(parse_predictions(data, max_rows=5)) == 5
    # A file read up to a size cap ends mid-line: the cut line is left out, not mangled.
    assert len(parse_predictions(data[: len(data) - 20])) == 11
    assert parse_predictions(b'garbage\n[1]\n{"prompt": "p"}\n') == []


def test_progress_of_a_real_prediction_trainer_log() -> None:
    data = (FIXTURES / "real_predict_trainer_log.jsonl").read_bytes()
    progress = parse_progress(data)
    assert progress is not None and (progress.step, progress.total) == (70, 71)
    assert parse_progress(data.split(b"\n")[0] + b"\n").step == 5
    assert parse_progress(b"") is None
    assert parse_progress(b'{"current_steps": true, "total_steps": 0}\n') is None


# --- the YAML and the numbers, pure -----------------------------------------------------------

TRAIN_ARGS = {
    "stage": "dpo", "do_train": True, "model_name_or_path": "/m", "template": "llama3", "dataset_dir": "/d",
    "dataset": "demo", "finetuning_type": "lora", "lora_rank": 8, "learning_rate": 0.01, "cutoff_len": 128,
    "val_size": 0.1, "seed": 7, "max_samples": 300, "use_cpu": True, "bf16": False, "fp16": False,
    "eval_strategy": "steps", "save_steps": 50, "output_dir": "/out", "report_to": "wandb", "deepspeed": "ds.json",
}  # fmt: skip


def test_predict_args_on_a_dataset_keep_the_model_and_drop_the_training() -> None:
    args = predict_args(TRAIN_ARGS, "/runs/a/output", HeldOut("/data", "mine"), "/runs/e/output", 50, 64, 4)
    assert args["stage"] == "sft" and args["do_train"] is False and args["do_predict"] is True and args["predict_with_generate"] is True
    assert {k: args[k] for k in ("model_name_or_path", "template", "finetuning_type", "cutoff_len", "use_cpu", "bf16", "fp16")} == {
        "model_name_or_path": "/m", "template": "llama3", "finetuning_type": "lora", "cutoff_len": 128, "use_cpu": True, "bf16": False, "fp16": False,
    }  # fmt: skip
    assert (args["adapter_name_or_path"], args["dataset_dir"], args["eval_dataset"], args["max_samples"]) == ("/runs/a/output", "/data", "mine", 50)
    assert (args["max_new_tokens"], args["per_device_eval_batch_size"], args["output_dir"], args["report_to"]) == (64, 4, "/runs/e/output", "none")
    for training_key in ("dataset", "val_size", "learning_rate", "lora_rank", "eval_strategy", "save_steps", "deepspeed"):
        assert training_key not in args


def test_predict_args_on_the_validation_split_repeat_the_keys_that_chose_it() -> None:
    args = predict_args(TRAIN_ARGS, "/runs/a/output", HeldOut("", VALIDATION_SPLIT), "/runs/e/output", 50, 64, 4)
    assert {k: args[k] for k in ("dataset_dir", "dataset", "val_size", "seed", "max_samples")} == {
        "dataset_dir": "/d", "dataset": "demo", "val_size": 0.1, "seed": 7, "max_samples": 300,
    }  # fmt: skip
    assert "eval_dataset" not in args


@pytest.mark.parametrize("value,expected", [(12, 12), ("12", 12), (12.0, 12), (0, None), (10_001, None), ("abc", None), (1.5, None), (True, None), (None, None), ("9" * 40, None)])
def test_bounded_numbers(value, expected) -> None:
    assert bounded_int(value, 1, 10_000) == expected


def test_a_state_file_without_a_kind_reads_as_a_training_run() -> None:
    old = {"id": "r", "name": "r", "created": "2026-01-01T00:00:00+00:00", "preset": "p", "model": "m", "state": "finished"}
    assert RunState.from_json(old).kind == "train" and RunState.from_json(old).source_run == ""
    assert RunState.from_json({**old, "kind": "../../x"}).kind == "train"
    assert RunState.from_json({**old, "kind": "evaluate", "source_run": "a"}).kind == "evaluate"


# --- real evaluations ----------------------------------------------------------------------------


def run_dirs(runs: Path) -> set[str]:
    return {p.name for p in runs.iterdir()}


@pytest.fixture
def board_with_run(trained_demo_run, tmp_path):
    """A board over a copy of the trained demo run; every evaluation it left running is stopped."""
    from backend.demo import DEMO_DIR

    src_runs, run_id = trained_demo_run
    copy_run(src_runs, run_id, tmp_path / "runs")
    board = RocBoard(tmp_path / "runs")
    demo_file = DEMO_DIR / "data" / "demo.json"
    rows = json.loads(demo_file.read_text())
    files = {SAMPLE: json.dumps(rows[:12]), LONG: json.dumps(rows[::-1]), COPY: demo_file.read_text()}
    for value, text in files.items():
        name = value.split(":", 1)[1]
        (tmp_path / f"{name}.json").write_text(text)
        assert board.data.add("upload", str(tmp_path / f"{name}.json"), name).name == name
    yield board, run_id
    for state in board.store.list():
        if board.is_active(state.id):
            board.stop(state.id)
    board.close()


def wait_for_end(board: RocBoard, run_id: str, timeout: float = EVAL_TIMEOUT_S) -> RunState:
    wait_until(lambda: not board.is_active(run_id), timeout, interval=0.5, what=f"evaluation {run_id} to end")
    return board.store.read(run_id)


def test_a_real_evaluation_stores_predictions_and_scores_shown_in_the_runs_table(board_with_run) -> None:
    board, source = board_with_run
    desk = board.evaluations
    assert [value for _, value in desk.source_choices()] == [source]
    assert desk.checkpoints(source)[0] == "final" and "checkpoint-100" in desk.checkpoints(source)
    started_at = time.monotonic()
    result = desk.start(source, SAMPLE, "final", 12, 16)
    assert result.run is not None, [f.line() for f in result.findings]
    eval_id = result.run.id
    assert result.run.kind == "evaluate" and result.run.source_run == source
    # While it runs, the Train tab's run panel shows it (no loss curve: nothing breaks).
    assert board.run_view(eval_id).run_id == eval_id
    state = wait_for_end(board, eval_id)
    elapsed = time.monotonic() - started_at
    print(f"\nevaluation of 12 rows, 16 new tokens, start to end: {elapsed:.1f} s ({state.launch} start)")
    assert state.state == "finished", (board.store.run_dir(eval_id) / "train.log").read_text()[-3000:]

    run_dir = board.store.run_dir(eval_id)
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["do_predict"] is True and config["do_train"] is False and config["eval_dataset"] == "demo-sample"
    assert config["adapter_name_or_path"] == str(board.store.run_dir(source) / OUTPUT_DIR)
    assert config["output_dir"] == str(run_dir / OUTPUT_DIR) and config["max_samples"] == 12 and config["max_new_tokens"] == 16
    assert (run_dir / OUTPUT_DIR / RESULTS_FILE).is_file() and (run_dir / OUTPUT_DIR / PREDICTIONS_FILE).is_file()

    answer = desk.view(eval_id)
    assert answer.state == "finished" and len(answer.rows) == 12
    assert "BLEU-4" in answer.scores and "ROUGE-L" in answer.scores
    assert answer.rows[0][1] == "The opposite of down is up."
    scores = desk.scores(eval_id)
    assert scores is not None and 0 <= scores.bleu4 <= 100 and 0 <= scores.rougel <= 100

    # The runs table: the evaluation's row says so and has the scores; the trained run's row
    # shows the scores of its latest finished evaluation.
    summaries = summarize_runs(board.store)
    rows = {row[0]: dict(zip(HISTORY_HEADERS, row, strict=True)) for row in summaries_table(summaries)}
    assert rows[eval_id]["Kind"] == "evaluation" and rows[source]["Kind"] == "training"
    assert rows[eval_id][translate("eval.column.scores", "en")] == rows[source][translate("eval.column.scores", "en")] == format_scores(scores)
    assert rows[eval_id]["Dataset"] == "demo-sample" and rows[eval_id]["Learning rate"] == ""
    values = {s.id: dict(zip(HISTORY_HEADERS, v, strict=True)) for s, v in zip(summaries, summaries_sort_values(summaries), strict=True)}
    assert values[eval_id][translate("eval.column.scores", "en")] == pytest.approx(scores.bleu4)
    zh = {row[0]: row for row in summaries_table(summaries, "zh-CN")}
    assert zh[eval_id][HISTORY_HEADERS.index("Kind")] == "评估"
    # Its run panel: finished, with a log, without a download of an adapter it does not have.
    panel = board.run_view(eval_id)
    assert panel.download is None and "do_predict: true" in (panel.config_yaml or "")
    # An evaluation is not a training run: it is not offered for evaluation, nor evaluated.
    assert eval_id not in [value for _, value in desk.source_choices()]
    refused = desk.start(eval_id, SAMPLE)
    assert refused.run is None and refused.findings[0].rule == "eval-not-trained"
    # After a restart, an evaluation whose process ended unseen is settled from its files:
    # its scores say it finished (it wrote no adapter).
    board.store.update(eval_id, state="running", pid=2**22 + 12345, pid_started=1.0, ended_at=None)
    restarted = RocBoard(board.store.root)
    try:
        settled = restarted.run_manager.refresh(eval_id)
        assert (settled.state, settled.stop_reason) == ("finished", "reason.finished_unwatched")
    finally:
        restarted.close()
    # And it is deleted like any run.
    assert board.delete(eval_id) == [] and eval_id not in board.run_ids()


def test_the_validation_split_predicts_exactly_the_rows_the_training_held_out(board_with_run) -> None:
    """The split depends only on the training's dataset, val_size, seed and max_samples (its
    form); the copy's form says it held out 10% (its adapter is the same either way)."""
    from datasets import Dataset

    board, source = board_with_run
    form_path = board.store.run_dir(source) / "form.json"
    form = json.loads(form_path.read_text())
    form_path.write_text(json.dumps({**form, "val_size": 0.1, "eval_strategy": "no"}))
    assert ("Validation split of this run", "split") in board.evaluations.dataset_choices(source)
    result = board.evaluations.start(source, "split", "final", 12, 8)
    assert result.run is not None, [f.line() for f in result.findings]
    assert wait_for_end(board, result.run.id).state == "finished"
    predicted = [row.label for row in board.evaluations.predictions(result.run.id, 1000)]

    rows = json.loads((Path(form["dataset_dir"]) / "demo.json").read_text())
    held_out = Dataset.from_list(rows).train_test_split(test_size=0.1, seed=form["seed"])["test"]
    assert predicted == list(held_out["output"])
    assert len(predicted) == round(len(rows) * 0.1 + 0.49)


def test_every_refusal_leaves_no_run_behind(board_with_run, tmp_path) -> None:
    board, source = board_with_run
    desk = board.evaluations
    before = run_dirs(board.store.root)

    def refused(rule: str, *args, **kwargs) -> None:
        result = desk.start(*args, **kwargs)
        assert result.run is None
        assert rule in [f.rule for f in result.findings], [f.line() for f in result.findings]
        assert run_dirs(board.store.root) == before

    refused("eval-run-missing", "no-such-run", SAMPLE)
    refused("eval-run-missing", "../../etc", SAMPLE)
    refused("eval-dataset-missing", source, "data:nothing")
    refused("eval-dataset-missing", source, "demo:demo_dpo")
    # What the run trained on is never held-out data, under its own name or another.
    refused("eval-trained-on", source, "demo:demo")
    refused("eval-trained-on", source, COPY)
    refused("eval-no-split", source, "split")
    refused("eval-checkpoint-missing", source, SAMPLE, "checkpoint-7")
    refused("eval-bad-number", source, SAMPLE, "final", 0, 16)
    refused("eval-bad-number", source, SAMPLE, "final", 12, "lots")
    refused("eval-bad-number", source, SAMPLE, "final", 12, 10**9)

    # The base model deleted: its path in the run's form no longer exists.
    form_path = board.store.run_dir(source) / "form.json"
    form = json.loads(form_path.read_text())
    form_path.write_text(json.dumps({**form, "model_path": str(tmp_path / "deleted-model")}))
    refused("eval-base-missing", source, SAMPLE)
    form_path.write_text(json.dumps(form))

    # No adapter: neither the final one nor a checkpoint.
    output = board.store.run_dir(source) / OUTPUT_DIR
    for path in [output / "adapter_model.safetensors", *output.glob("checkpoint-*/adapter_model.safetensors")]:
        path.unlink()
    refused("eval-no-adapter", source, SAMPLE)
    assert source not in [value for _, value in desk.source_choices()]


def test_stop_ends_a_running_evaluation_and_one_run_at_a_time(board_with_run) -> None:
    from backend.service import demo_form

    board, source = board_with_run
    # Every row of the demo, up to 512 new tokens each: long enough to be stopped midway.
    result = board.evaluations.start(source, LONG, "final", 1000, 512)
    assert result.run is not None, [f.line() for f in result.findings]
    eval_id = result.run.id
    pid = board.store.read(eval_id).pid
    before = run_dirs(board.store.root)
    # One run at a time: a second evaluation is refused while it runs, a training waits in the queue.
    second = board.evaluations.start(source, SAMPLE, "final", 12, 16)
    assert second.run is None and [f.rule for f in second.findings] == ["run-active"]
    assert run_dirs(board.store.root) == before
    queued = board.start(demo_form())
    assert queued.queued
    assert board.cancel_queued(queued.run.id) == [] and board.store.read(queued.run.id).pid is None
    # Its progress: LLaMA-Factory's LogCallback logs every 5 prediction batches.
    progress = wait_until(lambda: board.evaluations.progress(eval_id), 120, interval=0.5, what="a progress line")
    assert progress.total == 89 and progress.step >= 5  # 355 rows in batches of 4
    assert f"batch {progress.step} of 89" in board.evaluations.view(eval_id).status or "batch" in board.evaluations.view(eval_id).status
    # The Train tab's run panel shows it too (its monitor reads the log on its own: wait for it).
    wait_until(lambda: "Step" in board.run_view(eval_id).progress, 60, interval=0.5, what="the run panel's progress")
    state = board.evaluations.stop(eval_id)
    assert state is not None and state.state == "stopped"
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert board.evaluations.view(eval_id).status.startswith("Evaluation")
    assert "stopped" in board.evaluations.view(eval_id).status


def test_a_failed_evaluation_is_diagnosed(board_with_run, tmp_path) -> None:
    """The base model passes the checks, then is deleted before the predict run loads it."""
    board, source = board_with_run
    model = Path(shutil.copytree(board.store.read_form(source)["model_path"], tmp_path / "model-copy"))
    form_path = board.store.run_dir(source) / "form.json"
    form_path.write_text(json.dumps({**json.loads(form_path.read_text()), "model_path": str(model)}))
    result = board.evaluations.start(source, SAMPLE, "final", 12, 16)
    assert result.run is not None, [f.line() for f in result.findings]
    shutil.rmtree(model)  # the child spends seconds importing before it reads the model
    state = wait_for_end(board, result.run.id)
    assert state.state == "failed"
    cause, fix = board.failure_cause(result.run.id)
    assert cause and fix, (board.store.run_dir(result.run.id) / "train.log").read_text()[-2000:]
    answer = board.evaluations.view(result.run.id)
    assert "failed" in answer.status and cause in answer.status and answer.rows == []


# --- what the tab shows ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prompt, user",
    [
        ("<|im_start|>system\nYou are kind.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", "Hi there"),
        ("<bos><start_of_turn>user\nName a colour.<end_of_turn>\n<start_of_turn>model\n", "Name a colour."),
        ("<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nWhy is the sky blue? [/INST]", "Why is the sky blue?"),
        ("<s>[INST] first [/INST] answer</s>[INST] second [/INST]", "second"),
        ("### Instruction:\nAdd 2 and 3.\n\n### Response:\n", "Add 2 and 3."),
        ("Human: Tell me a joke.\nAssistant:", "Tell me a joke."),
        ("<|user|>\nTranslate cat.<|end|>\n<|assistant|>\n", "Translate cat."),
        ("<｜begin▁of▁sentence｜><｜User｜>What is 1+1?<｜Assistant｜>", "What is 1+1?"),
        ("<|some_new_token|>A template RocBoard does not know<|other|>", "A template RocBoard does not know"),
        ("plain text, no template", "plain text, no template"),
    ],
)
def test_the_users_text_of_a_templated_prompt(prompt: str, user: str) -> None:
    from backend.evaluate.results import user_text

    assert user_text(prompt) == user


def test_the_users_text_of_real_llama3_prompts() -> None:
    rows = parse_predictions((FIXTURES / "real_generated_predictions.jsonl").read_bytes())
    assert rows[0].user_text == "Give the opposite of the word.\ndown"
    assert all("<|" not in row.user_text and row.user_text for row in rows)


def test_held_out_data_is_never_what_the_run_trained_on(board_with_run, tmp_path) -> None:
    board, source = board_with_run
    desk = board.evaluations
    # The demo's own dataset and the copy of its file under another name are left out, by name.
    assert [value for _, value in desk.dataset_choices(source)] == [SAMPLE, LONG]
    assert desk.held_out_values(source) == ([SAMPLE, LONG], ["demo", "demo-copy"])
    note = desk.held_out_note(source, SAMPLE)
    assert note == translate("eval.held_out.registered", "en", name="`demo-sample`") + " " + translate("eval.held_out.left_out", "en", names="`demo`, `demo-copy`")
    assert "demo-reversed" in desk.held_out_note(source, LONG)
    zh = desk.held_out_note(source, SAMPLE, "zh-CN")
    assert "训练" in zh and "`demo-copy`" in zh
    # Trained with a validation split: the split is offered first, and said to be held out.
    form_path = board.store.run_dir(source) / "form.json"
    form = json.loads(form_path.read_text())
    form_path.write_text(json.dumps({**form, "val_size": 0.1}))
    assert desk.held_out_values(source)[0] == ["split", SAMPLE, LONG]
    assert desk.held_out_note(source, "split") == translate(
        "eval.held_out.split", "en", datasets="`demo`", val_size="0.1", seed=form.get("seed", 42)
    ) + " " + translate("eval.held_out.left_out", "en", names="`demo`, `demo-copy`")
    # Trained on the registered sample (by its folder and name): that one is left out instead,
    # and the demo's dataset is offered.
    form_path.write_text(json.dumps({**form, "dataset_dir": str(board.data.folder), "dataset": "demo-sample"}))
    assert desk.held_out_values(source) == ([LONG, COPY, "demo:demo"], ["demo-sample"])
    # Nothing but what it trained on: nothing offered, and why.
    form_path.write_text(json.dumps(form))
    for name in ("demo-sample", "demo-reversed"):
        info = json.loads((board.data.folder / "dataset_info.json").read_text())
        info.pop(name)
        (board.data.folder / "dataset_info.json").write_text(json.dumps(info))
    assert desk.dataset_choices(source) == []
    assert desk.held_out_note(source, None) == translate("eval.held_out.none", "en", datasets="`demo`")


def test_the_same_data_is_found_by_name_path_link_and_bytes(tmp_path) -> None:
    from backend.evaluate.held_out import SameData, trained_on

    trained_dir, other = tmp_path / "trained", tmp_path / "other"
    trained_dir.mkdir()
    other.mkdir()
    (trained_dir / "rows.json").write_text('[{"instruction": "a", "output": "b"}]')
    (trained_dir / "dataset_info.json").write_text(json.dumps({"mine": {"file_name": "rows.json"}, "hub": {"hf_hub_url": "x/y"}}))
    (other / "copy.json").write_bytes((trained_dir / "rows.json").read_bytes())
    (other / "changed.json").write_text('[{"instruction": "a", "output": "c"}]')
    (other / "linked.json").symlink_to(trained_dir / "rows.json")
    info = {name: {"file_name": f"{name}.json"} for name in ("copy", "changed", "linked")}
    info["absolute"] = {"file_name": str(trained_dir / "rows.json")}
    (other / "dataset_info.json").write_text(json.dumps(info))
    # A relative dataset_dir is the trainer's: in the run's folder.
    from backend.config import parse_form

    trained = trained_on(parse_form({"dataset_dir": "../trained", "dataset": "mine, hub"})[0], tmp_path / "run")
    assert trained.folder == str(trained_dir.resolve()) and trained.names == ("mine", "hub")
    same = SameData()
    assert same.same(trained, trained_dir, "mine") and same.same(trained, trained_dir, "hub")
    assert same.same(trained, other, "copy") and same.same(trained, other, "linked") and same.same(trained, other, "absolute")
    assert not same.same(trained, other, "changed") and not same.same(trained, other, "missing")


def test_the_table_says_when_it_has_nothing_and_shows_the_template_on_demand(board_with_run) -> None:
    from backend.service.evaluation_desk import EvaluationView

    desk = board_with_run[0].evaluations
    assert desk.table(EvaluationView(None)) is None
    assert desk.table_empty(EvaluationView(None), "zh-CN") == translate("eval.table.empty", "zh-CN")
    assert desk.table_empty(EvaluationView("e", state="failed")) == translate("eval.table.none_written", "en")
    answer = EvaluationView("e", state="finished", rows=[["Hi", "ref", "pred"]], prompts=["<|im_start|>user\nHi<|im_end|>"])
    assert desk.table_empty(answer) == ""
    assert desk.table(answer) == {"headers": ["Prompt", "Reference", "Prediction"], "data": [["Hi", "ref", "pred"]]}
    assert desk.table(answer, "zh-CN", with_template=True)["data"] == [["<|im_start|>user\nHi<|im_end|>", "ref", "pred"]]
