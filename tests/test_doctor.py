"""The ROCm doctor on simulated machines (pure checks), on a fake /sys, and on this machine."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from backend.doctor import (
    Check,
    DeviceNode,
    LibraryFact,
    MachineFacts,
    PciGpu,
    TorchFacts,
    TorchGpu,
    UserFacts,
    blocking_problems,
    gather_facts,
    override_target,
    parse_probe_output,
    run_checks,
    torch_facts_from_probe,
)
from backend.doctor.probe import MARKER
from backend.telemetry.base import SourceStatus
from backend.telemetry.topology import KfdGpu
from tests.tiers import starts

ROOT = Path(__file__).resolve().parent.parent
GIB = 1024**3
ROCM_ARCHS = ("gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1101", "gfx1102", "gfx1200", "gfx1201")
VERSIONS = {"llamafactory": "0.9.5", "transformers": "5.6.0", "peft": "0.18.1", "trl": "0.24.0", "accelerate": "1.11.0"}
NO_LIBRARIES = (
    LibraryFact("bitsandbytes", None),
    LibraryFact("flash_attn", None),
    LibraryFact("deepspeed", None),
    LibraryFact("liger-kernel", None),
)


def cpu_box(**changes) -> MachineFacts:
    """Our dev machine: a CUDA build of torch, no GPU at all, root."""
    facts = MachineFacts(
        torch=TorchFacts(version="2.14.1+cu130", cuda_version="13.0", arch_list=("sm_80", "sm_90"),
                         device_error="RuntimeError: Found no NVIDIA driver on your system."),
        kfd_gpus=None,
        pci_gpus=(),
        devices=(DeviceNode("/dev/kfd", False, False),),
        user=UserFacts("root", 0, ("root",), ("root",)),
        env={},
        telemetry=(
            SourceStatus("sysfs", False, "no AMD GPU (vendor 0x1002) under /sys/class/drm", "Load the amdgpu driver"),
            SourceStatus("process", True, "psutil 7.2.2"),
        ),
        libraries=NO_LIBRARIES,
        llamafactory_cli="/app/.venv/bin/llamafactory-cli",
        versions=VERSIONS,
    )
    return replace(facts, **changes)


def kfd(node: int, gfx: str, integrated: bool = False, bus: int = 3) -> KfdGpu:
    return KfdGpu(node, f"0000:{bus:02x}:00.0", 127 + node, gfx, 0x1000 + node, integrated)


def rdna2_box(**changes) -> MachineFacts:
    """An RX 6700 XT (gfx1031) desktop: ROCm torch without gfx1031 kernels, a fresh user in no
    GPU group, devices owned by video/render."""
    facts = MachineFacts(
        torch=TorchFacts(
            version="2.7.1+rocm6.4.1", hip_version="6.4.43483", arch_list=ROCM_ARCHS,
            gpus=(TorchGpu(0, "AMD Radeon RX 6700 XT", "gfx1031", 12 * GIB),), bf16_reported=True,
        ),
        kfd_gpus=(kfd(1, "gfx1031"),),
        pci_gpus=(PciGpu("0000:03:00.0", "amd"),),
        devices=(
            DeviceNode("/dev/kfd", True, False, "render"),
            DeviceNode("/dev/dri/renderD128", True, False, "render"),
        ),
        user=UserFacts("ana", 1000, ("ana", "sudo"), ("ana", "sudo")),
        env={},
        telemetry=(SourceStatus("sysfs", True, "1 AMD GPU"), SourceStatus("process", True, "psutil 7.2.2")),
        libraries=NO_LIBRARIES,
        llamafactory_cli="/home/ana/rocboard/.venv/bin/llamafactory-cli",
        versions=VERSIONS,
    )
    return replace(facts, **changes)


def mi300x_node(**changes) -> MachineFacts:
    """An 8 x MI300X node: ROCm torch with gfx942 kernels, the user in both groups."""
    facts = MachineFacts(
        torch=TorchFacts(
            version="2.7.1+rocm6.4.1", hip_version="6.4.43483", arch_list=ROCM_ARCHS,
            gpus=tuple(TorchGpu(i, "AMD Instinct MI300X", "gfx942:sramecc+:xnack-", 192 * GIB) for i in range(8)),
            bf16_reported=True,
        ),
        kfd_gpus=tuple(kfd(2 + i, "gfx942", bus=0x10 + i) for i in range(8)),
        pci_gpus=tuple(PciGpu(f"0000:{0x10 + i:02x}:00.0", "amd") for i in range(8)),
        devices=(DeviceNode("/dev/kfd", True, True, "render"),)
        + tuple(DeviceNode(f"/dev/dri/renderD{128 + i}", True, True, "render") for i in range(8)),
        user=UserFacts("svc", 1001, ("svc", "video", "render"), ("svc", "video", "render")),
        env={},
        telemetry=(SourceStatus("amd-smi", True, "amd-smi 26.0"), SourceStatus("process", True, "psutil 7.2.2")),
        libraries=(
            LibraryFact("bitsandbytes", "0.48.1", "ROCm"),
            LibraryFact("flash_attn", "2.7.4", "ROCm (CK)"),
            LibraryFact("deepspeed", None),
            LibraryFact("liger-kernel", "0.6.2"),
        ),
        llamafactory_cli="/opt/venv/bin/llamafactory-cli",
        versions=VERSIONS,
    )
    return replace(facts, **changes)


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def verdicts(facts: MachineFacts) -> dict[str, str]:
    return {c.name: c.verdict for c in run_checks(facts)}


# --- simulated machines -------------------------------------------------------------------


def test_cpu_box_has_nothing_blocking() -> None:
    checks = run_checks(cpu_box())
    assert blocking_problems(checks) == []
    assert blocking_problems(checks, use_cpu=True) == []
    assert "CUDA 13.0 build" in by_name(checks)["torch build"].saw
    assert {c.verdict for c in checks} == {"ok"}


def test_rdna2_box_without_groups_or_override() -> None:
    checks = by_name(run_checks(rdna2_box()))
    gfx = checks["gfx target and HSA_OVERRIDE_GFX_VERSION"]
    assert gfx.verdict == "problem"
    assert "gfx1031" in gfx.saw and "HSA_OVERRIDE_GFX_VERSION=10.3.0" in gfx.fix
    assert checks["access to /dev/kfd and /dev/dri/renderD*"].verdict == "problem"
    groups = checks["video and render groups"]
    assert groups.verdict == "problem" and "usermod -aG video,render" in groups.fix
    # torch says bf16 works; the architecture says it does not
    bf16 = checks["bf16"]
    assert bf16.verdict == "warning" and "gfx1031" in bf16.saw and "says True" in bf16.saw and "fp16" in bf16.fix
    assert checks["bitsandbytes (QLoRA)"].verdict == "warning"
    blocking = {c.name for c in blocking_problems(list(checks.values()))}
    assert blocking == {
        "gfx target and HSA_OVERRIDE_GFX_VERSION",
        "access to /dev/kfd and /dev/dri/renderD*",
        "video and render groups",
    }


def test_rdna2_box_fixed() -> None:
    fixed = rdna2_box(
        env={"HSA_OVERRIDE_GFX_VERSION": "10.3.0"},
        devices=(DeviceNode("/dev/kfd", True, True, "render"), DeviceNode("/dev/dri/renderD128", True, True, "render")),
        user=UserFacts("ana", 1000, ("ana", "video", "render"), ("ana", "video", "render")),
    )
    checks = run_checks(fixed)
    assert blocking_problems(checks) == []
    assert "runs as gfx1030" in by_name(checks)["gfx target and HSA_OVERRIDE_GFX_VERSION"].saw


def test_wrong_override_value_for_the_target() -> None:
    gfx = by_name(run_checks(rdna2_box(env={"HSA_OVERRIDE_GFX_VERSION": "11.0.0"})))["gfx target and HSA_OVERRIDE_GFX_VERSION"]
    assert gfx.verdict == "problem" and "10.3.0" in gfx.saw


def test_override_on_a_supported_target_is_a_problem() -> None:
    checks = by_name(run_checks(mi300x_node(env={"HSA_OVERRIDE_GFX_VERSION": "11.0.0"})))
    gfx = checks["gfx target and HSA_OVERRIDE_GFX_VERSION"]
    assert gfx.verdict == "problem" and "Unset" in gfx.fix


def test_gfx1101_without_kernels_needs_11_0_0() -> None:
    box = rdna2_box(
        torch=replace(rdna2_box().torch, arch_list=("gfx90a", "gfx942", "gfx1030", "gfx1100")),
        kfd_gpus=(kfd(1, "gfx1101"),),
    )
    gfx = by_name(run_checks(box))["gfx target and HSA_OVERRIDE_GFX_VERSION"]
    assert gfx.verdict == "problem" and "HSA_OVERRIDE_GFX_VERSION=11.0.0" in gfx.fix
    # a torch that ships gfx1101 kernels needs no override
    assert verdicts(replace(box, torch=rdna2_box().torch))["gfx target and HSA_OVERRIDE_GFX_VERSION"] == "ok"


def test_mi300x_node_with_half_the_gpus_visible() -> None:
    node = mi300x_node(env={"HIP_VISIBLE_DEVICES": "0,1,2,3"})
    checks = by_name(run_checks(node))
    assert checks["GPUs visible to torch"].verdict == "ok"
    assert "8: GPU 0: AMD Instinct MI300X (gfx942, 192 GiB)" in checks["GPUs visible to torch"].saw
    visible = checks["HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES"]
    assert visible.verdict == "ok" and "4 of 8 GPUs visible" in visible.saw
    assert checks["gfx target and HSA_OVERRIDE_GFX_VERSION"].saw.startswith("4 x gfx942")
    assert checks["bf16"].verdict == "ok"
    assert checks["deepspeed"].verdict == "warning"  # 8 GPUs and no ZeRO
    assert checks["bitsandbytes (QLoRA)"].verdict == "ok"
    assert "ROCm (CK)" in checks["flash-attn"].saw
    assert blocking_problems(list(checks.values())) == []


def test_visible_devices_that_hide_every_gpu() -> None:
    for env in ({"HIP_VISIBLE_DEVICES": ""}, {"ROCR_VISIBLE_DEVICES": "8"}):
        visible = by_name(run_checks(mi300x_node(env=env)))["HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES"]
        assert visible.verdict == "problem" and "none of the 8" in visible.saw


def test_integrated_gpu_beside_a_discrete_one() -> None:
    box = mi300x_node(
        torch=replace(mi300x_node().torch, gpus=()),
        kfd_gpus=(kfd(1, "gfx1036", integrated=True, bus=0x7C), kfd(2, "gfx1100", bus=3)),
    )
    checks = by_name(run_checks(box))
    visible = checks["HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES"]
    assert visible.verdict == "warning" and "HIP_VISIBLE_DEVICES=1" in visible.fix
    # the iGPU's missing kernels are not turned into an override that would break the dGPU
    assert checks["gfx target and HSA_OVERRIDE_GFX_VERSION"].verdict == "ok"
    hidden = by_name(run_checks(replace(box, env={"HIP_VISIBLE_DEVICES": "1"})))
    assert hidden["HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES"].verdict == "ok"


def test_cuda_build_on_an_amd_machine() -> None:
    box = rdna2_box(
        torch=TorchFacts(version="2.7.1+cu126", cuda_version="12.6", arch_list=("sm_80",),
                         device_error="RuntimeError: Found no NVIDIA driver on your system."),
        env={"HSA_OVERRIDE_GFX_VERSION": "10.3.0"},
        devices=(DeviceNode("/dev/kfd", True, True, "render"), DeviceNode("/dev/dri/renderD128", True, True, "render")),
        user=UserFacts("ana", 1000, ("ana", "video", "render"), ("ana", "video", "render")),
    )
    checks = by_name(run_checks(box))
    build = checks["torch build"]
    assert build.verdict == "problem" and "ROCm" in build.fix and "AMD GPU" in build.saw
    assert checks["GPUs visible to torch"].verdict == "problem"
    assert "Found no NVIDIA driver" in checks["GPUs visible to torch"].saw
    blocking = blocking_problems(list(checks.values()))
    assert {c.name for c in blocking} == {"torch build", "GPUs visible to torch"}
    # the CPU demo still runs on it
    assert blocking_problems(list(checks.values()), use_cpu=True) == []


def test_cpu_only_torch_and_nvidia_machine() -> None:
    cpu_torch = TorchFacts(version="2.7.1+cpu")
    assert by_name(run_checks(rdna2_box(torch=cpu_torch)))["torch build"].verdict == "problem"
    nvidia = cpu_box(pci_gpus=(PciGpu("0000:01:00.0", "nvidia"),),
                     torch=TorchFacts(version="2.7.1+cu126", cuda_version="12.6",
                                      gpus=(TorchGpu(0, "NVIDIA GeForce RTX 4090", None, 24 * GIB),), bf16_reported=True))
    assert verdicts(nvidia)["torch build"] == "ok"
    assert verdicts(nvidia)["bf16"] == "ok"


def test_torch_not_importable_blocks_even_the_cpu_demo() -> None:
    checks = run_checks(cpu_box(torch=TorchFacts(import_error="ModuleNotFoundError: No module named 'torch'")))
    blocking = blocking_problems(checks, use_cpu=True)
    assert [c.name for c in blocking] == ["torch build"]
    assert "No module named 'torch'" in blocking[0].saw


def test_missing_llamafactory_blocks_everything() -> None:
    checks = run_checks(cpu_box(llamafactory_cli=None, versions={**VERSIONS, "llamafactory": None}))
    assert [c.name for c in blocking_problems(checks, use_cpu=True)] == ["LLaMA-Factory"]


def test_group_added_but_session_is_older() -> None:
    box = rdna2_box(user=UserFacts("ana", 1000, ("ana",), ("ana", "video", "render")))
    groups = by_name(run_checks(box))["video and render groups"]
    assert groups.verdict == "problem" and "Log out" in groups.fix


def test_no_kfd_with_an_amd_card_means_no_driver() -> None:
    box = rdna2_box(kfd_gpus=None, devices=(DeviceNode("/dev/kfd", False, False),),
                    torch=replace(rdna2_box().torch, gpus=(), device_error="RuntimeError: No HIP GPUs are available"))
    checks = by_name(run_checks(box))
    assert checks["access to /dev/kfd and /dev/dri/renderD*"].verdict == "problem"
    assert "modprobe amdgpu" in checks["access to /dev/kfd and /dev/dri/renderD*"].fix
    assert "No HIP GPUs are available" in checks["GPUs visible to torch"].saw


def test_telemetry_hints_when_no_gpu_source_works() -> None:
    box = rdna2_box(telemetry=(
        SourceStatus("sysfs", False, "no AMD GPU under /sys/class/drm", "Load the amdgpu driver"),
        SourceStatus("rocm-smi", False, "Driver not initialized", "Add the user to the render group"),
        SourceStatus("process", True, "psutil"),
    ))
    telemetry = by_name(run_checks(box))["telemetry (VRAM chart)"]
    assert telemetry.verdict == "warning" and "render group" in telemetry.fix and "sysfs" in telemetry.saw


def test_broken_bitsandbytes_and_flash_attn_are_warnings() -> None:
    box = mi300x_node(libraries=(
        LibraryFact("bitsandbytes", "0.48.1", "ROCm", "the native bitsandbytes library did not load"),
        LibraryFact("flash_attn", "2.7.4", None, "ImportError: undefined symbol: _ZN3c10"),
        LibraryFact("deepspeed", "0.16.4"),
        LibraryFact("liger-kernel", None),
    ))
    checks = by_name(run_checks(box))
    assert checks["bitsandbytes (QLoRA)"].verdict == "warning"
    assert checks["flash-attn"].verdict == "warning" and "sdpa" in checks["flash-attn"].fix
    assert checks["deepspeed"].verdict == "ok"


def test_override_target_names() -> None:
    assert override_target("10.3.0") == "gfx1030"
    assert override_target("11.0.0") == "gfx1100"
    assert override_target("9.4.2") == "gfx942"
    assert override_target("eleven") is None


# --- gathering ----------------------------------------------------------------------------


def test_probe_output_is_found_among_library_noise() -> None:
    payload = {"torch": {"version": "2.7.1+rocm6.4.1", "hip_version": "6.4", "arch_list": ["gfx1100"],
                         "gpus": [{"index": 0, "name": "Radeon RX 7900 XTX", "gfx_target": "gfx1100", "total_memory_bytes": 25753026560}]}}
    stdout = "bitsandbytes banner\nWARNING: something\n" + MARKER + json.dumps(payload) + "\n"
    data = parse_probe_output(stdout)
    assert data == payload
    torch = torch_facts_from_probe(data)
    assert torch.hip_version == "6.4" and torch.gpus[0].gfx_target == "gfx1100" and torch.arch_list == ("gfx1100",)
    assert parse_probe_output("no marker here\n") is None
    assert torch_facts_from_probe({"torch": {"import_error": "ImportError: libamdhip64.so"}}).version is None


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_gather_facts_from_a_fake_sysfs(tmp_path: Path) -> None:
    """An RX 6700 XT seen through /sys: PCI class and vendor, and the KFD node's real target."""
    write(tmp_path / "bus/pci/devices/0000:03:00.0/class", "0x030000\n")
    write(tmp_path / "bus/pci/devices/0000:03:00.0/vendor", "0x1002\n")
    write(tmp_path / "bus/pci/devices/0000:00:14.0/class", "0x0c0330\n")  # a USB controller
    write(tmp_path / "bus/pci/devices/0000:00:14.0/vendor", "0x8086\n")
    write(tmp_path / "class/kfd/kfd/topology/nodes/0/properties", "cpu_cores_count 16\nsimd_count 0\ngfx_target_version 0\n")
    write(
        tmp_path / "class/kfd/kfd/topology/nodes/1/properties",
        "cpu_cores_count 0\nsimd_count 80\ngfx_target_version 100301\nlocation_id 768\ndomain 0\ndrm_render_minor 128\n",
    )
    def probe() -> dict:
        gpu = {"index": 0, "name": "AMD Radeon RX 6700 XT", "gfx_target": "gfx1030", "total_memory_bytes": 12 * GIB}
        return {"torch": {"version": "2.7.1+rocm6.4.1", "hip_version": "6.4", "arch_list": list(ROCM_ARCHS), "gpus": [gpu]}}

    facts = gather_facts(sysfs_root=tmp_path, env={"HSA_OVERRIDE_GFX_VERSION": "10.3.0", "PATH": "/usr/bin"}, probe=probe)
    assert facts.pci_gpus == (PciGpu("0000:03:00.0", "amd"),)
    assert facts.kfd_gpus is not None and [g.gfx for g in facts.kfd_gpus] == ["gfx1031"]
    assert facts.env == {"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}
    gfx = by_name(run_checks(facts))["gfx target and HSA_OVERRIDE_GFX_VERSION"]
    # torch reports the overridden gfx1030; the doctor still knows the card is a gfx1031
    assert gfx.verdict == "ok" and "gfx1031 runs as gfx1030" in gfx.saw


@starts("lf_helper")
def test_doctor_cli_on_this_machine() -> None:
    """The real thing, as a user runs it: probe subprocess included."""
    done = subprocess.run(
        [sys.executable, "-m", "backend.doctor.cli", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=280,
    )
    report = json.loads(done.stdout)
    names = [c["name"] for c in report["checks"]]
    assert "torch build" in names and "LLaMA-Factory" in names
    torch = report["facts"]["torch"]
    import importlib.metadata

    # the wheel's metadata drops the local label ("+cu130", "+rocm6.4") that torch.__version__ has
    assert torch["version"].split("+")[0] == importlib.metadata.version("torch").split("+")[0]
    checks = {c["name"]: c for c in report["checks"]}
    assert torch["version"] in checks["torch build"]["saw"]
    assert checks["LLaMA-Factory"]["verdict"] == "ok"
    # the exit status follows the blocking problems, whatever this machine is
    assert done.returncode == (1 if report["blocking"] else 0)
    if torch["hip_version"] is None and not report["facts"]["kfd_gpus"] and not report["facts"]["pci_gpus"]:
        assert report["blocking"] == []  # a CPU-only machine: nothing blocks the CPU demo


# --- the verdicts in the page's language ----------------------------------------------------

CJK = re.compile(r"[\u4e00-\u9fff]")


def _many_machines() -> list[MachineFacts]:
    """Machines that between them reach most of the checks' messages."""
    return [
        cpu_box(),
        rdna2_box(),
        rdna2_box(env={"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}),
        rdna2_box(env={"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}, user=UserFacts("ana", 1000, ("ana",), ("ana", "video", "render"))),
        mi300x_node(env={"HIP_VISIBLE_DEVICES": "0,1,2,3"}),
        mi300x_node(env={"HIP_VISIBLE_DEVICES": "9"}),
        mi300x_node(env={"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}),
        cpu_box(torch=TorchFacts(import_error="No module named 'torch'")),
    ]


def test_every_verdict_speaks_chinese_and_keeps_the_machines_words() -> None:
    from backend.i18n import localized

    english_only = []
    for facts in _many_machines():
        for check in run_checks(facts):
            for part in ("name", "saw", "fix"):
                english = str(getattr(check, part))
                chinese = localized(getattr(check, part), "zh-CN")
                if localized(getattr(check, part), "en") != english:
                    english_only.append(f"{english!r}: its English rendering differs from the string")
                # Words of ours are Chinese; a name that is a tool's (bf16, deepspeed) or a
                # bare value (a version, a list of targets) reads the same in both.
                if re.search(r"[a-z]{3,} [a-z]{3,} [a-z]{3,}", chinese) and not CJK.search(chinese):
                    english_only.append(f"{part}: {chinese}")
    assert english_only == []


def test_a_verdict_in_chinese_keeps_what_the_machine_said() -> None:
    from backend.i18n import localized

    checks = by_name(run_checks(cpu_box(torch=TorchFacts(import_error="No module named 'torch'"))))
    saw = localized(checks["torch build"].saw, "zh-CN")
    assert "No module named 'torch'" in saw and CJK.search(saw)
    gfx = by_name(run_checks(rdna2_box()))["gfx target and HSA_OVERRIDE_GFX_VERSION"]
    assert "HSA_OVERRIDE_GFX_VERSION=10.3.0" in localized(gfx.fix, "zh-CN")
    groups = by_name(run_checks(rdna2_box()))["video and render groups"]
    assert localized(groups.saw, "zh-CN").endswith("video 和 render 组中")


def test_the_doctor_table_is_in_the_pages_language() -> None:
    from backend import view

    table = view.checks_markdown(run_checks(rdna2_box()), "zh-CN")
    assert "torch 可见的 GPU" in table and "GPUs visible to torch" not in table
    blockers = view.doctor_blockers_markdown(blocking_problems(run_checks(rdna2_box())), "zh-CN")
    assert "video 与 render 用户组" in blockers and "video and render groups" not in blockers


def test_the_doctor_marks_are_text_symbols_common_fonts_have() -> None:
    # Emoji (✅ ❌, or ⚠ with U+FE0F) drew empty boxes on a page without an emoji font.
    from backend import view

    checks = run_checks(rdna2_box())
    text = view.checks_markdown(checks, "en") + view.doctor_blockers_markdown(blocking_problems(checks), "en")
    assert "✗" in text and "✓" in text
    assert not [c for c in text if ord(c) >= 0x1F000 or c in "\u2705\u274c\ufe0f"]


def test_the_cli_line_in_chinese() -> None:
    from backend.doctor.cli import format_check

    check = by_name(run_checks(rdna2_box()))["video and render groups"]
    assert format_check(check).startswith("[PROBLEM] video and render groups: ana is not in video and render")
    assert "fix: sudo usermod" in format_check(check)
    line = format_check(check, "zh-CN")
    assert line.startswith("[PROBLEM] video 与 render 用户组") and "修复：" in line
