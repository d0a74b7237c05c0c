"""Merge a run's LoRA adapter into its base model with `llamafactory-cli export`, safely.

The rules, in the order an export meets them:

- What: a run that is not active and has an adapter (its `output/` or a `checkpoint-N/`), and
  its base model (form.json's model_name_or_path) as a folder on this machine.
- Where: the folder the user names is checked (`check_target`, the one check for the page and
  the command line): an absolute path, no link as the folder itself nor on the way below the
  home or an export root, never RocBoard's own folder, its Python environment, a hidden folder
  of the home, the base model's, the run's or the runs folder (nothing unlocks these), inside
  an allowed root once resolved (the page), not a root itself, and an existing non-empty
  folder only with `overwrite` — and, when it holds files no export wrote (an export leaves
  MANIFEST_NAME listing its own), only with the folder's name typed (`confirm`).
- How big: the size is read from the base's safetensors headers (`read_model_size`, never the
  tensors), and compared with the free space of the target's filesystem and, merging on the
  CPU, with the available memory (`plan_export`), before anything is written.
- All or nothing: everything is written into a hidden staging folder beside the target (the
  same filesystem, so the end is a rename), and moved into place only when complete; an old
  folder (overwrite) is replaced only then. A failure or a cancel removes the staging folder.

The merge and the GGUF conversion run as children (an argument list, never a shell), with
the allow-listed environment and the offline switches trainers get. The web process imports
neither torch nor transformers: this module reads files and starts processes.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import stat
import struct
import subprocess
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from backend.config.paths import path_problem
from backend.export import gguf_convert as gguf_tools
from backend.findings import Finding
from backend.runs import RunNotFound, RunStore, artifacts, safe_files
from backend.runs.launcher import OFFLINE_ENV, llamafactory_cli
from backend.security.child_env import child_env

GIB = 1024**3
MIB = 1024**2
SHARD_GB_RANGE = (1, 100)
DEVICES = ("cpu", "auto")
GGUF_CHOICES = ("none", "f16", "q8_0")
STAGING_PREFIX = "."
STAGING_MARK = ".rocboard-export-"
MODEL_SUBDIR = "model"  # inside the staging folder: becomes the target
OLD_SUBDIR = "old"  # inside the staging folder: the replaced folder, until it is removed
CONFIG_NAME = "export.yaml"
LOG_NAME = "export.log"
GGUF_LOG_NAME = "gguf.log"

# safetensors dtypes -> bytes per element (the format's own names).
SAFETENSORS_DTYPE_BYTES = {
    "F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1,
}  # fmt: skip
FLOAT_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
HEADER_MAX_BYTES = 100 * MIB  # a safetensors header is JSON; larger is not one
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".ckpt", ".onnx")
OTHER_FILES_MAX = 200  # files beside the weights counted (tokenizer and configs)
# Room for config.json, generation_config.json, the Modelfile, our YAML and logs.
SMALL_FILES_SLACK = 2 * MIB
# Merging on the CPU: the model in memory plus the process itself (torch, transformers).
PROCESS_RAM_BYTES = 1 * GIB
# A zip of the merged folder is offered up to this size; larger: the path only.
DOWNLOAD_MAX_BYTES = 2 * GIB
LOG_TAIL_BYTES = 64 * 1024
STOP_WAIT_S = 15.0
POLL_S = 0.5
MERGE_TIMEOUT_S = 24 * 3600  # a very large model on a slow disk; cancel ends it sooner
GGUF_TIMEOUT_S = 24 * 3600
DISK_FULL_PATTERN = re.compile(r"No space left on device|ENOSPC|\[Errno 28\]")
MEMORY_PATTERN = re.compile(r"CUDA out of memory|HIP out of memory|OutOfMemoryError|Cannot allocate memory|MemoryError")
TOKENIZER_SAVE_FAILED = "Cannot save tokenizer"
WARNING_DEFAULT_PRE = "default-pre-tokenizer"


# --- what is asked ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportRequest:
    run_id: str
    target: str  # the folder to write, as typed
    checkpoint: str = ""  # "" = the run's final adapter (output/); else "checkpoint-N"
    shard_gb: int = 5
    device: str = "cpu"
    gguf: str = "none"  # none | f16 | q8_0
    overwrite: bool = False  # the replace box: an existing folder an export wrote may be replaced
    confirm: str = ""  # the folder's name, typed: it may be replaced though it holds other files


@dataclass(frozen=True)
class ModelSize:
    params: int  # parameters counted in the safetensors headers (0: unknown)
    dtype: str  # float32 | bfloat16 | float16: the base's, which the merged model keeps
    weight_bytes: int  # the base's weight files on disk
    other_bytes: int  # tokenizer and config files beside them
    from_headers: bool  # False: estimated from the file sizes


@dataclass(frozen=True)
class ExportPlan:
    request: ExportRequest
    run_dir: Path
    adapter_dir: Path
    base_dir: Path
    template: str
    target: Path  # resolved
    size: ModelSize
    merged_bytes: int
    gguf_bytes: int
    needed_disk: int
    free_disk: int
    needed_ram: int  # 0: not checked (device auto)
    available_ram: int
    replaces: bool  # an existing folder is replaced at the end
    foreign: tuple[str, ...] = ()  # what in it no export wrote (deleted with it: its name was typed)

    @property
    def total_bytes(self) -> int:
        return self.merged_bytes + self.size.other_bytes + self.gguf_bytes


@dataclass(frozen=True)
class ExportResult:
    target: Path
    files: tuple[tuple[str, int], ...]  # (name, bytes), sorted
    total_bytes: int
    seconds: float
    gguf: dict[str, Any] | None = None  # what gguf.GGUFReader read back from the file
    warnings: tuple[str, ...] = ()  # ids: WARNING_DEFAULT_PRE
    download: Path | None = None  # a zip of the folder (small models), None: the path only


@dataclass
class ExportProgress:
    phase: str = "idle"  # config | loading | merging | saving | gguf | finishing | done | failed | cancelled
    started: float = 0.0
    ended: float | None = None
    written_bytes: int = 0
    expected_bytes: int = 0
    run_id: str = ""
    target: str = ""
    findings: list[Finding] = field(default_factory=list)
    result: ExportResult | None = None
    log_tail: str = ""

    @property
    def running(self) -> bool:
        return self.phase not in ("idle", "done", "failed", "cancelled")

    def elapsed(self, now: float | None = None) -> float:
        if not self.started:
            return 0.0
        return max(0.0, (self.ended or (now if now is not None else time.time())) - self.started)


def size_text(size: float) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{int(size)} B"


# --- the run and its adapter ----------------------------------------------------------------------


def exportable_runs(store: RunStore) -> list[str]:
    """Training runs that are not running and hold an adapter (final or a checkpoint's), newest first."""
    return [state.id for state in artifacts.runs_with_adapters(store)]


def resolve_base(name: str) -> Path | None:
    """The base model's folder: a folder on this machine, or a hub id already in the local
    cache (exports run offline, as trainers do)."""
    if not isinstance(name, str) or not name.strip() or path_problem(name):
        return None
    expanded = os.path.expanduser(name.strip())
    if os.path.isdir(expanded):
        return Path(os.path.realpath(expanded))
    if os.path.isabs(expanded) or expanded.startswith("."):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(expanded, "config.json")
    except Exception:  # noqa: BLE001 - not a hub id, or no cache: not found either way
        return None
    return Path(cached).parent if isinstance(cached, str) else None


# --- how big --------------------------------------------------------------------------------------


def parse_safetensors_header(data: bytes) -> tuple[int, dict[str, int]]:
    """(parameters, bytes per safetensors dtype) from a safetensors header's JSON."""
    header = json.loads(data.decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError("not a JSON object")
    params = 0
    by_dtype: dict[str, int] = {}
    for name, entry in header.items():
        if name == "__metadata__" or not isinstance(entry, dict):
            continue
        count = 1
        for dim in entry.get("shape") or []:
            count *= int(dim)
        params += count
        dtype = str(entry.get("dtype", ""))
        by_dtype[dtype] = by_dtype.get(dtype, 0) + count * SAFETENSORS_DTYPE_BYTES.get(dtype, 4)
    return params, by_dtype


def read_safetensors_header(path: Path) -> bytes:
    """The JSON header of a safetensors file: an 8-byte little-endian length, then the JSON."""
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) != 8:
            raise ValueError("shorter than a safetensors header")
        (length,) = struct.unpack("<Q", head)
        if not 2 <= length <= HEADER_MAX_BYTES:
            raise ValueError(f"header length {length} is not a safetensors one")
        data = handle.read(length)
        if len(data) != length:
            raise ValueError("the header is cut short")
        return data


def _config_dtype(base_dir: Path) -> str | None:
    try:
        with open(base_dir / "config.json", "rb") as handle:
            config = json.loads(handle.read(4 * MIB))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    value = config.get("torch_dtype") or config.get("dtype")
    return value if value in DTYPE_BYTES else None


def read_model_size(base_dir: Path) -> ModelSize:
    """The base model's size from its safetensors headers (the tensors are never read); from the
    file sizes when there are none or they cannot be read."""
    weight_bytes = other_bytes = 0
    safetensors: list[Path] = []
    counted = 0
    for entry in sorted(os.scandir(base_dir), key=lambda e: e.name):
        if not entry.is_file(follow_symlinks=True):
            continue
        size = entry.stat(follow_symlinks=True).st_size
        if entry.name.endswith(WEIGHT_SUFFIXES):
            weight_bytes += size
            if entry.name.endswith(".safetensors"):
                safetensors.append(Path(entry.path))
        elif counted < OTHER_FILES_MAX:
            other_bytes += size
            counted += 1
    params = 0
    by_dtype: dict[str, int] = {}
    from_headers = bool(safetensors)
    for path in safetensors:
        try:
            found, dtypes = parse_safetensors_header(read_safetensors_header(path))
        except (OSError, ValueError):
            from_headers = False
            break
        params += found
        for key, value in dtypes.items():
            by_dtype[key] = by_dtype.get(key, 0) + value
    floats = {FLOAT_DTYPES[k]: v for k, v in by_dtype.items() if k in FLOAT_DTYPES}
    dtype = _config_dtype(base_dir) or (max(floats, key=floats.get) if floats else "float32")
    if not from_headers:
        params = weight_bytes // DTYPE_BYTES[dtype]
    return ModelSize(params, dtype, weight_bytes, other_bytes, from_headers)


def plan_sizes(size: ModelSize, gguf: str) -> tuple[int, int]:
    """(merged model bytes, GGUF bytes): the merged model keeps the base's dtype."""
    merged = size.params * DTYPE_BYTES[size.dtype] if size.params else size.weight_bytes
    return merged, gguf_tools.estimated_bytes(size.params, gguf) + (size.other_bytes if gguf != "none" else 0)


# --- where ----------------------------------------------------------------------------------------

DEFAULT_EXPORT_FOLDER = "rocboard-exports"
MANIFEST_NAME = ".rocboard-export.json"  # in an export's folder: the files it wrote (name -> bytes)
MANIFEST_MAX_BYTES = 1 * MIB
FOREIGN_SCAN_MAX = 10_000  # entries of an existing folder looked at; more: all foreign
FOREIGN_SHOWN = 5


def default_export_root() -> Path:
    """The page's one export root unless `--export-root` names others: a folder of its own in
    the home, made (0700) by the first export."""
    return Path.home() / DEFAULT_EXPORT_FOLDER


def default_export_roots() -> list[Path]:
    return [default_export_root()]


def app_folder() -> Path:
    """RocBoard's own checkout: the folder holding app.py, ui/ and backend/."""
    return Path(__file__).resolve().parents[2]


def python_environment() -> list[Path]:
    """The Python RocBoard runs in: its prefixes (a venv's folder) and its site-packages, read
    when asked. A prefix that is `/` or holds the home (a Python installed into the home itself)
    is left out: its site-packages still count."""
    import site
    import sys

    found = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix]
    try:
        found += list(site.getsitepackages())
    except AttributeError:  # an old virtualenv's site module
        pass
    user_site = site.getusersitepackages()
    found += [user_site] if isinstance(user_site, str) else list(user_site or ())
    found += [entry for entry in sys.path if entry and os.path.basename(os.path.normpath(entry)) in ("site-packages", "dist-packages")]
    home = Path(os.path.realpath(Path.home()))
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix) if p}
    out: list[Path] = []
    for entry in found:
        if not entry:
            continue
        path = Path(os.path.realpath(entry))
        if str(path) in prefixes and (path == Path(path.anchor) or _inside(home, path)):
            continue
        if path not in out:
            out.append(path)
    return out


