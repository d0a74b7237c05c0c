"""Why a run failed, in words a user can act on: train.log -> named cause + fix.

Each rule is a few regular expressions for the exact lines PyTorch, ROCm, RCCL, transformers,
huggingface_hub and LLaMA-Factory print (the wording was taken from the installed sources
and from real logs; tests/fixtures/logs/ holds one excerpt per rule). Its words, a cause and
a fix, are the catalogue's `diagnose.<rule name>.cause` / `.fix` (backend/i18n/locales/):
a diagnosis carries the rule's name, and the page renders it in the page's language.

The live watch (`loss_alert`) answers an `Alert`: a message id (`alert.<id>`) and its values.

Rules are listed most specific first, and a log can match several: "permission denied on
/dev/kfd" explains the "No HIP GPUs are available" printed after it, so it comes first.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

EVIDENCE_MAX_CHARS = 300
TAIL_LINES = 15
# exit codes of a process killed by SIGKILL: Popen's -9, or a shell's 128 + 9
SIGKILL_EXIT_CODES = (-9, 137)
# grad_norm this many times its median so far is an explosion, not noise
GRAD_NORM_EXPLOSION_FACTOR = 100.0
GRAD_NORM_MIN_HISTORY = 3


@dataclass(frozen=True)
class Diagnosis:
    rule: str  # the rule's name, e.g. "gpu_out_of_memory": its words are `diagnose.<rule>.*`
    evidence: str  # the log line that matched (or what was seen, e.g. "exit code -9")

    def text(self, locale: str = "en") -> tuple[str, str]:
        """(cause, fix) in `locale`."""
        from backend.i18n import translate

        return translate(f"diagnose.{self.rule}.cause", locale), translate(f"diagnose.{self.rule}.fix", locale)

    @property
    def cause(self) -> str:  # English, for the command line and the logs
        return self.text("en")[0]

    @property
    def fix(self) -> str:
        return self.text("en")[1]


@dataclass(frozen=True)
class FailureSummary:
    diagnosis: Diagnosis | None  # the most specific cause found, None when no rule matched
    diagnoses: list[Diagnosis] = field(default_factory=list)  # every cause found, most specific first
    error_lines: list[str] = field(default_factory=list)  # the last meaningful lines of the log
    exit_code: int | None = None


@dataclass(frozen=True)
class Rule:
    name: str  # its words are the catalogue's diagnose.<name>.cause / .fix
    patterns: tuple[re.Pattern[str], ...]
    # lines that must ALSO be somewhere in the log: a bare `KeyError: 'x'` names a missing
    # dataset column only when LLaMA-Factory's converter is in the traceback
    context: tuple[re.Pattern[str], ...] = ()


def _rule(name: str, patterns: Iterable[str], context: Iterable[str] = ()) -> Rule:
    return Rule(
        name,
        tuple(re.compile(p, re.IGNORECASE) for p in patterns),
        tuple(re.compile(p, re.IGNORECASE) for p in context),
    )


RULES: tuple[Rule, ...] = (
    _rule(
        "device_permission_denied",
        [
            r"/dev/(?:kfd|dri)\b.{0,40}Permission denied",
            r"Permission denied:? '?/dev/(?:kfd|dri)",
            r"is not member of \"?(?:video|render)\"? group",
        ],
    ),
    _rule(
        "invalid_device_function",
        [
            r"invalid device function",
            r"no kernel image is available for execution on the device",
            r"hipErrorNoBinaryForGpu",
            r"TensileLibrary\.dat: No such file or directory for GPU arch",
        ],
    ),
    _rule(
        "torch_without_rocm",
        [
            r"Torch not compiled with CUDA enabled",
            r"Found no NVIDIA driver on your system",
        ],
    ),
    _rule(
        "no_gpu_visible",
        [
            r"No HIP GPUs are available",
            r"No CUDA GPUs are available",
            r"hipErrorNoDevice",
        ],
    ),
    _rule(
        "gpu_out_of_memory",
        [
            r"(?:HIP|CUDA) out of memory",
            r"(?:HIP|CUDA) error: out of memory",
            r"hipErrorOutOfMemory",
        ],
    ),
    _rule(
        "killed_out_of_host_memory",
        [
            r"Signal 9 \(SIGKILL\) received by PID",
            r"exitcode\s*:\s*-9\b",
            r"^Killed$",
        ],
    ),
    _rule(
        "collective_timeout",
        [
            r"Watchdog caught collective operation timeout",
            r"\b[NR]CCL timeout",
            r"ran for \d+ milliseconds before timing out",
        ],
    ),
    _rule(
        "bf16_unsupported",
        [
            r"doesn't support bf16",
            r"does not support `pure_bf16`",
            r"bf16 mixed precision requires",
            r"not implemented for 'BFloat16'",
        ],
    ),
    _rule(
        "loss_not_finite",
        [r"['\"](?:\w*loss|grad_norm)['\"]:\s*['\"]?(?:nan|[-+]?inf|[-+]?infinity)\b"],
    ),
    _rule(
        "model_not_cached_offline",
        [
            r"LocalEntryNotFoundError",
            r"We couldn't connect to '\S+' to load the files",
            r"outgoing traffic has been disabled",
        ],
    ),
    _rule(
        "model_not_found",
        [
            r"is not a local folder and is not a valid model identifier",
            r"Repo id must be in the form 'repo_name' or 'namespace/repo_name'",
            r"does not appear to have a file named config\.json",
            r"Incorrect path_or_model_id",
        ],
    ),
    _rule(
        "tokenizer_not_loadable",
        [
            r"Can't load tokenizer for",
            r"Couldn't instantiate the backend tokenizer",
            r"Failed to load tokenizer\.",
        ],
    ),
    _rule(
        "dataset_undefined",
        [r"Undefined dataset \S+ in dataset_info\.json"],
    ),
    _rule(
        # The converter indexes each row by the declared column (`example[attr.response]`,
        # `message[attr.role_tag]`): a column no row has raises KeyError from
        # llamafactory/data/converter.py, re-raised by datasets' LazyDict.__getitem__.
        "dataset_column_missing",
        [r"^KeyError: (['\"])[^'\"]{1,200}\1$"],
        context=[r'File "[^"]*llamafactory[/\\]data[/\\]converter\.py", line \d+, in (?:__call__|align_dataset)'],
    ),
    _rule(
        "template_unknown",
        [r"Template \S+ does not exist"],
    ),
    _rule(
        "unknown_config_key",
        [r"Some keys are not used by the HfArgumentParser"],
    ),
)

RULES_BY_NAME: dict[str, Rule] = {rule.name: rule for rule in RULES}

# tqdm bars ("45%|████▌     | 9/20 [00:03<00:04,  2.6it/s]") and Python 3.11 caret lines ("   ^^^^^")
_PROGRESS_BAR = re.compile(r"^\s*[^|]{0,60}\d+%\|.*\|\s*\d+/\d+")
_CARETS = re.compile(r"^\s*[\^~]+\s*$")


def _segments(log_text: str) -> Iterator[str]:
    """Every line of the log; a tqdm line redrawn with carriage returns is several lines."""
    for line in re.split(r"[\r\n]", log_text):
        if line.strip():
            yield line.rstrip()


def _evidence(line: str) -> str:
    line = line.strip()
    return line if len(line) <= EVIDENCE_MAX_CHARS else line[: EVIDENCE_MAX_CHARS - 1] + "…"


def _diagnosis(rule: Rule, evidence: str) -> Diagnosis:
    return Diagnosis(rule.name, _evidence(evidence))


def diagnose(log_text: str, exit_code: int | None = None) -> list[Diagnosis]:
    """Every rule the log matches, most specific first; evidence is the last line that matched
    (the one nearest the failure). A SIGKILL exit code counts as evidence of the OOM killer
    even when the log ends without a word, which is how such a log usually ends."""
    lines = list(_segments(log_text))
    found: list[Diagnosis] = []
    for rule in RULES:
        if rule.context and not all(any(p.search(line) for line in lines) for p in rule.context):
            continue
        evidence = next(
            (line for line in reversed(lines) if any(p.search(line.strip()) for p in rule.patterns)),
            None,
        )
        if evidence is None and rule.name == "killed_out_of_host_memory" and exit_code in SIGKILL_EXIT_CODES:
            evidence = f"exit code {exit_code} (SIGKILL)"
        if evidence is not None:
            found.append(_diagnosis(rule, evidence))
    return found


def error_lines(log_text: str, limit: int = TAIL_LINES) -> list[str]:
    """The last `limit` lines worth reading: progress bars and caret underlines left out."""
    kept = [
        line
        for line in _segments(log_text)
        if not _PROGRESS_BAR.match(line) and not _CARETS.match(line)
    ]
    return kept[-limit:]


def summarize_failure(log_text: str, exit_code: int | None) -> FailureSummary:
    """What the page shows for a failed run: the top cause and fix, and the lines that matter."""
    diagnoses = diagnose(log_text, exit_code)
    return FailureSummary(
        diagnosis=diagnoses[0] if diagnoses else None,
        diagnoses=diagnoses,
        error_lines=error_lines(log_text),
        exit_code=exit_code,
    )


# --- live watch ---------------------------------------------------------------------------


def _number(value: Any) -> float | None:
    """A metric value as a float: numbers, and the strings transformers 5 logs ('nan', '1.2e+03')."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


