"""A field is defined once (backend/config/schema.py), and a saved run is read through it
(backend/config/run_form.py): a field added to the table in a fixture reaches the widget, the
YAML, the import, a preset, a saved run read back, the runs table and an evaluation; no
reader keeps defaults of its own (issue 28)."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import gradio as gr
import pytest
import yaml

from backend.config import ModelSpec, RunConfig, parse_form, schema, to_llamafactory_args
from backend.config.presets import parse_preset
from backend.config.run_form import form_from_args, read_saved_run, saved_form
from backend.config.schema import Field
from backend.config.yaml_import import import_yaml
from backend.evaluate.plan import VALIDATION_SPLIT, HeldOut, predict_args
from backend.i18n import CATALOGUE
from backend.runs import RunStore
from backend.runs.history import history_columns, history_headers, summaries_table, summarize_runs
from tests import test_schema as schema_tests

ROOT = Path(__file__).resolve().parent.parent

# test_schema's new field (a LLaMA-Factory key no field reads yet), also shown in the runs
# table and kept by an evaluation.
NEW = dataclasses.replace(schema_tests.NEW, column="neftune_noise_alpha", predict="kept")

PRESET = """display_name: Test GPU
gfx_target: gfx942
vram_gb: 64
devices_per_node: 1
bf16: true
precision: bf16
flash_attn: auto
batch_size: 2
grad_accum: 4
cutoff_len: 2048
gradient_checkpointing: true
"""


@pytest.fixture
def added_field(monkeypatch: pytest.MonkeyPatch) -> Field:
    """The recipe's whole edit: one Field, and its label and noun in each catalogue."""
    schema_tests.add_run_field(monkeypatch, NEW)  # the page's modules keep no trace of it after
    for locale, (label, noun) in {"en": ("NEFTune noise", "the NEFTune noise"), "zh-CN": ("NEFTune 噪声", "NEFTune 噪声")}.items():
        monkeypatch.setitem(CATALOGUE[locale], NEW.label_id, label)
        monkeypatch.setitem(CATALOGUE[locale], NEW.noun_id, noun)
    return NEW


def test_an_added_field_reaches_every_reader(added_field: Field, tmp_path: Path) -> None:
    name = added_field.name
    # The page's widget (what ui/train_tab.py builds from the schema), labelled from the catalogue.
    from ui.train_tab import build_form_fields
    from ui.widgets import Texts

    with gr.Blocks():
        widgets = build_form_fields(Texts(), {}, choices={"preset": ["cpu-demo"]})
    assert widgets[name].elem_id == "neftune-noise-alpha" and widgets[name].label == "NEFTune noise"

    # The YAML.
    form = {**schema.form_defaults(), "model_path": "/m", "dataset_dir": "/d", "dataset": "a", name: "5"}
    config, findings = parse_form(form)
    assert findings == [] and config.value(name) == 5.0
    args = to_llamafactory_args(config, "/out")
    assert yaml.safe_load(yaml.safe_dump(args))[name] == 5.0

    # The import (and a run's config.yaml read back).
    imported = import_yaml("model_name_or_path: /m\ndataset: a\ntemplate: llama3\ndo_train: true\nbf16: true\nneftune_noise_alpha: 7\n")
    assert imported.form_values[name] == 7 and not [f for f in imported.findings if f.key == name]
    assert form_from_args(args)[name] == 5.0

    # A preset: any field of the form, checked by the form's parser.
    preset = parse_preset("test-gpu", PRESET + "neftune_noise_alpha: 5\n")
    assert preset.form_values()[name] == 5.0 and preset.value(name) == 5.0
    with pytest.raises(ValueError, match=name):
        parse_preset("test-gpu", PRESET + "neftune_noise_alpha: 1000\n")

    # A saved run read back, and the runs table (its column headed by the field's label).
    store = RunStore(tmp_path / "runs")
    state = store.create("noisy", "cpu-demo", "/m", {"form.json": json.dumps(saved_form(config, None)), "config.yaml": yaml.safe_dump(args)})
    saved = read_saved_run(store.run_dir(state.id))
    assert saved.config.value(name) == 5.0 and saved.known(name)
    assert name in history_columns()
    row = dict(zip(history_headers("en"), summaries_table(summarize_runs(store))[0], strict=True))
    assert row["NEFTune noise"] == "5"
    assert "NEFTune 噪声" in history_headers("zh-CN")

    # An evaluation keeps it (Field.predict), on held-out data and on the validation split.
    for held_out in (HeldOut("/data", "other"), HeldOut("", VALIDATION_SPLIT)):
        assert predict_args(args, "/adapter", held_out, "/eval-out", 10, 16, 2)[name] == 5.0