def resolved_roots(roots: Sequence[Path] | None) -> tuple[Path, ...] | None:
    if roots is None:
        return None
    return tuple(Path(os.path.realpath(os.path.expanduser(str(root)))) for root in roots)


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def trusted_bases(roots: Sequence[Path] | None) -> list[Path]:
    """Folders whose own path may go through links (the system's, the operator's): the home,
    the default export root and each export root, as given and resolved. Below them, an export
    path follows no link."""
    given = [Path.home(), default_export_root(), *(Path(os.path.expanduser(str(root))) for root in roots or ())]
    bases: list[Path] = []
    for path in given:
        for form in (Path(os.path.normpath(path)), Path(os.path.realpath(path))):
            if form.is_absolute() and form not in bases:
                bases.append(form)
    return bases


def link_on_the_way(literal: Path, bases: Sequence[Path]) -> Path | None:
    """The first link among the folders of `literal` below the deepest trusted base holding it
    (from `/` when none does); the folder itself is checked apart."""
    holding = [base for base in bases if literal != base and literal.is_relative_to(base)]
    base = max(holding, key=lambda b: len(b.parts)) if holding else Path(literal.anchor)
    here = base
    for part in literal.relative_to(base).parts[:-1]:
        here = here / part
        try:
            info = os.lstat(here)
        except OSError:
            return None  # missing (made by the export) or unusable (said later)
        if stat.S_ISLNK(info.st_mode):
            return here
    return None


