"""Named GPUs (issue 30 §1: "each run asks for its GPUs: a count ... or named indices"): the
form's one field "GPUs on this machine" (schema `local_gpus`, LocalPlacement.gpus) is parsed
strictly and bounded; a bad list, a GPU named twice, a count other than the multi-GPU plan's,
or a GPU the node does not have each get a finding in both languages before anything is made;
it is saved with the run and never written into LLaMA-Factory's YAML; and the queue asks for
exactly those GPUs (stand-in trainers through the real launcher, environments read from /proc)."""

from __future__ import annotations

import json

import pytest

from backend.config import schema
from backend.config.placement import LocalPlacement, parse_placement_form, placement_to_form
from backend.i18n import translate
from backend.runs import RunStore
from backend.runs.queue import RunQueue, read_launch_gpus, read_launch_named
from backend.service import RocBoard, demo_form
from tests.test_gpu_slots_queue import STAND_IN, environ

PARSED = [("", ()), ("0,1", (0, 1)), (" 3 ", (3,)), ("2-3", (2, 3)), ("1, 0", (1, 0)), (None, ()), (2, (2,))]
REFUSED = [
    ("a", "local-gpus-bad"),
    ("0;1", "local-gpus-bad"),
    ("-1", "local-gpus-bad"),
    ("3-1", "local-gpus-bad"),
    ("0,0", "local-gpus-duplicate"),
    ("0-2,1", "local-gpus-duplicate"),
    ("64", "local-gpus-index"),
    ("9" * 40, "local-gpus-index"),
    ("0-63,1-2", "local-gpus-too-many"),
    ("0," * 200, "text-too-long"),
    (["0"], "text-not-text"),
    (True, "text-not-text"),
]


@pytest.mark.parametrize(("typed", "gpus"), PARSED)
def test_named_gpus_are_parsed(typed, gpus) -> None:
    placement, findings = parse_placement_form({"run_on": "local", "local_gpus": typed})
    assert findings == [] and placement == LocalPlacement(gpus=gpus)
    assert parse_placement_form(placement_to_form(placement)) == (placement, [])  # saved and read back


@pytest.mark.parametrize(("typed", "rule"), REFUSED)
def test_a_bad_list_is_refused_in_both_languages(typed, rule) -> None:
    placement, findings = parse_placement_form({"run_on": "local", "local_gpus": typed})
    assert placement == LocalPlacement() and [(f.key, f.rule) for f in findings] == [("local_gpus", rule)]
    english, chinese = findings[0].text("en"), findings[0].text("zh-CN")
    assert all(text and "check." not in text for text in (*english, *chinese)) and english != chinese
    assert not any(word in chinese[0] for word in ("GPUs on this machine", " is ", " twice"))


def test_the_field_is_one_schema_field_and_never_a_yaml_key(tmp_path) -> None:
    field = schema.field("local_gpus")
    assert field in schema.placement_fields() and field.yaml is None and field.default == ""
    assert translate("label.local_gpus", "en") != translate("label.local_gpus", "zh-CN")
    board = RocBoard(tmp_path / "runs")
    form = {**demo_form(), "local_gpus": "0"}
    config, findings, _ = board.pipeline.parse(form)
    assert findings == []
    assert "local_gpus" not in json.dumps(board.pipeline.run_args(config, None, "out"))
    # a YAML that sets it as a key gets no named GPU (it is not one of LLaMA-Factory's keys)
    imported = board.import_yaml("model_name_or_path: x\nlocal_gpus: '1'\n", "cpu-demo")
    assert "local_gpus" not in imported.form_values


def test_a_count_other_than_the_plans_is_refused(tmp_path) -> None:
    board = RocBoard(tmp_path / "runs")
    form = {**demo_form(), "preset": "mi300x", "local_gpus": "0,1"}  # no plan: one GPU
    _, findings, _ = board.pipeline.parse(form)
    count = [f for f in findings if f.rule == "local-gpus-count"]
    assert len(count) == 1 and count[0].params == {"named": 2, "gpus": "0,1", "asked": 1}
    assert "0,1" in count[0].text("zh-CN")[0]
    two = {**form, "dist_nproc": 2, "dist_gpus": "0,1", "local_gpus": "2,3"}  # two GPUs named for a 2-GPU plan
    assert not any(f.rule == "local-gpus-count" for f in board.pipeline.parse(two)[1])


def board_on(runs, monkeypatch, node: tuple[int, ...]) -> RocBoard:
    board = RocBoard(runs)
    board.set_node(node)
    launcher = board.run_manager.launcher
    real_start = launcher.start
    monkeypatch.setattr(launcher, "start", lambda run_id, env, command=None: real_start(run_id, env, command=STAND_IN))
    return board


def start(board: RocBoard, name: str, gpus: str):
    """A Start of the demo form naming `gpus` (the form's checks; LLaMA-Factory is not asked)."""
    form = {**demo_form(), "run_name": name, "local_gpus": gpus}
    config, findings, preset = board.pipeline.parse(form)
    assert findings == []
    plan, _ = board.pipeline.plan_of(form, preset)
    placement, _ = board.pipeline.placement_of(form, preset)
    return board.run_manager.start(config, preset, plan, findings, placement=placement, intent=name)


