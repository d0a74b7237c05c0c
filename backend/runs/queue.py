"""The queue of runs waiting for this machine: a Start while a run trains here lines the new
run up instead of refusing it, and the next one starts when the one training ends.

On disk, so a restart keeps it:
- each queued run is a whole run directory already (config.yaml, form.json, launch.json with
  the environment its trainer will get) in state `queued`;
- `runs/queue.json` holds their order (a list of run ids). It is the order only: an id whose
  run is gone or no longer queued is skipped (and dropped at the next write).

Every change (join, leave, move, and taking the head to start it) happens under one lock:
a thread lock for this process and an flock of the runs directory itself for every other
RocBoard process on it (the page and `python app.py submit` may act at once).
A run joins the order before its directory appears (both under the lock), so a crash between
the two leaves an id that is skipped, never a queued run the queue does not know.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from backend.runs import LAUNCH_FILE, RUN_ID_PATTERN, RunNotFound, RunState, RunStore

QUEUE_FILE = "queue.json"
KEEPER_LOCK_FILE = ".keeper.lock"
QUEUE_MAX = 1000  # runs waiting at once
QUEUE_FILE_MAX_BYTES = 256 * 1024

_THREAD_LOCKS: dict[str, threading.RLock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


def _thread_lock(root: str) -> threading.RLock:
    with _THREAD_LOCKS_GUARD:
        return _THREAD_LOCKS.setdefault(root, threading.RLock())


class QueueFull(RuntimeError):
    pass


class RunQueue:
    """The order of the queued runs of one runs directory."""

    def __init__(self, store: RunStore):
        self.store = store
        self._depth = threading.local()

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Held by whoever reads and changes the queue (re-entrant in a thread)."""
        lock = _thread_lock(str(self.store.root))
        with lock:
            depth = getattr(self._depth, "value", 0)
            if depth:
                self._depth.value = depth + 1
                try:
                    yield
                finally:
                    self._depth.value = depth
                return
            self.store.ensure_root()
            # The runs directory itself is the lock (an flock of its descriptor): no file of
            # its own, so a look at the queue leaves nothing behind in the runs directory.
            fd = os.open(self.store.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._depth.value = 1
                try:
                    yield
                finally:
                    self._depth.value = 0
            finally:
                os.close(fd)

    # --- who moves the queue on ---------------------------------------------------------------

    def hold_keeper_lock(self) -> int | None:
        """Held (an flock of runs/.keeper.lock, for as long as the descriptor stays open) by
        the app whose keeper thread moves this queue on; None when another app holds it."""
        self.store.ensure_root()
        fd = os.open(self.store.root / KEEPER_LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return fd

    def keeper_alive(self) -> bool:
        """Whether some RocBoard app moves this queue on now (`python app.py submit` says when
        none does: a run it queued would wait until one starts)."""
        fd = self.hold_keeper_lock()
        if fd is None:
            return True
        os.close(fd)
        return False

    # --- the order file -------------------------------------------------------------------

    def order(self) -> list[str]:
        """The ids in queue.json, as written (bounded; anything that is not a run id dropped)."""
        try:
            fd = os.open(self.store.root / QUEUE_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as error:
            if error.errno not in (errno.ENOENT, errno.ELOOP):
                raise
            return []
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(QUEUE_FILE_MAX_BYTES + 1)
        try:
            ids = json.loads(data.decode("utf-8")) if len(data) <= QUEUE_FILE_MAX_BYTES else []
        except (ValueError, UnicodeDecodeError):
            return []
        if not isinstance(ids, list):
            return []
        return list(dict.fromkeys(i for i in ids if isinstance(i, str) and RUN_ID_PATTERN.match(i)))[:QUEUE_MAX]

    def _write(self, ids: list[str]) -> None:
        root = self.store.root
        temporary = root / f".queue-{secrets.token_hex(8)}.json"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(ids, handle)
            os.replace(temporary, root / QUEUE_FILE)
        except BaseException:
            try:
                os.unlink(temporary)
            except OSError:
                pass
            raise

    # --- what is queued ---------------------------------------------------------------------

    def queued(self) -> list[RunState]:
        """The runs waiting, first to start first."""
        states = []
        for run_id in self.order():
            try:
                state = self.store.read(run_id)
            except RunNotFound:
                continue
            if state.state == "queued" and state.local:
                states.append(state)
        return states

    def position(self, run_id: str) -> int | None:
        """1 for the next to start; None when it is not queued."""
        for number, state in enumerate(self.queued(), start=1):
            if state.id == run_id:
                return number
        return None

    # --- changes (each under the lock) --------------------------------------------------------

    def join(self, run_id: str) -> None:
        """Adds `run_id` at the end (before its directory exists: see the module's note)."""
        with self.locked():
            ids = [state.id for state in self.queued()]
            if len(ids) >= QUEUE_MAX:
                raise QueueFull(f"{len(ids)} runs are queued already")
            if run_id not in ids:
                ids.append(run_id)
            self._write(ids)

    def leave(self, run_id: str) -> None:
        with self.locked():
            ids = self.order()
            if run_id in ids:
                self._write([i for i in ids if i != run_id])

    def move(self, run_id: str, offset: int) -> bool:
        """Moves a queued run `offset` places (negative: nearer the head); False when it is
        not queued or already at that end."""
        with self.locked():
            waiting = [state.id for state in self.queued()]
            if run_id not in waiting:
                return False
            index = waiting.index(run_id)
            target = max(0, min(len(waiting) - 1, index + offset))
            if target == index:
                return False
            waiting.insert(target, waiting.pop(index))
            self._write(waiting)
            return True


def read_launch(run_dir: Path) -> Any:
    """launch.json as parsed JSON (the run's own file, read without following a link), for
    launch_env and launch_gpus: one read where both are wanted."""
    from backend.runs import safe_files

    return json.loads(safe_files.read_text(run_dir, LAUNCH_FILE, QUEUE_FILE_MAX_BYTES))


def read_launch_env(run_dir: Path) -> dict[str, str]:
    """The environment a run's trainer is to get, as written when it was queued or submitted."""
    return launch_env(read_launch(run_dir))


def launch_env(data: Any) -> dict[str, str]:
    """read_launch_env of launch.json's parsed JSON. ValueError where "env" is not a mapping."""
    env = data.get("env", {}) if isinstance(data, dict) else {}
    try:
        return {str(name): str(value) for name, value in dict(env).items()}
    except (TypeError, ValueError) as error:
        raise ValueError(f"launch.json: env is not a mapping: {error}") from None


def launch_file(env: dict[str, str], gpus_asked: int | None = None, gpus: tuple[int, ...] | None = None, gpus_named: tuple[int, ...] = ()) -> str:
    """launch.json: the trainer's environment; on a node of several GPU slots also how many
    the run asks for (`gpus_asked`), the indices it asks for by name (`gpus_named`, the
    form's local_gpus) and, once started, the ones it holds (`gpus`: a restarted app knows
    them again from here). One slot: the environment alone, as always."""
    data: dict[str, Any] = {"env": env}
    if gpus_asked is not None:
        data["gpus_asked"] = gpus_asked
    if gpus_named:
        data["gpus_named"] = list(gpus_named)
    if gpus is not None:
        data["gpus"] = list(gpus)
    return json.dumps(data, indent=2) + "\n"


def read_launch_gpus(run_dir: Path) -> tuple[int | None, tuple[int, ...] | None]:
    """(GPUs asked, GPUs held) as launch.json records them; None for what it does not say
    (a run queued or started on one slot, an evaluation). Only small non-negative integers."""
    return launch_gpus(read_launch(run_dir))


def launch_gpus(data: Any) -> tuple[int | None, tuple[int, ...] | None]:
    """read_launch_gpus of launch.json's parsed JSON."""
    if not isinstance(data, dict):
        return None, None
    asked = data.get("gpus_asked")
    held = data.get("gpus")

    def index(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1024

    asked_count = asked if isinstance(asked, int) and index(asked) and asked >= 1 else None
    held_gpus = tuple(held) if isinstance(held, list) and len(held) <= 1024 and all(index(g) for g in held) else None
    return asked_count, held_gpus


def read_launch_named(run_dir: Path) -> tuple[int, ...]:
    """The GPU indices a queued run asks for by name, as launch.json records them; () when it
    names none. ValueError for a list that is not distinct indices 0-63 (a file edited by
    hand: the run cannot be placed, and is failed rather than given other GPUs)."""
    from backend.runs import safe_files

    data: Any = json.loads(safe_files.read_text(run_dir, LAUNCH_FILE, QUEUE_FILE_MAX_BYTES))
    named = data.get("gpus_named", []) if isinstance(data, dict) else []
    if not isinstance(named, list) or len(named) > 64 or len(set(map(repr, named))) != len(named):
        raise ValueError("launch.json: gpus_named is not a list of distinct GPU indices")
    if not all(isinstance(g, int) and not isinstance(g, bool) and 0 <= g < 64 for g in named):
        raise ValueError("launch.json: gpus_named holds something that is not a GPU index 0-63")
    return tuple(named)


__all__ = ["LAUNCH_FILE", "QUEUE_FILE", "QUEUE_MAX", "QueueFull", "RunQueue", "launch_env", "launch_file", "launch_gpus", "read_launch", "read_launch_env", "read_launch_gpus", "read_launch_named"]
