"""See what the trainer will see of a dataset: each example's length in tokens, and one
example as the trainer gets it (which tokens are trained on), with the chosen model's own
tokenizer and LLaMA-Factory's own template and preprocessing.

The tokenizing runs in a helper process (backend/data/lengths_worker.py): a fork of the
app's long-lived LLaMA-Factory helper when there is one (backend/llama_factory/zygote.py, op
"lengths", tens of milliseconds to start), else the worker one-shot (an argument list, the
allow-listed environment, a timeout, its output bounded). This module imports only the
standard library and RocBoard's light modules: the web process stays light.

- `measure_lengths(...)` -> (LengthReport | None, findings): the lengths of at most
  `max_examples` examples from the start of the dataset, the share longer than cutoff_len,
  the smallest cutoff that keeps 95 % / 99 % of them whole, one rendered example. Failures
  are findings (key "dataset", message ids `lengths-*`).
- `length_histogram(report, locale)`: a plotly figure as a JSON-able dict.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.findings import Finding
from backend.i18n import Message, translate
from backend.llama_factory.check import last_json_line
from backend.security.child_env import child_env

WORKER = Path(__file__).resolve().with_name("lengths_worker.py")
KEY = "dataset"  # the form field every finding here is about
STAGES = ("sft", "pt")
MAX_EXAMPLES_LIMIT = 100_000  # lengths_worker.MAX_EXAMPLES_LIMIT
MAX_ANSWER_BYTES = 8 * 1024 * 1024  # the one-shot worker's stdout read at most
STDERR_TAIL_BYTES = 4096
ERROR_CHARS = 500  # LLaMA-Factory's words inside a finding
MAX_DATASET_INFO_BYTES = 16 * 1024 * 1024
DATA_CONFIG = "dataset_info.json"
HISTOGRAM_BINS = 40


@dataclass(frozen=True)
class ExampleSegment:
    text: str  # decoded with the template's special tokens
    trained: bool  # its labels are not IGNORE_INDEX: the model learns to produce it


@dataclass(frozen=True)
class LengthReport:
    counted: int  # examples measured (those LLaMA-Factory's preprocessing keeps)
    lengths: tuple[int, ...]  # tokens per example before truncation, in dataset order
    cutoff_len: int
    truncated_share: float  # of `counted`, longer than cutoff_len (0..1)
    keeps_95: int  # the smallest cutoff_len that keeps 95 % of the examples whole
    keeps_99: int
    example: tuple[ExampleSegment, ...]  # the first measured example, as the trainer sees it
    seconds: float  # wall time of the whole measurement, helper included
    total: int | None = None  # rows the dataset file holds, when known (may exceed `counted`)
    dropped: int = 0  # rows read that LLaMA-Factory drops as invalid (not in `counted`)
    example_cut: bool = False  # the rendered example was cut at the worker's EXAMPLE_CHARS


def smallest_cutoff(lengths: tuple[int, ...] | list[int], percent: int) -> int:
    """The smallest cutoff_len that keeps at least `percent` % of `lengths` whole (a length
    equal to the cutoff is not truncated)."""
    ordered = sorted(lengths)
    if not ordered:
        return 0
    whole = -(-percent * len(ordered) // 100)  # ceil, in integers
    return ordered[max(1, whole) - 1]


def report_from_answer(answer: dict[str, Any], cutoff_len: int, seconds: float) -> LengthReport:
    """A LengthReport from the worker's successful answer (pure)."""
    lengths = tuple(int(n) for n in answer["lengths"])
    counted = len(lengths)
    example = tuple(ExampleSegment(str(text), bool(trained)) for text, trained in answer.get("example", []))
    total = answer.get("total")
    return LengthReport(
        counted=counted,
        lengths=lengths,
        cutoff_len=cutoff_len,
        truncated_share=(sum(1 for n in lengths if n > cutoff_len) / counted) if counted else 0.0,
        keeps_95=smallest_cutoff(lengths, 95),
        keeps_99=smallest_cutoff(lengths, 99),
        example=example,
        seconds=round(seconds, 3),
        total=total if isinstance(total, int) else None,
        dropped=max(0, int(answer.get("read", counted)) - counted),
        example_cut=bool(answer.get("example_cut")),
    )


