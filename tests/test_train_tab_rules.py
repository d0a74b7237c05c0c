"""The rules behind the Train tab's second round (issue 27), without a browser: run names in
any language and their ASCII run ids, the draft a browser keeps, what holds Start back, a
field's problem and warning, the preset line, durations in the page's language."""

from __future__ import annotations

import json
import re

import pytest

from backend import view
from backend.config.checks import run_name_ok
from backend.config.presets import load_presets
from backend.findings import Finding
from backend.i18n import translate
from backend.runs import RUN_ID_PATTERN, RunStore, run_id_part
from backend.service import demo_form
from backend.service.draft import NO_DRAFT, draft_of, form_from_draft
from backend.service.evaluation_desk import _safe_name

PRESETS, _ = load_presets()


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """Every finding the page's live checks give the demo form with some changes."""
    from backend.service import RocBoard

    board = RocBoard(tmp_path_factory.mktemp("train-tab-rules") / "runs")
    return lambda **changes: board.parse({**demo_form(), **changes})[1]


# --- run names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["水果", "café", "नमस्ते", "Обучение-1", "my_run.v2", "_x", "水果-2024"])
def test_a_run_name_may_hold_letters_of_any_language(checked, name: str) -> None:
    assert run_name_ok(name)
    assert not [f for f in checked(run_name=name) if f.key == "run_name"]


@pytest.mark.hostile
@pytest.mark.parametrize(
    "name",
    ["a b", "a/b", "../x", "-rf", ".hidden", "水果！", "x" * 65, "\u202etxt.exe", "a\u200bb", "\u0301a", "emoji🙂", "$(x)", "a\tb"],
)
def test_a_run_name_with_anything_else_is_refused(name: str) -> None:
    assert not run_name_ok(name)


@pytest.mark.parametrize("name", ["水果", "my 水果", "café", "a/b", "demo", "x" * 64])
def test_a_run_id_is_ascii_and_the_same_for_the_same_name(name: str) -> None:
    part = run_id_part(name)
    assert part == run_id_part(name)
    assert RUN_ID_PATTERN.match(f"20260101-000000-{part}"), part
    assert part.isascii() and len(part) <= 73
    if name.isascii() and run_name_ok(name):
        assert part == name  # an ASCII name is its id's name, as before
    assert run_id_part("水果") != run_id_part("蔬菜")


def test_a_chinese_named_run_keeps_its_name_and_gets_an_ascii_folder(tmp_path) -> None:
    store = RunStore(tmp_path / "runs")
    state = store.create(name="水果", preset="cpu-demo", model="demo", files={"form.json": json.dumps(demo_form())})
    assert re.fullmatch(r"[A-Za-z0-9._-]+", state.id), state.id
    assert store.read(state.id).name == "水果"
    assert store.run_dir(state.id).name == state.id
    # Shown escaped wherever the page puts it into Markdown: a name is text.
    assert view.escape_markdown("水果") == "水果"


def test_a_chinese_named_runs_slurm_job_name_is_its_ascii_id(tmp_path) -> None:
    from backend.slurm.script import job_name

    run_id = RunStore(tmp_path / "runs").new_run_id("水果")
    assert job_name(run_id).isascii() and run_id_part("水果") in job_name(run_id)


def test_an_evaluation_of_a_chinese_named_run_is_named_after_it() -> None:
    assert _safe_name("水果") == "eval-水果" and run_name_ok(_safe_name("水果"))
    assert run_name_ok(_safe_name("a b/c")) and run_name_ok(_safe_name("！！"))


# --- the draft ---------------------------------------------------------------------------------


def test_a_draft_comes_back_as_it_was_kept() -> None:
    defaults = demo_form()
    form = {**defaults, "max_steps": 77, "run_name": "水果", "preset": "rx7900xtx"}
    kept = draft_of(form, defaults)
    restored = form_from_draft(json.loads(json.dumps(kept)), PRESETS)
    assert restored["max_steps"] == 77 and restored["run_name"] == "水果" and restored["preset"] == "rx7900xtx"


