"""What the Validate tab shows, without a browser (backend/validate/tab_view.py): the page's
values as a request, a path's status (and when a tick has nothing new), the kept reports as
choices, a refusal in the page's language with every value escaped. Pure: nothing starts."""

from __future__ import annotations

import re

from backend.i18n import Message, translate
from backend.validate.path import PathStatus
from backend.validate.report import Note, RungResult, ValidationReport
from backend.validate.tab_view import refusal_markdown, report_choices, request_from_page, rung_choices, status_key, status_markdown
from tests.test_zh_no_english import english_runs


def unescaped(markdown: str) -> str:
    """The characters a reader sees of escaped Markdown."""
    return re.sub(r"\\(.)", r"\1", markdown)


def test_the_pages_numbers_become_the_requests_whole_numbers_and_the_drill_keeps_a_checkpoint_before_it() -> None:
    request = request_from_page("cpu-demo", " /models/m ", "", "", 2.0, 12.0, 0.05, ["n_gpus", "one_gpu"])
    assert (request.model, request.gpus, request.drill_step, request.tolerance) == ("/models/m", 2, 12, 0.05)
    assert isinstance(request.gpus, int) and isinstance(request.drill_step, int)
    assert request.save_steps == 8 < request.drill_step  # the command line's choice (cli.drill_save_steps)
    assert request.rungs == ("n_gpus", "one_gpu")  # ordered and checked by the desk, not here
    assert (request.nodes, request.slurm_partition) == (2, "")  # the request's default
    nodes = request_from_page("cpu-demo", "", "", "", 2, 10, 0.02, ["nodes"], 4.0, " gpu ")
    assert (nodes.nodes, nodes.slurm_partition) == (4, "gpu")
    # What is not a whole number is handed on as it is, for the desk's check to refuse by name.
    odd = request_from_page(None, None, None, None, 2.5, None, None, None)
    assert (odd.preset, odd.gpus, odd.drill_step, odd.tolerance, odd.rungs) == ("cpu-demo", 2.5, None, None, ())


def test_every_rung_is_offered_in_each_language() -> None:
    assert [value for _, value in rung_choices("en")] == ["one_gpu", "n_gpus", "fault_drill", "nodes"]
    assert [label for label, _ in rung_choices("zh-CN")] == [translate(f"validate.rung.{r}", "zh-CN") for r in ("one_gpu", "n_gpus", "fault_drill", "nodes")]


def _status(**changes) -> PathStatus:
    status = PathStatus("20261202-010000-abcdef", {"one_gpu": "pass", "n_gpus": "running"}, current="n_gpus", run_id="r2")
    status.progress = Note("validate.progress.training", {"rung": "n_gpus", "run_id": "r2", "step": 3, "total": 24})
    for name, value in changes.items():
        setattr(status, name, value)
    return status


def test_a_tick_has_something_new_only_when_the_path_moved_on() -> None:
    assert status_key(_status()) == status_key(_status())
    assert status_key(None) == ""
    moved = [
        _status(progress=Note("validate.progress.training", {"rung": "n_gpus", "run_id": "r2", "step": 4, "total": 24})),
        _status(rungs={"one_gpu": "pass", "n_gpus": "pass"}),
        _status(report_id="20261202-010000-abcdef"),
        _status(done=True),
        _status(error=Note("validate.progress.broke", {"error": "OSError"})),
    ]
    keys = {status_key(status) for status in moved}
    assert len(keys) == len(moved) and status_key(_status()) not in keys


def _report(status: str = "pass") -> ValidationReport:
    rung = RungResult("one_gpu", status, ("r1",), {"final_loss": 2.5}, (Note("validate.cause.drill_missed", {"step": 10}),) if status == "fail" else ())
    return ValidationReport("20261202-010000-abcdef", 1.7e9, {"preset": "cpu-demo"}, (rung,), {})


def test_the_status_shows_each_rungs_state_its_progress_and_the_report_so_far_while_it_runs() -> None:
    for locale in ("en", "zh-CN"):
        shown = unescaped(status_markdown(_status(), _report(), locale))
        assert f"| {translate('validate.rung.one_gpu', locale)} | {translate('validate.status.pass', locale)} |" in shown
        assert f"| {translate('validate.rung.n_gpus', locale)} | {translate('validate.tab.state.running', locale)} |" in shown
        # The progress names the rung in the page's language, not by its id.
        assert translate("validate.progress.training", locale, rung=translate("validate.rung.n_gpus", locale), run_id="r2", step=3, total=24) in shown
        # Below the table, the report so far: each ended rung with its figures.
        assert translate("validate.view.title", locale, id="20261202-010000-abcdef") in shown
        assert f"| {translate('validate.figure.final_loss', locale)} | 2.5 |" in shown
    assert english_runs(status_markdown(_status(), _report("fail"), "zh-CN")) == []
    # Ended: the panel keeps the table and the verdict line; the report is the one chosen below.
    done = unescaped(status_markdown(_status(done=True, progress=Note("validate.progress.done", {"passed": 1, "rungs": 2})), _report(), "en"))
    assert translate("validate.progress.done", "en", passed=1, rungs=2) in done and "final loss" not in done
    assert status_markdown(None, None, "zh-CN") == translate("validate.tab.idle", "zh-CN")


def test_the_reports_are_offered_by_id_with_each_rungs_verdict() -> None:
    [(label, value)] = report_choices([_report("fail")], "zh-CN")
    assert value == "20261202-010000-abcdef" and value in label
    assert translate("validate.tab.rung_verdict", "zh-CN", rung=translate("validate.rung.one_gpu", "zh-CN"), status=translate("validate.status.fail", "zh-CN")) in label


def test_a_refusal_is_said_in_the_pages_language_with_every_value_escaped() -> None:
    hostile = "<img src=x onerror=alert(1)>"
    said = refusal_markdown("validate.bad.model", {"model": hostile}, "zh-CN")
    assert said.startswith(translate("validate.tab.refused", "zh-CN", reason="")[:5])
    assert "<img" not in said and "&lt;img" in said
    # A file's unknown key, named in a placeholder called `key`.
    said = refusal_markdown("validate.report.unknown_key", {"field": "report", "key": hostile}, "en", frame="validate.tab.upload_refused")
    assert said.startswith("The file was not kept: report has a key") and "<img" not in said
    # A value that is a message itself (an OS error) in the page's language too.
    error = Message("os-error.ENOENT")
    said = refusal_markdown("validate.report.unreadable", {"id": "x", "error": error}, "zh-CN", frame="validate.tab.upload_refused")
    assert translate("os-error.ENOENT", "zh-CN") in said and translate("os-error.ENOENT", "en") not in said
    # An id that is not one of RocBoard's validation messages is not looked up.
    assert translate("validate.view.unknown_note", "en", id="check\\.x") in refusal_markdown("check.x", {}, "en")
