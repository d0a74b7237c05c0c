"""What LLaMA-Factory's predict mode writes into `output/`, read bounded and without following
links (backend/runs/safe_files.py):

- predict_results.json: {"predict_bleu-4": 41.57, "predict_rouge-1": ..., "predict_rouge-2": ...,
  "predict_rouge-l": ..., "predict_runtime": 0.97, "predict_samples_per_second": ...}; the
  scores are percentages (0-100), averaged over the predicted rows.
- generated_predictions.jsonl: one {"prompt", "predict", "label"} object a line.
- trainer_log.jsonl: LogCallback's progress, every 5 prediction steps (batches):
  {"current_steps": 5, "total_steps": 71, "percentage": 7.04, ...}; read by
  backend.runs.trainer_log, the one reader of that file.

The `parse_*` functions are pure (tested on files captured from a real run); `read_*` open
the run's files.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.runs import OUTPUT_DIR, safe_files
from backend.runs.trainer_log import LogTail, log_path, parse_tail, read_log_tail

RESULTS_FILE = "predict_results.json"
PREDICTIONS_FILE = "generated_predictions.jsonl"
# The evaluation's request (source run, checkpoint, dataset, limits), beside config.yaml.
EVALUATION_FILE = "evaluation.json"

RESULTS_MAX_BYTES = 64 * 1024  # a handful of numbers
PREDICTIONS_READ_BYTES = 4 * 1024 * 1024  # the first rows of a file that may be large
MAX_ROWS = 1000  # read at most; the page shows fewer
TEXT_MAX_CHARS = 4000  # one prompt / prediction / reference as kept


@dataclass(frozen=True)
class Scores:
    """LLaMA-Factory's scores of one evaluation, in percent (0-100)."""

    bleu4: float | None
    rouge1: float | None
    rouge2: float | None
    rougel: float | None
    runtime_s: float | None = None
    samples_per_second: float | None = None

    def to_json(self) -> dict[str, float | None]:
        return {"bleu4": self.bleu4, "rouge1": self.rouge1, "rouge2": self.rouge2, "rougel": self.rougel, "runtime_s": self.runtime_s, "samples_per_second": self.samples_per_second}


@dataclass(frozen=True)
class Prediction:
    prompt: str  # as the model read it: the chat template around the user's text
    label: str  # the reference answer from the dataset
    predict: str  # what the model generated

    @property
    def user_text(self) -> str:
        return user_text(self.prompt)


