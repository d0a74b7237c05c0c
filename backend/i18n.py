"""RocBoard's words in English and Simplified Chinese: one catalogue, keyed by what a text is.

Keys:
- `app.*`, `tab.*`, `accordion.*`, `label.*`, `button.*`, `info.*`: static page text. The page
  hands these to Gradio (`gr.I18n(**ui_translations())`), which picks the browser's
  language in the frontend. Gradio formats them with ICU MessageFormat, so they hold no
  `{`, `}` or `'` (see `ui_translations`).
- `state.*`, `status.*`, `progress.*`, `findings.*`, `chart.*`, `reason.*`: text the backend
  computes per run (backend/view.py), with `{placeholders}` filled by `translate`.
- `diagnose.<rule>.cause` / `.fix`: every rule of backend/diagnose.py, by rule name. The
  English is read from diagnose.RULES itself (its strings live there and nowhere else).
- `check.<rule>.problem` / `.fix` (variants `.problem.2`, `.fix.2`, ...): the messages of
  the config rules (backend/checks.py, backend/config.py, backend/service.py, the resume
  refusals), of the YAML import (backend/yaml_import.py), of LLaMA-Factory's own check
  (backend/lf_check.py) and of the multi-GPU plan (backend/distributed.py) as templates.
  A rule's message carries values (a path, a number), so `translate_finding` matches the
  English message against the English templates in catalogue order, takes the values out,
  and puts them into the same template of the other locale: a rule's more specific variant
  comes before a more general one. A message that matches no template stays in English;
  text a third party wrote (PyYAML's or LLaMA-Factory's own messages) stays as written
  inside the translated sentence.
- `field.*`: the field names the rules put into their messages ("Batch size"); a `{field}`
  value is translated too.
- `doctor.*`: the doctor's verdict words and headings.

`pick_locale` chooses the locale from a switch on the page or the browser's
Accept-Language; `translate` falls back to English, then to the key itself.

This module imports neither gradio nor torch: the backend and the tests use it as is.
"""

from __future__ import annotations

import re
import string
from functools import lru_cache
from typing import Any, Mapping

from backend.diagnose import RULES as DIAGNOSE_RULES
from backend.findings import Finding

DEFAULT_LOCALE = "en"
LOCALES = ("en", "zh-CN")
# The prefixes of keys the page shows as static text (labels, buttons, titles).
UI_PREFIXES = ("app.", "tab.", "accordion.", "label.", "button.", "info.")


# --- English ---------------------------------------------------------------------------------

