"""The app started with HIP_VISIBLE_DEVICES (or CUDA_VISIBLE_DEVICES, which HIP also honours)
may use only those GPUs, and so may every run it starts side by side (issue 30). A run's
HIP_VISIBLE_DEVICES replaces the app's, so the node's slots are numbered as a child's value
names them (after the ROCR_VISIBLE_DEVICES a child inherits): an app with
HIP_VISIBLE_DEVICES=2,3 has the slots 2 and 3, and a run given 2 trains on the app's first
GPU, never on GPU 0 which the app was told not to use. Pure cases on a simulated 4-GPU sysfs,
then stand-in trainers through the real launcher (each process's environment read from
/proc) with the app's own sampler: the node panel shows each run's own GPU's VRAM beside the
slot's index and that GPU's PCI address (rocm-smi and amd-smi number their rows in their own
order; the address is what they share)."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.runs.gpu_slots import node_gpu_addresses, node_gpus
from backend.telemetry.fake_sysfs import build_fake_sysfs, server_cards, set_busy_percent, set_vram_used
from backend.telemetry.topology import read_kfd_gpus, visible_gpus
from tests.test_gpu_slots_queue import STAND_IN, environ, queue_run

GIB = 1024**3

# the app's environment -> the slots it has (ROCR_VISIBLE_DEVICES is inherited by a run, so
# slots count after it; HIP's or CUDA's variable is replaced by a run's, so slots count before it)
APP_ENVS = [
    ({}, (0, 1, 2, 3)),
    ({"HIP_VISIBLE_DEVICES": "2,3"}, (2, 3)),
    ({"HIP_VISIBLE_DEVICES": "3,1"}, (1, 3)),
    ({"CUDA_VISIBLE_DEVICES": "1,2"}, (1, 2)),
    ({"HIP_VISIBLE_DEVICES": "3", "CUDA_VISIBLE_DEVICES": "0,1"}, (3,)),  # HIP's wins on ROCm
    ({"ROCR_VISIBLE_DEVICES": "1,3"}, (0, 1)),
    ({"ROCR_VISIBLE_DEVICES": "0,2,3", "HIP_VISIBLE_DEVICES": "1,2"}, (1, 2)),
]


@pytest.mark.parametrize(("app_env", "slots"), APP_ENVS)
def test_a_run_on_any_slot_lands_on_a_gpu_the_app_may_use(tmp_path, app_env, slots) -> None:
    sysfs = build_fake_sysfs(tmp_path / "sys", server_cards(4), bmc_vga=False)
    assert node_gpus(sysfs, env=app_env) == slots
    kfd = read_kfd_gpus(sysfs) or []
    may_use = {g.pci_address for g in visible_gpus(kfd, app_env)}
    landed = []
    for slot in slots:  # a run's environment: the app's, its HIP_ and CUDA_VISIBLE_DEVICES replaced
        child = {**app_env, "HIP_VISIBLE_DEVICES": str(slot), "CUDA_VISIBLE_DEVICES": str(slot)}
        seen = visible_gpus(kfd, child)
        assert len(seen) == 1, (slot, seen)
        landed.append(seen[0].pci_address)
    assert len(set(landed)) == len(slots) and set(landed) == may_use
    # the node panel names each slot's GPU by the PCI address rocm-smi and amd-smi show: the one it lands on
    assert node_gpu_addresses(sysfs, env=app_env) == dict(zip(slots, landed, strict=True))


def test_runs_beside_an_app_told_hip_visible_devices_train_and_chart_on_its_gpus(runs, monkeypatch, tmp_path) -> None:
    from backend.service import RocBoard
    from backend.telemetry.sampler import Sampler
    from tests.harness import wait_until

    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "2,3")  # the app's own: a run's replaces it
    monkeypatch.delenv("ROCR_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    sysfs = build_fake_sysfs(tmp_path / "sys", server_cards(4), bmc_vga=False)
    for card, (gib, busy) in enumerate(((1, 1), (2, 2), (23, 61), (37, 79))):  # server card N is HIP device N
        set_vram_used(sysfs, card, gib * GIB)
        set_busy_percent(sysfs, card, busy)
    node = node_gpus(sysfs)
    assert node == (2, 3)
    sampler = Sampler(interval_s=0.2, sysfs_root=Path(sysfs))
    sampler.start()
    board = RocBoard(runs, sampler=sampler)
    rm = board.run_manager
    board.set_node(node, node_gpu_addresses(sysfs))
    real_start = rm.launcher.start
    monkeypatch.setattr(rm.launcher, "start", lambda run_id, env, command=None: real_start(run_id, env, command=STAND_IN))
    one = two = ""
    try:
        assert rm.gpu_for_chat() == (2, None)  # a chat's GPU is a slot too (its server gets the same value)
        one, two = (queue_run(rm.store, name, 1) for name in ("first", "second"))
        assert rm.advance_queue() is not None
        assert (rm.gpus_of(one), rm.gpus_of(two)) == ((2,), (3,))
        kfd = read_kfd_gpus(sysfs) or []
        for run_id, card in ((one, 2), (two, 3)):
            env = environ(rm.store.read(run_id).pid)
            assert env["HIP_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"] == str(card) and "ROCR_VISIBLE_DEVICES" not in env
            assert [g.pci_address for g in visible_gpus(kfd, env)] == [server_cards(4)[card].pci_address]
        # each run's chart (its sampler reads the run's variables from /proc) is its own GPU's
        wait_until(lambda: "61%" in (board.node_markdown("en") or "") and "79%" in (board.node_markdown("en") or ""), 20, interval=0.2, what="both GPUs' readings")
        rows = {line.split("|")[1].strip(): line for line in (board.node_markdown("en") or "").splitlines() if line.startswith("| ") and "`" in line}
        two_at, three_at = "2 · `0000:30:00.0`", "3 · `0000:40:00.0`"  # server card N: bus 0x10 + 0x10 N
        assert sorted(rows) == [two_at, three_at]
        assert f"`{one}`" in rows[two_at] and "23.0 / 64.0 GiB" in rows[two_at] and "61%" in rows[two_at]
        assert f"`{two}`" in rows[three_at] and "37.0 / 64.0 GiB" in rows[three_at] and "79%" in rows[three_at]
    finally:
        for run_id in (one, two):  # the second run's own sampler (the first's is the app's)
            own = rm.sampler_of(run_id)
            if own is not None and own is not sampler:
                own.stop()
        sampler.stop()
