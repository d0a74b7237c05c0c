"""Every stage LLaMA-Factory trains from a config, on the form: pt, sft, rm, dpo and kto (ppo is
LLaMA-Factory's too, but needs a reward model the form has no field for).

The stage field and its preference fields (the YAML each stage gets), the checks of a stage
against its datasets (words in en and zh-CN), the demo's datasets for each stage, the
preference metrics read from trainer_log.jsonl and drawn on the loss chart, and real
LLaMA-Factory runs of pt, dpo, kto and rm on the demo model.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from backend import demo, view
from backend.charts import loss_figure
from backend.config import parse_form, schema, to_form, to_yaml
from backend.config.checks import check_config
from backend.config.presets import demo_form
from backend.config.yaml_import import import_yaml
from backend.i18n import CATALOGUE, LOCALES
from backend.runs.logs import MetricSeries, parse_metric
from tests.tiers import starts

PREF_KEYS = ("pref_beta", "pref_loss", "pref_ftx")


def stage_form(stage: str, dataset: str | None = None, **changes) -> dict:
    """The demo form training `stage` on its demo dataset (or `dataset`)."""
    return {**demo_form(), "stage": stage, "dataset": dataset or demo.STAGE_DATASETS[stage], **changes}


# --- the fields ---------------------------------------------------------------------------------


def test_the_stage_field_offers_what_trains_from_a_dataset_and_knows_ppo() -> None:
    stage = schema.field("stage")
    assert stage.default == "sft" and stage.yaml_key == "stage" and stage.kind == "choice"
    assert stage.choices == ("pt", "sft", "rm", "dpo", "kto")
    assert stage.llamafactory_choices == ("ppo",)
    # In the method section, first: what is trained comes before how.
    names = [f.name for f in schema.run_fields()]
    assert stage.section == "method" and names.index("stage") == names.index("finetuning_type") - 1
    assert schema.field("pref_loss").choices == ("sigmoid", "hinge", "ipo", "kto_pair", "orpo", "simpo")
    assert {name: schema.field(name).default for name in PREF_KEYS} == {"pref_beta": 0.1, "pref_loss": "sigmoid", "pref_ftx": 0.0}
    for name in ("stage", *PREF_KEYS):
        for locale in LOCALES:
            assert CATALOGUE[locale].get(f"label.{name}") and CATALOGUE[locale].get(f"field.{name}"), (locale, name)


def test_llamafactory_accepts_the_same_stages_and_losses() -> None:
    """The choices are LLaMA-Factory's own (read from its source, without importing it)."""
    import importlib.util
    import re

    spec = importlib.util.find_spec("llamafactory")
    source = (Path(spec.submodule_search_locations[0]) / "hparams" / "finetuning_args.py").read_text(encoding="utf-8")
    stages = re.search(r"stage: Literal\[([^\]]+)\]", source).group(1)
    losses = re.search(r"pref_loss: Literal\[([^\]]+)\]", source).group(1)
    assert set(re.findall(r'"(\w+)"', stages)) == set(schema.field("stage").all_choices)
    assert re.findall(r'"(\w+)"', losses) == list(schema.field("pref_loss").choices)


@pytest.mark.parametrize("stage", ["pt", "sft", "rm", "dpo", "kto"])
def test_each_stage_writes_its_key_and_the_preference_keys_only_for_dpo_and_kto(demo_assets, stage: str) -> None:
    config, findings = parse_form(stage_form(stage, pref_beta="0.25", pref_loss="ipo", pref_ftx="0.5"))
    assert findings == []
    args = yaml.safe_load(to_yaml(config, "/out"))
    assert list(args)[:2] == ["stage", "do_train"] and args["stage"] == stage
    written = {key: args[key] for key in PREF_KEYS if key in args}
    expected = {"dpo": {"pref_beta": 0.25, "pref_loss": "ipo", "pref_ftx": 0.5}, "kto": {"pref_beta": 0.25, "pref_ftx": 0.5}}.get(stage, {})
    assert written == expected
    # The form shows what it parsed, whatever the stage (as LoRA keys under full fine-tuning).
    again, _ = parse_form(to_form(config))
    assert again == config and again.method.stage == stage and again.method.pref_beta == 0.25


