"""The Data tab's backend (backend/service/data_desk.py) and the serve options it brings:
names suggested from file names, the Train form values of a registered dataset, the user's
text escaped wherever the page renders it, every label the tab builds from a name present
in both languages, and the upload limit reaching Gradio and the guard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.data.layout import LAYOUTS, roles_of
from backend.data.lengths import ExampleSegment
from backend.i18n import CATALOGUE
from backend.runs import RunStore
from backend.service import RocBoard
from backend.service.data_desk import (
    MappingForm,
    example_html,
    fresh_run_name,
    suggest_name,
)
from ui.data_tab import ROLES, TAGS
from ui.guard.quota import MIB, UPLOAD_BODY_CAP, upload_body_cap
from ui.serve import DEFAULT_MAX_UPLOAD_MB, parse_args


@pytest.fixture
def board(tmp_path: Path) -> RocBoard:
    return RocBoard(tmp_path / "runs", data_roots=[tmp_path])


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


ALPACA = [{"instruction": f"Say {n}.", "input": "", "output": f"{n}"} for n in range(12)]
TEXT = [{"text": f"Line number {n} of plain text."} for n in range(12)]


def test_every_label_the_tab_builds_from_a_name_is_in_both_languages() -> None:
    keys = [f"datatab.layout.{name}" for name in (*LAYOUTS, "unknown")] + [f"datatab.role.{role}" for role in ROLES] + [f"datatab.tag.{tag}" for tag in TAGS]
    for locale in ("en", "zh-CN"):
        missing = [key for key in keys if key not in CATALOGUE[locale]]
        assert missing == [], locale
    # Every role a layout maps has its dropdown.
    assert {role for layout in LAYOUTS for role, _ in roles_of(layout)} == set(ROLES)


@pytest.mark.parametrize(
    "original, taken, expected",
    [
        ("my data.jsonl", [], "my-data"),
        ("chat.JSONL", ["chat"], "chat-2"),
        ("../../etc/passwd", [], "passwd"),
        ("___.csv", [], "dataset"),
        ("_x.csv", [], "x"),
        ("数据.parquet", [], "dataset"),
        ("a" * 200 + ".json", [], "a" * 64),
        ("a" * 200 + ".json", ["a" * 64], "a" * 62 + "-2"),
    ],
)
def test_a_suggested_name_is_one_the_registry_takes(board: RocBoard, original: str, taken: list[str], expected: str) -> None:
    name = suggest_name(original, taken)
    assert name == expected
    assert board.data.registry.check_name(name) == []


def test_a_registered_dataset_fills_the_form_with_a_stage_that_reads_its_layout(board: RocBoard, tmp_path: Path) -> None:
    alpaca = write_jsonl(tmp_path / "alpaca.jsonl", ALPACA)
    text = write_jsonl(tmp_path / "text.jsonl", TEXT)
    assert board.data.add("path", str(alpaca), "pairs").name == "pairs"
    assert board.data.add("path", str(text), "prose").name == "prose"
    assert board.data.names() == ["pairs", "prose"]
    folder = str(board.data.folder)
    assert board.data.form_values("pairs", "sft") == {"dataset_dir": folder, "dataset": "pairs"}
    assert board.data.form_values("pairs", "pt") == {"dataset_dir": folder, "dataset": "pairs", "stage": "sft"}
    assert board.data.form_values("prose", "sft") == {"dataset_dir": folder, "dataset": "prose", "stage": "pt"}
    # The registry is no run: the runs list and the run ids do not see it.
    assert [state.id for state in RunStore(board.store.root).list()] == []
    # A restart (a new board on the same runs dir) offers the same datasets.
    assert RocBoard(board.store.root, data_roots=[tmp_path]).data.names() == ["pairs", "prose"]


def test_a_refused_add_says_why_and_writes_nothing(board: RocBoard, tmp_path: Path) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"instruction": "a", "output": "b"}\n{"instruction": \n', encoding="utf-8")
    result = board.data.add("path", str(broken), "broken", locale="zh-CN")
    words = result.message.replace("\\", "")  # Markdown escapes aside, what the page shows
    assert result.name is None and "broken.jsonl" in words and "2" in words
    assert any("\u4e00" <= ch <= "\u9fff" for ch in words)
    assert board.data.names() == []
    assert board.data.add("upload", None, "x").name is None  # nothing chosen


def test_the_users_text_is_escaped_wherever_the_tab_renders_it(board: RocBoard, tmp_path: Path) -> None:
    hostile = "<img src=x onerror=alert(1)>"
    path = write_jsonl(tmp_path / "hostile.jsonl", [{"instruction": "x", "input": "", "output": "y", hostile: "z"} for _ in range(3)])
    shown = board.data.read_path(str(path))
    assert hostile not in shown.summary and "&lt;img" in shown.summary
    html = example_html([ExampleSegment(hostile, False), ExampleSegment("</pre><script>x</script>", True)])
    assert "<img" not in html and "<script>" not in html
    assert html.count('<mark class="rb-trained">') == 2  # the legend's and the trained segment's


def test_the_mapping_the_page_sends_keeps_only_the_layouts_roles(board: RocBoard) -> None:
    choices = MappingForm("alpaca", {"prompt": "q", "response": "a", "messages": "conversations", "system": ""}, {"user_tag": "human"})
    mapping = choices.mapping()
    assert mapping is not None and dict(mapping.columns) == {"prompt": "q", "response": "a"} and mapping.tags == ()
    assert MappingForm("not-a-layout").mapping() is None
    assert MappingForm(None).mapping() is None


def test_measuring_asks_for_a_registered_dataset_and_a_model(board: RocBoard) -> None:
    from backend.i18n import translate

    unknown = board.data.measure("nope", {"model_path": "/m"})
    assert unknown.figure is None and "data-not-registered" not in unknown.findings  # rendered words, not ids
    assert translate("check.data-not-registered.fix", "en")[:20] in unknown.findings.replace("\\", "")
    assert board.data.add("path", str(write_jsonl(board.store.root.parent / "pairs.jsonl", ALPACA)), "pairs").name == "pairs"
    no_model = board.data.measure("pairs", {"model_path": ""})
    assert no_model.figure is None and translate("check.data-model-needed.fix", "en")[:20] in no_model.findings.replace("\\", "")


def test_the_upload_limit_reaches_gradio_and_the_guard() -> None:
    assert parse_args([]).max_upload_mb == DEFAULT_MAX_UPLOAD_MB
    assert parse_args(["--max-upload-mb", "2048"]).max_upload_mb == 2048
    for bad in ("0", "-1", str(10**9)):
        with pytest.raises(SystemExit):
            parse_args(["--max-upload-mb", bad])
    assert upload_body_cap(1 * MIB) == UPLOAD_BODY_CAP  # never below the small files' cap
    assert upload_body_cap(512 * MIB) == 513 * MIB
    assert parse_args(["--data-root", "/a", "--data-root", "/b"]).data_root == ["/a", "/b"]


def test_a_file_of_a_thousand_columns_previews_a_bounded_table(board: RocBoard, tmp_path: Path) -> None:
    row = {"instruction": "x", "output": "y", **{f"c{n}": "v" * 400 for n in range(600)}}
    shown = board.data.read_path(str(write_jsonl(tmp_path / "wide.jsonl", [row, row])))
    assert len(shown.headers) == 50 and all(len(r) == 50 for r in shown.rows)
    assert all(len(cell) <= 301 for r in shown.rows for cell in r)
    assert shown.summary.count("\n| ") <= 201


def test_a_json_list_is_read_element_by_element(board: RocBoard, tmp_path: Path, monkeypatch) -> None:
    """A .json list is never read whole: with chunks of 64 characters, a list of 300 rows is
    still read right, and a broken element is named by its line."""
    from backend.data import readers

    monkeypatch.setattr(readers, "JSON_CHUNK_CHARS", 64)
    rows = [{"instruction": f"Say {n}.", "input": "", "output": f"{n} " * (n % 7 + 1)} for n in range(300)]
    good = tmp_path / "list.json"
    good.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    shown = board.data.read_path(str(good))
    assert shown.usable and "300" in shown.summary and shown.rows[0][0] == "Say 0."
    text = json.dumps(rows[:3], indent=1).splitlines()
    text[9] = text[9].replace(":", "")  # a key without its colon, on line 10
    broken = tmp_path / "broken.json"
    broken.write_text("\n".join(text), encoding="utf-8")
    refused = board.data.read_path(str(broken)).findings.replace("\\", "")
    assert "broken.json" in refused and "10" in refused


def test_train_on_it_opens_a_new_run_named_after_the_dataset_on_the_presets_defaults(board: RocBoard, tmp_path: Path) -> None:
    from backend.config import schema
    from backend.service import demo_form

    alpaca = write_jsonl(tmp_path / "alpaca.jsonl", ALPACA)
    assert board.data.add("path", str(alpaca), "pairs").name == "pairs"
    preset = board.preset(demo_form()["preset"])
    # The form as another run left it: its name, accumulation, steps and Other keys.
    current = {**demo_form(), "run_name": "last-week", "grad_accum": preset.value("grad_accum") + 3, "max_steps": 77, "other_keys": "neftune_noise_alpha: 5", "dist_nproc": 2}
    form = board.form_for_dataset("pairs", current)
    assert form["run_name"] == "pairs"
    assert form["grad_accum"] == preset.value("grad_accum") and form["max_steps"] == schema.field("max_steps").default and form["other_keys"] == ""
    assert (form["dataset_dir"], form["dataset"], form["stage"]) == (str(board.data.folder), "pairs", "sft")
    # Kept: the preset, the model and template the lengths were measured with, the page's own fields.
    assert {name: form[name] for name in ("preset", "model_path", "template", "dist_nproc")} == {name: current[name] for name in ("preset", "model_path", "template", "dist_nproc")}
    assert set(form) >= set(schema.form_defaults())
    # A run already has the name: the new one gets its own.
    assert fresh_run_name("pairs", ["pairs", "pairs-2"]) == "pairs-3"
    assert fresh_run_name("x" * 64, ["x" * 64]) == "x" * 62 + "-2"