class Alert(str):
    """A warning about a run, as a message id (`alert.<message>`) and its values.

    The string itself is the English text (the command line, the logs, a plain `str` field);
    the page renders `text(locale)` in its own language."""

    message: str
    params: dict[str, Any]

    def __new__(cls, message: str, **params: Any) -> Alert:
        from backend.i18n import render_message

        alert = super().__new__(cls, render_message(f"alert.{message}", params, "en"))
        alert.message = message
        alert.params = params
        return alert

    def text(self, locale: str = "en") -> str:
        from backend.i18n import render_message

        return render_message(f"alert.{self.message}", self.params, locale)

    def __reduce__(self):  # a str subclass with its own __new__: pickle it by its id and values
        return (_alert_from, (self.message, self.params))


def _alert_from(message: str, params: dict[str, Any]) -> Alert:
    return Alert(message, **params)


def _step(point: dict[str, Any]) -> Any:
    return point.get("step", point.get("current_steps"))


def _alert(message: str, point: dict[str, Any], **params: Any) -> Alert:
    """The alert `message`, its "…at step N" variant when the point knows its step."""
    step = _step(point)
    if step is None:
        return Alert(message, **params)
    return Alert(f"{message}-at-step", step=step, **params)


def loss_alert(points: list[dict[str, Any]]) -> Alert | None:
    """A warning about the newest metric point, or None when training looks sane.

    Three signs a run has diverged: the loss is NaN/inf; the loss is exactly 0 after having
    been positive (transformers' `logging_nan_inf_filter` logs a window of NaN steps as 0);
    grad_norm is NaN/inf or more than GRAD_NORM_EXPLOSION_FACTOR times its median so far.
    """
    if not points:
        return None
    latest = points[-1]
    loss = _number(latest.get("loss"))
    if loss is not None and not math.isfinite(loss):
        return _alert("loss-not-finite", latest, value=str(loss))
    if loss == 0.0:
        earlier = [_number(p.get("loss")) for p in points[:-1]]
        if any(v is not None and v > 0 for v in earlier):
            return _alert("loss-zero", latest)
    grad_norm = _number(latest.get("grad_norm"))
    if grad_norm is None:
        return None
    if not math.isfinite(grad_norm):
        return _alert("grad-norm-not-finite", latest, value=str(grad_norm))
    history = [v for v in (_number(p.get("grad_norm")) for p in points[:-1]) if v is not None and math.isfinite(v)]
    if len(history) >= GRAD_NORM_MIN_HISTORY:
        median = statistics.median(history)
        if median > 0 and grad_norm > GRAD_NORM_EXPLOSION_FACTOR * median:
            return _alert("grad-norm-jump", latest, value=f"{grad_norm:.3g}", factor=f"{grad_norm / median:.0f}", median=f"{median:.3g}")
    return None
