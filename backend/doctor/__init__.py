"""The ROCm doctor: facts about this machine -> one verdict per check, each with what it saw
and the fix.

`gather_facts()` collects everything into a `MachineFacts`: torch's view comes from the
`backend.doctor.probe` subprocess (the web process never imports torch), the rest from
/sys, /dev, the group database, the telemetry detector and package metadata. `run_checks()`
is pure: tests hand it any machine (an RDNA2 box without groups, an 8-GPU MI300X node, a
CPU-only laptop) and assert the verdicts.

Verdicts: "ok"; "warning" (a feature is missing or degraded: QLoRA, flash-attn, the VRAM
chart); "problem" (a run would break). A check that only matters on the GPU says so
(`needed_for="gpu"`), so a CPU-demo run is not blocked by a missing GPU.
"""

from __future__ import annotations

import grp
import importlib.util
import json
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from backend.config.schema import TRACKER_PACKAGES
from backend.doctor import torch_choice
from backend.doctor.probe import MARKER, installed_version
from backend.doctor.slurm import SlurmFacts, gather_slurm
from backend.doctor.torch_choice import Choice as TorchChoice
from backend.i18n import Joined
from backend.i18n import Message as M
from backend.security.child_env import child_env
from backend.telemetry.base import SourceStatus
from backend.telemetry.sysfs import AMD_VENDOR_ID
from backend.telemetry.topology import KfdGpu, read_kfd_gpus, visible_gpus

Verdict = Literal["ok", "warning", "problem"]
Scope = Literal["gpu", "any", "slurm"]  # "slurm": only a Slurm run breaks

ROOT = Path(__file__).resolve().parents[2]  # backend/doctor/__init__.py -> the repository
PROBE_TIMEOUT_S = 180  # importing torch on a busy machine, then bitsandbytes: tens of seconds
GIB = 1024**3
NVIDIA_VENDOR_ID = "0x10de"

# The override that makes ROCm run a target with the code of its nearest supported sibling.
# Applied only when the installed torch has no kernels for the target itself.
GFX_OVERRIDES: dict[str, str] = {
    **{target: "10.3.0" for target in ("gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036")},
    **{target: "11.0.0" for target in ("gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151")},
}
# bf16 arithmetic: CDNA (MI100 and later), RDNA3 and RDNA4. Not RDNA1/2, not Vega (MI50/60).
BF16_TARGET_PREFIXES = ("gfx908", "gfx90a", "gfx94", "gfx95", "gfx11", "gfx12")
VISIBILITY_VARIABLES = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
ENV_OF_INTEREST = ("HSA_OVERRIDE_GFX_VERSION", *VISIBILITY_VARIABLES)
GPU_GROUPS = ("video", "render")
VERSIONS_OF_INTEREST = ("llamafactory", "transformers", "peft", "trl", "accelerate")


@dataclass(frozen=True)
class Check:
    name: str
    verdict: Verdict
    saw: str  # what was found, in plain words
    fix: str = ""  # what to do; empty when there is nothing to do
    needed_for: Scope = "gpu"  # "any": a CPU run breaks too; "slurm": only a run on the cluster


@dataclass(frozen=True)
class TorchGpu:
    index: int  # as torch numbers it (after the *_VISIBLE_DEVICES variables)
    name: str
    gfx_target: str | None  # gcnArchName, e.g. "gfx90a:sramecc+:xnack-"; None on CUDA
    total_memory_bytes: int | None


@dataclass(frozen=True)
class TorchFacts:
    version: str | None = None  # None: torch is not importable (see import_error)
    hip_version: str | None = None
    cuda_version: str | None = None
    arch_list: tuple[str, ...] = ()  # targets this build has kernels for
    gpus: tuple[TorchGpu, ...] = ()
    device_error: str | None = None  # why torch sees no GPU, in the runtime's words
    import_error: str | None = None
    bf16_reported: bool | None = None  # torch.cuda.is_bf16_supported(); True on ROCm even where wrong


@dataclass(frozen=True)
class LibraryFact:
    name: str
    version: str | None  # None: not installed
    backend: str | None = None  # "ROCm", "CUDA", "CPU", "ROCm (CK)", ...
    error: str | None = None  # installed, but failed to import or to load its native code


@dataclass(frozen=True)
class DeviceNode:
    path: str
    exists: bool
    accessible: bool  # this process may open it read-write
    group: str | None = None  # the group that owns it


@dataclass(frozen=True)
class PciGpu:
    address: str
    vendor: Literal["amd", "nvidia", "other"]


@dataclass(frozen=True)
class UserFacts:
    name: str
    uid: int
    process_groups: tuple[str, ...]  # groups this process has now
    listed_groups: tuple[str, ...]  # groups /etc/group gives the user (new ones need a fresh login)


