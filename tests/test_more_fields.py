"""The fields issue 13 adds to the form (backend/config/schema.py): the LR scheduler, warmup
(ratio and steps), the optimizer, the seed and max samples. Each is in the defaults, the YAML
under its LLaMA-Factory key, the YAML import, the page, and its range gives a finding in
English and Chinese."""

from __future__ import annotations

import pytest
import yaml

from backend.config import parse_form, schema, to_form, to_llamafactory_args
from backend.config.yaml_import import import_yaml

NEW_FIELDS = ("lr_scheduler_type", "warmup_ratio", "warmup_steps", "optim", "seed", "max_samples")
BASE = {"model_path": "/m", "dataset_dir": "/d", "dataset": "a"}
# (field, a form value, the value LLaMA-Factory's YAML holds)
SET = (
    ("lr_scheduler_type", "linear", "linear"),
    ("warmup_ratio", "0.1", 0.1),
    ("warmup_steps", "20", 20),
    ("optim", "adafactor", "adafactor"),
    ("seed", "1234", 1234),
    ("max_samples", "500", 500),
)


def yaml_of(values: dict) -> dict:
    config, findings = parse_form({**schema.form_defaults(), **BASE, **values})
    assert findings == []
    return yaml.safe_load(yaml.safe_dump(to_llamafactory_args(config, "/out")))


def test_the_defaults() -> None:
    defaults = schema.form_defaults()
    assert {name: defaults[name] for name in NEW_FIELDS} == {
        "lr_scheduler_type": "cosine",
        "warmup_ratio": 0.0,
        "warmup_steps": 0,
        "optim": "adamw_torch",
        "seed": 42,
        "max_samples": "",
    }
    args = yaml_of({})
    assert (args["lr_scheduler_type"], args["optim"], args["seed"]) == ("cosine", "adamw_torch", 42)
    # No warmup and every sample: LLaMA-Factory's own defaults, so the keys are left out.
    assert not {"warmup_ratio", "warmup_steps", "max_samples"} & set(args)
    config, _ = parse_form(schema.form_defaults())
    assert config.data.max_samples is None and to_form(config)["max_samples"] == ""


@pytest.mark.parametrize(("name", "form", "written"), SET)
def test_each_field_is_written_under_its_key_and_imported_back(name: str, form: str, written: object) -> None:
    assert schema.form_to_yaml()[name] == name  # the form's name is LLaMA-Factory's key
    assert yaml_of({name: form})[name] == written

    text = f"model_name_or_path: /m\ndataset: a\ntemplate: llama3\ndo_train: true\nbf16: true\n{name}: {written}\n"
    imported = import_yaml(text)
    assert imported.form_values[name] == written
    assert not [f for f in imported.findings if f.key == name], imported.findings


def test_warmup_steps_win_over_the_ratio_and_only_one_is_written() -> None:
    # transformers 4 and 5 disagree on which wins when both are set: RocBoard writes one.
    args = yaml_of({"warmup_ratio": 0.1, "warmup_steps": 20})
    assert args["warmup_steps"] == 20 and "warmup_ratio" not in args
    assert yaml_of({"warmup_ratio": 0.1})["warmup_ratio"] == 0.1


def test_an_empty_or_null_max_samples_means_every_sample() -> None:
    config, findings = parse_form({**schema.form_defaults(), "max_samples": "  "})
    assert findings == [] and config.data.max_samples is None
    imported = import_yaml("model_name_or_path: /m\ndataset: a\ntemplate: llama3\nbf16: true\nmax_samples: null\n")
    assert imported.form_values["max_samples"] == ""
    assert not [f for f in imported.findings if f.key == "max_samples"]


@pytest.mark.parametrize(
    ("name", "bad", "rule", "bounds"),
    [
        ("warmup_ratio", 1.0, "warmup-ratio-range", "[0, 1)"),
        ("warmup_ratio", -0.1, "warmup-ratio-range", "[0, 1)"),
        ("warmup_steps", -1, "warmup-steps-range", "[0, 1000000000]"),
        ("seed", 2**32, "seed-range", "[0, 4294967295]"),
        ("seed", -1, "seed-range", "[0, 4294967295]"),
        ("max_samples", 0, "max-samples-range", "[1, 1000000000]"),
        ("max_samples", "2000000000", "max-samples-range", "[1, 1000000000]"),
    ],
)
def test_out_of_range_values_get_a_finding_in_both_languages(name: str, bad: object, rule: str, bounds: str) -> None:
    config, findings = parse_form({**schema.form_defaults(), name: bad})
    assert [(f.key, f.rule) for f in findings] == [(name, rule)]
    assert schema.number_ranges()[name].text() == bounds
    assert to_form(config)[name] == schema.form_defaults()[name]  # falls back to the default
    english, chinese = findings[0].text("en"), findings[0].text("zh-CN")
    assert bounds in english[0] and bounds in chinese[0]
    assert english != chinese and any("\u4e00" <= c <= "\u9fff" for c in chinese[0])
    # The fix's patch is a value inside the range.
    assert schema.number_ranges()[name].contains(findings[0].patch[name])


