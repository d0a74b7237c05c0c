""""Other keys": every LLaMA-Factory key the form has no widget for, as YAML lines.

Nothing a user imports is silently dropped: a key LLaMA-Factory knows and no field reads
goes here (backend/config/schema.py OTHER_KEYS), is checked against LLaMA-Factory's own list
of keys, and is written to the run's YAML after the form's keys. What is refused, each with
its finding: text that is not a YAML mapping, a key LLaMA-Factory does not know (with the
close spelling), a key a field of the form sets (set it there: two places for one value
would disagree), and the keys RocBoard writes itself (schema.ROCBOARD_OWNED_KEYS).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from backend.config import schema
from backend.config.path_keys import ReadPlaces, read_path_refusal
from backend.config.paths import path_problem
from backend.config.yaml_reader import load_yaml_text
from backend.findings import Finding
from backend.i18n import Message
from backend.i18n.errors import file_error, os_error
from backend.llama_factory.check import did_you_mean, static_names


class _Config(Protocol):
    """What the DeepSpeed check reads of a config (backend/config RunConfig): this module sits
    below config.py (its parser reads Other keys here), so it names no type of config.py's."""

    def value(self, name: str) -> Any: ...


class _Plan(Protocol):
    """What the DeepSpeed check reads of a multi-GPU plan (backend/config/distributed.py)."""

    @property
    def strategy(self) -> str: ...

KEY_SHOWN_CHARS = 64
OTHER_KEYS_MAX_BYTES = 256_000  # the field holds at most 65,536 characters


def parse_other_keys(text: str, key: str = "other_keys") -> tuple[tuple[tuple[str, Any], ...], list[Finding]]:
    """(the usable (key, value) pairs in order, a finding per refused entry). The text was
    bounded by the field's max_chars before it gets here."""
    if not text or not text.strip():
        return (), []
    # Read as llamafactory-cli reads a YAML (`1e-4` is a float), with the import's bounds.
    loaded, problems = load_yaml_text(text, max_bytes=OTHER_KEYS_MAX_BYTES)
    if loaded is None:
        rule = "other-keys-not-mapping" if problems and problems[0].rule in ("yaml-not-mapping", "yaml-empty") else "other-keys-not-yaml"
        if rule == "other-keys-not-mapping":
            return (), [Finding.of(key, rule)]
        line = (problems[0].params or {}).get("line", "?") if problems else "?"
        return (), [Finding.of(key, rule, line=line)]
    if problems:  # a duplicate key, a key that is not text
        first = problems[0]  # the reader's own finding, as its message: shown in the reader's language
        error = Message(f"check.{first.message or first.rule}.problem", key=first.key, **first.params) if first.params is not None else first.problem
        return (), [Finding.of(key, "other-keys-not-yaml", message="other-keys-duplicate", line="?", error=error)]
    if len(loaded) > schema.OTHER_KEYS_MAX:
        return (), [Finding.of(key, "other-keys-too-many", count=len(loaded), limit=schema.OTHER_KEYS_MAX)]
    known = static_names().keys
    in_form = {yaml_key: f.name for f in schema.run_fields() if f.yaml is not None for yaml_key in f.yaml.keys}
    pairs: list[tuple[str, Any]] = []
    findings: list[Finding] = []
    for name, value in loaded.items():
        shown = str(name)[:KEY_SHOWN_CHARS]
        if not isinstance(name, str):
            findings.append(Finding.of(key, "other-key-unknown", message="other-key-not-text", name=shown))
        elif name in schema.ROCBOARD_OWNED_KEYS:
            findings.append(Finding.of(key, "other-key-owned", name=shown))
        elif name in in_form:
            findings.append(Finding.of(key, "other-key-in-form", name=shown, field=Message(f"label.{in_form[name]}")))
        elif name not in known:
            guess = did_you_mean(name, known) if len(name) <= KEY_SHOWN_CHARS else None
            if guess:
                findings.append(Finding.of(key, "other-key-unknown", name=shown, guess=guess))
            else:
                findings.append(Finding.of(key, "other-key-unknown", message="other-key-unknown-no-guess", name=shown))
        else:
            finding = _typed_check(name, value, key) or _bound_check(name, value, key)
            if finding is not None:
                findings.append(finding)
            else:
                pairs.append((name, value))
    return tuple(pairs), findings


def _typed_check(name: str, value: Any, key: str) -> Finding | None:
    """The value against the key's type in LLaMA-Factory's own argument classes, where the
    key catalogue is there (backend/llama_factory/keys.py)."""
    try:
        from backend.llama_factory.keys import key_catalogue
    except ImportError:
        return None
    finding = key_catalogue().check_value(name, value)
    if finding is None:
        return None
    # Shown under the Other keys field, naming the key.
    return Finding.of(key, finding.rule, message=finding.message, severity=finding.severity, **(finding.params or {}))


# Keys that start one process each: more than the machine's cores only thrash it (100,000
# workers would exhaust its memory and process table before the first step).
WORKER_KEYS = ("preprocessing_num_workers", "dataloader_num_workers")