_EN: dict[str, str] = {
    # page
    "app.title": "RocBoard",
    "app.tagline": "Fine-tune LLMs with LLaMA-Factory on AMD GPUs.",
    "app.header": "# RocBoard\nFine-tune LLMs with LLaMA-Factory on AMD GPUs.",
    "label.language": "Language",
    # tabs
    "tab.train": "Train",
    "tab.runs": "Runs",
    "tab.import_export": "Import & Export",
    "tab.doctor": "Doctor",
    "tab.multi_gpu": "Multi-GPU",
    # train tab: the form
    "label.preset": "Hardware preset",
    "label.model_path": "Model path (local folder)",
    "label.template": "Chat template",
    "label.dataset_dir": "Dataset folder",
    "label.dataset": "Dataset(s), comma-separated",
    "accordion.method": "Method",
    "label.finetuning_type": "Fine-tuning type",
    "label.lora_rank": "LoRA rank",
    "label.lora_alpha": "LoRA alpha",
    "label.lora_dropout": "LoRA dropout",
    "label.lora_target": "LoRA target modules",
    "label.quantization_bit": "QLoRA quantization (bits)",
    "accordion.training": "Training",
    "label.learning_rate": "Learning rate",
    "label.max_steps": "Max steps (0 = use epochs)",
    "label.num_train_epochs": "Epochs",
    "label.batch_size": "Batch size per device",
    "label.grad_accum": "Gradient accumulation",
    "label.cutoff_len": "Cutoff length (tokens)",
    "label.precision": "Precision",
    "label.flash_attn": "flash_attn",
    "label.gradient_checkpointing": "Gradient checkpointing",
    "label.logging_steps": "Logging steps",
    "label.save_steps": "Save steps",
    "label.run_name": "Run name",
    "label.stop_on_nan": "Stop the run when the loss turns NaN",
    "button.preview": "Preview",
    "button.estimate": "Estimate memory",
    "button.start": "Start",
    "button.stop": "Stop",
    "button.resume": "Resume",
    # train tab: several GPUs or nodes (backend/distributed.py)
    "accordion.multi_gpu": "Multi-GPU and multi-node",
    "label.dist_nproc": "Processes (GPUs) per node",
    "label.dist_gpus": "GPUs to use (indices, e.g. 0,1,2,3)",
    "label.dist_strategy": "How to split the work",
    "label.dist_offload": "Offload to CPU memory (DeepSpeed)",
    "label.dist_ddp_timeout_s": "Collective timeout (seconds)",
    "label.dist_rccl_env": "RCCL environment (one NAME=value a line)",
    "label.dist_nnodes": "Nodes",
    "label.dist_node_rank": "Rank of this node",
    "label.dist_master_addr": "Address of node 0",
    "label.dist_master_port": "Port on node 0",
    # train tab: the run panel
    "label.loss_chart": "Loss",
    "label.memory_chart": "Memory",
    "button.download": "Download adapter (.zip)",
    "accordion.preview": "Preview: YAML and command",
    "label.preview_yaml": "config.yaml",
    "label.preview_command": "Run it by hand",
    "accordion.log": "Trainer log (last lines)",
    "label.log_tail": "train.log",
    # runs tab
    "button.refresh": "Refresh",
    "label.runs_chosen": "Runs",
    "button.open_run": "Open",
    "button.compare": "Compare",
    "button.delete": "Delete",
    "button.confirm_delete": "Yes, delete",
    "label.overlay_chart": "Loss of the chosen runs",
    "runs.pick_one": "Pick a run first.",
    "runs.confirm_delete": "Delete {runs}? This removes their directories, checkpoints and adapters.",
    "runs.deleted": "Deleted.",
    # import & export tab
    "label.import_yaml": "Paste a LLaMA-Factory training YAML",
    "label.import_file": "or pick a YAML file",
    "button.import": "Import",
    "button.apply_fixes": "Apply fixes",
    "button.load_into_form": "Load into the form",
    "button.export": "Export the form as YAML",
    "label.export_yaml": "Exported YAML",
    "label.export_command": "Shell command",
    "import.clean": "No problems found: this YAML is ready to train.",
    # doctor tab
    "button.run_doctor": "Check this machine",
    "doctor.hint": "Press the button to check the GPU, drivers, permissions and libraries of this machine.",
    "doctor.check": "Check",
    "doctor.saw": "What was found",
    "doctor.blocking": "{count} problem(s) would break a GPU run: fix them first.",
    "doctor.nothing_blocks": "Nothing blocks a run here.",
    "verdict.ok": "ok",
    "verdict.warning": "warning",
    "verdict.problem": "problem",
    # multi-GPU tab
    "label.devices": "GPUs per node",
    "label.nodes": "Nodes",
    "label.deepspeed": "DeepSpeed stage",
    "label.launch_command": "Launch command",
    # words used inside sentences and tables
    "word.problem": "Problem",
    "word.warning": "Warning",
    "word.fix": "Fix",
    "word.cause": "Cause",
    "word.alert": "Alert",
    "word.unknown": "unknown",
    "word.gpu": "GPU",
    "word.used": "Memory used",
    "word.utilization": "Utilization",
    "word.temperature": "Temperature",
    "word.power": "Power",
    # run states (one word each) and the status lines
    "state.starting": "starting",
    "state.running": "running",
    "state.finished": "finished",
    "state.failed": "failed",
    "state.stopped": "stopped",
    "status.idle": "**Status:** idle — fill the form and press Start.",
    "status.line": "**Status: {state}** — run `{run_id}`",
    "status.exit_code": "Exit code {code}.",
    "status.see_log": "No known cause matched: read the trainer log below.",
    "status.stopped": "Stopped.",
    "status.stopped_adapter": "The adapter saved at the stop can be downloaded.",
    "status.finished": "Training finished.",
    "status.adapter_ready": "The adapter is ready to download.",
    "status.garbage": "({count} unreadable line(s) in the trainer log were skipped.)",
    "status.run_gone": "Run `{run_id}` is gone: its directory was deleted.",
    # why a run ended (backend/launcher.py, backend/service.py)
    "reason.stopped_by_user": "Stopped by the user.",
    "reason.killed_by_signal": "The trainer was killed by signal {signal}.",
    "reason.finished_unwatched": "The trainer finished while RocBoard was not watching.",
    "reason.failed_unwatched": "The trainer ended while RocBoard was not watching, before it finished.",
    "reason.stopped_on_nan": "Stopped on NaN/inf loss (stop on NaN is on).",
    # progress bar
    "progress.loading": "Loading the model and data; the first step is on its way…",
    "progress.none": "No run yet.",
    "progress.no_steps": "The run ended before its first training step.",
    "preset.bf16": "bf16",
    "preset.no_bf16": "no bf16 (use fp16)",
    "progress.step": "Step {step} / {total}",
    "progress.elapsed": "elapsed {elapsed}",
    "progress.eta": "ETA {eta}",
    "progress.throughput": "{rate} tokens/s",
    # charts (backend/charts.py)
    "chart.loss": "Training loss",
    "chart.loss_series": "loss",
    "chart.loss_smoothed": "loss (smoothed)",
    "chart.learning_rate": "learning rate",
    "chart.step": "step",
    "chart.memory_waiting": "Memory (waiting for the first reading)",
    "chart.memory_process": "CPU RAM of the training process",
    "chart.memory_gpu": "GPU memory ({source})",
    "chart.seconds": "seconds since start",
    "chart.gib": "GiB",
    "chart.used": "used",
    "chart.total": "total",
    # memory estimate
    "estimate.title": "Memory estimate",
    "estimate.cheapest_fix": "Cheapest change that fits",
    "estimate.unknown": "No estimate: the model's config.json could not be read.",
    # the form-field names the config rules put into their messages (backend/config.py)
    "field.finetuning_type": "Fine-tuning type",
    "field.lora_rank": "LoRA rank",
    "field.lora_alpha": "LoRA alpha",
    "field.lora_dropout": "LoRA dropout",
    "field.cutoff_len": "Cutoff length",
    "field.learning_rate": "Learning rate",
    "field.num_train_epochs": "Epochs",
    "field.max_steps": "Max steps",
    "field.batch_size": "Batch size",
    "field.grad_accum": "Gradient accumulation",
    "field.logging_steps": "Logging steps",
    "field.save_steps": "Save steps",
    "field.precision": "Precision",
    "field.flash_attn": "flash_attn",
    # the field names of the multi-GPU plan that its rules put into their messages
    # (backend/distributed.py parse_plan_form)
    "field.dist_nproc": "Processes per node",
    "field.dist_master_port": "Master port",
    "field.dist_ddp_timeout_s": "Collective timeout",
    "field.dist_nnodes": "Number of nodes",
    "field.dist_node_rank": "Node rank",
    # config rules: backend/config.py
    "check.not-a-number.problem": "{field} must be a whole number, not {value}.",
    "check.not-a-number.problem.2": "{field} must be a number, not {value}.",
    "check.not-a-number.fix": "Enter a whole number for {field}.",
    "check.not-a-number.fix.2": "Enter a number for {field}.",
    "check.bad-choice.problem": "{field} {value} is not one of {choices}.",
    "check.bad-choice.problem.2": "Quantization {value} is not none, 8 or 4.",
    "check.bad-choice.fix": "Pick one of {choices} for {field}.",
    "check.bad-choice.fix.2": "Pick none, 8 or 4.",
    # backend/service.py
    "check.unknown-preset.problem": "Unknown hardware preset {preset}.",
    "check.unknown-preset.fix": "Pick a preset from the list.",
    "check.run-active.problem": "Run {run_id} is still {state}; RocBoard trains one run at a time.",
    "check.run-active.problem.2": "Run {run_id} is still {state}.",
    "check.run-active.fix": "Wait for it to finish, or stop it first.",
    "check.run-active.fix.2": "Wait for it to end, or stop it first.",
    # backend/resume.py, reported by service.py as "resume-refused"
    "check.resume-refused.problem": "There is no run {run_id} to resume ({error}).",
    "check.resume-refused.problem.2": "Run {run_id} is still {state}; a run that trains cannot be resumed.",
    "check.resume-refused.problem.3": "Run {run_id} finished all its steps; resuming it would train past its end.",
    "check.resume-refused.problem.4": "Run {run_id} has no config.yaml, so it cannot be started again.",
    "check.resume-refused.problem.5": "Run {run_id} has no complete checkpoint to resume from{detail}",
    "check.resume-refused.problem.6": "{checkpoint} of run {run_id} already holds all {steps} steps; there is nothing left to train.",
    "check.resume-refused.problem.7": "{checkpoint} is no longer a complete checkpoint.",
    "check.resume-refused.fix": "Pick a run from the Runs list.",
    "check.resume-refused.fix.2": "Wait for it to end, or stop it first.",
    "check.resume-refused.fix.3": "To train further, start a new run (with more steps, or from its adapter).",
    "check.resume-refused.fix.4": "Start a new run with the same settings.",
    "check.resume-refused.fix.5": "Start it again from the beginning; to be able to resume sooner, lower Save steps.",
    "check.resume-refused.fix.6": "Use the adapter in output/{checkpoint}/, or start a new run with more steps.",
    "check.resume-refused.fix.7": "Ask for the resume again.",
    # backend/checks.py
    "check.run-name-unsafe.problem": "Run name {name} can only hold letters, digits, '.', '_' and '-' (at most 64, not starting with '.' or '-'): it becomes a directory name.",
    "check.run-name-unsafe.fix": "Use a name like {safe}.",
    "check.learning-rate-not-positive.problem": "Learning rate must be a positive number, not {value}.",
    "check.learning-rate-not-positive.fix": "Set it to a small positive number such as 1e-4 (LoRA) or 1e-5 (full).",
    "check.learning-rate-absurd.problem": "Learning rate {value} is absurdly large: training will diverge at once.",
    "check.learning-rate-absurd.fix": "Use something like 1e-4 for LoRA or 1e-5 for full fine-tuning.",
    "check.batch-size-range.problem": "Batch size is {value}; it must be between {low} and {high}.",
    "check.batch-size-range.fix": "Set batch size to a value in that range, e.g. {example}.",
    "check.grad-accum-range.problem": "Gradient accumulation is {value}; it must be between {low} and {high}.",
    "check.grad-accum-range.fix": "Set gradient accumulation to a value in that range, e.g. {example}.",
    "check.max-steps-range.problem": "Max steps is {value}; it must be 0 (train by epochs) or a positive number.",
    "check.max-steps-range.fix": "Set max steps to 0 to train for the number of epochs, or to the number of steps.",
    "check.epochs-not-positive.problem": "Epochs is {value} and max steps is 0: nothing would be trained.",
    "check.epochs-not-positive.problem.2": "Epochs is {value}; it must be a positive number.",
    "check.epochs-not-positive.fix": "Set epochs to a positive number (e.g. 3), or set max steps.",
    "check.epochs-not-positive.fix.2": "Set epochs to a positive number (e.g. 3).",
    "check.epochs-range.problem": "Epochs is {value}, more than {limit}.",
    "check.epochs-range.fix": "Use a few epochs (1-5 is usual for fine-tuning).",
    "check.logging-steps-range.problem": "Logging steps is {value}; it must be between {low} and {high}.",
    "check.logging-steps-range.fix": "Set logging steps to a value in that range, e.g. {example}.",
    "check.save-steps-range.problem": "Save steps is {value}; it must be between {low} and {high}.",
    "check.save-steps-range.fix": "Set save steps to a value in that range, e.g. {example}.",
    "check.cutoff-range.problem": "Cutoff length is {value}; it must be between 1 and {limit}.",
    "check.cutoff-range.fix": "Set cutoff length to the longest example you need in tokens, e.g. 1024.",
    "check.cutoff-too-short.problem": "Cutoff length {value} is shorter than a chat template's own tokens: examples would be cut to nothing.",
    "check.cutoff-too-short.fix": "Use at least {minimum}; 512-2048 is usual.",
    "check.cutoff-beyond-context.problem": "Cutoff length {value} is longer than the model's context ({context} tokens, max_position_embeddings).",
    "check.cutoff-beyond-context.fix": "Set cutoff length to {context} or less.",
    "check.lora-rank-range.problem": "LoRA rank is {value}; it must be between {low} and {high}.",
    "check.lora-rank-range.fix": "Set lora rank to a value in that range, e.g. {example}.",
    "check.lora-alpha-range.problem": "LoRA alpha is {value}; it must be 1 or more.",
    "check.lora-alpha-range.fix": "Set LoRA alpha to twice the rank (e.g. 16 for rank 8).",
    "check.lora-dropout-range.problem": "LoRA dropout is {value}; it must be at least 0 and below 1.",
    "check.lora-dropout-range.fix": "Set LoRA dropout to 0 (or 0.05-0.1).",
    "check.model-path-missing.problem": "No model is set.",
    "check.model-path-missing.fix": "Enter the absolute path of a model directory (one with config.json and the weights).",
    "check.model-hub-id-offline.problem": "{model} is a Hugging Face hub id, and this machine works offline: the trainer cannot download it.",
    "check.model-hub-id-offline.fix": "Download the model to local disk on a connected machine (e.g. `huggingface-cli download {hub_id} --local-dir /models/{name}`), copy it here, and enter the directory's absolute path.",
    "check.model-path-not-found.problem": "Model directory {path} does not exist.",
    "check.model-path-not-found.fix": "Enter the absolute path of a model directory on this machine.",
    "check.model-path-not-dir.problem": "{path} is a file, not a model directory.",
    "check.model-path-not-dir.fix": "Enter the directory that holds config.json and the weights, not a file in it.",
    "check.model-no-config.problem": "{path} has no config.json: it is not a Hugging Face model directory.",
    "check.model-no-config.fix": "Enter the directory that holds config.json (for a downloaded snapshot, the snapshots/<hash> folder).",
    "check.model-config-unreadable.problem": "{file} cannot be read as JSON ({error}).",
    "check.model-config-unreadable.fix": "Copy the model again: its config.json is damaged or incomplete.",
    "check.model-no-weights.problem": "{path} has a config.json but no weight files (*.safetensors, *.bin).",
    "check.model-no-weights.fix": "Copy the weight files into the directory (the download may be incomplete).",
    "check.model-no-tokenizer.problem": "{path} has no tokenizer files (tokenizer.json, tokenizer_config.json...).",
    "check.model-no-tokenizer.fix": "Copy the tokenizer files from the model's download into the directory.",
    "check.template-unknown.problem": "Template {template} is not one LLaMA-Factory knows. Did you mean {suggestions}?",
    "check.template-unknown.problem.2": "Template {template} is not one LLaMA-Factory knows.",
    "check.template-unknown.fix": "Pick the template of the model family (llama3, qwen, mistral, gemma...); for a base model, `default` works.",
    "check.dataset-dir-missing.problem": "No dataset directory is set.",
    "check.dataset-dir-missing.fix": "Enter the directory that holds dataset_info.json and the data files.",
    "check.dataset-dir-not-found.problem": "Dataset directory {path} does not exist or is not a directory.",
    "check.dataset-dir-not-found.fix": "Enter the directory that holds dataset_info.json.",
    "check.dataset-info-missing.problem": "{path} has no dataset_info.json, which names the datasets in it.",
    "check.dataset-info-missing.fix": "Add a dataset_info.json (see LLaMA-Factory's data/README.md), or pick the directory that has one.",
    "check.dataset-info-unreadable.problem": "{file} cannot be read as a JSON mapping ({error}).",
    "check.dataset-info-unreadable.fix": "Fix the JSON syntax of dataset_info.json.",
    "check.dataset-missing.problem": "No dataset is chosen.",
    "check.dataset-missing.fix": "Pick one of the datasets in dataset_info.json: {names}.",
    "check.dataset-not-in-info.problem": "Dataset {name} is not in {file}.",
    "check.dataset-not-in-info.fix": "Did you mean {suggestion}? Pick one of: {names}.",
    "check.dataset-not-in-info.fix.2": "Pick one of: {names}.",
    "check.dataset-entry-bad.problem": "The entry for {name} in dataset_info.json is not a mapping.",
    "check.dataset-entry-bad.problem.2": "The entry for {name} in dataset_info.json has no file_name.",
    "check.dataset-entry-bad.fix": 'Write it as {{"file_name": "..."}}.',
    "check.dataset-entry-bad.fix.2": "Add the data file's name, relative to the dataset directory.",
    "check.dataset-hub-offline.problem": "Dataset {name} is downloaded from a hub ({hub}), and this machine works offline.",
    "check.dataset-hub-offline.fix": "Download it to a file in {directory}, and give its entry a file_name instead of the hub url.",
    "check.dataset-file-missing.problem": "Dataset {name} points to {path}, which does not exist.",
    "check.dataset-file-missing.problem.2": "The folder {path} of dataset {name} is empty.",
    "check.dataset-file-missing.fix": "Put the data file there, or fix file_name in dataset_info.json.",
    "check.dataset-file-missing.fix.2": "Put the data files in it.",
    "check.dataset-file-unreadable.problem": "Dataset file {path} cannot be read: {problem}.",
    "check.dataset-file-unreadable.fix": "Fix the file (a JSON list of records, or one JSON object per line for .jsonl).",
    "check.bf16-unsupported.problem": "{preset} has no bf16 support; bf16 would fail at start or run very slowly.",
    "check.bf16-unsupported.fix": "Set precision to {precision}.",
    "check.fa2-on-cpu.problem": "FlashAttention-2 needs a GPU; this run is on the CPU.",
    "check.fa2-on-cpu.fix": "Set flash_attn to sdpa or disabled.",
    "check.fa2-not-installed.problem": "flash_attn is fa2, but the flash-attn package is not installed: LLaMA-Factory falls back to the default attention.",
    "check.fa2-not-installed.fix": "Set flash_attn to sdpa (PyTorch's fused attention, fast on ROCm too), or install the ROCm build of flash-attn.",
    "check.qlora-needs-lora.problem": "{bits}-bit quantization (QLoRA) only works with LoRA, not {finetuning_type}.",
    "check.qlora-needs-lora.fix": "Set fine-tuning type to lora, or quantization to none.",
    "check.qlora-on-cpu.problem": "QLoRA (bitsandbytes) needs a GPU; this run is on the CPU.",
    "check.qlora-on-cpu.fix": "Set quantization to none.",
    "check.qlora-not-offered.problem": "{preset} does not offer {bits}-bit QLoRA (offered: {offered}).",
    "check.qlora-not-offered.fix": "Set quantization to none or {offered}-bit.",
    "check.qlora-not-offered.fix.2": "Set quantization to none.",
    "check.qlora-no-bitsandbytes.problem": "{bits}-bit QLoRA needs bitsandbytes, which is not installed in this environment.",
    "check.qlora-no-bitsandbytes.fix": "Install the ROCm build of bitsandbytes (pip install bitsandbytes>=0.45 on ROCm 6), or set quantization to none.",
    "check.memory-will-not-fit.problem": "Estimated memory {estimate} GiB per device is more than {preset} has ({vram} GiB): the run would stop with out-of-memory.",
    # The fix is a sentence composed from the estimator's cheapest changes; it stays as written.
    "check.memory-will-not-fit.fix": "{fix}",
    "check.runs-dir-not-dir.problem": "{path} is a file, not a directory.",
    "check.runs-dir-not-dir.problem.2": "{path} cannot be created: {existing} is a file.",
    "check.runs-dir-not-dir.fix": "Start the app with --runs-dir pointing at a directory.",
    "check.runs-dir-not-dir.fix.2": "Start the app with --runs-dir pointing at a directory you can write.",
    "check.runs-dir-not-writable.problem": "{path} is not writable ({where} does not let this user write).",
    "check.runs-dir-not-writable.fix": "Start the app with --runs-dir pointing at a directory you can write, or fix its permissions.",
    "check.runs-dir-low-space.problem": "Only {free} GiB free under {path}; checkpoints may not fit.",
    "check.runs-dir-low-space.fix": "Free some disk space or point --runs-dir at a larger disk.",
    # YAML import rules: backend/yaml_import.py. Where one rule has several messages, the
    # more specific variant comes first: the first template that matches wins, and a
    # template with a placeholder where the other has words would match both.
    "check.yaml-too-large.problem": "The file is {size} bytes; a training config is a few kB (limit {limit}).",
    "check.yaml-too-large.fix": "Import the training YAML itself, not a dataset or a log.",
    "check.yaml-empty.problem": "The file is empty.",
    "check.yaml-empty.fix": "Paste or pick a LLaMA-Factory training YAML.",
    # {error} is PyYAML's own English; its commonest messages have their own words, and
    # "expected ..., but found ..." keeps PyYAML's token names.
    "check.yaml-syntax.problem": "This is not valid YAML at line {line}, column {column}: mapping values are not allowed here.",
    "check.yaml-syntax.problem.2": "This is not valid YAML at line {line}, column {column}: could not find expected ':'.",
    "check.yaml-syntax.problem.3": "This is not valid YAML at line {line}, column {column}: found character {character} that cannot start any token.",
    "check.yaml-syntax.problem.4": "This is not valid YAML at line {line}, column {column}: found unexpected end of stream.",
    "check.yaml-syntax.problem.5": "This is not valid YAML at line {line}, column {column}: expected <block end>, but found {found}.",
    "check.yaml-syntax.problem.6": "This is not valid YAML at line {line}, column {column}: expected ',' or ']', but got {found}.",
    "check.yaml-syntax.problem.7": "This is not valid YAML at line {line}, column {column}: expected ',' or '}}', but got {found}.",
    "check.yaml-syntax.problem.8": "This is not valid YAML at line {line}, column {column}: expected '<document start>', but found {found}.",
    "check.yaml-syntax.problem.9": "This is not valid YAML at line {line}, column {column}: expected {expected}, but got {found}.",
    "check.yaml-syntax.problem.10": "This is not valid YAML at line {line}, column {column}: expected {expected}, but found {found}.",
    "check.yaml-syntax.problem.11": "This is not valid YAML at line {line}, column {column}: found undefined alias {alias}.",
    "check.yaml-syntax.problem.12": "This is not valid YAML at line {line}, column {column}: second occurrence.",
    "check.yaml-syntax.problem.13": "This is not valid YAML at line {line}, column {column}: found unhashable key.",
    "check.yaml-syntax.problem.14": "This is not valid YAML at line {line}, column {column}: found unknown escape character {character}.",
    "check.yaml-syntax.problem.15": "This is not valid YAML at line {line}, column {column}: could not determine a constructor for the tag {tag}.",
    "check.yaml-syntax.problem.16": "This is not valid YAML at line {line}, column {column}: but found another document.",
    "check.yaml-syntax.problem.17": "This is not valid YAML: unacceptable character {character}: special characters are not allowed.",
    "check.yaml-syntax.problem.18": "This is not valid YAML at line {line}, column {column}: {error}.",
    "check.yaml-syntax.problem.19": "This is not valid YAML: {error}.",
    "check.yaml-syntax.fix": "Fix the syntax there (indent with spaces, `key: value` on each line).",
    "check.yaml-not-mapping.problem": "The file holds a list, not a mapping of keys to values.",
    "check.yaml-not-mapping.problem.2": "The file holds a single NoneType value, not a mapping of keys to values.",
    "check.yaml-not-mapping.problem.3": "The file holds a single {type} value, not a mapping of keys to values.",
    "check.yaml-not-mapping.fix": "A training YAML has one `key: value` per line, e.g. `learning_rate: 1.0e-4`.",
    "check.yaml-duplicate-key.problem": "`{key}` appears more than once; llamafactory-cli refuses the file.",
    "check.yaml-duplicate-key.fix": "Keep one `{key}` line.",
    "check.yaml-key-not-text.problem": "Key {key} is not a name.",
    "check.yaml-key-not-text.fix": "Keys are LLaMA-Factory argument names such as learning_rate.",
    "check.yaml-too-many-values.problem": "The file expands to too many values (YAML anchors or deep nesting).",
    "check.yaml-too-many-values.fix": "A training YAML holds plain `key: value` lines; remove the anchors (&name / *name).",
    "check.yaml-disable-flash-attn.problem": "`disable_flash_attn` is not a LLaMA-Factory key (it was renamed); the parser refuses the file.",
    "check.yaml-disable-flash-attn.fix": "Write `flash_attn: disabled`.",
    "check.yaml-disable-flash-attn.fix.2": "Remove the line (`flash_attn: auto` is the default).",
    "check.yaml-compute-type.problem": "`compute_type` is a LlamaBoard form field, not a YAML key; the parser refuses the file.",
    "check.yaml-compute-type.fix": "Remove it (bf16 / fp16 already say the precision).",
    "check.yaml-compute-type.fix.2": "Write `pure_bf16: true` and `bf16: true`.",
    "check.yaml-compute-type.fix.3": "Write `bf16: true`.",
    "check.yaml-compute-type.fix.4": "Write `fp16: true`.",
    "check.yaml-compute-type.fix.5": "Remove it (no bf16/fp16 key means fp32).",
    "check.yaml-compute-type.fix.6": "Remove it and set `bf16: true` (or `fp16: true`).",
    "check.yaml-compute-device.problem": "There is no `compute_device` key. On AMD GPUs nothing needs setting: ROCm builds of PyTorch use the `cuda` device name on their own.",
    "check.yaml-compute-device.fix": "Remove it (to train on the CPU instead, set `use_cpu: true`).",
    "check.yaml-ddp-backend.problem": "ddp_backend {value} is not a backend. On ROCm, AMD's RCCL is used through the `nccl` backend.",
    "check.yaml-ddp-backend.fix": "Write `ddp_backend: nccl`, or remove it (the default picks nccl on GPUs).",
    "check.yaml-flash-attn-boolean.problem": "YAML reads `flash_attn: {written}` as the boolean {boolean}, which LLaMA-Factory does not accept.",
    "check.yaml-flash-attn-boolean.fix": "Write `flash_attn: {value}` (choices: {choices}).",
    "check.yaml-flash-attn-choice.problem": "flash_attn {value} is not one of {choices}.",
    "check.yaml-flash-attn-choice.fix": "Write `flash_attn: {target}`.",
    "check.yaml-flash-attn-choice.fix.2": "Pick one of {choices}.",
    "check.yaml-device-map.problem": "`device_map` is not a training key: LLaMA-Factory places the model itself (one copy per GPU) and refuses the file.",
    "check.yaml-device-map.fix": "Remove it. To spread a large model over GPUs, use DeepSpeed ZeRO-3 (`deepspeed: ...ds_z3_config.json`).",
    "check.yaml-quantization-device-map.problem": "A device map cannot be used when training a quantized model (LLaMA-Factory refuses it).",
    "check.yaml-quantization-device-map.fix": "Remove quantization_device_map.",
    "check.yaml-bf16-and-fp16.problem": "bf16 and fp16 are both true; training runs in one precision (transformers refuses both).",
    "check.yaml-bf16-and-fp16.fix": "Set only one of bf16 or fp16: keep `{keep}: true` ({preset} has no bf16).",
    "check.yaml-bf16-and-fp16.fix.2": "Set only one of bf16 or fp16: keep `{keep}: true` ({preset} has bf16).",
    "check.yaml-bf16-and-fp16.fix.3": "Set only one of bf16 or fp16: keep `{keep}: true`.",
    "check.yaml-precision-unset.problem": "Neither bf16 nor fp16 is set: LLaMA-Factory trains in fp32, with twice the memory and far slower.",
    "check.yaml-precision-unset.fix": "Set `{precision}: true`.",
    "check.yaml-finetuning-qlora.problem": "`finetuning_type: qlora` does not exist: QLoRA is LoRA on a quantized model.",
    "check.yaml-finetuning-qlora.fix": "Write `finetuning_type: lora` and `quantization_bit: 4`.",
    "check.yaml-do-train.problem": "do_train is not true: `llamafactory-cli train` would load everything and train nothing.",
    "check.yaml-do-train.fix": "Set `do_train: true`.",
    "check.yaml-stage-not-sft.problem": "stage is {stage}; RocBoard's form runs supervised fine-tuning (sft) only.",
    "check.yaml-stage-not-sft.fix": "Set `stage: sft`, or run this file with llamafactory-cli directly.",
    "check.yaml-template-unset.problem": "No template is set: LLaMA-Factory would format the examples without the model's chat markup.",
    "check.yaml-template-unset.fix": "Set the template of the model family, e.g. `template: llama3` or `template: qwen`.",
    "check.yaml-unknown-key.problem": "`{key}` is not a LLaMA-Factory key; its parser refuses the whole file.",
    "check.yaml-unknown-key.fix": "Did you mean `{guess}`? Rename it.",
    "check.yaml-unknown-key.fix.2": "Remove it (did you mean `{guess}`? That is already set).",
    "check.yaml-unknown-key.fix.3": "Remove it.",
    "check.yaml-not-in-form.problem": "The form has no field for `{key}`: a run started from the form goes without it.",
    "check.yaml-not-in-form.problem.2": "The form has no choice {value} for {key}: a run started from the form uses its default.",
    "check.yaml-not-in-form.fix": "Run this file with llamafactory-cli (see Export) if you need it.",
    "check.yaml-not-in-form.fix.2": "Run this file with llamafactory-cli (see Export) to keep it.",
    # LLaMA-Factory's own check: backend/lf_check.py. {output}, {error} and {message} are the
    # helper's or LLaMA-Factory's own English and stay as written.
    "check.lf-timeout.problem": "LLaMA-Factory's own check did not answer within {seconds} s.",
    "check.lf-timeout.fix": "Try again when the machine is less busy, or skip this check (--no-llamafactory).",
    "check.lf-unavailable.problem": "LLaMA-Factory's own check failed to run (exit {code}: {output}).",
    "check.lf-unavailable.fix": "Check that llamafactory is installed in this Python environment (`llamafactory-cli version`).",
    "check.lf-import-failed.problem": "LLaMA-Factory cannot be imported here ({error}); a run would fail the same way.",
    "check.lf-import-failed.fix": "Install the versions in requirements.txt into this environment (`make setup`).",
    "check.lf-unknown-key.problem": "LLaMA-Factory has no key `{key}`; its parser refuses the whole file.",
    "check.lf-unknown-key.fix": "Remove `{key}` (did you mean `{guess}`? It is already set).",
    "check.lf-unknown-key.fix.2": "Rename it to `{guess}`.",
    "check.lf-unknown-key.fix.3": "Remove `{key}`.",
    # lf_check_worker.py's words for what a key takes, then any other.
    "check.lf-bad-value.problem": "LLaMA-Factory expects a whole number for `{key}`, not {value}.",
    "check.lf-bad-value.problem.2": "LLaMA-Factory expects a number for `{key}`, not {value}.",
    "check.lf-bad-value.problem.3": "LLaMA-Factory expects true or false for `{key}`, not {value}.",
    "check.lf-bad-value.problem.4": "LLaMA-Factory expects a text value for `{key}`, not {value}.",
    "check.lf-bad-value.problem.5": "LLaMA-Factory expects one of {choices} for `{key}`, not {value}.",
    "check.lf-bad-value.problem.6": "LLaMA-Factory expects {expected} for `{key}`, not {value}.",
    "check.lf-bad-value.fix": "Set `{key}` to a whole number.",
    "check.lf-bad-value.fix.2": "Set `{key}` to a number.",
    "check.lf-bad-value.fix.3": "Set `{key}` to true or false.",
    "check.lf-bad-value.fix.4": "Set `{key}` to a text value.",
    "check.lf-bad-value.fix.5": "Set `{key}` to one of {choices}.",
    "check.lf-bad-value.fix.6": "Set `{key}` to {expected}.",
    # lf_check._KNOWN_MESSAGES, then any other refusal (its message is LLaMA-Factory's).
    "check.lf-rejected.problem": "bf16 and fp16 are both true.",
    "check.lf-rejected.problem.2": "finetuning_type is not one LLaMA-Factory knows.",
    "check.lf-rejected.problem.3": "quantization_bit (QLoRA) only works with LoRA.",
    "check.lf-rejected.problem.4": "A device map cannot be used when training a quantized model.",
    "check.lf-rejected.problem.5": "No dataset is named.",
    "check.lf-rejected.problem.6": "No model is named.",
    "check.lf-rejected.problem.7": "logging_steps is 0.",
    "check.lf-rejected.problem.8": "save_steps is 0.",
    "check.lf-rejected.problem.9": "LLaMA-Factory refuses this config: {message}",
    "check.lf-rejected.fix": "Set only one of bf16 or fp16 to true.",
    "check.lf-rejected.fix.2": "Use lora, freeze or full (QLoRA is lora plus quantization_bit: 4).",
    "check.lf-rejected.fix.3": "Set finetuning_type: lora, or remove quantization_bit.",
    "check.lf-rejected.fix.4": "Remove quantization_device_map.",
    "check.lf-rejected.fix.5": "Set dataset to a name from dataset_info.json.",
    "check.lf-rejected.fix.6": "Set model_name_or_path to the model's local directory.",
    "check.lf-rejected.fix.7": "Set logging_steps to 1 or more.",
    "check.lf-rejected.fix.8": "Set save_steps to 1 or more.",
    "check.lf-rejected.fix.9": "Change `{key}` as the message says.",
    "check.lf-rejected.fix.10": "Change the config as the message says.",
    # the multi-GPU plan: backend/distributed.py (its unreadable numbers are "not-a-number",
    # with the field names above)
    "check.bad-gpu-list.problem": "GPU list: {part} is not a GPU index or a range like 0-3.",
    "check.bad-gpu-list.fix": "List GPU indices like 0,1,2,3 or 0-3.",
    "check.bad-env-line.problem": "RCCL settings: line {number} ({line}) is not NAME=value.",
    "check.bad-env-line.fix": "Write one NAME=value a line.",
    "check.bad-strategy.problem": "Strategy {strategy} is not one of {choices}.",
    "check.bad-strategy.fix": "Pick DDP, ZeRO-2 or ZeRO-3.",
    "check.nproc-range.problem": "Processes per node must be at least 1, not {value}.",
    "check.nproc-range.fix": "Set one process per GPU.",
    "check.nnodes-range.problem": "Number of nodes must be at least 1, not {value}.",
    "check.nnodes-range.fix": "Set the number of nodes.",
    "check.node-rank-range.problem": "Node rank {rank} is not in 0..{last}.",
    "check.node-rank-range.fix": "Number the nodes 0 to NNODES-1.",
    "check.bad-port.problem": "Port {port} is not a TCP port.",
    "check.bad-port.fix": "Pick a port between 1024 and 65535.",
    "check.privileged-port.problem": "Port {port} needs root to listen on.",
    "check.privileged-port.fix": "Pick a port between 1024 and 65535.",
    "check.bad-timeout.problem": "The collective timeout must be positive, not {value} s.",
    "check.bad-timeout.fix": "Use {default} s unless you know better.",
    "check.no-master-addr.problem": "No master address is set.",
    "check.no-master-addr.fix": "Enter the hostname or IP of node 0.",
    "check.loopback-master.problem": "MASTER_ADDR {address} is this machine's loopback: the other nodes cannot reach it.",
    "check.loopback-master.fix": "Enter node 0's hostname or IP on the network the nodes share.",
    "check.cpu-with-gpus.problem": "A CPU plan names GPUs.",
    "check.cpu-with-gpus.fix": "Clear the GPU list, or leave CPU mode.",
    "check.zero-on-cpu.problem": "DeepSpeed ZeRO is not set up for CPU training here.",
    "check.zero-on-cpu.fix": "Use DDP on the CPU.",
    "check.no-gpus.problem": "No GPUs are selected.",
    "check.no-gpus.fix": "Pick the GPU indices to train on, e.g. 0,1.",
    "check.negative-gpu.problem": "GPU indices cannot be negative.",
    "check.negative-gpu.fix": "Use the indices amd-smi / rocm-smi list (0, 1, ...).",
    "check.duplicate-gpu.problem": "A GPU is listed twice.",
    "check.duplicate-gpu.fix": "List each GPU once.",
    "check.nproc-over-gpus.problem": "{nproc} processes on {gpus} GPU(s) would put two ranks on one GPU, which RCCL refuses.",
    "check.nproc-over-gpus.fix": "Set processes per node to {gpus}, or select more GPUs.",
    "check.idle-gpus.problem": "{idle} selected GPU(s) will sit idle ({nproc} processes, {gpus} GPUs).",
    "check.idle-gpus.fix": "Set processes per node to {gpus}.",
    "check.offload-without-zero.problem": "Offload is a DeepSpeed ZeRO feature; DDP ignores it.",
    "check.offload-without-zero.fix": "Pick ZeRO-2 or ZeRO-3, or turn offload off.",
    "check.bad-env-name.problem": "{name} is not a variable name.",
    "check.bad-env-name.fix": "Use NAME=value with letters, digits and _.",
    "check.env-overrides-plan.problem": "{name} is set from the plan; setting it here would contradict it.",
    "check.env-overrides-plan.fix": "Remove {name} from the RCCL settings and use the plan's field.",
    "check.bad-env-value.problem": "The value of {name} spans lines.",
    "check.bad-env-value.fix": "Put the value on one line.",
}