@dataclass(frozen=True)
class MachineFacts:
    torch: TorchFacts
    kfd_gpus: tuple[KfdGpu, ...] | None  # GPU nodes of the KFD topology (real gfx targets); None: no KFD
    pci_gpus: tuple[PciGpu, ...]
    devices: tuple[DeviceNode, ...]  # /dev/kfd and /dev/dri/renderD*
    user: UserFacts
    env: Mapping[str, str]  # the variables of ENV_OF_INTEREST that are set
    telemetry: tuple[SourceStatus, ...]
    libraries: tuple[LibraryFact, ...]  # bitsandbytes, flash_attn, deepspeed, liger-kernel
    llamafactory_cli: str | None  # path of the executable
    versions: Mapping[str, str | None] = field(default_factory=dict)  # distribution -> version
    # report_to's trackers (backend/config/schema.py TRACKER_PACKAGES) -> the installed package
    # and its version ("tensorboard 2.20.0"), None when none of its packages is found; found with
    # importlib.util.find_spec, never imported. Empty: not gathered (every tracker missing).
    trackers: Mapping[str, str | None] = field(default_factory=dict)
    # llama.cpp's GGUF converter (backend/export/gguf_convert.py find_converter): its path, None
    # when not installed (`make gguf`). Optional: only the Export tab's GGUF needs it.
    gguf_converter: str | None = None
    # Which torch `make` would install here (backend/doctor/torch_choice.py: the ROCm found and
    # its wheel index), for the command that replaces a CUDA torch on an AMD box. None: not gathered.
    torch_choice: TorchChoice | None = None
    python: str = "python"  # the Python the app and its runs use (the fix's pip is its own)
    # The cluster, where this machine is set up to submit to one (backend/doctor/slurm.py).
    slurm: SlurmFacts = field(default_factory=lambda: SlurmFacts(False))


# --- small rules ------------------------------------------------------------------------


def base_target(gfx: str | None) -> str | None:
    """"gfx90a:sramecc+:xnack-" -> "gfx90a"."""
    return gfx.split(":")[0].strip().lower() if gfx else None


def override_target(value: str) -> str | None:
    """HSA_OVERRIDE_GFX_VERSION "10.3.0" -> "gfx1030", "9.4.2" -> "gfx942"; None if malformed."""
    try:
        major, minor, step = (int(part) for part in value.strip().split("."))
    except ValueError:
        return None
    return f"gfx{major}{minor:x}{step:x}"


def has_bf16(gfx: str | None) -> bool:
    target = base_target(gfx) or ""
    return target.startswith(BF16_TARGET_PREFIXES)


def amd_gpu_present(facts: MachineFacts) -> bool:
    return bool(facts.kfd_gpus) or any(g.vendor == "amd" for g in facts.pci_gpus)


def nvidia_gpu_present(facts: MachineFacts) -> bool:
    return any(g.vendor == "nvidia" for g in facts.pci_gpus)


def amd_gpus(facts: MachineFacts) -> list[tuple[str, bool]]:
    """(real gfx target, integrated) of each AMD GPU a run sees: from KFD, which tells the real
    target even under an override, after the *_VISIBLE_DEVICES variables; else from what a
    ROCm torch reports."""
    if facts.kfd_gpus:
        return [(base_target(g.gfx) or "unknown", g.integrated) for g in visible_gpus(list(facts.kfd_gpus), facts.env)]
    if facts.torch.hip_version:
        return [(base_target(g.gfx_target) or "unknown", False) for g in facts.torch.gpus]
    return []


def amd_targets(facts: MachineFacts) -> list[str]:
    return [target for target, _ in amd_gpus(facts)]


def _count(targets: Sequence[str]) -> str:
    seen: dict[str, int] = {}
    for target in targets:
        seen[target] = seen.get(target, 0) + 1
    return ", ".join(f"{n} x {t}" if n > 1 else t for t, n in seen.items())


def _gib(size: int | None) -> str:
    return f"{size / GIB:.0f} GiB" if size else M("doctor.memory_unknown")


def _and(words: Sequence[str]) -> Joined:
    """"video and render", in the page's language."""
    return Joined(words, M("doctor.and"))


def rocm_torch_fix(facts: MachineFacts) -> str:
    """The command that puts the ROCm build of torch in place of this one: for the ROCm this
    machine has (torch_choice.py, as `make` decides), or the nearest there are wheels for."""
    choice = facts.torch_choice
    if choice is None:
        return M("doctor.fix.rocm_torch")
    if not choice.stopped:
        return M("doctor.fix.rocm_torch_for", rocm=choice.rocm or "?", source=choice.rocm_source or "?", command=torch_choice.install_command(choice, facts.python))
    newest = max(torch_choice.ROCM_INDEXES)
    command = f"{facts.python} -m pip install --force-reinstall {' '.join(torch_choice.rocm_pip_args(torch_choice.ROCM_INDEXES[newest]))}"
    wheels = f"{newest[0]}.{newest[1]}"
    if choice.rocm:
        return M("doctor.fix.rocm_torch_too_old", rocm=choice.rocm, source=choice.rocm_source or "?", wheels=wheels, torch=torch_choice.TORCH_VERSION, command=command)
    return M("doctor.fix.rocm_torch_unknown", wheels=wheels, command=command)


