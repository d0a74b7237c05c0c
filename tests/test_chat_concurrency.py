"""Chat loads at once, driven the way Gradio drives a generator handler (issue 26, item 3).

Gradio runs each `next()` of a handler's generator on whichever worker thread is free, so a
load's steps land on different threads, and two tabs' loads interleave. Reported: two tabs
pressing Load a second apart gave the first "cannot release un-acquired lock", and after that
Unload, questions and a training Start never answered (the desk's lock stayed held by a
thread that had moved on; RunManager.before_launch waits on it under the run manager's lock).

Here every step of a load runs on a thread of its own, bounded in time: a step that does not
return is a hang and fails the test instead of the session. The real desk of a RocBoard, on
real LLaMA-Factory servers (one real load per test: they are slow on 2 cores), and a training
Start through the real RunManager whose trainer is a stand-in (the Start's locks, queue and
before_launch are the real ones; LLaMA-Factory does not train)."""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from backend.runs import RunStore
from backend.service import RocBoard, demo_form
from backend.service.chat_desk import ChatDesk
from tests.harness import copy_run, kill_processes, wait_until
from tests.test_chat import chat_servers

STEP_S = 30.0  # one next() of a load: a poll of 0.5 s, a 2 s readiness probe; more is a hang
LOAD_S = 180.0  # a whole real load on 2 busy cores
ANSWER_S = 20.0  # Unload, status, a Start: each answers well within this
REFUSED_S = 15.0  # a load refused because another is in progress: no process, no wait
STAND_IN_TRAINER = [sys.executable, "-c", "import time; time.sleep(120)"]


@dataclass
class Drained:
    """What one tab's handler saw: the statuses, or the error it raised, or that it hung."""

    items: list[Any] = field(default_factory=list)
    error: BaseException | None = None
    hung: bool = False
    threads: set[int] = field(default_factory=set)  # the workers that ran its steps
    started: float = 0.0
    ended: float = 0.0

    @property
    def last(self) -> Any:
        return self.items[-1] if self.items else None

    @property
    def seconds(self) -> float:
        return self.ended - self.started


class GradioLikeWorkers:
    """Long-lived worker threads, as Gradio's are: each step of a generator goes to the next
    worker in turn: with three, never to the thread of either of the two steps before it
    (a lock taken in one step and let go two steps later is let go on another thread too). A
    new thread per step would not do: CPython reuses a finished thread's id, and a lock then
    takes the new thread for its owner."""

    def __init__(self, count: int = 3):
        self.inboxes: list[queue.Queue] = [queue.Queue() for _ in range(count)]
        self.turn = 0
        for inbox in self.inboxes:
            threading.Thread(target=self._work, args=(inbox,), daemon=True, name="gradio-like-worker").start()

    @staticmethod
    def _work(inbox: queue.Queue) -> None:
        while (job := inbox.get()) is not None:
            job()

    def run(self, job: Callable[[], None]) -> threading.Event:
        done = threading.Event()

        def step() -> None:
            try:
                job()
            finally:
                done.set()

        self.inboxes[self.turn % len(self.inboxes)].put(step)
        self.turn += 1
        return done

    def close(self) -> None:
        for inbox in self.inboxes:
            inbox.put(None)  # a worker stuck in a hung step stays stuck: it is a daemon


def drain_like_gradio(generator: Iterator[Any], step_s: float = STEP_S, total_s: float = LOAD_S) -> Drained:
    """Drains `generator` one next() at a time, each on the next of Gradio-like workers."""
    drained = Drained(started=time.monotonic())
    deadline = drained.started + total_s
    workers = GradioLikeWorkers()
    try:
        while True:
            box: dict[str, Any] = {}

            def step(box: dict[str, Any] = box) -> None:
                drained.threads.add(threading.get_ident())
                try:
                    box["item"] = next(generator)
                except StopIteration:
                    box["end"] = True
                except Exception as error:  # what the tab would have been shown
                    box["error"] = error

            if not workers.run(step).wait(step_s) or time.monotonic() > deadline:
                drained.hung = True
            elif "error" in box:
                drained.error = box["error"]
            elif "item" in box:
                drained.items.append(box["item"])
                continue
            drained.ended = time.monotonic()
            return drained
    finally:
        workers.close()