# The diagnosis rules' English is theirs; copied in, never retyped.
for _rule in DIAGNOSE_RULES:
    _EN[f"diagnose.{_rule.name}.cause"] = _rule.cause
    _EN[f"diagnose.{_rule.name}.fix"] = _rule.fix


# --- Simplified Chinese ----------------------------------------------------------------------

_ZH_CN: dict[str, str] = {
    "app.title": "RocBoard",
    "app.tagline": "在 AMD GPU 上用 LLaMA-Factory 微调大语言模型。",
    "app.header": "# RocBoard\n在 AMD GPU 上用 LLaMA-Factory 微调大语言模型。",
    "label.language": "语言",
    "tab.train": "训练",
    "tab.runs": "运行记录",
    "tab.import_export": "导入与导出",
    "tab.doctor": "环境诊断",
    "tab.multi_gpu": "多 GPU",
    "label.preset": "硬件预设",
    "label.model_path": "模型路径（本地文件夹）",
    "label.template": "对话模板",
    "label.dataset_dir": "数据集文件夹",
    "label.dataset": "数据集（多个用逗号分隔）",
    "accordion.method": "方法",
    "label.finetuning_type": "微调方式",
    "label.lora_rank": "LoRA 秩（rank）",
    "label.lora_alpha": "LoRA alpha",
    "label.lora_dropout": "LoRA dropout",
    "label.lora_target": "LoRA 目标模块",
    "label.quantization_bit": "QLoRA 量化（位数）",
    "accordion.training": "训练参数",
    "label.learning_rate": "学习率",
    "label.max_steps": "最大步数（0 = 按轮数训练）",
    "label.num_train_epochs": "训练轮数",
    "label.batch_size": "每设备批大小",
    "label.grad_accum": "梯度累积步数",
    "label.cutoff_len": "截断长度（token）",
    "label.precision": "精度",
    "label.flash_attn": "flash_attn（注意力实现）",
    "label.gradient_checkpointing": "梯度检查点",
    "label.logging_steps": "日志间隔步数",
    "label.save_steps": "保存间隔步数",
    "label.run_name": "运行名称",
    "label.stop_on_nan": "损失变为 NaN 时停止训练",
    "button.preview": "预览",
    "button.estimate": "估算显存",
    "button.start": "开始",
    "button.stop": "停止",
    "button.resume": "继续训练",
    "accordion.multi_gpu": "多 GPU 与多节点",
    "label.dist_nproc": "每个节点的进程数（GPU 数）",
    "label.dist_gpus": "使用的 GPU（编号，例如 0,1,2,3）",
    "label.dist_strategy": "并行方式",
    "label.dist_offload": "卸载到 CPU 内存（DeepSpeed）",
    "label.dist_ddp_timeout_s": "集合通信超时（秒）",
    "label.dist_rccl_env": "RCCL 环境变量（每行一个 NAME=value）",
    "label.dist_nnodes": "节点数",
    "label.dist_node_rank": "本节点序号",
    "label.dist_master_addr": "0 号节点地址",
    "label.dist_master_port": "0 号节点端口",
    "label.loss_chart": "损失",
    "label.memory_chart": "内存",
    "button.download": "下载适配器（.zip）",
    "accordion.preview": "预览：YAML 与命令",
    "label.preview_yaml": "config.yaml",
    "label.preview_command": "手动运行",
    "accordion.log": "训练日志（最后几行）",
    "label.log_tail": "train.log",
    "button.refresh": "刷新",
    "label.runs_chosen": "运行记录",
    "button.open_run": "打开",
    "button.compare": "对比",
    "button.delete": "删除",
    "button.confirm_delete": "确认删除",
    "label.overlay_chart": "所选运行的损失",
    "runs.pick_one": "请先选择一个运行。",
    "runs.confirm_delete": "删除 {runs}？这会删除它们的目录、检查点和适配器。",
    "runs.deleted": "已删除。",
    "label.import_yaml": "粘贴 LLaMA-Factory 训练 YAML",
    "label.import_file": "或选择一个 YAML 文件",
    "button.import": "导入",
    "button.apply_fixes": "应用修复",
    "button.load_into_form": "载入表单",
    "button.export": "将表单导出为 YAML",
    "label.export_yaml": "导出的 YAML",
    "label.export_command": "Shell 命令",
    "import.clean": "没有发现问题：这个 YAML 可以直接训练。",
    "button.run_doctor": "检查本机环境",
    "doctor.hint": "点击按钮，检查本机的 GPU、驱动、权限和依赖库。",
    "doctor.check": "检查项",
    "doctor.saw": "检测结果",
    "doctor.blocking": "有 {count} 个问题会导致 GPU 训练失败：请先解决。",
    "doctor.nothing_blocks": "没有发现会阻止训练的问题。",
    "verdict.ok": "正常",
    "verdict.warning": "警告",
    "verdict.problem": "问题",
    "label.devices": "每个节点的 GPU 数",
    "label.nodes": "节点数",
    "label.deepspeed": "DeepSpeed 阶段",
    "label.launch_command": "启动命令",
    "word.problem": "问题",
    "word.warning": "警告",
    "word.fix": "解决方法",
    "word.cause": "原因",
    "word.alert": "警报",
    "word.unknown": "未知",
    "word.gpu": "GPU",
    "word.used": "已用显存",
    "word.utilization": "利用率",
    "word.temperature": "温度",
    "word.power": "功耗",
    "state.starting": "启动中",
    "state.running": "运行中",
    "state.finished": "已完成",
    "state.failed": "失败",
    "state.stopped": "已停止",
    "status.idle": "**状态：** 空闲 — 填写表单后点击“开始”。",
    "status.line": "**状态：{state}** — 运行 `{run_id}`",
    "status.exit_code": "退出码 {code}。",
    "status.see_log": "没有匹配到已知原因：请查看下方的训练日志。",
    "status.stopped": "已停止。",
    "status.stopped_adapter": "停止时保存的适配器可以下载。",
    "status.finished": "训练完成。",
    "status.adapter_ready": "适配器已可下载。",
    "status.garbage": "（已跳过训练日志中 {count} 行无法读取的内容。）",
    "status.run_gone": "运行 `{run_id}` 已不存在：它的目录已被删除。",
    "reason.stopped_by_user": "由用户停止。",
    "reason.killed_by_signal": "训练进程被信号 {signal} 终止。",
    "reason.finished_unwatched": "训练在 RocBoard 未监视时完成。",
    "reason.failed_unwatched": "训练在 RocBoard 未监视时结束，且未完成。",
    "reason.stopped_on_nan": "损失出现 NaN/inf，已停止（已开启“遇 NaN 停止”）。",
    "progress.loading": "正在加载模型和数据，第一步即将开始…",
    "progress.none": "尚无运行。",
    "progress.no_steps": "运行在第一个训练步之前就结束了。",
    "preset.bf16": "支持 bf16",
    "preset.no_bf16": "不支持 bf16（请用 fp16）",
    "progress.step": "第 {step} / {total} 步",
    "progress.elapsed": "已用时 {elapsed}",
    "progress.eta": "预计剩余 {eta}",
    "progress.throughput": "{rate} token/秒",
    "chart.loss": "训练损失",
    "chart.loss_series": "损失",
    "chart.loss_smoothed": "损失（平滑）",
    "chart.learning_rate": "学习率",
    "chart.step": "步数",
    "chart.memory_waiting": "内存（等待第一次采样）",
    "chart.memory_process": "训练进程占用的 CPU 内存",
    "chart.memory_gpu": "GPU 显存（{source}）",
    "chart.seconds": "开始后的秒数",
    "chart.gib": "GiB",
    "chart.used": "已用",
    "chart.total": "总量",
    "estimate.title": "显存估算",
    "estimate.cheapest_fix": "能放下的最省事改法",
    "estimate.unknown": "无法估算：读不到模型的 config.json。",
    "field.finetuning_type": "微调方式",
    "field.lora_rank": "LoRA 秩",
    "field.lora_alpha": "LoRA alpha",
    "field.lora_dropout": "LoRA dropout",
    "field.cutoff_len": "截断长度",
    "field.learning_rate": "学习率",
    "field.num_train_epochs": "训练轮数",
    "field.max_steps": "最大步数",
    "field.batch_size": "批大小",
    "field.grad_accum": "梯度累积步数",
    "field.logging_steps": "日志间隔步数",
    "field.save_steps": "保存间隔步数",
    "field.precision": "精度",
    "field.flash_attn": "flash_attn",
    "field.dist_nproc": "每节点进程数",
    "field.dist_master_port": "主节点端口",
    "field.dist_ddp_timeout_s": "集合通信超时",
    "field.dist_nnodes": "节点数",
    "field.dist_node_rank": "节点序号",
    "check.not-a-number.problem": "{field}必须是整数，不能是 {value}。",
    "check.not-a-number.problem.2": "{field}必须是数字，不能是 {value}。",
    "check.not-a-number.fix": "请为{field}输入一个整数。",
    "check.not-a-number.fix.2": "请为{field}输入一个数字。",
    "check.bad-choice.problem": "{field} {value} 不在可选值 {choices} 之中。",
    "check.bad-choice.problem.2": "量化位数 {value} 不是 none、8 或 4。",
    "check.bad-choice.fix": "请为{field}选择 {choices} 之一。",
    "check.bad-choice.fix.2": "请选择 none、8 或 4。",
    "check.unknown-preset.problem": "未知的硬件预设 {preset}。",
    "check.unknown-preset.fix": "请从列表中选择一个预设。",
    "check.run-active.problem": "运行 {run_id} 仍处于{state}状态；RocBoard 一次只训练一个运行。",
    "check.run-active.problem.2": "运行 {run_id} 仍处于{state}状态。",
    "check.run-active.fix": "请等待它结束，或先停止它。",
    "check.run-active.fix.2": "请等待它结束，或先停止它。",
    "check.resume-refused.problem": "没有可继续训练的运行 {run_id}（{error}）。",
    "check.resume-refused.problem.2": "运行 {run_id} 仍处于{state}状态；正在训练的运行不能继续训练。",
    "check.resume-refused.problem.3": "运行 {run_id} 已完成全部步数；继续训练会超出它的终点。",
    "check.resume-refused.problem.4": "运行 {run_id} 没有 config.yaml，无法再次启动。",
    "check.resume-refused.problem.5": "运行 {run_id} 没有可用于继续训练的完整检查点{detail}",
    "check.resume-refused.problem.6": "运行 {run_id} 的 {checkpoint} 已包含全部 {steps} 步；没有剩余可训练的内容。",
    "check.resume-refused.problem.7": "{checkpoint} 已不再是完整的检查点。",
    "check.resume-refused.fix": "请从“运行记录”列表中选择一个运行。",
    "check.resume-refused.fix.2": "请等待它结束，或先停止它。",
    "check.resume-refused.fix.3": "如需继续训练，请新建一个运行（增加步数，或从它的适配器开始）。",
    "check.resume-refused.fix.4": "请用相同的设置新建一个运行。",
    "check.resume-refused.fix.5": "请从头重新开始；若想更早能够继续训练，请调小保存间隔步数。",
    "check.resume-refused.fix.6": "请使用 output/{checkpoint}/ 中的适配器，或新建一个步数更多的运行。",
    "check.resume-refused.fix.7": "请重新发起继续训练。",
    "check.run-name-unsafe.problem": "运行名称 {name} 只能包含字母、数字、“.”、“_”和“-”（最多 64 个字符，且不能以“.”或“-”开头）：它会成为目录名。",
    "check.run-name-unsafe.fix": "请使用类似 {safe} 的名称。",
    "check.learning-rate-not-positive.problem": "学习率必须是正数，不能是 {value}。",
    "check.learning-rate-not-positive.fix": "请设为一个较小的正数，例如 1e-4（LoRA）或 1e-5（全参数）。",
    "check.learning-rate-absurd.problem": "学习率 {value} 过大：训练会立即发散。",
    "check.learning-rate-absurd.fix": "LoRA 一般用 1e-4，全参数微调一般用 1e-5。",
    "check.batch-size-range.problem": "批大小为 {value}；必须在 {low} 到 {high} 之间。",
    "check.batch-size-range.fix": "请把批大小设为该范围内的值，例如 {example}。",
    "check.grad-accum-range.problem": "梯度累积步数为 {value}；必须在 {low} 到 {high} 之间。",
    "check.grad-accum-range.fix": "请把梯度累积步数设为该范围内的值，例如 {example}。",
    "check.max-steps-range.problem": "最大步数为 {value}；必须是 0（按轮数训练）或正数。",
    "check.max-steps-range.fix": "将最大步数设为 0 以按轮数训练，或设为要训练的步数。",
    "check.epochs-not-positive.problem": "训练轮数为 {value} 且最大步数为 0：不会训练任何内容。",
    "check.epochs-not-positive.problem.2": "训练轮数为 {value}；必须是正数。",
    "check.epochs-not-positive.fix": "请把训练轮数设为正数（例如 3），或设置最大步数。",
    "check.epochs-not-positive.fix.2": "请把训练轮数设为正数（例如 3）。",
    "check.epochs-range.problem": "训练轮数为 {value}，超过了 {limit}。",
    "check.epochs-range.fix": "只需几轮（微调通常为 1-5 轮）。",
    "check.logging-steps-range.problem": "日志间隔步数为 {value}；必须在 {low} 到 {high} 之间。",
    "check.logging-steps-range.fix": "请把日志间隔步数设为该范围内的值，例如 {example}。",
    "check.save-steps-range.problem": "保存间隔步数为 {value}；必须在 {low} 到 {high} 之间。",
    "check.save-steps-range.fix": "请把保存间隔步数设为该范围内的值，例如 {example}。",
    "check.cutoff-range.problem": "截断长度为 {value}；必须在 1 到 {limit} 之间。",
    "check.cutoff-range.fix": "请把截断长度设为所需最长样本的 token 数，例如 1024。",
    "check.cutoff-too-short.problem": "截断长度 {value} 比对话模板本身的 token 还短：样本会被截得一无所剩。",
    "check.cutoff-too-short.fix": "至少使用 {minimum}；常用 512-2048。",
    "check.cutoff-beyond-context.problem": "截断长度 {value} 超过了模型的上下文长度（{context} 个 token，max_position_embeddings）。",
    "check.cutoff-beyond-context.fix": "请把截断长度设为 {context} 或更小。",
    "check.lora-rank-range.problem": "LoRA 秩为 {value}；必须在 {low} 到 {high} 之间。",
    "check.lora-rank-range.fix": "请把 LoRA 秩设为该范围内的值，例如 {example}。",
    "check.lora-alpha-range.problem": "LoRA alpha 为 {value}；必须大于等于 1。",
    "check.lora-alpha-range.fix": "请把 LoRA alpha 设为秩的两倍（例如秩为 8 时设为 16）。",
    "check.lora-dropout-range.problem": "LoRA dropout 为 {value}；必须大于等于 0 且小于 1。",
    "check.lora-dropout-range.fix": "请把 LoRA dropout 设为 0（或 0.05-0.1）。",
    "check.model-path-missing.problem": "没有设置模型。",
    "check.model-path-missing.fix": "请输入模型目录的绝对路径（包含 config.json 和权重文件的目录）。",
    "check.model-hub-id-offline.problem": "{model} 是 Hugging Face Hub 上的模型名，而本机处于离线模式：训练程序无法下载它。",
    "check.model-hub-id-offline.fix": "请在联网的机器上把模型下载到本地磁盘（例如 `huggingface-cli download {hub_id} --local-dir /models/{name}`），复制到本机，再输入该目录的绝对路径。",
    "check.model-path-not-found.problem": "模型目录 {path} 不存在。",
    "check.model-path-not-found.fix": "请输入本机上某个模型目录的绝对路径。",
    "check.model-path-not-dir.problem": "{path} 是文件，不是模型目录。",
    "check.model-path-not-dir.fix": "请输入包含 config.json 和权重文件的目录，而不是其中的某个文件。",
    "check.model-no-config.problem": "{path} 中没有 config.json：它不是 Hugging Face 模型目录。",
    "check.model-no-config.fix": "请输入包含 config.json 的目录（对于下载的快照，是 snapshots/<hash> 文件夹）。",
    "check.model-config-unreadable.problem": "{file} 无法按 JSON 读取（{error}）。",
    "check.model-config-unreadable.fix": "请重新复制模型：它的 config.json 已损坏或不完整。",
    "check.model-no-weights.problem": "{path} 有 config.json，但没有权重文件（*.safetensors、*.bin）。",
    "check.model-no-weights.fix": "请把权重文件复制到该目录（下载可能不完整）。",
    "check.model-no-tokenizer.problem": "{path} 中没有分词器文件（tokenizer.json、tokenizer_config.json 等）。",
    "check.model-no-tokenizer.fix": "请把模型下载中的分词器文件复制到该目录。",
    "check.template-unknown.problem": "LLaMA-Factory 不认识模板 {template}。你是不是想用 {suggestions}？",
    "check.template-unknown.problem.2": "LLaMA-Factory 不认识模板 {template}。",
    "check.template-unknown.fix": "请选择模型所属系列的模板（llama3、qwen、mistral、gemma 等）；基础模型可以用 `default`。",
    "check.dataset-dir-missing.problem": "没有设置数据集目录。",
    "check.dataset-dir-missing.fix": "请输入包含 dataset_info.json 和数据文件的目录。",
    "check.dataset-dir-not-found.problem": "数据集目录 {path} 不存在或不是目录。",
    "check.dataset-dir-not-found.fix": "请输入包含 dataset_info.json 的目录。",
    "check.dataset-info-missing.problem": "{path} 中没有 dataset_info.json（它列出该目录中的数据集）。",
    "check.dataset-info-missing.fix": "请添加 dataset_info.json（见 LLaMA-Factory 的 data/README.md），或选择已有该文件的目录。",
    "check.dataset-info-unreadable.problem": "{file} 无法按 JSON 映射读取（{error}）。",
    "check.dataset-info-unreadable.fix": "请修正 dataset_info.json 的 JSON 语法。",
    "check.dataset-missing.problem": "没有选择数据集。",
    "check.dataset-missing.fix": "请从 dataset_info.json 的数据集中选择一个：{names}。",
    "check.dataset-not-in-info.problem": "数据集 {name} 不在 {file} 中。",
    "check.dataset-not-in-info.fix": "你是不是想用 {suggestion}？可选：{names}。",
    "check.dataset-not-in-info.fix.2": "可选：{names}。",
    "check.dataset-entry-bad.problem": "dataset_info.json 中 {name} 的条目不是映射。",
    "check.dataset-entry-bad.problem.2": "dataset_info.json 中 {name} 的条目没有 file_name。",
    "check.dataset-entry-bad.fix": '请写成 {{"file_name": "..."}}。',
    "check.dataset-entry-bad.fix.2": "请填写数据文件名（相对于数据集目录）。",
    "check.dataset-hub-offline.problem": "数据集 {name} 需要从 Hub 下载（{hub}），而本机处于离线模式。",
    "check.dataset-hub-offline.fix": "请把它下载到 {directory} 中的一个文件，并在其条目中用 file_name 代替 Hub 地址。",
    "check.dataset-file-missing.problem": "数据集 {name} 指向的 {path} 不存在。",
    "check.dataset-file-missing.problem.2": "数据集 {name} 的文件夹 {path} 是空的。",
    "check.dataset-file-missing.fix": "请把数据文件放到该位置，或修改 dataset_info.json 中的 file_name。",
    "check.dataset-file-missing.fix.2": "请把数据文件放进去。",
    "check.dataset-file-unreadable.problem": "无法读取数据集文件 {path}：{problem}。",
    "check.dataset-file-unreadable.fix": "请修正该文件（一个由记录组成的 JSON 列表；.jsonl 则每行一个 JSON 对象）。",
    "check.bf16-unsupported.problem": "{preset} 不支持 bf16；使用 bf16 会在启动时失败或运行极慢。",
    "check.bf16-unsupported.fix": "请把精度设为 {precision}。",
    "check.fa2-on-cpu.problem": "FlashAttention-2 需要 GPU；本次运行在 CPU 上。",
    "check.fa2-on-cpu.fix": "请把 flash_attn 设为 sdpa 或 disabled。",
    "check.fa2-not-installed.problem": "flash_attn 设为 fa2，但没有安装 flash-attn 包：LLaMA-Factory 会退回默认的注意力实现。",
    "check.fa2-not-installed.fix": "请把 flash_attn 设为 sdpa（PyTorch 的融合注意力，在 ROCm 上也很快），或安装 ROCm 版的 flash-attn。",
    "check.qlora-needs-lora.problem": "{bits} 位量化（QLoRA）只能与 LoRA 一起使用，不能用于 {finetuning_type}。",
    "check.qlora-needs-lora.fix": "请把微调方式设为 lora，或把量化设为 none。",
    "check.qlora-on-cpu.problem": "QLoRA（bitsandbytes）需要 GPU；本次运行在 CPU 上。",
    "check.qlora-on-cpu.fix": "请把量化设为 none。",
    "check.qlora-not-offered.problem": "{preset} 不提供 {bits} 位 QLoRA（可用：{offered}）。",
    "check.qlora-not-offered.fix": "请把量化设为 none 或 {offered} 位。",
    "check.qlora-not-offered.fix.2": "请把量化设为 none。",
    "check.qlora-no-bitsandbytes.problem": "{bits} 位 QLoRA 需要 bitsandbytes，而当前环境没有安装。",
    "check.qlora-no-bitsandbytes.fix": "请安装 ROCm 版 bitsandbytes（ROCm 6 上 pip install bitsandbytes>=0.45），或把量化设为 none。",
    "check.memory-will-not-fit.problem": "估计每个设备需要 {estimate} GiB 内存，超过了 {preset} 的容量（{vram} GiB）：训练会因内存不足而停止。",
    "check.memory-will-not-fit.fix": "{fix}",
    "check.runs-dir-not-dir.problem": "{path} 是文件，不是目录。",
    "check.runs-dir-not-dir.problem.2": "无法创建 {path}：{existing} 是一个文件。",
    "check.runs-dir-not-dir.fix": "请用 --runs-dir 指定一个目录来启动应用。",
    "check.runs-dir-not-dir.fix.2": "请用 --runs-dir 指定一个你有写权限的目录来启动应用。",
    "check.runs-dir-not-writable.problem": "{path} 不可写（{where} 不允许当前用户写入）。",
    "check.runs-dir-not-writable.fix": "请用 --runs-dir 指定一个你有写权限的目录来启动应用，或修改其权限。",
    "check.runs-dir-low-space.problem": "{path} 下只剩 {free} GiB 可用空间；检查点可能放不下。",
    "check.runs-dir-low-space.fix": "请释放一些磁盘空间，或用 --runs-dir 指向更大的磁盘。",
    "check.yaml-too-large.problem": "文件大小为 {size} 字节；训练配置通常只有几 kB（上限 {limit}）。",
    "check.yaml-too-large.fix": "请导入训练 YAML 本身，而不是数据集或日志。",
    "check.yaml-empty.problem": "文件是空的。",
    "check.yaml-empty.fix": "请粘贴或选择一个 LLaMA-Factory 训练 YAML。",
    "check.yaml-syntax.problem": "这不是有效的 YAML（第 {line} 行，第 {column} 列）：此处不能出现“键: 值”（通常是缩进不对，或值里有未加引号的“: ”）。",
    "check.yaml-syntax.problem.2": "这不是有效的 YAML（第 {line} 行，第 {column} 列）：这一行缺少 ':'（每行应写成 key: value）。",
    "check.yaml-syntax.problem.3": "这不是有效的 YAML（第 {line} 行，第 {column} 列）：字符 {character} 不能出现在这里（缩进只能用空格，不能用 Tab；以特殊字符开头的值要加引号）。",
    "check.yaml-syntax.problem.4": "这不是有效的 YAML（第 {line} 行，第 {column} 列）：文件意外结束（通常是引号或括号没有闭合）。",
    "check.yaml-syntax.problem.5": "这不是有效的 YAML（第 {line} 行，第 {column} 列）：缩进不一致：上一块应在此结束，却遇到了 {found}。",
    "check.yaml-syntax.problem.6": "这不是有效的 YAML（第 {line} 行，第 {column} 列）：这里应为 ',' 或 ']'，却遇到了 {found}（通常是方括号没有闭合，或少了逗号）。",
    "check.yaml-syntax.problem.7": "这不是有效的 YAML（第 {line} 行，第 {column} 列）：这里应为 ',' 或 '}}'，却遇到了 {found}（通常是花括号没有闭合，或少了逗号）。",
    "check.yaml-syntax.problem.8": "这不是有效的 YAML（第 {line} 行，第 {column} 列）：这里应是文档的开头（'<document start>'），却遇到了 {found}（通常是第一行多了缩进，与后面各行没有对齐）。",
    "check.yaml-syntax.problem.9": "这不是有效的 YAML（第 {line} 行，第 {column} 列）：这里应为 {expected}，却遇到了 {found}（通常是方括号或花括号没有闭合，或少了逗号）。",
    "check.yaml-syntax.problem.10": "这不是有效的 YAML（第 {line} 行，第 {column} 列）：这里应为 {expected}，却遇到了 {found}。",
    "check.yaml-syntax.problem.11": "这不是有效的 YAML（第 {line} 行，第 {column} 列）：引用了未定义的锚点 {alias}。",
    "check.yaml-syntax.problem.12": "这不是有效的 YAML（第 {line} 行，第 {column} 列）：同一个锚点名（&name）定义了两次。",
    "check.yaml-syntax.problem.13": "这不是有效的 YAML（第 {line} 行，第 {column} 列）：键不能是列表或映射。",
    "check.yaml-syntax.problem.14": "这不是有效的 YAML（第 {line} 行，第 {column} 列）：双引号字符串里有未知的转义字符 {character}（路径中的反斜杠请改用单引号括起来）。",
    "check.yaml-syntax.problem.15": "这不是有效的 YAML（第 {line} 行，第 {column} 列）：不支持标签 {tag}（训练 YAML 不能使用以 ! 开头的标签）。",
    "check.yaml-syntax.problem.16": "这不是有效的 YAML（第 {line} 行，第 {column} 列）：文件中有第二个 YAML 文档（在“---”之后）；训练 YAML 只能有一个文档。",
    "check.yaml-syntax.problem.17": "这不是有效的 YAML：含有不允许的控制字符 {character}（这可能是二进制文件，而不是文本）。",
    "check.yaml-syntax.problem.18": "这不是有效的 YAML（第 {line} 行，第 {column} 列）：{error}。",
    "check.yaml-syntax.problem.19": "这不是有效的 YAML：{error}。",
    "check.yaml-syntax.fix": "请修正该处的语法（用空格缩进，每行一个 `key: value`）。",
    "check.yaml-not-mapping.problem": "文件内容是一个列表，而不是“键: 值”的映射。",
    "check.yaml-not-mapping.problem.2": "文件里只有注释或 null，没有“键: 值”的映射。",
    "check.yaml-not-mapping.problem.3": "文件内容是单个 {type} 值，而不是“键: 值”的映射。",
    "check.yaml-not-mapping.fix": "训练 YAML 每行写一个 `key: value`，例如 `learning_rate: 1.0e-4`。",
    "check.yaml-duplicate-key.problem": "`{key}` 出现了不止一次；llamafactory-cli 会拒绝这个文件。",
    "check.yaml-duplicate-key.fix": "只保留一行 `{key}`。",
    "check.yaml-key-not-text.problem": "键 {key} 不是名称。",
    "check.yaml-key-not-text.fix": "键应是 LLaMA-Factory 的参数名，例如 learning_rate。",
    "check.yaml-too-many-values.problem": "文件展开后的值太多（YAML 锚点或过深的嵌套）。",
    "check.yaml-too-many-values.fix": "训练 YAML 只需普通的 `key: value` 行；请删除锚点（&name / *name）。",
    "check.yaml-disable-flash-attn.problem": "`disable_flash_attn` 不是 LLaMA-Factory 的键（它已改名）；解析器会拒绝这个文件。",
    "check.yaml-disable-flash-attn.fix": "请改写为 `flash_attn: disabled`。",
    "check.yaml-disable-flash-attn.fix.2": "请删除这一行（默认就是 `flash_attn: auto`）。",
    "check.yaml-compute-type.problem": "`compute_type` 是 LlamaBoard 界面上的表单字段，不是 YAML 键；解析器会拒绝这个文件。",
    "check.yaml-compute-type.fix": "请删除它（bf16 / fp16 已经指定了精度）。",
    "check.yaml-compute-type.fix.2": "请改写为 `pure_bf16: true` 和 `bf16: true`。",
    "check.yaml-compute-type.fix.3": "请改写为 `bf16: true`。",
    "check.yaml-compute-type.fix.4": "请改写为 `fp16: true`。",
    "check.yaml-compute-type.fix.5": "请删除它（没有 bf16/fp16 键即为 fp32）。",
    "check.yaml-compute-type.fix.6": "请删除它，并设置 `bf16: true`（或 `fp16: true`）。",
    "check.yaml-compute-device.problem": "没有 `compute_device` 这个键。在 AMD GPU 上无需设置：ROCm 版 PyTorch 自己就使用 `cuda` 这个设备名。",
    "check.yaml-compute-device.fix": "请删除它（如果要改在 CPU 上训练，请设置 `use_cpu: true`）。",
    "check.yaml-ddp-backend.problem": "ddp_backend {value} 不是有效的后端。在 ROCm 上，AMD 的 RCCL 是通过 `nccl` 后端使用的。",
    "check.yaml-ddp-backend.fix": "请改写为 `ddp_backend: nccl`，或删除它（在 GPU 上默认就会选择 nccl）。",
    "check.yaml-flash-attn-boolean.problem": "YAML 会把 `flash_attn: {written}` 读成布尔值 {boolean}，而 LLaMA-Factory 不接受布尔值。",
    "check.yaml-flash-attn-boolean.fix": "请改写为 `flash_attn: {value}`（可选值：{choices}）。",
    "check.yaml-flash-attn-choice.problem": "flash_attn {value} 不是 {choices} 之一。",
    "check.yaml-flash-attn-choice.fix": "请改写为 `flash_attn: {target}`。",
    "check.yaml-flash-attn-choice.fix.2": "请从 {choices} 中选择一个。",
    "check.yaml-device-map.problem": "`device_map` 不是训练用的键：LLaMA-Factory 会自行放置模型（每个 GPU 一份副本），并拒绝这个文件。",
    "check.yaml-device-map.fix": "请删除它。如需把大模型分布到多个 GPU 上，请使用 DeepSpeed ZeRO-3（`deepspeed: ...ds_z3_config.json`）。",
    "check.yaml-quantization-device-map.problem": "训练量化模型时不能使用 device map（LLaMA-Factory 会拒绝）。",
    "check.yaml-quantization-device-map.fix": "请删除 quantization_device_map。",
    "check.yaml-bf16-and-fp16.problem": "bf16 和 fp16 都为 true；训练只能使用一种精度（transformers 不接受两者同时开启）。",
    "check.yaml-bf16-and-fp16.fix": "bf16 和 fp16 只能设置一个：保留 `{keep}: true`（{preset} 不支持 bf16）。",
    "check.yaml-bf16-and-fp16.fix.2": "bf16 和 fp16 只能设置一个：保留 `{keep}: true`（{preset} 支持 bf16）。",
    "check.yaml-bf16-and-fp16.fix.3": "bf16 和 fp16 只能设置一个：保留 `{keep}: true`。",
    "check.yaml-precision-unset.problem": "bf16 和 fp16 都没有设置：LLaMA-Factory 会以 fp32 训练，显存占用翻倍，速度也慢得多。",
    "check.yaml-precision-unset.fix": "请设置 `{precision}: true`。",
    "check.yaml-finetuning-qlora.problem": "不存在 `finetuning_type: qlora`：QLoRA 就是在量化模型上做 LoRA。",
    "check.yaml-finetuning-qlora.fix": "请改写为 `finetuning_type: lora` 和 `quantization_bit: 4`。",
    "check.yaml-do-train.problem": "do_train 不是 true：`llamafactory-cli train` 会加载所有内容，却什么也不训练。",
    "check.yaml-do-train.fix": "请设置 `do_train: true`。",
    "check.yaml-stage-not-sft.problem": "stage 为 {stage}；RocBoard 的表单只支持监督微调（sft）。",
    "check.yaml-stage-not-sft.fix": "请设置 `stage: sft`，或直接用 llamafactory-cli 运行这个文件。",
    "check.yaml-template-unset.problem": "没有设置 template：LLaMA-Factory 处理样本时不会加上模型的对话格式标记。",
    "check.yaml-template-unset.fix": "请设置模型所属系列的模板，例如 `template: llama3` 或 `template: qwen`。",
    "check.yaml-unknown-key.problem": "`{key}` 不是 LLaMA-Factory 的键；它的解析器会拒绝整个文件。",
    "check.yaml-unknown-key.fix": "你是不是想写 `{guess}`？请改成这个名字。",
    "check.yaml-unknown-key.fix.2": "请删除它（你是不是想写 `{guess}`？它已经设置过了）。",
    "check.yaml-unknown-key.fix.3": "请删除它。",
    "check.yaml-not-in-form.problem": "表单中没有 `{key}` 对应的字段：从表单启动的运行不会带上它。",
    "check.yaml-not-in-form.problem.2": "表单中的 {key} 没有 {value} 这个选项：从表单启动的运行会使用默认值。",
    "check.yaml-not-in-form.fix": "如果需要它，请用 llamafactory-cli 运行这个文件（见“导出”）。",
    "check.yaml-not-in-form.fix.2": "要保留它，请用 llamafactory-cli 运行这个文件（见“导出”）。",
    "check.lf-timeout.problem": "LLaMA-Factory 自身的检查在 {seconds} 秒内没有响应。",
    "check.lf-timeout.fix": "请在机器较空闲时重试，或跳过这项检查（--no-llamafactory）。",
    "check.lf-unavailable.problem": "LLaMA-Factory 自身的检查没能运行（退出码 {code}：{output}）。",
    "check.lf-unavailable.fix": "请确认当前 Python 环境中已安装 llamafactory（`llamafactory-cli version`）。",
    "check.lf-import-failed.problem": "此环境无法导入 LLaMA-Factory（{error}）；训练也会以同样的方式失败。",
    "check.lf-import-failed.fix": "请把 requirements.txt 中的版本安装到此环境（`make setup`）。",
    "check.lf-unknown-key.problem": "LLaMA-Factory 没有 `{key}` 这个键；它的解析器会拒绝整个文件。",
    "check.lf-unknown-key.fix": "请删除 `{key}`（你是不是想写 `{guess}`？它已经设置过了）。",
    "check.lf-unknown-key.fix.2": "请改名为 `{guess}`。",
    "check.lf-unknown-key.fix.3": "请删除 `{key}`。",
    "check.lf-bad-value.problem": "LLaMA-Factory 要求 `{key}` 是整数，不能是 {value}。",
    "check.lf-bad-value.problem.2": "LLaMA-Factory 要求 `{key}` 是数字，不能是 {value}。",
    "check.lf-bad-value.problem.3": "LLaMA-Factory 要求 `{key}` 是 true 或 false，不能是 {value}。",
    "check.lf-bad-value.problem.4": "LLaMA-Factory 要求 `{key}` 是文本值，不能是 {value}。",
    "check.lf-bad-value.problem.5": "LLaMA-Factory 要求 `{key}` 是 {choices} 之一，不能是 {value}。",
    "check.lf-bad-value.problem.6": "LLaMA-Factory 要求 `{key}` 是 {expected}，不能是 {value}。",
    "check.lf-bad-value.fix": "请把 `{key}` 设为整数。",
    "check.lf-bad-value.fix.2": "请把 `{key}` 设为数字。",
    "check.lf-bad-value.fix.3": "请把 `{key}` 设为 true 或 false。",
    "check.lf-bad-value.fix.4": "请把 `{key}` 设为文本值。",
    "check.lf-bad-value.fix.5": "请把 `{key}` 设为 {choices} 之一。",
    "check.lf-bad-value.fix.6": "请把 `{key}` 设为 {expected}。",
    "check.lf-rejected.problem": "bf16 和 fp16 都为 true。",
    "check.lf-rejected.problem.2": "LLaMA-Factory 不认识这个 finetuning_type。",
    "check.lf-rejected.problem.3": "quantization_bit（QLoRA）只能与 LoRA 一起使用。",
    "check.lf-rejected.problem.4": "训练量化模型时不能使用 device map。",
    "check.lf-rejected.problem.5": "没有指定数据集（dataset）。",
    "check.lf-rejected.problem.6": "没有指定模型（model_name_or_path）。",
    "check.lf-rejected.problem.7": "logging_steps 为 0。",
    "check.lf-rejected.problem.8": "save_steps 为 0。",
    "check.lf-rejected.problem.9": "LLaMA-Factory 拒绝了这个配置：{message}",
    "check.lf-rejected.fix": "bf16 和 fp16 只能有一个设为 true。",
    "check.lf-rejected.fix.2": "请使用 lora、freeze 或 full（QLoRA 就是 lora 加上 quantization_bit: 4）。",
    "check.lf-rejected.fix.3": "请设置 finetuning_type: lora，或删除 quantization_bit。",
    "check.lf-rejected.fix.4": "请删除 quantization_device_map。",
    "check.lf-rejected.fix.5": "请把 dataset 设为 dataset_info.json 中的某个名称。",
    "check.lf-rejected.fix.6": "请把 model_name_or_path 设为模型的本地目录。",
    "check.lf-rejected.fix.7": "请把 logging_steps 设为 1 或更大。",
    "check.lf-rejected.fix.8": "请把 save_steps 设为 1 或更大。",
    "check.lf-rejected.fix.9": "请按上面的消息修改 `{key}`。",
    "check.lf-rejected.fix.10": "请按上面的消息修改配置。",
    "check.bad-gpu-list.problem": "GPU 列表：{part} 既不是 GPU 编号，也不是 0-3 这样的范围。",
    "check.bad-gpu-list.fix": "请按 0,1,2,3 或 0-3 的格式列出 GPU 编号。",
    "check.bad-env-line.problem": "RCCL 设置：第 {number} 行（{line}）不是 NAME=value 格式。",
    "check.bad-env-line.fix": "请每行写一个 NAME=value。",
    "check.bad-strategy.problem": "并行方式 {strategy} 不是 {choices} 之一。",
    "check.bad-strategy.fix": "请选择 DDP、ZeRO-2 或 ZeRO-3。",
    "check.nproc-range.problem": "每节点进程数至少为 1，不能是 {value}。",
    "check.nproc-range.fix": "请为每个 GPU 设置一个进程。",
    "check.nnodes-range.problem": "节点数至少为 1，不能是 {value}。",
    "check.nnodes-range.fix": "请设置节点数。",
    "check.node-rank-range.problem": "节点序号 {rank} 不在 0..{last} 范围内。",
    "check.node-rank-range.fix": "节点应从 0 编号到 NNODES-1。",
    "check.bad-port.problem": "端口 {port} 不是有效的 TCP 端口。",
    "check.bad-port.fix": "请选择 1024 到 65535 之间的端口。",
    "check.privileged-port.problem": "监听端口 {port} 需要 root 权限。",
    "check.privileged-port.fix": "请选择 1024 到 65535 之间的端口。",
    "check.bad-timeout.problem": "集合通信超时必须是正数，不能是 {value} 秒。",
    "check.bad-timeout.fix": "除非确有需要，请使用 {default} 秒。",
    "check.no-master-addr.problem": "没有设置主节点地址。",
    "check.no-master-addr.fix": "请输入 0 号节点的主机名或 IP。",
    "check.loopback-master.problem": "MASTER_ADDR {address} 是本机的回环地址：其他节点无法访问它。",
    "check.loopback-master.fix": "请输入 0 号节点在各节点共用网络上的主机名或 IP。",
    "check.cpu-with-gpus.problem": "CPU 方案中指定了 GPU。",
    "check.cpu-with-gpus.fix": "请清空 GPU 列表，或退出 CPU 模式。",
    "check.zero-on-cpu.problem": "这里没有为 CPU 训练配置 DeepSpeed ZeRO。",
    "check.zero-on-cpu.fix": "在 CPU 上请使用 DDP。",
    "check.no-gpus.problem": "没有选择 GPU。",
    "check.no-gpus.fix": "请选择用于训练的 GPU 编号，例如 0,1。",
    "check.negative-gpu.problem": "GPU 编号不能是负数。",
    "check.negative-gpu.fix": "请使用 amd-smi / rocm-smi 列出的编号（0, 1, ...）。",
    "check.duplicate-gpu.problem": "有 GPU 被列出了两次。",
    "check.duplicate-gpu.fix": "每个 GPU 只列一次。",
    "check.nproc-over-gpus.problem": "在 {gpus} 个 GPU 上运行 {nproc} 个进程，会让两个 rank 共用一个 GPU，而 RCCL 不允许这样做。",
    "check.nproc-over-gpus.fix": "请把每节点进程数设为 {gpus}，或选择更多 GPU。",
    "check.idle-gpus.problem": "有 {idle} 个选中的 GPU 会闲置（{nproc} 个进程，{gpus} 个 GPU）。",
    "check.idle-gpus.fix": "请把每节点进程数设为 {gpus}。",
    "check.offload-without-zero.problem": "卸载（offload）是 DeepSpeed ZeRO 的功能；DDP 会忽略它。",
    "check.offload-without-zero.fix": "请选择 ZeRO-2 或 ZeRO-3，或关闭卸载（offload）。",
    "check.bad-env-name.problem": "{name} 不是有效的变量名。",
    "check.bad-env-name.fix": "请写成 NAME=value，名称只能包含字母、数字和 _。",
    "check.env-overrides-plan.problem": "{name} 由多 GPU 设置决定；在这里设置会与之冲突。",
    "check.env-overrides-plan.fix": "请从 RCCL 设置中删除 {name}，改用多 GPU 设置中对应的字段。",
    "check.bad-env-value.problem": "{name} 的值跨越了多行。",
    "check.bad-env-value.fix": "请把值写在一行内。",
    # diagnose.py, by rule name
    "diagnose.device_permission_denied.cause": "当前用户无权打开 GPU 设备 /dev/kfd 和 /dev/dri/renderD*，因此 ROCm 找不到 GPU。",
    "diagnose.device_permission_denied.fix": "把你的用户加入 video 和 render 组：`sudo usermod -aG video,render $USER`，然后注销并重新登录（或重启）。在 Docker 中，传入 `--device /dev/kfd --device /dev/dri`，并用 `group_add` 加入宿主机 video 和 render 组的数字 ID（`getent group video render`）。",
    "diagnose.invalid_device_function.cause": "当前的 PyTorch/ROCm 构建没有针对你的 GPU 架构（gfx target）的代码，因此第一次启动内核就失败了。",
    "diagnose.invalid_device_function.fix": "让 ROCm 使用最接近的受支持架构的代码：gfx1101/gfx1102/gfx1103（RX 7800/7700/7600）用 `HSA_OVERRIDE_GFX_VERSION=11.0.0`，gfx1031/gfx1032（RX 6700/6600）用 `HSA_OVERRIDE_GFX_VERSION=10.3.0`。在预设的 env 中设置，或在启动应用前设置；`python app.py doctor` 会显示你的架构。否则请安装支持你的架构的 torch 构建。",
    "diagnose.torch_without_rocm.cause": "安装的 PyTorch 是 CPU 版或 NVIDIA CUDA 版，无法使用 AMD GPU。",
    "diagnose.torch_without_rocm.fix": "安装 ROCm 版 torch（https://pytorch.org，选择 ROCm：`pip install torch --index-url https://download.pytorch.org/whl/rocm6.4`），或使用 Docker 镜像（`docker compose up`，见 docs/docker.md）。如果要在 CPU 上运行，请选择 CPU 演示预设。",
    "diagnose.no_gpu_visible.cause": "PyTorch 是 ROCm 版，但看不到任何 GPU：驱动没有加载、设备无法访问，或 HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES 隐藏了所有 GPU。",
    "diagnose.no_gpu_visible.fix": "运行 `python app.py doctor`。确认 `rocminfo` 能列出你的 GPU、你的用户在 video 和 render 组中，并且 HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES 指向存在的 GPU（或取消设置它们）。",
    "diagnose.gpu_out_of_memory.cause": "GPU 显存不足。",
    "diagnose.gpu_out_of_memory.fix": "减小批大小（同时增大梯度累积以保持等效批大小）或截断长度，开启梯度检查点，或使用 QLoRA（4 位）。如果报错说大量显存已保留但未分配，请设置 `PYTORCH_HIP_ALLOC_CONF=expandable_segments:True`。",
    "diagnose.killed_out_of_host_memory.cause": "训练进程被 SIGKILL 终止；如果不是有人手动停止，这就是内核的 OOM killer：机器的内存（RAM）耗尽了。",
    "diagnose.killed_out_of_host_memory.fix": "用 `sudo dmesg | grep -i -E 'killed process|out of memory'` 确认。然后减小批大小、截断长度或 `preprocessing_num_workers`，换用更小的模型，或增加内存/交换空间；GPU 训练可使用 QLoRA，以减少在内存中暂存的模型数据。",
    "diagnose.collective_timeout.cause": "多 GPU 集合通信（RCCL/NCCL）超时：某个 GPU 或节点不再响应其他进程。",
    "diagnose.collective_timeout.fix": "如果某一步较慢（数据加载、保存、评估）阻塞了某个 rank，请增大 `ddp_timeout`（秒）；多节点时把 `NCCL_SOCKET_IFNAME` 设为连接各节点的网卡并检查防火墙；用 `NCCL_DEBUG=INFO` 运行一次，看是哪个 rank 卡住。",
    "diagnose.bf16_unsupported.cause": "请求了 bf16，但该设备（或未设置 `use_cpu` 的 CPU）不支持。",
    "diagnose.bf16_unsupported.fix": "在不支持 bf16 的 GPU（RDNA2 如 gfx1030、MI50/gfx906）上使用 fp16；在 CPU 上使用 fp32 并设置 `use_cpu: true`（CPU 演示预设）。如果这台机器有 AMD GPU，训练程序可能没有识别到它：请运行 `python app.py doctor`。",
    "diagnose.loss_not_finite.cause": "损失或梯度范数变成了 NaN 或无穷大：训练已发散，权重已无用。",
    "diagnose.loss_not_finite.fix": "降低学习率（例如降为十分之一），并保持梯度裁剪开启（`max_grad_norm: 1.0`）；在支持 bf16 的 GPU 上优先使用 bf16 而不是 fp16；尝试 `flash_attn: disabled` 以排除注意力内核的问题。",
    "diagnose.model_not_cached_offline.cause": "模型不在本地磁盘上，且无法下载（离线模式或没有网络）。",
    "diagnose.model_not_cached_offline.fix": "在有网络时下载一次（`hf download ORG/NAME`），或把模型路径指向一个包含 config.json、权重和分词器文件的本地文件夹。",
    "diagnose.model_not_found.cause": "模型路径既不是存在的文件夹，也不是 Hugging Face Hub 上的模型名。",
    "diagnose.model_not_found.fix": "检查模型路径是否有拼写错误：绝对路径必须在本机上存在并包含 config.json；Hub 模型名形如 `Qwen/Qwen2.5-0.5B-Instruct`。",
    "diagnose.tokenizer_not_loadable.cause": "无法加载分词器：模型文件夹中没有分词器文件（tokenizer.json，或 tokenizer.model 加 tokenizer_config.json），或路径错误。",
    "diagnose.tokenizer_not_loadable.fix": "把模型路径指向同时包含分词器文件的文件夹（完整下载的模型，而不仅仅是权重）。",
    "diagnose.dataset_undefined.cause": "数据集文件夹的 dataset_info.json 中没有定义这个数据集名。",
    "diagnose.dataset_undefined.fix": "使用 `dataset_dir`/dataset_info.json 中列出的名称，或在其中为你的文件添加条目（file_name、formatting、columns）；并确认 `dataset_dir` 指向正确的文件夹。",
    "diagnose.template_unknown.cause": "LLaMA-Factory 不认识这个对话模板名。",
    "diagnose.template_unknown.fix": "从 LLaMA-Factory 的列表中为你的模型系列选择模板（例如 `llama3`、`qwen`、`mistral`、`gemma`）；名称须完全一致（是 `llama3`，不是 `llama-3`）。",
    "diagnose.unknown_config_key.cause": "配置中有 LLaMA-Factory 不认识的键（通常是拼写错误，或来自其他版本的键）。",
    "diagnose.unknown_config_key.fix": "删除或改正列出的键；`python app.py check FILE.yaml` 会列出当前版本接受的所有键。",
}

