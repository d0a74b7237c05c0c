"""What tests and benches share to run the real app: waiting, ports, HTTP, processes, the app
server and headless Chromium.

One module for both, so a test and a bench start the app, drive the browser and wait the
same way. It lives in `tests/` (a package: `from tests.harness import ...`) because it is
test tooling, not part of the installed app, and both its users run from the repository
root (`make test`, `make bench`). It imports no pytest: the benches use it as plain code;
the fixtures built on it are in tests/conftest.py.

`AppServer` starts `python app.py` on a free loopback port with its own runs dir and Gradio
temp dir, waits until it answers, and on exit stops it and every trainer it started
(trainers run in their own session and would otherwise outlive the server).
`chromium_browser()` launches Debian's Chromium through Playwright, which never downloads a
browser here.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

import psutil

if TYPE_CHECKING:
    from playwright.sync_api import Browser

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Two shared CPU cores: importing gradio and building the page can take a while.
SERVER_START_TIMEOUT_S = 120.0
# How often a wait looks again unless told otherwise: often enough that a test does not
# sit idle, rarely enough that a predicate reading a page or a run does not load the machine.
WAIT_INTERVAL_S = 0.25

T = TypeVar("T")


# --- waiting ------------------------------------------------------------------------------


def wait_for(predicate: Callable[[], T], timeout: float, interval: float = WAIT_INTERVAL_S) -> T:
    """The first truthy value of `predicate()` within `timeout` seconds, else its last (falsy)
    value: for a test that asserts on the result itself, or a bench that goes on anyway."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def wait_until(predicate: Callable[[], T | None], timeout: float, interval: float = WAIT_INTERVAL_S, what: str = "condition") -> T:
    """The first truthy value of `predicate()` (never None); AssertionError naming `what` after `timeout`
    seconds (a failed test, or a failed bench that run_all writes down)."""
    value = wait_for(predicate, timeout, interval)
    if not value:
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
    return value