def tabs_at_once(loads: list[Callable[[], Iterator[Any]]], apart_s: float = 0.0) -> list[Drained]:
    """Each load drained by a tab of its own, `apart_s` after the one before (0: released by
    one barrier, all at once)."""
    results: list[Drained | None] = [None] * len(loads)
    barrier = threading.Barrier(len(loads))

    def tab(index: int) -> None:
        barrier.wait()
        time.sleep(index * apart_s)
        results[index] = drain_like_gradio(loads[index]())

    threads = [threading.Thread(target=tab, args=(i,), daemon=True) for i in range(len(loads))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(LOAD_S + STEP_S + len(loads) * apart_s)
    return [r if r is not None else Drained(hung=True) for r in results]


def answers_within(call: Callable[[], Any], seconds: float, what: str) -> Any:
    """call(), on a thread of its own; fails (instead of hanging the test) when it does not return."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except Exception as error:
            box["error"] = error

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        pytest.fail(f"{what} did not answer within {seconds:g} s (a lock held by a thread that moved on?)")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def shown(results: list[Drained]) -> str:
    return "\n".join(
        f"tab {i}: hung={r.hung} error={r.error!r} last={getattr(r.last, 'state', None)} "
        f"rules={[f.rule for f in getattr(r.last, 'findings', ())]} after {r.seconds:.1f} s"
        for i, r in enumerate(results)
    )


@pytest.fixture(scope="module")
def runs_with_adapter(trained_demo_run, tmp_path_factory):
    source_runs, run_id = trained_demo_run
    runs = tmp_path_factory.mktemp("chat-concurrency-runs")
    wait_until(lambda: not list((source_runs / run_id).glob(".*.tmp")), 60, what="the run's files to settle")
    copy_run(source_runs, run_id, runs)
    yield runs, run_id
    kill_processes(chat_servers(runs))


@pytest.fixture
def board(runs_with_adapter, tmp_path, monkeypatch):
    """The app's backend on the runs with an adapter; a training Start's trainer is a stand-in.
    Whatever a hang left behind is killed afterwards, so the next test starts clean."""
    runs, _ = runs_with_adapter
    board = RocBoard(runs, export_dir=tmp_path / "exports")
    launcher = board.run_manager.launcher
    real_start = launcher.start
    monkeypatch.setattr(launcher, "start", lambda run_id, env, command=None: real_start(run_id, env, command=STAND_IN_TRAINER))
    yield board
    closer = threading.Thread(target=board.close, daemon=True)
    closer.start()
    closer.join(ANSWER_S)
    kill_processes(chat_servers(runs))
    for state in board.store.list():
        if state.active and state.pid and psutil.pid_exists(state.pid):
            kill_processes([psutil.Process(state.pid)])


def start_training(board: RocBoard, name: str):
    """A training Start as the Train tab's makes it (RunManager.start: its lock, the queue,
    before_launch letting chat servers go), with the checked demo form."""
    config, _, preset = board.parse({**demo_form(), "run_name": name})
    return board.run_manager.start(config, preset, None, [])


def assert_unload_and_start_still_answer(board: RocBoard, runs: Path) -> None:
    status = answers_within(board.chat.unload, ANSWER_S, "Unload")
    assert status.state == "unloaded"
    wait_until(lambda: chat_servers(runs) == [], ANSWER_S, what="no chat server after Unload")
    result = answers_within(lambda: start_training(board, "after-chat"), ANSWER_S, "a training Start")
    try:
        assert result.run is not None and result.run.state == "running", result
    finally:
        if result.run is not None:
            answers_within(lambda: board.stop(result.run.id), ANSWER_S, "Stop")
    assert board.store.read(result.run.id).state == "stopped"


@pytest.mark.hostile
def test_two_loads_a_second_apart_end_in_one_session_and_nothing_hangs(board, runs_with_adapter):
    runs, run_id = runs_with_adapter
    results = tabs_at_once([lambda: board.chat.load(run_id, timeout_s=LOAD_S)] * 2, apart_s=1.0)
    assert not any(r.hung or r.error for r in results), shown(results)
    first, second = results
    assert first.last.state == "ready", shown(results)
    # The second tab is told why, at once; the first tab's load goes on.
    assert second.last.state == "refused" and [f.rule for f in second.last.findings] == ["chat-load-busy"], shown(results)
    assert second.seconds < REFUSED_S, shown(results)
    assert run_id in second.last.findings[0].problem
    status = answers_within(board.chat.status, ANSWER_S, "status")
    assert (status.state, status.run_id) == ("ready", run_id)
    assert len(chat_servers(runs)) == 1  # one session, one server: none left without an owner
    assert_unload_and_start_still_answer(board, runs)


@pytest.mark.hostile
def test_eight_loads_at_once_start_one_server_and_refuse_the_rest_quickly(board, runs_with_adapter):
    runs, run_id = runs_with_adapter
    results = tabs_at_once([lambda: board.chat.load(run_id, timeout_s=LOAD_S)] * 8)
    assert not any(r.hung or r.error for r in results), shown(results)
    ready = [r for r in results if r.last.state == "ready"]
    refused = [r for r in results if r.last.state == "refused"]
    assert (len(ready), len(refused)) == (1, 7), shown(results)
    assert all([f.rule for f in r.last.findings] == ["chat-load-busy"] and r.seconds < REFUSED_S for r in refused), shown(results)
    assert answers_within(board.chat.status, ANSWER_S, "status").state == "ready"
    assert len(chat_servers(runs)) == 1
    assert_unload_and_start_still_answer(board, runs)


@pytest.mark.hostile
def test_a_training_start_during_a_load_lets_the_chat_go_and_trains(board, runs_with_adapter):
    runs, run_id = runs_with_adapter
    tab: dict[str, Drained] = {}
    loading = threading.Thread(target=lambda: tab.setdefault("load", drain_like_gradio(board.chat.load(run_id, timeout_s=LOAD_S))), daemon=True)
    loading.start()
    wait_until(lambda: board.chat.status().state == "loading", ANSWER_S, what="the load to begin")
    result = answers_within(lambda: start_training(board, "during-chat"), ANSWER_S, "a training Start during a load")
    try:
        assert result.run is not None and result.run.state == "running", result
        loading.join(STEP_S * 2)
        drained = tab.get("load", Drained(hung=True))
        assert not drained.hung and drained.error is None, shown([drained])
        assert drained.last.state == "stopped", shown([drained])  # the trainer took the GPU
        assert answers_within(board.chat.status, ANSWER_S, "status").state == "stopped"
        wait_until(lambda: chat_servers(runs) == [], ANSWER_S, what="the chat server to let go")
        # While it trains, a load is refused (it holds the GPU), at once.
        refused = drain_like_gradio(board.chat.load(run_id, timeout_s=LOAD_S))
        assert [f.rule for f in refused.last.findings] == ["chat-gpu-busy"] and refused.seconds < REFUSED_S, shown([refused])
    finally:
        if result.run is not None:
            answers_within(lambda: board.stop(result.run.id), ANSWER_S, "Stop")
    assert_unload_and_start_still_answer(board, runs)


@pytest.mark.hostile
def test_a_question_while_nothing_is_loaded_resumed_on_other_threads_leaves_the_desk_free(tmp_path):
    desk = ChatDesk(RunStore(tmp_path / "runs"), None)
    drained = drain_like_gradio(desk.ask("hello?"))
    assert not drained.hung and drained.error is None, shown([drained])
    assert len(drained.threads) == 3  # its three steps ran on three threads, as Gradio may run them
    assert [(e.error, e.done) for e in drained.items] == [("chat.error.not_loaded", False), ("", True)]
    assert answers_within(desk.unload, ANSWER_S, "Unload").state == "unloaded"
    assert [e.error for e in drain_like_gradio(desk.ask("again?")).items if e.error] == ["chat.error.not_loaded"]
