"""An NVIDIA node counts its GPUs (issue 30 §1): where there are no AMD GPUs, the node's slots
are the NVIDIA GPUs the app may use, read from the driver's /proc/driver/nvidia/gpus/ (a fake
tree here, its `information` files in the driver's real format), after the app's
CUDA_VISIBLE_DEVICES; AMD's KFD wins where both are present."""

from __future__ import annotations

from pathlib import Path

from backend.runs.gpu_slots import node_gpus
from backend.telemetry.fake_sysfs import build_fake_sysfs, server_cards
from backend.telemetry.nvidia_smi import NvidiaGpu, parse_nvidia_information, read_nvidia_gpus, visible_nvidia_positions

# /proc/driver/nvidia/gpus/0000:01:00.0/information as a 590 driver writes it (tabs and all)
REAL_INFORMATION = (
    "Model: \t\t NVIDIA GeForce RTX 3090\n"
    "IRQ:   \t\t 77\n"
    "GPU UUID: \t GPU-eaf23aa1-4d3d-596c-da66-b86b0e5db584\n"
    "Video BIOS: \t 94.02.26.40.81\n"
    "Bus Type: \t PCI\n"
    "DMA Size: \t 47 bits\n"
    "DMA Mask: \t 0x7fffffffffff\n"
    "Bus Location: \t 0000:01:00.0\n"
    "Device Minor: \t 0\n"
    "GPU Firmware: \t 590.48.01\n"
    "GPU Excluded:\t No\n"
)
# an older driver's (no Firmware, no Excluded line)
OLD_INFORMATION = (
    "Model: \t\t Tesla K80\nIRQ:   \t\t 33\nGPU UUID: \t GPU-be0a1aaf-c92d-ce5e-6d53-1f064e6842f6\nVideo BIOS: \t 80.21.25.00.01\n"
    "Bus Type: \t PCI\nDMA Size: \t 40 bits\nDMA Mask: \t 0xffffffffff\nBus Location: \t 0000:00:04.0\nDevice Minor: \t 0\n"
)


def fake_nvidia(root: Path, count: int, excluded: tuple[int, ...] = ()) -> Path:
    """A /proc/driver/nvidia/gpus of `count` GPUs; GPU i has UUID GPU-0000000i-... ."""
    for i in range(count):
        folder = root / f"0000:{0x18 + 0x10 * i:02x}:00.0"
        folder.mkdir(parents=True)
        text = REAL_INFORMATION.replace("eaf23aa1", f"{i:08x}").replace("Bus Location: \t 0000:01:00.0", f"Bus Location: \t {folder.name}")
        (folder / "information").write_text(text.replace("GPU Excluded:\t No", "GPU Excluded:\t Yes") if i in excluded else text)
    return root


def test_the_drivers_information_file_is_parsed() -> None:
    assert parse_nvidia_information("0000:01:00.0", REAL_INFORMATION) == NvidiaGpu("0000:01:00.0", "eaf23aa1-4d3d-596c-da66-b86b0e5db584", False)
    assert parse_nvidia_information("0000:00:04.0", OLD_INFORMATION) == NvidiaGpu("0000:00:04.0", "be0a1aaf-c92d-ce5e-6d53-1f064e6842f6", False)
    assert parse_nvidia_information("0000:01:00.0", REAL_INFORMATION.replace("\t No", "\t Yes")).excluded
    assert parse_nvidia_information("0000:01:00.0", "garbage\n\x00:::\n") == NvidiaGpu("0000:01:00.0", None, False)


def test_gpus_are_read_in_pci_order_and_bounded(tmp_path) -> None:
    root = fake_nvidia(tmp_path / "gpus", 3)
    (root / "not-a-gpu").mkdir()
    (root / "0000:ff:00.0").mkdir()  # information unreadable: still a GPU, in its place
    gpus = read_nvidia_gpus(root)
    assert [g.pci_address for g in gpus] == ["0000:18:00.0", "0000:28:00.0", "0000:38:00.0", "0000:ff:00.0"]
    assert gpus[1].uuid == "00000001-4d3d-596c-da66-b86b0e5db584" and gpus[3].uuid is None
    assert read_nvidia_gpus(tmp_path / "no-driver") == []


def test_cuda_visible_devices_of_the_app_bounds_the_node(tmp_path) -> None:
    gpus = read_nvidia_gpus(fake_nvidia(tmp_path / "gpus", 4, excluded=(3,)))
    assert visible_nvidia_positions(gpus, {}) == [0, 1, 2]  # the excluded one is not usable
    assert visible_nvidia_positions(gpus, {"CUDA_VISIBLE_DEVICES": "2,0"}) == [2, 0]
    assert visible_nvidia_positions(gpus, {"CUDA_VISIBLE_DEVICES": "GPU-00000001-4d3d-596c-da66-b86b0e5db584,1"}) == [1]  # a repeat ends it
    assert visible_nvidia_positions(gpus, {"CUDA_VISIBLE_DEVICES": "1,7,2"}) == [1]  # as CUDA: up to the first unknown
    assert visible_nvidia_positions(gpus, {"CUDA_VISIBLE_DEVICES": ""}) == []
    # HIP's and ROCR's variables are AMD's: they do not bound an NVIDIA node
    assert visible_nvidia_positions(gpus, {"HIP_VISIBLE_DEVICES": "0"}) == [0, 1, 2]


def test_an_nvidia_node_has_a_slot_per_gpu_and_amd_wins_where_both_are(tmp_path) -> None:
    nvidia = fake_nvidia(tmp_path / "nvidia", 2)
    no_amd = tmp_path / "sys-without-amd"
    assert node_gpus(no_amd, env={}, nvidia_gpus_dir=nvidia) == (0, 1)
    # the run given slot 1 gets CUDA_VISIBLE_DEVICES=1, which replaces the app's "1": the same GPU
    assert node_gpus(no_amd, env={"CUDA_VISIBLE_DEVICES": "1"}, nvidia_gpus_dir=nvidia) == (1,)
    assert node_gpus(no_amd, env={"CUDA_VISIBLE_DEVICES": ""}, nvidia_gpus_dir=nvidia, cpu_slot_count=2) == (0, 1)  # none seen: CPU slots
    assert node_gpus(no_amd, env={}, nvidia_gpus_dir=tmp_path / "no-driver", cpu_slot_count=3) == (0, 1, 2)
    amd = build_fake_sysfs(tmp_path / "sys", server_cards(4), bmc_vga=False)
    assert node_gpus(amd, env={}, nvidia_gpus_dir=nvidia) == (0, 1, 2, 3)
    # a fake sysfs tree is the whole simulated node: the machine's own NVIDIA GPUs are not read
    assert node_gpus(no_amd, env={}, cpu_slot_count=2) == (0, 1)