def protected_finding(raw: str, real: Path, keep_out: Sequence[Path] = ()) -> Finding | None:
    """What no export writes into or replaces, whatever is typed or ticked: `keep_out` (the base
    model's folder, the run, the runs folder), the Python environment RocBoard runs in,
    RocBoard's own folder, the home's hidden folders. A folder the target is inside is named
    first (the most particular: the base model inside RocBoard's folder is "the base model"),
    then one it would replace with it (RocBoard first)."""
    kept = [("export-dir-kept", "kept", Path(os.path.realpath(folder))) for folder in keep_out]
    env = [("export-dir-environment", "env", folder) for folder in python_environment()]
    app = [("export-dir-app", "app", app_folder())]
    for rule, name, folder in kept + env + app:
        if _inside(real, folder):
            return Finding.of("export_dir", rule, path=repr(raw), **{name: str(folder)})
    home = Path(os.path.realpath(Path.home()))
    if real != home and real.is_relative_to(home):
        first = real.relative_to(home).parts[0]
        if first.startswith("."):
            return Finding.of("export_dir", "export-dir-hidden", path=repr(raw), hidden=str(home / first))
    for rule, name, folder in app + env + kept:
        if _inside(folder, real):
            return Finding.of("export_dir", rule, path=repr(raw), **{name: str(folder)})
    return None


