"""Rules over a typed run config: each a small named function returning findings.

Every rule names the form field it is about (the keys of `backend.config.FORM_DEFAULTS`),
says what is wrong in plain words and what to do; where the fix is mechanical, its `patch`
holds the form values to set. The YAML importer maps the same findings onto LLaMA-Factory's
key names (backend/config/yaml_import.py).

The rules read the disk (model and dataset directories) but never import torch,
transformers or llamafactory: the web process runs them on every form change.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import math
import os
import re
import shutil
import unicodedata
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from backend.config import NUMBER_RANGES, RunConfig, field_noun, range_finding, schema, shown
from backend.config.estimate import GIB, estimate_memory, read_model_config
from backend.config.path_keys import ReadPlaces, path_value_refusal
from backend.config.paths import NAME_MAX_BYTES, PATH_MAX_BYTES, default_data_roots, path_problem  # noqa: F401 (the limits re-exported)
from backend.config.presets import HardwarePreset
from backend.data import entry_check
from backend.data.entry_check import DATASET_INFO
from backend.findings import Finding
from backend.i18n import Message
from backend.i18n.errors import file_error, os_error
from backend.runs.artifacts import TOKENIZER_FILES

Rule = Callable[["_Context"], list[Finding]]

# --- limits, each with the reason it is where it is --------------------------------------------
# The range of every number is in backend/config/__init__.py NUMBER_RANGES (one table for the form,
# the import and the multi-GPU plan); these are the rules' own thresholds.
CUTOFF_MIN_SENSIBLE = 32  # a chat template alone takes ~20 tokens
DISK_FREE_MIN_BYTES = 2 * GIB  # checkpoints of a LoRA run of a 7B model are ~100 MB each; logs, merged copies
RUN_NAME_MAX_CHARS = 64
# `org/name` with nothing that makes it a filesystem path (no leading /, ., ~, no second /).
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json", "*.pth", "*.pt", "*.gguf")


def _quoted(value: Any) -> str:
    """A value the user typed, quoted in a message the way Python writes it: 'my run'."""
    return repr(value)


class _Context:
    """What the rules look at: the config, the preset, the machine's facts."""

    def __init__(
        self,
        config: RunConfig,
        preset: HardwarePreset | None,
        offline: bool,
        bnb_available: Callable[[], bool],
        read_roots: Sequence[Path] | None = None,
    ):
        self.config = config
        self.preset = preset
        self.offline = offline
        self.bnb_available = bnb_available
        self.read_roots = tuple(read_roots) if read_roots is not None else tuple(default_data_roots())

    @property
    def read_places(self) -> ReadPlaces:
        """Where a key of Other keys may read from: the data roots and the model folder."""
        return ReadPlaces.of(self.read_roots, self.model_dir)

    @property
    def use_cpu(self) -> bool:
        return self.config.hardware.use_cpu or (self.preset is not None and self.preset.use_cpu)

    @property
    def model_dir(self) -> Path | None:
        """The model directory when it exists and holds a config.json."""
        path = self.config.model.model_name_or_path
        try:
            if path and not path_problem(path) and (Path(path).expanduser() / "config.json").is_file():
                return Path(path).expanduser()
        except OSError:
            pass
        return None


# --- run name -------------------------------------------------------------------------------


def run_name_ok(name: str) -> bool:
    """Letters and digits of any language ("水果", "café", "नमस्ते" with its vowel signs),
    '_', '.' and '-', at most 64, a letter, digit or '_' first (not "." or "-": hidden, or
    read as an option). No space, no punctuation, no control or format character (a bidi
    override would make the name read as another): the name is shown on every page and
    typed on command lines. The run's folder is not the name itself: RunStore.new_run_id
    keeps it ASCII."""
    if not name or len(name) > RUN_NAME_MAX_CHARS or not (name[0].isalnum() or name[0] == "_"):
        return False
    return all(c.isalnum() or c in "._-" or unicodedata.category(c).startswith("M") for c in name)


def rule_run_name(ctx: _Context) -> list[Finding]:
    name = ctx.config.run_name
    if name == "":  # the launcher names unnamed runs itself
        return []
    if run_name_ok(name):
        return []
    safe = re.sub(r"[^\w.-]+", "-", name).lstrip(".-")[:RUN_NAME_MAX_CHARS] or "run"
    safe = safe if run_name_ok(safe) else "run"
    return [
        Finding.of("run_name", "run-name-unsafe", patch={"run_name": safe}, name=_quoted(name), safe=_quoted(safe))
    ]


