"""The Chat tab's questions: load a run's adapter (and its base) into chat servers, stream answers.

One chat session for the whole app: an adapter server (the base model with the run's
adapter, or one of its checkpoints), optionally a base server beside it (side by side), or
a base server alone (the command line's --base). Servers are LLaMA-Factory's own API server
in a child process each (backend/chat/server.py); they stop when the user unloads, when no
question came for `idle_stop_s`, when a trainer is about to start (RunManager.before_launch),
and with the app (close). A server that dies is noticed and forgotten.

On a node of several GPUs (runs side by side, RunManager.side_by_side) the session takes one
GPU the allocator says is free now (RunManager.gpu_for_chat: not held by a live run, not kept
for a queued one); its servers see only that GPU, and a trainer's start lets them go only when
the trainer is given that GPU (`let_go_for`). On one slot a load is refused while any run
trains here, and every trainer's start lets the servers go, as before.

Everything that can be refused is refused before a process starts, as findings; so is a load
while another load is in progress (chat-load-busy).

No lock is held across a `yield`: Gradio resumes a generator handler on whichever worker
thread is free (and never resumes one whose tab went away), so a lock taken before a yield
would be let go on another thread ("cannot release un-acquired lock") or never, and every
later Unload, question, trainer start (RunManager.before_launch) and shutdown would wait on
it forever. The desk's state changes in short critical sections; a load's progress is
followed by a thread of the desk's own (`_follow`), and the load's generator only reports it
(tests/test_no_lock_across_yield.py, tests/test_chat_concurrency.py)."""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.chat.server import ChatServer, GenerationSettings, ServerSpec, StreamBroken
from backend.findings import Finding
from backend.i18n import Message
from backend.runs import FORM_FILE, OUTPUT_DIR, RunNotFound, RunState, artifacts, safe_files

if TYPE_CHECKING:
    from backend.runs import RunStore
    from backend.service.monitors import RunMonitor
    from backend.service.run_manager import RunManager

CHAT_DIR = "chat"  # inside the run: the servers' logs and the memory samples of this session
SAMPLES_RELATIVE = f"{CHAT_DIR}/samples.jsonl"
DEFAULT_IDLE_STOP_S = 600.0
LOAD_TIMEOUT_S = 1800.0  # a 70B model from a slow disk; the page shows the seconds meanwhile
LOAD_POLL_S = 0.5
MAX_PROMPT_CHARS = 16_000
MAX_SYSTEM_CHARS = 8_000
MAX_HISTORY_MESSAGES = 40
MAX_HISTORY_CHARS = 64_000
DIED_GRACE_S = 2.0  # after a broken stream: time for the process to be seen exited

ChatMode = str  # "adapter" | "side_by_side" | "base"


@dataclass(frozen=True)
class ChatStatus:
    """Where the chat session stands, for the page and the command line."""

    state: str = "unloaded"  # unloaded | refused | loading | ready | failed | idle_stopped | died | stopped
    run_id: str = ""
    checkpoint: str = ""  # "" = the run's final adapter
    mode: ChatMode = "adapter"
    stages: dict[str, str] = field(default_factory=dict)  # which -> stage (backend/chat/stream.py STAGES)
    elapsed_s: float = 0.0
    load_s: float | None = None  # how long the load took, once ready
    findings: tuple[Finding, ...] = ()
    idle_minutes: float = 0.0

    @property
    def side_by_side(self) -> bool:
        return self.mode == "side_by_side"


@dataclass(frozen=True)
class ChatEvent:
    """One piece of an answer: `delta` text for column `which`, or an `error` message id
    (chat.error.*) that ends that column's answer, or `done`."""

    which: str
    delta: str = ""
    error: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    done: bool = False


@dataclass
class _Session:
    run_id: str
    checkpoint: str
    mode: ChatMode
    run_dir: Path
    servers: dict[str, ChatServer]
    started_at: float
    state: str = "loading"
    load_s: float | None = None
    last_used: float = field(default_factory=time.monotonic)
    busy: int = 0
    ended: ChatStatus | None = None  # how it ended (stopped, failed, died, ...), once it has
    gpu: int | None = None  # side by side: the node's GPU its servers see (None: whatever the app sees)