def test_bad_choices_are_findings_and_llamafactory_only_ones_import_as_warnings() -> None:
    _, findings = parse_form({**schema.form_defaults(), "optim": "adamw_bnb_9bit", "lr_scheduler_type": "cosinee"})
    assert sorted((f.key, f.rule) for f in findings) == [("lr_scheduler_type", "bad-choice"), ("optim", "bad-choice")]
    imported = import_yaml("model_name_or_path: /m\ndataset: a\ntemplate: llama3\nbf16: true\noptim: paged_adamw_8bit\nlr_scheduler_type: cosine_with_min_lr\n")
    mine = {f.key: f for f in imported.findings if f.key in ("optim", "lr_scheduler_type")}
    assert {key: (f.rule, f.severity) for key, f in mine.items()} == {
        "optim": ("yaml-form-has-no-choice", "warning"),
        "lr_scheduler_type": ("yaml-form-has-no-choice", "warning"),
    }


def test_the_choices_are_transformers_names() -> None:
    from transformers.trainer_utils import SchedulerType
    from transformers.training_args import OptimizerNames

    schedulers = {s.value for s in SchedulerType}
    assert set(schema.LR_SCHEDULERS) <= schedulers
    assert set(schema.field("lr_scheduler_type").llamafactory_choices) <= schedulers
    optimizers = {o.value for o in OptimizerNames}
    assert set(schema.OPTIMIZERS) <= optimizers
    assert set(schema.field("optim").llamafactory_choices) <= optimizers
    # No bitsandbytes optimizer on the form: they are risky on ROCm and need a GPU.
    assert not [o for o in schema.OPTIMIZERS if "bnb" in o or "8bit" in o or "paged" in o]


def test_the_page_shows_them() -> None:
    names = [f.name for f in schema.page_fields()]
    ids = schema.element_ids()
    for name in NEW_FIELDS:
        assert name in names
        assert ids[name] == name.replace("_", "-")
        assert schema.field(name).section == "training"
    from backend.i18n import CATALOGUE

    for locale in ("en", "zh-CN"):
        for name in NEW_FIELDS:
            assert CATALOGUE[locale][f"label.{name}"] and CATALOGUE[locale][f"field.{name}"]


def test_the_page_builds_their_widgets() -> None:
    import gradio as gr

    from ui.train_tab import build_form_fields
    from ui.widgets import Texts

    with gr.Blocks():
        widgets = build_form_fields(Texts(), {}, choices={"preset": ["cpu-demo"]})
    assert widgets["optim"].elem_id == "optim" and widgets["max_samples"].elem_id == "max-samples"
    assert list(widgets) == [f.name for f in schema.page_fields()]


def test_llamafactorys_own_example_keeps_its_warmup_scheduler_and_max_samples() -> None:
    from pathlib import Path

    text = (Path(__file__).parent / "fixtures" / "yaml" / "llamafactory_example_lora_sft.yaml").read_text()
    imported = import_yaml(text)
    assert {k: imported.form_values[k] for k in ("lr_scheduler_type", "warmup_ratio", "max_samples")} == {
        "lr_scheduler_type": "cosine",
        "warmup_ratio": 0.1,
        "max_samples": 1000,
    }
    # The example asks for 16 preprocessing and 4 dataloader workers: a warning on a machine with
    # fewer cores (tests/test_path_keys.py), kept out of this test of the fields.
    imported_values = {**imported.form_values}
    imported_values["other_keys"] = "\n".join(line for line in str(imported_values.get("other_keys", "")).splitlines() if not line.startswith(("preprocessing_num_workers", "dataloader_num_workers")))
    args = yaml_of({**imported_values, **BASE})
    assert (args["lr_scheduler_type"], args["warmup_ratio"], args["max_samples"]) == ("cosine", 0.1, 1000)
