"""One field schema (backend/config/schema.py): a field added to the table in one place is in the
defaults, the YAML, the import, the page's field list and form.json, with its range."""

from __future__ import annotations

from dataclasses import replace

import gradio as gr
import pytest
import yaml

from backend.config import parse_form, schema, to_form, to_llamafactory_args
from backend.config.distributed import parse_plan_form
from backend.config.run_form import form_from_saved, saved_form
from backend.config.schema import Field, NumberRange
from backend.config.yaml_import import import_yaml

NEW = Field(
    "neftune_noise_alpha",
    "float",
    0.0,
    "neftune_noise_alpha",
    range=NumberRange(0, 100, 5.0, rule="neftune-range"),
    widget="number",
    section="training",
)


def add_run_field(monkeypatch: pytest.MonkeyPatch, field: Field) -> None:
    """`field` appended to the schema's table for one test (undone by `monkeypatch`). The page's
    modules that build tables from the schema once, when first imported (ui/train_tab.py's
    ALL_FIELDS, FIELD_IDS...), are imported first, from the schema as it is: imported under the
    patch (a test's own `from ui.train_tab import ...`), they kept the added field after the
    test, and a later test building the page failed with KeyError on it."""
    import ui.train_tab  # noqa: F401 (its tables: from the real schema)

    monkeypatch.setattr(schema, "RUN_FIELDS", schema.RUN_FIELDS + (field,))


@pytest.fixture
def added_field(monkeypatch: pytest.MonkeyPatch) -> Field:
    """The one edit: the field appended to the schema's table."""
    add_run_field(monkeypatch, NEW)
    return NEW


def test_an_added_field_leaves_no_module_holding_it_after_the_test() -> None:
    """In a fresh interpreter (nothing of the page imported yet): a test's added field, the
    modules it imports under the patch, then the patch undone: no module of the app still
    lists the field (test_node_panel's page build failed after this file, with KeyError)."""
    import subprocess
    import sys
    from pathlib import Path

    script = """
import sys
import pytest
from tests.test_schema import NEW, add_run_field
with pytest.MonkeyPatch.context() as patch:
    add_run_field(patch, NEW)
    from ui.train_tab import build_form_fields  # what the tests import under the patch
    from ui.widgets import Texts
    from ui.app import build_ui
kept = []
for name, module in sorted(sys.modules.items()):
    if not name.startswith(("ui", "backend")) or module is None:
        continue
    for attribute, value in vars(module).items():
        if isinstance(value, (tuple, list, set, frozenset, dict)) and NEW.name in value:
            kept.append(f"{name}.{attribute}")
print(" ".join(kept) or "none")
"""
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "none"


def test_an_added_field_is_in_the_defaults_the_yaml_the_import_and_the_page(added_field: Field) -> None:
    assert schema.form_defaults()["neftune_noise_alpha"] == 0.0
    config, findings = parse_form({**schema.form_defaults(), "model_path": "/m", "dataset_dir": "/d", "dataset": "a", "neftune_noise_alpha": "5"})
    assert findings == []
    assert config.value("neftune_noise_alpha") == 5.0 and to_form(config)["neftune_noise_alpha"] == 5.0
    assert yaml.safe_load(yaml.safe_dump(to_llamafactory_args(config, "/out")))["neftune_noise_alpha"] == 5.0

    imported = import_yaml("model_name_or_path: /m\ndataset: a\ntemplate: llama3\ndo_train: true\nbf16: true\nneftune_noise_alpha: 7\n")
    assert imported.form_values["neftune_noise_alpha"] == 7
    assert not [f for f in imported.findings if f.key == "neftune_noise_alpha"]

    from ui.train_tab import build_form_fields
    from ui.widgets import Texts

    with gr.Blocks():
        widgets = build_form_fields(Texts(), {}, choices={"preset": ["cpu-demo"]})
    assert widgets["neftune_noise_alpha"].elem_id == "neftune-noise-alpha"
    # In the schema's order, within its section's accordion (sections in order of first use).
    sections = list(dict.fromkeys(f.section for f in schema.page_fields()))
    assert list(widgets) == [f.name for section in sections for f in schema.page_fields() if f.section == section]
    assert list(widgets).index("neftune_noise_alpha") > list(widgets).index("run_name")
    assert schema.element_ids()["neftune_noise_alpha"] == "neftune-noise-alpha"


def test_an_added_fields_range_refuses_with_a_finding_and_falls_back(added_field: Field) -> None:
    config, findings = parse_form({**schema.form_defaults(), "neftune_noise_alpha": 1e9})
    assert [(f.key, f.rule, f.patch) for f in findings] == [("neftune_noise_alpha", "neftune-range", {"neftune_noise_alpha": 5.0})]
    assert config.value("neftune_noise_alpha") == 0.0
    assert schema.number_ranges()["neftune_noise_alpha"].text() == "[0, 100]"


def test_every_derived_table_agrees_with_the_schema() -> None:
    names = [f.name for f in schema.run_fields()]
    assert list(schema.form_defaults()) == names and len(set(names)) == len(names)
    assert set(schema.plan_form_defaults()) == {f.name for f in schema.plan_fields()}
    assert schema.element_ids()["model_path"] == "model-path" and schema.element_ids()["num_train_epochs"] == "epochs"
    assert schema.form_to_yaml()["batch_size"] == "per_device_train_batch_size"
    assert schema.form_to_yaml()["precision"] == "bf16" and schema.form_to_yaml()["gradient_checkpointing"] == "disable_gradient_checkpointing"
    # One list of flash_attn values: the form's, then those only LLaMA-Factory takes.
    assert schema.field("flash_attn").all_choices == ("auto", "disabled", "sdpa", "fa2", "fa3")
    for form_field in schema.page_fields():
        if form_field.range is not None:
            assert form_field.range.contains(form_field.range.example), form_field.name


def test_every_field_has_its_label_and_name_in_both_catalogues() -> None:
    from backend.i18n import CATALOGUE

    for locale in ("en", "zh-CN"):
        missing = [f.label_id for f in schema.page_fields() if f.label_id not in CATALOGUE[locale]]
        assert missing == [], locale


def test_form_json_holds_the_checked_config_and_reads_back() -> None:
    config, _ = parse_form({**schema.form_defaults(), "learning_rate": " 2e-4 ", "dataset": "a, b"})
    plan, _ = parse_plan_form({"dist_nproc": "2", "dist_gpus": "0-1"})
    saved = saved_form(config, plan)
    assert saved["learning_rate"] == 2e-4 and saved["dataset"] == "a,b" and saved["dist_gpus"] == "0,1"
    back = form_from_saved({**saved, "not_a_field": 1})
    assert "not_a_field" not in back
    assert parse_form(back)[0] == config and parse_plan_form(back)[0] == plan
    assert form_from_saved(saved_form(config, None))["dist_nproc"] == 1
    assert form_from_saved(["not", "a", "mapping"]) == {**schema.form_defaults(), **schema.side_form_defaults()}
    assert replace(plan, nproc=1) != plan