# --- numbers --------------------------------------------------------------------------------


def rule_number_ranges(ctx: _Context) -> list[Finding]:
    """Every number inside its NUMBER_RANGES range. parse_form already refuses values
    outside them; this holds for a RunConfig built in code (a test, a resumed run's form)."""
    findings: list[Finding] = []
    # The schema's numbers (each with its range and its name in messages): no second table.
    for form_field in schema.run_fields():
        if form_field.range is None or form_field.kind not in ("int", "float", "optional_int"):
            continue
        name, what = form_field.name, field_noun(form_field.name)
        value = ctx.config.value(name)
        if value is None and form_field.kind == "optional_int":  # empty: every sample
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
            findings.append(Finding.of(name, "not-a-number", message="not-a-number-float", patch={name: NUMBER_RANGES[name].example}, field=what, value=shown(value)))
            continue
        finding = range_finding(name, value, what)
        if finding is not None:
            findings.append(finding)
    return findings


def rule_steps_and_epochs(ctx: _Context) -> list[Finding]:
    training = ctx.config.training
    epochs = training.num_train_epochs
    if training.max_steps == 0 and isinstance(epochs, (int, float)) and epochs == 0:
        return [Finding.of("num_train_epochs", "epochs-not-positive", patch={"num_train_epochs": 3.0}, value=f"{epochs:g}")]
    return []


def rule_cutoff(ctx: _Context) -> list[Finding]:
    cutoff = ctx.config.data.cutoff_len
    if not NUMBER_RANGES["cutoff_len"].contains(cutoff):
        return []  # rule_number_ranges says so
    findings: list[Finding] = []
    if cutoff < CUTOFF_MIN_SENSIBLE:
        findings.append(Finding.of("cutoff_len", "cutoff-too-short", severity="warning", value=cutoff, minimum=CUTOFF_MIN_SENSIBLE))
    model_config = read_model_config(ctx.config.model.model_name_or_path)
    positions = model_config.get("max_position_embeddings") if model_config else None
    if isinstance(positions, int) and not isinstance(positions, bool) and positions > 0 and cutoff > positions:
        findings.append(
            Finding.of("cutoff_len", "cutoff-beyond-context", severity="warning", patch={"cutoff_len": positions}, value=cutoff, context=positions)
        )
    return findings


# --- model ----------------------------------------------------------------------------------


def _unusable_path(key: str, raw: str, problem: str) -> Finding:
    """The model or dataset directory (by `key`) is no path the OS can look up."""
    message = "path-unusable" if key == "model_path" else "path-unusable-dataset"
    return Finding.of(key, "path-unusable", message=message, path=shown(raw, 80), problem=problem)


def rule_model_path(ctx: _Context) -> list[Finding]:
    raw = ctx.config.model.model_name_or_path
    if not raw:
        return [Finding.of("model_path", "model-path-missing")]
    problem = path_problem(raw)
    if problem:
        return [_unusable_path("model_path", raw, problem)]
    try:
        return _model_path_findings(ctx, raw)
    except (OSError, ValueError) as error:  # a race or a filesystem's own limit: still a finding
        return [_unusable_path("model_path", raw, os_error(error))]


def _model_path_findings(ctx: _Context, raw: str) -> list[Finding]:
    path = Path(raw).expanduser()
    if HUB_ID.match(raw) and not path.exists():
        if not ctx.offline:
            return []
        return [
            Finding.of("model_path", "model-hub-id-offline", model=_quoted(raw), hub_id=raw, name=raw.split("/")[-1])
        ]
    if not path.exists():
        return [Finding.of("model_path", "model-path-not-found", path=raw)]
    if not path.is_dir():
        return [Finding.of("model_path", "model-path-not-dir", path=raw)]
    config_file = path / "config.json"
    if not config_file.is_file():
        return [Finding.of("model_path", "model-no-config", path=raw)]
    try:
        json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return [Finding.of("model_path", "model-config-unreadable", file=str(config_file), error=file_error(error))]
    findings: list[Finding] = []
    if not any(next(path.glob(pattern), None) for pattern in WEIGHT_PATTERNS):
        findings.append(Finding.of("model_path", "model-no-weights", path=raw))
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        findings.append(Finding.of("model_path", "model-no-tokenizer", severity="warning", path=raw))
    return findings


