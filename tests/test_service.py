"""The backend facade refuses bad input before anything exists on disk."""

from __future__ import annotations

import threading

import pytest

from backend.config import FORM_FIELDS
from backend.service import RocBoard, demo_form
from backend.view import field_messages, findings_markdown
from tests.tiers import starts

BAD_FORMS = [
    ("learning-rate-text", {"learning_rate": "abc"}, "learning_rate"),
    ("learning-rate-negative", {"learning_rate": "-1e-4"}, "learning_rate"),
    ("learning-rate-zero", {"learning_rate": "0"}, "learning_rate"),
    ("batch-zero", {"batch_size": 0}, "batch_size"),
    ("batch-fraction", {"batch_size": 2.5}, "batch_size"),
    ("steps-negative", {"max_steps": -5}, "max_steps"),
    ("cutoff-huge", {"cutoff_len": 10_000_000}, "cutoff_len"),
    ("model-missing", {"model_path": "/no/such/model"}, "model_path"),
    ("hub-id-offline", {"model_path": "meta-llama/Llama-3-8B"}, "model_path"),
    ("dataset-undefined", {"dataset": "nope"}, "dataset"),
    ("template-unknown", {"template": "llama-99"}, "template"),
    ("run-name-slash", {"run_name": "../escape"}, "run_name"),
    ("bf16-on-cpu-demo", {"precision": "bf16"}, "precision"),
    ("preset-unknown", {"preset": "gtx-1080"}, "preset"),
    ("qlora-on-cpu", {"quantization_bit": "4"}, "quantization_bit"),
]


@pytest.fixture
def board(tmp_path, demo_assets):
    return RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports")


@pytest.mark.parametrize(("change", "field"), [c[1:] for c in BAD_FORMS], ids=[c[0] for c in BAD_FORMS])
def test_bad_form_starts_nothing_and_names_the_field(board, change, field):
    result = board.start({**demo_form(), **change})
    assert not result.started
    problems = [f for f in result.findings if f.severity == "problem"]
    assert problems and all(f.fix for f in problems)
    messages = field_messages(result.findings, FORM_FIELDS)
    assert messages.get(field), f"no message next to {field}: {[(f.key, f.rule) for f in result.findings]}"
    assert list(board.store.root.iterdir()) == []  # no run directory, no staging leftovers


def test_messages_exist_in_chinese_too(board):
    result = board.start({**demo_form(), "learning_rate": "-1"})
    english = findings_markdown(result.findings, "en")
    chinese = findings_markdown(result.findings, "zh-CN")
    assert english and chinese and english != chinese


def _start_twice_at_once(board, form, intents):
    results = []
    barrier = threading.Barrier(2)

    def click(intent):
        barrier.wait()
        results.append(board.start(form, intent=intent))

    threads = [threading.Thread(target=click, args=(intent,)) for intent in intents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return results


@starts("lf_helper", "trainer")
def test_two_simultaneous_starts_of_one_form_launch_exactly_one_run(board):
    """A double-click (two events of one tab, one form: the same intent) is one Start."""
    form = {**demo_form(), "max_steps": 5000, "save_steps": 5000, "run_name": "double"}
    board.llamafactory_findings(board.parse(form)[0])  # the parser's answer, cached first
    results = _start_twice_at_once(board, form, ["form-1", "form-1"])
    try:
        assert [r.started for r in results] == [True, True]
        assert len(board.store.list()) == 1
        assert results[0].run.id == results[1].run.id  # both clicks answer with the one run
        assert board.store.list()[0].state == "running"
    finally:
        for run in board.store.list():
            board.stop(run.id)
    assert board.store.list()[0].state == "stopped"


@starts("lf_helper", "trainer")
def test_two_starts_of_two_forms_at_once_train_one_and_queue_the_other(board):
    """Two tabs (two intents): one run trains, the other waits in the queue, none is refused."""
    form = {**demo_form(), "max_steps": 5000, "save_steps": 5000, "run_name": "two-tabs"}
    board.llamafactory_findings(board.parse(form)[0])
    results = _start_twice_at_once(board, form, ["tab-1", "tab-2"])
    try:
        assert sorted(r.run.state for r in results) == ["queued", "running"]
        assert [s.id for s in board.queued_runs()] == [next(r.run.id for r in results if r.queued)]
    finally:
        for run in board.queued_runs():
            board.cancel_queued(run.id)
        for run in board.store.list():
            board.stop(run.id)
    assert sorted(s.state for s in board.store.list()) == ["stopped", "stopped"]
    queued = next(s for s in board.store.list() if s.stop_reason == "reason.cancelled_in_queue")
    assert queued.pid is None  # it never started


def test_one_parser_helper_per_config_however_many_ask_at_once(board, monkeypatch):
    """A Start during the start-up prewarm waits for the answer being computed."""
    import time as clock

    import backend.llama_factory.check

    calls = []

    def slow_check(args, timeout_s=120):
        calls.append(args)
        clock.sleep(0.5)
        return []

    monkeypatch.setattr(backend.llama_factory.check, "check_with_llamafactory", slow_check)
    config = board.parse({**demo_form(), "learning_rate": "0.0123"})[0]  # a config nobody asked about yet
    threads = [threading.Thread(target=board.llamafactory_findings, args=(config,)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(calls) == 1
    assert board.llamafactory_findings(config) == [] and len(calls) == 1