def measure_lengths(
    model_path: str,
    template: str,
    dataset_dir: str,
    dataset: str,
    cutoff_len: int,
    stage: str = "sft",
    max_examples: int = 2000,
    timeout_s: float = 180,
) -> tuple[LengthReport | None, list[Finding]]:
    """The token lengths of the first `max_examples` examples of `dataset` (a name in
    `dataset_dir`/dataset_info.json) as LLaMA-Factory's preprocessing for `stage` builds them
    with the model's tokenizer and `template`, against `cutoff_len`. (report, findings): the
    report is None when it could not be measured, and the findings say why."""
    if not isinstance(cutoff_len, int) or isinstance(cutoff_len, bool) or cutoff_len < 1:
        raise ValueError(f"cutoff_len must be a positive whole number, not {cutoff_len!r}")
    started = time.perf_counter()
    request, refused = _worker_request(model_path, template, dataset_dir, dataset, stage, max_examples)
    if refused is not None:
        return None, [refused]
    try:
        answer = _ask_helper(request, timeout_s)
        if answer is None:
            answer = _ask_one_shot(request, timeout_s)
    except TimeoutError:
        return None, [Finding.of(KEY, "lengths-timeout", severity="warning", seconds=f"{timeout_s:g}")]
    seconds = time.perf_counter() - started
    if not answer.get("ok"):
        return None, [_finding_from_error(answer.get("error") or {}, request, timeout_s)]
    report = report_from_answer(answer, cutoff_len, seconds)
    findings = []
    if report.dropped:
        findings.append(Finding.of(KEY, "lengths-dropped", severity="warning", dropped=report.dropped, read=report.dropped + report.counted, dataset=dataset))
    return report, findings


@dataclass(frozen=True)
class DataFingerprint:
    digest: str  # "sha256:<hex>": lengths_worker.py's FINGERPRINT_HEADER and fingerprint_update
    examples: int  # examples hashed (those LLaMA-Factory's preprocessing keeps)
    seconds: float


def fingerprint_dataset(
    model_path: str,
    template: str,
    dataset_dir: str,
    dataset: str,
    cutoff_len: int,
    stage: str = "sft",
    max_examples: int = MAX_EXAMPLES_LIMIT,
    timeout_s: float = 300,
    helper_only: bool = False,
) -> tuple[DataFingerprint | None, list[Finding]]:
    """The hash of `dataset`'s examples as LLaMA-Factory's preprocessing builds them for the
    trainer (the model's tokenizer, `template`, truncated at `cutoff_len`), the first
    `max_examples` of them, in the same helper process as measure_lengths. (None, findings)
    when it could not be computed. `helper_only`: only through the app's warm helper (a
    fork: no LLaMA-Factory import to pay), (None, []) when there is none."""
    started = time.perf_counter()
    request, refused = _worker_request(model_path, template, dataset_dir, dataset, stage, max_examples)
    if refused is not None:
        return None, [refused]
    request["cutoff_len"] = cutoff_len
    try:
        answer = _ask_helper(request, timeout_s)
        if answer is None:
            if helper_only:
                return None, []
            answer = _ask_one_shot(request, timeout_s)
    except TimeoutError:
        return None, [Finding.of(KEY, "lengths-timeout", severity="warning", seconds=f"{timeout_s:g}")]
    digest = answer.get("fingerprint")
    if not answer.get("ok") or not isinstance(digest, str):
        return None, [_finding_from_error(answer.get("error") or {}, request, timeout_s)]
    return DataFingerprint(digest, int(answer.get("counted", 0)), round(time.perf_counter() - started, 3)), []


def _worker_request(model_path: str, template: str, dataset_dir: str, dataset: str, stage: str, max_examples: int) -> tuple[dict[str, Any], Finding | None]:
    """The lengths worker's request for these examples, or ({}, what refuses them before any
    helper is asked). ValueError for arguments no
    caller should pass (an unknown stage, max_examples out of bounds)."""
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, not {stage!r}")
    if not isinstance(max_examples, int) or not 1 <= max_examples <= MAX_EXAMPLES_LIMIT:
        raise ValueError(f"max_examples must be in 1..{MAX_EXAMPLES_LIMIT}, not {max_examples!r}")
    refused = _refusal(model_path, template, dataset_dir, dataset)
    if refused is not None:
        return {}, refused
    request = {
        "model_path": os.path.abspath(model_path),
        "template": template,
        "dataset_dir": os.path.abspath(dataset_dir),
        "dataset": dataset,
        "stage": stage,
        "max_examples": max_examples,
    }
    return request, None


