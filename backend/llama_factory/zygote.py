"""The LLaMA-Factory helper: one long-lived process that imports torch, transformers and
llamafactory once, then forks a child per request (a "zygote").

Started by the web process (backend/llama_factory/helper_client.py) with the trainer's
allow-listed environment (backend/runs/launcher.py::helper_env); like worker.py it imports
nothing from RocBoard and runs by its path. It never touches a device itself: no torch.cuda
call, no CUDA/HIP init, so that the variables a run sets in its forked child
(HIP_VISIBLE_DEVICES, HSA_OVERRIDE_GFX_VERSION, PYTORCH_HIP_ALLOC_CONF, ...) still take effect
when the child initialises the device.

Protocol: JSON lines, each at most MAX_LINE_BYTES.
  helper -> web, once:   {"ready": true, "pid", "import_s", "cuda_initialized": false}
                         or {"ready": false, "error": {"type", "message"}} (then it exits)
  web -> helper:         {"id": n, "op": "check", "configs": [{...}, ...]}
                         {"id": n, "op": "train", "run_dir": "/abs/runs/<id>", "env": {...}}
                         {"id": n, "op": "lengths", "model_path": "/abs", "template", "dataset_dir":
                          "/abs", "dataset", "stage", "max_examples", "cutoff_len" (optional), "timeout_s"}
  helper -> web:         {"id": n, "ok": true, "import_s": 0, "results": [...]} (as worker.py)
                         {"id": n, "pid": 1234}                (a trainer was forked)
                         {"id": n, "ok": ..., ...}             (as backend/data/lengths_worker.py)
                         {"id": n, "error": "why"}             (a request refused)
                         {"exit": 1234, "code": 0}             (a trainer ended; -N: signal N)

A lengths child (backend/data/lengths_worker.py's `measure`, the helper imported the file by
its path) runs like a check child: no device, its answer one JSON line through a pipe, killed
at the request's timeout_s (bounded by LENGTHS_MAX_TIMEOUT_S).

A trainer child runs `llamafactory-cli train config.yaml` in-process: its own session, the
run directory as its cwd, the run's environment (wholly replacing the helper's), train.log
(opened without following links) as stdout and stderr, /dev/null as stdin, no other fd.
The helper exits when its stdin closes (the web process went away); running trainers are
left alone: they are in their own sessions, and the web process finds them by pid.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

MAX_LINE_BYTES = 4 * 1024 * 1024
CHECK_CHILD_TIMEOUT_S = 300.0
LOOP_TICK_S = 0.2
TRAIN_ARGV = ["llamafactory-cli", "train", "config.yaml"]  # fixed: a request cannot choose a program
CONFIG_FILE = "config.yaml"
LOG_FILE = "train.log"
MAX_ENV_ITEMS = 4096
MAX_ENV_BYTES = 1024 * 1024
LENGTHS_WORKER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "lengths_worker.py")
LENGTHS_MAX_TIMEOUT_S = 900.0

# Imported before the first request: what `llamafactory-cli train` and the parser check need.
PRELOAD = (
    "llamafactory.cli",
    "llamafactory.launcher",
    "llamafactory.hparams.parser",
    "llamafactory.train.tuner",
)
# Measured on the CPU demo (docs/architecture.md): these save a little more per warm start.
PRELOAD_EXTRA = (
    "llamafactory.train.sft.workflow",
    "transformers.models.llama.modeling_llama",
    "peft",
)

_out_fd = 1  # where answers go (the real stdout; fd 1 itself is pointed at stderr)


def _send(message: dict[str, Any]) -> None:
    data = (json.dumps(message) + "\n").encode("utf-8")
    view = memoryview(data)
    while view:
        written = os.write(_out_fd, view)
        view = view[written:]


def _exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    return 1


def _validate_env(env: Any) -> dict[str, str] | None:
    if not isinstance(env, dict) or len(env) > MAX_ENV_ITEMS:
        return None
    total = 0
    for name, value in env.items():
        if not isinstance(name, str) or not isinstance(value, str) or not name or "=" in name or "\0" in name + value:
            return None
        total += len(name) + len(value)
    return dict(env) if total <= MAX_ENV_BYTES else None


def _validate_run_dir(run_dir: Any) -> str | None:
    """The run directory, when it is an absolute path to a real directory (not a link) that
    holds a regular config.yaml; else None."""
    import stat

    if not isinstance(run_dir, str) or not os.path.isabs(run_dir) or "\0" in run_dir:
        return None
    try:
        if not stat.S_ISDIR(os.lstat(run_dir).st_mode):
            return None
        if not stat.S_ISREG(os.lstat(os.path.join(run_dir, CONFIG_FILE)).st_mode):
            return None
    except OSError:
        return None
    return run_dir


def _close_fds_from(low: int, keep: tuple[int, ...] = ()) -> None:
    try:
        maxfd = os.sysconf("SC_OPEN_MAX")
    except (ValueError, OSError):
        maxfd = 4096
    fds = [int(name) for name in os.listdir("/proc/self/fd")] if os.path.isdir("/proc/self/fd") else list(range(low, maxfd))
    for fd in fds:
        if fd >= low and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


ENV_ROOM_NAME = "ROCBOARD_HELPER_ENV_ROOM"  # padding the web process adds; removed at start


def _show_environment(env: dict[str, str]) -> bool:
    """Writes `env` over the environment block the kernel shows as /proc/<pid>/environ (the
    helper's, inherited by fork): tools that read a trainer's environment there (RocBoard's
    telemetry reads HIP_/ROCR_VISIBLE_DEVICES; `ps e`) see the run's. The helper was started
    with ENV_ROOM_NAME padding so that the block has room. False when it does not fit."""
    import ctypes

    try:
        with open("/proc/self/stat", "rb") as stat_file:
            fields = stat_file.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (proc(5) fields 50, 51)
    except (OSError, IndexError, ValueError):
        return False
    block = b"".join(f"{name}={value}".encode("utf-8", "surrogateescape") + b"\0" for name, value in env.items()) + b"\0"
    if start <= 0 or end <= start or len(block) > end - start:
        return False
    # Nothing points into the old block any more: os.environ.clear() unset every variable.
    ctypes.memmove(start, block + b"\0" * (end - start - len(block)), end - start)
    return True


def _train_child(run_dir: str, env: dict[str, str]) -> None:
    """In the forked child: become `llamafactory-cli train config.yaml` of the run. Never returns."""
    code = 1
    try:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(signum, signal.SIG_DFL if signum != signal.SIGINT else signal.default_int_handler)
        os.setsid()
        dir_fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        os.fchdir(dir_fd)
        log = os.open(LOG_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        _close_fds_from(3)
        os.environ.clear()
        os.environ.update(env)
        if not _show_environment(env):
            print("RocBoard: /proc/<pid>/environ of this trainer shows the helper's environment (no room)", file=sys.stderr)
        sys.argv = list(TRAIN_ARGV)
        threads = env.get("OMP_NUM_THREADS", "")
        if threads.isdigit() and int(threads) > 0:
            # libgomp read OMP_NUM_THREADS when torch was imported in the helper: apply the
            # run's value the way torch itself would have (see helper_client.APPLIED_IN_CHILD).
            import torch

            torch.set_num_threads(int(threads))
        from llamafactory.cli import main

        try:
            main()
            code = 0
        except SystemExit as exit_:
            value = exit_.code
            code = value if isinstance(value, int) else (0 if value is None else 1)
            if not isinstance(value, (int, type(None))):
                print(value, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - the trainer's crash goes to train.log, like the CLI's
            traceback.print_exc()
            code = 1
    except BaseException:  # noqa: BLE001 - anything before the trainer ran
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001
            pass
        os._exit(code & 0xFF if code >= 0 else 1)


def _answer_child(write_fd: int, compute: Callable[[], dict[str, Any]], error_kind: dict[str, str]) -> None:
    """In a forked child: stdin/stdout to /dev/null (libraries print; the answer goes through
    the pipe), every other fd but `write_fd` and stderr closed, then `compute()`'s answer
    written to `write_fd` as one JSON line (an exception becomes {"ok": false, "error": ...},
    with `error_kind`'s members). Never returns."""
    code = 0
    try:
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        _close_fds_from(3, keep=(write_fd, 2))
        answer = compute()
        code = 0 if answer.get("ok") else 1
        data = (json.dumps(answer) + "\n").encode("utf-8")
    except BaseException as exc:  # noqa: BLE001 - an answer either way
        error = {**error_kind, "type": type(exc).__name__, "message": str(exc)[:2000]}
        data = (json.dumps({"ok": False, "error": error}) + "\n").encode("utf-8")
        code = 1
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(write_fd, view) :]
    finally:
        os._exit(code)


def _check_child(write_fd: int, configs: list[Any], parser, known: set[str]) -> None:
    """In the forked child: the same check worker.py runs, answer written to `write_fd`."""

    def check() -> dict[str, Any]:
        import worker

        worker._quiet_environment()
        results = [worker._check_one(parser, known, dict(config)) for config in configs]
        return {"ok": True, "import_s": 0.0, "results": results}

    _answer_child(write_fd, check, {})


def _lengths_module():
    """backend/data/lengths_worker.py, imported by its path (stdlib only at module level: the
    helper validates a request with it before forking; its heavy imports run in the child)."""
    import importlib.util

    module = sys.modules.get("rocboard_lengths_worker")
    if module is None:
        spec = importlib.util.spec_from_file_location("rocboard_lengths_worker", LENGTHS_WORKER)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {LENGTHS_WORKER}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["rocboard_lengths_worker"] = module
    return module


def _lengths_child(write_fd: int, module, request: dict[str, Any]) -> None:
    """In the forked child: lengths_worker.measure(request), answer written to `write_fd`."""

    def measure() -> dict[str, Any]:
        module.quiet_environment()
        return module.measure(request)

    _answer_child(write_fd, measure, {"kind": "internal"})


class Zygote:
    def __init__(self, parser, known: set[str], cuda_initialized: bool):
        self.parser = parser
        self.known = known
        self.cuda_initialized = cuda_initialized
        self.trainers: set[int] = set()
        # check child pid -> (request id, read fd, bytes so far, deadline)
        self.checks: dict[int, list[Any]] = {}
        self.inbox = b""

    def handle(self, line: bytes) -> None:
        try:
            request = json.loads(line)
        except ValueError:
            _send({"id": None, "error": "not JSON"})
            return
        if not isinstance(request, dict):
            _send({"id": None, "error": "not an object"})
            return
        rid = request.get("id")
        if not isinstance(rid, int):
            _send({"id": None, "error": "no id"})
            return
        op = request.get("op")
        if op == "check":
            self.start_check(rid, request.get("configs"))
        elif op == "train":
            self.start_train(rid, request.get("run_dir"), request.get("env"))
        elif op == "lengths":
            self.start_lengths(rid, request)
        elif op == "ping":
            _send({"id": rid, "pong": True, "trainers": sorted(self.trainers)})
        else:
            _send({"id": rid, "error": "unknown op"})

    def start_check(self, rid: int, configs: Any) -> None:
        if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
            _send({"id": rid, "error": "configs must be a list of objects"})
            return
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            _check_child(write_fd, configs, self.parser, self.known)
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        self.checks[pid] = [rid, read_fd, b"", time.monotonic() + CHECK_CHILD_TIMEOUT_S]

    def start_lengths(self, rid: int, request: dict[str, Any]) -> None:
        timeout_s = request.get("timeout_s", CHECK_CHILD_TIMEOUT_S)
        if not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool) or not 1 <= timeout_s <= LENGTHS_MAX_TIMEOUT_S:
            _send({"id": rid, "error": f"timeout_s must be a number in 1..{LENGTHS_MAX_TIMEOUT_S:g}"})
            return
        try:
            module = _lengths_module()
        except Exception as exc:  # noqa: BLE001 - refused, with the reason
            _send({"id": rid, "error": f"lengths worker unavailable: {type(exc).__name__}: {str(exc)[:300]}"})
            return
        fields = {name: request[name] for name in ("model_path", "template", "dataset_dir", "dataset", "stage", "max_examples", "cutoff_len") if name in request}
        clean, why = module.validate_request(fields)
        if clean is None:
            _send({"id": rid, "error": f"bad lengths request: {why}"})
            return
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            _lengths_child(write_fd, module, clean)
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        self.checks[pid] = [rid, read_fd, b"", time.monotonic() + float(timeout_s)]

    def start_train(self, rid: int, run_dir: Any, env: Any) -> None:
        if self.cuda_initialized:
            _send({"id": rid, "error": "the helper initialised CUDA: warm starts are off"})
            return
        run_dir = _validate_run_dir(run_dir)
        env = _validate_env(env)
        if run_dir is None or env is None:
            _send({"id": rid, "error": "bad run_dir or env"})
            return
        pid = os.fork()
        if pid == 0:
            _train_child(run_dir, env)
        self.trainers.add(pid)
        _send({"id": rid, "pid": pid})

    def read_checks(self, ready: list[int]) -> None:
        for pid, entry in list(self.checks.items()):
            rid, fd, data, deadline = entry
            if fd in ready:
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if chunk:
                    entry[2] = data + chunk
                    if len(entry[2]) > MAX_LINE_BYTES:
                        os.kill(pid, signal.SIGKILL)
                        self.finish_check(pid, {"ok": False, "error": {"type": "Overflow", "message": "answer too large"}})
                    continue
                try:
                    answer = json.loads(entry[2].decode("utf-8", "replace").strip().splitlines()[-1])
                except (ValueError, IndexError):
                    answer = {"ok": False, "error": {"type": "NoAnswer", "message": "the check child ended without an answer"}}
                self.finish_check(pid, answer)
            elif time.monotonic() > deadline:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.finish_check(pid, {"ok": False, "error": {"type": "Timeout", "message": "the check took too long"}})

    def finish_check(self, pid: int, answer: dict[str, Any]) -> None:
        rid, fd, _, _ = self.checks.pop(pid)
        os.close(fd)
        _send({"id": rid, **answer})

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.trainers:
                self.trainers.discard(pid)
                _send({"exit": pid, "code": _exit_code(status)})
            # a check child's answer comes through its pipe (EOF follows its exit)

    def serve(self) -> int:
        while True:
            fds = [0, *(entry[1] for entry in self.checks.values())]
            ready, _, _ = select.select(fds, [], [], LOOP_TICK_S)
            if 0 in ready:
                chunk = os.read(0, 65536)
                if not chunk:
                    return 0  # the web process went away: leave the trainers running
                self.inbox += chunk
                while b"\n" in self.inbox:
                    line, self.inbox = self.inbox.split(b"\n", 1)
                    if line.strip():
                        self.handle(line)
                if len(self.inbox) > MAX_LINE_BYTES:
                    self.inbox = b""
                    _send({"id": None, "error": "line too long"})
            self.read_checks(ready)
            self.reap()


