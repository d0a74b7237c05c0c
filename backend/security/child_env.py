"""What a child process's environment may hold: one rule for every process RocBoard starts.

Two different questions, answered here and nowhere else:

1. Which variables may a *user* set for the trainer? (the Multi-GPU tab's "RCCL settings"
   lines, a preset's `env:` entries, and anything an imported YAML or a Slurm field may carry
   later). A variable's name decides what a process does with its value, and many names run
   code: `LD_PRELOAD` and `PYTHONPATH` load a library or a module, `PYTHONWARNINGS` imports a
   module by name, `BROWSER` is a command line, `NCCL_NET_PLUGIN`, `HSA_TOOLS_LIB` and
   `OMP_TOOL_LIBRARIES` dlopen() a shared library. So only the tuning knobs of the layers
   the trainer runs on are settable (`SETTABLE_PREFIXES`, `SETTABLE_NAMES`), never one that
   names a file, directory or library (`LOCATION_WORDS`), and each value is one short line
   of plain text. `env_refusal(name, value)` says why a setting is refused, or None.

2. Which variables does a child *inherit* from RocBoard's own environment? Only an
   allow-list (`INHERITED_NAMES`, `INHERITED_PREFIXES`): what finds programs, libraries,
   caches and devices. Never a secret (`is_secret_name`: ROCBOARD_AUTH, HF_TOKEN, anything
   with TOKEN/SECRET/PASSWORD/KEY in its name), never GRADIO_* or ROCBOARD_*, never
   PYTHON*. `child_env(...)` builds a child's whole environment from the inherited part,
   the user's settings that pass `env_refusal`, and what RocBoard sets itself.

The inherited list is more generous than the settable one on purpose: the operator who
started RocBoard chose those values (an RCCL network plugin for their cluster, a ROCm
library path), a user of the page did not.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from backend.findings import Finding, Severity
from backend.i18n import DEFAULT_LOCALE, render_message

# --- what a user may set ---------------------------------------------------------------------

# The libraries the trainer's collectives and kernels run on, which read their tuning knobs
# from the environment: RCCL (a port of NCCL that keeps NCCL_* and adds RCCL_*), PyTorch's
# process group (TORCH_NCCL_*), gloo (CPU collectives and the demo), the ROCm runtime
# (HSA_*, ROCR_*, HIP_*), MIOpen, and OpenMP (the CPU demo pins OMP_NUM_THREADS=1).
SETTABLE_PREFIXES: tuple[str, ...] = (
    "NCCL_",
    "RCCL_",
    "TORCH_NCCL_",
    "GLOO_",
    "HSA_",
    "ROCR_",
    "HIP_",
    "MIOPEN_",
    "OMP_",
)
# PyTorch knobs the shipped presets set, by exact name: TORCH_* and PYTORCH_* as a whole
# also hold TORCH_EXTENSIONS_DIR (compiled extensions are loaded from there) and friends.
SETTABLE_NAMES: frozenset[str] = frozenset(
    {
        "PYTORCH_HIP_ALLOC_CONF",  # expandable_segments:True on every GPU preset
        "PYTORCH_CUDA_ALLOC_CONF",  # the same allocator, as CUDA builds (and some ROCm ones) read it
        "TORCH_BLAS_PREFER_HIPBLASLT",  # MI250/MI300 presets
        "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL",  # RDNA3 presets: fused SDPA kernels
        "TORCH_DISTRIBUTED_DEBUG",  # OFF / INFO / DETAIL: what a hung all-reduce is debugged with
    }
)
# Words of a name (split at "_") that mean "the value is a place to read, write or load
# from": NCCL_NET_PLUGIN / NCCL_TUNER_PLUGIN (dlopen), HSA_TOOLS_LIB (dlopen),
# OMP_TOOL_LIBRARIES (dlopen), NCCL_DEBUG_FILE / NCCL_TOPO_DUMP_FILE (write any file),
# NCCL_CONF_FILE (more variables from a file), MIOPEN_USER_DB_PATH,
# MIOPEN_CUSTOM_CACHE_DIR (precompiled kernels), HIP_PATH, HIP_ROCCLR_HOME. A cluster that
# needs one of them sets it in the shell that starts RocBoard, where children inherit it.
LOCATION_WORDS: frozenset[str] = frozenset(
    {
        "PLUGIN", "PLUGINS", "PRELOAD", "LIB", "LIBS", "LIBRARY", "LIBRARIES", "TOOL", "TOOLS",
        "FILE", "FILES", "PATH", "PATHS", "DIR", "DIRS", "HOME", "ROOT", "PREFIX", "DB",
    }
)  # fmt: skip
MAX_NAME_LENGTH = 128
# Real values are short: an interface list, a level, "expandable_segments:True". The bound
# keeps a pasted blob out of every node's command line and the Slurm script.
MAX_VALUE_LENGTH = 512

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# --- what a child inherits ---------------------------------------------------------------------

# Exact names a child inherits from RocBoard's environment, and why it needs them.
INHERITED_NAMES: frozenset[str] = frozenset(
    {
        "PATH",  # finds llamafactory-cli, torchrun, rocm-smi (the launcher puts the venv's bin first)
        "HOME",  # ~/.cache (Hugging Face, torch, triton), ~/.triton
        "USER",
        "LOGNAME",  # getpass.getuser() and friends, when /etc/passwd has no entry (containers)
        "LANG",
        "LANGUAGE",
        "TZ",  # log timestamps in the operator's time zone
        "TMPDIR",
        "TEMP",
        "TMP",  # tempfile's directory: a small /tmp is often swapped for a bigger one
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "CONDA_DEFAULT_ENV",  # which Python environment the child belongs to
        # ROCm installs outside the loader's default paths (module load, some containers)
        # need it to find libamdhip64 and librocm_smi64. It comes from the operator's shell;
        # a user can never set it (LD_* is not settable).
        "LD_LIBRARY_PATH",
        "XDG_CACHE_HOME",  # where ~/.cache is when it is elsewhere
    }
)
# Prefixes a child inherits: locale, caches and offline switches of the Hugging Face
# stack, and the runtime/tuning knobs of torch, ROCm, CUDA, the collectives and the BLAS /
# OpenMP thread pools. An operator may have set these for the machine on purpose.
INHERITED_PREFIXES: tuple[str, ...] = (
    "LC_",  # locale categories
    "HF_",  # HF_HOME, HF_HUB_CACHE, HF_DATASETS_CACHE, HF_HUB_OFFLINE (HF_TOKEN: see is_secret_name)
    "HUGGINGFACE_",  # HUGGINGFACE_HUB_CACHE (older name)
    "TRANSFORMERS_",  # TRANSFORMERS_CACHE, TRANSFORMERS_OFFLINE, TRANSFORMERS_VERBOSITY
    "TOKENIZERS_",  # TOKENIZERS_PARALLELISM
    "LLAMAFACTORY_",  # LLAMAFACTORY_VERBOSITY
    "ACCELERATE_",
    "DS_",  # DeepSpeed: DS_ACCELERATOR, DS_BUILD_*
    "TORCH_",
    "PYTORCH_",
    "TRITON_",  # Triton's kernel cache (flash-attention's AMD path compiles with it)
    "FLASH_ATTENTION_",  # FLASH_ATTENTION_TRITON_AMD_ENABLE (the doctor's probe reads it too)
    "BNB_",  # bitsandbytes
    "CUDA_",
    "HIP_",
    "HSA_",  # HSA_OVERRIDE_GFX_VERSION for consumer GPUs
    "ROCR_",  # ROCR_VISIBLE_DEVICES, set by Slurm and containers
    "ROCM_",
    "ROCBLAS_",
    "HIPBLASLT_",
    "MIOPEN_",
    "AMD_",  # AMD_LOG_LEVEL, AMD_SERIALIZE_KERNEL: HIP runtime debugging
    "NCCL_",
    "RCCL_",
    "GLOO_",  # the interfaces and plugins of the cluster's network
    "OMP_",
    "KMP_",
    "GOMP_",
    "MKL_",
    "OPENBLAS_",  # CPU thread pools (the CPU demo)
)
# Deliberately not inherited: PYTHON* (PYTHONPATH/PYTHONSTARTUP/PYTHONWARNINGS run code; the
# venv needs none), LD_PRELOAD and other LD_*, BROWSER/EDITOR/PAGER (command lines), GRADIO_*
# and ROCBOARD_* (the web server's own settings, ROCBOARD_AUTH among them), proxies
# (http_proxy may hold user:password, and every child runs offline), SSH_*/DISPLAY/TERM (the
# trainer writes to a file, not a terminal), SLURM_* (a node's srun sets what torchrun needs).

# Words of a name that mark a secret. HF_TOKEN is a secret like any other: the trainer runs
# with HF_HUB_OFFLINE=1 and never needs one. Matched against the name's "_"-separated words
# so that TOKENIZERS_PARALLELISM is not a secret and HF_TOKEN, HFTOKEN, API_KEY, APIKEY are.
SECRET_ENDINGS: tuple[str, ...] = ("TOKEN", "TOKENS", "KEY", "KEYS", "COOKIE", "COOKIES")  # a word ending so
SECRET_PARTS: tuple[str, ...] = ("SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE")  # anywhere in a word
SECRET_WORDS: frozenset[str] = frozenset({"PASS", "AUTH", "PAT"})  # a whole word (not BYPASS, OAUTHLIB)
# The experiment trackers a run may report to (the form's report_to) that would otherwise reach
# for a server and an API key: RocBoard never passes a key to a child (is_secret_name), so they
# run offline, logging under the trainer's working directory (the run directory: ./wandb,
# ./swanlog); `wandb sync` / `swanlab sync` upload a run later from a logged-in shell. Set for
# every child (only those libraries read them), at the lowest priority.
TRACKER_OFFLINE_ENV: dict[str, str] = {"WANDB_MODE": "offline", "SWANLAB_MODE": "offline"}
# Never reach a child, whatever lists above say: the web page's login.
NEVER_INHERITED: frozenset[str] = frozenset({"ROCBOARD_AUTH", "ROCBOARD_AUTH_FILE"})


@dataclass(frozen=True)
class Refusal:
    """Why one NAME=value may not reach a child: a rule name, which is also the message id of
    its words (the catalogue's `check.<rule>.problem` / `.fix`), and the message's values."""

    rule: str
    params: dict[str, Any] = field(default_factory=dict)

    def text(self, locale: str = DEFAULT_LOCALE) -> tuple[str, str]:
        """(problem, fix) in `locale`."""
        return (
            render_message(f"check.{self.rule}.problem", self.params, locale),
            render_message(f"check.{self.rule}.fix", self.params, locale),
        )

    @property
    def problem(self) -> str:  # English: the command line, a preset file's error
        return self.text()[0]

    @property
    def fix(self) -> str:
        return self.text()[1]

    def finding(self, key: str, severity: Severity = "problem") -> Finding:
        """The refusal as a finding about `key` (the form field the setting was written in)."""
        return Finding.of(key, self.rule, severity=severity, **self.params)

    def __str__(self) -> str:
        return self.problem


def _words(name: str) -> list[str]:
    return [word for word in name.upper().split("_") if word]


def is_secret_name(name: str) -> bool:
    """Whether a variable's name says it holds a secret (a token, key, password, login)."""
    if name.upper() in NEVER_INHERITED:
        return True
    for word in _words(name):
        if word in SECRET_WORDS or word.endswith(SECRET_ENDINGS) or any(part in word for part in SECRET_PARTS):
            return True
    return False


def name_refusal(name: str) -> Refusal | None:
    """Why a user may not set a variable called `name`, or None when they may."""
    if not isinstance(name, str) or not ENV_NAME.match(name):
        return Refusal("bad-env-name", {"name": repr(name)})
    if len(name) > MAX_NAME_LENGTH:
        return Refusal("env-name-too-long", {"limit": MAX_NAME_LENGTH})
    if is_secret_name(name):
        return Refusal("env-secret", {"name": name})
    if not (name in SETTABLE_NAMES or name.startswith(SETTABLE_PREFIXES)):
        return Refusal("env-not-settable", {"name": name})
    if set(_words(name)) & LOCATION_WORDS:
        return Refusal("env-names-location", {"name": name})
    return None


def value_refusal(name: str, value: str, max_length: int | None = MAX_VALUE_LENGTH) -> Refusal | None:
    """Why `value` (of `name`) is not one short line of plain text, or None."""
    control = Refusal("env-value-control", {"name": name})
    if not isinstance(value, str):
        return control
    if "\n" in value or "\r" in value or any(unicodedata.category(c) in ("Zl", "Zp") for c in value):
        return Refusal("bad-env-value", {"name": name})
    if any(unicodedata.category(c) == "Cc" for c in value):  # NUL, tab, escape, DEL, C1 controls
        return control
    if max_length is not None and len(value) > max_length:
        return Refusal("env-value-too-long", {"name": name, "limit": max_length})
    return None


def refusal(name: str, value: str) -> Refusal | None:
    """`name_refusal`, else `value_refusal`: the first reason `name=value` is refused."""
    return name_refusal(name) or value_refusal(name, value)


def env_refusal(name: str, value: str) -> str | None:
    """Why a user may not set `name=value` for a child (one sentence), or None when they may.

    The one rule for the RCCL settings lines, a preset's env: entries, and any other place a
    user's text becomes a child's variable."""
    found = refusal(name, value)
    return found.problem if found is not None else None


def is_settable(name: str, value: str) -> bool:
    return refusal(name, value) is None


def refused_settings(settings: Iterable[tuple[str, str]]) -> list[Refusal]:
    """Why each refused setting is refused, in order."""
    return [found for name, value in settings if (found := refusal(name, value)) is not None]


def allowed_settings(settings: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """The settings `env_refusal` lets through, in order (the refused ones dropped)."""
    return tuple((name, value) for name, value in settings if refusal(name, value) is None)


def is_inherited_name(name: str) -> bool:
    """Whether a child inherits `name` from RocBoard's environment."""
    if is_secret_name(name):
        return False
    return name in INHERITED_NAMES or name.startswith(INHERITED_PREFIXES)


def inherited_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The part of `base` (default: this process's environment) every child inherits."""
    source = os.environ if base is None else base
    return {name: value for name, value in source.items() if is_inherited_name(name)}


def child_env(
    base: Mapping[str, str] | None = None,
    settings: Iterable[tuple[str, str]] | Mapping[str, str] = (),
    own: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A child's whole environment, lowest priority first:

    - TRACKER_OFFLINE_ENV (wandb and SwanLab offline: no child holds their API keys),
    - the allow-listed part of `base` (default: this process's environment),
    - `settings`, a user's NAME=value pairs: those `env_refusal` refuses are dropped (the
      places users write them report the refusal as a finding first),
    - `own`, what RocBoard itself sets (PATH with the venv first, the offline switches, the
      plan's MASTER_ADDR...), taken as given: it never comes from a user's text. A secret
      name is dropped even there."""
    env = dict(TRACKER_OFFLINE_ENV)
    env.update(inherited_env(base))
    pairs = settings.items() if isinstance(settings, Mapping) else settings
    env.update(allowed_settings(pairs))
    env.update((name, value) for name, value in (own or {}).items() if not is_secret_name(name))
    return env


__all__ = [
    "INHERITED_NAMES",
    "INHERITED_PREFIXES",
    "LOCATION_WORDS",
    "MAX_VALUE_LENGTH",
    "SETTABLE_NAMES",
    "SETTABLE_PREFIXES",
    "TRACKER_OFFLINE_ENV",
    "Refusal",
    "allowed_settings",
    "child_env",
    "env_refusal",
    "inherited_env",
    "is_inherited_name",
    "is_secret_name",
    "is_settable",
    "name_refusal",
    "refusal",
    "refused_settings",
    "value_refusal",
]