# --- network -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def http_get(port: int, path: str, headers: dict[str, str] | None = None, host: str = "127.0.0.1", method: str = "GET", body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one request, without following redirects.

    `path` is sent exactly as given (no normalisation of `..` or `%2F`), which is what a
    traversal test needs and what urllib would not do."""
    connection = http.client.HTTPConnection(host, port, timeout=30)
    try:
        connection.putrequest(method, path, skip_accept_encoding=True)
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


# --- runs and processes --------------------------------------------------------------------


def run_states(runs_dir: Path) -> list[dict[str, Any]]:
    """Every run's state.json under `runs_dir`, as written by the app."""
    states = []
    for state_file in sorted(Path(runs_dir).glob("*/state.json")):
        try:
            states.append(json.loads(state_file.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue  # being replaced right now; the next look sees it
    return states


def trainer_process(state: dict[str, Any]) -> psutil.Process | None:
    """The live trainer of a run (pid *and* start key or time match), else None."""
    from backend.runs.launcher import ProcessIdentity

    pid, started, key = state.get("pid"), state.get("pid_started"), state.get("pid_start_key")
    if not isinstance(pid, int) or not isinstance(started, (int, float)):
        return None
    return ProcessIdentity(pid, started, key if isinstance(key, str) else "").process()


def process_tree(root: psutil.Process | int) -> list[psutil.Process]:
    """The process and everything under it; [] when it is gone."""
    try:
        process = root if isinstance(root, psutil.Process) else psutil.Process(root)
        return [process, *process.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def kill_processes(processes: Iterable[psutil.Process]) -> None:
    """SIGKILL processes we started (by pid, never by name) and wait for them to go."""
    processes = list(processes)
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(processes, timeout=10)


def kill_tree(root: psutil.Process | int) -> None:
    """SIGKILL a process we started (a psutil.Process or a pid) and its children."""
    kill_processes(process_tree(root))


@overload
def fake_run(runs_dir: Path, points: int, active: Literal[True]) -> tuple[str, Path, subprocess.Popen]: ...
@overload
def fake_run(runs_dir: Path, points: int, active: bool) -> tuple[str, Path, subprocess.Popen | None]: ...
def fake_run(runs_dir: Path, points: int, active: bool) -> tuple[str, Path, subprocess.Popen | None]:
    """A run directory as RocBoard writes one, with `points` lines of trainer log and, when
    active, a stand-in trainer (`sleep`) so the server treats the run as training.

    Returns (run id, its trainer_log.jsonl, the stand-in process or None)."""
    from backend.runs import RunStore
    from backend.service import demo_form

    store = RunStore(runs_dir)
    state = store.create(name="stand-in", preset="cpu-demo", model="demo", files={"config.yaml": "", "form.json": json.dumps(demo_form()), "train.log": ""})
    output_dir = runs_dir / state.id / "output"
    output_dir.mkdir()
    trainer_log = output_dir / "trainer_log.jsonl"
    total = max(points, 1) * 10
    trainer_log.write_text("".join(trainer_log_line(step, total) for step in range(1, points + 1)), encoding="utf-8")
    stand_in = None
    if active:
        stand_in = subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL, start_new_session=True)
        store.update(state.id, state="running", pid=stand_in.pid, pid_started=psutil.Process(stand_in.pid).create_time(), started_at=time.time())
    else:
        store.update(state.id, state="finished", exit_code=0, started_at=time.time() - 60, ended_at=time.time())
    return state.id, trainer_log, stand_in


def trainer_log_line(step: int, total_steps: int) -> str:
    """One line as LLaMA-Factory's LogCallback writes it."""
    loss = 2.0 + 4.0 / (1 + step / 50) + 0.05 * ((step * 7919) % 13) / 13
    record = {
        "current_steps": step,
        "total_steps": total_steps,
        "loss": round(loss, 4),
        "lr": 5e-3 * (1 - step / (total_steps + 1)),
        "epoch": round(step / 89, 4),
        "percentage": round(100 * step / total_steps, 2),
        "elapsed_time": f"0:{step // 60:02d}:{step % 60:02d}",
        "remaining_time": "0:01:00",
        "throughput": 1234.5,
        "total_tokens": step * 4096,
    }
    return json.dumps(record) + "\n"


# --- servers ---------------------------------------------------------------------------------


class ServerProcess:
    """A server subprocess on a loopback port, started on entering a `with` and stopped on
    leaving it (also when its start fails half-way)."""

    port: int
    process: subprocess.Popen | None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The started server's process id."""
        if self.process is None:
            raise AssertionError(f"{type(self).__name__} is not started")
        return self.process.pid

    def start(self) -> ServerProcess:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class AppServer(ServerProcess):
    """`python app.py` on a free loopback port, with a temporary runs dir and GRADIO_TEMP_DIR.

    Its stdout and stderr go to files so a test can read everything it printed."""

    def __init__(self, *extra_args: str, env: dict[str, str] | None = None, workdir: Path | None = None, host: str = "127.0.0.1"):
        self.extra_args = list(extra_args)
        self.extra_env = dict(env or {})
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="rocboard-test-"))
        self.runs_dir = self.workdir / "runs"
        self.gradio_temp = self.workdir / "gradio-tmp"
        # The app's own temp files (the download copies) land here, where a test can find them.
        self.tmp_dir = self.workdir / "tmp"
        self.host = host
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        self.stdout_path = self.workdir / "server.stdout"
        self.stderr_path = self.workdir / "server.stderr"

    def command(self) -> list[str]:
        return [PYTHON, str(ROOT / "app.py"), "--host", self.host, "--port", str(self.port), "--runs-dir", str(self.runs_dir), *self.extra_args]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        for inherited in ("ROCBOARD_AUTH", "ROCBOARD_AUTH_FILE"):
            env.pop(inherited, None)  # a developer's own login must not leak into a test
        env.update(
            GRADIO_ANALYTICS_ENABLED="False",
            GRADIO_TEMP_DIR=str(self.gradio_temp),
            TMPDIR=str(self.tmp_dir),
            HF_HUB_OFFLINE="1",
            PYTHONUNBUFFERED="1",
        )
        env.update(self.extra_env)
        return env

    def spawn(self) -> None:
        """Starts the process without waiting for it to answer."""
        self.gradio_temp.mkdir(parents=True, exist_ok=True)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.process = subprocess.Popen(
                self.command(), cwd=ROOT, env=self.environment(), stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
            )

    def start(self) -> AppServer:
        self.spawn()
        wait_until(self.answers, SERVER_START_TIMEOUT_S, interval=0.5, what=f"the app on port {self.port} to answer")
        return self

    def answers(self) -> bool:
        """Whether it answers `/` with 200 now; AssertionError, with its output, once it exited."""
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"the app exited with {self.process.returncode} before answering:\n{self.output()[-3000:]}")
        try:
            status, _, _ = http_get(self.port, "/")
        except OSError:
            return False
        return status == 200

    def output(self) -> str:
        """Everything the server printed so far (stdout, then stderr)."""
        return "".join(p.read_text(encoding="utf-8", errors="replace") for p in (self.stdout_path, self.stderr_path) if p.exists())

    def runs(self) -> list[dict[str, Any]]:
        return run_states(self.runs_dir)

    def kill_trainers(self) -> None:
        for state in self.runs():
            process = trainer_process(state)
            if process is not None:
                kill_tree(process)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)  # its own session: the server and its helpers
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self.kill_trainers()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


# --- the browser -----------------------------------------------------------------------------


@contextmanager
def chromium_browser() -> Iterator[Browser]:
    """Headless Debian Chromium driven by Playwright."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def chromium_available() -> bool:
    if not Path(CHROMIUM).exists():
        return False
    try:
        import playwright  # noqa: F401
    except ImportError:
        return False
    return True


# --- a trained demo run, for the tests of what comes after training ------------------------------


def train_demo_run(runs_dir: Path, name: str = "demo", timeout: float = 300.0, **form_changes: Any) -> str:
    """Trains the CPU demo (the real llamafactory-cli on the tiny offline model, ~35 s on two
    cores) into `runs_dir` and returns the finished run's id."""
    from backend.service import RocBoard, demo_form

    board = RocBoard(Path(runs_dir))
    form = {**demo_form(), "run_name": name, **form_changes}
    started = board.start(form)
    assert started.run is not None, started.findings
    run_id = started.run.id
    wait_until(lambda: not board.is_active(run_id), timeout, interval=0.5, what="the demo run to finish")
    state = board.store.read(run_id)
    assert state.state == "finished", (state, (Path(runs_dir) / run_id / "train.log").read_text()[-3000:])
    return state.id


def copy_run(source_runs: Path, run_id: str, dest_runs: Path) -> Path:
    """A copy of a finished run in another runs dir (its own files: a test may break them).
    The copy's paths are its own: nothing of RocBoard reads config.yaml's output_dir back."""
    Path(dest_runs).mkdir(parents=True, exist_ok=True)
    return Path(shutil.copytree(Path(source_runs) / run_id, Path(dest_runs) / run_id, symlinks=True))