def _refusal(model_path: str, template: str, dataset_dir: str, dataset: str) -> Finding | None:
    """What can be told without a helper: no model folder, an unknown template, no such
    dataset in dataset_info.json (LLaMA-Factory would look for it on the hub)."""
    from backend.llama_factory.check import did_you_mean, static_names

    if not model_path or not os.path.isdir(model_path):
        return Finding.of(KEY, "lengths-no-model", path=os.path.abspath(str(model_path))[:300] if model_path else "")
    templates = static_names().templates
    if template not in templates:
        return Finding.of(KEY, "lengths-unknown-template", template=str(template)[:100], guess=did_you_mean(str(template), templates) or "llama3")
    if not dataset or "," in dataset or len(dataset) > 256:
        return Finding.of(KEY, "lengths-no-dataset", dataset=str(dataset)[:100], path=str(dataset_dir)[:300])
    info_path = Path(os.path.abspath(dataset_dir)) / DATA_CONFIG
    try:
        if info_path.stat().st_size > MAX_DATASET_INFO_BYTES:
            raise ValueError(f"{DATA_CONFIG} is larger than {MAX_DATASET_INFO_BYTES // (1024 * 1024)} MiB")
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Finding.of(KEY, "lengths-no-dataset", dataset=dataset, path=str(info_path)[:300])
    except (OSError, ValueError) as exc:
        return Finding.of(KEY, "lengths-dataset-unreadable", dataset=dataset, error=f"{info_path.name}: {exc}"[:ERROR_CHARS])
    except RecursionError:  # nested a thousand levels deep: not a dataset_info.json RocBoard wrote
        return Finding.of(KEY, "lengths-dataset-unreadable", dataset=dataset, error=Message("data.registry.too_deep", file=info_path.name))
    if not isinstance(info, dict) or dataset not in info:
        return Finding.of(KEY, "lengths-no-dataset", dataset=dataset, path=str(info_path)[:300])
    return None


def _ask_helper(request: dict[str, Any], timeout_s: float) -> dict[str, Any] | None:
    """The long-lived helper's answer, or None when there is none to ask."""
    from backend.llama_factory.helper_client import shared

    helper = shared()
    if helper is None:
        return None
    return helper.lengths(request, timeout_s)