CATALOGUE: dict[str, dict[str, str]] = {
    "en": _EN,
    "zh-CN": _ZH_CN,
    "zh": _ZH_CN,  # a browser that says only "zh" gets Simplified Chinese too
}


# --- lookup -----------------------------------------------------------------------------------


class _KeepMissing(dict):
    """format_map values that leave an unknown placeholder as written instead of failing."""

    def __missing__(self, name: str) -> str:
        return "{" + name + "}"


def canonical_locale(tag: str | None) -> str | None:
    """"zh", "zh-cn", "zh_CN", "zh-Hans-CN", "zh-TW" -> "zh-CN"; "en-GB" -> "en"; else None."""
    if not tag:
        return None
    language = tag.strip().replace("_", "-").split("-")[0].lower()
    if language == "zh":
        return "zh-CN"  # the only Chinese catalogue; better than English for zh-TW readers too
    if language == "en":
        return "en"
    return None


def translate(key: str, locale: str | None = DEFAULT_LOCALE, **values: Any) -> str:
    """The text of `key` in `locale` (else English, else the key itself), placeholders filled."""
    return _fill(key, locale, values)


def _fill(key: str, locale: str | None, values: Mapping[str, Any]) -> str:
    """`translate` with the values as a mapping: a template may then name a placeholder
    `{key}` or `{locale}` (the YAML rules speak of keys) without clashing with the arguments."""
    canonical = canonical_locale(locale) or DEFAULT_LOCALE
    text = CATALOGUE[canonical].get(key)
    if text is None:
        text = CATALOGUE[DEFAULT_LOCALE].get(key, key)
    if not values:
        return text.replace("{{", "{").replace("}}", "}") if "{{" in text or "}}" in text else text
    try:
        return string.Formatter().vformat(text, (), _KeepMissing(values))
    except (ValueError, IndexError):  # a malformed template: show it rather than fail the page
        return text