@lru_cache(maxsize=1)
def known_templates() -> frozenset[str]:
    """LLaMA-Factory's template names, read from the installed data/template.py source text
    (no import), or the committed static list when the source cannot be found."""
    spec = importlib.util.find_spec("llamafactory")
    for location in (spec.submodule_search_locations or []) if spec else []:
        try:
            source = (Path(location) / "data" / "template.py").read_text(encoding="utf-8")
        except OSError:
            continue
        names = re.findall(r'^register_template\(\s*name\s*=\s*"([^"]+)"', source, flags=re.MULTILINE)
        if names:
            return frozenset(names)
    from backend.llama_factory.check import static_names

    return static_names().templates


def rule_template(ctx: _Context) -> list[Finding]:
    template = ctx.config.model.template
    names = known_templates()
    if template in names:
        return []
    close = difflib.get_close_matches(template, sorted(names), n=3, cutoff=0.6)
    # A near-certain spelling fix is mechanical; a choice between several is not.
    sure = difflib.get_close_matches(template, sorted(names), n=1, cutoff=0.85)
    patch = {"template": sure[0]} if sure else {}
    if close:
        return [Finding.of("template", "template-unknown", patch=patch, template=_quoted(template), suggestions=" or ".join(close))]
    return [Finding.of("template", "template-unknown", message="template-unknown-no-match", patch=patch, template=_quoted(template))]


# --- data -----------------------------------------------------------------------------------


# LLaMA-Factory's mark for a dataset folder on the Hugging Face hub (`dataset_dir: REMOTE:org/repo`).
REMOTE_PREFIX = "REMOTE:"


def rule_dataset(ctx: _Context) -> list[Finding]:
    data = ctx.config.data
    if not data.dataset_dir:
        return [Finding.of("dataset_dir", "dataset-dir-missing")]
    if data.dataset_dir.startswith(REMOTE_PREFIX):
        # LLaMA-Factory downloads a hub folder's dataset_info.json (and the data) at start.
        folder = data.dataset_dir[len(REMOTE_PREFIX) :]
        if ctx.offline:
            return [Finding.of("dataset_dir", "dataset-dir-remote-offline", folder=_quoted(folder))]
        return [Finding.of("dataset_dir", "dataset-dir-remote", severity="warning", folder=_quoted(folder))]
    problem = path_problem(data.dataset_dir)
    if problem:
        return [_unusable_path("dataset_dir", data.dataset_dir, problem)]
    try:
        return _dataset_findings(ctx, data)
    except (OSError, ValueError) as error:
        return [_unusable_path("dataset_dir", data.dataset_dir, os_error(error))]


def _dataset_findings(ctx: _Context, data: Any) -> list[Finding]:
    directory = Path(data.dataset_dir).expanduser()
    if not directory.is_dir():
        return [Finding.of("dataset_dir", "dataset-dir-not-found", path=data.dataset_dir)]
    info_path = directory / DATASET_INFO
    if not info_path.is_file():
        return [Finding.of("dataset_dir", "dataset-info-missing", path=data.dataset_dir)]
    info, error = entry_check.read_info(info_path)
    if error or not isinstance(info, dict):
        return [Finding.of("dataset_dir", "dataset-info-unreadable", file=str(info_path), error=error or Message("file-error.not-mapping"))]
    if not data.datasets:
        names = ", ".join(sorted(info)[:8])
        return [Finding.of("dataset", "dataset-missing", names=names)]
    findings: list[Finding] = []
    for name in data.datasets:
        findings += _dataset_entry(ctx, directory, info, name)
    return findings