def test_a_gpu_the_node_lacks_is_refused_before_anything_is_made(runs, monkeypatch) -> None:
    for node in ((0, 1), (0,)):  # side by side, and one slot
        board = board_on(runs, monkeypatch, node)
        missing = "5" if len(node) > 1 else "1"
        refused = start(board, "missing", missing)
        assert refused.run is None and [(f.key, f.rule) for f in refused.findings] == [("local_gpus", "local-gpus-not-on-node")]
        assert refused.findings[0].params == {"gpus": missing, "have": ",".join(map(str, node))}
        assert f"GPU {missing}" in refused.findings[0].text("zh-CN")[0]
        assert board.store.list() == [] and RunQueue(board.store).queued() == []


def test_a_named_gpu_run_gets_exactly_that_gpu(runs, monkeypatch) -> None:
    board = board_on(runs, monkeypatch, (0, 1))
    store = board.store
    on_one = start(board, "on-one", "1")
    assert on_one.run.state == "running"  # GPU 0 is free too: it still gets 1
    assert environ(on_one.run.pid)["HIP_VISIBLE_DEVICES"] == environ(on_one.run.pid)["CUDA_VISIBLE_DEVICES"] == "1"
    assert read_launch_gpus(runs / on_one.run.id) == (1, (1,)) and read_launch_named(runs / on_one.run.id) == (1,)
    # Another run naming GPU 1 waits for it; a run behind it asking any one GPU takes GPU 0.
    also_one = start(board, "also-one", "1")
    anywhere = start(board, "anywhere", "")
    assert store.read(also_one.run.id).state == "queued"
    assert store.read(anywhere.run.id).state == "running" and board.run_manager.gpus_of(anywhere.run.id) == (0,)
    view = board.run_manager.node_view()
    assert [(w.run_id, w.reason, w.held_by) for w in view.decision.waiting] == [(also_one.run.id, "busy", (on_one.run.id,))]
    board.run_manager.stop(on_one.run.id)
    assert board.run_manager.advance_queue().id == also_one.run.id
    assert environ(store.read(also_one.run.id).pid)["HIP_VISIBLE_DEVICES"] == "1"
    # saved with the run: its form.json says which GPUs it named
    assert json.loads((runs / also_one.run.id / "form.json").read_text())["local_gpus"] == "1"


def test_submit_names_gpus_and_a_bad_list_is_refused_before_anything_is_made(tmp_path, demo_assets) -> None:
    """`app.py submit --gpus` is the form's field: checked the same way, refused (exit 1, the
    finding and its fix on stderr) before LLaMA-Factory is asked or anything is made."""
    import io

    import yaml

    from backend.runs_cli import EXIT_REFUSED, submit_main

    config = tmp_path / "demo.yaml"
    demo = {"model_name_or_path": str(demo_assets.model_dir), "template": "llama3", "dataset_dir": str(demo_assets.dataset_dir), "dataset": "demo"}
    config.write_text(yaml.safe_dump({**demo, "stage": "sft", "do_train": True, "finetuning_type": "lora"}))
    runs = tmp_path / "runs"
    for gpus, words in (("0,0", "lists GPU 0 twice"), ("0,1", "names 2 GPUs (0,1); the multi-GPU plan runs on 1"), ("x", "'x' is not a GPU index")):
        out, err = io.StringIO(), io.StringIO()
        assert submit_main([str(config), "--gpus", gpus, "--runs-dir", str(runs), "--cpu-slots", "2"], out, err) == EXIT_REFUSED
        assert "local_gpus: GPUs on this machine" in err.getvalue() and words in err.getvalue(), err.getvalue()
        assert out.getvalue() == "" and RunStore(runs).list() == []


def test_a_resume_asks_for_the_gpus_it_named_again(runs, monkeypatch) -> None:
    """A stopped run that named GPU 1 resumes on GPU 1 (GPU 0 free too, which a count would
    take), from its form.json's local_gpus; while another run holds GPU 1 it waits for it."""
    from backend.config.run_form import saved_form
    from backend.runs import FORM_FILE
    from tests.test_resume import make_run

    board = board_on(runs, monkeypatch, (0, 1))
    store, rm = board.store, board.run_manager
    stopped = make_run(store)
    form = {**demo_form(), "local_gpus": "1"}
    config, findings, preset = board.pipeline.parse(form)
    plan, _ = board.pipeline.plan_of(form, preset)
    placement, _ = board.pipeline.placement_of(form, preset)
    assert findings == [] and placement == LocalPlacement(gpus=(1,))
    (runs / stopped / FORM_FILE).write_text(json.dumps(saved_form(config, plan, placement)))

    resumed = rm.resume(stopped)
    assert resumed.findings == [] and resumed.run.state == "running"
    assert rm.gpus_of(stopped) == (1,) and environ(resumed.run.pid)["HIP_VISIBLE_DEVICES"] == "1"
    assert read_launch_named(runs / stopped) == (1,) and read_launch_gpus(runs / stopped) == (1, (1,))

    rm.stop(stopped)
    holder = start(board, "holder", "1")
    assert holder.run.state == "running" and rm.gpus_of(holder.run.id) == (1,)
    again = rm.resume(stopped)
    assert again.findings == [] and again.run.state == "queued"  # GPU 0 is free: not its GPU
    view = rm.node_view()
    assert [(w.run_id, w.reason, w.held_by) for w in view.decision.waiting] == [(stopped, "busy", (holder.run.id,))]
    rm.stop(holder.run.id)
    assert rm.advance_queue().id == stopped and rm.gpus_of(stopped) == (1,)
    assert environ(store.read(stopped).pid)["HIP_VISIBLE_DEVICES"] == "1"