def read_manifest(folder: Path) -> dict[str, int]:
    """The files an export wrote in `folder` (its MANIFEST_NAME: name -> bytes); {} when there
    is none or it is not one (a link, too big, not that JSON)."""
    try:
        fd = os.open(folder / MANIFEST_NAME, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return {}
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MANIFEST_MAX_BYTES:
            return {}
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = json.loads(handle.read(MANIFEST_MAX_BYTES))
    except (OSError, ValueError):
        return {}
    finally:
        os.close(fd)
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        return {}
    return {name: size for name, size in files.items() if isinstance(name, str) and isinstance(size, int) and not isinstance(size, bool)}


def write_manifest(folder: Path, run_id: str) -> None:
    files = {entry.name: entry.stat(follow_symlinks=False).st_size for entry in os.scandir(folder) if entry.is_file(follow_symlinks=False) and entry.name != MANIFEST_NAME}
    (folder / MANIFEST_NAME).write_text(json.dumps({"written_by": "rocboard export", "run": run_id, "files": files}, indent=1, sort_keys=True), encoding="utf-8")


def foreign_entries(folder: Path) -> tuple[str, ...]:
    """The names in an existing `folder` that no RocBoard export wrote: everything but the
    regular files its manifest lists with their size (and the manifest). Sorted."""
    written = read_manifest(folder)
    foreign = []
    with os.scandir(folder) as entries:
        for count, entry in enumerate(entries):
            if count >= FOREIGN_SCAN_MAX:
                foreign.append("…")
                break
            if entry.name == MANIFEST_NAME and written:
                continue
            try:
                ours = entry.is_file(follow_symlinks=False) and written.get(entry.name) == entry.stat(follow_symlinks=False).st_size
            except OSError:
                ours = False
            if not ours:
                foreign.append(entry.name)
    return tuple(sorted(foreign))


def foreign_finding(raw: str, real: Path, foreign: Sequence[str]) -> Finding:
    shown = ", ".join(foreign[:FOREIGN_SHOWN]) + (", …" if len(foreign) > FOREIGN_SHOWN else "")
    return Finding.of("export_dir", "export-dir-foreign", path=repr(raw), count=len(foreign), names=shown, name=real.name)


def replace_confirmed(request_confirm: str, real: Path) -> bool:
    """The user typed the folder's own name (exactly) to replace what no export wrote."""
    return bool(request_confirm) and request_confirm.strip() == real.name


def check_target(
    raw: str, roots: Sequence[Path] | None, overwrite: bool, keep_out: Sequence[Path] = (), confirm: str = ""
) -> tuple[Path | None, list[Finding]]:
    """The export folder `raw` names, resolved, or why not: the one check for the page and the
    command line. `roots` None: anywhere (the command line: its user is the machine's own);
    every other rule is the same for both:

    - a full path; no link as the folder itself, nor among its folders below the home or an
      export root (`link_on_the_way`);
    - never `/`, the home or a folder holding it; never into or over `keep_out` (the base
      model's folder, the run, the runs folder), the Python environment, RocBoard's own folder
      or a hidden folder of the home (`protected_finding`): no confirmation unlocks these;
    - inside a root, not a root itself (the page);
    - an existing non-empty folder only with `overwrite`, and when it holds anything no export
      wrote (`foreign_entries`), only with its name typed in `confirm` (which implies
      `overwrite`)."""
    raw = (raw or "").strip()
    if not raw:
        return None, [Finding.of("export_dir", "export-dir-empty")]
    problem = path_problem(raw)
    if problem:
        return None, [Finding.of("export_dir", "export-dir-unusable", path=repr(raw[:120]), problem=problem)]
    expanded = os.path.expanduser(raw)
    if not os.path.isabs(expanded):
        return None, [Finding.of("export_dir", "export-dir-not-absolute", path=repr(raw))]
    literal = Path(os.path.normpath(expanded))
    if os.path.islink(literal):
        return None, [Finding.of("export_dir", "export-dir-link", path=repr(raw), target=os.path.realpath(literal))]
    link = link_on_the_way(literal, trusted_bases(roots))
    if link is not None:
        real_path = os.path.realpath(literal)
        return None, [Finding.of("export_dir", "export-dir-link", message="export-dir-link-on-way", path=repr(raw), link=str(link), target=os.path.realpath(link), real=real_path)]
    real = Path(os.path.realpath(literal))
    home = Path(os.path.realpath(Path.home()))
    if real == Path(real.anchor) or _inside(home, real):
        return None, [Finding.of("export_dir", "export-dir-is-root", path=repr(raw))]
    protected = protected_finding(raw, real, keep_out)
    if protected is not None:
        return None, [protected]
    allowed = resolved_roots(roots)
    if allowed is not None:
        shown = ", ".join(str(root) for root in allowed)
        if not allowed:
            return None, [Finding.of("export_dir", "export-dir-outside", path=repr(raw), roots="-")]
        if not any(_inside(real, root) for root in allowed):
            return None, [Finding.of("export_dir", "export-dir-outside", path=repr(raw), roots=shown)]
        if any(real == root for root in allowed):
            return None, [Finding.of("export_dir", "export-dir-is-root", path=repr(raw))]
    try:
        info = os.lstat(real)
    except FileNotFoundError:
        return real, []
    except OSError as error:
        return None, [Finding.of("export_dir", "export-dir-unusable", path=repr(raw), problem=error.strerror or str(error))]
    if not stat.S_ISDIR(info.st_mode):
        return None, [Finding.of("export_dir", "export-dir-not-dir", path=repr(raw))]
    try:
        foreign = foreign_entries(real)
        empty = not foreign and not any(True for _ in os.scandir(real))
    except OSError as error:
        return None, [Finding.of("export_dir", "export-dir-unusable", path=repr(raw), problem=error.strerror or str(error))]
    if empty:
        return real, []
    refusal = replace_finding(raw, real, foreign, overwrite, confirm)
    return (None, [refusal]) if refusal is not None else (real, [])


def replace_finding(raw: str, real: Path, foreign: Sequence[str], overwrite: bool, confirm: str) -> Finding | None:
    """Why the existing non-empty folder `real` may not be replaced, or None: the replace box
    (`overwrite`) for what an export wrote; its name typed (`confirm`) for anything else."""
    confirmed = replace_confirmed(confirm, real)
    if foreign and not confirmed:
        if not overwrite and not confirm:
            return Finding.of("export_dir", "export-dir-exists", path=str(real))
        return foreign_finding(raw, real, foreign)
    if not foreign and not (overwrite or confirmed):
        return Finding.of("export_dir", "export-dir-exists", path=str(real))
    return None


def _foreign_or_none(folder: Path) -> tuple[str, ...]:
    try:
        return foreign_entries(folder) if folder.is_dir() else ()
    except OSError:
        return ()


def make_parents(folder: Path) -> list[Path]:
    """Makes the missing folders down to `folder` (the default export root on the first
    export), each 0700 and never through a link; returns those it made."""
    missing = []
    here = folder
    while not os.path.lexists(here) and here != here.parent:
        missing.append(here)
        here = here.parent
    made = []
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
            os.chmod(path, 0o700)  # whatever the umask: only its owner reads exported models
            made.append(path)
        except FileExistsError:
            pass
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode):
            raise _Failed(Finding.of("export_dir", "export-dir-link", path=repr(str(path)), target=os.path.realpath(path)))
    return made