class ChatDesk:
    def __init__(self, store: RunStore, run_manager: RunManager | None, export_dir: Path | None = None, idle_stop_s: float = DEFAULT_IDLE_STOP_S):
        self.store = store
        self.run_manager = run_manager
        self.export_dir = export_dir
        self.idle_stop_s = float(idle_stop_s)
        self._lock = threading.RLock()  # held briefly, never across a yield (module docstring)
        self._session: _Session | None = None
        self._last = ChatStatus()  # what the page shows when no session is there
        self._sampler_lent = False
        self._memory_monitor: RunMonitor | None = None
        self._watchdog: threading.Thread | None = None
        self._closing = threading.Event()

    # --- what can be chatted with -----------------------------------------------------

    def has_adapter(self, run_id: str, checkpoint: str = "") -> bool:
        try:
            return artifacts.has_adapter_at(self.store.run_dir(run_id), checkpoint)
        except RunNotFound:
            return False

    def chattable_runs(self) -> list[RunState]:
        """Ended training runs with an adapter (final or a checkpoint's), newest first."""
        return artifacts.runs_with_adapters(self.store)

    def checkpoints(self, run_id: str) -> list[str]:
        """The run's checkpoint-N folders holding an adapter, highest step first."""
        try:
            return artifacts.adapter_checkpoints(self.store.run_dir(run_id))
        except RunNotFound:
            return []

    def _model_of(self, run_id: str) -> tuple[str, str, str]:
        """(base model path, template, finetuning type) the run trained with (its saved form,
        typed: backend/config/run_form.py)."""
        from backend.config.run_form import read_saved_run

        config = read_saved_run(self.store.run_dir(run_id)).config
        model = config.model.model_name_or_path
        if not model:
            try:
                model = self.store.read(run_id).model
            except (RunNotFound, OSError, ValueError):
                model = ""
        return model, config.model.template, config.method.finetuning_type

    def _active_run(self) -> RunState | None:
        if self.run_manager is not None:
            return self.run_manager.active_run()
        from backend.runs.launcher import Launcher

        launcher = Launcher(self.store)
        for state in self.store.list():
            if state.active and launcher.refresh(state.id).active:
                return state
        return None

    def refusals(self, run_id: str, checkpoint: str = "", mode: ChatMode = "adapter") -> list[Finding]:
        """Why this load cannot start (nothing is started when the list is not empty)."""
        try:
            state = self.store.read(run_id)
        except (RunNotFound, OSError, ValueError):
            return [Finding.of("run", "chat-unknown-run", run_id=run_id)]
        if state.active:
            return [Finding.of("run", "chat-run-active", run_id=run_id, state=Message(f"state.{state.state}"))]
        refused = self._gpu_refusal()
        if refused is not None:
            return [refused]
        findings = []
        if checkpoint and (artifacts.adapter_folder(checkpoint) is None or checkpoint not in self.checkpoints(run_id)):
            findings.append(Finding.of("checkpoint", "chat-unknown-checkpoint", run_id=run_id, checkpoint=checkpoint))
        elif mode != "base" and not self.has_adapter(run_id, checkpoint):
            findings.append(Finding.of("run", "chat-no-adapter", run_id=run_id, folder=f"{OUTPUT_DIR}/{checkpoint}".rstrip("/")))
        model, _, _ = self._model_of(run_id)
        if not model:
            findings.append(Finding.of("model", "chat-base-missing", run_id=run_id, model=FORM_FILE))
        elif (model.startswith(("/", ".", "~")) or Path(model).exists()) and not Path(model).expanduser().is_dir():
            findings.append(Finding.of("model", "chat-base-missing", run_id=run_id, model=model))
        return findings

    def _gpu_for_load(self) -> tuple[int | None, Finding | None]:
        """(the GPU a load takes side by side, None on one slot; why it cannot load now)."""
        if self.run_manager is None or not self.run_manager.side_by_side:
            active = self._active_run()
            return None, (Finding.of("run", "chat-gpu-busy", run_id=active.id) if active is not None else None)
        gpu, wait = self.run_manager.gpu_for_chat()
        if gpu is not None:
            return gpu, None
        if wait is not None and wait.reason == "reserved" and wait.behind:
            return None, Finding.of("run", "chat-gpus-kept", run_id=wait.behind)
        holders = ", ".join(wait.held_by) if wait is not None and wait.held_by else "?"
        return None, Finding.of("run", "chat-gpus-busy", runs=holders)

    def _gpu_refusal(self) -> Finding | None:
        return self._gpu_for_load()[1]

    def gpus_in_use(self) -> dict[int, str]:
        """Side by side: the GPU the session's servers use -> the run they serve (empty when
        none). Read without the desk's lock: the run manager asks while it holds its own,
        and a trainer's start takes this desk's lock under it (before_launch)."""
        session = self._session
        if session is None or session.gpu is None or session.ended is not None:
            return {}
        return {session.gpu: session.run_id}

    def let_go_for(self, gpus: tuple[int, ...] | None) -> None:
        """A trainer is about to start on `gpus` (None: on the whole machine, one slot): the
        servers stop when they use one of them (RunManager.before_launch)."""
        with self._lock:
            session = self._session
            if session is not None and (gpus is None or session.gpu is None or session.gpu in gpus):
                self._end(session, "stopped")

    # --- load, unload ------------------------------------------------------------------

    def status(self) -> ChatStatus:
        with self._lock:
            session = self._session
            return self._last if session is None else self._status_of(session)

    def _status_of(self, session: _Session) -> ChatStatus:
        """The session's status (under the lock): how it ended, once it has."""
        if session.ended is not None:
            return session.ended
        return ChatStatus(
            state=session.state,
            run_id=session.run_id,
            checkpoint=session.checkpoint,
            mode=session.mode,
            stages={which: server.stage() for which, server in session.servers.items()},
            elapsed_s=time.monotonic() - session.started_at,
            load_s=session.load_s,
        )

    def load(
        self,
        run_id: str,
        checkpoint: str | None = None,
        side_by_side: bool = False,
        base_only: bool = False,
        timeout_s: float = LOAD_TIMEOUT_S,
    ) -> Iterator[ChatStatus]:
        """Starts the servers and yields the load's progress until ready, failed, stopped or
        refused (the last status says which). Whatever was loaded before is stopped first.

        A load while another is still loading (a second tab, a double click) is refused at
        once with chat-load-busy, naming the run being loaded: it neither waits for that load
        nor stops it. Superseding it instead would kill servers that are half loaded each time
        someone presses Load (eight tabs: eight server starts, seven of them thrown away, and
        the GPU memory of each to be given back), and the first tab's load would end as
        "stopped" for no reason that tab could see. Once the first is ready, a Load replaces it
        as before."""
        checkpoint = checkpoint or ""
        mode: ChatMode = "base" if base_only else ("side_by_side" if side_by_side else "adapter")
        findings = self.refusals(run_id, checkpoint, mode)
        session = None
        if not findings:
            session, findings = self._claim(run_id, checkpoint, mode, timeout_s)
        if session is None:
            refused = ChatStatus(state="refused", run_id=run_id, checkpoint=checkpoint, mode=mode, findings=tuple(findings))
            with self._lock:
                if self._session is None:
                    self._last = refused
            yield refused
            return
        while True:
            with self._lock:
                status = self._status_of(session)
            yield status
            if status.state != "loading":
                return
            time.sleep(LOAD_POLL_S)

    def _claim(self, run_id: str, checkpoint: str, mode: ChatMode, timeout_s: float) -> tuple[_Session | None, list[Finding]]:
        """Starts the session's servers, or says why not (another load in progress, a trainer
        started meanwhile). One critical section: two loads at once cannot both start."""
        with self._lock:
            current = self._session
            if current is not None and current.state == "loading":
                return None, [Finding.of("run", "chat-load-busy", run_id=current.run_id)]
            # Asked again inside the lock: a trainer's start records its run ("starting", with
            # its GPUs side by side) before RunManager.before_launch asks this desk to let go
            # (let_go_for, this lock), so either this load is seen and stopped by it, or its
            # run is seen here.
            gpu, refused = self._gpu_for_load()
            if refused is not None:
                return None, [refused]
            session = self._start(run_id, checkpoint, mode, gpu)
        threading.Thread(target=self._follow, args=(session, timeout_s), name="rocboard-chat-load", daemon=True).start()
        return session, []

    def _follow(self, session: _Session, timeout_s: float) -> None:
        """Follows a load until its servers answer (ready), one fails or it times out (failed),
        or it is stopped: whether or not a tab still asks about it."""
        deadline = session.started_at + timeout_s
        while True:  # ends with the session: close() and before_launch end it too (stop_all)
            with self._lock:
                if self._session is not session:
                    return  # unloaded, stopped, or replaced meanwhile
                failed = self._failure_of(session, timed_out=time.monotonic() > deadline)
                if failed is not None:
                    self._end(session, "failed", findings=(failed,))
                    return
            # Asked outside the lock: each question may take seconds (status() must not wait).
            if all(server.answers() for server in session.servers.values()):
                with self._lock:
                    if self._session is session:
                        session.state = "ready"
                        session.load_s = time.monotonic() - session.started_at
                        session.last_used = time.monotonic()
                        self._start_watchdog()
                return
            time.sleep(LOAD_POLL_S)

    def _start(self, run_id: str, checkpoint: str, mode: ChatMode, gpu: int | None = None) -> _Session:
        """The session's servers, started (under the lock) on `gpu` (side by side; both
        servers of a side-by-side chat share it); the one before ends first, in the same
        critical section, so two loads at once cannot leave a server nobody owns."""
        run_dir = self.store.run_dir(run_id)
        model, template, finetuning_type = self._model_of(run_id)
        adapter = str(run_dir / OUTPUT_DIR / checkpoint) if checkpoint else str(run_dir / OUTPUT_DIR)
        wanted = {"adapter": ServerSpec(model, template, adapter, finetuning_type)} if mode != "base" else {}
        if mode in ("side_by_side", "base"):
            wanted["base"] = ServerSpec(model, template)
        if self._session is not None:
            self._end(self._session, "stopped")
        safe_files.make_dir(run_dir, CHAT_DIR)
        safe_files.write_atomic(run_dir, SAMPLES_RELATIVE, b"")
        servers: dict[str, ChatServer] = {}
        try:
            for which, spec in wanted.items():
                servers[which] = ChatServer.start(which, spec, run_dir, f"{CHAT_DIR}/{which}.log", gpu=gpu)
        except BaseException:
            for server in servers.values():
                server.stop()
            raise
        session = _Session(run_id, checkpoint, mode, run_dir, servers, time.monotonic(), gpu=gpu)
        self._session = session
        first = next(iter(servers.values()))
        self._memory_monitor = None
        if self.run_manager is not None:
            self._sampler_lent = self.run_manager.lend_sampler(run_dir / SAMPLES_RELATIVE, first.pid)
        return session

    def _failure_of(self, session: _Session, timed_out: bool) -> Finding | None:
        for which, server in session.servers.items():
            if server.alive():
                continue
            failure = server.failure()
            log = str(session.run_dir / CHAT_DIR / f"{which}.log")
            if failure is not None and failure.kind == "oom":
                return Finding.of("model", "chat-load-oom", which=which, line=failure.line, log=log)
            return Finding.of("model", "chat-load-failed", which=which, line=failure.line if failure else "", log=log)
        if timed_out:
            return Finding.of("model", "chat-load-timeout", seconds=round(time.monotonic() - session.started_at))
        return None

    def _end(self, session: _Session, state: str, findings: tuple[Finding, ...] = ()) -> None:
        """Stops the session's servers (under the lock) and forgets it; `session.ended` says
        how it ended to a load still reporting it."""
        elapsed = time.monotonic() - session.started_at if state == "failed" else 0.0
        for server in session.servers.values():
            server.stop()
        if self._session is session:
            self._session = None
            if self._sampler_lent and self.run_manager is not None:
                self.run_manager.lend_sampler(None, None)
            self._sampler_lent = False
        session.ended = ChatStatus(
            state=state, run_id=session.run_id, checkpoint=session.checkpoint, mode=session.mode,
            elapsed_s=elapsed, findings=findings, idle_minutes=self.idle_stop_s / 60,
        )
        self._last = session.ended

    def unload(self) -> ChatStatus:
        with self._lock:
            session = self._session
            if session is not None:
                self._end(session, "stopped")
            self._last = ChatStatus()
            return self._last

    def stop_all(self) -> None:
        """Stops every chat server (another run needs the GPU, or the app stops)."""
        with self._lock:
            session = self._session
            if session is not None:
                self._end(session, "stopped")

    def close(self) -> None:
        self._closing.set()
        self.stop_all()

    # --- idle stop, dead servers --------------------------------------------------------

    def _start_watchdog(self) -> None:
        if self._watchdog is not None and self._watchdog.is_alive():
            return
        self._watchdog = threading.Thread(target=self._watch, name="rocboard-chat-idle", daemon=True)
        self._watchdog.start()

    def _watch(self) -> None:
        interval = max(0.2, min(5.0, self.idle_stop_s / 5))
        while not self._closing.wait(interval):
            with self._lock:
                session = self._session
                if session is None:
                    return
                if session.state != "ready":
                    continue
                if any(not server.alive() for server in session.servers.values()):
                    self._end(session, "died")
                elif session.busy == 0 and time.monotonic() - session.last_used > self.idle_stop_s:
                    self._end(session, "idle_stopped")

    # --- questions ----------------------------------------------------------------------

    def ask(
        self,
        prompt: str,
        system: str = "",
        settings: GenerationSettings | None = None,
        history: list[dict[str, Any]] | None = None,
        base_history: list[dict[str, Any]] | None = None,
    ) -> Iterator[ChatEvent]:
        """Streams the answer(s) to `prompt`: ChatEvents of the adapter's column, and the
        base's beside it when side by side, interleaved as they arrive; then a `done` event."""
        settings = (settings or GenerationSettings()).bounded()
        error = ""
        with self._lock:
            session = self._session
            if session is None or session.state != "ready":
                state = session.state if session is not None else self._last.state
                error = "chat.error.loading" if state == "loading" else "chat.error.not_loaded"
            else:
                session.busy += 1
                session.last_used = time.monotonic()
        if error or session is None:  # told after the lock is let go: this generator may resume on another thread
            yield ChatEvent("adapter", error=error)
            yield ChatEvent("adapter", done=True)
            return
        try:
            histories = {"adapter": history, "base": base_history if session.mode == "side_by_side" else history}
            jobs = {which: (server, build_messages(prompt, system, histories[which])) for which, server in session.servers.items()}
            events: queue.Queue[ChatEvent] = queue.Queue(maxsize=1024)
            cancelled = threading.Event()
            threads = [
                threading.Thread(target=self._answer, args=(session, which, server, messages, settings, events, cancelled), daemon=True)
                for which, (server, messages) in jobs.items()
            ]
            for thread in threads:
                thread.start()
            finished = 0
            try:
                while finished < len(threads):
                    event = events.get()
                    if event.done:
                        finished += 1
                        continue
                    yield event
            finally:
                cancelled.set()
            yield ChatEvent("adapter", done=True)
        finally:
            with self._lock:
                session.busy -= 1
                session.last_used = time.monotonic()

    def _answer(self, session: _Session, which: str, server: ChatServer, messages, settings, events: queue.Queue[ChatEvent], cancelled: threading.Event) -> None:
        def put(event: ChatEvent) -> None:
            while not cancelled.is_set():
                try:
                    events.put(event, timeout=0.5)
                    return
                except queue.Full:
                    continue

        try:
            for delta in server.stream(messages, settings, cancelled.is_set):
                with self._lock:
                    session.last_used = time.monotonic()
                put(ChatEvent(which, delta=delta))
        except StreamBroken as broken:
            deadline = time.monotonic() + DIED_GRACE_S
            while server.alive() and time.monotonic() < deadline:
                time.sleep(0.1)
            if not server.alive():
                with self._lock:
                    if self._session is session:
                        self._end(session, "died")
                put(ChatEvent(which, error="chat.error.died"))
            else:
                put(ChatEvent(which, error="chat.error.cut", params={"detail": str(broken)[:300]}))
        finally:
            put(ChatEvent(which, done=True))

    # --- memory -------------------------------------------------------------------------

    def memory_series(self) -> list:
        """The chat server's memory readings (the app's sampler, lent to the server), as the
        run panel's memory chart draws them."""
        from backend.service.monitors import RunMonitor

        with self._lock:
            session = self._session
            if session is None or not self._sampler_lent:
                return []
            if self._memory_monitor is None or self._memory_monitor.run_dir != session.run_dir / CHAT_DIR:
                self._memory_monitor = RunMonitor(session.run_dir / CHAT_DIR)
            monitor = self._memory_monitor
        monitor.poll()
        return list(monitor.memory.values())