def _dataset_entry(ctx: _Context, directory: Path, info: dict[str, Any], name: str) -> list[Finding]:
    if name not in info:
        close = difflib.get_close_matches(name, sorted(info), n=1, cutoff=0.6)
        names = ", ".join(sorted(info)[:8])
        where = str(directory / DATASET_INFO)
        if close:
            return [Finding.of("dataset", "dataset-not-in-info", name=_quoted(name), file=where, suggestion=_quoted(close[0]), names=names)]
        return [Finding.of("dataset", "dataset-not-in-info", message="dataset-not-in-info-no-match", name=_quoted(name), file=where, names=names)]
    entry = info[name]
    if not isinstance(entry, dict):
        return [Finding.of("dataset", "dataset-entry-bad", name=_quoted(name))]
    hub = next((entry[k] for k in ("hf_hub_url", "ms_hub_url", "om_hub_url", "script_url") if k in entry), None)
    if hub is not None:
        if ctx.offline:
            return [Finding.of("dataset", "dataset-hub-offline", name=_quoted(name), hub=str(hub), directory=str(directory))]
        return []
    file_name = entry.get("file_name")
    if not isinstance(file_name, str) or not file_name:
        return [Finding.of("dataset", "dataset-entry-bad", message="dataset-entry-no-file-name", name=_quoted(name))]
    path = directory / file_name
    if path.is_dir():
        if not any(path.iterdir()):
            return [Finding.of("dataset", "dataset-file-missing", message="dataset-folder-empty", path=str(path), name=_quoted(name))]
        return []
    if not path.is_file():
        return [Finding.of("dataset", "dataset-file-missing", name=_quoted(name), path=str(path))]
    problem = entry_check.file_problem(path)
    if problem:
        return [Finding.of("dataset", "dataset-file-unreadable", path=str(path), problem=problem)]
    found = entry_check.columns_problem(path, entry)
    if found is None:
        return []
    message, params = found
    values: dict[str, Any] = dict(params)
    return [Finding.of("dataset", "dataset-columns-missing", message=message, name=_quoted(name), file=str(directory / DATASET_INFO), path=str(path), **values)]


# --- the stage against its datasets ----------------------------------------------------------
# LLaMA-Factory reads a dataset by the stage (llamafactory/data/loader.py _get_merged_dataset):
# rm and dpo read pairs (`"ranking": true`: chosen / rejected), every other stage refuses a
# ranking dataset ("The dataset is not applicable in the current training stage." after the
# model has loaded); kto reads one answer and a `kto_tag` column (true: a good answer, false: a
# bad one; llamafactory/data/converter.py); pt trains on the text of the `prompt` column only.
STAGES_READING_PAIRS = frozenset({"rm", "dpo"})


def rule_stage_dataset(ctx: _Context) -> list[Finding]:
    """The stage can read each dataset: pairs for rm / dpo, no pairs for the others, a kto_tag
    for kto, a text column for pt. Datasets rule_dataset finds no entry for are its to report."""
    data, stage = ctx.config.data, ctx.config.method.stage
    if not data.dataset_dir or not data.datasets or data.dataset_dir.startswith(REMOTE_PREFIX) or path_problem(data.dataset_dir):
        return []
    try:
        info_path = Path(data.dataset_dir).expanduser() / DATASET_INFO
        if not info_path.is_file():
            return []
        info, error = entry_check.read_info(info_path)
    except (OSError, ValueError):
        return []
    if error or not isinstance(info, dict):
        return []
    findings: list[Finding] = []
    for name in data.datasets:
        entry = info.get(name)
        if isinstance(entry, dict):
            findings += _stage_entry(stage, name, entry, str(info_path))
    return findings


def _stage_entry(stage: str, name: str, entry: dict[str, Any], file: str) -> list[Finding]:
    ranking = entry.get("ranking") is True
    declared = entry.get("columns")
    columns: dict[str, Any] = declared if isinstance(declared, dict) else {}
    if stage in STAGES_READING_PAIRS and not ranking:
        return [Finding.of("dataset", "stage-needs-ranking", stage=stage, name=_quoted(name), file=file)]
    if stage not in STAGES_READING_PAIRS and ranking:
        message = "stage-sft-on-ranking" if stage == "sft" else "stage-refuses-ranking"
        return [Finding.of("dataset", "stage-refuses-ranking", message=message, stage=stage, name=_quoted(name), file=file)]
    if stage == "kto" and not (isinstance(columns.get("kto_tag"), str) and columns["kto_tag"]):
        return [Finding.of("dataset", "kto-needs-tag", name=_quoted(name), file=file)]
    text_column = entry.get("formatting", "alpaca") == "alpaca" and isinstance(columns.get("prompt"), str) and columns["prompt"] and not columns.get("response")
    if stage == "pt" and not text_column:
        # It runs (on the alpaca default `instruction`, or a conversation's first turn), but
        # trains on that text alone: the answers are never seen.
        return [Finding.of("dataset", "pt-no-text-column", severity="warning", name=_quoted(name), file=file)]
    return []