def existing_parent(path: Path) -> Path:
    """The nearest folder of `path` that exists (where its filesystem is measured)."""
    here = path
    while not here.exists() and here != here.parent:
        here = here.parent
    return here


def available_ram() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


def plan_export(
    store: RunStore,
    request: ExportRequest,
    roots: Sequence[Path] | None,
    *,
    free_disk: Callable[[Path], int] = lambda path: shutil.disk_usage(path).free,
    ram: Callable[[], int] = available_ram,
    converter: Callable[[], Path | None] = gguf_tools.find_converter,
) -> tuple[ExportPlan | None, list[Finding]]:
    """Everything checked before an export starts: the run, its adapter, the base model, the
    target folder, the size against the disk and the memory. Writes nothing."""
    try:
        run_dir = store.run_dir(request.run_id)
        state = store.read(request.run_id)
    except RunNotFound:
        return None, [Finding.of("run", "export-run-missing", run=repr(str(request.run_id)[:80]))]
    if state.active:
        return None, [Finding.of("run", "export-run-active", run=request.run_id)]
    if not isinstance(request.shard_gb, int) or not SHARD_GB_RANGE[0] <= request.shard_gb <= SHARD_GB_RANGE[1]:
        return None, [Finding.of("export_size", "export-shard-range", value=repr(request.shard_gb), low=SHARD_GB_RANGE[0], high=SHARD_GB_RANGE[1])]
    if request.device not in DEVICES:
        return None, [Finding.of("export_device", "export-device-invalid", value=repr(request.device)[:40])]
    if request.gguf not in GGUF_CHOICES:
        return None, [Finding.of("gguf", "export-gguf-invalid", value=repr(request.gguf)[:40])]
    checkpoint = request.checkpoint or ""
    relative = artifacts.adapter_folder(checkpoint)
    if relative is None:
        return None, [Finding.of("checkpoint", "export-no-adapter", run=request.run_id, where=repr(checkpoint[:40]))]
    if not artifacts.has_adapter_at(run_dir, checkpoint):
        return None, [Finding.of("checkpoint", "export-no-adapter", run=request.run_id, where=relative)]
    form = store.read_form(request.run_id)
    if form.get("finetuning_type", "lora") != "lora":
        return None, [Finding.of("finetuning_type", "export-not-lora", run=request.run_id, kind=str(form.get("finetuning_type"))[:20])]
    base_name = str(form.get("model_path") or form.get("model_name_or_path") or "")
    base_dir = resolve_base(base_name)
    if base_dir is None or not (base_dir / "config.json").is_file():
        return None, [Finding.of("model_name_or_path", "export-base-missing", model=repr(base_name[:200]))]
    template = str(form.get("template") or "default")
    if request.gguf != "none" and converter() is None:
        return None, [Finding.of("gguf", "export-gguf-missing")]
    target, findings = check_target(request.target, roots, request.overwrite, keep_out=(base_dir, run_dir, store.root), confirm=request.confirm)
    if target is None:
        return None, findings
    try:
        size = read_model_size(base_dir)
    except OSError as error:
        return None, [Finding.of("model_name_or_path", "export-base-missing", model=f"{base_name[:200]!r} ({error.strerror or error})")]
    merged, gguf_bytes = plan_sizes(size, request.gguf)
    needed_disk = merged + size.other_bytes + gguf_bytes + SMALL_FILES_SLACK
    where = existing_parent(target)
    free = int(free_disk(where))
    needed_ram = merged + PROCESS_RAM_BYTES if request.device == "cpu" else 0
    have_ram = int(ram()) if needed_ram else 0
    plan = ExportPlan(
        request, run_dir, run_dir / relative, base_dir, template, target, size, merged, gguf_bytes,
        needed_disk, free, needed_ram, have_ram, replaces=target.exists(),
        foreign=_foreign_or_none(target),
    )  # fmt: skip
    problems = []
    if needed_disk > free:
        problems.append(Finding.of("export_dir", "export-disk-small", needed=size_text(needed_disk), free=size_text(free), where=str(where)))
    if needed_ram and needed_ram > have_ram:
        problems.append(Finding.of("export_device", "export-ram-small", needed=size_text(needed_ram), free=size_text(have_ram)))
    return plan, problems