@dataclass(frozen=True)
class PredictProgress:
    step: int  # prediction batches done
    total: int


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def parse_scores(text: str) -> Scores | None:
    """The scores of a predict_results.json; None when it is not one (no BLEU nor ROUGE)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    scores = Scores(
        bleu4=_number(data.get("predict_bleu-4")),
        rouge1=_number(data.get("predict_rouge-1")),
        rouge2=_number(data.get("predict_rouge-2")),
        rougel=_number(data.get("predict_rouge-l")),
        runtime_s=_number(data.get("predict_runtime")),
        samples_per_second=_number(data.get("predict_samples_per_second")),
    )
    if scores.bleu4 is None and scores.rougel is None:
        return None
    return scores


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else ("" if value is None else str(value))
    return text if len(text) <= TEXT_MAX_CHARS else text[:TEXT_MAX_CHARS] + "…"


def parse_predictions(data: bytes, max_rows: int = MAX_ROWS) -> list[Prediction]:
    """The first `max_rows` rows of a generated_predictions.jsonl (or of its first bytes: a
    last line cut short is left out); lines that are not prediction objects are skipped."""
    rows: list[Prediction] = []
    for line in data.split(b"\n"):
        if len(rows) >= max_rows:
            break
        try:
            record = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            continue
        if not isinstance(record, dict) or "predict" not in record:
            continue
        rows.append(Prediction(_text(record.get("prompt")), _text(record.get("label")), _text(record.get("predict"))))
    return rows


# Where the user's text starts and ends in a templated prompt, for the turn shapes of LLaMA-Factory's
# chat templates (llamafactory/data/template.py, `format_user`): the prompt predict mode writes is
# the template decoded with its special tokens, and its last user turn is the row's own prompt.
_USER_TURNS: tuple[tuple[re.Pattern[str], re.Pattern[str]], ...] = tuple(
    (re.compile(start), re.compile(end))
    for start, end in (
        (r"<\|start_header_id\|>user<\|end_header_id\|>\n\n", r"<\|eot_id\|>"),  # llama3
        (r"<\|im_start\|>user(?:<\|im_sep\|>|\n)", r"<\|im_end\|>"),  # chatml: qwen, yi, phi4, ...
        (r"<start_of_turn>user\n", r"<end_of_turn>"),  # gemma
        (r"<\|turn>user\n", r"<turn\|>"),  # gemma 4
        (r"<\|start\|>user<\|message\|>", r"<\|end\|>"),  # gpt-oss
        (r"<\|user\|>\n?", r"<\|end\|>|<\|endofuser\|>|</s>|\n?<\|assistant\|>"),  # phi, glm, zephyr
        (r"<｜User｜>|<\|User\|>", r"<｜Assistant｜>|<\|Assistant\|>"),  # deepseek
        (r"\[INST\]\s*", r"\s*\[/INST\]"),  # llama2, mistral
        (r"### (?:Instruction|User):\n|### Human: ", r"\n+### (?:Response|Assistant):"),  # alpaca and kin
        (r"\bUSER: ", r" ASSISTANT:"),  # vicuna
        (r"\bHuman: ", r"(?:</s>)?\s*Assistant:"),  # LLaMA-Factory's default
        (r"\bUser: ", r"\n+(?:Assistant|Falcon):"),
    )
)
_LLAMA2_SYSTEM = re.compile(r"^<<SYS>>.*?<</SYS>>\s*", re.DOTALL)  # llama2 puts the system prompt in the first [INST]
# A special token, for a template none of the shapes above knows: left out of what is shown.
_SPECIAL_TOKEN = re.compile(r"<\|[^|<>\n]{1,40}\|>|<｜[^｜\n]{1,40}｜>|</?s>|\[/?INST\]|<(?:start|end)_of_turn>")


def user_text(prompt: str) -> str:
    """The user's own text of a templated prompt: its last user turn without the template's
    tokens and role headers; for a template of another shape, the prompt without its special
    tokens (a prompt of plain text is itself)."""
    for start, end in _USER_TURNS:
        last = None
        for match in start.finditer(prompt):
            last = match
        if last is None:
            continue
        stop = end.search(prompt, last.end())
        text = _LLAMA2_SYSTEM.sub("", prompt[last.end() : stop.start() if stop else len(prompt)]).strip()
        if text:
            return text
    return _SPECIAL_TOKEN.sub("", prompt).strip() or prompt


def _progress(tail: LogTail) -> PredictProgress | None:
    if tail.step is None or tail.total_steps is None or tail.total_steps <= 0:
        return None
    return PredictProgress(tail.step, tail.total_steps)


def parse_progress(data: bytes) -> PredictProgress | None:
    """The progress a trainer_log.jsonl's end says (None before its first line)."""
    return _progress(parse_tail(data))


def format_number(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def format_scores(scores: Scores | None) -> str:
    """"BLEU-4 · ROUGE-L", e.g. "41.6 · 44.9"; "" without scores."""
    if scores is None:
        return ""
    return f"{format_number(scores.bleu4)} · {format_number(scores.rougel)}"


# --- reading a run's files ---------------------------------------------------------------


def read_scores(run_dir: Path) -> Scores | None:
    try:
        return parse_scores(safe_files.read_text(run_dir, f"{OUTPUT_DIR}/{RESULTS_FILE}", RESULTS_MAX_BYTES))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def read_predictions(run_dir: Path, max_rows: int = MAX_ROWS) -> list[Prediction]:
    try:
        with safe_files.opened(run_dir, f"{OUTPUT_DIR}/{PREDICTIONS_FILE}") as handle:
            data = handle.read(PREDICTIONS_READ_BYTES)
    except OSError:
        return []
    if len(data) == PREDICTIONS_READ_BYTES:
        data = data[: data.rfind(b"\n") + 1]  # the last line may be cut by the cap
    return parse_predictions(data, max(0, min(max_rows, MAX_ROWS)))


def read_progress(run_dir: Path) -> PredictProgress | None:
    return _progress(read_log_tail(log_path(run_dir), run_dir, loss=False))
