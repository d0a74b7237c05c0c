"""The memory estimate (backend/config/estimate.py) against published and measured figures.

Tolerances, and where the figures come from, are in docs/estimate.md:
- parameter counts of well-known models: within 1% of their model cards;
- LLaMA-Factory's README hardware table (full / LoRA / QLoRA 8 / QLoRA 4 at 7B-70B, batch 1,
  cutoff 1024, gradient checkpointing): within 20% of every cell;
- peak memory of one training step measured on this project's CPU machine: within 25%.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backend.config import FORM_DEFAULTS, parse_form
from backend.config.estimate import (
    GIB,
    KNOWN_MODELS,
    estimate_memory,
    known_model_config,
    read_model_config,
    shape_from_config,
)
from backend.config.presets import load_presets

PRESETS, _ = load_presets()
KNOWN = {display: config for display, _, config in KNOWN_MODELS}

# Published parameter counts (model cards), in billions.
PUBLISHED_PARAMS = {
    "Llama-2-7B": 6.74,
    "Llama-2-13B": 13.02,
    "Llama-2-70B": 68.98,
    "LLaMA-30B": 32.53,
    "Llama-3-8B": 8.03,
    "Llama-3-70B": 70.55,
    "Llama-3.2-1B": 1.24,
    "Llama-3.2-3B": 3.21,
    "Mistral-7B": 7.25,
    "Mixtral-8x7B": 46.7,
    "Qwen2.5-0.5B": 0.49,
    "Qwen2.5-1.5B": 1.54,
    "Qwen2.5-3B": 3.09,
    "Qwen2.5-7B": 7.61,
    "Qwen2.5-14B": 14.7,
    "Qwen2.5-32B": 32.5,
    "Qwen2.5-72B": 72.7,
}

# LLaMA-Factory README, "Hardware Requirement" (GB per GPU): method -> {size: GB}; the model
# standing for each size column.
LLAMAFACTORY_TABLE = {
    ("full", None): {"7B": 120, "14B": 240, "30B": 600, "70B": 1200},
    ("lora", None): {"7B": 16, "14B": 32, "30B": 64, "70B": 160},
    ("lora", 8): {"7B": 10, "14B": 20, "30B": 40, "70B": 80},
    ("lora", 4): {"7B": 6, "14B": 12, "30B": 24, "70B": 48},
}
TABLE_MODELS = {"7B": "Llama-2-7B", "14B": "Qwen2.5-14B", "30B": "LLaMA-30B", "70B": "Llama-2-70B"}
TABLE_TOLERANCE = 0.20

# Measured on the project's 2-core CPU machine: peak RSS growth over one warmed-up process during
# two AdamW steps of a random Llama (hidden 1024, 8 layers, 16 heads / 4 kv, vocab 32000, 156M
# parameters) in fp32, batch 1 x 512 tokens (script in docs/estimate.md).
MEASURED_SHAPE = {
    "model_type": "llama",
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 8,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
}
MEASURED_PEAK = [
    # (finetuning type, gradient checkpointing, flash_attn, bytes)
    ("full", False, "sdpa", 3_168_718_848),
    ("lora", False, "sdpa", 1_489_043_456),
    ("lora", True, "sdpa", 1_172_447_232),
    ("lora", False, "disabled", 1_681_625_088),
]
MEASURED_TOLERANCE = 0.25


def config_for(model: str = "/models/none", **form: Any):
    values = {**FORM_DEFAULTS, "model_path": model, "batch_size": 1, "cutoff_len": 1024, "gradient_checkpointing": True, "flash_attn": "sdpa", **form}
    config, findings = parse_form(values)
    assert findings == []
    return config


@pytest.mark.parametrize("display", sorted(PUBLISHED_PARAMS))
def test_parameter_count_matches_the_model_card(display: str) -> None:
    shape = shape_from_config(KNOWN[display])
    assert shape is not None
    assert shape.num_params / 1e9 == pytest.approx(PUBLISHED_PARAMS[display], rel=0.01)


@pytest.mark.parametrize(("method", "bits"), list(LLAMAFACTORY_TABLE))
def test_against_llamafactorys_hardware_table(method: str, bits: int | None) -> None:
    for size, published_gb in LLAMAFACTORY_TABLE[(method, bits)].items():
        config = config_for(finetuning_type=method, quantization_bit=str(bits) if bits else "none")
        estimate = estimate_memory(config, None, model_config=KNOWN[TABLE_MODELS[size]])
        # The table's "GB" are GPU memory sizes, which are binary (a 24 GB card holds 24 GiB).
        assert estimate.total_bytes / GIB == pytest.approx(published_gb, rel=TABLE_TOLERANCE), (method, bits, size)


@pytest.mark.parametrize(("method", "checkpointing", "attention", "measured"), MEASURED_PEAK)
def test_against_measured_cpu_peaks(method: str, checkpointing: bool, attention: str, measured: int) -> None:
    config = config_for(finetuning_type=method, gradient_checkpointing=checkpointing, flash_attn=attention, precision="fp32", cutoff_len=512)
    estimate = estimate_memory(config, None, model_config=MEASURED_SHAPE)
    # No accelerator runtime on a CPU: compare what the model, its training state and the
    # activations take.
    dynamic = estimate.weights_bytes + estimate.trainable_bytes + estimate.activations_bytes
    assert dynamic == pytest.approx(measured, rel=MEASURED_TOLERANCE)


def test_the_breakdown_adds_up_and_names_the_parts() -> None:
    estimate = estimate_memory(config_for(), PRESETS["rx7900xtx"], model_config=KNOWN["Llama-3-8B"])
    parts = dict(estimate.breakdown())
    assert set(parts) == {"weights", "trainable params + gradients + optimizer state", "activations", "overhead"}
    assert sum(parts.values()) == estimate.total_bytes
    assert all(v > 0 for v in parts.values())
    assert estimate.vram_bytes == 24 * GIB


def test_less_memory_for_every_saving() -> None:
    shape = KNOWN["Llama-3-8B"]

    def total(**form: Any) -> int:
        return estimate_memory(config_for(**form), None, model_config=shape).total_bytes

    assert total(finetuning_type="full") > total(finetuning_type="freeze") > total() > total(quantization_bit="8") > total(quantization_bit="4")
    assert total(gradient_checkpointing=False) > total()
    assert total(batch_size=4) > total()
    assert total(cutoff_len=4096) > total()
    assert total(flash_attn="disabled", gradient_checkpointing=False) > total(gradient_checkpointing=False)
    assert total(precision="fp32") > total()


@pytest.mark.parametrize(
    ("model", "form", "preset", "verdict", "fix_words"),
    [
        ("Qwen2.5-0.5B", {}, "rx7900xtx", "fits", None),
        ("Llama-3-8B", {"cutoff_len": 1024}, "w7900", "fits", None),
        ("Llama-3-8B", {"cutoff_len": 1024}, "rx7900xtx", "fits", None),
        ("Llama-3-8B", {"cutoff_len": 2048}, "rx7900xtx", "tight", ["cutoff_len to 1024"]),
        ("Llama-3-8B", {"batch_size": 4, "cutoff_len": 4096, "grad_accum": 8}, "rx7900xtx", "will not fit", ["batch size 1 and gradient accumulation 32", "cutoff_len to 1024"]),
        ("Llama-3-8B", {"gradient_checkpointing": False, "cutoff_len": 2048}, "rx7900xt", "will not fit", ["QLoRA"]),
        ("Llama-3-70B", {"finetuning_type": "full"}, "mi300x", "will not fit", ["switch to LoRA"]),
        ("Llama-3-70B", {}, "rx7900xtx", "will not fit", ["does not fit", "smaller model"]),
        ("Llama-3-8B", {}, "rx6900xt", "will not fit", ["does not fit"]),
    ],
)
def test_verdict_and_cheapest_fix(model: str, form: dict[str, Any], preset: str, verdict: str, fix_words: list[str] | None) -> None:
    estimate = estimate_memory(config_for(**form), PRESETS[preset], model_config=KNOWN[model])
    assert estimate.verdict == verdict, estimate.summary()
    if fix_words is None:
        assert estimate.cheapest_fix == ""
    else:
        for words in fix_words:
            assert words in estimate.cheapest_fix, estimate.cheapest_fix


def test_the_cheapest_fix_does_fit() -> None:
    preset = PRESETS["rx7900xtx"]
    before = estimate_memory(config_for(batch_size=4, cutoff_len=4096, grad_accum=8), preset, model_config=KNOWN["Llama-3-8B"])
    assert before.cheapest_fix.startswith("set batch size 1")  # shown after "Cheapest change that fits:"
    from backend import view

    chinese = view.estimate_markdown(before, "zh-CN")
    assert "批大小设为 1" in chinese and "放不下" in chinese and "set batch" not in chinese
    after = estimate_memory(config_for(batch_size=1, cutoff_len=1024, grad_accum=32), preset, model_config=KNOWN["Llama-3-8B"])
    assert after.verdict in ("fits", "tight")


def test_zero3_is_offered_where_a_node_has_several_gpus() -> None:
    from dataclasses import replace

    # Without QLoRA, a 70B model needs LoRA and the whole node of MI250 GCDs.
    no_qlora = replace(PRESETS["mi250"], qlora_bits=())
    estimate = estimate_memory(config_for(finetuning_type="full"), no_qlora, model_config=KNOWN["Llama-3-70B"])
    assert estimate.verdict == "will not fit"
    assert "LoRA" in estimate.cheapest_fix and "8 GPUs with DeepSpeed ZeRO-3" in estimate.cheapest_fix
    # With QLoRA offered, one GCD is enough: cheaper than a node.
    with_qlora = estimate_memory(config_for(finetuning_type="full"), PRESETS["mi250"], model_config=KNOWN["Llama-3-70B"])
    assert "QLoRA with 4-bit" in with_qlora.cheapest_fix and "ZeRO" not in with_qlora.cheapest_fix


def test_no_preset_or_cpu_preset_means_no_verdict() -> None:
    for preset in (None, PRESETS["cpu-demo"]):
        estimate = estimate_memory(config_for(), preset, model_config=KNOWN["Llama-3-8B"])
        assert estimate.verdict == "unknown" and estimate.cheapest_fix == ""
        assert estimate.total_bytes > 16 * GIB


def test_model_config_is_read_from_disk_with_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(KNOWN["Qwen2.5-7B"]))
    assert read_model_config(str(tmp_path)) == KNOWN["Qwen2.5-7B"]
    from_disk = estimate_memory(config_for(str(tmp_path)), None)
    assert from_disk.num_params == shape_from_config(KNOWN["Qwen2.5-7B"]).num_params
    (tmp_path / "config.json").write_text("{broken")
    assert read_model_config(str(tmp_path)) is None
    assert read_model_config(str(tmp_path / "missing")) is None
    assert read_model_config("") is None


def test_multimodal_configs_use_their_text_config() -> None:
    wrapped = {"model_type": "llava", "text_config": KNOWN["Llama-2-7B"], "vision_config": {"hidden_size": 1024}}
    assert shape_from_config(wrapped).num_params == shape_from_config(KNOWN["Llama-2-7B"]).num_params
    assert shape_from_config({"model_type": "whatever"}) is None


@pytest.mark.parametrize(
    ("name", "display"),
    [
        ("meta-llama/Meta-Llama-3-8B-Instruct", "Llama-3-8B"),
        ("/models/Llama-3.1-8B", "Llama-3-8B"),
        ("/models/llama-3.3-70b-instruct/", "Llama-3-70B"),
        ("Qwen/Qwen2.5-14B-Instruct", "Qwen2.5-14B"),
        ("mistralai/Mistral-7B-v0.1", "Mistral-7B"),
        ("NousResearch/Llama-2-7b-hf", "Llama-2-7B"),
    ],
)
def test_known_models_by_name(name: str, display: str) -> None:
    found = known_model_config(name)
    assert found is not None and found[0] == display


def test_a_model_known_only_by_name_is_estimated_and_says_so() -> None:
    estimate = estimate_memory(config_for("Qwen/Qwen2.5-7B-Instruct"), PRESETS["rx7900xtx"])
    assert estimate.num_params == shape_from_config(KNOWN["Qwen2.5-7B"]).num_params
    assert any("known models" in a for a in estimate.assumptions)


def test_an_unknown_model_gives_no_verdict_and_a_count_alone_gives_one() -> None:
    unknown = estimate_memory(config_for("/nowhere/mystery"), PRESETS["rx7900xtx"])
    assert unknown.verdict == "unknown" and unknown.total_bytes == 0
    counted = estimate_memory(config_for("/nowhere/mystery"), PRESETS["rx7900xtx"], num_params=7_000_000_000)
    assert counted.num_params == 7_000_000_000 and counted.verdict in ("tight", "will not fit", "fits")
    assert 14 * GIB < counted.total_bytes < 20 * GIB


def test_the_demo_model_is_tiny() -> None:
    demo = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "head_dim": 16}
    estimate = estimate_memory(config_for(precision="fp32", cutoff_len=128, batch_size=4, flash_attn="disabled", gradient_checkpointing=False), PRESETS["cpu-demo"], model_config=demo)
    assert estimate.num_params < 200_000
    assert estimate.weights_bytes + estimate.trainable_bytes + estimate.activations_bytes < 64 * 1024**2


def test_a_cpu_run_counts_no_accelerator_runtime() -> None:
    demo = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512}
    on_cpu = estimate_memory(config_for(precision="fp32"), PRESETS["cpu-demo"], model_config=demo)
    on_gpu = estimate_memory(config_for(precision="fp32"), PRESETS["rx7900xtx"], model_config=demo)
    assert on_gpu.overhead_bytes - on_cpu.overhead_bytes == GIB


def test_the_cpu_demo_gets_an_estimate_not_a_config_json_error(demo_assets, tmp_path) -> None:
    # The CPU demo has no GPU memory to compare with: its model was read all the same, so the
    # page shows the figures and says what they mean, in the page's language.
    from backend import view
    from backend.service import RocBoard, demo_form

    estimate = RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports").estimate(demo_form())
    assert estimate.num_params > 0 and estimate.vram_bytes is None
    for locale, words in (("en", "no GPU memory to compare with"), ("zh-CN", "没有可比较的显存")):
        shown = view.estimate_markdown(estimate, locale)
        assert words in shown and "config.json" not in shown


def test_preference_stages_count_pairs_and_the_reference_model() -> None:
    from backend.config import parse_form, schema
    from backend.config.estimate import estimate_memory

    def estimate(**changes):
        config, findings = parse_form({**schema.form_defaults(), "model_path": "/models/Llama-3-8B", "dataset": "a", **changes})
        assert findings == []
        return estimate_memory(config, None)

    sft, dpo = estimate(), estimate(stage="dpo")
    # LoRA: the reference is the model with its adapters off (no second copy); pairs double the activations.
    assert dpo.weights_bytes == sft.weights_bytes
    assert dpo.activations_bytes == 2 * sft.activations_bytes
    full_sft, full_dpo = estimate(finetuning_type="full"), estimate(finetuning_type="full", stage="dpo")
    half = 2  # bf16
    assert full_dpo.weights_bytes - full_sft.weights_bytes == full_sft.num_params * half
    assert estimate(finetuning_type="full", stage="dpo", pref_loss="simpo").weights_bytes == full_sft.weights_bytes
    kto = estimate(finetuning_type="full", stage="kto")
    assert kto.weights_bytes == full_dpo.weights_bytes and kto.activations_bytes == full_sft.activations_bytes
    assert any("reference" in str(a) for a in full_dpo.assumptions)
