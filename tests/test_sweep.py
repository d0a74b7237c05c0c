"""Sweeps without a trainer: the spec, its bounds, the run names, the refusals (in English and
Chinese), the record on disk, the ranking, and `app.py sweep --dry-run` (backend/sweep)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from backend.service import demo_form
from backend.sweep.record import SweepMember, SweepNotFound, SweepRecord, list_sweeps, new_sweep_id, read_record, write_record
from backend.sweep.spec import MAX_RUNS, Axis, SweepRefused, SweepSpec, expand, parse_vary, sanitize, value_tag
from backend.sweep.view import SweepRow, best_run, rank


def refusal(spec: SweepSpec, form=None) -> SweepRefused:
    with pytest.raises(SweepRefused) as caught:
        expand(spec, form or demo_form(), "demo")
    return caught.value


def test_a_grid_is_the_product_of_its_values_each_run_named_by_them():
    spec = SweepSpec((parse_vary("learning_rate=1e-4,2e-4"), parse_vary("lora_rank=8,16")))
    runs = expand(spec, demo_form(), "demo")
    assert [run.name for run in runs] == ["demo-lr1e-4-r8", "demo-lr1e-4-r16", "demo-lr2e-4-r8", "demo-lr2e-4-r16"]
    assert [run.values for run in runs][1] == (("learning_rate", 1e-4), ("lora_rank", 16))
    # Each run's form is the base form with its values (typed by the field's own parser) and its name.
    assert runs[3].form == {**demo_form(), "learning_rate": 2e-4, "lora_rank": 16, "run_name": "demo-lr2e-4-r16"}
    assert len({run.name for run in runs}) == 4


def test_seeds_are_an_axis_from_the_forms_own_seed():
    runs = expand(SweepSpec((Axis("lora_rank", ("4",)),), seeds=3), {**demo_form(), "seed": 7}, "s")
    assert [run.form["seed"] for run in runs] == [7, 8, 9]
    assert [run.name for run in runs] == ["s-r4-seed7", "s-r4-seed8", "s-r4-seed9"]


def test_names_stay_unique_beside_the_ones_taken_and_are_sanitized():
    runs = expand(SweepSpec((Axis("lora_rank", ("8",)),)), demo_form(), "my run/../x", taken=("my-run-..-x-r8",))
    assert sanitize("my run/../x") == "my-run-..-x"
    assert [run.name for run in runs] == ["my-run-..-x-r8-2"]
    assert sanitize("/" * 10) == "sweep" and len(sanitize("a" * 500)) <= 96
    assert [value_tag(v) for v in (2e-4, 5e-5, 0.05, 16, 1.0, "cosine")] == ["2e-4", "5e-5", "0.05", "16", "1", "cosine"]


def test_a_sweep_of_ten_thousand_runs_is_refused_from_its_counts_before_any_value_is_read():
    # 100 x 100 values that are not numbers: the count refuses first, with its own message.
    values = tuple(f"x{i}" for i in range(64))
    spec = SweepSpec((Axis("learning_rate", values), Axis("lora_rank", values), Axis("cutoff_len", values[:3])))
    refused = refusal(spec)
    assert refused.message.key == "sweep.too-many-runs"
    assert refused.message.params == {"count": 64 * 64 * 3, "limit": MAX_RUNS}
    assert "12288" in refused.message.text("en") and "12288" in refused.message.text("zh-CN")
    with pytest.raises(SweepRefused) as caught:
        parse_vary("lora_rank=" + ",".join(map(str, range(1, 10_001))))
    assert caught.value.message.key == "sweep.too-many-values"


@pytest.mark.parametrize(
    ("spec", "key"),
    [
        (SweepSpec(), "sweep.nothing-varies"),
        (SweepSpec(tuple(Axis(name, ("1",)) for name in ("lora_rank", "lora_alpha", "cutoff_len", "batch_size"))), "sweep.too-many-fields"),
        (SweepSpec((Axis("lora_rank", ("8",)), Axis("lora_rank", ("16",)))), "sweep.field-twice"),
        (SweepSpec((Axis("seed", ("1", "2")),), seeds=2), "sweep.seed-twice"),
        (SweepSpec(seeds=65), "sweep.seeds-range"),
        (SweepSpec((Axis("model_path", ("/a", "/b")),)), "sweep.unknown-field"),
        (SweepSpec((Axis("no_such_field", ("1",)),)), "sweep.unknown-field"),
        (SweepSpec((Axis("learning_rate", ("1e-4", "0.0001")),)), "sweep.duplicate-value"),
    ],
)
def test_a_spec_out_of_bounds_gets_its_own_message(spec, key):
    refused = refusal(spec)
    assert refused.message.key == key
    assert refused.message.text("zh-CN") != refused.message.text("en")


@pytest.mark.hostile
@pytest.mark.parametrize(
    ("field", "value", "english", "chinese"),
    [
        ("learning_rate", "abc", ["Learning rate", "'abc'", "must be a number"], ["学习率", "'abc'"]),
        ("learning_rate", "-1", ["Learning rate", "'-1'", "(0, 1]"], ["学习率", "'-1'", "(0, 1]"]),
        ("lora_rank", "2.5", ["LoRA rank", "'2.5'"], ["LoRA", "'2.5'"]),
        ("lora_rank", "1" * 5000, ["LoRA rank"], ["LoRA"]),
        ("lr_scheduler_type", "sideways", ["'sideways'", "cosine"], ["'sideways'"]),
    ],
)
def test_a_value_the_field_refuses_names_the_field_and_the_value(field, value, english, chinese):
    from tests.test_zh_no_english import english_runs

    refused = refusal(SweepSpec((Axis(field, ("1e-2" if field == "learning_rate" else "8" if field == "lora_rank" else "linear", value)),)))
    assert refused.message.key == "sweep.bad-value"
    en, zh = refused.message.text("en"), refused.message.text("zh-CN")
    assert all(part in en for part in english), en
    assert all(part in zh for part in chinese), zh
    assert english_runs(zh) == [], zh


def test_record_is_written_whole_and_read_without_following_a_link(tmp_path):
    root = tmp_path / "runs"
    root.mkdir()
    sweep_id = new_sweep_id()
    member = SweepMember("demo-lr1e-4", "demo-lr1e-4", (("learning_rate", 1e-4),))
    record = SweepRecord(sweep_id, "demo", "2026-01-01T00:00:00+00:00", (("learning_rate", ("1e-4", "2e-4")),), 0, {"lora_rank": 8}, (member,))
    write_record(root, record)
    assert read_record(root, sweep_id) == record
    assert list_sweeps(root) == [sweep_id]
    assert [p.name for p in (root / "sweeps").iterdir()] == [f"{sweep_id}.json"]  # no temporary file left
    # A link in its place is not followed; an id that is not one never reaches the disk.
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps(record.to_json()))
    os.unlink(root / "sweeps" / f"{sweep_id}.json")
    os.symlink(target, root / "sweeps" / f"{sweep_id}.json")
    with pytest.raises(SweepNotFound):
        read_record(root, sweep_id)
    for bad in ("../../etc/passwd", "sweep-1", ""):
        with pytest.raises(SweepNotFound):
            read_record(root, bad)
    # A file that is not a record (wrong types, too large) reads as no sweep.
    other = "sweep-20260101-000000-beef"
    (root / "sweeps" / f"{other}.json").write_text(json.dumps({**record.to_json(), "id": other, "runs": "all"}))
    with pytest.raises(SweepNotFound):
        read_record(root, other)
    (root / "sweeps" / f"{other}.json").write_bytes(b" " * (1024 * 1024 + 1))
    with pytest.raises(SweepNotFound):
        read_record(root, other)


def _row(run_id, final_loss=None, eval_loss=None, bleu=None, state="finished"):
    return SweepRow(run_id, run_id, (), state, final_loss=final_loss, final_eval_loss=eval_loss, best_eval_loss=eval_loss, scores=(("bleu4", bleu),))


def test_ranking_puts_the_best_first_and_runs_without_the_metric_last():
    rows = [_row("a", 2.0, bleu=10.0), _row("b", None, state="queued"), _row("c", 1.0, bleu=30.0), _row("d", 2.0, bleu=float("nan"))]
    assert [r.run_id for r in rank(rows, "final_loss")] == ["c", "a", "d", "b"]  # a tie keeps the sweep's order
    assert [r.run_id for r in rank(rows, "bleu4")] == ["c", "a", "b", "d"]  # higher is better; NaN is no value
    assert best_run(rank(rows, "final_eval_loss"), "final_eval_loss") == ""
    with pytest.raises(ValueError):
        rank(rows, "accuracy")


def test_dry_run_says_the_runs_and_their_cost_and_queues_nothing(tmp_path):
    from backend.service import RocBoard
    from backend.sweep.cli import sweep_main

    runs = tmp_path / "runs"
    config = tmp_path / "demo.yaml"
    config.write_text(RocBoard(runs).preview(demo_form(), ask_llamafactory=False).yaml_text)
    out, err = io.StringIO(), io.StringIO()
    assert sweep_main([str(config), "--vary", "learning_rate=1e-4,2e-4,5e-4", "--vary", "lora_rank=8,16", "--dry-run", "--runs-dir", str(runs)], out, err) == 0
    lines = err.getvalue().splitlines()
    assert lines[0].startswith("demo-lr1e-4-r8: learning_rate=1e-4 lora_rank=8; about ") and "GiB per device, 0 GPU(s)" in lines[0]
    assert lines[6].startswith("6 runs; 0 GPU(s) asked for in all")
    assert out.getvalue() == ""
    assert not (runs / "sweeps").exists()
    # Refused before anything is queued: too many runs, a value refused (in Chinese too).
    err = io.StringIO()
    assert sweep_main([str(config), "--vary", "lora_rank=" + ",".join(map(str, range(1, 65))), "--vary", "cutoff_len=64,128", "--runs-dir", str(runs)], out, err) == 1
    assert "128 runs" in err.getvalue() and "Nothing was queued" in err.getvalue()
    err = io.StringIO()
    assert sweep_main([str(config), "--vary", "learning_rate=1e-4,abc", "--runs-dir", str(runs), "--lang", "zh-CN"], out, err) == 1
    assert "学习率" in err.getvalue() and "'abc'" in err.getvalue()
    # A value every field accepts but the run's checks refuse (val_size 1 leaves nothing to train
    # on) refuses the whole sweep: its first run, which the checks pass, is not made either.
    err = io.StringIO()
    assert sweep_main([str(config), "--vary", "val_size=0.1,1", "--runs-dir", str(runs)], out, err) == 1
    assert "demo-val_size1" in err.getvalue() and "none of its runs was queued" in err.getvalue()
    assert out.getvalue() == ""
    assert RocBoard(runs).runs() == [] and not (runs / "sweeps").exists()


def test_status_of_a_sweep_that_is_not_there(tmp_path):
    from backend.runs_cli import status_main

    err = io.StringIO()
    assert status_main(["--sweep", "sweep-20260101-000000-abcd", "--runs-dir", str(tmp_path / "runs")], io.StringIO(), err) == 2
    assert "no sweep sweep-20260101-000000-abcd" in err.getvalue()
    assert status_main(["--sweep", "../x", "--runs-dir", str(tmp_path / "runs"), "--lang", "zh-CN"], io.StringIO(), err) == 2


def test_the_sweep_subcommand_is_wired():
    import app

    assert app.SUBCOMMANDS["sweep"] == "backend.sweep.cli:sweep_main"
    assert Path(app.__file__).read_text().count("app.py sweep") == 1


def test_early_stop_stops_a_run_clearly_worse_than_the_median_at_its_step():
    from backend.sweep.view import losing_runs

    evals = {
        "a": {10: 2.0, 20: 1.5},
        "b": {10: 2.1, 20: 1.6},
        "c": {10: 2.2, 20: 1.7},
        "bad": {10: 3.0, 20: 2.5},  # 2.5 > median 1.65 x 1.1
        "early": {10: 9.0},  # one eval point: not yet judged with K = 2
    }
    stopped = losing_runs(evals, {"a", "bad", "early"}, after_evals=2, margin=0.1)
    assert [(s.run_id, s.step, s.eval_loss) for s in stopped] == [("bad", 20, 2.5)]
    assert stopped[0].median == pytest.approx(1.65)
    # Within the margin, or with fewer than three runs at that step, or not training: no stop.
    assert losing_runs(evals, {"bad"}, after_evals=2, margin=0.6) == []
    assert losing_runs({"a": {20: 1.0}, "bad": {20: 5.0}}, {"bad"}, after_evals=1, margin=0.1) == []
    assert losing_runs(evals, {"a", "b", "c"}, after_evals=2, margin=0.1) == []


@pytest.mark.parametrize("text", ["3", "x,0.1", "0,0.1", "3,-1", "3,nan", "3,inf", "5000,0.1", "3," + "9" * 400])
def test_a_bad_early_stop_is_refused(text):
    from backend.sweep.cli import parse_early_stop

    with pytest.raises(SweepRefused) as caught:
        parse_early_stop(text)
    assert caught.value.message.key == "sweep.bad-early-stop"
    assert parse_early_stop("3,0.1") == (3, 0.1)


def test_early_stop_from_the_command_line_needs_wait_or_an_app(tmp_path):
    from backend.sweep.cli import sweep_main

    err = io.StringIO()
    assert sweep_main(["missing.yaml", "--vary", "lora_rank=4,8", "--early-stop", "2,0.1", "--runs-dir", str(tmp_path / "runs")], io.StringIO(), err) == 1
    assert "add --wait" in err.getvalue()
    # While an app keeps this runs directory, its queue keeper applies the rule: no --wait needed
    # (the command goes on, to the missing file).
    from backend.runs import RunStore
    from backend.runs.queue import RunQueue

    held = RunQueue(RunStore(tmp_path / "runs")).hold_keeper_lock()
    assert held is not None
    try:
        err = io.StringIO()
        assert sweep_main(["missing.yaml", "--vary", "lora_rank=4,8", "--early-stop", "2,0.1", "--runs-dir", str(tmp_path / "runs")], io.StringIO(), err) == 2
        assert "add --wait" not in err.getvalue() and "missing.yaml" in err.getvalue()
    finally:
        os.close(held)


def test_a_record_keeps_its_early_stop_rule(tmp_path):
    sweep_id = new_sweep_id()
    record = SweepRecord(sweep_id, "demo", "2026-01-01T00:00:00+00:00", (), 2, {}, (), "final_eval_loss", None, (3, 0.1))
    write_record(tmp_path, record)
    assert read_record(tmp_path, sweep_id).early_stop == (3, 0.1)
    data = json.loads((tmp_path / "sweeps" / f"{sweep_id}.json").read_text())
    (tmp_path / "sweeps" / f"{sweep_id}.json").write_text(json.dumps({**data, "early_stop": [True, "x"]}))
    with pytest.raises(SweepNotFound):
        read_record(tmp_path, sweep_id)


def _grown(added, axes_now=(("learning_rate", (1e-4, 2e-4)), ("lora_rank", (8,))), seeds=0, runs_now=2, taken=("demo-lr1e-4-r8", "demo-lr2e-4-r8")):
    from backend.sweep.spec import expand_added

    return expand_added(axes_now, seeds, added, demo_form(), "demo", taken, runs_now)


def test_values_added_to_a_sweep_make_the_new_points_of_its_grid():
    runs, axes = _grown((Axis("lora_rank", ("16", "32")),))
    assert [run.name for run in runs] == ["demo-lr1e-4-r16", "demo-lr1e-4-r32", "demo-lr2e-4-r16", "demo-lr2e-4-r32"]
    assert runs[0].form["lora_rank"] == 16 and runs[0].form["learning_rate"] == 1e-4 and runs[0].form["run_name"] == "demo-lr1e-4-r16"
    assert dict(axes) == {"learning_rate": (1e-4, 2e-4), "lora_rank": (8, 16, 32)}
    # With seeds, each new point gets every seed; names stay unique beside the sweep's own.
    runs, _ = _grown((Axis("learning_rate", ("5e-4",)),), seeds=2, runs_now=4, taken=("demo-lr5e-4-r8-seed42",))
    assert [run.name for run in runs] == ["demo-lr5e-4-r8-seed42-2", "demo-lr5e-4-r8-seed43"]


@pytest.mark.parametrize(
    ("added", "key", "english", "chinese"),
    [
        ((Axis("lora_rank", ("16", "8")),), "sweep.value-already-there", "LoRA rank has the value '8' in this sweep already", "已有取值"),
        ((Axis("cutoff_len", ("64",)),), "sweep.add-field-not-varied", "is not varied by this sweep: values can be added to learning_rate, lora_rank", "不变化"),
        ((Axis("lora_rank", tuple(str(r) for r in range(9, 41))),), "sweep.too-many-runs", "66 runs", "66 个运行"),
        ((), "sweep.nothing-varies", "Nothing varies", "没有"),
    ],
)
def test_values_that_cannot_be_added_are_refused_in_both_languages(added, key, english, chinese):
    with pytest.raises(SweepRefused) as caught:
        _grown(added)
    message = caught.value.message
    assert message.key == key
    assert english in message.text("en"), message.text("en")
    assert chinese in message.text("zh-CN"), message.text("zh-CN")
    # A seeds-only sweep has no field to add values to.
    with pytest.raises(SweepRefused) as caught:
        _grown((Axis("lora_rank", ("16",)),), axes_now=(), seeds=4)
    assert caught.value.message.key == "sweep.add-no-fields"


def test_add_to_a_sweep_from_the_command_line(tmp_path):
    """`sweep --add-to ID --vary ...`: the added runs and their cost (dry run: nothing made); an
    unknown sweep, a value it has, and options that belong to a new sweep are refused."""
    from backend.sweep.cli import sweep_main

    runs = tmp_path / "runs"
    runs.mkdir()
    sweep_id = new_sweep_id()
    members = tuple(SweepMember(f"run-{r}", f"demo-r{r}", (("lora_rank", r),)) for r in (4, 8))
    # The record keeps the values as they were given (the page's "4"), the refusal compares form values.
    write_record(runs, SweepRecord(sweep_id, "demo", "2026-01-01T00:00:00+00:00", (("lora_rank", ("4", "8")),), 0, demo_form(), members))
    out, err = io.StringIO(), io.StringIO()
    assert sweep_main(["--add-to", sweep_id, "--vary", "lora_rank=16,32", "--dry-run", "--runs-dir", str(runs)], out, err) == 0, err.getvalue()
    lines = err.getvalue().splitlines()
    assert lines[0].startswith("demo-r16: lora_rank=16; about ") and lines[1].startswith("demo-r32: lora_rank=32; about ")
    assert lines[2].startswith("2 runs; ") and lines[3] == "dry run: nothing was queued."
    assert out.getvalue() == "" and read_record(runs, sweep_id).runs == members
    err = io.StringIO()
    assert sweep_main(["--add-to", "sweep-20260101-000000-abcd", "--vary", "lora_rank=16", "--runs-dir", str(runs), "--lang", "zh-CN"], out, err) == 2
    assert "没有扫描 sweep-20260101-000000-abcd" in err.getvalue()
    err = io.StringIO()
    assert sweep_main(["--add-to", sweep_id, "--vary", "lora_rank=16,8", "--runs-dir", str(runs)], out, err) == 1
    assert "LoRA rank has the value '8' in this sweep already" in err.getvalue() and "Nothing was queued" in err.getvalue()
    err = io.StringIO()
    assert sweep_main(["--add-to", sweep_id, "--vary", "lora_rank=" + ",".join(map(str, range(9, 73))), "--runs-dir", str(runs), "--lang", "zh-CN"], out, err) == 1
    assert "LoRA" in err.getvalue() and "66" in err.getvalue() and "没有排队任何运行" in err.getvalue(), err.getvalue()
    err = io.StringIO()
    assert sweep_main(["demo.yaml", "--add-to", sweep_id, "--vary", "lora_rank=16", "--runs-dir", str(runs)], out, err) == 2
    assert "--add-to takes only --vary" in err.getvalue()
    err = io.StringIO()
    assert sweep_main(["--vary", "lora_rank=16", "--runs-dir", str(runs)], out, err) == 2
    assert "name the training YAML" in err.getvalue()
    assert out.getvalue() == "" and read_record(runs, sweep_id).runs == members
