"""Config rules (backend/config/checks.py): a valid baseline, then one bad override per case.

Each case must give a finding that names the form field and says how to fix it. The model
and dataset directories are tiny fakes in tmp_path (a config.json, one JSON dataset): the
rules read files, they never load a model.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from backend.config import FORM_DEFAULTS, parse_form
from backend.config.checks import check_config, check_output_dir, known_templates
from backend.config.presets import load_presets
from backend.findings import Finding
from backend.llama_factory.check import static_names

PRESETS, _ = load_presets()
TINY_LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
}


@dataclass
class Assets:
    root: Path
    model_dir: Path
    dataset_dir: Path

    def model(self, name: str, files: dict[str, str]) -> str:
        """A model directory holding `files` (name -> text)."""
        path = self.root / name
        path.mkdir()
        for file_name, text in files.items():
            (path / file_name).write_text(text)
        return str(path)

    def dataset(self, name: str, info: str | None, files: dict[str, str] | None = None) -> str:
        path = self.root / name
        path.mkdir()
        if info is not None:
            (path / "dataset_info.json").write_text(info)
        for file_name, text in (files or {}).items():
            (path / file_name).write_text(text)
        return str(path)


def make_model_dir(path: Path, config: dict[str, Any] = TINY_LLAMA) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config))
    (path / "model.safetensors").write_bytes(b"\0" * 16)
    (path / "tokenizer_config.json").write_text("{}")
    return path


def make_dataset_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "dataset_info.json").write_text(json.dumps({"demo": {"file_name": "demo.json"}}))
    (path / "demo.json").write_text(json.dumps([{"instruction": "Say hi", "input": "", "output": "hi"}]))
    return path


@pytest.fixture
def assets(tmp_path: Path) -> Assets:
    return Assets(tmp_path, make_model_dir(tmp_path / "model"), make_dataset_dir(tmp_path / "data"))


def good_values(assets: Assets) -> dict[str, Any]:
    return {
        **FORM_DEFAULTS,
        "preset": "rx7900xtx",
        "model_path": str(assets.model_dir),
        "dataset_dir": str(assets.dataset_dir),
        "dataset": "demo",
        "template": "llama3",
        "run_name": "my-run_1.0",
    }


def findings_for(values: dict[str, Any], preset_id: str, bnb: bool = True) -> list[Finding]:
    preset = PRESETS[preset_id]
    config, findings = parse_form(values, preset.env, preset.use_cpu)
    return findings + check_config(config, preset, offline=True, bnb_available=lambda: bnb)


def test_the_baseline_is_clean(assets: Assets) -> None:
    assert findings_for(good_values(assets), "rx7900xtx") == []
    cpu = {**good_values(assets), "preset": "cpu-demo", "precision": "fp32", "flash_attn": "disabled", "cutoff_len": 128}
    assert findings_for(cpu, "cpu-demo", bnb=False) == []


Override = Callable[[Assets], dict[str, Any]]


def v(**values: Any) -> Override:
    return lambda assets: values


# (case id, override, preset, bitsandbytes importable, expected field, expected rule)
CASES: list[tuple[str, Override, str, bool, str, str]] = [
    ("lr-zero", v(learning_rate=0), "rx7900xtx", True, "learning_rate", "learning-rate-not-positive"),
    ("lr-negative", v(learning_rate=-1e-4), "rx7900xtx", True, "learning_rate", "learning-rate-not-positive"),
    ("lr-absurd", v(learning_rate=5), "rx7900xtx", True, "learning_rate", "learning-rate-absurd"),
    ("lr-text", v(learning_rate="abc"), "rx7900xtx", True, "learning_rate", "not-a-number"),
    ("lr-infinite", v(learning_rate="inf"), "rx7900xtx", True, "learning_rate", "not-a-number"),
    ("batch-zero", v(batch_size=0), "rx7900xtx", True, "batch_size", "batch-size-range"),
    ("batch-huge", v(batch_size=100_000), "rx7900xtx", True, "batch_size", "batch-size-range"),
    ("batch-fraction", v(batch_size=1.5), "rx7900xtx", True, "batch_size", "not-a-number"),
    ("accum-zero", v(grad_accum=0), "rx7900xtx", True, "grad_accum", "grad-accum-range"),
    ("steps-negative", v(max_steps=-5), "rx7900xtx", True, "max_steps", "max-steps-range"),
    ("epochs-zero", v(num_train_epochs=0, max_steps=0), "rx7900xtx", True, "num_train_epochs", "epochs-not-positive"),
    ("epochs-huge", v(num_train_epochs=5000), "rx7900xtx", True, "num_train_epochs", "epochs-range"),
    ("cutoff-zero", v(cutoff_len=0), "rx7900xtx", True, "cutoff_len", "cutoff-range"),
    ("cutoff-tiny", v(cutoff_len=8), "rx7900xtx", True, "cutoff_len", "cutoff-too-short"),
    ("cutoff-beyond-context", v(cutoff_len=8192), "mi300x", True, "cutoff_len", "cutoff-beyond-context"),
    ("lora-rank-zero", v(lora_rank=0), "rx7900xtx", True, "lora_rank", "lora-rank-range"),
    ("lora-rank-huge", v(lora_rank=4096), "rx7900xtx", True, "lora_rank", "lora-rank-range"),
    ("lora-alpha-zero", v(lora_alpha=0), "rx7900xtx", True, "lora_alpha", "lora-alpha-range"),
    ("lora-dropout-one", v(lora_dropout=1.0), "rx7900xtx", True, "lora_dropout", "lora-dropout-range"),
    ("lora-dropout-negative", v(lora_dropout=-0.1), "rx7900xtx", True, "lora_dropout", "lora-dropout-range"),
    ("logging-zero", v(logging_steps=0), "rx7900xtx", True, "logging_steps", "logging-steps-range"),
    ("save-negative", v(save_steps=-1), "rx7900xtx", True, "save_steps", "save-steps-range"),
    ("model-empty", v(model_path=""), "rx7900xtx", True, "model_path", "model-path-missing"),
    ("model-hub-id", v(model_path="meta-llama/Meta-Llama-3-8B"), "rx7900xtx", True, "model_path", "model-hub-id-offline"),
    ("model-not-found", lambda a: {"model_path": str(a.root / "nope")}, "rx7900xtx", True, "model_path", "model-path-not-found"),
    ("model-is-file", lambda a: {"model_path": str(a.model_dir / "config.json")}, "rx7900xtx", True, "model_path", "model-path-not-dir"),
    ("model-no-config", lambda a: {"model_path": a.model("m1", {"model.safetensors": "x"})}, "rx7900xtx", True, "model_path", "model-no-config"),
    ("model-bad-config", lambda a: {"model_path": a.model("m2", {"config.json": "{not json", "model.safetensors": "x"})}, "rx7900xtx", True, "model_path", "model-config-unreadable"),
    ("model-no-weights", lambda a: {"model_path": a.model("m3", {"config.json": "{}", "tokenizer.json": "{}"})}, "rx7900xtx", True, "model_path", "model-no-weights"),
    ("template-typo", v(template="llama-3"), "rx7900xtx", True, "template", "template-unknown"),
    ("template-empty", v(template=""), "rx7900xtx", True, "template", "template-unknown"),
    ("dataset-dir-empty", v(dataset_dir=""), "rx7900xtx", True, "dataset_dir", "dataset-dir-missing"),
    ("dataset-dir-not-found", lambda a: {"dataset_dir": str(a.root / "nowhere")}, "rx7900xtx", True, "dataset_dir", "dataset-dir-not-found"),
    ("dataset-info-missing", lambda a: {"dataset_dir": a.dataset("d1", None)}, "rx7900xtx", True, "dataset_dir", "dataset-info-missing"),
    ("dataset-info-broken", lambda a: {"dataset_dir": a.dataset("d2", "{oops")}, "rx7900xtx", True, "dataset_dir", "dataset-info-unreadable"),
    ("dataset-none", v(dataset=""), "rx7900xtx", True, "dataset", "dataset-missing"),
    ("dataset-not-listed", v(dataset="demo2"), "rx7900xtx", True, "dataset", "dataset-not-in-info"),
    ("dataset-file-missing", lambda a: {"dataset_dir": a.dataset("d3", '{"demo": {"file_name": "gone.json"}}')}, "rx7900xtx", True, "dataset", "dataset-file-missing"),
    ("dataset-file-broken", lambda a: {"dataset_dir": a.dataset("d4", '{"demo": {"file_name": "d.json"}}', {"d.json": "[{"})}, "rx7900xtx", True, "dataset", "dataset-file-unreadable"),
    (
        "dataset-jsonl-broken",
        lambda a: {"dataset_dir": a.dataset("d5", '{"demo": {"file_name": "d.jsonl"}}', {"d.jsonl": '{"a": 1}\n{broken\n'})},
        "rx7900xtx",
        True,
        "dataset",
        "dataset-file-unreadable",
    ),
    ("dataset-hub-offline", lambda a: {"dataset_dir": a.dataset("d6", '{"demo": {"hf_hub_url": "tatsu-lab/alpaca"}}')}, "rx7900xtx", True, "dataset", "dataset-hub-offline"),
    ("bf16-on-rdna2", v(precision="bf16"), "rx6900xt", True, "precision", "bf16-unsupported"),
    ("bad-precision", v(precision="bf17"), "rx7900xtx", True, "precision", "bad-choice"),
    ("qlora-type", v(finetuning_type="qlora"), "rx7900xtx", True, "finetuning_type", "bad-choice"),
    ("qlora-no-bnb", v(quantization_bit="4"), "rx7900xtx", False, "quantization_bit", "qlora-no-bitsandbytes"),
    ("qlora-not-offered", v(quantization_bit="4", precision="fp16"), "rx6900xt", True, "quantization_bit", "qlora-not-offered"),
    ("qlora-full", v(quantization_bit="8", finetuning_type="full"), "mi300x", True, "quantization_bit", "qlora-needs-lora"),
    ("qlora-cpu", v(quantization_bit="4", precision="fp32"), "cpu-demo", True, "quantization_bit", "qlora-on-cpu"),
    ("quantization-3bit", v(quantization_bit="3"), "rx7900xtx", True, "quantization_bit", "bad-choice"),
    ("fa2-on-cpu", v(flash_attn="fa2", precision="fp32"), "cpu-demo", True, "flash_attn", "fa2-on-cpu"),
    ("run-name-parent", v(run_name="../evil"), "rx7900xtx", True, "run_name", "run-name-unsafe"),
    ("run-name-slash", v(run_name="a/b"), "rx7900xtx", True, "run_name", "run-name-unsafe"),
    ("run-name-hidden", v(run_name=".hidden"), "rx7900xtx", True, "run_name", "run-name-unsafe"),
    ("run-name-long", v(run_name="x" * 65), "rx7900xtx", True, "run_name", "run-name-unsafe"),
    ("run-name-space", v(run_name="my run"), "rx7900xtx", True, "run_name", "run-name-unsafe"),
    ("run-name-dash", v(run_name="-rf"), "rx7900xtx", True, "run_name", "run-name-unsafe"),
    (
        "memory",
        lambda a: {
            "model_path": str(
                make_model_dir(
                    a.root / "big", {**TINY_LLAMA, "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 128256}
                )
            )
        },
        "rx7900xtx",
        True,
        "memory",
        "memory-will-not-fit",
    ),
]


@pytest.mark.parametrize(("override", "preset_id", "bnb", "field", "rule"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_bad_value_gets_a_finding_with_a_fix(assets: Assets, override: Override, preset_id: str, bnb: bool, field: str, rule: str) -> None:
    values = {**good_values(assets), "preset": preset_id, **override(assets)}
    if PRESETS[preset_id].use_cpu and "precision" not in override(assets):
        values["precision"] = "fp32"
    findings = findings_for(values, preset_id, bnb)
    matching = [f for f in findings if f.rule == rule]
    assert matching, f"no {rule} finding; got {[(f.key, f.rule) for f in findings]}"
    finding = matching[0]
    assert finding.key == field
    assert finding.fix.strip() and finding.problem.strip()
    assert finding.severity in ("problem", "warning")


def test_there_are_at_least_forty_form_cases() -> None:
    assert len(CASES) >= 40
    assert len({c[0] for c in CASES}) == len(CASES)


def test_hub_id_is_fine_when_online(assets: Assets) -> None:
    preset = PRESETS["rx7900xtx"]
    config, _ = parse_form({**good_values(assets), "model_path": "Qwen/Qwen2.5-7B-Instruct"}, preset.env)
    assert not [f for f in check_config(config, preset, offline=False, bnb_available=lambda: True) if f.key == "model_path"]


def test_the_fixes_that_carry_a_patch_make_the_finding_go_away(assets: Assets) -> None:
    for override, preset_id in ((v(precision="bf16"), "rx6900xt"), (v(run_name="a b/c"), "rx7900xtx"), (v(lora_rank=0), "rx7900xtx"), (v(template="llama-3"), "rx7900xtx")):
        values = {**good_values(assets), "preset": preset_id, **override(assets)}
        first = findings_for(values, preset_id)
        patched = {**values}
        for finding in first:
            patched.update(finding.patch)
        assert findings_for(patched, preset_id) == [], first


def test_problems_come_before_warnings(assets: Assets) -> None:
    findings = findings_for({**good_values(assets), "learning_rate": 5, "batch_size": 0}, "rx7900xtx")
    assert [f.severity for f in findings] == sorted((f.severity for f in findings), key=lambda s: s != "problem")
    assert {f.rule for f in findings} >= {"learning-rate-absurd", "batch-size-range"}


def test_template_names_come_from_the_installed_source_and_match_the_static_list() -> None:
    templates = known_templates()
    assert {"llama3", "qwen", "mistral", "default"} <= templates
    assert "custom" not in templates  # the name in register_template's docstring example
    assert templates == static_names().templates


def test_a_data_file_edit_is_noticed(assets: Assets) -> None:
    values = good_values(assets)
    assert findings_for(values, "rx7900xtx") == []
    data_file = assets.dataset_dir / "demo.json"
    data_file.write_text("[{broken")
    os.utime(data_file, ns=(1, 1))  # a different stamp even where the clock is coarse
    assert [f.rule for f in findings_for(values, "rx7900xtx")] == ["dataset-file-unreadable"]


# --- the runs directory ---------------------------------------------------------------------


def test_output_dir_that_does_not_exist_yet_is_fine_and_is_not_created(tmp_path: Path) -> None:
    target = tmp_path / "runs" / "deeper"
    assert check_output_dir(target) == []
    assert not (tmp_path / "runs").exists()


def test_output_dir_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "runs").write_text("")
    findings = check_output_dir(tmp_path / "runs")
    assert [(f.key, f.rule) for f in findings] == [("runs_dir", "runs-dir-not-dir")]
    findings = check_output_dir(tmp_path / "runs" / "below")
    assert [(f.key, f.rule) for f in findings] == [("runs_dir", "runs-dir-not-dir")]


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root may write anywhere")
def test_output_dir_not_writable(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        findings = check_output_dir(locked / "runs")
        assert [(f.key, f.rule) for f in findings] == [("runs_dir", "runs-dir-not-writable")]
    finally:
        locked.chmod(0o700)


def test_the_checking_modules_import_nothing_heavy() -> None:
    """The web process imports these; torch, transformers or llamafactory would cost ~1 GB."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import backend.config.checks, backend.config.yaml_import, backend.config.estimate, backend.config.export, backend.check_cli, backend.llama_factory.check\n"
        "from backend.config.checks import known_templates\n"
        "assert 'llama3' in known_templates()\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'llamafactory', 'gradio', 'bitsandbytes') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_no_dataset_folder_says_where_llamafactory_would_look() -> None:
    from backend.config import parse_form, schema
    from backend.config.checks import check_config

    config, _ = parse_form({**schema.form_defaults(), "model_path": "/m", "dataset": "a", "dataset_dir": ""})
    (finding,) = [f for f in check_config(config, None) if f.key == "dataset_dir"]
    assert "`data`" in finding.problem and "runs/<run-id>/" in finding.problem
    assert "`data`" in finding.text("zh-CN")[0]


@pytest.mark.parametrize(("offline", "rule", "severity"), [(True, "dataset-dir-remote-offline", "problem"), (False, "dataset-dir-remote", "warning")])
def test_a_hub_dataset_folder_is_named_as_such_not_as_a_missing_directory(offline, rule, severity) -> None:
    from backend.config import parse_form, schema
    from backend.config.checks import check_config

    config, _ = parse_form({**schema.form_defaults(), "model_path": "/m", "dataset": "a", "dataset_dir": "REMOTE:llamafactory/demo_data"})
    found = [f for f in check_config(config, None, offline=offline) if f.key == "dataset_dir"]
    assert [(f.rule, f.severity) for f in found] == [(rule, severity)]
    assert "llamafactory/demo_data" in found[0].problem