def _torch_build(torch: TorchFacts) -> M:
    if torch.hip_version:
        return M("doctor.torch.build_rocm", version=torch.version, hip=torch.hip_version)
    if torch.cuda_version:
        return M("doctor.torch.build_cuda", version=torch.version, cuda=torch.cuda_version)
    return M("doctor.torch.build_cpu", version=torch.version)


# --- checks -----------------------------------------------------------------------------
# Each check's name, what it saw and its fix are messages (backend/i18n: `doctor.*`), so the
# page shows them in its language; as strings they are English (the command line). What the
# machine said (an import error, a device name, a path) is a value inside them, as written.


def check_torch_build(facts: MachineFacts) -> Check:
    name = M("doctor.name.torch_build")
    torch = facts.torch
    if torch.version is None:
        fix = rocm_torch_fix(facts) if amd_gpu_present(facts) else M("doctor.fix.rocm_torch")
        return Check(name, "problem", M("doctor.torch.import_error", error=torch.import_error), fix, "any")
    saw = _torch_build(torch)
    if torch.hip_version:
        return Check(name, "ok", saw)
    if amd_gpu_present(facts) and not (torch.cuda_version and nvidia_gpu_present(facts)):
        return Check(name, "problem", M("doctor.torch.wrong_build", build=saw), rocm_torch_fix(facts))
    if torch.cuda_version and nvidia_gpu_present(facts):
        return Check(name, "ok", M("doctor.torch.nvidia", build=saw))
    return Check(name, "ok", M("doctor.torch.no_gpu", build=saw))


def check_gpus_visible(facts: MachineFacts) -> Check:
    name = M("doctor.name.gpus_visible")
    torch = facts.torch
    if torch.gpus:
        listed = Joined(
            M("doctor.gpus.gpu", index=g.index, name=g.name, target=base_target(g.gfx_target) or M("doctor.gpus.no_target"), memory=_gib(g.total_memory_bytes))
            for g in torch.gpus
        )
        return Check(name, "ok", M("doctor.gpus.listed", count=len(torch.gpus), listed=listed))
    if not amd_gpu_present(facts) and not nvidia_gpu_present(facts):
        return Check(name, "ok", M("doctor.gpus.none_no_gpu"))
    reason = M("doctor.gpus.runtime_said", error=torch.device_error) if torch.device_error else ""  # the runtime's words, quoted
    if torch.version is not None and not torch.hip_version and amd_gpu_present(facts):
        return Check(name, "problem", M("doctor.gpus.none_wrong_build", reason=reason), rocm_torch_fix(facts))
    return Check(name, "problem", M("doctor.gpus.none_has_gpu", reason=reason), M("doctor.gpus.fix_none"))


def _target_verdict(target: str, arch_list: set[str | None], override: str | None) -> tuple[str, str]:
    """(problem, fix) for one target; ("", note) when it is fine. `arch_list` empty: not a ROCm
    torch, so which kernels exist is unknown."""
    needed = GFX_OVERRIDES.get(target)
    runs_as = override_target(override) if override else None
    export = f"export HSA_OVERRIDE_GFX_VERSION={needed}"  # a command: the same in every language
    if not arch_list:
        if needed and override != needed:
            return M("doctor.gfx.will_need_override", target=target, needed=needed), export
        return "", target
    if target in arch_list:
        if override and runs_as != target:
            return M("doctor.gfx.needless_override", target=target, override=override), M("doctor.gfx.fix_unset_override")
        return "", M("doctor.gfx.has_kernels", target=target)
    if override:
        if needed is not None and override != needed:
            return M("doctor.gfx.wrong_override", target=target, needed=needed, override=override), export
        if runs_as in arch_list:
            return "", M("doctor.gfx.runs_as", target=target, runs_as=runs_as, override=override)
        return M("doctor.gfx.override_no_kernels", target=target, runs_as=runs_as, override=override), M("doctor.gfx.fix_install_torch", target=target)
    if needed is not None:
        return M("doctor.gfx.override_missing", target=target, needed=needed), M("doctor.gfx.fix_export_before", needed=needed)
    return M("doctor.gfx.no_kernels", target=target), M("doctor.gfx.fix_install_therock", target=target)


