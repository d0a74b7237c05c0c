"""The Chat desk on real LLaMA-Factory API servers (the offline CPU demo model and a real
trained demo run): streamed answers, base beside adapter, the server reachable from this
machine only and with its key only, refusals before anything starts, a load that fails, a
server killed mid-answer, idle stop, nothing left running; the command line; and the pure
readers on output captured from the real server (tests/fixtures/chat/)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from backend.chat.server import HOST, WORKER_MARK, GenerationSettings
from backend.chat.stream import parse_load_failure, parse_load_stage, parse_sse_deltas, parse_sse_line
from backend.i18n import translate
from backend.runs import RunStore
from backend.service.chat_desk import ChatDesk, build_messages
from tests.harness import ROOT, copy_run, fake_run, http_get, kill_processes, wait_until

FIXTURES = Path(__file__).parent / "fixtures" / "chat"
PROMPT = "What is the capital of France?"
GREEDY = GenerationSettings(temperature=0.0, max_new_tokens=32)
LOAD_TIMEOUT_S = 180.0


def chat_servers(under: Path) -> list[psutil.Process]:
    """Our API workers working in a run under `under` (this test's runs): each server's
    working directory is its run's."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info.get("cmdline") or [])
        if WORKER_MARK not in cmdline:
            continue
        try:
            if Path(process.cwd()).is_relative_to(under):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def started_since(under: Path, before: list[psutil.Process]) -> list[psutil.Process]:
    """The chat servers under `under` not in `before` (the module's side-by-side desk stays
    loaded while other tests run)."""
    known = {p.pid for p in before}
    return [p for p in chat_servers(under) if p.pid not in known]


def load(desk: ChatDesk, run_id: str, **kwargs):
    statuses = list(desk.load(run_id, timeout_s=LOAD_TIMEOUT_S, **kwargs))
    return statuses


def answer(desk: ChatDesk, prompt: str = PROMPT, settings: GenerationSettings = GREEDY, **kwargs) -> tuple[dict[str, list[str]], list]:
    deltas: dict[str, list[str]] = {"adapter": [], "base": []}
    errors = []
    for event in desk.ask(prompt, settings=settings, **kwargs):
        if event.error:
            errors.append(event)
        elif event.delta:
            deltas[event.which].append(event.delta)
    return deltas, errors


@pytest.fixture(scope="module")
def chat_runs(trained_demo_run, tmp_path_factory):
    source_runs, run_id = trained_demo_run
    runs = tmp_path_factory.mktemp("chat-runs")
    # The run's adapter zip may still be being written (a temp file that is renamed): copy after.
    wait_until(lambda: not list((source_runs / run_id).glob(".*.tmp")), 60, what="the run's files to settle")
    copy_run(source_runs, run_id, runs)
    yield runs, run_id
    kill_processes(chat_servers(runs))


@pytest.fixture(scope="module")
def side_by_side(chat_runs):
    """One desk with the adapter and the base loaded, for the tests that only ask."""
    runs, run_id = chat_runs
    desk = ChatDesk(RunStore(runs), None)
    statuses = load(desk, run_id, side_by_side=True)
    assert statuses[-1].state == "ready", statuses[-1]
    yield desk, statuses
    desk.close()
    assert chat_servers(runs) == []


# --- the pure readers, on real captured output ----------------------------------------------


def test_parse_sse_on_the_captured_stream():
    chunks = list(parse_sse_deltas((FIXTURES / "stream_adapter.sse").read_text(encoding="utf-8").splitlines()))
    text = "".join(chunk.content for chunk in chunks)
    assert text == "The opposite of CPU says c."
    assert len([c for c in chunks if c.content]) == 6
    assert chunks[-1].done and chunks[-2].finish_reason == "stop"
    assert parse_sse_line("") is None and parse_sse_line(": ping") is None
    with pytest.raises(ValueError):
        parse_sse_line("data: {not json")


def test_parse_load_stage_and_failure_on_captured_logs():
    ready = (FIXTURES / "server_adapter_ready.log").read_text(encoding="utf-8")
    assert parse_load_stage(ready) == "ready"
    assert parse_load_stage(ready.split("Merged 1 adapter")[0]) == "model"
    assert parse_load_stage(ready.split("loading weights file")[0]) == "tokenizer"
    assert parse_load_stage("") == "starting"
    corrupt = (FIXTURES / "server_corrupt_adapter.log").read_text(encoding="utf-8")
    failure = parse_load_failure(corrupt)
    assert failure is not None and failure.kind == "error"
    assert failure.line.startswith("safetensors._safetensors_rust.SafetensorError: Error while deserializing header")
    oom = corrupt + "\ntorch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB\n"
    assert parse_load_failure(oom).kind == "oom"
    assert parse_load_failure(corrupt + "RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes\n").kind == "oom"


def test_messages_keep_whole_turns_and_bounds():
    history = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "unanswered"},
        {"role": "assistant", "content": "warning", "metadata": {"title": "⚠"}},
    ]
    messages = build_messages("q" * 20_000, "be brief", history)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert len(messages[-1]["content"]) == 16_000
    assert GenerationSettings(temperature=9, top_p=-1, max_new_tokens=10**9).bounded() == GenerationSettings(2.0, 0.01, 4096)
    assert GenerationSettings(temperature=0).request_fields()["do_sample"] is False


