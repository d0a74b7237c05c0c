"""How much accelerator memory a run will need, before it is started.

An estimate from first principles, per device, in bytes:
- weights: the model as it sits in memory (16-bit, fp32 for full fine-tuning, 4/8-bit for
  QLoRA's quantized linear layers), plus the 16-bit copies autocast keeps of fp32 weights;
- trainable: the fp32 copy of the trainable parameters (LoRA adapters, the unfrozen layers),
  their gradients and AdamW's two fp32 moments;
- activations: what the backward pass keeps for one micro-batch (per-layer inputs with
  gradient checkpointing, every layer's intermediates without; the attention matrix with
  eager attention; the fp32 logits the loss works on);
- overhead: the runtime context, kernels and workspaces, and allocator fragmentation.

Checked against LLaMA-Factory's published hardware table (tests/test_estimate.py,
docs/estimate.md). It reads only config.json (with json, no transformers), so the web process
can call it on every form change.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

from backend.config import RunConfig, schema
from backend.config.presets import HardwarePreset
from backend.i18n import Joined, Message

GIB = 1024**3  # GPU memory is sold in binary units: a "24 GB" card holds 24 GiB

Verdict = Literal["fits", "tight", "will not fit", "unknown"]

# Below this share of the device the run fits; up to the whole device it is "tight" (the
# estimate is good to about ±20%, docs/estimate.md); above it, it will not fit.
FITS_SHARE = 0.85
# The runtime itself: HIP/CUDA context, loaded kernels, BLAS workspaces (measured figures are
# 0.5-1.5 GiB on MI300X and consumer cards alike).
RUNTIME_BYTES = 1 * GIB
# Caching-allocator fragmentation, as a share of everything else.
FRAGMENTATION_SHARE = 0.05
ADAMW_STATE_BYTES = 8  # two fp32 moments per trainable parameter
FP32 = 4
# LLaMA-Factory's freeze tuning trains the last `freeze_trainable_layers` layers (default 2).
FREEZE_TRAINABLE_LAYERS = 2
# bitsandbytes NF4 with double quantization: 4 bits plus ~0.127 bits of scales per weight.
QUANT_BYTES_PER_PARAM = {4: 0.5 + 0.127 / 8, 8: 1.0 + 4 / 4096}


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a decoder-only transformer that decide its size."""

    hidden_size: int
    intermediate_size: int  # of one MLP (one expert's, in a mixture of experts)
    num_layers: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int
    tie_embeddings: bool
    head_dim: int
    qkv_bias: bool = False
    num_experts: int = 1  # 1 = dense
    experts_per_token: int = 1
    shared_expert_size: int = 0  # intermediate size of an always-on shared expert (Qwen MoE)
    max_positions: int | None = None
    name: str = ""

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def attention_params(self) -> int:
        h = self.hidden_size
        bias = (self.q_dim + 2 * self.kv_dim) if self.qkv_bias else 0
        return h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h + bias

    def mlp_params(self) -> int:
        h = self.hidden_size
        experts = self.num_experts * 3 * h * self.intermediate_size
        router = h * self.num_experts if self.num_experts > 1 else 0
        shared = 3 * h * self.shared_expert_size + (h if self.shared_expert_size else 0)
        return experts + router + shared

    def layer_params(self) -> int:
        return self.attention_params() + self.mlp_params() + 2 * self.hidden_size  # two norms

    def embedding_params(self) -> int:
        """Input embeddings and the output head: kept in 16-bit by QLoRA."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_embeddings else 2)

    def linear_params(self) -> int:
        """Weights of the decoder layers' linear projections: what bitsandbytes quantizes."""
        return self.num_layers * (self.attention_params() + self.mlp_params())

    @property
    def num_params(self) -> int:
        return self.num_layers * self.layer_params() + self.embedding_params() + self.hidden_size

    def lora_params(self, rank: int) -> int:
        """LoRA adapters on every linear layer (lora_target: all): rank x (in + out) each."""
        h, i = self.hidden_size, self.intermediate_size
        attention = (h + self.q_dim) + 2 * (h + self.kv_dim) + (self.q_dim + h)
        mlp = self.num_experts * 3 * (h + i) + (3 * (h + self.shared_expert_size) if self.shared_expert_size else 0)
        return self.num_layers * rank * (attention + mlp)

    def active_intermediate(self) -> int:
        """MLP width one token passes through (top-k experts plus any shared expert)."""
        return self.experts_per_token * self.intermediate_size + self.shared_expert_size


