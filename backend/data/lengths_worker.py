"""Helper process: what the trainer will see of a dataset, with the model's own tokenizer and
LLaMA-Factory's own template, loader, aligner and preprocessing.

The web process never imports llamafactory, transformers or datasets; it asks this file
instead (backend/data/lengths.py): a fork of the long-lived LLaMA-Factory helper runs
`measure` (backend/llama_factory/zygote.py, op "lengths"), or, with no helper, this file runs
one-shot by its path. It imports nothing from RocBoard, and nothing heavy at module level
(the helper imports it before forking to validate a request).

Protocol (one-shot): one JSON object on stdin,
    {"model_path": "/abs/model", "template": "llama3", "dataset_dir": "/abs/data",
     "dataset": "name", "stage": "sft" | "pt", "max_examples": 2000,
     "cutoff_len": 1024 (optional: truncate as the trainer does; default: no truncation)}
and one JSON object as the last line of stdout:
    {"ok": true, "total": 1234 | null, "read": n, "counted": m, "lengths": [...],
     "example": [[text, trained], ...], "example_cut": false, "seconds": 0.4,
     "fingerprint": "sha256:<hex>"}
or  {"ok": false, "error": {"kind", "type", "message"}}, kind one of "request", "tokenizer",
"template", "dataset-name", "dataset", "no-examples", "internal".

What is measured: each example's length in tokens exactly as LLaMA-Factory's preprocessing
builds it for the trainer (SupervisedDatasetProcessor for sft: template applied, prompt and
response; PretrainDatasetProcessor without packing for pt: the text, its bos/eos), before any
truncation (cutoff_len is set out of reach here; the web side compares with the real one).
Options that change the encoding (train_on_prompt, mask_history, tool_format,
default_system, enable_thinking) are LLaMA-Factory's defaults.

The data fingerprint (issue 29: "hash the preprocessing output and compare with the other
machine"): sha256 over FINGERPRINT_HEADER, then for every encoded example in dataset order
its number of input_ids and of labels (two little-endian uint32), its input_ids and its
labels (little-endian int32 each; IGNORE_INDEX stays -100; pt: labels = input_ids, as the
trainer's collator makes them). Fixed widths and byte order, no Python or numpy repr: the
same tokens give the same digest on any machine, and a changed token, label mask, order or
template gives another.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    # Run by its path: this folder holds RocBoard modules (backend/data/dataset_file.py) that must
    # not shadow the standard library's. The caller also passes -P.
    sys.path.pop(0)

import contextlib
import hashlib
import json
import runpy
import struct
import time
from typing import Any

STAGES = ("sft", "pt")
MAX_TEXT = 4096  # any string field of a request
MAX_NAME = 256  # template and dataset names
MAX_EXAMPLES_LIMIT = 100_000
DEFAULT_MAX_EXAMPLES = 2000
EXAMPLE_CHARS = 4000  # the rendered example is cut here
ERROR_CHARS = 1000
NO_CUTOFF = 1_000_000_000  # LLaMA-Factory truncates at cutoff_len: out of reach, we want the whole length
BATCH = 256
FINGERPRINT_HEADER = b"rocboard-data-fingerprint-v1\n"


def fingerprint_update(digest: Any, input_ids: list[int], labels: list[int]) -> None:
    """Feeds one encoded example to `digest` (a hashlib sha256): see the module's doc."""
    digest.update(struct.pack("<II", len(input_ids), len(labels)))
    digest.update(struct.pack(f"<{len(input_ids)}i", *input_ids))
    digest.update(struct.pack(f"<{len(labels)}i", *labels))