def pick_locale(accept_language: str | None, override: str | None = None) -> str:
    """The locale to speak: the page's switch when set, else the browser's preference
    (an Accept-Language header, quality values honoured), else English."""
    chosen = canonical_locale(override) if override and override.lower() not in ("auto", "browser") else None
    if chosen:
        return chosen
    candidates: list[tuple[float, int, str]] = []
    for position, part in enumerate((accept_language or "").split(",")):
        tag, _, params = part.strip().partition(";")
        quality = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        if quality > 0 and tag.strip() not in ("", "*"):
            candidates.append((-quality, position, tag.strip()))
    for _, _, tag in sorted(candidates):
        locale = canonical_locale(tag)
        if locale:
            return locale
    return DEFAULT_LOCALE


def placeholders(text: str) -> set[str]:
    """The `{name}` fields of a template (with their format spec, so "{x:.0f}" != "{x}")."""
    return {f"{name}:{spec}" if spec else name for _, name, spec, _ in string.Formatter().parse(text) if name is not None}


def ui_translations() -> dict[str, dict[str, str]]:
    """The static page text for `gr.I18n(**ui_translations())`, one dict per locale."""
    return {locale: {k: v for k, v in texts.items() if k.startswith(UI_PREFIXES)} for locale, texts in CATALOGUE.items()}