@pytest.mark.parametrize(
    ("name", "value", "rule"),
    [("pref_beta", "0", "pref-beta-range"), ("pref_beta", "101", "pref-beta-range"), ("pref_ftx", "-1", "pref-ftx-range"), ("stage", "ppo", "bad-choice"), ("stage", "grpo", "bad-choice")],
)
def test_a_bad_preference_value_or_stage_is_a_finding_and_falls_back(name: str, value: str, rule: str) -> None:
    config, findings = parse_form({**schema.form_defaults(), name: value})
    assert [(f.key, f.rule) for f in findings] == [(name, rule)]
    assert config.value(name) == schema.field(name).default
    for locale in LOCALES:
        problem, fix = findings[0].text(locale)
        assert problem.strip() and fix.strip() and "{" not in problem


def test_the_preference_ranges() -> None:
    assert schema.number_ranges()["pref_beta"].text() == "(0, 100]"
    config, findings = parse_form({**schema.form_defaults(), "pref_beta": "100", "pref_ftx": "0"})
    assert findings == [] and config.method.pref_beta == 100.0 and config.method.pref_ftx == 0.0


# --- the import -----------------------------------------------------------------------------------


def _import(demo_assets, **keys):
    base = {
        "model_name_or_path": str(demo_assets.model_dir), "do_train": True, "template": "llama3",
        "dataset_dir": str(demo_assets.dataset_dir), "fp16": False, "bf16": False,
    }
    return import_yaml(yaml.safe_dump({**base, **keys}))


def test_an_imported_preference_stage_is_read_into_the_form(demo_assets) -> None:
    result = _import(demo_assets, stage="dpo", dataset="demo_dpo", pref_beta=0.3, pref_loss="simpo", pref_ftx=1.0)
    assert {k: result.form_values[k] for k in ("stage", *PREF_KEYS)} == {"stage": "dpo", "pref_beta": 0.3, "pref_loss": "simpo", "pref_ftx": 1.0}
    assert not [f for f in result.findings if f.key in ("stage", "dataset", *PREF_KEYS)], [f.line() for f in result.findings]


def test_an_imported_ppo_or_unknown_stage_is_a_problem(demo_assets) -> None:
    # A problem, not a warning: "Run this YAML as it is" would otherwise train sft.
    ppo = [f for f in _import(demo_assets, stage="ppo", dataset="demo").findings if f.key == "stage"]
    assert [(f.rule, f.message, f.severity) for f in ppo] == [("yaml-stage-not-sft", "yaml-stage-ppo", "problem")]
    unknown = [f for f in _import(demo_assets, stage="grpo", dataset="demo").findings if f.key == "stage"]
    assert [(f.rule, f.message, f.severity) for f in unknown] == [("yaml-stage-not-sft", "", "problem")]
    for finding in ppo + unknown:
        for locale in LOCALES:
            problem, fix = finding.text(locale)
            assert problem.strip() and fix.strip() and "{" not in problem + fix


# --- the checks: a stage against its datasets ------------------------------------------------------


CHECK_CASES = [
    # (stage, dataset, rule, message, severity)
    ("dpo", "demo", "stage-needs-ranking", "", "problem"),
    ("rm", "demo_pt", "stage-needs-ranking", "", "problem"),
    ("sft", "demo_dpo", "stage-refuses-ranking", "stage-sft-on-ranking", "problem"),
    ("pt", "demo_dpo", "stage-refuses-ranking", "stage-refuses-ranking", "problem"),
    ("kto", "demo_dpo", "stage-refuses-ranking", "stage-refuses-ranking", "problem"),
    ("kto", "demo", "kto-needs-tag", "", "problem"),
    ("pt", "demo", "pt-no-text-column", "", "warning"),
    ("pt", "demo_kto", "pt-no-text-column", "", "warning"),
]


@pytest.mark.parametrize(("stage", "dataset", "rule", "message", "severity"), CHECK_CASES, ids=[f"{c[0]}-on-{c[1]}" for c in CHECK_CASES])
def test_a_stage_on_a_dataset_it_cannot_read_is_a_finding_in_every_language(demo_assets, stage, dataset, rule, message, severity) -> None:
    config, findings = parse_form(stage_form(stage, dataset))
    assert findings == []
    found = [f for f in check_config(config, None) if f.key == "dataset"]
    assert [(f.rule, f.message, f.severity) for f in found] == [(rule, message, severity)]
    for locale in LOCALES:
        problem, fix = found[0].text(locale)
        assert f"'{dataset}'" in problem, (locale, problem)
        assert problem.strip() and fix.strip() and "{" not in problem.replace('{"prompt"', "") + fix.replace('{"prompt"', "")
    en, zh = found[0].text("en"), found[0].text("zh-CN")
    assert en != zh