def main() -> int:
    global _out_fd
    # Answers get their own fd; anything a library prints (fd 1 or sys.stdout) goes to stderr.
    _out_fd = os.dup(1)
    os.dup2(2, 1)
    os.environ.pop(ENV_ROOM_NAME, None)
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    # Ctrl-C in the terminal is the web process's business; the helper ends on stdin's EOF.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    started = time.perf_counter()
    try:
        import importlib

        import torch
        import worker

        for name in PRELOAD:
            importlib.import_module(name)
        if "--no-preload-extra" not in sys.argv[1:]:
            for name in PRELOAD_EXTRA:
                try:
                    importlib.import_module(name)
                except Exception:  # noqa: BLE001 - only a head start
                    pass
        parser = worker._parser()
        known = worker._known_keys(parser)
    except BaseException as exc:  # noqa: BLE001 - report it, the web process falls back
        _send({"ready": False, "error": {"type": type(exc).__name__, "message": str(exc)[:2000]}})
        return 1
    import_s = round(time.perf_counter() - started, 3)
    # The device must be first touched in a trainer child, never here.
    cuda_initialized = bool(torch.cuda.is_initialized())
    _send({"ready": True, "pid": os.getpid(), "import_s": import_s, "cuda_initialized": cuda_initialized})
    print(f"RocBoard helper: ready, imports took {import_s:.1f} s", file=sys.stderr, flush=True)
    return Zygote(parser, known, cuda_initialized).serve()


if __name__ == "__main__":
    sys.exit(main())