# --- the LLaMA-Factory config ---------------------------------------------------------------------


def export_config(plan: ExportPlan, export_dir: Path) -> dict[str, Any]:
    """The YAML `llamafactory-cli export` reads. infer_dtype is the base's dtype: LLaMA-Factory's
    `auto` turns a float32 model into bf16/fp16 on a GPU machine, and the merged model is meant
    to answer as base + adapter does."""
    return {
        "model_name_or_path": str(plan.base_dir),
        "adapter_name_or_path": str(plan.adapter_dir),
        "template": plan.template,
        "finetuning_type": "lora",
        "export_dir": str(export_dir),
        "export_size": int(plan.request.shard_gb),
        "export_device": plan.request.device,
        "export_legacy_format": False,
        "infer_dtype": plan.size.dtype,
    }


def export_command(config_path: Path) -> list[str]:
    return [llamafactory_cli(), "export", str(config_path)]


def export_env() -> dict[str, str]:
    import sys

    here = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    own = dict(OFFLINE_ENV)
    own["PATH"] = os.pathsep.join([here, path]) if path else here
    # No GPU is wanted by a CPU merge; none is hidden either: `auto` may use it.
    return child_env(None, (), own)


# --- reading what a child wrote -------------------------------------------------------------------


def read_tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            return handle.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def folder_bytes(folder: Path) -> int:
    total = 0
    try:
        for entry in os.scandir(folder):
            if entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
    except OSError:
        pass
    return total


def merge_phase(log_text: str, staged_bytes: int) -> str:
    """Where a running `llamafactory-cli export` is, from its log and the staging folder."""
    if staged_bytes > 0:
        return "saving"
    if "Merged " in log_text or "Convert model dtype" in log_text:
        return "merging"
    return "loading"


def failure_finding(log_text: str, step: str) -> Finding:
    """Why a child failed, from its log: a full disk, memory, or its last line."""
    if DISK_FULL_PATTERN.search(log_text):
        return Finding.of("export_dir", "export-disk-full", step=step)
    if MEMORY_PATTERN.search(log_text):
        return Finding.of("export_device", "export-out-of-memory", step=step)
    lines = [line.strip() for line in log_text.splitlines() if line.strip()]
    last = next((line for line in reversed(lines) if "Error" in line or "error" in line), lines[-1] if lines else "")
    return Finding.of("export", "export-failed", step=step, error=last[-300:])