def check_gfx_targets(facts: MachineFacts) -> Check:
    name = M("doctor.name.gfx_targets")
    gpus = amd_gpus(facts)
    override = facts.env.get("HSA_OVERRIDE_GFX_VERSION")
    if not gpus:
        if override and amd_gpu_present(facts):
            return Check(name, "warning", M("doctor.gfx.no_amd_visible_override", override=override))
        if override:
            return Check(name, "warning", M("doctor.gfx.no_amd_override", override=override), M("doctor.fix.unset_it"))
        return Check(name, "ok", M("doctor.gfx.no_amd_visible") if amd_gpu_present(facts) else M("doctor.gfx.no_amd"))
    arch_list = {base_target(a) for a in facts.torch.arch_list} if facts.torch.hip_version else set()
    # an integrated GPU beside a discrete one is for the visible-devices check to hide, not to override
    has_discrete = any(not integrated for _, integrated in gpus)
    targets = [t for t, integrated in gpus if not (integrated and has_discrete)]
    problems: list[str] = []
    fixes: list[str] = []
    notes: list[str] = []
    for target in dict.fromkeys(targets):
        if target == "unknown":
            continue
        problem, text = _target_verdict(target, arch_list, override)
        if problem:
            problems.append(problem)
            fixes.append(text)
        else:
            notes.append(text)
    counted = _count(targets)
    detail = Joined(problems or notes)
    saw: str = Joined([counted, detail], ": ") if detail and detail != counted else counted
    if not problems:
        return Check(name, "ok", saw)
    # without a ROCm torch the torch-build check is the problem; this is advice for afterwards
    verdict: Verdict = "problem" if arch_list else "warning"
    return Check(name, verdict, saw, Joined(dict.fromkeys(fixes), " "))


def check_visible_devices(facts: MachineFacts) -> Check:
    name = M("doctor.name.visible_devices")
    set_vars = [f"{v}={facts.env[v]!r}" for v in VISIBILITY_VARIABLES if v in facts.env]
    listed: str = Joined(set_vars, ", ") if set_vars else M("doctor.visible.not_set")
    kfd = list(facts.kfd_gpus or ())
    if not kfd:
        if set_vars and amd_gpu_present(facts):
            return Check(name, "warning", M("doctor.visible.kfd_unreadable", variables=listed))
        return Check(name, "ok", listed)
    seen = visible_gpus(kfd, facts.env)
    described = Joined(
        M(
            "doctor.visible.gpu",
            index=g.index,
            gfx=g.gfx or M("word.unknown"),
            integrated=M("doctor.visible.integrated") if g.integrated else "",
            at=M("doctor.visible.at", address=g.pci_address) if g.pci_address else "",
        )
        for g in seen
    )
    if not seen:
        return Check(name, "problem", M("doctor.visible.none", variables=listed, count=len(kfd)), M("doctor.visible.fix_none", last=len(kfd) - 1))
    saw = M("doctor.visible.some", variables=listed, seen=len(seen), count=len(kfd), described=described)
    if any(g.integrated for g in seen) and any(not g.integrated for g in seen):
        first_discrete = next(g.index for g in seen if not g.integrated)
        return Check(name, "warning", saw, M("doctor.visible.fix_integrated", index=first_discrete))
    return Check(name, "ok", saw)


def check_device_access(facts: MachineFacts) -> Check:
    name = M("doctor.name.device_access")
    kfd = next((d for d in facts.devices if d.path == "/dev/kfd"), None)
    renders = [d for d in facts.devices if d.path.startswith("/dev/dri/renderD")]
    if kfd is None or not kfd.exists:
        if not amd_gpu_present(facts):
            return Check(name, "ok", M("doctor.devices.no_kfd_no_amd"))
        return Check(name, "problem", M("doctor.devices.no_kfd"), M("doctor.devices.fix_no_kfd"))
    denied = [d.path for d in (kfd, *renders) if not d.accessible]
    if not renders:
        return Check(name, "problem", M("doctor.devices.no_render"), M("doctor.devices.fix_no_render"))
    if denied:
        groups = sorted({d.group for d in (kfd, *renders) if d.group})
        owner = ", ".join(groups) if groups else M("word.unknown")
        return Check(name, "problem", M("doctor.devices.denied", paths=", ".join(denied), groups=owner), M("doctor.devices.fix_denied"))
    return Check(name, "ok", M("doctor.devices.ok", count=len(renders)))


def check_groups(facts: MachineFacts) -> Check:
    name = M("doctor.name.groups")
    user = facts.user
    if user.uid == 0:
        return Check(name, "ok", M("doctor.groups.root"))
    have = [g for g in GPU_GROUPS if g in user.process_groups]
    missing = [g for g in GPU_GROUPS if g not in user.process_groups]
    if not missing:
        return Check(name, "ok", M("doctor.groups.member", user=user.name, groups=_and(have)))
    if not amd_gpu_present(facts):
        return Check(name, "ok", M("doctor.groups.not_needed", user=user.name, groups=_and(missing)))
    pending = [g for g in missing if g in user.listed_groups]
    if pending:
        return Check(name, "problem", M("doctor.groups.pending", user=user.name, groups=_and(pending)), M("doctor.groups.fix_pending"))
    devices_ok = all(d.accessible for d in facts.devices if d.exists)
    fix = M("doctor.groups.fix_add", groups=",".join(missing))
    if devices_ok and facts.devices:
        # logind gives the desktop user access for the session; an SSH session or a service does not get it
        return Check(name, "warning", M("doctor.groups.missing_acl", user=user.name, groups=_and(missing)), fix)
    return Check(name, "problem", M("doctor.groups.missing", user=user.name, groups=_and(missing)), fix)