# --- real servers --------------------------------------------------------------------------


def test_load_shows_progress_and_answers_streamed(side_by_side):
    desk, statuses = side_by_side
    assert statuses[0].state == "loading" and statuses[-1].load_s is not None
    assert all(s.elapsed_s >= 0 for s in statuses)
    deltas, errors = answer(desk)
    assert errors == []
    assert len(deltas["adapter"]) > 1, deltas  # streamed: several pieces, not one block
    assert "".join(deltas["adapter"]).strip()


def test_base_and_adapter_answer_differently_with_greedy_decoding(side_by_side):
    desk, _ = side_by_side
    deltas, errors = answer(desk)
    assert errors == []
    adapter, base = "".join(deltas["adapter"]), "".join(deltas["base"])
    assert adapter and base and adapter != base
    again, _ = answer(desk)  # greedy: the same answer twice
    assert "".join(again["adapter"]) == adapter


def test_servers_listen_on_loopback_only_and_want_the_key(side_by_side):
    desk, _ = side_by_side
    servers = desk._session.servers
    for server in servers.values():
        listening = [c for c in psutil.Process(server.pid).net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        assert listening and all(c.laddr.ip == HOST for c in listening), listening
        status, _, _ = http_get(server.port, "/v1/models")
        assert status == 401
        status, _, _ = http_get(server.port, "/v1/models", headers={"Authorization": "Bearer not-the-key"})
        assert status == 401
        status, _, _ = http_get(server.port, "/v1/models", headers={"Authorization": f"Bearer {server.key}"})
        assert status == 200
    others = [
        a.address
        for addresses in psutil.net_if_addrs().values()
        for a in addresses
        if a.family == socket.AF_INET and not a.address.startswith("127.")
    ]
    if not others:
        pytest.skip("this machine has no non-loopback IPv4 address to try the port from")
    for address in others:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((address, servers["adapter"].port), timeout=5).close()


def test_refusals_start_nothing(chat_runs, tmp_path):
    runs, run_id = chat_runs
    store = RunStore(runs)
    desk = ChatDesk(store, None)
    before = len(chat_servers(runs))

    no_adapter = "20990101-000000-noadapter"
    shutil.copytree(runs / run_id, runs / no_adapter)
    (runs / no_adapter / "output" / "adapter_config.json").unlink()
    model_copy = tmp_path / "model-copy"
    shutil.copytree(ROOT / "demo" / "model", model_copy)
    gone_base = "20990101-000001-gonebase"
    shutil.copytree(runs / run_id, runs / gone_base)
    form = json.loads((runs / gone_base / "form.json").read_text())
    form["model_path"] = str(model_copy)
    (runs / gone_base / "form.json").write_text(json.dumps(form))
    shutil.rmtree(model_copy)
    try:
        cases = {"missing-run": "chat-unknown-run", no_adapter: "chat-no-adapter", gone_base: "chat-base-missing"}
        for target, rule in cases.items():
            statuses = load(desk, target)
            assert [s.state for s in statuses] == ["refused"], statuses
            assert [f.rule for f in statuses[-1].findings] == [rule]
            assert statuses[-1].findings[0].fix
        assert load(desk, run_id, checkpoint="../../etc")[-1].findings[0].rule == "chat-unknown-checkpoint"
        active_id, _, stand_in = fake_run(runs, 3, active=True)
        try:
            assert [f.rule for f in load(desk, active_id)[-1].findings] == ["chat-run-active"]
            # Another run training holds the GPU: the finished run is refused too.
            assert [f.rule for f in load(desk, run_id)[-1].findings] == ["chat-gpu-busy"]
        finally:
            stand_in.kill()
            stand_in.wait()
            shutil.rmtree(runs / active_id)
        assert len(chat_servers(runs)) == before
        assert no_adapter not in [r.id for r in desk.chattable_runs()]
        assert desk.checkpoints(run_id) == ["checkpoint-100", "checkpoint-50"]
    finally:
        shutil.rmtree(runs / no_adapter, ignore_errors=True)
        shutil.rmtree(runs / gone_base, ignore_errors=True)


def test_a_load_that_fails_says_why_and_leaves_nothing(chat_runs, tmp_path):
    runs, run_id = chat_runs
    broken_runs = tmp_path / "runs"
    copy_run(runs, run_id, broken_runs)
    adapter = broken_runs / run_id / "output" / "adapter_model.safetensors"
    adapter.write_bytes(adapter.read_bytes()[:100])  # a copy cut short
    desk = ChatDesk(RunStore(broken_runs), None)
    last = load(desk, run_id)[-1]
    assert last.state == "failed"
    assert [f.rule for f in last.findings] == ["chat-load-failed"]
    assert "SafetensorError" in last.findings[0].problem
    assert "adapter.log" in last.findings[0].fix
    assert desk.status().state == "failed"
    assert chat_servers(broken_runs) == []


def test_checkpoint_loads_and_the_next_load_replaces_it(chat_runs):
    runs, run_id = chat_runs
    desk = ChatDesk(RunStore(runs), None)
    before = chat_servers(runs)
    try:
        assert load(desk, run_id, checkpoint="checkpoint-50")[-1].state == "ready"
        first = desk._session.servers["adapter"].pid
        assert "checkpoint-50" in " ".join(psutil.Process(first).cmdline())
        deltas, errors = answer(desk)
        assert errors == [] and deltas["adapter"]
        assert load(desk, run_id)[-1].state == "ready"
        assert not psutil.pid_exists(first) or psutil.Process(first).status() == psutil.STATUS_ZOMBIE
        assert len(started_since(runs, before)) == 1
    finally:
        desk.stop_all()
    assert started_since(runs, before) == []


def test_a_server_killed_mid_answer_ends_the_stream_with_a_message(chat_runs):
    runs, run_id = chat_runs
    desk = ChatDesk(RunStore(runs), None)
    before = chat_servers(runs)
    try:
        # The random-weight base model, greedy, repeats itself until max_new_tokens (it never
        # says its end token): a long answer to cut.
        assert load(desk, run_id, base_only=True)[-1].state == "ready"
        server = desk._session.servers["base"]
        events = []
        for event in desk.ask("Tell me a long story.", settings=GenerationSettings(temperature=0.0, max_new_tokens=4096)):
            events.append(event)
            if len(events) == 2:
                os.kill(server.pid, signal.SIGKILL)
        errors = [e for e in events if e.error]
        assert [e.error for e in errors] == ["chat.error.died"], events[-3:]
        assert translate("chat.error.died", "en") in "The chat server stopped in the middle of the answer (stopped or crashed). Press Load to go on."
        assert desk.status().state == "died"
        assert [e.error for e in desk.ask("again?") if e.error] == ["chat.error.not_loaded"]
    finally:
        desk.stop_all()
    assert started_since(runs, before) == []


def test_idle_servers_stop_on_their_own(chat_runs):
    runs, run_id = chat_runs
    desk = ChatDesk(RunStore(runs), None, idle_stop_s=1.0)
    before = chat_servers(runs)
    try:
        assert load(desk, run_id)[-1].state == "ready"
        assert len(started_since(runs, before)) == 1
        wait_until(lambda: desk.status().state == "idle_stopped", 20, what="the idle stop")
        assert desk.status().idle_minutes == pytest.approx(1 / 60)
        wait_until(lambda: started_since(runs, before) == [], 10, what="the idle server to be gone")
    finally:
        desk.stop_all()


def test_stop_all_leaves_no_process(chat_runs):
    runs, run_id = chat_runs
    desk = ChatDesk(RunStore(runs), None)
    before = chat_servers(runs)
    statuses = load(desk, run_id, side_by_side=True)
    assert statuses[-1].state == "ready"
    assert len(started_since(runs, before)) == 2
    desk.stop_all()
    assert started_since(runs, before) == []
    assert desk.status().state == "stopped"


def test_the_server_dies_with_the_process_that_started_it_even_on_sigkill(chat_runs):
    runs, run_id = chat_runs
    before = chat_servers(runs)
    cli = subprocess.Popen(
        [sys.executable, str(ROOT / "app.py"), "chat", run_id, "--runs-dir", str(runs), "--base", "--max-new-tokens", "4096", "--prompt", "A long story."],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )
    try:
        wait_until(lambda: started_since(runs, before), 60, what="the chat server to start")
        cli.send_signal(signal.SIGKILL)  # nothing of ours runs: only the closed pipe can tell
        cli.wait(timeout=10)
        wait_until(lambda: started_since(runs, before) == [], 20, what="the orphaned chat server to exit")
    finally:
        kill_processes(started_since(runs, before))
        if cli.poll() is None:
            cli.kill()


def test_command_line_answers_and_leaves_no_process(chat_runs):
    runs, run_id = chat_runs
    before = chat_servers(runs)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(ROOT / "app.py"), "chat", run_id, "--runs-dir", str(runs), "--max-new-tokens", "32"],
        cwd=ROOT, input=PROMPT, capture_output=True, text=True, timeout=LOAD_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip(), done
    print(f"command line: load + answer in {time.monotonic() - started:.1f} s")
    assert started_since(runs, before) == []
    refused = subprocess.run(
        [sys.executable, str(ROOT / "app.py"), "chat", "no-such-run", "--runs-dir", str(runs), "--prompt", "hi"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert refused.returncode == 2 and "There is no run no-such-run" in refused.stderr and refused.stdout == ""
