"""The run manager: start, queue, stop, resume, re-attach and delete runs, under one lock.

It owns the rule "one run at a time on this machine": a Start while a run trains here puts
the new run in the local queue (backend/runs/queue.py), and the next queued run starts when
the one training ends (a double-click, or two tabs, still launch exactly one run). A run for a
Slurm cluster is submitted instead (backend/slurm/executor.py): Slurm is its queue, and any
number of Slurm runs may wait or run at once. It also owns the telemetry sampler's attention
(it samples the local run that trains), and the end of a run whose directory vanished (its
trainer is stopped: nobody could see or stop it any more).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.config import RunConfig
from backend.config.placement import LocalPlacement, Placement, SlurmPlacement
from backend.config.presets import HardwarePreset
from backend.findings import Finding, has_problems
from backend.i18n import Message
from backend.runs import CONFIG_FILE, FORM_FILE, LAUNCH_FILE, LOG_FILE, OUTPUT_DIR, SAMPLES_FILE, RunNotFound, RunState, RunStore, attempt_fields, safe_files, starter_fields
from backend.runs.launcher import STOPPED_BY_USER, Launcher, ProcessIdentity, stop_tree
from backend.runs.queue import QueueFull, RunQueue, launch_env, launch_file, launch_gpus, read_launch, read_launch_env, read_launch_gpus, read_launch_named
from backend.service.monitors import Monitors
from backend.service.pipeline import ConfigPipeline
from backend.slurm.executor import SlurmExecutor

if TYPE_CHECKING:
    from backend.config.distributed import DistributedPlan
    from backend.runs.gpu_slots import Ask, NodeView, Wait
    from backend.telemetry.sampler import Sampler

log = logging.getLogger(__name__)

# How often the app looks at the queue on its own (a run started or ended by another process,
# a command line's `submit`, an app restarted mid-queue); an end seen here starts the next one
# at once.
QUEUE_KEEPER_INTERVAL_S = 2.0
INTENTS_KEPT = 1000  # the Starts remembered, so that a repeated one makes no second run
SLURM_LOOK_EVERY = 5  # keeper ticks between looks for Slurm runs submitted elsewhere (10 s)


def gpus_asked(plan: DistributedPlan | None) -> int:
    """How many GPUs a local run asks for side by side (backend/config/distributed.py)."""
    from backend.config.distributed import gpus_asked as asked

    return asked(plan)


@dataclass(frozen=True)
class StartResult:
    run: RunState | None
    findings: list[Finding]

    @property
    def started(self) -> bool:
        """A run was made (it trains, is queued here, or waits in Slurm's queue)."""
        return self.run is not None

    @property
    def queued(self) -> bool:
        return self.run is not None and self.run.state == "queued"


class RunManager:
    """Every change of a run's life goes through here; the run directory records it."""

    def __init__(self, store: RunStore, pipeline: ConfigPipeline, monitors: Monitors, sampler: Sampler | None = None, slurm: SlurmExecutor | None = None):
        self.store = store
        self.pipeline = pipeline
        self.monitors = monitors
        self.launcher = Launcher(store)
        self.launcher.on_end = self._after_local_end
        self.slurm = slurm or SlurmExecutor(store)
        self.queue = RunQueue(store)
        self.sampler = sampler
        # Told of every run that (re)starts training or is re-attached to, so that the
        # backend watches it on its own (the facade wires the decisions here).
        self.on_launch: Callable[[str], None] = lambda run_id: None
        # Called before any trainer (a training or an evaluation run) starts here, with the
        # GPUs it is given side by side (None: the whole machine, one slot): whatever else
        # holds one of them for the user (the Chat tab's servers) lets go of it first.
        self.before_launch: list[Callable[[tuple[int, ...] | None], None]] = []
        # Looked after on each turn of the queue keeper as well (the facade adds the sweeps'
        # early stop and ends): what the app does on its own, whoever started the runs.
        self.keeper_tasks: list[Callable[[], None]] = []
        # Side by side: the GPUs the chat servers use now (GPU -> the run they serve), read
        # without any lock of the chat desk's (ChatDesk.gpus_in_use): the allocator gives
        # them to a run last, and the node panel shows them.
        self.chat_gpus: Callable[[], Mapping[int, str]] = dict
        self._lock = threading.Lock()  # start, resume and delete: one at a time
        self._watched: str | None = None  # the run the sampler samples
        self._last_seen: dict[str, RunState] = {}  # to stop a trainer whose run directory vanished
        self._keeper: threading.Thread | None = None
        self._intents: dict[str, str] = {}  # a Start's intent -> the run it made (oldest first)
        self._keeper_stop = threading.Event()
        # The node's GPU slots (backend/runs/gpu_slots.py): None or one slot is "one run at a
        # time" exactly as before; several put runs side by side, each on its own GPUs.
        self.node: tuple[int, ...] | None = None
        self.node_addresses: dict[int, str] = {}  # GPU -> its PCI address (the node panel shows it)
        self._own_samplers: dict[str, Sampler] = {}  # side by side: each run after the first its own
        self._chat_sampler: Sampler | None = None  # side by side: the chat server's own

    def set_node(self, node: Sequence[int] | None, addresses: Mapping[int, str] | None = None) -> None:
        """The GPU indices (or CPU slots) local runs are placed on; None: one at a time.
        `addresses`: each GPU's PCI address, where known (gpu_slots.node_gpu_addresses)."""
        from backend.runs.gpu_slots import MAX_GPUS, SlotsError

        if node is not None and (len(node) > MAX_GPUS or len(set(node)) != len(node) or any(not 0 <= g < MAX_GPUS for g in node)):
            raise SlotsError(f"a node has at most {MAX_GPUS} distinct GPUs, indices 0-{MAX_GPUS - 1}")
        self.node = tuple(node) if node is not None else None
        self.node_addresses = {gpu: str(address)[:64] for gpu, address in (addresses or {}).items() if node is not None and gpu in node}

    @property
    def side_by_side(self) -> bool:
        """Whether local runs may train at once (more than one slot)."""
        return self.node is not None and len(self.node) > 1

    # --- reading --------------------------------------------------------------------

    def _settle(self, state: RunState) -> RunState:
        """The run's state now: a local trainer found gone is recorded as ended; a Slurm run
        gets what Slurm last said of its job (never waiting on Slurm: see SlurmExecutor)."""
        if not state.active:
            return state
        if state.local:
            return self.launcher.refresh(state.id, state)
        return self.slurm.refresh(state)

    def refresh(self, run_id: str) -> RunState:
        """The run's state now (a run that ended while nobody watched is settled). Raises
        RunNotFound, after stopping its trainer, when the run's directory is gone."""
        try:
            state = self._settle(self.store.read(run_id))
        except RunNotFound:
            self._vanished(run_id)
            raise
        self._last_seen[run_id] = state
        if not state.active:
            self._unwatch_if(run_id)
        return state

    def runs(self) -> list[RunState]:
        return [self._settle(s) for s in self.store.list()]

    def active_run(self) -> RunState | None:
        """The run that holds this machine: starting or training here (a Slurm run does not)."""
        for state in self.store.list():
            if state.active and state.local:
                state = self.launcher.refresh(state.id)
                if state.active:
                    return state
        return None

    def active_runs(self) -> list[RunState]:
        """Every run starting or training here (several only side by side)."""
        active = []
        for state in self.store.list():
            if state.active and state.local:
                state = self.launcher.refresh(state.id, state)
                if state.active:
                    active.append(state)
        return active

    def gpus_of(self, run_id: str) -> tuple[int, ...] | None:
        """The GPUs (or CPU slots) a run was given side by side, from its launch.json; None
        when it records none (started on one slot, an evaluation, a Slurm run)."""
        try:
            return read_launch_gpus(self.store.run_dir(run_id))[1]
        except (OSError, ValueError, RunNotFound):
            return None

    def sampler_of(self, run_id: str) -> Sampler | None:
        """The sampler charting a live local run's GPUs: the app's (the run it watches) or,
        side by side, the run's own; None for any other run."""
        if self.sampler is not None and self._watched == run_id:
            return self.sampler
        return self._own_samplers.get(run_id)

    @property
    def chat_sampler(self) -> Sampler | None:
        """Side by side: the sampler charting the chat server's GPU (None without a chat)."""
        return self._chat_sampler

    def live_runs(self) -> list[RunState]:
        """Every run with something alive: the local one, and each Slurm job pending or running."""
        return [state for state in (self._settle(s) for s in self.store.list() if s.active) if state.active]

    def is_active(self, run_id: str) -> bool:
        try:
            return self._settle(self.store.read(run_id)).active
        except RunNotFound:
            return False

    # --- start, queue, resume, re-attach ---------------------------------------------

    def start(
        self,
        config: RunConfig,
        preset: HardwarePreset | None,
        plan: DistributedPlan | None,
        findings: list[Finding],
        stop_on_nan: bool = False,
        placement: Placement | None = None,
        intent: str = "",
        start_here: bool = True,
    ) -> StartResult:
        """Creates the run and launches its trainer here; queues it while another run trains
        here; submits it to Slurm for a Slurm placement.

        `start_here` False (`app.py submit` while an app keeps this runs directory's queue): a
        local run is only queued, with the GPUs it asks for, and that app's keeper starts it
        on its node (so it is the app's child: sampled, watched, its end seen at once).

        `intent` names the form the Start came from (the page makes one each time it opens a
        form for a new run): a second Start with the same intent (a double-click, two racing
        events of one tab) is the same Start, and answers with the run the first one made."""
        placement = placement or LocalPlacement()
        with self._lock:
            earlier = self._intents.get(intent) if intent else None
            if earlier is not None:
                try:
                    return StartResult(self.store.read(earlier), findings)
                except RunNotFound:
                    pass
            # Slurm runs are not this machine's: many may wait or run at once.
            if isinstance(placement, SlurmPlacement):
                return self._remember(intent, self._submit(config, preset, plan, placement, findings, stop_on_nan))
        if self.side_by_side:
            with self._lock, self.queue.locked():
                earlier = self._intents.get(intent) if intent else None
                if earlier is not None:
                    return StartResult(self.store.read(earlier), findings)
                side = self._queue_side_by_side(config, plan, placement, findings, stop_on_nan, intent)
            if side.run is not None and start_here:
                self.advance_queue()  # outside the lock (it takes it): starts the run if its GPUs are free
                return StartResult(self.store.read(side.run.id), findings)
            return side
        with self._lock, self.queue.locked():  # a double-click launches exactly one run
            earlier = self._intents.get(intent) if intent else None
            if earlier is not None:
                return StartResult(self.store.read(earlier), findings)
            refused = self._named_gpus_refused(placement)
            if refused is not None:
                return StartResult(None, findings + [refused])
            active = self.active_run()
            if not start_here:
                try:  # its ask recorded: the keeping app may put runs side by side
                    queued = self._create(config, plan, placement, stop_on_nan, queued=True, gpus_asked=gpus_asked(plan))
                except QueueFull:
                    return StartResult(None, findings + [Finding.of("start", "queue-full")])
                return self._remember(intent, StartResult(queued, findings))
            if active is None and not self.queue.queued():
                return self._remember(intent, StartResult(self._create_and_launch(config, preset, plan, stop_on_nan), findings))
            try:
                queued = self._create(config, plan, placement, stop_on_nan, queued=True)
            except QueueFull:
                return StartResult(None, findings + [Finding.of("start", "queue-full")])
            self._remember(intent, StartResult(queued, findings))
        if active is None:
            self.advance_queue()  # nothing trains: the head of the queue starts now
            queued = self.store.read(queued.id)
        return StartResult(queued, findings)

    def _queue_side_by_side(self, config: RunConfig, plan: DistributedPlan | None, placement: Placement, findings: list[Finding], stop_on_nan: bool, intent: str) -> StartResult:
        """Side by side (called with both locks held): the run joins the queue with the GPUs
        it asks for (the caller's advance_queue starts it at once when they are free); a run
        that asks for more GPUs than the node has, or names one it does not have, is refused
        before anything is made."""
        from backend.runs.gpu_slots import Ask, ask_problem

        asked = gpus_asked(plan)
        assert self.node is not None
        refused = self._named_gpus_refused(placement)
        if refused is not None:
            return StartResult(None, findings + [refused])
        if ask_problem(Ask("", count=asked), self.node) is not None:
            return StartResult(None, findings + [Finding.of("start", "gpus-too-many", asked=asked, have=len(self.node))])
        try:
            queued = self._create(config, plan, placement, stop_on_nan, queued=True, gpus_asked=asked)
        except QueueFull:
            return StartResult(None, findings + [Finding.of("start", "queue-full")])
        return self._remember(intent, StartResult(queued, findings))

    def _named_gpus_refused(self, placement: Placement) -> Finding | None:
        """The finding for GPUs named on the form (local_gpus) that this node does not have;
        None when none are named, or all are here (or the node is not known: one slot)."""
        named = placement.gpus if isinstance(placement, LocalPlacement) else ()
        missing = [gpu for gpu in named if self.node is not None and gpu not in self.node]
        if not missing:
            return None
        return Finding.of("local_gpus", "local-gpus-not-on-node", gpus=",".join(map(str, missing)), have=",".join(map(str, self.node or ())), patch={"local_gpus": ""})

    def _remember(self, intent: str, result: StartResult) -> StartResult:
        if intent and result.run is not None:
            self._intents[intent] = result.run.id
            while len(self._intents) > INTENTS_KEPT:
                self._intents.pop(next(iter(self._intents)))
        return result

    def _launch_env(self, config: RunConfig, plan: DistributedPlan | None) -> dict[str, str]:
        from backend.config.distributed import launch_env

        env = dict(config.hardware.env)
        if plan is not None:
            env.update(launch_env(plan))
        return env

    def _create(
        self,
        config: RunConfig,
        plan: DistributedPlan | None,
        placement: Placement,
        stop_on_nan: bool,
        queued: bool = False,
        extra_files: dict[str, str] | None = None,
        run_id: str | None = None,
        gpus_asked: int | None = None,
    ) -> RunState:
        """The run's directory, whole: config, form, log, DeepSpeed files; a queued run also
        its launch.json (what its trainer will get), and it joins the queue first."""
        import yaml

        from backend.config.distributed import deepspeed_files, free_port
        from backend.config.run_form import saved_form

        if plan is not None and plan.nnodes == 1 and not queued and isinstance(placement, LocalPlacement):
            plan = replace(plan, master_port=free_port())
        run_id = run_id or self.store.new_run_id(config.run_name)
        output_dir = self.store.root / run_id / OUTPUT_DIR
        files = {
            CONFIG_FILE: yaml.safe_dump(self.pipeline.run_args(config, plan, output_dir), sort_keys=False, allow_unicode=True),
            FORM_FILE: json.dumps(saved_form(config, plan, placement), indent=2),  # the checked values, not what was typed
            LOG_FILE: "",
            **(deepspeed_files(plan) if plan is not None else {}),
            **self._user_deepspeed_file(config),
            **(extra_files or {}),
        }
        if queued:
            named = placement.gpus if isinstance(placement, LocalPlacement) else ()
            files[LAUNCH_FILE] = launch_file(self._launch_env(config, plan), gpus_asked, gpus_named=named)
            self.queue.join(run_id)
        try:
            state = self.store.create(
                name=config.run_name,
                preset=config.hardware.preset,
                model=config.model.model_name_or_path,
                files=files,
                run_id=run_id,
                executor=placement.kind,
                state="queued" if queued else "starting",
            )
        except BaseException:
            if queued:
                self.queue.leave(run_id)
            raise
        if stop_on_nan:
            state = self.store.update(state.id, stop_on_nan=True)
        return state

    def _create_and_launch(self, config: RunConfig, preset: HardwarePreset | None, plan: DistributedPlan | None, stop_on_nan: bool) -> RunState:
        from backend.config.distributed import free_port

        if plan is not None and plan.nnodes == 1:
            plan = replace(plan, master_port=free_port())
        state = self._create(config, plan, LocalPlacement(), stop_on_nan)
        return self.launch(state.id, self._launch_env(config, plan))

    def _user_deepspeed_file(self, config: RunConfig) -> dict[str, str]:
        """The DeepSpeed file named in Other keys, copied into the run (checked before: a
        Start with an unusable one never gets here)."""
        from backend.config.other_keys import USER_DEEPSPEED_FILE

        found = self.pipeline.deepspeed_file(config)
        return {USER_DEEPSPEED_FILE: found.text} if found is not None else {}

    def start_evaluation(
        self,
        run_id: str,
        name: str,
        model: str,
        preset: str,
        files: dict[str, str],
        source_run: str,
        env: Mapping[str, str],
        findings: list[Finding] | None = None,
    ) -> StartResult:
        """Creates an evaluation run (kind "evaluate", its files already checked by the
        EvaluationDesk) and launches it like a trainer, unless another run is active here.
        Side by side it asks one GPU like a run: it joins the queue and starts at once on a
        free GPU (its *_VISIBLE_DEVICES in launch.json, as a run's), or waits its turn."""
        findings = list(findings or [])
        if self.side_by_side:
            with self._lock, self.queue.locked():
                try:
                    self.queue.join(run_id)
                except QueueFull:
                    return StartResult(None, findings + [Finding.of("start", "queue-full")])
                try:
                    files = {**files, LAUNCH_FILE: launch_file(dict(env), 1)}
                    self.store.create(name=name, preset=preset, model=model, files=files, run_id=run_id, kind="evaluate", source_run=source_run, state="queued")
                except BaseException:
                    self.queue.leave(run_id)
                    raise
            self.advance_queue()  # outside the lock (it takes it): starts it if a GPU is free
            return StartResult(self.store.read(run_id), findings)
        with self._lock, self.queue.locked():
            active = self.active_run()
            if active is not None:
                return StartResult(None, findings + [Finding.of("evaluate", "run-active", message="eval-run-active", run_id=active.id, state=Message(f"state.{active.state}"))])
            state = self.store.create(name=name, preset=preset, model=model, files=files, run_id=run_id, kind="evaluate", source_run=source_run)
            return StartResult(self.launch(state.id, env), findings)

    def launch(self, run_id: str, env: Mapping[str, str], command: list[str] | None = None, gpus: tuple[int, ...] | None = None) -> RunState:
        """Starts the trainer (or `command`, a stand-in in tests) of an existing run here, and
        watches it: telemetry samples it, the backend decides about it. `gpus`: the GPUs it was
        given side by side (None: the machine, one slot); what else uses them lets go first."""
        try:
            for let_go in self.before_launch:
                let_go(gpus)
        except BaseException as error:
            self.launcher.record_start_failed(run_id, error)  # else "starting" while this process lives
            raise
        state = self.launcher.start(run_id, env, command=command)
        self._watch(state)
        self.on_launch(run_id)
        if self.launcher.helper is not None and state.kind == "train":
            # the hash of the run's tokenized examples, beside the trainer, through the warm
            # helper only (a fork: no import to pay): backend/validate/fingerprint.py
            from backend.validate.fingerprint import record_in_background

            record_in_background(self.store.run_dir(run_id))
        return state

    # --- the local queue ------------------------------------------------------------

    def queued_runs(self) -> list[RunState]:
        return self.queue.queued()

    def advance_queue(self) -> RunState | None:
        """Starts the first queued run when nothing trains here; returns it (None: nothing
        started). A queued run that cannot start (its files were broken meanwhile) is
        recorded as failed, and the next one is tried."""
        if self.side_by_side:
            return self._advance_side_by_side()
        with self._lock, self.queue.locked():
            if self.active_run() is not None:
                return None
            for state in self.queue.queued():
                self.queue.leave(state.id)
                try:
                    env = read_launch_env(self.store.run_dir(state.id))
                    if env.get("NNODES") == "1" and "MASTER_PORT" in env:
                        from backend.config.distributed import free_port

                        env["MASTER_PORT"] = str(free_port())  # free now, not when it was queued
                    self.store.update(state.id, state="starting", queued_at=None, **starter_fields())
                    return self.launch(state.id, env)
                except (OSError, ValueError, RunNotFound) as error:
                    log.warning("queued run %s could not start: %s", state.id, error)
                    try:
                        self.store.update(state.id, state="failed", stop_reason="reason.queue_start_failed", stop_reason_params={"error": str(error)[:300]}, ended_at=time.time())
                    except RunNotFound:
                        pass
        return None

    def _advance_side_by_side(self) -> RunState | None:
        """Starts every queued run whose GPUs are free now (gpu_slots.decide: in queue order,
        a run that waits keeps what it waits for), each with its GPUs in HIP_VISIBLE_DEVICES
        and CUDA_VISIBLE_DEVICES and a MASTER_PORT no live run of this node has; returns the
        first started. A live run whose GPUs are not recorded holds the whole node."""
        from backend.config.distributed import free_port
        from backend.runs.gpu_slots import ask_problem, decide

        node = self.node
        assert node is not None
        with self._lock, self.queue.locked():
            held, ports, asks = self._slot_inputs(node, fail_broken=True)
            decision = decide(node, held, asks, avoid=self.chat_gpus().keys())
            first: RunState | None = None
            for grant in decision.start:
                self.queue.leave(grant.run_id)
                try:
                    run_dir = self.store.run_dir(grant.run_id)
                    env = read_launch_env(run_dir)
                    devices = ",".join(str(g) for g in grant.gpus)
                    env["HIP_VISIBLE_DEVICES"] = env["CUDA_VISIBLE_DEVICES"] = devices  # never ROCR_: docs/multi-gpu.md
                    if "MASTER_PORT" in env and env.get("NNODES", "1") == "1":
                        port = str(free_port())
                        for _ in range(50):  # free now, and no other live run's
                            if port not in ports:
                                break
                            port = str(free_port())
                        env["MASTER_PORT"] = port
                        ports.add(port)
                    named = next((ask.indices for ask in asks if ask.run_id == grant.run_id), ())  # kept: what it asked for
                    safe_files.write_atomic(run_dir, LAUNCH_FILE, launch_file(env, len(grant.gpus), grant.gpus, gpus_named=named).encode("utf-8"))
                    self.store.update(grant.run_id, state="starting", queued_at=None, **starter_fields())
                    started = self.launch(grant.run_id, env, gpus=grant.gpus)
                    first = first or started
                except (OSError, ValueError, RunNotFound) as error:
                    self._queued_run_failed(grant.run_id, error)
            for wait in decision.waiting:
                if wait.reason == "impossible":  # the node has fewer GPUs than it asks (changed since)
                    self.queue.leave(wait.run_id)
                    ask = next(a for a in asks if a.run_id == wait.run_id)
                    self._queued_run_failed(wait.run_id, ValueError(ask_problem(ask, node) or ""))
        return first

    def _slot_inputs(self, node: tuple[int, ...], fail_broken: bool) -> tuple[dict[str, tuple[int, ...]], set[str], list[Ask]]:
        """(GPUs each live local run holds, their MASTER_PORTs, what each queued run asks), in
        queue order; a queued run whose launch.json cannot be read is failed (`fail_broken`)
        or left out."""
        from backend.runs.gpu_slots import Ask

        held: dict[str, tuple[int, ...]] = {}
        ports: set[str] = set()
        for live in self.active_runs():
            gpus = None
            try:
                launch = read_launch(self.store.run_dir(live.id))  # read once for both (the node panel asks every 3 s)
                gpus = launch_gpus(launch)[1]
                ports.add(launch_env(launch).get("MASTER_PORT", ""))
            except (OSError, ValueError, RunNotFound):
                pass
            held[live.id] = gpus or node
        asks: list[Ask] = []
        for state in self.queue.queued():
            try:
                asked, _ = read_launch_gpus(self.store.run_dir(state.id))
            except (OSError, ValueError, RunNotFound) as error:
                if fail_broken:
                    self._queued_run_failed(state.id, error)
                continue
            if asked is None:  # queued by a process of one slot (`app.py submit`): its plan's GPU list
                try:
                    devices = read_launch_env(self.store.run_dir(state.id)).get("HIP_VISIBLE_DEVICES", "")
                except (OSError, ValueError, RunNotFound):
                    devices = ""
                asked = max(1, len([d for d in devices.split(",") if d.strip()]))
            try:
                named = read_launch_named(self.store.run_dir(state.id))
            except (OSError, ValueError, RunNotFound) as error:
                if fail_broken:
                    self._queued_run_failed(state.id, error)
                continue
            asks.append(Ask(state.id, count=min(asked, 64), indices=named))
        return held, ports, asks

    def node_view(self) -> NodeView | None:
        """The node now, side by side (None on one slot): which live run holds each GPU, and
        for each queued run what the allocator would say (it starts, or why it waits: busy,
        kept for a run ahead, impossible). Nothing is started or changed."""
        from backend.runs.gpu_slots import NodeView, decide

        node = self.node
        if node is None or len(node) <= 1:
            return None
        with self.queue.locked():
            held, _, asks = self._slot_inputs(node, fail_broken=False)
        chat = dict(self.chat_gpus())
        return NodeView(node, held, decide(node, held, asks, avoid=chat.keys()), chat, dict(self.node_addresses))

    def gpu_for_chat(self) -> tuple[int | None, Wait | None]:
        """Side by side: the GPU a chat server may take now (gpu_slots.guest_gpu: free, not
        kept for a queued run), or None and why not (the runs holding the GPUs, or the queued
        run they are kept for). Read without the queue's lock: the chat desk asks under its
        own lock, which a trainer's start (before_launch) takes under the queue's; a run that
        starts meanwhile is recorded, with its GPUs, before it asks the chat to let go."""
        from backend.runs.gpu_slots import guest_gpu

        node = self.node
        assert node is not None
        held, _, asks = self._slot_inputs(node, fail_broken=False)
        return guest_gpu(node, held, asks)

    def _queued_run_failed(self, run_id: str, error: BaseException) -> None:
        log.warning("queued run %s could not start: %s", run_id, error)
        self.queue.leave(run_id)
        try:
            self.store.update(run_id, state="failed", stop_reason="reason.queue_start_failed", stop_reason_params={"error": str(error)[:300]}, ended_at=time.time())
        except RunNotFound:
            pass

    def cancel_queued(self, run_id: str) -> list[Finding]:
        """Takes a queued run out of the queue (it never starts); why not, otherwise."""
        with self._lock, self.queue.locked():
            state = self.store.read(run_id)
            if state.state != "queued":
                return [Finding.of("queue", "not-queued", run_id=run_id, state=Message(f"state.{state.state}"))]
            self.queue.leave(run_id)
            self.store.update(run_id, state="stopped", stop_reason="reason.cancelled_in_queue", stop_reason_params={}, queued_at=None, ended_at=time.time())
        return []

    def move_queued(self, run_id: str, offset: int) -> bool:
        """Moves a queued run `offset` places (negative: sooner)."""
        with self.queue.locked():
            return self.queue.move(run_id, offset)

    def _after_local_end(self, run_id: str) -> None:
        """A trainer here ended: the next queued run starts (on a thread of its own: the end
        may be seen while this manager's lock is held) when this process keeps the queue.

        A command line (`app.py stop`, `status`) sees ends too, but it exits in a moment: a
        start begun on its thread would die with it half-made (a run left "starting", or a
        trainer nobody recorded). The app's keeper starts the next one instead."""
        if self._keeper is None or not self._keeper.is_alive():
            return
        threading.Thread(target=self._advance_quietly, daemon=True, name="queue-next").start()

    def _advance_quietly(self) -> None:
        try:
            self.advance_queue()
        except Exception:  # the keeper tries again
            log.exception("starting the next queued run failed")

    def keep_queue(self, interval_s: float = QUEUE_KEEPER_INTERVAL_S) -> None:
        """Looks at the queue every `interval_s` on a thread of its own while the app runs:
        whatever ended a run (another process, a trainer that died while nobody watched), the
        next one starts. Reads queue.json only while nothing is queued."""
        if self._keeper is not None and self._keeper.is_alive():
            return
        self._keeper_stop.clear()
        # Says to `app.py submit` that an app moves this queue on (several apps on one runs
        # directory may all keep it: advance_queue's locks make one start at a time).
        held = self.queue.hold_keeper_lock()

        def loop() -> None:
            ticks = 0
            try:
                while not self._keeper_stop.wait(interval_s):
                    ticks += 1
                    try:
                        if self.queue.order():
                            self.advance_queue()
                        if ticks % SLURM_LOOK_EVERY == 0:
                            self.follow_slurm_runs()
                    except Exception:
                        log.exception("the queue keeper failed")
                    for task in list(self.keeper_tasks):
                        try:
                            task()
                        except Exception:  # one task's trouble stops neither the queue nor the others
                            log.exception("the queue keeper's task %s failed", getattr(task, "__qualname__", task))
            finally:
                if held is not None:
                    os.close(held)

        self._keeper = threading.Thread(target=loop, daemon=True, name="queue-keeper")
        self._keeper.start()

    def follow_slurm_runs(self) -> None:
        """Follows every Slurm run that waits or runs, whoever submitted it (the page, or
        `python app.py submit` in another shell): its state.json follows its job."""
        for state in self.store.list():
            if state.active and not state.local:
                self.slurm.follow(state)

    def stop_keeping_queue(self) -> None:
        self._keeper_stop.set()

    def queue_keeper_alive(self) -> bool:
        return self.queue.keeper_alive()

    # --- Slurm ----------------------------------------------------------------------

    def _submit(self, config: RunConfig, preset: HardwarePreset | None, plan: DistributedPlan | None, placement: SlurmPlacement, findings: list[Finding], stop_on_nan: bool) -> StartResult:
        """A Slurm run: the cluster is asked first (preflight), then the run's directory is
        made with its batch script and sbatch submits it; a refusal removes the run again."""
        from backend.config.distributed import slurm_launch_env
        from backend.slurm.preflight import preflight
        from backend.slurm.script import SCRIPT_FILE, batch_script, sbatch_argv

        run_id = self.store.new_run_id(config.run_name)
        run_dir = self.store.root / run_id
        script = batch_script(run_dir, run_id, placement, plan.nproc if plan else 1)
        checked = preflight(self.slurm.client, self.slurm.facts, placement, script, self.store.root)
        findings = findings + checked
        if has_problems(checked):
            return StartResult(None, findings)
        env = dict(config.hardware.env)
        if plan is not None:
            env.update(slurm_launch_env(plan))
        state = self._create(config, plan, placement, stop_on_nan, extra_files={SCRIPT_FILE: script, LAUNCH_FILE: launch_file(env)}, run_id=run_id)
        submitted, why = self.slurm.submit(state.id, sbatch_argv(run_dir, run_dir / SCRIPT_FILE))
        if submitted is None:
            self.store.delete(state.id)  # nothing half-made is left
            return StartResult(None, findings + [self._submit_finding(why, placement)])
        self.on_launch(state.id)
        return StartResult(submitted, findings)

    def _submit_finding(self, why: Any, placement: SlurmPlacement) -> Finding:
        """sbatch's refusal (or why it could not be asked) as a finding."""
        from backend.slurm.parse import SbatchRefusal
        from backend.slurm.preflight import problem_finding, refusal_finding

        if isinstance(why, SbatchRefusal):
            return refusal_finding(why, placement, self.slurm.facts.get().partitions)
        return problem_finding(why)

    def _resubmit(self, run_id: str, preset: HardwarePreset | None, plan: DistributedPlan | None, placement: SlurmPlacement, script: str) -> StartResult:
        """Resume of a Slurm run: a new job from its newest checkpoint (config.yaml already
        rewritten by prepare_resume; the cluster asked before), with the batch script
        written anew."""
        from backend.config.distributed import slurm_launch_env
        from backend.slurm.script import SCRIPT_FILE, sbatch_argv

        run_dir = self.store.run_dir(run_id)
        env = dict(preset.env) if preset else {}
        if plan is not None:
            env.update(slurm_launch_env(plan))
        safe_files.write_atomic(run_dir, SCRIPT_FILE, script.encode("utf-8"))
        safe_files.write_atomic(run_dir, LAUNCH_FILE, launch_file(env).encode("utf-8"))
        submitted, why = self.slurm.submit(run_id, sbatch_argv(run_dir, run_dir / SCRIPT_FILE))
        if submitted is None:
            return StartResult(None, [self._submit_finding(why, placement)])
        self.monitors.forget(run_id)
        self.on_launch(run_id)
        return StartResult(submitted, [])

    # --- resume and re-attach ----------------------------------------------------------

    def resume(self, run_id: str) -> StartResult:
        """Continues a stopped or failed run from its latest complete checkpoint (here, or as
        a new Slurm job for a Slurm run)."""
        from backend.runs.resume import Refusal, prepare_resume, resume_plan

        with self._lock:
            try:
                current = self._settle(self.store.read(run_id))
            except RunNotFound:
                current = None
            active = self.active_run() if (current is None or current.local) and not self.side_by_side else None
            if active is not None:
                return StartResult(None, [Finding.of("resume", "run-active", message="run-active-resume", run_id=active.id, state=Message(f"state.{active.state}"))])
            refusal = resume_plan(self.store, run_id, current)
            if isinstance(refusal, Refusal):
                return StartResult(None, [refusal.finding()])
            from backend.config.run_form import read_saved_run

            form = read_saved_run(self.store.run_dir(run_id)).form
            preset = self.pipeline.preset(str(form.get("preset", "")))
            plan, plan_findings = self.pipeline.plan_of(form, preset)
            placement, placement_findings = self.pipeline.placement_of(form, preset)
            # A form.json edited by hand (or written before a rule existed) is checked like
            # the page's form: a refused RCCL line stops the resume before anything changes.
            if has_problems(plan_findings + placement_findings):
                return StartResult(None, plan_findings + placement_findings)
            on_slurm = placement if isinstance(placement, SlurmPlacement) and current is not None and not current.local else None
            if on_slurm is not None:
                # The cluster is asked first: a refusal leaves the run as it was (no attempt
                # archived, config.yaml not rewritten).
                from backend.slurm.preflight import preflight
                from backend.slurm.script import batch_script

                script = batch_script(self.store.run_dir(run_id), run_id, on_slurm, plan.nproc if plan else 1)
                checked = preflight(self.slurm.client, self.slurm.facts, on_slurm, script, self.store.root)
                if has_problems(checked):
                    return StartResult(None, checked)
            prepare_resume(self.store, run_id)
            if on_slurm is not None:
                return self._resubmit(run_id, preset, plan, on_slurm, script)
            env = dict(preset.env) if preset else {}
            if plan is not None:
                from backend.config.distributed import launch_env

                env.update(launch_env(plan))
            self.monitors.forget(run_id)  # re-read the whole curve, resumed steps included
            if not self.side_by_side:
                return StartResult(self.launch(run_id, env), [])
            # Side by side: it waits in the queue for its GPUs (it starts now if they are free).
            with self.queue.locked():
                named = placement.gpus if isinstance(placement, LocalPlacement) else ()
                safe_files.write_atomic(self.store.run_dir(run_id), LAUNCH_FILE, launch_file(env, gpus_asked(plan), gpus_named=named).encode("utf-8"))
                self.queue.join(run_id)
                self.store.update(run_id, **attempt_fields(state="queued", queued_at=time.time()))  # the last attempt's process cleared
        self.advance_queue()
        return StartResult(self.store.read(run_id), [])

    def reattach(self) -> RunState | None:
        """After a restart: follow the run still training here and every Slurm job still
        pending or running, settle the ones that ended, and start the queue's next run if
        nothing trains here."""
        if self.side_by_side:
            return self._reattach_side_by_side()
        active = self.active_run()
        if active is not None:
            self._watch(active)
            self.on_launch(active.id)
        for state in self.store.list():
            if state.active and not state.local:
                self.slurm.follow(state)
                self.on_launch(state.id)
        if active is None and self.queue.order():
            started = self.advance_queue()
            return started
        return active

    def _reattach_side_by_side(self) -> RunState | None:
        """reattach with several slots: every trainer still running here is followed again
        (its GPUs are in its launch.json), then the queue starts what fits beside them."""
        live = self.active_runs()
        for state in live:
            self._watch(state)
            self.on_launch(state.id)
        for state in self.store.list():
            if state.active and not state.local:
                self.slurm.follow(state)
                self.on_launch(state.id)
        started = self.advance_queue() if self.queue.order() else None
        return live[0] if live else started

    # --- stop and the run's settings -------------------------------------------------

    def stop(self, run_id: str, reason: str = STOPPED_BY_USER, reason_params: dict[str, str] | None = None) -> RunState:
        """Stops a run: a local trainer (at most 10 s), a Slurm job (asked to stop and save;
        cancelled if it does not), or a queued run (taken out of the queue). A local trainer's
        end is recorded with `reason` (a reason.* id: the page renders it in its language)."""
        state = self.store.read(run_id)
        if state.state == "queued":
            self.cancel_queued(run_id)
            return self.store.read(run_id)
        if not state.local:
            return self.slurm.stop(run_id)
        state = self.launcher.stop(run_id, reason, reason_params)
        self._unwatch_if(run_id)
        return state

    def stop_for_alert(self, run_id: str) -> RunState:
        """Stops a run whose loss or gradients diverged (its stop-on-NaN setting is on),
        saying why in its state: the end is recorded with that reason, never first as a
        user's stop (a tab or a notifier reading in between would say the wrong thing)."""
        state = self.stop(run_id, "reason.stopped_on_nan")
        if state.local:
            return state
        # A Slurm job is asked to stop and settled later by its executor: said here, as before.
        return self.store.update(run_id, stop_reason="reason.stopped_on_nan", stop_reason_params={})

    def set_stop_on_nan(self, run_id: str, on: bool) -> None:
        """Changes the setting of a run that trains; an ended run keeps the one it ran with."""
        try:
            if self.store.read(run_id).active:
                self.store.update(run_id, stop_on_nan=bool(on))
        except RunNotFound:
            pass

    # --- delete ---------------------------------------------------------------------

    def delete(self, run_id: str) -> list[Finding]:
        """Deletes a run that is not training (a queued one leaves the queue); returns why not
        (nothing when deleted). Raises RunNotFound for an id that is not a run (a hostile one
        included)."""
        with self._lock, self.queue.locked():  # a resume cannot start the run while it is being removed
            state = self.refresh(run_id)
            if state.active:
                return [Finding.of("delete", "run-active", message="run-active-delete", run_id=run_id, state=Message(f"state.{state.state}"))]
            self.queue.leave(run_id)
            self.monitors.forget(run_id)
            self._last_seen.pop(run_id, None)
            self.store.delete(run_id)
            return []

    def delete_all(self, run_ids: list[str]) -> list[Finding]:
        """Deletes each run that can be; why not, for the others (one gone already too)."""
        refusals: list[Finding] = []
        for run_id in run_ids:
            try:
                refusals += self.delete(run_id)
            except RunNotFound:
                refusals.append(Finding.of("delete", "run-missing", run_id=run_id))
        return refusals

    # --- the sampler, and runs that vanished ------------------------------------------

    def _watch(self, state: RunState) -> None:
        if self.sampler is None or not state.local:
            return  # a Slurm run's nodes sample themselves (backend/slurm/node_task.py)
        if self.side_by_side and self._watched not in (None, state.id):
            # Side by side: the app's sampler follows the first run; each other one gets a
            # sampler of its own on the same machine, which reads that run's *_VISIBLE_DEVICES
            # from its process and so charts only its GPUs (Sampler._apply_run_environment),
            # ticked on the app sampler's thread where it can be (Sampler.companion).
            own = self._own_samplers.get(state.id)
            if own is None:
                own = self.sampler.companion()
                self._own_samplers[state.id] = own
                own.start()
            own.watch(self.store.run_dir(state.id) / SAMPLES_FILE, state.pid)
            return
        self._watched = state.id
        self.sampler.watch(self.store.run_dir(state.id) / SAMPLES_FILE, state.pid)

    def lend_sampler(self, samples_path: Path | None, pid: int | None) -> bool:
        """Points the sampler at a process that is not a run's trainer (a chat server), or
        away from it (None). Refused (False) while a run is watched: its chart comes first.
        Side by side a chat server gets a sampler of its own instead (a run starting on
        another GPU would take the app's), which reads the server's *_VISIBLE_DEVICES from
        its process and so charts only its GPU."""
        if self.sampler is None:
            return False
        if self.side_by_side:
            own, self._chat_sampler = self._chat_sampler, None
            if own is not None:
                own.watch(None, None)
                threading.Thread(target=own.stop, daemon=True, name="sampler-stop-chat").start()
            if samples_path is None:
                return True
            own = self.sampler.companion()
            own.start()
            own.watch(samples_path, pid)
            self._chat_sampler = own
            return True
        if self._watched is not None:
            return False
        self.sampler.watch(samples_path, pid)
        return True

    def _unwatch_if(self, run_id: str) -> None:
        if self.sampler is not None and self._watched == run_id:
            self._watched = None
            self.sampler.watch(None, None)
        own = self._own_samplers.pop(run_id, None)
        if own is not None:
            own.watch(None, None)
            threading.Thread(target=own.stop, daemon=True, name=f"sampler-stop-{run_id}").start()

    def _vanished(self, run_id: str) -> None:
        """The run's directory was deleted by hand while the app ran. Its trainer can no
        longer be seen, stopped from the page, or counted by the one-run-at-a-time rule, and
        it writes into a directory nobody reads: stop it (by pid and start time)."""
        self.monitors.forget(run_id)
        self._unwatch_if(run_id)
        last = self._last_seen.pop(run_id, None)
        if last is not None and last.active and last.local and last.pid is not None and last.pid_started is not None:
            stop_tree(ProcessIdentity(last.pid, last.pid_started, last.pid_start_key))
        elif last is not None and last.active and last.job_id:
            self.slurm.client.cancel(last.job_id)  # a Slurm job nobody can see or stop any more


__all__ = ["QUEUE_KEEPER_INTERVAL_S", "RunManager", "StartResult", "gpus_asked"]
