"""The sysfs source against a fake tree: two AMD cards, one integrated GPU, one BMC VGA;
and the card-to-device mapping with ROCR_/HIP_VISIBLE_DEVICES."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from backend.telemetry.base import Reading
from backend.telemetry.fake_sysfs import DEFAULT_CARDS, build_fake_sysfs, set_vram_used
from backend.telemetry.sysfs import SysfsSource, find_amd_cards, pick_temperature, read_sysfs_cards
from backend.telemetry.topology import (
    CardIdentity,
    VisibleGpu,
    apply_visible_devices,
    gfx_name,
    parse_kfd_properties,
    pci_address,
    read_kfd_gpus,
    to_run_indices,
    visible_gpus,
)

XTX_TOTAL, XT_TOTAL = 25753026560, 17163091968


@pytest.fixture
def fake_sys(tmp_path: Path) -> Path:
    return build_fake_sysfs(tmp_path / "sys")


def totals(readings):
    return [(r.gpu, r.total_bytes, r.label) for r in readings]


def test_only_amd_cards_are_found_and_connectors_skipped(fake_sys):
    cards = find_amd_cards(fake_sys)
    assert [c.card for c in cards] == [0, 1, 2]  # card3 is the ASPEED BMC
    assert [c.pci_address for c in cards] == ["0000:7c:00.0", "0000:03:00.0", "0000:0c:00.0"]
    assert [c.render_minor for c in cards] == [128, 129, 130]


def test_raw_sysfs_readings_in_card_order_with_units_converted(fake_sys):
    readings = read_sysfs_cards(find_amd_cards(fake_sys))
    assert [(r.gpu, r.used_bytes, r.total_bytes, r.util_pct, r.temp_c, r.power_w) for r in readings] == [
        (0, 97 * 1024**2, 512 * 1024**2, 3.0, 41.0, 9.0),
        (1, 794341376, XTX_TOTAL, 37.0, 49.0, 19.0),  # power1_average
        (2, 4294967296, XT_TOTAL, 82.0, 71.0, 187.0),  # power1_input only
    ]


def test_source_numbers_gpus_as_hip_does_and_skips_the_carve_out(fake_sys):
    source = SysfsSource(fake_sys, env={})
    status = source.probe()
    assert status.available
    assert "the run sees 2" in status.detail
    # card1 (PCI 03) is HIP device 0, card2 (PCI 0c) device 1; the iGPU (card0) is skipped.
    assert totals(source.read()) == [(0, XTX_TOTAL, "GPU 0 (gfx1100)"), (1, XT_TOTAL, "GPU 1 (gfx1101)")]


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"HIP_VISIBLE_DEVICES": "1"}, [(0, XT_TOTAL)]),
        ({"ROCR_VISIBLE_DEVICES": "1,0"}, [(0, XT_TOTAL), (1, XTX_TOTAL)]),
        # ROCR first (reorders to [0c, 03]), then HIP picks the second of those.
        ({"ROCR_VISIBLE_DEVICES": "1,0", "HIP_VISIBLE_DEVICES": "1"}, [(0, XTX_TOTAL)]),
        ({"CUDA_VISIBLE_DEVICES": "1"}, [(0, XT_TOTAL)]),
        ({"ROCR_VISIBLE_DEVICES": "GPU-0a1b2c3d4e5f6071"}, [(0, XT_TOTAL)]),
        ({"HIP_VISIBLE_DEVICES": ""}, []),
        ({"HIP_VISIBLE_DEVICES": "0,7,1"}, [(0, XTX_TOTAL)]),  # stops at the first invalid entry
    ],
)
def test_visible_device_variables(fake_sys, env, expected):
    source = SysfsSource(fake_sys, env=env)
    assert source.probe().available
    assert [(r.gpu, r.total_bytes) for r in source.read()] == expected


def test_a_new_tick_sees_new_values(fake_sys):
    source = SysfsSource(fake_sys, env={})
    source.probe()
    set_vram_used(fake_sys, 1, 20 * 1024**3)
    assert source.read()[0].used_bytes == 20 * 1024**3


def test_one_bad_field_is_none_not_an_exception(fake_sys):
    device = fake_sys / "class" / "drm" / "card1" / "device"
    (device / "gpu_busy_percent").write_text("garbage\n")
    (device / "hwmon" / "hwmon3" / "power1_average").unlink()
    source = SysfsSource(fake_sys, env={})
    source.probe()
    first = source.read()[0]
    assert (first.util_pct, first.power_w, first.used_bytes) == (None, None, 794341376)
    assert source.last_failure == ""


def test_no_amd_card_is_unavailable_with_a_hint(tmp_path):
    status = SysfsSource(tmp_path, env={}).probe()
    assert not status.available
    assert "amdgpu" in status.hint


def test_without_kfd_topology_cards_are_taken_in_order(tmp_path):
    root = build_fake_sysfs(tmp_path / "sys", DEFAULT_CARDS[1:], bmc_vga=False)
    shutil.rmtree(root / "class" / "kfd")
    source = SysfsSource(root, env={"HIP_VISIBLE_DEVICES": "1"})
    assert source.probe().available
    assert totals(source.read()) == [(0, XT_TOTAL, "GPU 0")]


def test_a_large_integrated_gpu_is_labelled_not_skipped(tmp_path):
    strix = replace(DEFAULT_CARDS[0], vram_total=64 * 1024**3, integrated=True)
    root = build_fake_sysfs(tmp_path / "sys", (strix,), bmc_vga=False)
    # An APU's KFD node carries CPU cores as well as SIMDs.
    props = root / "class" / "kfd" / "kfd" / "topology" / "nodes" / "1" / "properties"
    props.write_text(props.read_text().replace("cpu_cores_count 0", "cpu_cores_count 16"))
    source = SysfsSource(root, env={})
    source.probe()
    assert totals(source.read()) == [(0, 64 * 1024**3, "GPU 0 (gfx1036, integrated)")]


# ---- topology pieces ------------------------------------------------------------------


def test_kfd_properties_and_addresses():
    props = parse_kfd_properties("simd_count 192\nlocation_id 768\nname gfx1100\n")
    assert props == {"simd_count": 192, "location_id": 768}
    assert pci_address(768) == "0000:03:00.0"
    assert pci_address((0xC1 << 8) | (2 << 3) | 1, domain=1) == "0001:c1:02.1"
    assert (gfx_name(110000), gfx_name(90010), gfx_name(90402), gfx_name(0)) == ("gfx1100", "gfx90a", "gfx942", None)


def test_kfd_gpus_skip_the_cpu_node(fake_sys):
    gpus = read_kfd_gpus(fake_sys)
    assert [g.pci_address for g in gpus] == ["0000:03:00.0", "0000:0c:00.0", "0000:7c:00.0"]
    assert [v.index for v in visible_gpus(gpus, {})] == [0, 1, 2]


def test_apply_visible_devices():
    assert apply_visible_devices(3, None) == [0, 1, 2]
    assert apply_visible_devices(3, "2,0") == [2, 0]
    assert apply_visible_devices(3, "") == []
    assert apply_visible_devices(3, "1,1") == [1]
    assert apply_visible_devices(2, "GPU-abc,0", ["abc", None]) == [0]


def test_tool_readings_are_matched_by_pci_address():
    readings = [Reading(n, 1, 16 * 1024**3, None, None, None, "rocm-smi", 0.0) for n in (0, 1)]
    identities = {0: CardIdentity(0, "0000:0c:00.0"), 1: CardIdentity(1, "0000:03:00.0")}
    gpus = [VisibleGpu(0, "0000:03:00.0", None, "gfx1100", False), VisibleGpu(1, "0000:0c:00.0", None, None, False)]
    mapped = to_run_indices(readings, identities, gpus, {})
    assert [(r.gpu, r.label) for r in mapped] == [(0, "GPU 0 (gfx1100)"), (1, "GPU 1")]
    # tool card 1 (PCI 03) became the run's device 0
    assert mapped[0] == replace(readings[1], gpu=0, label="GPU 0 (gfx1100)")


def test_pick_temperature_prefers_edge():
    assert pick_temperature({"junction": 60.0, "edge": 50.0}) == 50.0
    assert pick_temperature({"temp1": 40.0}) == 40.0
    assert pick_temperature({}) is None


@pytest.mark.parametrize("visible, card", [("2", 2), ("", None)])
def test_a_run_on_one_gpu_of_eight_reads_only_its_card(tmp_path, monkeypatch, visible, card):
    """Side by side each run's sampler reads its own GPU, so a node of 8 runs reads each GPU
    once a tick, not 8 times. A run that sees no GPU charts none (its readings are empty),
    yet every card is read to tell whether VRAM can be read at all."""
    from backend.telemetry import sysfs
    from backend.telemetry.fake_sysfs import server_cards

    root = build_fake_sysfs(tmp_path / "sys", server_cards(8), bmc_vga=False)
    source = SysfsSource(root, env={"HIP_VISIBLE_DEVICES": visible})
    assert source.probe().available
    read: list[int] = []
    original = sysfs.read_card
    monkeypatch.setattr(sysfs, "read_card", lambda c, at=None: read.append(c.card) or original(c, at))
    readings = source.read()
    if card is None:
        assert readings == [] and source.last_failure == "" and sorted(read) == list(range(8))
    else:
        assert [(r.gpu, r.label) for r in readings] == [(0, "GPU 0 (gfx90a)")] and read == [card]
    # the other cards' VRAM unreadable: the run's own GPU is still charted, read alone; a run
    # that sees none now finds no card readable (the sampler backs off)
    for other in range(8):
        if other != card:
            (root / "class" / "drm" / f"card{other}" / "device" / "mem_info_vram_total").unlink()
    read.clear()
    again = source.read()
    if card is None:
        assert again == [] and source.last_failure == "no card's VRAM could be read"
    else:
        assert [(r.gpu, r.total_bytes) for r in again] == [(0, readings[0].total_bytes)] and read == [card] and source.last_failure == ""
