"""Why a run failed, in words a user can act on: train.log -> named cause + fix.

Each rule is a few regular expressions for the exact lines PyTorch, ROCm, RCCL, transformers,
huggingface_hub and LLaMA-Factory print (the wording was taken from the installed sources
and from real logs; tests/fixtures/logs/ holds one excerpt per rule), plus one English cause
and one English fix. The rule's name is the key a translation uses: the strings live only in
`RULES`, nowhere else.

Rules are listed most specific first, and a log can match several: "permission denied on
/dev/kfd" explains the "No HIP GPUs are available" printed after it, so it comes first.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

EVIDENCE_MAX_CHARS = 300
TAIL_LINES = 15
# exit codes of a process killed by SIGKILL: Popen's -9, or a shell's 128 + 9
SIGKILL_EXIT_CODES = (-9, 137)
# grad_norm this many times its median so far is an explosion, not noise
GRAD_NORM_EXPLOSION_FACTOR = 100.0
GRAD_NORM_MIN_HISTORY = 3


@dataclass(frozen=True)
class Diagnosis:
    rule: str  # the rule's name, e.g. "gpu_out_of_memory"; translations are keyed by it
    cause: str
    fix: str
    evidence: str  # the log line that matched (or what was seen, e.g. "exit code -9")


@dataclass(frozen=True)
class FailureSummary:
    diagnosis: Diagnosis | None  # the most specific cause found, None when no rule matched
    diagnoses: list[Diagnosis] = field(default_factory=list)  # every cause found, most specific first
    error_lines: list[str] = field(default_factory=list)  # the last meaningful lines of the log
    exit_code: int | None = None


@dataclass(frozen=True)
class Rule:
    name: str
    patterns: tuple[re.Pattern[str], ...]
    cause: str
    fix: str


def _rule(name: str, patterns: Iterable[str], cause: str, fix: str) -> Rule:
    return Rule(name, tuple(re.compile(p, re.IGNORECASE) for p in patterns), cause, fix)


RULES: tuple[Rule, ...] = (
    _rule(
        "device_permission_denied",
        [
            r"/dev/(?:kfd|dri)\b.{0,40}Permission denied",
            r"Permission denied:? '?/dev/(?:kfd|dri)",
            r"is not member of \"?(?:video|render)\"? group",
        ],
        "This user may not open the GPU devices /dev/kfd and /dev/dri/renderD*, so ROCm finds no GPU.",
        "Add your user to the video and render groups: `sudo usermod -aG video,render $USER`, then log out "
        "and in again (or reboot). In Docker, pass `--device /dev/kfd --device /dev/dri` and `group_add` the "
        "host's numeric video and render group ids (`getent group video render`).",
    ),
    _rule(
        "invalid_device_function",
        [
            r"invalid device function",
            r"no kernel image is available for execution on the device",
            r"hipErrorNoBinaryForGpu",
            r"TensileLibrary\.dat: No such file or directory for GPU arch",
        ],
        "This build of PyTorch/ROCm has no GPU code for your GPU's architecture (gfx target), so the first "
        "kernel launch fails.",
        "Tell ROCm to use the code of the nearest supported target: `HSA_OVERRIDE_GFX_VERSION=11.0.0` for "
        "gfx1101/gfx1102/gfx1103 (RX 7800/7700/7600), `HSA_OVERRIDE_GFX_VERSION=10.3.0` for gfx1031/gfx1032 "
        "(RX 6700/6600). Set it in the preset's env or before starting the app; `python app.py doctor` shows "
        "your target. Otherwise install a torch build that lists your target.",
    ),
    _rule(
        "torch_without_rocm",
        [
            r"Torch not compiled with CUDA enabled",
            r"Found no NVIDIA driver on your system",
        ],
        "The installed PyTorch is a CPU-only or NVIDIA CUDA build; it cannot use an AMD GPU.",
        "Install the ROCm build of torch (https://pytorch.org, choose ROCm: "
        "`pip install torch --index-url https://download.pytorch.org/whl/rocm6.4`) or use the docker image "
        "(`docker compose up`, see docs/docker.md). For a CPU run, choose the CPU demo preset.",
    ),
    _rule(
        "no_gpu_visible",
        [
            r"No HIP GPUs are available",
            r"No CUDA GPUs are available",
            r"hipErrorNoDevice",
        ],
        "PyTorch was built for ROCm but sees no GPU: the driver is not loaded, the devices are not accessible, "
        "or HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES hide every GPU.",
        "Run `python app.py doctor`. Check that `rocminfo` lists your GPU, that your user is in the video and "
        "render groups, and that HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES name existing GPUs (or unset them).",
    ),
    _rule(
        "gpu_out_of_memory",
        [
            r"(?:HIP|CUDA) out of memory",
            r"(?:HIP|CUDA) error: out of memory",
            r"hipErrorOutOfMemory",
        ],
        "The GPU ran out of memory.",
        "Lower the batch size (raise gradient accumulation to keep the effective batch) or the cutoff "
        "length, turn on gradient checkpointing, or use QLoRA (4-bit). If the message says much memory is "
        "reserved but unallocated, set `PYTORCH_HIP_ALLOC_CONF=expandable_segments:True`.",
    ),
    _rule(
        "killed_out_of_host_memory",
        [
            r"Signal 9 \(SIGKILL\) received by PID",
            r"exitcode\s*:\s*-9\b",
            r"^Killed$",
        ],
        "The trainer was killed with SIGKILL, which (unless someone stopped it) is the kernel's out-of-memory "
        "killer: the machine ran out of RAM.",
        "Confirm with `sudo dmesg | grep -i -E 'killed process|out of memory'`. Then lower the batch size, "
        "cutoff length or `preprocessing_num_workers`, load a smaller model, or add RAM/swap; on a GPU run "
        "use QLoRA so less of the model is staged in RAM.",
    ),
    _rule(
        "collective_timeout",
        [
            r"Watchdog caught collective operation timeout",
            r"\b[NR]CCL timeout",
            r"ran for \d+ milliseconds before timing out",
        ],
        "A multi-GPU collective (RCCL/NCCL) timed out: one GPU or node stopped answering the others.",
        "Raise `ddp_timeout` (seconds) if a slow step (data loading, saving, evaluation) blocks one rank; "
        "on several nodes set `NCCL_SOCKET_IFNAME` to the interface that connects them and check firewalls; "
        "run once with `NCCL_DEBUG=INFO` to see which rank stalls.",
    ),
    _rule(
        "bf16_unsupported",
        [
            r"doesn't support bf16",
            r"does not support `pure_bf16`",
            r"bf16 mixed precision requires",
            r"not implemented for 'BFloat16'",
        ],
        "bf16 was requested but this device (or the CPU without `use_cpu`) does not support it.",
        "Use fp16 on GPUs without bf16 (RDNA2 such as gfx1030, MI50/gfx906); on the CPU use fp32 with "
        "`use_cpu: true` (the CPU demo preset). If this machine has an AMD GPU, the trainer may not see it: "
        "run `python app.py doctor`.",
    ),
    _rule(
        "loss_not_finite",
        [r"['\"](?:\w*loss|grad_norm)['\"]:\s*['\"]?(?:nan|[-+]?inf|[-+]?infinity)\b"],
        "The loss or gradient norm became NaN or infinite: training diverged and the weights are garbage.",
        "Lower the learning rate (e.g. by 10x) and keep gradient clipping on (`max_grad_norm: 1.0`); prefer bf16 "
        "to fp16 where the GPU supports it; try `flash_attn: disabled` to rule out the attention kernel.",
    ),
    _rule(
        "model_not_cached_offline",
        [
            r"LocalEntryNotFoundError",
            r"We couldn't connect to '\S+' to load the files",
            r"outgoing traffic has been disabled",
        ],
        "The model is not on disk and may not be downloaded (offline mode, or no network).",
        "Download it once with network access (`hf download ORG/NAME`), or point the model path at a local "
        "folder that holds config.json, the weights and the tokenizer files.",
    ),
    _rule(
        "model_not_found",
        [
            r"is not a local folder and is not a valid model identifier",
            r"Repo id must be in the form 'repo_name' or 'namespace/repo_name'",
            r"does not appear to have a file named config\.json",
            r"Incorrect path_or_model_id",
        ],
        "The model path is neither an existing folder nor a model name on the Hugging Face Hub.",
        "Check the model path for typos: an absolute path must exist on this machine and contain config.json; "
        "a hub name looks like `Qwen/Qwen2.5-0.5B-Instruct`.",
    ),
    _rule(
        "tokenizer_not_loadable",
        [
            r"Can't load tokenizer for",
            r"Couldn't instantiate the backend tokenizer",
            r"Failed to load tokenizer\.",
        ],
        "The tokenizer could not be loaded: the model folder has no tokenizer files (tokenizer.json or "
        "tokenizer.model with tokenizer_config.json), or the path is wrong.",
        "Point the model path at a folder that holds the tokenizer files too (a full download of the model, "
        "not only the weights).",
    ),
    _rule(
        "dataset_undefined",
        [r"Undefined dataset \S+ in dataset_info\.json"],
        "The dataset name is not defined in dataset_info.json of the dataset folder.",
        "Use a name listed in `dataset_dir`/dataset_info.json, or add an entry for your file there "
        "(file_name, formatting, columns); check that `dataset_dir` points at the right folder.",
    ),
    _rule(
        "template_unknown",
        [r"Template \S+ does not exist"],
        "The chat template name is not one LLaMA-Factory knows.",
        "Pick the template from LLaMA-Factory's list for your model family (e.g. `llama3`, `qwen`, `mistral`, "
        "`gemma`); names are spelled exactly (`llama3`, not `llama-3`).",
    ),
    _rule(
        "unknown_config_key",
        [r"Some keys are not used by the HfArgumentParser"],
        "The config has keys that LLaMA-Factory does not know (usually a typo or a key from another version).",
        "Remove or correct the listed keys; `python app.py check FILE.yaml` lists every key this version accepts.",
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
    return Diagnosis(rule.name, rule.cause, rule.fix, _evidence(evidence))


def diagnose(log_text: str, exit_code: int | None = None) -> list[Diagnosis]:
    """Every rule the log matches, most specific first; evidence is the last line that matched
    (the one nearest the failure). A SIGKILL exit code counts as evidence of the OOM killer
    even when the log ends without a word, which is how such a log usually ends."""
    lines = list(_segments(log_text))
    found: list[Diagnosis] = []
    for rule in RULES:
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


def _step(point: dict[str, Any]) -> str:
    step = point.get("step", point.get("current_steps"))
    return f" at step {step}" if step is not None else ""


def loss_alert(points: list[dict[str, Any]]) -> str | None:
    """A warning about the newest metric point, or None when training looks sane.

    Three signs a run has diverged: the loss is NaN/inf; the loss is exactly 0 after having
    been positive (transformers' `logging_nan_inf_filter` logs a window of NaN steps as 0);
    grad_norm is NaN/inf or more than GRAD_NORM_EXPLOSION_FACTOR times its median so far.
    """
    if not points:
        return None
    latest = points[-1]
    where = _step(latest)
    loss = _number(latest.get("loss"))
    if loss is not None and not math.isfinite(loss):
        return f"The loss is {loss}{where}: training diverged. Stop the run and lower the learning rate."
    if loss == 0.0:
        earlier = [_number(p.get("loss")) for p in points[:-1]]
        if any(v is not None and v > 0 for v in earlier):
            return (
                f"The loss dropped to exactly 0{where}: the steps since the last log were NaN (the trainer "
                "logs NaN steps as 0). Stop the run and lower the learning rate."
            )
    grad_norm = _number(latest.get("grad_norm"))
    if grad_norm is None:
        return None
    if not math.isfinite(grad_norm):
        return f"The gradient norm is {grad_norm}{where}: training diverged. Stop the run and lower the learning rate."
    history = [v for v in (_number(p.get("grad_norm")) for p in points[:-1]) if v is not None and math.isfinite(v)]
    if len(history) >= GRAD_NORM_MIN_HISTORY:
        median = statistics.median(history)
        if median > 0 and grad_norm > GRAD_NORM_EXPLOSION_FACTOR * median:
            return (
                f"The gradient norm jumped to {grad_norm:.3g}{where}, {grad_norm / median:.0f}x its median "
                f"({median:.3g}): training is about to diverge. Lower the learning rate or keep max_grad_norm at 1.0."
            )
    return None