def check_bf16(facts: MachineFacts) -> Check:
    name = M("doctor.name.bf16")
    targets = [t for t in dict.fromkeys(amd_targets(facts)) if t != "unknown"]
    if not targets:
        reported = facts.torch.bf16_reported
        if facts.torch.gpus and reported is not None:  # an NVIDIA GPU: torch's answer is right there
            if reported:
                return Check(name, "ok", M("doctor.bf16.reported_yes"))
            return Check(name, "warning", M("doctor.bf16.reported_no"), M("doctor.bf16.fix_fp16"))
        return Check(name, "ok", M("doctor.bf16.no_gpu"))
    without = [t for t in targets if not has_bf16(t)]
    if not without:
        return Check(name, "ok", M("doctor.bf16.supported", targets=", ".join(targets)))
    says_true = M("doctor.bf16.says_true") if facts.torch.bf16_reported else ""
    return Check(name, "warning", M("doctor.bf16.unsupported", targets=", ".join(without), reported=says_true), M("doctor.bf16.fix_gpu_fp16"))


def check_telemetry(facts: MachineFacts) -> Check:
    name = M("doctor.name.telemetry")
    if not facts.telemetry:
        return Check(name, "warning", M("doctor.telemetry.nothing"), "")
    working = [s for s in facts.telemetry if s.available]
    gpu_working = [s for s in working if s.name != "process"]
    failed = [s for s in facts.telemetry if not s.available]
    # A source's detail and hint are messages of the telemetry modules (`telemetry.*`), with
    # what a tool printed inside them as written: Joined keeps them messages, so the page
    # renders them in its language.
    if gpu_working:
        return Check(name, "ok", M("doctor.telemetry.works", source=gpu_working[0].name, detail=gpu_working[0].detail))
    if not amd_gpu_present(facts) and not nvidia_gpu_present(facts):
        source = _source_name(working[0].name) if working else M("doctor.telemetry.none")
        return Check(name, "ok", M("doctor.telemetry.process", source=source))
    saw = Joined(Joined((f"{s.name}: ", s.detail), "") for s in failed)
    hints = Joined(dict.fromkeys(s.hint for s in failed if s.hint), " ")
    return Check(name, "warning", M("doctor.telemetry.no_gpu_source", sources=saw), hints)


def _source_name(name: str) -> str:
    """A telemetry source as the Doctor names it: the tools by their names, the process
    source (it is no tool: psutil reads the trainer's memory) in words."""
    return M("doctor.telemetry.source.process") if name == "process" else name


def _library(facts: MachineFacts, name: str) -> LibraryFact:
    return next((lib for lib in facts.libraries if lib.name == name), LibraryFact(name, None))


def check_bitsandbytes(facts: MachineFacts) -> Check:
    name = M("doctor.name.bitsandbytes")
    lib = _library(facts, "bitsandbytes")
    gpu = amd_gpu_present(facts) or bool(facts.torch.gpus)
    install = M("doctor.bnb.fix_install")
    if lib.version is None:
        if not gpu:
            return Check(name, "ok", M("doctor.bnb.not_installed_cpu"))
        return Check(name, "warning", M("doctor.bnb.not_installed"), install)
    if lib.error:
        return Check(name, "warning", M("doctor.bnb.broken", version=lib.version, error=lib.error), install)
    backend = lib.backend or M("word.unknown")
    if facts.torch.hip_version and lib.backend != "ROCm":
        return Check(name, "warning", M("doctor.bnb.not_rocm", version=lib.version, backend=backend), install)
    return Check(name, "ok", M("doctor.bnb.ok", version=lib.version, backend=backend))


def check_flash_attn(facts: MachineFacts) -> Check:
    name = M("doctor.name.flash_attn")
    lib = _library(facts, "flash_attn")
    if lib.version is None:
        return Check(name, "ok", M("doctor.flash.not_installed"))
    if lib.error:
        return Check(name, "warning", M("doctor.flash.broken", version=lib.version, error=lib.error), M("doctor.flash.fix_broken"))
    return Check(name, "ok", M("doctor.flash.ok", version=lib.version, backend=lib.backend or M("doctor.flash.backend_unknown")))


def check_deepspeed(facts: MachineFacts) -> Check:
    name = M("doctor.name.deepspeed")
    lib = _library(facts, "deepspeed")
    gpu_count = len(facts.torch.gpus) or len(facts.kfd_gpus or ())
    if lib.version is not None:
        return Check(name, "ok", f"deepspeed {lib.version}")
    if gpu_count > 1:
        return Check(name, "warning", M("doctor.deepspeed.missing_gpus", count=gpu_count), M("doctor.deepspeed.fix_install"))
    return Check(name, "ok", M("doctor.deepspeed.not_installed"))


def check_liger_kernel(facts: MachineFacts) -> Check:
    name = M("doctor.name.liger_kernel")
    lib = _library(facts, "liger-kernel")
    if lib.version is None:
        return Check(name, "ok", M("doctor.liger.not_installed"))
    return Check(name, "ok", f"liger-kernel {lib.version}")


