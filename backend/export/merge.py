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
neither torch nor transformers: the package reads files and starts processes.

This module holds the request and its plan (`plan_export`, everything checked before an export
starts); each concern has a module of its own: size.py (how big), target.py (where: `check_target`),
job.py (the staged job, `ExportJob`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from backend.config.paths import path_problem
from backend.export import gguf_convert as gguf_tools
from backend.export.size import GIB, MIB, ModelSize, available_ram, plan_sizes, read_model_size, size_text
from backend.export.target import check_target, existing_parent, foreign_or_none
from backend.findings import Finding
from backend.i18n.errors import os_error
from backend.runs import RunNotFound, RunStore, artifacts

SHARD_GB_RANGE = (1, 100)
DEVICES = ("cpu", "auto")
GGUF_CHOICES = ("none", "f16", "q8_0")
# Room for config.json, generation_config.json, the Modelfile, our YAML and logs.
SMALL_FILES_SLACK = 2 * MIB
# Merging on the CPU: the model in memory plus the process itself (torch, transformers).
PROCESS_RAM_BYTES = 1 * GIB


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
    from backend.config.run_form import read_saved_run

    saved = read_saved_run(run_dir)  # the run's form, typed
    if saved.config.method.finetuning_type != "lora" or ("finetuning_type" in saved.given and not saved.known("finetuning_type")):
        return None, [Finding.of("finetuning_type", "export-not-lora", run=request.run_id, kind=str(saved.form["finetuning_type"])[:20])]
    base_name = saved.config.model.model_name_or_path
    base_dir = resolve_base(base_name)
    if base_dir is None or not (base_dir / "config.json").is_file():
        return None, [Finding.of("model_name_or_path", "export-base-missing", model=repr(base_name[:200]))]
    template = saved.config.model.template
    if request.gguf != "none" and converter() is None:
        return None, [Finding.of("gguf", "export-gguf-missing")]
    target, findings = check_target(request.target, roots, request.overwrite, keep_out=(base_dir, run_dir, store.root), confirm=request.confirm)
    if target is None:
        return None, findings
    try:
        size = read_model_size(base_dir)
    except OSError as error:
        return None, [Finding.of("model_name_or_path", "export-base-missing", message="export-base-unreadable", model=repr(base_name[:200]), error=os_error(error))]
    merged, gguf_bytes = plan_sizes(size, request.gguf)
    needed_disk = merged + size.other_bytes + gguf_bytes + SMALL_FILES_SLACK
    where = existing_parent(target)
    free = int(free_disk(where))
    needed_ram = merged + PROCESS_RAM_BYTES if request.device == "cpu" else 0
    have_ram = int(ram()) if needed_ram else 0
    plan = ExportPlan(
        request, run_dir, run_dir / relative, base_dir, template, target, size, merged, gguf_bytes,
        needed_disk, free, needed_ram, have_ram, replaces=target.exists(),
        foreign=foreign_or_none(target),
    )  # fmt: skip
    problems = []
    if needed_disk > free:
        problems.append(Finding.of("export_dir", "export-disk-small", needed=size_text(needed_disk), free=size_text(free), where=str(where)))
    if needed_ram and needed_ram > have_ram:
        problems.append(Finding.of("export_device", "export-ram-small", needed=size_text(needed_ram), free=size_text(have_ram)))
    return plan, problems