def build_messages(prompt: str, system: str = "", history: list[dict[str, Any]] | None = None) -> list[dict[str, str]]:
    """The request's messages: the system prompt, the last turns of the history (bounded),
    the new prompt. Only user and assistant turns with text are kept."""
    cleaned: list[dict[str, str]] = []
    for message in (history or [])[-MAX_HISTORY_MESSAGES:]:
        if not isinstance(message, dict) or message.get("metadata"):
            continue
        role, content = message.get("role"), message.get("content")
        if role in ("user", "assistant") and isinstance(content, str) and content:
            cleaned.append({"role": role, "content": content})
    # LLaMA-Factory takes user, assistant, user, ... : only whole question-answer pairs are kept
    # (a question whose answer was stopped or broken is left out).
    turns: list[dict[str, str]] = []
    for first, second in itertools.pairwise(cleaned):
        if first["role"] == "user" and second["role"] == "assistant" and (not turns or turns[-1] is not first):
            turns += [first, second]
    while turns and sum(len(t["content"]) for t in turns) > MAX_HISTORY_CHARS:
        del turns[:2]
    messages = [{"role": "system", "content": system[:MAX_SYSTEM_CHARS]}] if system.strip() else []
    return messages + turns + [{"role": "user", "content": prompt[:MAX_PROMPT_CHARS]}]


__all__ = ["ChatDesk", "ChatEvent", "ChatStatus", "DEFAULT_IDLE_STOP_S", "GenerationSettings", "build_messages"]