@pytest.mark.parametrize("stage", ["pt", "sft", "rm", "dpo", "kto"])
def test_each_stage_on_its_demo_dataset_has_no_finding(demo_assets, stage: str) -> None:
    config, _ = parse_form(stage_form(stage))
    assert check_config(config, None) == []


def test_a_stage_check_reads_a_hand_written_dataset_info(tmp_path: Path) -> None:
    """Mixed datasets: each is judged; one without an entry is rule_dataset's alone."""
    (tmp_path / "pairs.jsonl").write_text(json.dumps({"instruction": "q", "chosen": "a", "rejected": "b"}) + "\n")
    (tmp_path / "text.jsonl").write_text(json.dumps({"content": "some text"}) + "\n")
    info = {
        "pairs": {"file_name": "pairs.jsonl", "ranking": True, "columns": {"prompt": "instruction", "chosen": "chosen", "rejected": "rejected"}},
        "text": {"file_name": "text.jsonl", "columns": {"prompt": "content"}},
    }
    (tmp_path / "dataset_info.json").write_text(json.dumps(info))
    form = {**schema.form_defaults(), "dataset_dir": str(tmp_path), "dataset": "pairs,text,nothere"}
    for stage, expected in (("dpo", {("stage-needs-ranking", "'text'")}), ("pt", {("stage-refuses-ranking", "'pairs'")})):
        config, _ = parse_form({**form, "stage": stage})
        found = {(f.rule, f.params["name"]) for f in check_config(config, None) if f.rule.startswith(("stage-", "kto-", "pt-"))}
        assert found == expected, stage


# --- the demo's datasets ------------------------------------------------------------------------


def test_the_demo_registers_a_dataset_for_every_stage(demo_assets) -> None:
    info = json.loads((demo_assets.dataset_dir / "dataset_info.json").read_text(encoding="utf-8"))
    assert set(demo.STAGE_DATASETS.values()) <= set(info)
    rows = {name: json.loads((demo_assets.dataset_dir / info[name]["file_name"]).read_text(encoding="utf-8")) for name in info}
    assert info["demo_pt"]["columns"] == {"prompt": "text"} and len(rows["demo_pt"]) == 64
    assert all(set(row) == {"text"} and row["text"] for row in rows["demo_pt"])
    assert info["demo_dpo"]["ranking"] is True and len(rows["demo_dpo"]) == 32
    assert all(row["chosen"] != row["rejected"] for row in rows["demo_dpo"])
    assert info["demo_kto"]["formatting"] == "sharegpt" and info["demo_kto"]["columns"]["kto_tag"] == "label"
    labels = [row["label"] for row in rows["demo_kto"]]
    assert len(labels) == 32 and all(isinstance(x, bool) for x in labels) and 0 < sum(labels) < 32


def test_the_stage_datasets_are_the_same_every_build(demo_assets, tmp_path: Path) -> None:
    other = demo.demo_paths(tmp_path / "demo").dataset_dir
    import random

    demo._write_dataset(other, demo._demo_examples(random.Random(demo.SEED)))
    for name in ("dataset_info.json", demo.PT_DATASET_FILE, demo.DPO_DATASET_FILE, demo.KTO_DATASET_FILE, demo.DATASET_FILE):
        assert (other / name).read_bytes() == (demo_assets.dataset_dir / name).read_bytes(), name


# --- the metrics: trainer_log.jsonl -> the snapshot -> the chart ------------------------------------

DPO_LINE = {"current_steps": 2, "total_steps": 3, "loss": 0.6931, "accuracy": 0.75, "lr": 1e-4, "epoch": 0.5, "percentage": 66.67, "elapsed_time": "0:00:02", "remaining_time": "0:00:01"}