# --- holding data out for evaluation ----------------------------------------------------------
# LLaMA-Factory splits `val_size` off the (merged) training data (llamafactory/data/data_utils.py
# split_dataset): a float below 1 is a fraction, a number above 1 a count (`int(val_size)`);
# exactly 1 is the fraction 1.0, which `train_test_split` refuses. transformers evaluates by
# `eval_strategy`; without an eval set it raises at start ("Please make sure eval_dataset be
# provided or val_size >1e-6", LLaMA-Factory's parser, once the model is loading).


# LLaMA-Factory's own lines for what rule_evaluation foresees (hparams/parser.py, data_args.py):
# quoted beside the finding, never inside its translated sentence.
NO_EVAL_DATA_LINE = "Please make sure eval_dataset be provided or val_size >1e-6"
VAL_SIZE_AND_EVAL_DATASET_LINE = "Cannot specify `val_size` if `eval_dataset` is not None."
STREAMING_VAL_SIZE_LINE = "Streaming mode should have an integer val size."


def _other_key(ctx: _Context, name: str) -> Any:
    return dict(ctx.config.value("other_keys") or ()).get(name)


def rule_evaluation(ctx: _Context) -> list[Finding]:
    val_size = ctx.config.value("val_size")
    strategy = ctx.config.value("eval_strategy")
    if not isinstance(val_size, (int, float)) or isinstance(val_size, bool) or not math.isfinite(val_size) or val_size < 0:
        return []  # rule_number_ranges says so
    eval_dataset = _other_key(ctx, "eval_dataset")
    findings: list[Finding] = []
    if val_size > 0 and eval_dataset:
        findings.append(Finding.of("val_size", "val-size-and-eval-dataset", patch={"val_size": 0.0}, quote=VAL_SIZE_AND_EVAL_DATASET_LINE, value=shown(val_size)))
    if strategy in ("steps", "epoch") and val_size == 0 and not eval_dataset:
        findings.append(Finding.of("eval_strategy", "eval-without-data", patch={"val_size": 0.1}, quote=NO_EVAL_DATA_LINE, strategy=strategy))
    if val_size > 0 and strategy == "no":
        findings.append(Finding.of("eval_strategy", "val-size-not-evaluated", severity="warning", patch={"eval_strategy": "steps"}, value=shown(val_size)))
    if val_size == 1:
        findings.append(Finding.of("val_size", "val-size-one", patch={"val_size": 0.1}))
    elif val_size > 1 and val_size != int(val_size):
        findings.append(Finding.of("val_size", "val-size-count-whole", patch={"val_size": int(val_size)}, value=shown(val_size), count=int(val_size)))
    if 0 < val_size < 1 and _other_key(ctx, "streaming") is True:
        findings.append(Finding.of("val_size", "val-size-fraction-streaming", patch={"val_size": 100}, quote=STREAMING_VAL_SIZE_LINE, value=shown(val_size)))
    if val_size >= 2 and val_size == int(val_size):
        rows = _dataset_rows(ctx)
        if rows is not None and int(val_size) >= rows:
            findings.append(Finding.of("val_size", "val-size-beyond-rows", patch={"val_size": 0.1}, count=int(val_size), rows=rows))
    return findings