def check_llamafactory(facts: MachineFacts) -> Check:
    name = M("doctor.name.llamafactory")
    versions = Joined((f"{k} {v}" if v else M("doctor.version_missing", name=k) for k, v in facts.versions.items()), ", ")
    if facts.llamafactory_cli is None or facts.versions.get("llamafactory") is None:
        return Check(name, "problem", M("doctor.lf.not_found", versions=versions), M("doctor.lf.fix_setup"), "any")
    missing = [k for k, v in facts.versions.items() if v is None]
    if missing:
        return Check(name, "problem", M("doctor.lf.missing", cli=facts.llamafactory_cli, missing=", ".join(missing), versions=versions), M("doctor.lf.fix_install"), "any")
    return Check(name, "ok", M("doctor.lf.ok", cli=facts.llamafactory_cli, versions=versions))


# Package names in any language: set apart as names, not read as a sentence ("a, b, c").
TRACKER_SEPARATOR = " · "


def check_trackers(facts: MachineFacts) -> Check:
    """Which experiment trackers the form's report_to can use: optional, never a problem."""
    name = M("doctor.name.trackers")
    found = [version for t in TRACKER_PACKAGES if (version := facts.trackers.get(t))]
    missing = [t for t in TRACKER_PACKAGES if not facts.trackers.get(t)]
    if not found:
        return Check(name, "ok", M("doctor.trackers.none", missing=TRACKER_SEPARATOR.join(missing)), M("doctor.trackers.fix_install"), "any")
    if not missing:
        return Check(name, "ok", M("doctor.trackers.all", installed=TRACKER_SEPARATOR.join(found)), "", "any")
    return Check(name, "ok", M("doctor.trackers.some", installed=TRACKER_SEPARATOR.join(found), missing=TRACKER_SEPARATOR.join(missing)), "", "any")


def check_gguf_converter(facts: MachineFacts) -> Check:
    """llama.cpp's GGUF converter for the Export tab: optional, never a problem."""
    name = M("doctor.name.gguf_converter")
    if facts.gguf_converter:
        return Check(name, "ok", M("doctor.gguf.found", path=facts.gguf_converter), "", "any")
    return Check(name, "ok", M("doctor.gguf.missing"), M("doctor.gguf.fix_install"), "any")


# Node states in which a node takes jobs (sinfo's %T; a trailing "*" means not responding).
SLURM_UP_STATES = ("idle", "mixed", "allocated", "completing", "planned", "reserved")


def check_slurm(facts: MachineFacts) -> Check:
    name = M("doctor.name.slurm")
    slurm = facts.slurm
    if not slurm.configured:
        return Check(name, "ok", M("doctor.slurm.not_set_up"), "", "slurm")
    if slurm.sinfo_error:
        return Check(name, "problem", M("doctor.slurm.unreachable", conf=slurm.conf or "?", error=slurm.sinfo_error), M("doctor.slurm.fix_unreachable"), "slurm")
    nodes = ", ".join(f"{node} {state}" for node, state in slurm.nodes)
    partitions = ", ".join(slurm.partitions)
    if not slurm.nodes:
        return Check(name, "problem", M("doctor.slurm.no_nodes", conf=slurm.conf or "?"), M("doctor.slurm.fix_no_nodes"), "slurm")
    if not any(state.lower().rstrip("*~#!%$@^-") in SLURM_UP_STATES and not state.endswith("*") for _, state in slurm.nodes):
        return Check(name, "problem", M("doctor.slurm.no_node_up", nodes=nodes), M("doctor.slurm.fix_no_node_up"), "slurm")
    return Check(name, "ok", M("doctor.slurm.ok", count=len(slurm.nodes), nodes=nodes, partitions=partitions), "", "slurm")


def check_slurm_munge(facts: MachineFacts) -> Check | None:
    slurm = facts.slurm
    if not slurm.configured:
        return None
    name = M("doctor.name.slurm_munge")
    if not slurm.munge_checked:
        return Check(name, "ok", M("doctor.munge.not_used", auth=slurm.auth), "", "slurm")
    socket = M("doctor.munge.socket", socket=slurm.munge_socket) if slurm.munge_socket else ""
    if not slurm.munge_error:
        return Check(name, "ok", M("doctor.munge.ok", socket=socket), "", "slurm")
    if not slurm.sinfo_error:  # Slurm's own authentication works: munge's commands are what failed
        return Check(name, "warning", M("doctor.munge.cli_failed", error=slurm.munge_error), M("doctor.munge.fix_cli"), "slurm")
    return Check(name, "problem", M("doctor.munge.down", error=slurm.munge_error, socket=socket), M("doctor.munge.fix_down"), "slurm")