def test_a_form_as_it_opened_is_no_draft() -> None:
    defaults = demo_form()
    # As the page sends it back: numbers as floats, texts as strings.
    shown = {name: (float(value) if isinstance(value, int) and not isinstance(value, bool) else value) for name, value in defaults.items()}
    shown["learning_rate"] = "0.01"
    assert form_from_draft(draft_of(shown, defaults), PRESETS) is None


@pytest.mark.hostile
@pytest.mark.parametrize("saved", [None, "x", [], NO_DRAFT, {"version": 2, "values": {}}, {"version": 1, "values": "x"}])
def test_what_is_no_draft_gives_nothing(saved) -> None:
    assert form_from_draft(saved, PRESETS) is None


@pytest.mark.hostile
def test_a_draft_value_its_field_cannot_hold_takes_the_default() -> None:
    saved = {"version": 1, "values": {"preset": "gone-preset", "max_steps": "many", "gradient_checkpointing": "yes", "run_name": 5, "precision": "fp8", "not_a_field": "x"}}
    restored = form_from_draft(saved, PRESETS)
    defaults = form_from_draft({"version": 1, "values": {}}, PRESETS)
    for name in ("preset", "max_steps", "gradient_checkpointing", "run_name", "precision"):
        assert restored[name] == defaults[name], name
    assert "not_a_field" not in restored


# --- what holds Start back, and a field's own line ---------------------------------------------


def test_start_names_the_fields_to_fix_first_in_the_pages_language(checked) -> None:
    findings = checked(learning_rate="-1", run_name="a/b")
    blockers = view.start_blockers(findings, ("model_path", "learning_rate", "run_name"))
    assert blockers == ["learning_rate", "run_name"]
    for locale in ("en", "zh-CN"):
        reason = view.start_reason_markdown(blockers, locale)
        assert translate("label.learning_rate", locale) in reason and translate("label.run_name", locale) in reason
    assert view.start_reason_markdown([], "en") == ""
    # A problem no field shows is named by its key, in a code span.
    assert "`other_thing`" in view.start_reason_markdown(view.start_blockers([Finding("other_thing", "p", "f")], ("run_name",)), "en")
    # Warnings do not hold Start back.
    assert view.start_blockers([Finding("run_name", "p", "f", severity="warning")], ("run_name",)) == []


def test_a_fields_line_says_problem_or_warning_and_which(checked) -> None:
    findings = [Finding.of("cutoff_len", "cutoff-too-short", severity="warning", value=16, minimum=32)]
    findings += checked(learning_rate="-1")
    notes = view.field_notes(findings, ("cutoff_len", "learning_rate", "run_name"), "zh-CN")
    assert notes["learning_rate"][1] == "problem" and notes["learning_rate"][0].startswith("✗ **问题**：")
    assert notes["cutoff_len"][1] == "warning" and notes["cutoff_len"][0].startswith("⚠ **警告**：")
    assert notes["run_name"] == ("", "")


# --- presets, durations ------------------------------------------------------------------------


@pytest.mark.parametrize("locale", ["en", "zh-CN"])
def test_the_cpu_presets_line_says_the_precision_its_form_gets(locale: str) -> None:
    cpu = PRESETS["cpu-demo"]
    line = view.preset_notes_markdown(cpu, locale)
    assert cpu.precision == "fp32" and "fp32" in line and "fp16" not in line
    assert "fp16" in view.preset_notes_markdown(PRESETS["rx6900xt"], locale)
    if locale == "zh-CN":
        assert "env:" not in line and "环境变量" in line


def test_the_progress_line_speaks_the_pages_units() -> None:
    assert view.clock_seconds("0:00:11") == 11 and view.clock_seconds("1 day, 2:03:04") == 93784 and view.clock_seconds("soon") is None