def shape_from_config(config: dict[str, Any], name: str = "") -> ModelShape | None:
    """The shape of a model from its config.json contents; None when it is not a decoder we know."""
    if isinstance(config.get("text_config"), dict) and "hidden_size" not in config:
        config = {**config["text_config"], "tie_word_embeddings": config.get("tie_word_embeddings", config["text_config"].get("tie_word_embeddings"))}

    def first(*keys: str, default: Any = None) -> Any:
        for key in keys:
            if isinstance(config.get(key), (int, float)) and not isinstance(config.get(key), bool):
                return int(config[key])
        return default

    hidden = first("hidden_size", "n_embd", "d_model")
    layers = first("num_hidden_layers", "n_layer", "num_layers")
    heads = first("num_attention_heads", "n_head")
    vocab = first("vocab_size")
    if not all(isinstance(v, int) and v > 0 for v in (hidden, layers, heads, vocab)):
        return None
    experts = first("num_local_experts", "num_experts", "n_routed_experts", default=1) or 1
    intermediate = first("moe_intermediate_size", default=None) if experts > 1 else None
    intermediate = intermediate or first("intermediate_size", "ffn_dim", "n_inner", default=4 * hidden)
    model_type = str(config.get("model_type", ""))
    return ModelShape(
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=first("num_key_value_heads", "num_kv_heads", default=heads),
        vocab_size=vocab,
        tie_embeddings=bool(config.get("tie_word_embeddings", False)),
        head_dim=first("head_dim", default=hidden // heads),
        qkv_bias=bool(config.get("attention_bias", False)) or model_type in ("qwen2", "qwen2_moe"),
        num_experts=experts,
        experts_per_token=first("num_experts_per_tok", "moe_top_k", default=1) if experts > 1 else 1,
        shared_expert_size=first("shared_expert_intermediate_size", default=0) if experts > 1 else 0,
        max_positions=first("max_position_embeddings", "n_positions", "max_sequence_length"),
        name=name or str(config.get("_name_or_path", "")),
    )


def read_model_config(model_path: str) -> dict | None:
    """The model directory's config.json as a dict (json only); None when it is not there."""
    if not model_path:
        return None
    path = Path(model_path).expanduser() / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _llama(hidden: int, inter: int, layers: int, heads: int, kv: int, vocab: int, tie: bool = False, positions: int = 8192, **extra: Any) -> dict[str, Any]:
    return {
        "model_type": extra.pop("model_type", "llama"),
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "vocab_size": vocab,
        "tie_word_embeddings": tie,
        "max_position_embeddings": positions,
        **extra,
    }


# Shapes of well-known models, from their published config.json files, for when the model is
# named but not on disk (a hub id, or a path on the training machine). Matched on the last path
# component, case-insensitive; the published parameter counts are in tests/test_estimate.py.
KNOWN_MODELS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("Llama-2-7B", r"llama-?2-7b", _llama(4096, 11008, 32, 32, 32, 32000, positions=4096)),
    ("Llama-2-13B", r"llama-?2-13b", _llama(5120, 13824, 40, 40, 40, 32000, positions=4096)),
    ("Llama-2-70B", r"llama-?2-70b", _llama(8192, 28672, 80, 64, 8, 32000, positions=4096)),
    ("LLaMA-30B", r"llama-30b", _llama(6656, 17920, 60, 52, 52, 32000, positions=2048)),
    ("Llama-3-8B", r"llama-?3(\.1)?-8b", _llama(4096, 14336, 32, 32, 8, 128256)),
    ("Llama-3-70B", r"llama-?3(\.[13])?-70b", _llama(8192, 28672, 80, 64, 8, 128256)),
    ("Llama-3.2-1B", r"llama-?3\.2-1b", _llama(2048, 8192, 16, 32, 8, 128256, tie=True, head_dim=64)),
    ("Llama-3.2-3B", r"llama-?3\.2-3b", _llama(3072, 8192, 28, 24, 8, 128256, tie=True, head_dim=128)),
    ("Mistral-7B", r"mistral-7b", _llama(4096, 14336, 32, 32, 8, 32768, positions=32768, model_type="mistral")),
    ("Mixtral-8x7B", r"mixtral-8x7b", _llama(4096, 14336, 32, 32, 8, 32000, positions=32768, model_type="mixtral", num_local_experts=8, num_experts_per_tok=2)),
    ("Qwen2.5-0.5B", r"qwen2\.5-0\.5b", _llama(896, 4864, 24, 14, 2, 151936, tie=True, positions=32768, model_type="qwen2")),
    ("Qwen2.5-1.5B", r"qwen2\.5-1\.5b", _llama(1536, 8960, 28, 12, 2, 151936, tie=True, positions=32768, model_type="qwen2")),
    ("Qwen2.5-3B", r"qwen2\.5-3b", _llama(2048, 11008, 36, 16, 2, 151936, tie=True, positions=32768, model_type="qwen2")),
    ("Qwen2.5-7B", r"qwen2\.5-7b", _llama(3584, 18944, 28, 28, 4, 152064, positions=32768, model_type="qwen2")),
    ("Qwen2.5-14B", r"qwen2\.5-14b", _llama(5120, 13824, 48, 40, 8, 152064, positions=32768, model_type="qwen2")),
    ("Qwen2.5-32B", r"qwen2\.5-32b", _llama(5120, 27648, 64, 40, 8, 152064, positions=32768, model_type="qwen2")),
    ("Qwen2.5-72B", r"qwen2\.5-72b", _llama(8192, 29568, 80, 64, 8, 152064, positions=32768, model_type="qwen2")),
)