# --- findings ---------------------------------------------------------------------------------


@lru_cache(maxsize=None)
def _template_pattern(template: str) -> re.Pattern[str]:
    """A regex that matches what `template` renders to, capturing each placeholder's value."""
    parts: list[str] = []
    seen: set[str] = set()
    for literal, name, _, _ in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if name is None:
            continue
        if name in seen:
            parts.append(f"(?P={name})")
        else:
            seen.add(name)
            parts.append(f"(?P<{name}>.*?)")
    return re.compile("".join(parts), re.DOTALL)


def _variant_keys(rule: str, part: str) -> list[str]:
    base = f"check.{rule}.{part}"
    return [key for key in CATALOGUE[DEFAULT_LOCALE] if key == base or key.startswith(base + ".")]


# Placeholders whose values are themselves catalogue words: a form field's English name
# ("Batch size") or a run state ("running") is put into the other language's words too.
_WORD_PLACEHOLDERS = {"field": "field.", "state": "state."}


def _localize_word(name: str, value: str, locale: str) -> str:
    prefix = _WORD_PLACEHOLDERS.get(name)
    if prefix is None:
        return value
    for key, english in CATALOGUE[DEFAULT_LOCALE].items():
        if key.startswith(prefix) and english == value:
            return translate(key, locale)
    return value


