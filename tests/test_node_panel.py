"""The Runs tab's node panel (issue 30 §1): each GPU, the run holding it, its VRAM and busy %,
and why each queued run waits. The renderer is tested pure (rows, reasons, escaping, both
languages); then the app's own parts on a simulated 2-GPU sysfs (backend/telemetry/fake_sysfs.py)
with stand-in trainers (a real sleeping process, started through the real launcher, as in
tests/test_gpu_slots_queue.py): the panel names which run holds each GPU with that GPU's own
reading, and the page built for that app shows it."""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from backend.runs.gpu_slots import Ask, NodeView, decide
from backend.runs.node_words import node_markdown, readings_on_node
from backend.telemetry.base import Reading
from tests.test_gpu_slots_queue import STAND_IN, queue_run

GIB = 1024**3


def reading(gpu: int, used_gib: float, total_gib: float, busy: float | None) -> Reading:
    return Reading(gpu, int(used_gib * GIB), int(total_gib * GIB), busy, 40.0, 100.0, "sysfs", 0.0)


def row(text: str, gpu: int) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {gpu} |"))


def test_rows_waiting_reasons_escaping_and_both_languages() -> None:
    node = (0, 1, 2)
    held = {"r-a": (0,), "r-b": (1,)}
    # big asks 2 (busy: held by a and b; it keeps GPU 2), small asks 1 (GPU 2 is kept for big),
    # huge asks 4 (the node has 3), next asks 1 too
    queue = [Ask("r-big", 2), Ask("r-small", 1), Ask("r-huge", 4)]
    view = NodeView(node, held, decide(node, held, queue))
    names = {"r-a": "<img src=x onerror=alert(1)>", "r-b": "[click](http://evil)", "r-big": "big", "r-small": "small", "r-huge": "huge"}
    readings = {0: reading(0, 12.5, 64, 97), 1: reading(1, 3, 64, None)}
    text = node_markdown(view, readings, names, "en")
    assert "| GPU | Held by | VRAM used / total | Busy |" in text
    assert "`r-a`" in row(text, 0) and "12.5 / 64.0 GiB" in row(text, 0) and "97%" in row(text, 0)
    assert "`r-b`" in row(text, 1) and "3.0 / 64.0 GiB" in row(text, 1) and row(text, 1).endswith("| — |")
    assert "free, kept for big (`r-big`)" in row(text, 2) and row(text, 2).endswith("| — | — |")
    # the user's names never become HTML, an image or a link
    assert "<img" not in text and "](http" not in text and "&lt;img src\\=x onerror\\=alert\\(1\\)&gt;" in text
    assert "\\[click\\]\\(http\\:" in text
    assert "- big (`r-big`): waits for GPUs held by" in text and "(`r-a`), " in text
    assert "- small (`r-small`): waits; the free GPUs are kept for big (`r-big`), ahead of it in the queue" in text
    assert "- huge (`r-huge`): can never start on this node" in text
    zh = node_markdown(view, readings, names, "zh-CN")
    assert "| GPU 编号 | 占用者 | 显存 已用 / 总量 | 繁忙度 |" in zh and "空闲，为 big (`r-big`) 保留" in row(zh, 2)
    assert "small (`r-small`)：等待中；空闲的 GPU 为排在它前面的 big (`r-big`) 保留" in zh
    assert "huge (`r-huge`)：在本节点上永远无法开始" in zh and "<img" not in zh
    # a run that starts at the queue's next step; nothing queued: no queue section
    view = NodeView(node, {"r-a": (0,)}, decide(node, {"r-a": (0,)}, [Ask("r-b", 2)]))
    text = node_markdown(view, {}, {}, "en")
    assert "- `r-b`: starts now on GPU 1, 2" in text and row(text, 1) == "| 1 | free | — | — |"
    assert "Queued" not in node_markdown(NodeView(node, {}, decide(node, {}, [])), {}, {}, "en")


def test_a_runs_readings_are_keyed_by_the_node_gpus_it_holds() -> None:
    # a run on GPUs 3 and 5 sees them as its devices 0 and 1; its process reading is no GPU's
    ours = [reading(0, 1, 64, 10), reading(1, 2, 64, 20), reading(2, 9, 64, 0), Reading(0, 5, None, None, None, None, "process", 0.0)]
    keyed = readings_on_node((3, 5), ours)
    assert sorted(keyed) == [3, 5] and keyed[3].util_pct == 10 and keyed[5].util_pct == 20


def test_the_panel_names_the_run_holding_each_gpu_with_its_reading(runs, monkeypatch, tmp_path) -> None:
    from backend.telemetry.fake_sysfs import build_fake_sysfs, server_cards, set_busy_percent, set_vram_used
    from backend.telemetry.sampler import Sampler
    from tests.harness import wait_until

    sysfs = build_fake_sysfs(tmp_path / "sys", server_cards(2), bmc_vga=False)
    set_vram_used(sysfs, 0, 5 * GIB)
    set_vram_used(sysfs, 1, 11 * GIB)
    set_busy_percent(sysfs, 0, 42)
    set_busy_percent(sysfs, 1, 87)
    sampler = Sampler(interval_s=0.2, sysfs_root=Path(sysfs))
    sampler.start()
    from backend.service import RocBoard

    board = RocBoard(runs, sampler=sampler)  # the app's parts, its sampler on the simulated node
    rm = board.run_manager
    rm.set_node((0, 1))
    real_start = rm.launcher.start
    monkeypatch.setattr(rm.launcher, "start", lambda run_id, env, command=None: real_start(run_id, env, command=STAND_IN))
    try:
        one, two, three = (queue_run(rm.store, name, 1) for name in ("lr-1e-4", "lr-2e-4", "lr-5e-4"))
        assert rm.advance_queue() is not None
        assert (rm.gpus_of(one), rm.gpus_of(two)) == ((0,), (1,)) and rm.store.read(three).state == "queued"
        wait_until(lambda: "87%" in (board.node_markdown("en") or "") and "42%" in (board.node_markdown("en") or ""), 20, interval=0.2, what="both GPUs' readings")
        text = board.node_markdown("en") or ""
        assert f"lr\\-1e\\-4 (`{one}`)" in row(text, 0) and "5.0 / 64.0 GiB" in row(text, 0) and "42%" in row(text, 0)
        assert f"lr\\-2e\\-4 (`{two}`)" in row(text, 1) and "11.0 / 64.0 GiB" in row(text, 1) and "87%" in row(text, 1)
        assert f"- lr\\-5e\\-4 (`{three}`): waits for GPUs held by lr\\-1e\\-4 (`{one}`), lr\\-2e\\-4 (`{two}`)" in text
        assert f"lr\\-2e\\-4 (`{two}`)" in row(board.node_markdown("zh-CN") or "", 1)

        # The page built for this app shows the panel (one slot: none, tests/test_gpu_slots_queue)
        from ui.app import build_ui

        page = build_ui(board)
        panel = next(block for block in page.blocks.values() if getattr(block, "elem_id", None) == "runs-node")
        assert panel.visible and f"`{one}`" in panel.value and f"`{three}`" in panel.value
        # its timer sends nothing while the panel is unchanged, the new panel once it changes
        tick = next(fn.fn for fn in page.fns.values() if fn.name == "on_node_tick")
        assert tick is not None
        now = board.node_markdown("en") or ""
        assert tick("en", now) == (gr.skip(), gr.skip())
        changed = tick("en", "an older panel")
        assert changed[1] == now and changed[0]["value"] == now and changed[0]["visible"] is True
        rm.set_node((0,))
        assert board.node_markdown("en") is None
    finally:
        sampler.stop()