def known_model_config(model_name_or_path: str) -> tuple[str, dict[str, Any]] | None:
    """(display name, config) of a well-known model named by `model_name_or_path`, if any."""
    last = model_name_or_path.rstrip("/").rsplit("/", 1)[-1].lower().replace("_", "-")
    last = re.sub(r"^meta-", "", last)
    for display, pattern, config in KNOWN_MODELS:
        if re.match(pattern + r"($|[-.])", last):
            return display, config
    return None


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per device for one run, by what they hold, and what to do when it is too much."""

    weights_bytes: int
    trainable_bytes: int  # fp32 trainable parameters + gradients + AdamW state
    activations_bytes: int
    overhead_bytes: int
    num_params: int | None  # of the whole model; None when unknown
    trainable_params: int
    vram_bytes: int | None  # of one device, from the preset; None when there is none to compare
    verdict: Verdict
    cheapest_fix: str  # "" when it fits (or nothing is known)
    devices: int = 1  # devices the weights and states are sharded over (ZeRO-3)
    model_name: str = ""  # where the shape came from: the config.json or a known model
    assumptions: tuple[str, ...] = ()

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.trainable_bytes + self.activations_bytes + self.overhead_bytes

    def breakdown(self) -> list[tuple[str, int]]:
        return [
            (Message("estimate.part.weights"), self.weights_bytes),
            (Message("estimate.part.trainable"), self.trainable_bytes),
            (Message("estimate.part.activations"), self.activations_bytes),
            (Message("estimate.part.overhead"), self.overhead_bytes),
        ]

    def summary(self) -> str:
        """One line: total, share of the device, verdict (a Message: English as a str)."""
        total = f"{self.total_bytes / GIB:.1f}"
        if not self.vram_bytes and self.total_bytes < GIB / 10:
            # A tiny model (the CPU demo's) would read "about 0.0 GiB": said in MiB instead.
            return Message("estimate.summary_mib", total=f"{max(1, round(self.total_bytes / 2**20))}")
        if self.vram_bytes:
            return Message("estimate.summary_device", total=total, vram=f"{self.vram_bytes / GIB:.0f}", verdict=Message(f"estimate.verdict.{self.verdict.replace(' ', '_')}"))
        return Message("estimate.summary", total=total)

@dataclass(frozen=True)
class _Knobs:
    """The settings the estimate depends on; the cheapest-fix search varies them. Those named
    like a form field (backend/config/schema.py) are read from the config by that name."""

    finetuning_type: str
    quantization_bit: int | None
    precision: str
    flash_attn: str
    batch_size: int
    cutoff_len: int
    gradient_checkpointing: bool
    lora_rank: int
    devices: int = 1
    on_cpu: bool = False  # no accelerator runtime to count
    # Preference training: rm and dpo put a chosen and a rejected sequence through the model
    # for each example (twice the activations); dpo (but for its orpo/simpo losses) and kto
    # keep a frozen reference model, a second copy of the weights unless the method is LoRA
    # (LLaMA-Factory's create_ref_model: LoRA uses the model with its adapters off).
    sequences_per_example: int = 1
    reference_model: bool = False


def _knobs(config: RunConfig, preset: HardwarePreset | None) -> _Knobs:
    # A knob named like a form field is that field's typed value (bounded by its schema range;
    # the cheapest fix's patches name it so too).
    form_names = {f.name for f in schema.run_fields()}
    return _Knobs(
        **{knob.name: config.value(knob.name) for knob in fields(_Knobs) if knob.name in form_names},
        on_cpu=config.hardware.use_cpu or (preset is not None and preset.use_cpu),
        sequences_per_example=2 if config.method.stage in ("rm", "dpo") else 1,
        reference_model=_reference_model(config) and config.method.finetuning_type != "lora",
    )


def _reference_model(config: RunConfig) -> bool:
    """Whether the stage trains against a frozen reference model (finetuning_args.use_ref_model
    for dpo; kto always)."""
    stage = config.method.stage
    return stage == "kto" or (stage == "dpo" and config.method.pref_loss not in ("orpo", "simpo"))


def _bytes(shape: ModelShape, knobs: _Knobs, num_params: int) -> tuple[int, int, int, int, int]:
    """(weights, trainable, activations, overhead, trainable_params) for one device."""
    half = 4 if knobs.precision == "fp32" else 2  # bytes of one weight/activation element
    autocast_copy = 0 if knobs.precision == "fp32" else 2  # 16-bit copies of fp32 weights
    scale = num_params / shape.num_params  # when the count came from elsewhere than the shape
    quantized = knobs.quantization_bit if knobs.finetuning_type == "lora" else None
    if knobs.finetuning_type == "full":
        trainable_params = num_params
        # LLaMA-Factory upcasts trainable parameters to fp32, so the weights are the fp32 copy.
        weights = num_params * (FP32 + autocast_copy)
        trainable = num_params * (FP32 + ADAMW_STATE_BYTES)  # gradients + moments
    elif knobs.finetuning_type == "freeze":
        trainable_params = int(min(FREEZE_TRAINABLE_LAYERS, shape.num_layers) * shape.layer_params() * scale)
        weights = (num_params - trainable_params) * half + trainable_params * autocast_copy
        trainable = trainable_params * (FP32 + FP32 + ADAMW_STATE_BYTES)
    else:
        trainable_params = int(shape.lora_params(knobs.lora_rank) * scale)
        if quantized:
            linear = int(shape.linear_params() * scale)
            weights = int(linear * QUANT_BYTES_PER_PARAM[quantized]) + (num_params - linear) * half
        else:
            weights = num_params * half
        trainable = trainable_params * (FP32 + FP32 + ADAMW_STATE_BYTES)
    if knobs.reference_model:  # frozen, in the compute precision (its quantization aside)
        weights += num_params * half
    if knobs.devices > 1:  # ZeRO-3 shards parameters, gradients and optimizer state
        weights //= knobs.devices
        trainable //= knobs.devices
    activations = _activation_bytes(shape, knobs, half)
    dynamic = weights + trainable + activations
    overhead = (0 if knobs.on_cpu else RUNTIME_BYTES) + int(FRAGMENTATION_SHARE * dynamic)
    return int(weights), int(trainable), int(activations), overhead, trainable_params


def _activation_bytes(shape: ModelShape, knobs: _Knobs, half: int) -> int:
    tokens = knobs.batch_size * knobs.sequences_per_example * knobs.cutoff_len
    h, kv = shape.hidden_size, shape.kv_dim
    # What one decoder layer keeps per token for the backward pass: the inputs of the norms,
    # projections and attention, q/k/v and the attention output, the MLP's gate, up and
    # activated values (SwiGLU), plus the fp32 internals of the two RMSNorms.
    per_token_layer = half * (8 * h + 2 * kv + 4 * shape.active_intermediate()) + FP32 * 2 * h
    eager_attention = 0
    if knobs.flash_attn == "disabled":  # eager: the seq x seq score matrix, softmaxed in fp32
        eager_attention = knobs.batch_size * knobs.sequences_per_example * shape.num_heads * knobs.cutoff_len**2 * (half + FP32)
    one_layer = tokens * per_token_layer + eager_attention
    # The loss works on fp32 logits: the 16-bit logits, their fp32 copy, log-softmax and its gradient.
    logits = tokens * shape.vocab_size * (half + 3 * FP32)
    if knobs.gradient_checkpointing:
        # Each layer's input is kept. The peak is either at the loss (logits alive) or while one
        # layer is recomputed and its gradients live; the logits are freed before that.
        return shape.num_layers * tokens * h * half + max(logits, 2 * one_layer)
    return shape.num_layers * one_layer + logits


def _verdict(total: int, vram_bytes: int | None) -> Verdict:
    if not vram_bytes:
        return "unknown"
    if total <= FITS_SHARE * vram_bytes:
        return "fits"
    return "tight" if total <= vram_bytes else "will not fit"


def estimate_memory(
    config: RunConfig,
    preset: HardwarePreset | None,
    model_config: dict | None = None,
    num_params: int | None = None,
) -> MemoryEstimate:
    """Memory per device for `config` on `preset`. The model's shape comes from
    `model_config`, else its config.json, else the list of well-known models; `num_params`
    overrides the parameter count the shape gives."""
    shape, assumptions = _find_shape(config, model_config, num_params)
    vram_bytes = int(preset.vram_gb * GIB) if preset is not None and preset.vram_gb > 0 else None
    knobs = _knobs(config, preset)
    if shape is None:
        return MemoryEstimate(0, 0, 0, 0, num_params, 0, vram_bytes, "unknown", "", model_name="", assumptions=assumptions)
    params = num_params or shape.num_params
    weights, trainable, activations, overhead, trainable_params = _bytes(shape, knobs, params)
    total = weights + trainable + activations + overhead
    verdict = _verdict(total, vram_bytes)
    fix = "" if verdict in ("fits", "unknown") else _cheapest_fix(shape, knobs, params, vram_bytes, preset, config)
    if knobs.quantization_bit and knobs.finetuning_type != "lora":
        assumptions += (Message("estimate.assume.quantization_lora_only"),)
    if knobs.sequences_per_example > 1:
        assumptions += (Message("estimate.assume.pairs", stage=config.method.stage),)
    if knobs.reference_model:
        assumptions += (Message("estimate.assume.reference_model", stage=config.method.stage),)
    return MemoryEstimate(
        weights_bytes=weights,
        trainable_bytes=trainable,
        activations_bytes=activations,
        overhead_bytes=overhead,
        num_params=params,
        trainable_params=trainable_params,
        vram_bytes=vram_bytes,
        verdict=verdict,
        cheapest_fix=fix,
        model_name=shape.name,
        assumptions=assumptions,
    )


def _find_shape(config: RunConfig, model_config: dict | None, num_params: int | None) -> tuple[ModelShape | None, tuple[str, ...]]:
    path = config.model.model_name_or_path
    if model_config is not None:
        shape = shape_from_config(model_config, name=path)
        if shape is not None:
            return shape, ()
    on_disk = read_model_config(path)
    if on_disk is not None:
        shape = shape_from_config(on_disk, name=path)
        if shape is not None:
            return shape, ()
    known = known_model_config(path)
    if known is not None:
        display, known_config = known
        return shape_from_config(known_config, name=display), (Message("estimate.assume.known_model", model=display),)
    if num_params:
        # Only a count: borrow the shape of the known model nearest in size for the activations.
        shapes = [shape_from_config(c, name=d) for d, _, c in KNOWN_MODELS]
        nearest = min((s for s in shapes if s is not None and s.num_experts == 1), key=lambda s: abs(math.log(s.num_params / num_params)))
        return replace(nearest, name=f"{num_params / 1e9:.1f}B (shaped like {nearest.name})"), (Message("estimate.assume.shaped_like", model=nearest.name),)
    return None, (Message("estimate.assume.unknown_model"),)


# What each change costs the user, for picking the cheapest fix: gradient checkpointing and
# fused attention change only speed; a smaller micro-batch with more accumulation keeps the
# effective batch; a shorter cutoff truncates data (per halving); LoRA and QLoRA change what is
# trained; ZeRO-3 needs every GPU of the node.
COST_CHECKPOINTING = 1
COST_SDPA = 1
COST_BATCH_ONE = 2
COST_CUTOFF_HALVING = 4
COST_LORA = 8
COST_QLORA = {8: 10, 4: 12}
COST_ZERO3 = 16
CUTOFF_FLOOR = 256  # below this most chat examples are cut


def _cheapest_fix(shape: ModelShape, knobs: _Knobs, params: int, vram_bytes: int | None, preset: HardwarePreset | None, config: RunConfig) -> str:
    """The cheapest combination of changes (by the costs above) after which the run fits."""
    assert vram_bytes
    budget = FITS_SHARE * vram_bytes
    Option = tuple[dict[str, Any], int, str]  # the text is a Message (a str: English as is)
    none: Option = ({}, 0, "")
    dimensions: list[list[Option]] = [[none], [none], [none], [none], [none], [none]]
    if not knobs.gradient_checkpointing:
        dimensions[0].append(({"gradient_checkpointing": True}, COST_CHECKPOINTING, Message("estimate.fix.checkpointing")))
    if knobs.flash_attn == "disabled":
        dimensions[1].append(({"flash_attn": "sdpa"}, COST_SDPA, Message("estimate.fix.sdpa")))
    if knobs.batch_size > 1:
        accumulation = config.training.gradient_accumulation_steps * knobs.batch_size
        dimensions[2].append(({"batch_size": 1}, COST_BATCH_ONE, Message("estimate.fix.batch_one", accumulation=accumulation)))
    cutoff, halvings = knobs.cutoff_len // 2, 1
    while cutoff >= CUTOFF_FLOOR:
        dimensions[3].append(({"cutoff_len": cutoff}, COST_CUTOFF_HALVING * halvings, Message("estimate.fix.cutoff", cutoff=cutoff)))
        cutoff, halvings = cutoff // 2, halvings + 1
    if knobs.finetuning_type != "lora":
        dimensions[4].append(({"finetuning_type": "lora", "quantization_bit": None}, COST_LORA, Message("estimate.fix.lora")))
    offered = preset.qlora_bits if preset is not None else (8, 4)
    for bits in (8, 4):
        if bits in offered and (knobs.quantization_bit or 16) > bits:
            dimensions[4].append(({"finetuning_type": "lora", "quantization_bit": bits}, COST_QLORA[bits], Message("estimate.fix.qlora", bits=bits)))
    per_node = preset.devices_per_node if preset is not None else 1
    if per_node > 1:
        dimensions[5].append(({"devices": per_node}, COST_ZERO3, Message("estimate.fix.zero3", gpus=per_node)))

    best: tuple[int, int, list[str]] | None = None
    for combination in itertools.product(*dimensions):
        changes = {k: v for option in combination for k, v in option[0].items()}
        if not changes:
            continue
        cost = sum(option[1] for option in combination)
        words = [option[2] for option in combination if option[2]]
        if best is not None and (cost, len(words)) >= best[:2]:
            continue
        if sum(_bytes(shape, replace(knobs, **changes), params)[:4]) <= budget:
            best = (cost, len(words), words)
    if best is None:
        if preset is not None:
            return Message("estimate.fix.none_fits", where=preset.label)
        return Message("estimate.fix.none_fits_here")
    # Shown after "Cheapest change that fits:", so it starts in lower case.
    return Message("estimate.fix.sentence", changes=Joined(best[2], "; "))


__all__ = [
    "KNOWN_MODELS",
    "MemoryEstimate",
    "ModelShape",
    "estimate_memory",
    "known_model_config",
    "read_model_config",
    "shape_from_config",
]