def test_a_preference_line_is_read_with_its_accuracy_and_a_plain_line_without() -> None:
    point = parse_metric(DPO_LINE)
    assert point.accuracy == 0.75 and point.reward is None and point.loss == 0.6931
    plain = parse_metric({k: v for k, v in DPO_LINE.items() if k != "accuracy"})
    assert plain.accuracy is None and plain.reward is None
    assert parse_metric({**DPO_LINE, "accuracy": "nope", "reward": True}).accuracy is None
    # The closing line (no loss) keeps the last step's accuracy.
    series = MetricSeries()
    series.extend([point, parse_metric({k: v for k, v in DPO_LINE.items() if k not in ("loss", "accuracy")})])
    assert series.latest.accuracy == 0.75 and series.latest.loss == 0.6931


@pytest.mark.parametrize("locale", LOCALES)
def test_the_loss_chart_draws_reward_accuracy_on_its_own_axis_when_logged(locale: str) -> None:
    import plotly.graph_objects as go

    points = [parse_metric({**DPO_LINE, "current_steps": step, "accuracy": step / 4}) for step in (1, 2, 3)]
    figure = loss_figure(points, names=view.loss_chart_names(locale))
    go.Figure(figure)  # plotly accepts every property
    extra = [trace for trace in figure["data"] if trace.get("yaxis") == "y3"]
    assert [(t["name"], t["x"], t["y"]) for t in extra] == [(CATALOGUE[locale]["chart.reward_accuracy"], [1, 2, 3], [0.25, 0.5, 0.75])]
    assert figure["layout"]["yaxis3"]["range"] == [0, 1.05]
    assert figure["layout"]["yaxis3"]["title"]["text"] == CATALOGUE[locale]["chart.reward_accuracy"]
    # A run that logs none (pt, sft, kto, rm) draws the chart as before.
    plain = loss_figure([parse_metric({k: v for k, v in DPO_LINE.items() if k != "accuracy"})], names=view.loss_chart_names(locale))
    assert len(plain["data"]) == 3 and "yaxis3" not in plain["layout"]


def test_a_ppo_reward_gets_its_own_axis_too() -> None:
    figure = loss_figure([parse_metric({**DPO_LINE, "accuracy": None, "reward": 1.5})])
    assert [(t["name"], t["yaxis"]) for t in figure["data"][3:]] == [("reward", "y4")]


# --- real runs: LLaMA-Factory trains each stage on the demo model ------------------------------------


@pytest.fixture
def board(tmp_path, demo_assets):
    from backend.service import RocBoard

    board = RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports")
    yield board
    for run in board.runs():
        if run.active:
            board.stop(run.id)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("stage", ["pt", "dpo", "kto", "rm"])
@starts("lf_helper", "trainer")
def test_each_stage_trains_the_demo_model_to_an_adapter(board, stage: str) -> None:
    from tests.harness import wait_for

    form = stage_form(stage, max_steps=3, logging_steps=1, save_steps=500, run_name=f"stage-{stage}")
    started = time.monotonic()
    result = board.start(form)
    assert result.started, [f.line() for f in result.findings]
    run_id = result.run.id

    def finished():
        snap = board.snapshot(run_id)
        return snap if not snap.run.active else None

    snap = wait_for(finished, timeout=540, interval=0.5)
    seconds = time.monotonic() - started
    run_dir = board.store.run_dir(run_id)
    log = (run_dir / "train.log").read_text(errors="replace")
    assert snap is not None, f"the {stage} run did not end in time"
    assert snap.run.state == "finished" and snap.run.exit_code == 0, log[-4000:]
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["stage"] == stage
    assert (run_dir / "output" / "adapter_model.safetensors").is_file()
    records = [json.loads(line) for line in (run_dir / "output" / "trainer_log.jsonl").read_text().splitlines() if line.strip()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert len(losses) == 3, records
    metrics = sorted({key for r in records for key in r})
    if stage == "dpo":
        # The metric the chart draws: LLaMA-Factory's `rewards/accuracies`, logged as `accuracy`.
        assert all("accuracy" in r for r in records if "loss" in r)
        assert [p.accuracy for p in snap.points if p.loss is not None] == [r["accuracy"] for r in records if "loss" in r]
        assert any(t.get("yaxis") == "y3" for t in loss_figure(snap.points)["data"])
    accuracies = [r["accuracy"] for r in records if "accuracy" in r]
    print(f"\nSTAGE-RUN {json.dumps({'stage': stage, 'seconds': round(seconds, 1), 'losses': losses, 'accuracies': accuracies, 'metrics': metrics})}")
