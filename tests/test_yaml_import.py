"""Importing LLaMA-Factory YAML (backend/config/yaml_import.py), exporting it (backend/config/export.py), and
LLaMA-Factory's own parser on both (backend/llama_factory/check.py).

The parser runs once for the whole module, in one helper process (module fixture `lf`): it
checks the exported YAML, a file full of mistakes, and lists the installed package's keys
and templates to compare with the committed static list.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from backend.config import FORM_DEFAULTS, parse_form, to_form
from backend.config.export import export_shell, export_yaml
from backend.config.presets import load_presets
from backend.config.yaml_import import (
    apply_fixes,
    dump_yaml,
    form_values_from_args,
    import_yaml,
    load_yaml_text,
)
from backend.findings import Finding, has_problems
from backend.llama_factory.check import (
    NAMES_FILE,
    WORKER,
    check_many_with_llamafactory,
    findings_from_result,
)
from tests.test_checks import make_dataset_dir, make_model_dir

PRESETS, _ = load_presets()
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "yaml"


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("yaml-assets")
    return {"root": root, "model": make_model_dir(root / "model"), "data": make_dataset_dir(root / "data")}


def base_args(assets: dict[str, Path]) -> dict[str, Any]:
    """A valid training config for the fake model and dataset."""
    return {
        "model_name_or_path": str(assets["model"]),
        "stage": "sft",
        "do_train": True,
        "finetuning_type": "lora",
        "lora_rank": 8,
        "lora_target": "all",
        "dataset": "demo",
        "dataset_dir": str(assets["data"]),
        "template": "llama3",
        "cutoff_len": 1024,
        "output_dir": str(assets["root"] / "out"),
        "per_device_train_batch_size": 1,
        "gradient_accumulation_steps": 8,
        "learning_rate": 1.0e-4,
        "num_train_epochs": 3.0,
        "bf16": True,
    }


def imported(args: dict[str, Any], preset: str = "rx7900xtx") -> tuple[list[Finding], dict[str, Any]]:
    result = import_yaml(dump_yaml(args), PRESETS[preset], bnb_available=lambda: True)
    return result.findings, result.args


def test_a_valid_config_imports_clean(assets: dict[str, Path]) -> None:
    findings, _ = imported(base_args(assets))
    assert findings == []


# (case id, keys to set (None = remove) on the valid config, preset, expected key, expected rule,
#  what the fixed mapping must hold: {key: value}, None = the key is gone; None = no mechanical fix)
CASES: list[tuple[str, dict[str, Any], str, str, str, dict[str, Any] | None]] = [
    ("disable-flash-attn", {"disable_flash_attn": True}, "rx7900xtx", "disable_flash_attn", "yaml-disable-flash-attn", {"disable_flash_attn": None, "flash_attn": "disabled"}),
    ("compute-type", {"compute_type": "bf16", "bf16": None}, "rx7900xtx", "compute_type", "yaml-compute-type", {"compute_type": None, "bf16": True}),
    ("compute-type-redundant", {"compute_type": "bf16"}, "rx7900xtx", "compute_type", "yaml-compute-type", {"compute_type": None, "bf16": True}),
    ("compute-device", {"compute_device": "cuda"}, "rx7900xtx", "compute_device", "yaml-compute-device", {"compute_device": None}),
    ("ddp-backend-pytorch", {"ddp_backend": "pytorch"}, "rx7900xtx", "ddp_backend", "yaml-ddp-backend", {"ddp_backend": "nccl"}),
    ("ddp-backend-rccl", {"ddp_backend": "rccl"}, "rx7900xtx", "ddp_backend", "yaml-ddp-backend", {"ddp_backend": "nccl"}),
    ("flash-attn-off", {"flash_attn": False}, "rx7900xtx", "flash_attn", "yaml-flash-attn-boolean", {"flash_attn": "disabled"}),
    ("flash-attn-on", {"flash_attn": True}, "rx7900xtx", "flash_attn", "yaml-flash-attn-boolean", {"flash_attn": "auto"}),
    ("flash-attn-eager", {"flash_attn": "eager"}, "rx7900xtx", "flash_attn", "yaml-flash-attn-choice", {"flash_attn": "disabled"}),
    ("flash-attn-hf-name", {"flash_attn": "flash_attention_2"}, "rx7900xtx", "flash_attn", "yaml-flash-attn-choice", {"flash_attn": "fa2"}),
    ("flash-attn-nonsense", {"flash_attn": "turbo"}, "rx7900xtx", "flash_attn", "yaml-flash-attn-choice", None),
    ("device-map", {"device_map": "auto"}, "rx7900xtx", "device_map", "yaml-device-map", {"device_map": None}),
    ("quantization-device-map", {"quantization_device_map": "auto", "quantization_bit": 4}, "rx7900xtx", "quantization_device_map", "yaml-quantization-device-map", {"quantization_device_map": None}),
    ("bf16-and-fp16", {"fp16": True}, "rx7900xtx", "bf16", "yaml-bf16-and-fp16", {"bf16": True, "fp16": None}),
    ("bf16-and-fp16-rdna2", {"fp16": True}, "rx6900xt", "bf16", "yaml-bf16-and-fp16", {"bf16": None, "fp16": True}),
    ("bf16-on-rdna2", {}, "rx6900xt", "bf16", "bf16-unsupported", {"bf16": None, "fp16": True}),
    ("no-precision", {"bf16": None}, "rx7900xtx", "bf16", "yaml-precision-unset", {"bf16": True}),
    ("hub-model-id", {"model_name_or_path": "Qwen/Qwen2.5-7B-Instruct"}, "rx7900xtx", "model_name_or_path", "model-hub-id-offline", None),
    (
        "typo-known-key-unset", {"per_device_train_batch_size": None, "per_device_train_batch_sizee": 2}, "rx7900xtx",
        "per_device_train_batch_sizee", "yaml-unknown-key", {"per_device_train_batch_sizee": None, "per_device_train_batch_size": 2},
    ),
    ("typo-known-key-set", {"lerning_rate": 2e-4}, "rx7900xtx", "lerning_rate", "yaml-unknown-key", {"lerning_rate": None, "learning_rate": 1e-4}),
    ("unknown-key", {"make_it_fast": True}, "rx7900xtx", "make_it_fast", "yaml-unknown-key", {"make_it_fast": None}),
    ("finetuning-qlora", {"finetuning_type": "qlora"}, "rx7900xtx", "finetuning_type", "yaml-finetuning-qlora", {"finetuning_type": "lora", "quantization_bit": 4}),
    ("no-do-train", {"do_train": None}, "rx7900xtx", "do_train", "yaml-do-train", {"do_train": True}),
    ("stage-ppo", {"stage": "ppo"}, "rx7900xtx", "stage", "yaml-stage-not-sft", None),
    ("no-template", {"template": None}, "rx7900xtx", "template", "yaml-template-unset", None),
    ("template-typo", {"template": "llama-3"}, "rx7900xtx", "template", "template-unknown", {"template": "llama3"}),
    ("lr-text", {"learning_rate": "fast"}, "rx7900xtx", "learning_rate", "not-a-number", None),
    ("lr-zero", {"learning_rate": 0}, "rx7900xtx", "learning_rate", "learning-rate-not-positive", {"learning_rate": 1e-4}),
    ("batch-zero", {"per_device_train_batch_size": 0}, "rx7900xtx", "per_device_train_batch_size", "batch-size-range", {"per_device_train_batch_size": 1}),
    ("cutoff-negative", {"cutoff_len": -1}, "rx7900xtx", "cutoff_len", "cutoff-range", {"cutoff_len": 1024}),
    ("lora-rank-zero", {"lora_rank": 0}, "rx7900xtx", "lora_rank", "lora-rank-range", {"lora_rank": 8}),
    ("max-steps-negative", {"max_steps": -5}, "rx7900xtx", "max_steps", "max-steps-range", {"max_steps": None}),
    ("qlora-not-offered", {"quantization_bit": 4, "bf16": None, "fp16": True}, "rx6900xt", "quantization_bit", "qlora-not-offered", {"quantization_bit": None}),
    ("run-name", {"run_name": "../../etc"}, "rx7900xtx", "run_name", "run-name-unsafe", {"run_name": "etc"}),
    ("dataset-not-listed", {"dataset": "alpaca_en_demo"}, "rx7900xtx", "dataset", "dataset-not-in-info", None),
    ("no-dataset-dir", {"dataset_dir": None}, "rx7900xtx", "dataset_dir", "dataset-dir-missing", None),
    ("fa3-not-in-form", {"flash_attn": "fa3"}, "rx7900xtx", "flash_attn", "yaml-form-has-no-choice", None),
    # Kept in Other keys, and checked there: a relative path would point into the run's folder.
    ("deepspeed-relative", {"deepspeed": "ds_z3_config.json"}, "rx7900xtx", "other_keys", "deepspeed-file-bad", None),
]


def _override(args: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    result = dict(args)
    for key, value in changes.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = value
    return result


@pytest.mark.parametrize(("changes", "preset", "key", "rule", "after_fix"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_bad_yaml_gets_a_finding_with_a_fix(assets, changes, preset, key, rule, after_fix) -> None:
    findings, args = imported(_override(base_args(assets), changes), preset)
    matching = [f for f in findings if f.rule == rule]
    assert matching, f"no {rule} finding; got {[(f.key, f.rule) for f in findings]}"
    finding = matching[0]
    assert finding.key == key
    assert finding.problem.strip() and finding.fix.strip()
    if after_fix is None:
        assert finding.patch == {}
        return
    fixed = apply_fixes(args, findings)
    for fixed_key, value in after_fix.items():
        if value is None:
            assert fixed_key not in fixed
        else:
            assert fixed[fixed_key] == value
    # The fixed file no longer has this finding (re-imported from its text).
    again, _ = imported(fixed, preset)
    assert rule not in {f.rule for f in again}


# Files that are not a training mapping at all: (case id, text, rule)
TEXT_CASES = [
    ("syntax", "model_name_or_path: [unclosed\n", "yaml-syntax"),
    ("tabs", "a: 1\n\tb: 2\n", "yaml-syntax"),
    ("a-list", "- learning_rate: 1\n", "yaml-not-mapping"),
    ("a-scalar", "just some words\n", "yaml-not-mapping"),
    ("empty", "  \n", "yaml-empty"),
    ("too-large", "a: " + "x" * 300_000 + "\n", "yaml-too-large"),
    (
        "alias-bomb",
        "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
        "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n",
        "yaml-too-many-values",
    ),
    ("python-tag", "a: !!python/object/apply:os.system ['true']\n", "yaml-syntax"),
]


@pytest.mark.parametrize(("text", "rule"), [c[1:] for c in TEXT_CASES], ids=[c[0] for c in TEXT_CASES])
def test_text_that_is_not_a_training_mapping(text: str, rule: str) -> None:
    result = import_yaml(text, PRESETS["rx7900xtx"])
    assert [(f.key, f.rule) for f in result.findings] == [("file", rule)]
    assert result.findings[0].fix
    assert result.form_values == {} and result.args == {}


def test_there_are_at_least_forty_bad_inputs_across_form_and_yaml() -> None:
    from tests.test_checks import CASES as FORM_CASES

    assert len(CASES) + len(TEXT_CASES) + len(FORM_CASES) >= 40
    assert len(CASES) + len(TEXT_CASES) >= 40


def test_the_loader_reads_numbers_as_llamafactory_cli_does() -> None:
    args, findings = load_yaml_text("learning_rate: 1e-4\nwarmup_ratio: .5\nflash_attn: off\nseed: 42\ndate: 2024-01-01\n")
    assert findings == []
    assert args == {"learning_rate": 1e-4, "warmup_ratio": 0.5, "flash_attn": False, "seed": 42, "date": "2024-01-01"}
    assert yaml.safe_load("x: 1e-4") == {"x": "1e-4"}  # the plain loader is left as it was


def test_duplicate_and_non_text_keys_are_flagged() -> None:
    args, findings = load_yaml_text("learning_rate: 1.0e-4\nlearning_rate: 2.0e-4\n7: x\n")
    assert {(f.key, f.rule) for f in findings} == {("learning_rate", "yaml-duplicate-key"), ("7", "yaml-key-not-text")}
    assert args == {"learning_rate": 2e-4}


def test_form_values_hold_only_what_the_yaml_sets(assets: dict[str, Path]) -> None:
    args = {"learning_rate": 2e-4, "dataset": ["a", "b"], "max_steps": -1, "disable_gradient_checkpointing": True, "fp16": True, "quantization_bit": 4}
    assert form_values_from_args(args) == {
        "learning_rate": 2e-4,
        "dataset": "a,b",
        "max_steps": 0,
        "quantization_bit": "4",
        "precision": "fp16",
        "gradient_checkpointing": False,
    }
    # A value the form cannot hold is left out; its finding says why.
    result = import_yaml(dump_yaml({**base_args(assets), "flash_attn": False, "learning_rate": "fast"}), PRESETS["rx7900xtx"])
    assert "flash_attn" not in result.form_values and "learning_rate" not in result.form_values
    assert result.form_values["model_path"] == str(assets["model"])


def test_fixing_the_messy_file_leaves_only_what_needs_a_person() -> None:
    text = (FIXTURES / "cuda_guide_mistakes.yaml").read_text()
    result = import_yaml(text, PRESETS["rx7900xtx"])
    rules = {f.rule for f in result.findings}
    device_rules = {"yaml-disable-flash-attn", "yaml-compute-type", "yaml-compute-device", "yaml-ddp-backend", "yaml-flash-attn-boolean", "yaml-device-map", "yaml-bf16-and-fp16"}
    assert device_rules | {"yaml-unknown-key", "model-hub-id-offline"} <= rules
    fixed = apply_fixes(result.args, result.findings)
    # Order is kept: the renamed typo sits where the typo was.
    assert list(fixed)[-2:] == ["flash_attn", "lora_rank"]
    assert fixed["bf16"] is True and "fp16" not in fixed and fixed["ddp_backend"] == "nccl"
    left = import_yaml(dump_yaml(fixed), PRESETS["rx7900xtx"]).findings
    assert {f.rule for f in left if f.severity == "problem"} == {"model-hub-id-offline", "dataset-dir-missing"}
    assert all(not f.patch for f in left if f.severity == "problem")
    assert apply_fixes(fixed, left) == fixed  # nothing more to do mechanically


# --- export -------------------------------------------------------------------------------


def _configs(assets: dict[str, Path]):
    values = {**FORM_DEFAULTS, "preset": "rx7900xtx", "model_path": str(assets["model"]), "dataset_dir": str(assets["data"]), "dataset": "demo", "run_name": "round-trip"}
    plain, _ = parse_form(values, PRESETS["rx7900xtx"].env)
    training = {"max_steps": 100, "gradient_checkpointing": False, "flash_attn": "sdpa", "lora_dropout": 0.05, "learning_rate": 3e-5, "batch_size": 2, "grad_accum": 4, "cutoff_len": 512}
    other = {**values, "quantization_bit": "4", "precision": "fp16", **training}
    varied, _ = parse_form(other, PRESETS["rx7900xtx"].env)
    return plain, varied


def test_export_then_import_gives_the_same_form_values(assets: dict[str, Path]) -> None:
    for config in _configs(assets):
        text = export_yaml(config, str(assets["root"] / "runs" / config.run_name))
        result = import_yaml(text, PRESETS["rx7900xtx"], bnb_available=lambda: True)
        assert not has_problems(result.findings), result.findings
        # The preset and the run name are not in the YAML (they are RocBoard's, not LLaMA-Factory's).
        assert "run_name" not in result.form_values
        assert {**FORM_DEFAULTS, **result.form_values, "preset": "rx7900xtx", "run_name": config.run_name} == to_form(config)


def test_export_shell_quotes_every_value() -> None:
    preset = PRESETS["rx7800xt"]
    config, _ = parse_form({**FORM_DEFAULTS, "run_name": "demo"}, preset.env)
    text = export_shell(config, preset, "my run's config.yaml")
    lines = text.splitlines()
    assert lines[0] == "#!/usr/bin/env bash" and "set -euo pipefail" in lines
    assert "export HSA_OVERRIDE_GFX_VERSION=11.0.0" in lines
    assert lines[-1] == "llamafactory-cli train 'my run'\"'\"'s config.yaml'"
    assert shlex.split(lines[-1]) == ["llamafactory-cli", "train", "my run's config.yaml"]


def test_export_shell_refuses_a_variable_name_the_shell_cannot_export() -> None:
    from dataclasses import replace

    preset = replace(PRESETS["mi300x"], env=(("BAD NAME; rm -rf /", "1"),))
    config, _ = parse_form(dict(FORM_DEFAULTS), ())
    with pytest.raises(ValueError, match="not a valid shell name"):
        export_shell(config, preset, "x.yaml")


def test_export_shell_for_the_cpu_demo_hides_the_gpus() -> None:
    preset = PRESETS["cpu-demo"]
    config, _ = parse_form({**FORM_DEFAULTS, "precision": "fp32"}, preset.env, use_cpu=True)
    assert "export CUDA_VISIBLE_DEVICES=''" in export_shell(config, preset, "x.yaml").splitlines()


# --- LLaMA-Factory's own parser, one helper process for the module ---------------------------


@pytest.fixture(scope="module")
def lf(assets: dict[str, Path], starts_lf_helper) -> dict[str, Any]:
    """One helper run: the exported configs, the messy file, and the installed names."""
    import subprocess
    import sys

    exported = [yaml.safe_load(export_yaml(c, str(assets["root"] / "lf-out" / c.run_name))) for c in _configs(assets)]
    messy, _ = load_yaml_text((FIXTURES / "cuda_guide_mistakes.yaml").read_text())
    configs = exported + [messy]
    request = json.dumps({"configs": configs, "names": True})
    done = subprocess.run([sys.executable, str(WORKER)], input=request, capture_output=True, text=True, timeout=300, check=False)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["ok"], answer
    return {"answer": answer, "configs": configs}


def test_the_static_list_matches_the_installed_llamafactory(lf: dict[str, Any]) -> None:
    names = lf["answer"]["names"]
    committed = json.loads(NAMES_FILE.read_text())
    assert committed["keys"] == names["keys"], "regenerate: python -m backend.llama_factory.worker --names > backend/llamafactory_names.json"
    assert committed["templates"] == names["templates"]
    assert committed["versions"] == names["versions"]


def test_the_exported_yaml_passes_llamafactorys_parser_and_creates_nothing(lf: dict[str, Any], assets: dict[str, Path]) -> None:
    for result, config in zip(lf["answer"]["results"][:2], lf["configs"][:2], strict=True):
        assert findings_from_result(result, config) == []
    assert not (assets["root"] / "lf-out").exists()


def test_llamafactorys_answer_in_plain_words(lf: dict[str, Any]) -> None:
    result, config = lf["answer"]["results"][2], lf["configs"][2]
    findings = findings_from_result(result, config)
    by_key = {f.key: f for f in findings}
    # Unknown keys, with the real key when one is close.
    assert by_key["lerning_rate"].rule == "lf-unknown-key" and "learning_rate" in by_key["lerning_rate"].fix
    assert by_key["lora_rnak"].patch == {"lora_rnak": None, "lora_rank": 16}
    assert {"compute_type", "compute_device", "device_map", "disable_flash_attn"} <= set(by_key)
    # Values of the wrong kind, by key.
    assert by_key["flash_attn"].rule == "lf-bad-value" and "disabled" in by_key["flash_attn"].problem
    assert by_key["ddp_backend"].rule == "lf-bad-value" and "nccl" in by_key["ddp_backend"].problem
    # Its cross-key rule, pinned to a key.
    assert by_key["bf16"].rule == "lf-rejected" and "only one" in by_key["bf16"].fix


def test_the_wrapper_reports_a_helper_that_cannot_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from backend.llama_factory import check as lf_check

    broken = tmp_path / "worker.py"
    broken.write_text("import sys; sys.exit(3)\n")
    monkeypatch.setattr(lf_check, "WORKER", broken)
    answer = check_many_with_llamafactory([{"a": 1}, {"b": 2}], timeout_s=60)
    assert [[f.rule for f in fs] for fs in answer.findings] == [["lf-unavailable"], ["lf-unavailable"]]
    assert answer.findings[0][0].severity == "warning"


# --- every finding of the import speaks through a message id ---------------------------------

# PyYAML's wordings the crafted inputs of tests/test_i18n.py leave out, with the message each gets.
SYNTAX_CASES: list[tuple[str, str]] = [
    ("a: &\n", "yaml-syntax-expected-found"),  # an anchor without a name
    ("a: !!str [1]\n", "yaml-syntax-expected-found"),
    ("%YAML 2.0\n---\na: 1\n", ""),  # no words of its own: the rule's message, with PyYAML's
    ("a: !!int x\n", "yaml-syntax-no-position"),  # a constructor's refusal: no position
    ("a: !!bool maybe\n", "yaml-syntax-no-position"),  # PyYAML raises KeyError here
    ("stage: sft\n\x07\n", "yaml-syntax-control-character"),
    ("a: [1, {b: 2]\n", "yaml-syntax-open-mapping"),
    ("a: [b: c: d]\n", "yaml-syntax-open-list"),
]


@pytest.mark.parametrize(("text", "message"), SYNTAX_CASES)
def test_each_yaml_syntax_error_gets_its_own_message(text: str, message: str) -> None:
    args, findings = load_yaml_text(text)
    assert args is None and [(f.rule, f.message) for f in findings] == [("yaml-syntax", message)]
    assert findings[0].key == "file" and findings[0].problem.startswith("This is not valid YAML")


def _corpus_findings() -> list[Finding]:
    """The findings of every YAML the tests import: the fixtures, the crafted bad inputs of
    tests/test_i18n.py, the syntax errors above, and the valid config with each case's keys."""
    from tests.test_i18n import _yaml_findings

    findings = _yaml_findings()
    for text, _ in SYNTAX_CASES:
        findings += import_yaml(text, PRESETS["rx7900xtx"]).findings
    findings += import_yaml("do_train: true\nbf16: true\nfp16: true\n" + "k" * 100 + ": 1\n", PRESETS["cpu-demo"]).findings
    # What compute_type and qlora say on hardware without bf16 or without those bits.
    for preset in ("cpu-demo", "rx6900xt"):
        for value in ("bf16", "amp"):
            findings += import_yaml(f"do_train: true\ncompute_type: {value}\nfinetuning_type: qlora\n", PRESETS[preset]).findings
    return findings