def _ask_one_shot(request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """lengths_worker.py in a fresh process (imports llamafactory: several seconds)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            done = subprocess.run(
                [sys.executable, "-P", str(WORKER)],  # -P: its folder is not put first on sys.path
                input=json.dumps(request).encode("utf-8"),
                stdout=out,
                stderr=err,
                # The allow-listed environment only: no ROCBOARD_AUTH or other secret.
                env=child_env(),
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise TimeoutError(f"the lengths worker did not answer in {timeout_s:g} s") from exc
        out.seek(0)
        stdout = out.read(MAX_ANSWER_BYTES).decode("utf-8", "replace")
        err.seek(0, os.SEEK_END)
        err.seek(max(0, err.tell() - STDERR_TAIL_BYTES))
        stderr = err.read().decode("utf-8", "replace")
    answer = last_json_line(stdout)
    if answer is None:
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        return {"ok": False, "error": {"kind": "died", "type": "NoAnswer", "message": f"exit {done.returncode}: {tail}"}}
    return answer


def _finding_from_error(error: dict[str, Any], request: dict[str, Any], timeout_s: float) -> Finding:
    kind, kind_type = str(error.get("kind", "")), str(error.get("type", ""))
    said = str(error.get("message", "")).strip()[:ERROR_CHARS] or kind_type
    if kind_type == "Timeout":  # the helper killed the child at the deadline
        return Finding.of(KEY, "lengths-timeout", severity="warning", seconds=f"{timeout_s:g}")
    if kind in ("died", "") or kind_type == "NoAnswer":
        return Finding.of(KEY, "lengths-helper-died", severity="warning", output=said)
    if kind == "tokenizer":
        return Finding.of(KEY, "lengths-no-tokenizer", path=request["model_path"][:300], error=said)
    if kind == "template":
        return Finding.of(KEY, "lengths-unknown-template", template=request["template"][:100], guess="llama3")
    if kind == "dataset-name":
        return Finding.of(KEY, "lengths-no-dataset", dataset=request["dataset"], path=request["dataset_dir"][:300])
    if kind == "dataset":
        return Finding.of(KEY, "lengths-dataset-unreadable", dataset=request["dataset"], error=said)
    if kind == "no-examples":
        return Finding.of(KEY, "lengths-no-examples", dataset=request["dataset"], error=said)
    return Finding.of(KEY, "lengths-failed", severity="warning", error=f"{kind_type}: {said}"[:ERROR_CHARS])


# --- the chart ----------------------------------------------------------------------------------


def _nice_width(span: float, bins: int = HISTOGRAM_BINS) -> int:
    """A bin width of 1, 2 or 5 times a power of ten giving about `bins` bins over `span`."""
    raw = max(1.0, span / bins)
    power = 10 ** math.floor(math.log10(raw))
    for step in (1, 2, 5, 10):
        if step * power >= raw:
            return max(1, int(step * power))
    return max(1, int(10 * power))


def _bin_words(first: int, last: int) -> str:
    return str(last) if first == last else f"{first}–{last}"


def length_histogram(report: LengthReport, locale: str = "en") -> dict[str, Any]:
    """The token lengths as a plotly figure (a JSON-able dict): pre-binned bars, the bins
    lined up on cutoff_len so that each bar is wholly kept or wholly truncated (the
    truncated ones in their own colour), and a labelled vertical line at cutoff_len."""
    cutoff = report.cutoff_len
    lengths = report.lengths
    low = min([*lengths, cutoff])
    high = max([*lengths, cutoff])
    width = _nice_width(high - low + 1)
    counts: dict[int, int] = {}
    for n in lengths:
        # bin k holds lengths in (cutoff + (k-1)*width, cutoff + k*width]: k <= 0 is kept whole
        k = -((cutoff - n) // width)
        counts[k] = counts.get(k, 0) + 1
    data = []
    for name_key, colour, chosen in (("chart.lengths_whole", "rgb(31,119,180)", False), ("chart.lengths_truncated", "rgb(214,39,40)", True)):
        ks = sorted(k for k in counts if (k > 0) == chosen)
        data.append(
            {
                "type": "bar",
                "name": translate(name_key, locale),
                "x": [cutoff + (k - 0.5) * width for k in ks],
                "y": [counts[k] for k in ks],
                "width": [width] * len(ks),
                "customdata": [_bin_words(cutoff + (k - 1) * width + 1, cutoff + k * width) for k in ks],
                "hovertemplate": "%{customdata}: %{y}<extra></extra>",
                "marker": {"color": colour},
            }
        )
    layout = {
        "template": "plotly_white",
        "title": {"text": translate("chart.lengths_title", locale, counted=report.counted)},
        "xaxis": {"title": {"text": translate("chart.lengths_x", locale)}},
        "yaxis": {"title": {"text": translate("chart.lengths_y", locale)}},
        "bargap": 0.05,
        "barmode": "overlay",
        "height": 340,
        "margin": {"l": 60, "r": 30, "t": 60, "b": 50},
        "legend": {"orientation": "h", "x": 0, "y": 1.12, "xanchor": "left"},
        "shapes": [
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": cutoff,
                "x1": cutoff,
                "y0": 0,
                "y1": 1,
                "line": {"color": "rgb(214,39,40)", "width": 2, "dash": "dash"},
            }
        ],
        "annotations": [
            {
                "x": cutoff,
                "y": 1,
                "xref": "x",
                "yref": "paper",
                "xanchor": "left",
                "yanchor": "bottom",
                "showarrow": False,
                "text": translate("chart.lengths_cutoff", locale, cutoff=cutoff, share=f"{report.truncated_share * 100:.1f}"),
            }
        ],
    }
    return {"data": data, "layout": layout}


__all__ = [
    "DataFingerprint",
    "ExampleSegment",
    "fingerprint_dataset",
    "LengthReport",
    "length_histogram",
    "measure_lengths",
    "report_from_answer",
    "smallest_cutoff",
]