def _dataset_rows(ctx: _Context) -> int | None:
    """The rows LLaMA-Factory trains on (each dataset's, capped by its num_samples and by
    max_samples, added up), when every dataset is a local .json / .jsonl file small enough to
    count; else None (unknown)."""
    data = ctx.config.data
    if not data.dataset_dir or not data.datasets or data.dataset_dir.startswith(REMOTE_PREFIX) or path_problem(data.dataset_dir):
        return None
    try:
        directory = Path(data.dataset_dir).expanduser()
        info_path = directory / DATASET_INFO
        if not info_path.is_file():
            return None
        info, error = entry_check.read_info(info_path)
        if error or not isinstance(info, dict):
            return None
        total = 0
        for name in data.datasets:
            entry = info.get(name)
            file_name = entry.get("file_name") if isinstance(entry, dict) else None
            if not isinstance(file_name, str) or not file_name:
                return None
            path = directory / file_name
            if not path.is_file():
                return None
            rows = entry_check.row_count(path)
            if rows is None:
                return None
            for cap in (entry.get("num_samples") if isinstance(entry, dict) else None, data.max_samples):
                if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0:
                    rows = min(rows, cap)
            total += rows
        return total
    except (OSError, ValueError):
        return None


# --- experiment trackers -----------------------------------------------------------------------
# report_to -> the packages transformers' callback imports (schema.TRACKER_PACKAGES), looked up
# with find_spec: importing wandb or mlflow costs seconds and the web process runs checks often.
TRACKER_PACKAGES = schema.TRACKER_PACKAGES
# Trackers that would upload to a server with an API key: a child never gets one
# (backend/security/child_env.py TRACKER_OFFLINE_ENV runs them offline), so a warning says where
# the logs are and how to upload them.
OFFLINE_TRACKERS: dict[str, str] = {"wandb": "wandb sync wandb/offline-run-*", "swanlab": "swanlab sync swanlog/run-*"}


def tracker_installed(tracker: str) -> bool:
    return any(importlib.util.find_spec(package) is not None for package in TRACKER_PACKAGES.get(tracker, ()))


def rule_report_to(ctx: _Context) -> list[Finding]:
    tracker = ctx.config.value("report_to")
    if tracker not in TRACKER_PACKAGES:
        return []
    if not tracker_installed(tracker):
        return [Finding.of("report_to", "report-to-not-installed", patch={"report_to": "none"}, tracker=tracker, package=TRACKER_PACKAGES[tracker][0])]
    if tracker in OFFLINE_TRACKERS:
        return [Finding.of("report_to", "report-to-offline", severity="warning", tracker=tracker, sync=OFFLINE_TRACKERS[tracker])]
    return []


# --- precision, attention, quantization -------------------------------------------------------


def rule_precision_on_preset(ctx: _Context) -> list[Finding]:
    preset, precision = ctx.preset, ctx.config.precision.precision
    if preset is None or precision != "bf16" or preset.bf16:
        return []
    fallback = "fp32" if preset.use_cpu else "fp16"
    return [
        Finding.of("precision", "bf16-unsupported", patch={"precision": fallback}, preset=preset.label, precision=fallback)
    ]


def rule_flash_attn(ctx: _Context) -> list[Finding]:
    choice = ctx.config.precision.flash_attn
    if choice != "fa2":
        return []
    if ctx.use_cpu:
        return [Finding.of("flash_attn", "fa2-on-cpu", patch={"flash_attn": "sdpa"})]
    if importlib.util.find_spec("flash_attn") is None:
        return [Finding.of("flash_attn", "fa2-not-installed", severity="warning", patch={"flash_attn": "sdpa"})]
    return []


def rule_quantization(ctx: _Context) -> list[Finding]:
    bits = ctx.config.method.quantization_bit
    if bits is None:
        return []
    if ctx.config.method.finetuning_type != "lora":
        return [Finding.of("quantization_bit", "qlora-needs-lora", patch={"quantization_bit": "none"}, bits=bits, finetuning_type=ctx.config.method.finetuning_type)]
    if ctx.use_cpu:
        return [Finding.of("quantization_bit", "qlora-on-cpu", patch={"quantization_bit": "none"})]
    if ctx.preset is not None and bits not in ctx.preset.qlora_bits:
        offered = ", ".join(map(str, ctx.preset.qlora_bits)) or "none"
        message = "qlora-not-offered" if ctx.preset.qlora_bits else "qlora-not-offered-any"
        return [Finding.of("quantization_bit", "qlora-not-offered", message=message, patch={"quantization_bit": "none"}, preset=ctx.preset.label, bits=bits, offered=offered)]
    if not ctx.bnb_available():
        return [Finding.of("quantization_bit", "qlora-no-bitsandbytes", bits=bits)]
    return []