def check_slurm_shared(facts: MachineFacts) -> Check | None:
    slurm = facts.slurm
    if not slurm.configured:
        return None
    name = M("doctor.name.slurm_shared")
    if slurm.shared == "yes":
        return Check(name, "ok", M("doctor.shared.ok", runs_dir=slurm.runs_dir, node=slurm.shared_node or "?"), "", "slurm")
    if slurm.shared == "no":
        return Check(name, "problem", M("doctor.shared.not_shared", runs_dir=slurm.runs_dir, node=slurm.shared_node or "?", error=slurm.shared_detail), M("doctor.shared.fix_not_shared"), "slurm")
    if slurm.shared == "unknown":
        return Check(name, "warning", M("doctor.shared.unknown", error=slurm.shared_detail), M("doctor.shared.fix_unknown", runs_dir=slurm.runs_dir or "runs"), "slurm")
    return Check(name, "warning", M("doctor.shared.skipped", reason=slurm.shared_detail), "", "slurm")


CHECKS: tuple[Callable[[MachineFacts], Check | None], ...] = (
    check_torch_build,
    check_gpus_visible,
    check_gfx_targets,
    check_visible_devices,
    check_device_access,
    check_groups,
    check_bf16,
    check_telemetry,
    check_bitsandbytes,
    check_flash_attn,
    check_deepspeed,
    check_liger_kernel,
    check_llamafactory,
    check_trackers,
    check_gguf_converter,
    check_slurm,
    check_slurm_munge,
    check_slurm_shared,
)


def run_checks(facts: MachineFacts) -> list[Check]:
    """Each check's verdict; a check with nothing to say here (munge where Slurm is not set
    up) gives none."""
    return [found for check in CHECKS if (found := check(facts)) is not None]


def blocking_problems(checks: Sequence[Check], use_cpu: bool = False, slurm: bool = False) -> list[Check]:
    """The problems that would break a run: all of them for a GPU run; for a CPU run
    (`use_cpu`, the CPU demo preset) only those that break any run. The cluster's problems
    count only with `slurm` (a run placed on Slurm, or the doctor's own verdict): they do not
    stop a run on this machine."""
    return [
        c
        for c in checks
        if c.verdict == "problem" and (slurm or c.needed_for != "slurm") and (not use_cpu or c.needed_for in ("any", "slurm"))
    ]


# --- gathering the facts ------------------------------------------------------------------


