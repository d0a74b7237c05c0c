"""The facade behind "the form follows the run you look at": a run's own settings, whether
Resume can act on it, and checks while the user types that never wait for LLaMA-Factory.
Run directories are built by hand as in tests/test_resume.py (checked against real runs)."""

from __future__ import annotations

import json

import pytest

from backend.config import schema
from backend.findings import Finding
from backend.runs import FORM_FILE
from backend.service import RocBoard, demo_form
from backend.service.pipeline import LlamaFactoryCheckCache
from tests.test_resume import make_run


@pytest.fixture
def asked():
    return []


@pytest.fixture
def board(tmp_path, asked):
    def check(args):
        asked.append(args)
        return [Finding.of("lora_rank", "llamafactory-refused", message="lf-refused", severity="warning", error="from the parser")]

    return RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports", lf_cache=LlamaFactoryCheckCache(check=check))


def test_checks_while_typing_never_ask_llamafactory_but_show_its_known_answer(board, asked):
    form = demo_form()
    quiet = board.preview(form, ask_llamafactory=False)
    assert asked == [], "a live check ran LLaMA-Factory's parser (seconds of importing torch)"
    assert not [f for f in quiet.findings if f.rule == "llamafactory-refused"]
    assert "max_steps" in quiet.yaml_text

    board.preview(form)  # Preview / Start ask
    assert len(asked) == 1
    again = board.preview(form, ask_llamafactory=False)
    assert len(asked) == 1
    assert [f.rule for f in again.findings if f.rule == "llamafactory-refused"] == ["llamafactory-refused"], "the known answer was dropped"


def test_a_runs_form_is_its_saved_settings_with_defaults_for_missing_fields(board):
    run_id = make_run(board.store)
    saved = {"max_steps": 3000, "learning_rate": "2e-4", "run_name": "long", "not_a_field": "dropped"}
    (board.store.run_dir(run_id) / FORM_FILE).write_text(json.dumps(saved))
    form = board.run_form(run_id)
    assert form["max_steps"] == 3000 and form["learning_rate"] == "2e-4" and form["run_name"] == "long"
    assert "not_a_field" not in form
    assert set(form) == {f.name for f in schema.page_fields()}
    assert form["seed"] == schema.field("seed").default


def test_a_vanished_or_hostile_run_has_no_form(board):
    assert board.run_form("20990101-000000-none") is None
    assert board.run_form("../../etc") is None


@pytest.mark.parametrize(
    ("state", "checkpoints", "resumable"),
    [("stopped", (5, 10), True), ("failed", (5,), True), ("stopped", (), False), ("finished", (5, 10), False)],
)
def test_resume_is_offered_only_when_it_can_act(board, state, checkpoints, resumable):
    run_id = make_run(board.store, state=state, checkpoints=checkpoints)
    view = board.run_view(run_id)
    assert view.resumable is resumable
    assert view.active is False


def test_a_runs_config_yaml_is_read_when_it_is_opened_not_at_every_tick(board):
    run_id = make_run(board.store)
    opened = board.run_view(run_id)
    assert "max_steps: 30" in opened.config_yaml
    (board.store.run_dir(run_id) / "output" / "trainer_log.jsonl").open("a").write('{"current_steps": 14, "total_steps": 30, "loss": 1.0}\n')
    tick = board.run_view(run_id, shown=opened.version)
    assert not tick.unchanged and tick.config_yaml is None
    assert board.run_view(None).config_yaml == ""