def rule_memory(ctx: _Context) -> list[Finding]:
    preset = ctx.preset
    if preset is None or preset.vram_gb <= 0:
        return []
    estimate = estimate_memory(ctx.config, preset)
    if estimate.verdict != "will not fit":
        return []
    return [
        Finding.of(
            "memory",
            "memory-will-not-fit",
            severity="warning",
            estimate=f"{estimate.total_bytes / GIB:.1f}",
            preset=preset.label,
            vram=f"{(estimate.vram_bytes or 0) / GIB:.0f}",  # set: "will not fit" compares with it
            # The estimator composes its fix from its cheapest changes (backend/config/estimate.py).
            fix=estimate.cheapest_fix,
        )
    ]


def rule_path_keys(ctx: _Context) -> list[Finding]:
    """Keys of Other keys that name a path (backend/config/path_keys.py): one that writes stays
    inside the run, one that reads stays inside the data roots, the run and the model folder.
    `deepspeed` is read by deepspeed_findings, under the same rule."""
    findings: list[Finding] = []
    places: ReadPlaces | None = None
    for name, value in ctx.config.value("other_keys") or ():
        if name == "deepspeed" or not isinstance(value, str):
            continue
        places = places or ctx.read_places
        refusal = path_value_refusal(name, value, places)
        if refusal is not None:
            findings.append(Finding.of("other_keys", refusal.message, **refusal.params))
    return findings


RULES: tuple[Rule, ...] = (
    rule_run_name,
    rule_model_path,
    rule_template,
    rule_dataset,
    rule_stage_dataset,
    rule_number_ranges,
    rule_steps_and_epochs,
    rule_evaluation,
    rule_report_to,
    rule_cutoff,
    rule_precision_on_preset,
    rule_flash_attn,
    rule_quantization,
    rule_memory,
    rule_path_keys,
)


def bitsandbytes_installed() -> bool:
    # find_spec, not import: importing bitsandbytes loads torch and probes the GPU.
    return importlib.util.find_spec("bitsandbytes") is not None


def check_config(
    config: RunConfig,
    preset: HardwarePreset | None,
    *,
    offline: bool = True,
    bnb_available: Callable[[], bool] | None = None,
    read_roots: Sequence[Path] | None = None,
) -> list[Finding]:
    """Every finding of every rule, problems first. `read_roots`: where a path in Other keys may
    be read from besides the run and the model folder (default: the default data roots)."""
    ctx = _Context(config, preset, offline, bnb_available or bitsandbytes_installed, read_roots)
    findings = [finding for rule in RULES for finding in rule(ctx)]
    return sorted(findings, key=lambda f: f.severity != "problem")


def read_places(config: RunConfig, read_roots: Sequence[Path] | None = None) -> ReadPlaces:
    """Where a key of `config`'s Other keys may read a file: `read_roots` (default: the default
    data roots) and the config's model folder."""
    return _Context(config, None, True, bitsandbytes_installed, read_roots).read_places


def check_output_dir(runs_dir: Path) -> list[Finding]:
    """Whether runs can be written under `runs_dir` (which need not exist yet: it is not created here)."""
    runs_dir = Path(runs_dir).expanduser()
    if runs_dir.exists() and not runs_dir.is_dir():
        return [Finding.of("runs_dir", "runs-dir-not-dir", path=str(runs_dir))]
    existing = runs_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return [Finding.of("runs_dir", "runs-dir-not-dir", message="runs-dir-parent-is-file", path=str(runs_dir), existing=str(existing))]
    if not os.access(existing, os.W_OK | os.X_OK):
        if existing == runs_dir:
            return [Finding.of("runs_dir", "runs-dir-not-writable", path=str(runs_dir))]
        return [Finding.of("runs_dir", "runs-dir-not-writable", message="runs-dir-parent-not-writable", path=str(runs_dir), parent=str(existing))]
    free = shutil.disk_usage(existing).free
    if free < DISK_FREE_MIN_BYTES:
        return [Finding.of("runs_dir", "runs-dir-low-space", severity="warning", free=f"{free / GIB:.1f}", path=str(existing))]
    return []


__all__ = ["RULES", "TRACKER_PACKAGES", "bitsandbytes_installed", "check_config", "check_output_dir", "known_templates", "read_places", "tracker_installed"]