def validate_request(request: Any) -> tuple[dict[str, Any] | None, str]:
    """(the request's fields, checked and bounded; "") or (None, why it is refused)."""
    if not isinstance(request, dict):
        return None, "the request must be an object"
    clean: dict[str, Any] = {}
    for name, limit, path in (("model_path", MAX_TEXT, True), ("dataset_dir", MAX_TEXT, True), ("template", MAX_NAME, False), ("dataset", MAX_NAME, False)):
        value = request.get(name)
        if not isinstance(value, str) or not value or len(value) > limit or "\0" in value:
            return None, f"{name} must be a non-empty text of at most {limit} characters"
        if path and not os.path.isabs(value):
            return None, f"{name} must be an absolute path"
        if not path and ("," in value or "\n" in value or "/" in value):
            return None, f"{name} must be one name"
        clean[name] = value
    stage = request.get("stage", "sft")
    if stage not in STAGES:
        return None, f"stage must be one of {', '.join(STAGES)}"
    clean["stage"] = stage
    max_examples = request.get("max_examples", DEFAULT_MAX_EXAMPLES)
    if not isinstance(max_examples, int) or isinstance(max_examples, bool) or not 1 <= max_examples <= MAX_EXAMPLES_LIMIT:
        return None, f"max_examples must be a whole number in 1..{MAX_EXAMPLES_LIMIT}"
    clean["max_examples"] = max_examples
    cutoff_len = request.get("cutoff_len", NO_CUTOFF)
    if not isinstance(cutoff_len, int) or isinstance(cutoff_len, bool) or not 1 <= cutoff_len <= NO_CUTOFF:
        return None, f"cutoff_len must be a whole number in 1..{NO_CUTOFF}"
    clean["cutoff_len"] = cutoff_len
    return clean, ""


def quiet_environment() -> None:
    """No accelerator, no process group, no progress bars, no hub: the helpers' one quiet
    environment (backend/llama_factory/quiet_env.py, loaded by its path)."""
    runpy.run_path(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "llama_factory", "quiet_env.py"))["quiet_environment"]()


class _Failed(Exception):
    def __init__(self, kind: str, exc: BaseException | str):
        super().__init__(str(exc))
        self.kind = kind
        self.type = type(exc).__name__ if isinstance(exc, BaseException) else "Error"
        self.text = _message(exc) if isinstance(exc, BaseException) else exc


def _message(exc: BaseException) -> str:
    """The exception's words, with its cause's (LLaMA-Factory wraps the tokenizer's error)."""
    text = str(exc).strip() or type(exc).__name__
    cause = exc.__cause__
    if cause is not None and str(cause).strip() and str(cause).strip() not in text:
        text = f"{text} ({type(cause).__name__}: {str(cause).strip()})"
    return text[:ERROR_CHARS]


class _TrainingArgs:
    """What LLaMA-Factory's loader and aligner read of the training arguments (one process,
    no distributed run): building the real Seq2SeqTrainingArguments is not needed here."""

    local_process_index = 0
    process_index = 0
    world_size = 1
    seed = 42
    dataloader_num_workers = 0
    predict_with_generate = False
    should_log = False


