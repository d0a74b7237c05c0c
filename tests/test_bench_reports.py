"""The benches' report helpers on made-up figures (no bench is run): what BENCHMARKS.md is
written from must not fail after a bench's minutes of measuring."""

from __future__ import annotations

from bench.bench_first_loss import phase_notes


def summary_of(rocboard_s: float, llamaboard_s: float) -> dict:
    phase = {"n": 3}
    return {
        "rocboard": {"phases": {"process_start": {**phase, "median": rocboard_s}}},
        "llamaboard": {"phases": {"process_start": {**phase, "median": llamaboard_s}}},
    }


def test_the_phase_notes_are_a_list_also_when_the_first_click_was_quick() -> None:
    # The usual case: the first click after app start was not slow, so no note says why it
    # was. The notes were None here (their return sat inside that case), and report() failed
    # iterating them.
    result = {"cold_trial": {"click_to_process_s": 0.5}, "start_path": {"start_first": {"median": 3.0}, "start_again": {"median": 0.02}}}
    notes = phase_notes(summary_of(1.0, 2.5), result)
    assert notes == ["largest difference: 'click -> trainer process started (the app's start path + event round trip)' 1.0 s in RocBoard vs 2.5 s in LlamaBoard (RocBoard faster by 1.5 s)"]


def test_a_slow_first_click_is_explained() -> None:
    result = {"cold_trial": {"click_to_process_s": 6.0, "helpers_at_click": 2}, "start_path": {"start_first": {"median": 5.0}, "start_again": {"median": 0.02}}}
    notes = phase_notes(summary_of(1.0, 1.0), result)
    assert len(notes) == 2 and notes[1].startswith("first click right after app start: the trainer started 6.0 s after the click, with 2 start-up helper")
