"""The web process's side of the LLaMA-Factory helper (backend/llama_factory/zygote.py).

One long-lived helper imports torch, transformers and llamafactory once; each parser check
and each warm trainer start is a fork of it (see zygote.py for the JSON-lines protocol). The
web process itself still never imports any of them.

- `LlamaFactoryHelper`: starts the helper (argument list, the trainer's allow-listed
  environment, its own session), reads its answers on one thread, restarts it on the next
  request when it died, and closes it (EOF on its stdin) with the app.
- `WarmChild`: what Launcher keeps instead of a Popen for a warm trainer: pid, wait(timeout),
  poll(), returncode, fed by the helper's exit reports. When the helper dies first, the
  child is `lost`: the trainer keeps running (own session) and its run ends like an
  unwatched one (Launcher.refresh).
- `cold_reason(run_env, helper_env)`: why a run must start the cold way
  (`llamafactory-cli train` in a fresh process) instead.
- `shared()` / `install_shared()` / `close_shared()`: the one helper of the app (RocBoard
  installs it when asked to; backend/llama_factory/check.py uses it when there is one).

Switch off: `ROCBOARD_WARM_START=0` in RocBoard's environment, or `python app.py --no-warm-start`.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

# The protocol's limits and names, from the helper itself (zygote.py imports only the standard library).
from backend.child_process import close_and_wait
from backend.llama_factory.zygote import ENV_ROOM_NAME, MAX_LINE_BYTES

ZYGOTE = Path(__file__).resolve().with_name("zygote.py")
READY_WAIT_S = 90.0  # a Start right after the app started waits for the helper's imports
TRAIN_REPLY_S = 15.0  # a fork answers in milliseconds; this only bounds a stuck helper
RESTART_BACKOFF_S = 60.0
ENV_ROOM_BYTES = 32 * 1024  # a helper that failed to import is not retried more often

# Variables read only when the device, the collectives or the trainer start, never while
# torch / transformers / llamafactory are imported: a run may set them differently from the
# helper's environment and still start warm, because the child sets them before anything
# reads them. Any other difference (HF_HOME, HF_DATASETS_CACHE, TRANSFORMERS_*, PATH, MKL_*,
# ... are read at import time by huggingface_hub, datasets, transformers) means a cold start.
LAZY_NAMES: frozenset[str] = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",  # CUDA runtime init (cuInit), in the child
        "HIP_VISIBLE_DEVICES",  # HIP runtime init, in the child
        "ROCR_VISIBLE_DEVICES",  # ROCr (HSA) init, in the child
        "GPU_DEVICE_ORDINAL",  # HIP runtime init
        "PYTORCH_HIP_ALLOC_CONF",  # the caching allocator, at its first allocation
        "PYTORCH_CUDA_ALLOC_CONF",
        "PYTORCH_NVML_BASED_CUDA_CHECK",  # torch.cuda.is_available()/device_count(), at call
        "TORCH_BLAS_PREFER_HIPBLASLT",  # the first GEMM on the device
        "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL",  # SDPA kernel choice, at dispatch
        "TORCH_DISTRIBUTED_DEBUG",  # init_process_group
        "LLAMABOARD_WORKDIR",  # LLaMA-Factory's LogCallback, when the trainer is built
        "LLAMABOARD_ENABLED",  # LogCallback too (the SIGABRT handler)
    }
)
LAZY_PREFIXES: tuple[str, ...] = (
    "HSA_",  # ROCr runtime (HSA_OVERRIDE_GFX_VERSION...), read at HSA init in the child
    "HIP_",  # HIP runtime knobs (HIP_FORCE_DEV_KERNARG...), read at HIP init
    "ROCR_",
    "MIOPEN_",  # MIOpen, at its first kernel
    "NCCL_",  # NCCL/RCCL, at communicator creation
    "RCCL_",
    "TORCH_NCCL_",  # PyTorch's NCCL process group, at its creation
    "GLOO_",  # gloo, at its process group's creation
)
# Read at import (libgomp reads OMP_NUM_THREADS when torch loads it), so the trainer child
# applies the run's value itself: torch.set_num_threads(n), what torch would have done.
APPLIED_IN_CHILD: frozenset[str] = frozenset({"OMP_NUM_THREADS"})


def is_lazy(name: str) -> bool:
    return name in LAZY_NAMES or name in APPLIED_IN_CHILD or name.startswith(LAZY_PREFIXES)


def _enabled(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "y", "yes", "on")


def cold_reason(run_env: Mapping[str, str], helper_env: Mapping[str, str]) -> str | None:
    """Why a run with environment `run_env` cannot be forked from a helper that imported with
    `helper_env` (a short text), or None when it can start warm."""
    if _enabled(run_env.get("FORCE_TORCHRUN")) or _enabled(run_env.get("USE_MCA")):
        return "torchrun"  # torchrun starts fresh workers anyway
    try:
        if int(run_env.get("NNODES", "1") or "1") > 1:
            return "multi-node"
    except ValueError:
        return "multi-node"
    threads = run_env.get("OMP_NUM_THREADS")
    if threads is not None and not (threads.isdigit() and int(threads) > 0):
        return "OMP_NUM_THREADS"
    for name in sorted(set(run_env) | set(helper_env)):
        if run_env.get(name) != helper_env.get(name) and not is_lazy(name):
            return f"environment differs: {name}"
    return None


def warm_start_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """False when ROCBOARD_WARM_START is 0/false/no/off."""
    value = (os.environ if environ is None else environ).get("ROCBOARD_WARM_START", "1")
    return value.strip().lower() not in ("0", "false", "no", "off")


class WarmChild:
    """A trainer forked by the helper, seen like a Popen: pid, poll(), wait(timeout), returncode."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None
        self.lost = False  # the helper died first: nobody will report this trainer's end
        self._done = threading.Event()

    def _exited(self, code: int) -> None:
        self.returncode = code
        self._done.set()

    def _lose(self) -> None:
        if not self._done.is_set():
            self.lost = True
            self._done.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code (None when the helper was lost first); TimeoutExpired after `timeout`."""
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(["llamafactory-cli", "train"], timeout or 0)
        return self.returncode


class _Pending:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.answer: dict[str, Any] | None = None


class LlamaFactoryHelper:
    """The app's LLaMA-Factory helper process."""

    def __init__(self, env: Mapping[str, str], preload_extra: bool = True, stderr: Any = None):
        self.env = dict(env)
        self.preload_extra = preload_extra
        self.stderr = stderr
        self.ready_info: dict[str, Any] = {}
        self._process: subprocess.Popen | None = None
        self._ready = threading.Event()
        self._lock = threading.Lock()  # process lifecycle and writes
        # Per helper process: the requests waiting for it and the trainers it forked.
        self._pending: dict[int, _Pending] = {}
        self._children: dict[int, WarmChild] = {}
        self._ids = itertools.count(1)
        self._started_at = 0.0
        self._last_failed_at = 0.0  # when a helper ended before it was ready
        self._closed = False
        self.starts = 0  # how many helper processes were started (a test reads it)

    # --- lifecycle ----------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    @property
    def state(self) -> str:
        """"stopped" (never started or closed), "starting", "ready", "dead" or "broken"
        (failed to import recently; not retried until RESTART_BACKOFF_S)."""
        process = self._process
        if self._closed or process is None:
            return "stopped"
        if process.poll() is None:
            return "ready" if self._ready.is_set() else "starting"
        if self._last_failed_at and time.monotonic() - self._last_failed_at < RESTART_BACKOFF_S:
            return "broken"
        return "dead"

    @property
    def warm_starts_allowed(self) -> bool:
        """Ready, and it never touched the device (else trainers must start cold)."""
        return self.state == "ready" and self.ready_info.get("cuda_initialized") is False

    def start(self) -> None:
        """Starts the helper process (returns at once; it imports in the background)."""
        with self._lock:
            if self._closed:
                return
            if self._process is not None and self._process.poll() is None:
                return
            command = [sys.executable, str(ZYGOTE)] + ([] if self.preload_extra else ["--no-preload-extra"])
            self._ready = threading.Event()
            self.ready_info = {}
            self._pending, self._children = {}, {}
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.stderr,
                # The trainer's allow-listed environment (no secret), plus room for a trainer's
                # own environment block (zygote._show_environment).
                env={**self.env, ENV_ROOM_NAME: "." * ENV_ROOM_BYTES},
                close_fds=True,
                start_new_session=True,  # a Ctrl-C meant for the app is not its business
            )
            self._started_at = time.monotonic()
            self.starts += 1
            threading.Thread(target=self._read, args=(self._process, self._ready, self._pending, self._children), daemon=True, name="lf-helper-reader").start()

    def ensure(self) -> bool:
        """Starts the helper when it is not running (and was not failing); whether one runs."""
        state = self.state
        if state in ("starting", "ready"):
            return True
        if state == "broken" or self._closed:
            return False
        self.start()
        return self.state in ("starting", "ready")

    def wait_ready(self, timeout: float = READY_WAIT_S) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            process, ready = self._process, self._ready
            if process is None:
                return False
            if ready.wait(min(0.2, max(0.0, deadline - time.monotonic()))):
                return process.poll() is None
            if process.poll() is not None and not ready.is_set():
                return False
        return self._ready.is_set() and self.state == "ready"

    def close(self, timeout: float = 5.0) -> None:
        """Ends the helper: EOF on its stdin (running trainers keep running)."""
        with self._lock:
            self._closed = True
            process = self._process
        if process is None:
            return
        close_and_wait(process, timeout, kill_wait_s=5.0)

    # --- requests -----------------------------------------------------------------------

    def _request(self, message: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """Sends one request and waits for its answer; None when the helper is gone."""
        pending = _Pending()
        with self._lock:
            process = self._process
            if process is None or process.poll() is not None or process.stdin is None:
                return None
            rid = next(self._ids)
            self._pending[rid] = pending
            data = (json.dumps({"id": rid, **message}) + "\n").encode("utf-8")
            if len(data) > MAX_LINE_BYTES:
                self._pending.pop(rid, None)
                return None
            try:
                process.stdin.write(data)
                process.stdin.flush()
            except (OSError, ValueError):
                self._pending.pop(rid, None)
                return None
        if not pending.event.wait(timeout):
            with self._lock:
                self._pending.pop(rid, None)
            raise TimeoutError(f"the LLaMA-Factory helper did not answer in {timeout:g} s")
        return pending.answer

    def _ready_within(self, timeout: float) -> bool:
        """Whether the helper is (or becomes) ready to answer within `timeout`; False when no
        helper can answer (the caller uses its one-shot worker). Raises TimeoutError when it
        is still importing at the end of `timeout`."""
        if not self.ensure():
            return False
        if not self.wait_ready(timeout):
            if self.state == "starting":
                raise TimeoutError(f"the LLaMA-Factory helper was not ready in {timeout:g} s")
            return False
        return True

    def check(self, configs: list[dict[str, Any]], timeout: float = 120.0) -> dict[str, Any] | None:
        """worker.py's answer for `configs`, computed in a fork of the helper (waits for the
        helper's imports within `timeout`); None when no helper can answer (use the one-shot
        worker). Raises TimeoutError when it took longer than `timeout`."""
        started = time.monotonic()
        if not self._ready_within(timeout):
            return None
        answer = self._request({"op": "check", "configs": configs}, max(1.0, timeout - (time.monotonic() - started)))
        if answer is None or "error" in answer and "ok" not in answer:
            return None
        return answer

    def lengths(self, request: dict[str, Any], timeout: float = 180.0) -> dict[str, Any] | None:
        """backend/data/lengths_worker.py's answer for `request` (model_path, template,
        dataset_dir, dataset, stage, max_examples), computed in a fork of the helper (waits for
        the helper's imports within `timeout`); None when no helper can answer (use the
        one-shot worker). A request the helper refuses comes back as {"ok": false, "error":
        {"kind": "request", ...}}. Raises TimeoutError when it took longer than `timeout`."""
        started = time.monotonic()
        if not self._ready_within(timeout):
            return None
        left = max(2.0, timeout - (time.monotonic() - started))
        # The helper kills the child at timeout_s and answers first; the wait here is a bound.
        answer = self._request({"op": "lengths", **request, "timeout_s": max(1.0, left - 1.0)}, left)
        if answer is None:
            return None
        if "error" in answer and "ok" not in answer:
            if answer.get("error") == "unknown op":
                return None
            return {"ok": False, "error": {"kind": "request", "type": "Refused", "message": str(answer.get("error"))[:1000]}}
        return answer

    def train(self, run_dir: Path, env: Mapping[str, str], ready_timeout: float = READY_WAIT_S) -> WarmChild | None:
        """Forks `llamafactory-cli train config.yaml` of `run_dir` with environment `env`;
        None when it cannot (no helper ready in `ready_timeout`, CUDA initialised in the
        helper, a refused request): the caller starts the trainer cold."""
        if not self.ensure() or not self.wait_ready(ready_timeout) or not self.warm_starts_allowed:
            return None
        try:
            answer = self._request({"op": "train", "run_dir": str(run_dir), "env": dict(env)}, TRAIN_REPLY_S)
        except TimeoutError:
            return None
        child = answer.get("child") if answer else None
        return child if isinstance(child, WarmChild) else None

    def children(self) -> dict[int, WarmChild]:
        with self._lock:
            return dict(self._children)

    # --- the reader thread ---------------------------------------------------------------

    def _read(self, process: subprocess.Popen, ready: threading.Event, pending: dict[int, _Pending], children: dict[int, WarmChild]) -> None:
        assert process.stdout is not None
        try:
            while True:
                line = process.stdout.readline(MAX_LINE_BYTES + 1)
                if not line:
                    break
                if len(line) > MAX_LINE_BYTES:
                    process.kill()  # not the helper we started: stop listening to it
                    break
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if isinstance(message, dict):
                    self._dispatch(message, ready, pending, children)
        finally:
            process.wait()
            with self._lock:
                if not ready.is_set():
                    self._last_failed_at = time.monotonic()
                waiting_list = list(pending.values())
                pending.clear()
                lost = list(children.values())
                children.clear()
            for waiting in waiting_list:
                waiting.event.set()  # answer None: the helper is gone
            for child in lost:
                child._lose()

    def _dispatch(self, message: dict[str, Any], ready: threading.Event, pending_of: dict[int, _Pending], children: dict[int, WarmChild]) -> None:
        if "ready" in message:
            self.ready_info = message
            if message.get("ready"):
                ready.set()
            return
        if "exit" in message:
            with self._lock:
                child = children.pop(message["exit"], None)
            if child is not None:
                code = message.get("code")
                child._exited(code if isinstance(code, int) else 1)
            return
        rid = message.get("id")
        with self._lock:
            if isinstance(message.get("pid"), int):
                # Registered before the next line is read: its exit report cannot come first.
                child = children[message["pid"]] = WarmChild(message["pid"])
                message = {**message, "child": child}
            pending = pending_of.pop(rid, None) if isinstance(rid, int) else None
        if pending is not None:
            pending.answer = message
            pending.event.set()


# --- the app's one helper -----------------------------------------------------------------------

_shared: LlamaFactoryHelper | None = None
_shared_lock = threading.Lock()


def shared() -> LlamaFactoryHelper | None:
    """The app's helper, when one was installed and not closed."""
    helper = _shared
    return helper if helper is not None and helper.state != "stopped" else None


def install_shared(env_factory: Callable[[], Mapping[str, str]], preload_extra: bool = True) -> LlamaFactoryHelper:
    """The app's helper, started now if there is none (it is closed when the app exits)."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared.state == "stopped":
            _shared = LlamaFactoryHelper(env_factory(), preload_extra=preload_extra)
            _shared.start()
        return _shared


def close_shared() -> None:
    global _shared
    with _shared_lock:
        helper, _shared = _shared, None
    if helper is not None:
        helper.close()


atexit.register(close_shared)


__all__ = [
    "APPLIED_IN_CHILD",
    "LAZY_NAMES",
    "LAZY_PREFIXES",
    "LlamaFactoryHelper",
    "WarmChild",
    "close_shared",
    "cold_reason",
    "install_shared",
    "is_lazy",
    "shared",
    "warm_start_enabled",
]