def _segments(tokenizer, input_ids: list[int], labels: list[int], ignore_index: int) -> tuple[list[list[Any]], bool]:
    """The example as [text, trained] runs: consecutive tokens with the same trained-ness,
    each decoded on its own with its special tokens; cut at EXAMPLE_CHARS."""
    runs: list[tuple[bool, list[int]]] = []
    for token, label in zip(input_ids, labels, strict=True):
        trained = label != ignore_index
        if runs and runs[-1][0] == trained:
            runs[-1][1].append(token)
        else:
            runs.append((trained, [token]))
    out: list[list[Any]] = []
    used = 0
    for trained, ids in runs:
        text = tokenizer.decode(ids[: EXAMPLE_CHARS + 1], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if used + len(text) > EXAMPLE_CHARS or len(ids) > EXAMPLE_CHARS + 1:
            out.append([text[: EXAMPLE_CHARS - used], trained])
            return out, True
        out.append([text, trained])
        used += len(text)
    return out, False


def measure(request: dict[str, Any]) -> dict[str, Any]:
    """The answer for one (validated) request. Runs in a helper process only."""
    started = time.perf_counter()
    try:
        answer = _measure(request)
    except _Failed as failed:
        return {"ok": False, "error": {"kind": failed.kind, "type": failed.type, "message": failed.text[:ERROR_CHARS]}}
    except BaseException as exc:  # noqa: BLE001 - any failure is an answer
        return {"ok": False, "error": {"kind": "internal", "type": type(exc).__name__, "message": _message(exc)}}
    answer["seconds"] = round(time.perf_counter() - started, 3)
    return answer


def _measure(request: dict[str, Any]) -> dict[str, Any]:
    import datasets
    from llamafactory.data import get_template_and_fix_tokenizer
    from llamafactory.data import loader as lf_loader
    from llamafactory.data.parser import get_dataset_list
    from llamafactory.extras.constants import IGNORE_INDEX
    from llamafactory.hparams import DataArguments, ModelArguments
    from llamafactory.model import load_tokenizer

    datasets.disable_progress_bars()
    datasets.disable_caching()  # the aligner's map goes to a temporary file, not the cache
    stage = request["stage"]

    try:
        model_args = ModelArguments(model_name_or_path=request["model_path"])
        tokenizer_module = load_tokenizer(model_args)
    except Exception as exc:  # noqa: BLE001
        raise _Failed("tokenizer", exc) from exc
    tokenizer = tokenizer_module["tokenizer"]

    data_args = DataArguments(
        template=request["template"],
        dataset=[request["dataset"]],
        dataset_dir=request["dataset_dir"],
        cutoff_len=request.get("cutoff_len", NO_CUTOFF),
        max_samples=request["max_examples"],
        packing=False,
    )
    try:
        template = get_template_and_fix_tokenizer(tokenizer, data_args)
    except Exception as exc:  # noqa: BLE001
        raise _Failed("template", exc) from exc

    try:
        (dataset_attr,) = get_dataset_list([request["dataset"]], request["dataset_dir"])
    except Exception as exc:  # noqa: BLE001
        raise _Failed("dataset-name", exc) from exc
    if dataset_attr.ranking:
        # LLaMA-Factory's own refusal (loader._get_merged_dataset) for sft and pt.
        raise _Failed("dataset", "The dataset is not applicable in the current training stage.")

    # How many rows the file holds: the loader selects max_samples right after load_dataset.
    seen: dict[str, int] = {}
    real_load = lf_loader.load_dataset

    def load_and_count(*args: Any, **kwargs: Any):
        loaded = real_load(*args, **kwargs)
        try:
            seen["total"] = len(loaded)
        except TypeError:
            pass
        return loaded

    lf_loader.load_dataset = load_and_count
    try:
        dataset = lf_loader._load_single_dataset(dataset_attr, model_args, data_args, _TrainingArgs())
    except Exception as exc:  # noqa: BLE001
        raise _Failed("dataset", exc) from exc
    finally:
        lf_loader.load_dataset = real_load

    processor = lf_loader._get_dataset_processor(data_args, stage, template, tokenizer, tokenizer_module.get("processor"))
    lengths: list[int] = []
    example: list[list[Any]] = []
    example_cut = False
    read = 0
    digest = hashlib.sha256(FINGERPRINT_HEADER)
    for batch in dataset.iter(batch_size=BATCH):
        read += len(next(iter(batch.values()))) if batch else 0
        try:
            encoded = processor.preprocess_dataset(batch)
        except Exception as exc:  # noqa: BLE001 - an example LLaMA-Factory cannot encode
            raise _Failed("dataset", exc) from exc
        ids_list = encoded["input_ids"]
        lengths.extend(len(ids) for ids in ids_list)
        labels_list = encoded["labels"] if "labels" in encoded else ids_list
        for ids, labels in zip(ids_list, labels_list, strict=True):
            fingerprint_update(digest, list(ids), list(labels))
        if not example and ids_list:
            ids = list(ids_list[0])
            # pt: the trainer's collator trains on every token (labels = input_ids).
            labels = list(encoded["labels"][0]) if "labels" in encoded else ids
            example, example_cut = _segments(tokenizer, ids, labels, IGNORE_INDEX)
    if not lengths:
        raise _Failed("no-examples", f"{read} rows read, none LLaMA-Factory could encode")
    return {
        "ok": True,
        "total": seen.get("total"),
        "read": read,
        "counted": len(lengths),
        "lengths": lengths,
        "example": example,
        "example_cut": example_cut,
        "fingerprint": "sha256:" + digest.hexdigest(),
    }


def main() -> int:
    quiet_environment()
    real_stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # libraries print; stdout is for the answer
        try:
            request, why = validate_request(json.loads(sys.stdin.read(1024 * 1024)))
        except ValueError as exc:
            request, why = None, f"not JSON: {exc}"
        if request is None:
            answer = {"ok": False, "error": {"kind": "request", "type": "ValueError", "message": why}}
        else:
            answer = measure(request)
    real_stdout.write(json.dumps(answer) + "\n")
    real_stdout.flush()
    return 0 if answer["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