def test_the_section_dataclasses_hold_no_defaults() -> None:
    """schema.py is the one place a default lives: a section with its own default would
    drift from it (nothing builds a RunConfig but parse_form)."""
    from backend.config import _SECTIONS

    for kind in (*_SECTIONS.values(), RunConfig):
        defaulted = [f.name for f in dataclasses.fields(kind) if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING]
        # trust_remote_code is no field: RocBoard never runs a model folder's code.
        assert defaulted == (["trust_remote_code"] if kind is ModelSpec else []), kind.__name__


def test_a_saved_form_without_a_field_reads_the_schemas_default(tmp_path: Path) -> None:
    """A form.json from before a field existed (or edited by hand) reads back as the schema
    says, wherever it is read: chat, export and evaluation once fell back to `template: default`."""
    from backend.service.chat_desk import ChatDesk

    store = RunStore(tmp_path / "runs")
    state = store.create("old", "cpu-demo", "/m", {"form.json": json.dumps({"model_path": "/m", "cutoff_len": "2e9"})})
    saved = read_saved_run(store.run_dir(state.id))
    assert saved.config.model.template == schema.field("template").default == "llama3"
    assert saved.config.data.cutoff_len == schema.field("cutoff_len").default and not saved.known("cutoff_len")
    assert ChatDesk(store, None)._model_of(state.id) == ("/m", "llama3", "lora")


# Literal fallbacks that are not the schema's default on purpose: an empty preset id is "no
# preset" (the pipeline then asks for one); a YAML's `finetuning_type: qlora` means 4 bits; a
# DeepSpeed file's ZeRO `stage` is no training stage.
FALLBACKS_OF_THEIR_OWN = {("preset", ""), ("quantization_bit", 4), ("stage", 0)}


def test_no_reader_falls_back_to_a_default_of_its_own() -> None:
    """`form.get("template") or "default"`, `.get("finetuning_type", "lora")`: a reader with its
    own literal default for a field drifts from the schema; each must be the schema's."""
    defaults = {f.name: f.default for f in schema.page_fields()}
    found = []
    for path in sorted((ROOT / "backend").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            call, fallback = None, None
            if isinstance(node, ast.Call) and len(node.args) == 2 and isinstance(node.args[1], ast.Constant):
                call, fallback = node, node.args[1].value
            elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and isinstance(node.values[0], ast.Call) and isinstance(node.values[-1], ast.Constant):
                call, fallback = node.values[0], node.values[-1].value
            if call is None or not (isinstance(call.func, ast.Attribute) and call.func.attr == "get" and call.args and isinstance(call.args[0], ast.Constant)):
                continue
            name = call.args[0].value
            if name in defaults and fallback != defaults[name] and (name, fallback) not in FALLBACKS_OF_THEIR_OWN:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)} (the schema says {defaults[name]!r})")
    assert found == []


def test_a_preset_sets_any_field_of_the_form_each_checked_by_its_parser() -> None:
    preset = parse_preset("test-gpu", PRESET + "lora_rank: 16\nlearning_rate: 5e-5\nquantization_bit: 4\n")
    assert {name: preset.form_values()[name] for name in ("lora_rank", "learning_rate", "quantization_bit", "cutoff_len")} == {
        "lora_rank": 16, "learning_rate": 5e-5, "quantization_bit": "4", "cutoff_len": 2048,
    }  # fmt: skip
    assert preset.value("seed") == schema.field("seed").default  # one it does not set
    for bad in ("lora_rank: 0", "batch_size: 5000", "optim: adamw_bnb_8bit", "run_name: [a]"):
        with pytest.raises(ValueError, match=bad.split(":")[0]):
            parse_preset("test-gpu", PRESET.replace("batch_size: 2\n", "") + ("" if bad.startswith("batch_size") else "batch_size: 2\n") + bad + "\n")