# --- the job --------------------------------------------------------------------------------------


class Cancelled(Exception):
    pass


class _Failed(Exception):
    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.problem)
        self.finding = finding


def staging_name(target: Path) -> str:
    """Hidden, beside the target, naming the process that writes it (see remove_stale_staging)."""
    return f"{STAGING_PREFIX}{target.name}{STAGING_MARK}{os.getpid()}-{secrets.token_hex(4)}"


def remove_stale_staging(parent: Path, target_name: str) -> list[Path]:
    """Staging folders of `target_name` left by a process that is gone (an app killed with
    SIGKILL cannot clean up): removed before the next export to that folder."""
    import psutil

    removed = []
    for path in leftover_staging(parent, target_name):
        pid_text = path.name.rsplit(STAGING_MARK, 1)[-1].split("-", 1)[0]
        if pid_text.isdigit() and int(pid_text) != os.getpid() and not psutil.pid_exists(int(pid_text)) and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


class ExportJob:
    """One export, in a thread of its own: `start()`, read `progress`, `cancel()`, `join()`."""

    def __init__(self, plan: ExportPlan, download_dir: Path | None = None, on_line: Callable[[str], None] | None = None) -> None:
        self.plan = plan
        self.download_dir = download_dir
        self.on_line = on_line
        # The size the plan line showed ("Size needed"): the progress counts toward it.
        self.progress = ExportProgress(
            phase="config", started=time.time(), expected_bytes=plan.needed_disk, run_id=plan.request.run_id, target=str(plan.target)
        )
        self.staging = plan.target.parent / staging_name(plan.target)
        # The children's logs live off the target's disk: a full disk must not silence them.
        self.log_dir: Path | None = None
        self._cancel = threading.Event()
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"export-{plan.request.run_id}", daemon=True)

    # --- control --------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        self._cancel.set()
        self._stop_child()

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def child_pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def _stop_child(self) -> None:
        with self._lock:
            process = self._process
        if process is None or process.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, STOP_WAIT_S)):
            try:
                os.killpg(process.pid, sig)
            except (ProcessLookupError, PermissionError):
                return
            try:
                process.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def _set(self, phase: str) -> None:
        if self.progress.phase != phase:
            self.progress.phase = phase
            if self.on_line:
                self.on_line(phase)

    # --- the work -------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            result = self._work()
        except Cancelled:
            self._cleanup()
            self.progress.phase = "cancelled"
        except _Failed as failed:
            self._cleanup()
            self.progress.findings = [failed.finding]
            self.progress.phase = "failed"
        except OSError as error:
            self._cleanup()
            key = "export-disk-full" if error.errno == 28 else "export-failed"
            self.progress.findings = [Finding.of("export_dir", key, step="files", error=str(error)[:300])]
            self.progress.phase = "failed"
        except Exception as error:  # noqa: BLE001 - any failure ends the job with a finding, not a traceback
            self._cleanup()
            self.progress.findings = [Finding.of("export", "export-failed", step="export", error=f"{type(error).__name__}: {error}"[:300])]
            self.progress.phase = "failed"
        else:
            self.progress.result = result
            self.progress.phase = "done"
        finally:
            if self.log_dir is not None:
                shutil.rmtree(self.log_dir, ignore_errors=True)
            self.progress.ended = time.time()

    def _cleanup(self) -> None:
        self._stop_child()
        shutil.rmtree(self.staging, ignore_errors=True)

    def _check_cancel(self) -> None:
        if self._cancel.is_set():
            raise Cancelled()

    def _child(self, command: list[str], log_path: Path, timeout_s: float, step: str, watch: Callable[[str], None]) -> str:
        """Runs one child to its end, logging to `log_path`; returns its log."""
        self._check_cancel()
        with open(log_path, "wb") as log:
            with self._lock:
                self._process = subprocess.Popen(
                    command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=str(self.staging), env=export_env(), start_new_session=True
                )
            process = self._process
            deadline = time.monotonic() + timeout_s
            while process.poll() is None:
                if self._cancel.is_set():
                    self._stop_child()
                    raise Cancelled()
                if time.monotonic() > deadline:
                    self._stop_child()
                    raise _Failed(Finding.of("export", "export-failed", step=step, error=f"no end after {int(timeout_s)} s"))
                text = read_tail(log_path)
                self.progress.log_tail = text[-4000:]
                watch(text)
                time.sleep(POLL_S)
        text = read_tail(log_path)
        self.progress.log_tail = text[-4000:]
        self._check_cancel()
        if process.returncode != 0:
            raise _Failed(failure_finding(text, step))
        return text

    def _work(self) -> ExportResult:
        plan = self.plan
        started = time.time()
        self.log_dir = Path(tempfile.mkdtemp(prefix="rocboard-export-logs-"))
        make_parents(plan.target.parent)
        remove_stale_staging(plan.target.parent, plan.target.name)
        os.mkdir(self.staging, 0o755)
        model_dir = self.staging / MODEL_SUBDIR
        config_path = self.staging / CONFIG_NAME
        config_path.write_text(yaml.safe_dump(export_config(plan, model_dir), sort_keys=False), encoding="utf-8")
        self._set("loading")

        def watch_merge(text: str) -> None:
            staged = folder_bytes(model_dir)
            self.progress.written_bytes = staged
            self._set(merge_phase(text, staged))

        log = self._child(export_command(config_path), self.log_dir / LOG_NAME, MERGE_TIMEOUT_S, "merge", watch_merge)
        self.progress.written_bytes = folder_bytes(model_dir)
        self._check_written(model_dir, log)

        warnings: list[str] = []
        gguf_summary = None
        if plan.request.gguf != "none":
            self._set("gguf")
            converter = gguf_tools.find_converter()
            if converter is None:
                raise _Failed(Finding.of("gguf", "export-gguf-missing"))
            out = model_dir / gguf_tools.gguf_file_name(plan.target.name, plan.request.gguf)
            gguf_log = self._child(
                gguf_tools.runner_command(converter, model_dir, out, plan.request.gguf),
                self.log_dir / GGUF_LOG_NAME,
                GGUF_TIMEOUT_S,
                "gguf",
                lambda text: setattr(self.progress, "written_bytes", folder_bytes(model_dir)),
            )
            gguf_summary, warnings = gguf_tools.parse_runner_output(gguf_log)
            if gguf_summary is None or not out.is_file():
                raise _Failed(failure_finding(gguf_log, "gguf"))

        self._set("finishing")
        self._check_cancel()
        write_manifest(model_dir, plan.request.run_id)
        self._move_into_place(model_dir)
        files = tuple(
            sorted(
                (entry.name, entry.stat(follow_symlinks=False).st_size)
                for entry in os.scandir(plan.target)
                if entry.is_file(follow_symlinks=False) and entry.name != MANIFEST_NAME
            )
        )
        total = sum(size for _, size in files)
        result = ExportResult(plan.target, files, total, time.time() - started, gguf_summary, tuple(warnings))
        if self.download_dir is not None and total <= DOWNLOAD_MAX_BYTES:
            result = replace(result, download=zip_folder(plan.target, self.download_dir / plan.request.run_id, f"{plan.target.name}.zip"))
        return result

    def _check_written(self, model_dir: Path, log: str) -> None:
        """LLaMA-Factory logs a failed tokenizer save as a warning and goes on: the folder is
        checked for what a usable merged model needs."""
        names = set(os.listdir(model_dir)) if model_dir.is_dir() else set()
        if TOKENIZER_SAVE_FAILED in log and DISK_FULL_PATTERN.search(log):
            raise _Failed(Finding.of("export_dir", "export-disk-full", step="merge"))
        missing = [name for name in ("config.json", "Modelfile", "tokenizer_config.json") if name not in names]
        if not any(name.endswith(".safetensors") for name in names):
            missing.append("*.safetensors")
        if missing:
            raise _Failed(Finding.of("export", "export-incomplete", missing=", ".join(missing)))

    def _move_into_place(self, model_dir: Path) -> None:
        """The finished folder takes the target's name; an old one is moved aside first and
        removed only once the new one is in place."""
        target = self.plan.target
        old = self.staging / OLD_SUBDIR
        if os.path.lexists(target):
            if os.path.islink(target) or not os.path.isdir(target):
                raise _Failed(Finding.of("export_dir", "export-dir-link", path=repr(str(target)), target=os.path.realpath(target)))
            # Looked at again: the folder may have changed since the plan.
            if any(True for _ in os.scandir(target)):
                refusal = replace_finding(str(target), target, foreign_entries(target), self.plan.request.overwrite, self.plan.request.confirm)
                if refusal is not None:
                    raise _Failed(refusal)
            os.rename(target, old)
        try:
            os.rename(model_dir, target)
        except OSError:
            if os.path.isdir(old) and not os.path.lexists(target):
                os.rename(old, target)  # the old folder back where it was
            raise
        shutil.rmtree(self.staging, ignore_errors=True)


def zip_folder(folder: Path, out_dir: Path, name: str) -> Path:
    """A zip of the folder's files (stored: weights do not compress), written under a temp
    name and renamed into place."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with safe_files.atomic_writer(out_dir, name) as out, zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if entry.is_file(follow_symlinks=False) and entry.name != MANIFEST_NAME:
                archive.write(entry.path, f"{folder.name}/{entry.name}")
    return out_dir / name


def leftover_staging(parent: Path, target_name: str) -> list[Path]:
    """Staging folders of `target_name` in `parent` (a test's and a cleanup's question)."""
    prefix = f"{STAGING_PREFIX}{target_name}{STAGING_MARK}"
    try:
        return [Path(entry.path) for entry in os.scandir(parent) if entry.name.startswith(prefix)]
    except OSError:
        return []