def machine_cores() -> int:
    """The cores this process may run on (a container's or cgroup's affinity, not the host's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


# Beyond this no machine has the cores: a problem anywhere. Between the cores and this, only
# slower (LLaMA-Factory's own examples ask for 16 on any machine): a warning.
WORKERS_MAX = 256


def _bound_check(name: str, value: Any, key: str) -> Finding | None:
    """A typed value beyond what the machine can hold."""
    if name in WORKER_KEYS and isinstance(value, int) and not isinstance(value, bool):
        cores = machine_cores()
        if value < 0 or value > max(cores, WORKERS_MAX):
            return Finding.of(key, "other-key-workers", name=name, value=value, cores=cores)
        if value > cores:
            return Finding.of(key, "other-key-workers", message="other-key-workers-more-than-cores", severity="warning", name=name, value=value, cores=cores)
    return None


def other_keys_text(pairs: Any) -> str:
    """The typed pairs as the field shows them again (form.json, a run opened)."""
    if isinstance(pairs, str):
        return pairs
    mapping = dict(pairs or ())
    return yaml.safe_dump(mapping, sort_keys=False, allow_unicode=True, default_flow_style=False) if mapping else ""




# --- a DeepSpeed file named in Other keys ------------------------------------------------------

DEEPSPEED_FILE_MAX_BYTES = 1 << 20  # DeepSpeed configs are a few hundred bytes
USER_DEEPSPEED_FILE = "deepspeed.json"  # the run's own copy, beside config.yaml
OFFLOAD_DEVICES = ("cpu", "nvme", "none")


@dataclass(frozen=True)
class DeepSpeedFile:
    """A user's DeepSpeed JSON, read and checked: what the run will use (its own copy)."""

    path: str
    text: str
    stage: int
    offload_optimizer: str
    offload_param: str

    def summary(self) -> Message:
        return Message("deepspeed.summary", path=self.path, stage=self.stage, optimizer=self.offload_optimizer, param=self.offload_param)


def read_deepspeed_file(value: Any, places: ReadPlaces, key: str = "other_keys") -> tuple[DeepSpeedFile | None, list[Finding]]:
    """The file a `deepspeed:` key names, read (bounded, a regular file) and checked: JSON
    that parses to an object, a ZeRO stage 0-3, offload devices DeepSpeed knows. A path outside
    `places` (backend/config/path_keys.py) is refused before anything is opened: whether a file
    there exists, or is JSON, is never told."""
    if not isinstance(value, str) or not value.strip():
        return None, [Finding.of(key, "deepspeed-file-bad", message="deepspeed-file-not-path", value=str(value)[:200])]
    raw = value.strip()
    problem = path_problem(raw)
    if problem:
        return None, [Finding.of(key, "deepspeed-file-bad", path=raw[:200], error=problem)]
    path = Path(raw).expanduser()
    if not path.is_absolute():
        # The trainer runs in the run's directory: a relative path would point into it.
        return None, [Finding.of(key, "deepspeed-file-bad", message="deepspeed-file-relative", path=raw)]
    refusal = read_path_refusal("deepspeed", raw, places)
    if refusal is not None:
        return None, [Finding.of(key, refusal.message, **refusal.params)]
    try:
        # O_NONBLOCK: a FIFO named here must not hang the check; only a regular file is read.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None, [Finding.of(key, "deepspeed-file-bad", path=raw, error=Message("file-error.not-regular"))]
            data = handle.read(DEEPSPEED_FILE_MAX_BYTES + 1)
    except OSError as error:
        return None, [Finding.of(key, "deepspeed-file-bad", path=raw, error=os_error(error))]
    if len(data) > DEEPSPEED_FILE_MAX_BYTES:
        return None, [Finding.of(key, "deepspeed-file-bad", path=raw, error=Message("file-error.larger-than", limit=DEEPSPEED_FILE_MAX_BYTES))]
    try:
        text = data.decode("utf-8")
        loaded = json.loads(text)
    except (UnicodeDecodeError, ValueError) as error:
        return None, [Finding.of(key, "deepspeed-file-bad", message="deepspeed-file-not-json", path=raw, error=file_error(error))]
    if not isinstance(loaded, dict):
        return None, [Finding.of(key, "deepspeed-file-bad", message="deepspeed-file-not-json", path=raw, error=Message("file-error.not-json-object"))]
    zero = loaded.get("zero_optimization", {})
    zero = zero if isinstance(zero, dict) else {}
    stage = zero.get("stage", 0)
    if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
        return None, [Finding.of(key, "deepspeed-file-bad", message="deepspeed-file-stage", path=raw, stage=str(stage)[:40])]
    devices = []
    for part in ("offload_optimizer", "offload_param"):
        offload = zero.get(part, {})
        device = offload.get("device", "none") if isinstance(offload, dict) else "none"
        if device not in OFFLOAD_DEVICES:
            return None, [Finding.of(key, "deepspeed-file-bad", message="deepspeed-file-offload", path=raw, part=part, device=str(device)[:40])]
        devices.append(device)
    return DeepSpeedFile(raw, text, int(stage), devices[0], devices[1]), []


def deepspeed_of(config: _Config) -> Any:
    """The `deepspeed:` value of a config's Other keys; None when it has none."""
    return dict(config.value("other_keys") or ()).get("deepspeed")


def deepspeed_findings(config: _Config, plan: _Plan | None, use_cpu: bool, places: ReadPlaces, key: str = "other_keys") -> list[Finding]:
    """The file checked, and never two DeepSpeed configs for one run: the multi-GPU plan's
    ZeRO choice and a file in Other keys would silently disagree (which one wins depends on
    the order keys are written), so both at once is a problem."""
    value = deepspeed_of(config)
    if value is None:
        return []
    found, findings = read_deepspeed_file(value, places, key)
    if use_cpu:
        findings.append(Finding.of(key, "deepspeed-on-cpu"))
    strategy = plan.strategy if plan is not None else "ddp"
    if strategy != "ddp":
        findings.append(Finding.of(key, "deepspeed-twice", strategy=strategy, path=str(value)[:200]))
    return findings


__all__ = ["DeepSpeedFile", "USER_DEEPSPEED_FILE", "deepspeed_findings", "deepspeed_of", "other_keys_text", "parse_other_keys", "read_deepspeed_file"]