def test_no_finding_of_the_import_is_built_from_english_sentences() -> None:
    from backend.i18n import CATALOGUE, LOCALES, placeholders

    findings = _corpus_findings()
    assert len(findings) > 100
    legacy = sorted({f"{f.rule}: {f.problem}" for f in findings if f.params is None})
    assert legacy == []
    for finding in findings:
        message_id = finding.message or finding.rule
        for part in ("problem", "fix"):
            needed = {name.split(":")[0] for name in placeholders(CATALOGUE["en"][f"check.{message_id}.{part}"])} - {"key"}
            assert needed <= set(finding.params), (message_id, part, needed - set(finding.params))
            for locale in LOCALES:
                assert f"check.{message_id}.{part}" in CATALOGUE[locale], (locale, message_id)
        # The English a finding carries is its catalogue text, rendered.
        assert finding.text("en") == (finding.problem, finding.fix)


def test_every_message_of_the_import_is_used() -> None:
    from backend.i18n import CATALOGUE

    used = {f.message or f.rule for f in _corpus_findings()}
    # The import's own message ids: those its module names (rule= or message=).
    source = (Path(__file__).resolve().parent.parent / "backend" / "config" / "yaml_import.py").read_text(encoding="utf-8")
    named = set(re.findall(r'"(yaml-[a-z0-9-]+)"', source))
    ids = {key.split(".")[1] for key in CATALOGUE["en"] if key.startswith("check.yaml-")}
    assert named <= ids
    assert sorted(ids - used) == []


def test_a_long_unknown_key_is_shown_cut_in_every_language() -> None:
    key = "k" * 100
    findings = import_yaml(f"do_train: true\n{key}: 1\n", PRESETS["rx7900xtx"]).findings
    (finding,) = [f for f in findings if f.rule == "yaml-unknown-key"]
    assert finding.key == key and finding.patch == {key: None}
    for text in (finding.problem, *finding.text("zh-CN")):
        assert key not in text
    assert f"`{'k' * 64}…`" in finding.problem and f"`{'k' * 64}…`" in finding.text("zh-CN")[0]
