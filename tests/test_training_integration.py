"""The real thing: LLaMA-Factory LoRA runs of the offline demo model through the backend API.

No mocks: the real llamafactory-cli trains, the real loss log is read incrementally, the
real adapter is zipped and loaded with peft.
"""

from __future__ import annotations

import statistics
import time
import zipfile

import psutil
import pytest

from backend.service import RocBoard, demo_form
from backend.telemetry.sampler import Sampler
from tests.harness import wait_for
from tests.tiers import starts

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def board(tmp_path, demo_assets):
    sampler = Sampler(interval_s=1.0)
    sampler.start()
    board = RocBoard(tmp_path / "runs", sampler=sampler, export_dir=tmp_path / "exports")
    yield board
    for run in board.runs():
        if run.active:
            board.stop(run.id)
    sampler.stop()


@starts("lf_helper", "trainer")
def test_demo_run_learns_and_its_adapter_loads(board, tmp_path):
    result = board.start(demo_form())
    assert result.started, [f.line() for f in result.findings]
    run_id = result.run.id
    seen_counts = []

    def finished():
        snap = board.snapshot(run_id)
        seen_counts.append(len(snap.points))
        return snap if not snap.run.active else None

    snap = wait_for(finished, timeout=420, interval=0.5)
    assert snap is not None, "the demo run did not end in time"
    log = (board.store.run_dir(run_id) / "train.log").read_text()
    assert snap.run.state == "finished", log[-3000:]
    assert snap.run.exit_code == 0

    losses = [p.loss for p in snap.points if p.loss is not None]
    assert len(losses) >= 25
    assert statistics.mean(losses[-5:]) < statistics.mean(losses[:5])
    # The points arrived while it trained (read incrementally), not all at the end.
    assert any(0 < n < len(snap.points) for n in seen_counts)
    steps = [p.step for p in snap.points]
    assert steps == sorted(set(steps))

    # Memory of the training process was sampled into the run directory.
    assert any(s.used_gib and max(v for v in s.used_gib if v is not None) > 0.05 for s in snap.memory)
    assert (board.store.run_dir(run_id) / "samples.jsonl").stat().st_size > 0

    archive = board.adapter_download(run_id)
    names = set(zipfile.ZipFile(archive).namelist())
    assert {"adapter_model.safetensors", "adapter_config.json", "config.yaml", "tokenizer.json"} <= names

    # The adapter loads with peft onto the demo model and generates text.
    extract = tmp_path / "adapter"
    zipfile.ZipFile(archive).extractall(extract)
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = demo_form()["model_path"]
    tokenizer = AutoTokenizer.from_pretrained(extract)
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    model = PeftModel.from_pretrained(base, extract)
    inputs = tokenizer("Reverse", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=5, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert out.shape[1] > inputs["input_ids"].shape[1]


@starts("lf_helper", "trainer")
def test_stop_mid_run_leaves_no_process(board):
    form = dict(demo_form(), max_steps=5000, save_steps=5000, run_name="long")
    result = board.start(form)
    assert result.started
    run_id = result.run.id
    # A second Start while it trains waits in the queue (and, cancelled, never starts).
    second = board.start(dict(form, run_name="second"))
    assert second.queued and board.store.read(second.run.id).pid is None
    assert board.cancel_queued(second.run.id) == []

    assert wait_for(lambda: board.snapshot(run_id).points, timeout=300, interval=0.5), "no loss point arrived"
    root = psutil.Process(board.store.read(run_id).pid)
    tree = [root] + root.children(recursive=True)
    started = time.monotonic()
    state = board.stop(run_id)
    assert time.monotonic() - started < 10
    assert state.state == "stopped"
    for process in tree:
        assert not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
