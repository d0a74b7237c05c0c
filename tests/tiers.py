"""The test tiers: whether a test is `slow` or `browser` follows from what it starts, not from
memory, and `make test-fast` (`-m "not slow and not browser"`) refuses to start any of it.

What is expensive is named by a tag fixture (conftest.py defines them; they do nothing):

    starts_app_server   `python app.py` serving (tests/harness.py's AppServer)
    starts_trainer      the real llamafactory-cli: a training run, an export, a real launch
    starts_lf_helper    a process that imports LLaMA-Factory: the check worker, the warm
                        helper, the lengths and keys workers, a chat server
    starts_slurm        a Slurm cluster's daemons (tests/slurm_cluster.py)
    starts_memory_probe a fresh web process driven to a reader's memory cap and measured
                        from outside (the decoding bombs: seconds of CPU and ~1 GB each)
    chromium            headless Chromium (the browser fixture itself)

A fixture that starts one of these asks for its tag in its arguments; a test that starts one
itself, with no fixture, asks for the tag too (in its arguments, or `@starts("trainer")`).
conftest.py's `pytest_collection_modifyitems` then marks each test by every fixture it uses,
directly or through others (`item.fixturenames` is the whole closure): `chromium` gives
`browser`, any other tag `slow` (a browser test's app server leaves it `browser` only, so
`-m "browser and not slow"` still means the browser tests that train nothing).

A session that holds no slow or browser test (the fast tier, or a few fast modules) runs with
`refusing_expensive_processes()` armed: starting one of those processes raises
`ExpensiveProcess` ("mark it slow"), and the test fails even where the code under test caught
the error. Only what the test process itself starts is seen: a child that starts one in turn
(`bash -c "llamafactory-cli ..."`, `app.py chat` starting a chat server) needs its tag by
hand. An `app.py` that must refuse to start, and so ends at once, is let through by
`let_through(why)`.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# tag fixture -> the mark it gives
TAGS: dict[str, str] = {
    "chromium": "browser",
    "starts_app_server": "slow",
    "starts_trainer": "slow",
    "starts_lf_helper": "slow",
    "starts_slurm": "slow",
    "starts_memory_probe": "slow",
}
TIER_MARKS = ("slow", "browser")

# What each kind of expensive process is known by in its command line.
_LF_HELPERS = {
    ROOT / "backend" / "llama_factory" / "worker.py",
    ROOT / "backend" / "llama_factory" / "zygote.py",
    ROOT / "backend" / "llama_factory" / "keys_worker.py",
    ROOT / "backend" / "data" / "lengths_worker.py",
    ROOT / "backend" / "chat" / "api_worker.py",
}
_TRAINERS = {"llamafactory-cli", "torchrun"}
_SLURM_DAEMONS = {"slurmctld", "slurmd", "slurmdbd", "munged", "mariadbd", "mariadb-install-db"}
_APP = ROOT / "app.py"


def starts(*what: str) -> pytest.MarkDecorator:
    """`@starts("trainer")` on a test that starts a trainer itself: the same as asking for the
    `starts_trainer` fixture (what: app_server, trainer, lf_helper, slurm, memory_probe)."""
    names = [f"starts_{w}" for w in what]
    unknown = [n for n in names if n not in TAGS]
    if unknown:
        raise ValueError(f"no such tag fixture: {unknown} (tests/tiers.py TAGS)")
    return pytest.mark.usefixtures(*names)


def tier_marks(fixturenames: Iterable[str]) -> set[str]:
    """The marks a test that uses these fixtures (the whole closure) must carry."""
    used = set(fixturenames)
    marks = {TAGS[name] for name in used & TAGS.keys()}
    if "browser" in marks and used & TAGS.keys() <= {"chromium", "starts_app_server"}:
        marks.discard("slow")  # a browser test's own app server: browser is the mark that says it
    return marks


def _script(path: str, cwd: str | None) -> Path | None:
    if not path.endswith(".py"):
        return None
    script = Path(path)
    if not script.is_absolute():
        script = Path(cwd or os.getcwd()) / script
    try:
        return script.resolve()
    except OSError:
        return None


def expensive(argv: Sequence[str], cwd: str | None = None) -> str | None:
    """What a command line starts, when it is one of the expensive processes; else None."""
    if not argv:
        return None
    words = [os.fsdecode(a) for a in argv]
    if os.path.basename(words[0]) in _TRAINERS:
        return "a trainer (llamafactory-cli)"
    if os.path.basename(words[0]) in _SLURM_DAEMONS:
        return f"a Slurm daemon ({os.path.basename(words[0])})"
    if "run-driver" in words:
        return "a browser (Playwright's driver)"
    for index, word in enumerate(words[1:], 1):
        script = _script(word, cwd)
        if script in _LF_HELPERS:
            return f"a LLaMA-Factory helper ({script.name})"
        if script == _APP and (index + 1 == len(words) or words[index + 1].startswith("-")):
            return "an app server (app.py)"
        if word == "-c" and index + 1 < len(words) and ("import llamafactory" in words[index + 1] or "from llamafactory" in words[index + 1]):
            return "a process that imports LLaMA-Factory"
    return None


class ExpensiveProcess(RuntimeError):
    pass


# What the armed guard refused since it was last read (the code under test may catch the error).
refused: list[str] = []
_let_through: list[str] = []  # why, while a `let_through` block is open


@contextmanager
def let_through(why: str) -> Iterator[None]:
    """The guard lets a process through inside the block, for a start that must end by itself
    at once: `app.py --host 0.0.0.0` with no login refuses to start (0.1 s) and never serves."""
    _let_through.append(why)
    try:
        yield
    finally:
        _let_through.pop()


@contextmanager
def refusing_expensive_processes(why: str = "this session runs the fast tier") -> Iterator[None]:
    """While armed, every subprocess this process starts is looked at first, and the expensive
    ones are refused with ExpensiveProcess (and noted in `refused`)."""
    original: Callable = subprocess.Popen._execute_child  # type: ignore[attr-defined]  # CPython's private hook, not in typeshed

    def guarded(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, *rest, **kwargs):
        argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
        if len(argv) == 1 and isinstance(argv[0], str) and " " in argv[0]:
            argv = argv[0].split()  # shell=True: a command line in one string
        what = expensive(argv, os.fsdecode(cwd) if cwd is not None else None)
        if what is not None and not _let_through:
            message = f"a test of the fast tier started {what}: {' '.join(map(os.fsdecode, argv))[:200]} ({why}). Mark it slow: give it the tag fixture of what it starts (tests/tiers.py)."
            refused.append(message)
            raise ExpensiveProcess(message)
        return original(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, *rest, **kwargs)

    subprocess.Popen._execute_child = guarded  # type: ignore[attr-defined]  # CPython's private hook, not in typeshed
    try:
        yield
    finally:
        subprocess.Popen._execute_child = original  # type: ignore[attr-defined]  # CPython's private hook, not in typeshed
