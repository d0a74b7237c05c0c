"""Which of the page's events join Gradio's queue (ui/app.py says why): the page's load, a tab's
visit, a form change and the language switch are plain requests, and no plain request changes
a State whose change something listens to unless that listener is chained after it (Gradio 5's
page fires a State's change only after a queued event: the Import tab's summary once stayed in
English after a switch to 中文 because of it). The browser side: tests/test_browser_zh.py counts
the queue's joins while the page loads, switches language and visits tabs."""

from __future__ import annotations

from typing import Any

import gradio as gr
import pytest


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Any:
    from backend.service import RocBoard
    from ui.app import build_ui

    root = tmp_path_factory.mktemp("ui-queue")
    return build_ui(RocBoard(root / "runs", export_dir=root / "exports"))


def name(page: Any, block_fn: Any) -> str:
    fn = block_fn.fn
    return getattr(fn, "__qualname__", repr(fn))


def test_the_load_tab_visits_form_changes_and_the_language_switch_are_not_queued(page) -> None:
    language = next(block for block in page.blocks.values() if getattr(block, "elem_id", None) == "language")
    seen: dict[str, list[str]] = {"load": [], "tab visit": [], "language": [], "form change": []}
    queued = []
    for block_fn in page.fns.values():
        for block_id, trigger in block_fn.targets:
            target = page.blocks.get(block_id) if block_id is not None else None
            kind = (
                "load"
                if trigger == "load"
                else "tab visit"
                if isinstance(target, gr.Tab) and trigger == "select"
                else "language"
                if target is language and trigger in ("change", "input")
                else "form change"
                if name(page, block_fn).endswith("on_form_change")
                else None
            )
            if kind is not None:
                seen[kind].append(name(page, block_fn))
                if block_fn.queue:
                    queued.append((kind, name(page, block_fn)))
    assert all(seen.values()), seen  # each kind is there to be looked at
    assert queued == []


def test_no_plain_request_changes_a_state_whose_listener_would_not_hear_it(page) -> None:
    listeners: dict[int, list[Any]] = {}
    for block_fn in page.fns.values():
        for block_id, trigger in block_fn.targets:
            if trigger == "change" and isinstance(page.blocks.get(block_id), gr.State):
                listeners.setdefault(block_id, []).append(block_fn)
    assert listeners, "the form's mode State has a change listener"
    unheard = []
    for block_fn in page.fns.values():
        if block_fn.queue:
            continue
        chained = {then.fn for then in page.fns.values() if then.trigger_after == block_fn._id}
        for output in block_fn.outputs:
            for listener in listeners.get(output._id, []):
                if listener.fn not in chained:
                    unheard.append((name(page, block_fn), output._id, name(page, listener)))
    assert unheard == []