def translate_message(rule: str, part: str, english: str, locale: str) -> str:
    """One message of a config rule (`part` is "problem" or "fix") in `locale`.

    The English message is matched against the rule's English templates; the values found
    are put into the same template of `locale`. Without a match it stays in English."""
    canonical = canonical_locale(locale) or DEFAULT_LOCALE
    if canonical == DEFAULT_LOCALE or not rule:
        return english
    for key in _variant_keys(rule, part):
        match = _template_pattern(CATALOGUE[DEFAULT_LOCALE][key]).fullmatch(english)
        if match is None:
            continue
        values = {name: _localize_word(name, value, canonical) for name, value in match.groupdict().items()}
        return _fill(key, canonical, values)
    return english


def translate_finding(finding: Finding, locale: str) -> Finding:
    """`finding` with its problem and fix in `locale` (unchanged where no template fits)."""
    from dataclasses import replace

    problem = translate_message(finding.rule, "problem", finding.problem, locale)
    fix = translate_message(finding.rule, "fix", finding.fix, locale)
    if problem == finding.problem and fix == finding.fix:
        return finding
    return replace(finding, problem=problem, fix=fix)


def translate_diagnosis(rule: str, cause: str, fix: str, locale: str) -> tuple[str, str]:
    """(cause, fix) of a diagnose.py rule in `locale`; as given when the rule is unknown."""
    canonical = canonical_locale(locale) or DEFAULT_LOCALE
    if canonical == DEFAULT_LOCALE or f"diagnose.{rule}.cause" not in CATALOGUE[canonical]:
        return cause, fix
    return translate(f"diagnose.{rule}.cause", canonical), translate(f"diagnose.{rule}.fix", canonical)


def check_rule_names(catalogue: Mapping[str, str] | None = None) -> set[str]:
    """The config rule names the catalogue has messages for."""
    keys = catalogue or CATALOGUE[DEFAULT_LOCALE]
    return {key.split(".")[1] for key in keys if key.startswith("check.")}


__all__ = [
    "CATALOGUE",
    "DEFAULT_LOCALE",
    "LOCALES",
    "canonical_locale",
    "check_rule_names",
    "pick_locale",
    "placeholders",
    "translate",
    "translate_diagnosis",
    "translate_finding",
    "translate_message",
    "ui_translations",
]
