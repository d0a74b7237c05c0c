"""Holding data out for evaluation (val_size, eval_strategy, eval_steps, the eval batch size),
the eval loss on the loss chart, and the experiment trackers (report_to, the doctor's line).

The trainer log fixture is a real one: LLaMA-Factory 0.9.5 training the CPU demo with
`val_size: 0.1, eval_strategy: steps, eval_steps: 5, logging_steps: 2, max_steps: 20`. Its
evaluations at steps 5 and 15 are lines of their own; those at 10 and 20 follow the training
line of the same step; the closing line repeats step 20 without any loss.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path

import pytest
import yaml

from backend.charts import loss_figure
from backend.config import parse_form, schema, to_llamafactory_args
from backend.config.checks import check_config
from backend.config.presets import demo_form
from backend.config.yaml_import import import_yaml
from backend.runs.logs import JsonlTail, MetricSeries, parse_metric
from backend.runs.trainer_log import read_best_eval_loss

FIXTURE = Path(__file__).parent / "fixtures" / "logs" / "real_trainer_log_with_eval.jsonl"
TRAIN_STEPS = [2, 4, 6, 8, 10, 12, 14, 16, 18, 20]
EVAL_STEPS = [5, 10, 15, 20]


def form(**changes):
    return {**demo_form(), **changes}


def config_of(**changes):
    config, findings = parse_form(form(**changes), use_cpu=True)
    assert findings == [], [f.line() for f in findings]
    return config


def args_of(**changes):
    return to_llamafactory_args(config_of(**changes), "/out")


def rules(config):
    return {f.rule: f for f in check_config(config, None)}


def fixture_points():
    records = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]
    return [p for p in map(parse_metric, records) if p is not None]


# --- the fields in the YAML ----------------------------------------------------------------------


def test_a_fraction_held_out_writes_the_eval_keys() -> None:
    args = args_of(val_size="0.1", eval_strategy="steps", eval_steps=5)
    assert args["val_size"] == 0.1 and args["eval_strategy"] == "steps" and args["eval_steps"] == 5
    # 0 = the training batch size (the demo preset's 8).
    assert args["per_device_eval_batch_size"] == 8
    assert args["report_to"] == "none"
    # In the YAML a file reads back the same.
    assert yaml.safe_load(yaml.safe_dump(args))["val_size"] == 0.1


def test_no_split_writes_no_eval_key_and_a_count_is_a_whole_number() -> None:
    args = args_of()
    assert not {"val_size", "eval_strategy", "eval_steps", "per_device_eval_batch_size"} & set(args)
    assert args["report_to"] == "none"
    args = args_of(val_size="200", eval_strategy="epoch", per_device_eval_batch_size=2)
    assert args["val_size"] == 200 and isinstance(args["val_size"], int)
    assert args["eval_strategy"] == "epoch" and "eval_steps" not in args
    assert args["per_device_eval_batch_size"] == 2


def test_the_fields_ranges_refuse_with_a_finding() -> None:
    _, findings = parse_form(form(val_size="-0.5", eval_steps=0, per_device_eval_batch_size=5000, eval_strategy="sometimes", report_to="comet"), use_cpu=True)
    assert {(f.key, f.rule) for f in findings} == {
        ("val_size", "val-size-range"), ("eval_steps", "eval-steps-range"),
        ("per_device_eval_batch_size", "eval-batch-size-range"), ("eval_strategy", "bad-choice"), ("report_to", "bad-choice"),
    }  # fmt: skip


def test_an_import_reads_the_eval_keys_and_the_tracker_into_their_fields() -> None:
    text = yaml.safe_dump(
        {
            "model_name_or_path": demo_form()["model_path"], "stage": "sft", "do_train": True, "template": "llama3",
            "dataset_dir": demo_form()["dataset_dir"], "dataset": "demo", "val_size": 0.1, "eval_strategy": "steps",
            "eval_steps": 500, "per_device_eval_batch_size": 1, "report_to": "tensorboard",
        }
    )  # fmt: skip
    result = import_yaml(text)
    values = result.form_values
    assert (values["val_size"], values["eval_strategy"], values["eval_steps"], values["per_device_eval_batch_size"]) == (0.1, "steps", 500, 1)
    assert values["report_to"] == "tensorboard"
    assert "report_to" not in (yaml.safe_load(values.get("other_keys") or "") or {})
    # A list of one tracker is that tracker; "all" is LLaMA-Factory's, not the form's: a warning.
    assert import_yaml(text.replace("report_to: tensorboard", "report_to: [mlflow]")).form_values["report_to"] == "mlflow"
    only_lf = import_yaml(text.replace("report_to: tensorboard", "report_to: all"))
    assert [f.severity for f in only_lf.findings if f.key == "report_to"] == ["warning"]


def test_other_keys_refuse_what_now_has_a_field() -> None:
    _, findings = parse_form(form(other_keys="report_to: wandb\neval_steps: 3\n"), use_cpu=True)
    assert sorted(f.rule for f in findings) == ["other-key-in-form", "other-key-in-form"]


# --- the checks and their patches ------------------------------------------------------------------


def patched(config, finding):
    from backend.config import to_form

    return parse_form({**to_form(config), **finding.patch}, use_cpu=True)[0]


def test_evaluating_without_held_out_data_is_a_problem_its_patch_holds_data_out() -> None:
    config = config_of(eval_strategy="steps")
    found = rules(config)["eval-without-data"]
    assert found.severity == "problem" and found.key == "eval_strategy" and found.patch == {"val_size": 0.1}
    assert "eval-without-data" not in rules(patched(config, found))
    # An eval_dataset named in Other keys is data to evaluate.
    assert "eval-without-data" not in rules(config_of(eval_strategy="steps", other_keys="eval_dataset: demo\n"))


def test_held_out_data_nothing_evaluates_is_a_warning_its_patch_evaluates() -> None:
    config = config_of(val_size="0.1")
    found = rules(config)["val-size-not-evaluated"]
    assert found.severity == "warning" and found.patch == {"eval_strategy": "steps"}
    fixed = patched(config, found)
    assert rules(fixed) == {} and to_llamafactory_args(fixed, "/o")["eval_strategy"] == "steps"


def test_val_size_rules() -> None:
    assert rules(config_of(val_size="1", eval_strategy="steps"))["val-size-one"].patch == {"val_size": 0.1}
    assert rules(config_of(val_size="2.5", eval_strategy="steps"))["val-size-count-whole"].patch == {"val_size": 2}
    streamed = rules(config_of(val_size="0.1", eval_strategy="steps", other_keys="streaming: true\n"))
    assert streamed["val-size-fraction-streaming"].patch == {"val_size": 100}
    both = rules(config_of(val_size="0.1", eval_strategy="steps", other_keys="eval_dataset: demo\n"))
    assert both["val-size-and-eval-dataset"].patch == {"val_size": 0.0}


def test_a_count_beyond_the_datasets_rows_is_a_problem_when_the_rows_are_known(tmp_path: Path) -> None:
    rows = len(json.loads((Path(demo_form()["dataset_dir"]) / "demo.json").read_text()))
    found = rules(config_of(val_size=str(rows), eval_strategy="steps"))["val-size-beyond-rows"]
    assert found.params["rows"] == rows and found.patch == {"val_size": 0.1}
    assert "val-size-beyond-rows" not in rules(config_of(val_size=str(rows - 1), eval_strategy="steps"))
    # max_samples caps the rows.
    assert "val-size-beyond-rows" in rules(config_of(val_size="50", eval_strategy="steps", max_samples="50"))
    # Rows unknown (a folder of files): no finding.
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "a.json").write_text(json.dumps([{"instruction": "a", "output": "b"}]))
    (tmp_path / "dataset_info.json").write_text(json.dumps({"d": {"file_name": "parts"}}))
    assert "val-size-beyond-rows" not in rules(config_of(dataset_dir=str(tmp_path), dataset="d", val_size="500", eval_strategy="steps"))


def test_a_tracker_that_is_not_installed_is_a_problem_naming_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    installed: set[str] = set()
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name in installed else (None if name in ("tensorboard", "tensorboardX", "wandb", "mlflow", "swanlab") else real(name, *a))
    )
    for tracker, package in (("tensorboard", "tensorboard"), ("wandb", "wandb"), ("mlflow", "mlflow"), ("swanlab", "swanlab")):
        found = rules(config_of(report_to=tracker))["report-to-not-installed"]
        assert found.severity == "problem" and found.patch == {"report_to": "none"}
        assert f"pip install {package}" in found.fix and f"pip install {package}" in found.text("zh-CN")[1]
    installed.update({"tensorboardX", "wandb"})
    assert rules(config_of(report_to="tensorboard")) == {}
    offline = rules(config_of(report_to="wandb"))["report-to-offline"]
    assert offline.severity == "warning" and "wandb sync" in offline.fix
    assert rules(config_of()) == {}


def test_no_tracker_is_installed_here_and_the_check_does_not_import_one() -> None:
    import sys

    for tracker in ("tensorboard", "wandb", "mlflow", "swanlab"):
        if importlib.util.find_spec(tracker) is None:
            assert "report-to-not-installed" in rules(config_of(report_to=tracker))
        assert tracker not in sys.modules


def test_trackers_that_want_a_key_run_offline_in_every_child() -> None:
    from backend.runs.launcher import trainer_env

    env = trainer_env(Path("/runs/r"), {"OMP_NUM_THREADS": "1"}, base={"PATH": "/usr/bin", "WANDB_API_KEY": "secret", "SWANLAB_API_KEY": "s"})
    assert env["WANDB_MODE"] == "offline" and env["SWANLAB_MODE"] == "offline"
    assert "WANDB_API_KEY" not in env and "SWANLAB_API_KEY" not in env


# --- the doctor ----------------------------------------------------------------------------------


def test_the_doctor_says_which_trackers_are_installed() -> None:
    from backend.doctor import check_trackers, find_trackers
    from tests.test_doctor import cpu_box

    found = find_trackers(lambda name: object() if name in ("tensorboardX", "mlflow") else None)
    assert found["tensorboard"].startswith("tensorboardX") and found["mlflow"].startswith("mlflow")
    assert found["wandb"] is None and found["swanlab"] is None
    line = check_trackers(cpu_box(trackers=found))
    assert line.verdict == "ok"
    from backend.i18n import localized as render

    english, chinese = render(line.saw, "en"), render(line.saw, "zh-CN")
    assert "tensorboardX" in english and "wandb · swanlab" in english
    assert "已安装" in chinese and "wandb · swanlab" in chinese
    none = check_trackers(cpu_box())
    assert none.verdict == "ok" and "pip install -U tensorboard" in render(none.fix, "en")
    # This machine: none installed, and nothing imported to find out.
    import sys

    here = find_trackers()
    assert set(here) == set(schema.TRACKER_PACKAGES)
    assert not {"wandb", "mlflow", "swanlab"} & set(sys.modules)


# --- the eval loss: parsed, kept, drawn ----------------------------------------------------------


def test_the_real_log_parses_eval_loss_at_the_steps_it_evaluated() -> None:
    points = fixture_points()
    evaluated = [(p.step, p.eval_loss) for p in points if p.eval_loss is not None]
    assert [step for step, _ in evaluated] == EVAL_STEPS
    assert all(isinstance(value, float) and 0 < value < 20 for _, value in evaluated)
    assert [p.step for p in points if p.loss is not None] == TRAIN_STEPS


def test_the_series_keeps_one_point_per_step_and_never_loses_a_loss() -> None:
    series = MetricSeries()
    series.extend(fixture_points())
    steps = [p.step for p in series.points]
    assert steps == sorted(set(steps)) == sorted(set(TRAIN_STEPS) | set(EVAL_STEPS))
    by_step = {p.step: p for p in series.points}
    raw = fixture_points()
    train = {p.step: p.loss for p in raw if p.loss is not None}
    evals = {p.step: p.eval_loss for p in raw if p.eval_loss is not None}
    # The eval line at 10 and 20 (after that step's training line) and the closing line at 20
    # neither erase the training loss nor the eval loss.
    assert {s: p.loss for s, p in by_step.items() if p.loss is not None} == train
    assert {s: p.eval_loss for s, p in by_step.items() if p.eval_loss is not None} == evals
    chart = series.chart()
    assert [e[1] for e in chart["loss"]] == TRAIN_STEPS
    assert [(e[1], e[2]) for e in chart["eval_loss"]] == sorted(evals.items())
    assert all(e[3] is None for e in chart["eval_loss"])  # never smoothed
    # Read a line at a time (as a live run is), the same.
    one_by_one = MetricSeries()
    for point in raw:
        one_by_one.extend([point])
    assert one_by_one.chart() == chart


def test_the_loss_chart_draws_the_eval_loss_beside_the_training_loss() -> None:
    from backend.view import loss_chart_names

    series = MetricSeries()
    series.extend(fixture_points())
    figure = loss_figure(series)
    traces = {t["name"]: t for t in figure["data"]}
    evaluated = traces["eval loss"]
    assert evaluated["x"] == EVAL_STEPS and "markers" in evaluated["mode"] and evaluated.get("yaxis", "y") == "y"
    assert evaluated["y"] == [p.eval_loss for p in fixture_points() if p.eval_loss is not None]
    assert traces["loss"]["x"] == TRAIN_STEPS
    # The same from a list of points, and in Chinese.
    assert loss_figure(fixture_points())["data"] == figure["data"]
    chinese = loss_figure(series, names=loss_chart_names("zh-CN"))
    assert "验证损失" in [t["name"] for t in chinese["data"]]
    # A run that does not evaluate draws no eval trace.
    train_only = [p for p in fixture_points() if p.eval_loss is None]
    assert len(loss_figure(train_only)["data"]) == 3
    # What the live route sends: the eval curve is in the changes too.
    assert series.chart_since(None)["curves"]["eval_loss"]["x"] == EVAL_STEPS


def test_the_runs_table_best_eval_loss_reads_the_real_log(tmp_path: Path) -> None:
    best = min(p.eval_loss for p in fixture_points() if p.eval_loss is not None)
    (tmp_path / "trainer_log.jsonl").write_bytes(FIXTURE.read_bytes())
    assert read_best_eval_loss(tmp_path / "trainer_log.jsonl", tmp_path) == best


def test_the_live_route_carries_the_eval_loss() -> None:
    from backend.service.run_view import charts_of
    from backend.snapshot import RunSnapshot

    series = MetricSeries()
    series.extend(fixture_points())
    snapshot = RunSnapshot(run=None, points=list(series.points), memory=[], memory_label="", log_tail="", has_adapter=False, garbage_lines=0, alert=None, version=(), chart=series.chart())  # type: ignore[arg-type]  # no run: the chart needs none
    loss = charts_of(snapshot, "zh-CN")["loss"]
    evaluated = next(t for t in loss["data"] if t["name"] == "验证损失")
    assert evaluated["x"] == EVAL_STEPS


# --- one real run --------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_real_demo_run_with_held_out_data_logs_eval_loss(tmp_path: Path, demo_assets) -> None:
    """The form's YAML, run by the real llamafactory-cli in the trainer's environment (as the
    launcher starts it: the run directory as its working directory)."""
    import subprocess

    from backend.config import to_yaml
    from backend.config.presets import load_presets
    from backend.runs.launcher import trainer_command, trainer_env
    from backend.runs.logs import TRAINER_LOG

    preset = load_presets()[0]["cpu-demo"]
    config, findings = parse_form(form(max_steps=20, logging_steps=2, save_steps=100, val_size="0.1", eval_strategy="steps", eval_steps=5), preset.env, use_cpu=True)
    assert findings == [] and [f for f in check_config(config, preset) if f.severity == "problem"] == []
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(to_yaml(config, run_dir / "output"))
    with open(run_dir / "train.log", "wb") as log:
        done = subprocess.run(trainer_command("config.yaml"), cwd=run_dir, env=trainer_env(run_dir, dict(preset.env)), stdout=log, stderr=subprocess.STDOUT, timeout=540)
    assert done.returncode == 0, (run_dir / "train.log").read_text()[-3000:]
    log_path = run_dir / "output" / TRAINER_LOG
    records = JsonlTail(log_path, run_dir=run_dir).poll()
    assert [r["current_steps"] for r in records if "eval_loss" in r] == EVAL_STEPS
    series = MetricSeries()
    series.extend([p for p in map(parse_metric, records) if p is not None])
    losses = [p.eval_loss for p in series.points if p.eval_loss is not None]
    assert [p.step for p in series.points if p.eval_loss is not None] == EVAL_STEPS
    assert [p.step for p in series.points if p.loss is not None] == TRAIN_STEPS
    assert statistics.mean(losses[-2:]) < losses[0]
    assert [t["x"] for t in loss_figure(series)["data"] if t["name"] == "eval loss"] == [EVAL_STEPS]
    # What the runs table shows as the best eval loss.
    assert read_best_eval_loss(log_path, run_dir) == min(losses)


def test_llamafactorys_own_line_is_quoted_beside_the_finding_not_inside_its_sentence() -> None:
    from backend.llama_factory.check import findings_from_result
    from backend.view import findings_markdown

    line = "Please make sure eval_dataset be provided or val_size >1e-6"
    found = rules(config_of(eval_strategy="steps"))["eval-without-data"]
    assert found.quote == line
    for locale in ("en", "zh-CN"):
        problem, fix = found.text(locale)
        assert "Please make sure" not in problem + fix
        shown = findings_markdown([found], locale)
        sentence, quoted = shown.split("\n")
        assert "Please make sure" not in sentence and quoted.startswith("  > ") and f"`{line}`" in quoted
    # LLaMA-Factory's own refusal of the same: our words, its line quoted.
    [refusal] = findings_from_result({"error": {"type": "ValueError", "message": line}}, {"eval_strategy": "steps"})
    assert refusal.message == "lf-rejected-no-eval-data" and refusal.quote == line
    assert "Please make sure" not in "".join(refusal.text("zh-CN"))
    assert line in refusal.line()