def parse_probe_output(stdout: str) -> dict[str, Any] | None:
    """The probe's JSON from its output (libraries may print around it)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            try:
                data = json.loads(line[len(MARKER):])
            except json.JSONDecodeError:
                return None
            return data if isinstance(data, dict) else None
    return None


def torch_facts_from_probe(data: Mapping[str, Any]) -> TorchFacts:
    t = data.get("torch") or {}
    if t.get("import_error") or not t.get("version"):
        return TorchFacts(import_error=t.get("import_error") or "the probe did not report torch")
    return TorchFacts(
        version=t["version"],
        hip_version=t.get("hip_version"),
        cuda_version=t.get("cuda_version"),
        arch_list=tuple(t.get("arch_list") or ()),
        gpus=tuple(
            TorchGpu(int(g["index"]), str(g.get("name", "")), g.get("gfx_target"), g.get("total_memory_bytes"))
            for g in t.get("gpus") or ()
        ),
        device_error=t.get("device_error"),
        bf16_reported=t.get("bf16_reported"),
    )


def run_probe(python: str = sys.executable, timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """Run the torch probe in a subprocess (argument list, no shell); a failure is a fact."""
    try:
        done = subprocess.run(
            [python, "-m", "backend.doctor.probe"],
            cwd=ROOT,
            # The allow-listed environment (HSA_*, HIP_*, *_VISIBLE_DEVICES included, so torch
            # sees the GPUs a run would); no ROCBOARD_AUTH or other secret in the probe.
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return {"torch": {"import_error": f"the torch probe did not finish within {timeout_s:.0f} s (a hung driver?)"}}
    except OSError as error:
        return {"torch": {"import_error": f"could not run {python}: {error.strerror}"}}
    data = parse_probe_output(done.stdout)
    if data is None:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"torch": {"import_error": f"the torch probe failed (exit {done.returncode}): {last}"}}
    return data


def read_pci_gpus(sysfs_root: Path) -> tuple[PciGpu, ...]:
    """Display controllers (PCI class 0x03xxxx) by vendor, and AMD's processing accelerators
    (0x12xxxx: the MI300 series shows as one, not as a display controller)."""
    vendors: dict[str, Literal["amd", "nvidia"]] = {AMD_VENDOR_ID: "amd", NVIDIA_VENDOR_ID: "nvidia"}
    found: list[PciGpu] = []
    try:
        devices = sorted((sysfs_root / "bus" / "pci" / "devices").iterdir())
    except OSError:
        return ()
    for device in devices:
        try:
            pci_class = (device / "class").read_text().strip()
            vendor = (device / "vendor").read_text().strip().lower()
        except OSError:
            continue
        if pci_class.startswith("0x03") or (pci_class.startswith("0x12") and vendor == AMD_VENDOR_ID):
            found.append(PciGpu(device.name, vendors.get(vendor, "other")))
    return tuple(found)


def read_device_nodes(dev_root: Path = Path("/dev")) -> tuple[DeviceNode, ...]:
    paths = [dev_root / "kfd", *sorted((dev_root / "dri").glob("renderD*"))]
    nodes: list[DeviceNode] = []
    for path in paths:
        shown = "/dev/" + str(path.relative_to(dev_root))
        try:
            gid = path.stat().st_gid
        except OSError:
            nodes.append(DeviceNode(shown, False, False))
            continue
        try:
            group: str | None = grp.getgrgid(gid).gr_name
        except KeyError:
            group = str(gid)
        nodes.append(DeviceNode(shown, True, os.access(path, os.R_OK | os.W_OK), group))
    return tuple(nodes)


def read_user() -> UserFacts:
    uid = os.getuid()
    try:
        entry = pwd.getpwuid(uid)
        name, primary = entry.pw_name, entry.pw_gid
    except KeyError:
        name, primary = str(uid), os.getgid()

    def group_name(gid: int) -> str:
        try:
            return grp.getgrgid(gid).gr_name
        except KeyError:
            return str(gid)

    process = tuple(dict.fromkeys(group_name(g) for g in (os.getgid(), *os.getgroups())))
    listed = tuple(g.gr_name for g in grp.getgrall() if name in g.gr_mem or g.gr_gid == primary)
    return UserFacts(name, uid, process, listed)


def read_telemetry(sysfs_root: Path, env: Mapping[str, str]) -> tuple[SourceStatus, ...]:
    try:
        from backend.telemetry.detect import detect_sources
    except ImportError as error:
        return (SourceStatus("telemetry", False, M("telemetry.probe_failed", error=f"ImportError: {error}")),)
    try:
        return tuple(detect_sources(sysfs_root, env)[1])
    except Exception as error:  # a broken source must not stop the doctor
        return (SourceStatus("telemetry", False, M("telemetry.probe_failed", error=f"{type(error).__name__}: {error}")),)


def find_llamafactory_cli() -> str | None:
    beside_python = Path(sys.executable).parent / "llamafactory-cli"
    if beside_python.is_file():
        return str(beside_python)
    return shutil.which("llamafactory-cli")


def gather_facts(
    sysfs_root: Path = Path("/sys"),
    env: Mapping[str, str] = os.environ,
    probe: Callable[[], dict[str, Any]] = run_probe,
    runs_dir: Path | None = None,
    slurm: Callable[[], SlurmFacts] | None = None,
    dev_root: Path = Path("/dev"),
    rocm_root: Path = Path("/opt/rocm"),
) -> MachineFacts:
    """This machine's facts. `runs_dir`: the runs folder whose sharing with the Slurm nodes
    is checked (None: not checked); `slurm`: gathers the cluster's facts (default: through a
    Slurm client of `env`, when Slurm is set up here)."""
    data = probe()
    bnb = data.get("bitsandbytes") or {}
    flash = data.get("flash_attn") or {}
    kfd = read_kfd_gpus(sysfs_root)
    return MachineFacts(
        torch=torch_facts_from_probe(data),
        kfd_gpus=tuple(kfd) if kfd is not None else None,
        pci_gpus=read_pci_gpus(sysfs_root),
        devices=read_device_nodes(dev_root),
        user=read_user(),
        env={k: env[k] for k in ENV_OF_INTEREST if k in env},
        telemetry=read_telemetry(sysfs_root, env),
        libraries=(
            LibraryFact("bitsandbytes", bnb.get("version"), bnb.get("backend"), bnb.get("error")),
            LibraryFact("flash_attn", flash.get("version"), flash.get("backend"), flash.get("error")),
            LibraryFact("deepspeed", installed_version("deepspeed")),
            LibraryFact("liger-kernel", installed_version("liger-kernel") or installed_version("liger_kernel")),
        ),
        llamafactory_cli=find_llamafactory_cli(),
        versions={name: installed_version(name) for name in VERSIONS_OF_INTEREST},
        trackers=find_trackers(),
        gguf_converter=_gguf_converter(),
        torch_choice=torch_choice.choose(env, sysfs_root, dev_root, rocm_root),
        python=sys.executable,
        slurm=slurm() if slurm is not None else gather_slurm(runs_dir, env),
    )


def _gguf_converter() -> str | None:
    from backend.export.gguf_convert import find_converter

    found = find_converter()
    return str(found) if found is not None else None


def find_trackers(find_spec: Callable[[str], Any] = importlib.util.find_spec) -> dict[str, str | None]:
    """Each tracker -> "package version" of its first installed package, or None. find_spec
    looks the module up on sys.path without running it; the version is the distribution's
    metadata."""
    found: dict[str, str | None] = {}
    for tracker, packages in TRACKER_PACKAGES.items():
        found[tracker] = None
        for package in packages:
            try:
                spec = find_spec(package)
            except (ImportError, ValueError):
                spec = None
            if spec is not None:
                version = installed_version(package)
                found[tracker] = f"{package} {version}" if version else package
                break
    return found


def facts_to_json(facts: MachineFacts) -> dict[str, Any]:
    data = asdict(facts)
    data["env"] = dict(facts.env)
    data["versions"] = dict(facts.versions)
    data["trackers"] = dict(facts.trackers)
    return data
