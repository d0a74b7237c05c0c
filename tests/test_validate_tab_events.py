"""The Validate tab's events as Gradio calls them (ui/validate_tab.py), without a browser: the
desk answers as a real one does at the moment the race is lost."""

from __future__ import annotations

import time

from backend.validate.path import PathStatus
from backend.validate.report import Note, RungResult, ValidationReport, save_report
from backend.validate.view import report_markdown


def test_a_stop_that_finds_the_path_ended_shows_its_report(runs, monkeypatch) -> None:
    # Stop waits for the rung's run to stop; the path's thread may save the report and end before
    # Stop reads the status back. Stop then turns the timer off, so it alone can show the report
    # (seen in CI: the report view never showed the stopped path's report).
    from backend.service import RocBoard
    from ui.app import build_ui

    board = RocBoard(runs)
    path_id = "20261203-220000-abcdef"
    report = ValidationReport(path_id, time.time(), {"preset": "cpu-demo"}, (RungResult("one_gpu", "stopped", ("r1",), {}, ()),), {})
    save_report(runs, report)
    ended = PathStatus(path_id, {"one_gpu": "stopped"}, progress=Note("validate.progress.stopped", {}), report_id=path_id, done=True)
    desk = board.validation
    stopped: list[str] = []
    monkeypatch.setattr(desk, "stop", lambda asked: stopped.append(asked) or ended)
    monkeypatch.setattr(desk, "running", lambda: None)  # its thread has ended
    monkeypatch.setattr(desk, "status", lambda asked: ended)

    page = build_ui(board)
    on_stop = next(fn.fn for fn in page.fns.values() if fn.fn is not None and fn.fn.__qualname__ == "build_validate_tab.<locals>.on_stop")
    assert on_stop is not None
    path_id_out, _key, _panel, timer, _start, stop_button, report_box, _other, report_view, download, _comparison = on_stop(path_id, None, None, None, "en")
    assert stopped == [path_id] and path_id_out == path_id
    assert timer.active is False and stop_button["interactive"] is False
    assert report_box["value"] == path_id and report_view == report_markdown(report, "en")
    assert download["visible"] is True
