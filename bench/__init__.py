"""RocBoard's benchmarks: scripts that print figures and the conditions they ran under.

`python -m bench.run_all [--quick]` (what `make bench` runs) runs every bench in sequence,
prints each report and writes BENCHMARKS.md. Each bench module has
`run(quick: bool = False) -> dict` and `report(result) -> str`, and runs alone with
`python -m bench.bench_<name> [--quick]`. Benchmarks are scripts, not tests: nothing here
asserts; a missed goal is a figure written down honestly.

This module holds what the benches share, so that every bench measures the same way:
statistics, machine conditions, the demo trainer as the bare CLI runs it, RocBoard's
server timed, LlamaBoard's server, and watchers that stamp the moments a trainer's output
files change. What they share with the tests (waiting, ports, HTTP, processes, the app
server, headless Chromium) is tests/harness.py, imported from the repository root where
`make bench` runs.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import psutil

from tests.harness import (  # noqa: F401 - fake_run and trainer_log_line: shared with the tests, used by the benches
    AppServer,
    ServerProcess,
    fake_run,
    free_port,
    http_get,
    kill_tree,
    process_tree,
    run_states,
    trainer_log_line,
    wait_for,
    wait_until,
)

# How often the watchers look at the disk: the resolution of every "when did it appear".
WATCH_INTERVAL_S = 0.05
# Two shared CPU cores: a trainer's start or a server's imports can take a minute.
TRAINER_TIMEOUT_S = 600.0
SERVER_START_TIMEOUT_S = 180.0


# --- statistics and conditions ----------------------------------------------------------


def spread(values: Sequence[float | None]) -> dict[str, float]:
    """Median and spread of repeated measurements, in the unit they were given in (a None,
    a measurement that was not taken, is left out)."""
    ordered = sorted(v for v in values if v is not None)
    if not ordered:
        return {"n": 0}
    if len(ordered) >= 2:
        deciles = statistics.quantiles(ordered, n=10, method="inclusive")
        p10, p90 = deciles[0], deciles[-1]
    else:
        p10 = p90 = ordered[0]
    return {"n": len(ordered), "median": statistics.median(ordered), "p10": p10, "p90": p90, "min": ordered[0], "max": ordered[-1]}


def show(summary: dict[str, float], unit: str = "s", scale: float = 1.0, digits: int = 2) -> str:
    """`median 1.23 s (min-max 1.01-1.50, n=3)`, with p10-p90 when there are enough runs."""
    if not summary or not summary.get("n"):
        return "n/a"

    def number(value: float) -> str:
        return f"{value * scale:.{digits}f}"

    text = f"median {number(summary['median'])} {unit}"
    if summary["n"] >= 5:
        text += f" (p10-p90 {number(summary['p10'])}-{number(summary['p90'])}, min-max {number(summary['min'])}-{number(summary['max'])}, n={summary['n']})"
    elif summary["n"] > 1:
        text += f" (min-max {number(summary['min'])}-{number(summary['max'])}, n={summary['n']})"
    else:
        text += " (n=1)"
    return text


def package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def conditions() -> dict[str, Any]:
    """The machine and the software the figures came from."""
    return {
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "load_average_1m_5m_15m": load_average(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "versions": {
            name: package_version(name)
            for name in ("gradio", "llamafactory", "torch", "transformers", "peft", "plotly", "playwright", "psutil")
        },
    }


def conditions_line(c: dict[str, Any]) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in c["versions"].items())
    return (
        f"{c['logical_cores']} logical / {c['physical_cores']} physical cores, {c['memory_gib']} GiB, "
        f"load average {c['load_average_1m_5m_15m']}, Python {c['python']}, kernel {c['kernel']}; {versions}"
    )


def goal_row(figure: str, goal: str, measured: str, met: bool | str | None) -> dict[str, Any]:
    """One line of a section's table in BENCHMARKS.md (met None: no goal, a figure only;
    a string: the bench could not decide, and says why)."""
    return {"figure": figure, "goal": goal, "measured": measured, "met": met}


def bench_arguments(argv: Sequence[str] | None = None) -> bool:
    """`--quick` for the command line of a single bench."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, for a first look")
    return parser.parse_args(argv).quick


# --- processes ------------------------------------------------------------------------


def cpu_seconds(processes: Iterable[psutil.Process]) -> float:
    """User + system CPU time of these processes (those that still exist)."""
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return total


def chromium_processes() -> list[psutil.Process]:
    """The Chromium processes this bench started (through Playwright's driver)."""
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if "chrom" in process.name().lower():
                found.append(process)
        except psutil.NoSuchProcess:
            continue
    return found


class CpuMeter:
    """CPU time and peak resident memory of one process over a window, sampled on a thread.

    The browser's CPU is summed over its processes as they are when the window closes
    (renderers live for the whole page, so little is missed)."""

    def __init__(self, pid: int, with_browser: bool = True, interval_s: float = 0.5):
        self.process = psutil.Process(pid)
        self.with_browser = with_browser
        self.interval_s = interval_s
        self.peak_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True, name="cpu-meter")

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak_rss = max(self.peak_rss, self.process.memory_info().rss)
            except psutil.NoSuchProcess:
                return
            self._stop.wait(self.interval_s)

    def __enter__(self) -> CpuMeter:
        self.wall_start = time.monotonic()
        self.cpu_start = cpu_seconds([self.process])
        self.browser_start = {p.pid: cpu_seconds([p]) for p in chromium_processes()} if self.with_browser else {}
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self.wall_s = time.monotonic() - self.wall_start
        self.cpu_s = cpu_seconds([self.process]) - self.cpu_start
        self.browser_cpu_s = 0.0
        if self.with_browser:
            for process in chromium_processes():
                self.browser_cpu_s += cpu_seconds([process]) - self.browser_start.get(process.pid, 0.0)
        try:
            self.rss_end = self.process.memory_info().rss
        except psutil.NoSuchProcess:
            self.rss_end = 0

    @property
    def cpu_percent(self) -> float:
        return 100.0 * self.cpu_s / self.wall_s

    @property
    def browser_cpu_percent(self) -> float:
        return 100.0 * self.browser_cpu_s / self.wall_s


def wait_quiet(pids: Sequence[int], threshold_percent: float = 10.0, window_s: float = 1.0, timeout_s: float = 60.0) -> float:
    """Waits until these processes (and their children) use under `threshold_percent` of
    one core over a window: a server that answered may still be busy finishing its start.
    Returns the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        tree = [member for pid in pids for member in process_tree(pid)]
        before = cpu_seconds(tree)
        time.sleep(window_s)
        if 100.0 * (cpu_seconds(tree) - before) / window_s < threshold_percent:
            break
    return time.monotonic() - started


_START_TIME_OFFSET: float | None = None


def process_start_offset() -> float:
    """How far psutil's create_time() sits from time.time() at the spawn.

    create_time() adds the process's start tick to the boot time, which the kernel gives in
    whole seconds, so it can be off by up to a second; measured once on throwaway processes
    and subtracted, it puts the trainer's start on the same clock as the clicks."""
    global _START_TIME_OFFSET
    if _START_TIME_OFFSET is None:
        offsets = []
        for _ in range(5):
            before = time.time()
            probe = subprocess.Popen(["sleep", "0.2"])
            after = time.time()
            offsets.append(psutil.Process(probe.pid).create_time() - (before + after) / 2)
            probe.wait()
        _START_TIME_OFFSET = statistics.median(offsets)
    return _START_TIME_OFFSET


@overload
def process_started_at(create_time: float) -> float: ...
@overload
def process_started_at(create_time: float | None) -> float | None: ...
def process_started_at(create_time: float | None) -> float | None:
    """A process's create_time() on the time.time() clock."""
    return None if create_time is None else create_time - process_start_offset()


def is_llamafactory_helper(process: psutil.Process) -> bool:
    """The app's long-lived LLaMA-Factory helper (backend/llama_factory/zygote.py) or a fork of it."""
    try:
        return any(part.endswith("zygote.py") for part in process.cmdline()[:3])
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def helpers_settled(server_pid: int, timeout_s: float = 120.0) -> float:
    """Waits until a freshly started server's start-up work is done, so that it does not load
    a measurement: no short-lived helper left (the doctor's torch probe, the key catalogue),
    and its long-lived LLaMA-Factory helper done importing (quiet: it stays, idle, for the
    app's life). Returns the seconds waited."""
    started = time.monotonic()

    def no_children() -> bool:
        try:
            children = psutil.Process(server_pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return True
        if any(not is_llamafactory_helper(child) for child in children):
            return False
        try:
            return all(child.cpu_percent(interval=0.2) < 5.0 for child in children)
        except psutil.NoSuchProcess:
            return False

    wait_for(no_children, timeout_s, interval=0.25)  # past the timeout it is measured anyway; the report shows the load average
    return time.monotonic() - started


# --- the demo trainer, as the bare CLI runs it ------------------------------------------

FIRST_LOSS_PATTERN = re.compile(rb'"loss"\s*:\s*[-0-9.eE]+')


@dataclass
class DemoConfig:
    """The demo run exactly as RocBoard would launch it: YAML, command, environment."""

    form: dict[str, Any]
    yaml_for: Callable[[Path], str]
    preset_env: dict[str, str]
    max_steps: int


def demo_config(workdir: Path, max_steps: int | None = None) -> DemoConfig:
    """The demo form as RocBoard checks and writes it; `max_steps`: a longer or shorter run."""
    from backend.config import to_yaml
    from backend.findings import has_problems
    from backend.service import RocBoard, demo_form

    form = demo_form()
    if max_steps is not None:
        form["max_steps"] = max_steps
    board = RocBoard(workdir / "parse-runs", export_dir=workdir / "parse-exports")
    config, findings, preset = board.parse(form)
    if has_problems(findings):
        raise RuntimeError(f"the demo form does not pass RocBoard's checks: {[f.line() for f in findings]}")
    return DemoConfig(
        form=form,
        yaml_for=lambda output_dir: to_yaml(config, output_dir),
        preset_env=dict(preset.env) if preset else {},
        max_steps=int(form.get("max_steps") or 0),
    )


@dataclass
class TrainerResult:
    wall_s: float  # process start (kernel's start time, see process_started_at) to exit
    exit_code: int | None
    train_runtime_s: float | None  # the trainer's own timing of its training loop
    first_loss_after_start_s: float | None  # first loss line in trainer_log.jsonl, from process start
    steps: int | None


def train_runtime(output_dir: Path) -> float | None:
    try:
        return float(json.loads((output_dir / "all_results.json").read_text())["train_runtime"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def logged_steps(output_dir: Path) -> int | None:
    try:
        lines = (output_dir / "trainer_log.jsonl").read_text().strip().splitlines()
        return int(json.loads(lines[-1])["current_steps"]) if lines else 0
    except (OSError, ValueError, KeyError, TypeError):
        return None


def run_cli_trainer(demo: DemoConfig, run_dir: Path) -> TrainerResult:
    """`llamafactory-cli train config.yaml` alone: the command, cwd and environment
    RocBoard's launcher uses, with nothing watching."""
    from backend.runs import CONFIG_FILE, LOG_FILE, OUTPUT_DIR
    from backend.runs.launcher import trainer_command, trainer_env

    run_dir.mkdir(parents=True)
    output_dir = run_dir / OUTPUT_DIR
    (run_dir / CONFIG_FILE).write_text(demo.yaml_for(output_dir), encoding="utf-8")
    watcher = OutputWatcher(lambda: output_dir if output_dir.exists() else None)
    with open(run_dir / LOG_FILE, "wb") as log:
        process = subprocess.Popen(
            trainer_command(CONFIG_FILE),
            cwd=run_dir,
            env=trainer_env(run_dir, demo.preset_env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    started = process_started_at(psutil.Process(process.pid).create_time())
    watcher.start()
    try:
        exit_code = process.wait(timeout=TRAINER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        kill_tree(process.pid)
        exit_code = None
    ended = time.time()
    watcher.stop()
    first = watcher.first_loss_at
    return TrainerResult(
        wall_s=ended - started,
        exit_code=exit_code,
        train_runtime_s=train_runtime(output_dir),
        first_loss_after_start_s=None if first is None else first - started,
        steps=logged_steps(output_dir),
    )


# --- watching a trainer's output directory ---------------------------------------------

# LLaMA-Factory's log lines (running_log.txt, written when LLAMABOARD_ENABLED=1, which both
# RocBoard and LlamaBoard set) that mark where the time before the first step goes.
PHASE_MARKERS: tuple[tuple[str, str], ...] = (
    ("first_log_line", ""),  # imports and argument parsing are done; the tokenizer loads
    ("dataset_load", "Loading dataset"),  # tokenizer and template ready
    ("model_load", "loading weights file"),  # dataset read and tokenized
    ("lora_ready", "trainable params"),  # model loaded, adapter attached
    ("training_loop", "Running training"),  # trainer built: the first step begins
)
PHASE_LABELS = {
    "process_start": "click -> trainer process started (the app's start path + event round trip)",
    "first_log_line": "process start -> first log line (Python, torch/transformers/LLaMA-Factory imports, argument parsing)",
    "dataset_load": "-> dataset load begins (tokenizer + template)",
    "model_load": "-> model load begins (dataset read + tokenized)",
    "lora_ready": "-> adapter attached (model load + LoRA)",
    "training_loop": "-> training loop starts (Trainer set-up)",
    "first_loss_on_disk": "-> first loss line in trainer_log.jsonl (first logged step)",
    "first_loss_visible": "-> first loss point visible in the browser (the app's display path)",
}


class OutputWatcher:
    """Stamps, on a thread, the moment each marker line and the first loss line appear in
    a trainer's output directory. `locate()` returns the directory once it exists."""

    def __init__(self, locate: Callable[[], Path | None]):
        self.locate = locate
        self.output_dir: Path | None = None
        self.marks: dict[str, float] = {}
        self.first_loss_at: float | None = None
        self._log_offset = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="output-watcher")

    def start(self) -> OutputWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.is_set():
            self._look()
            if self.first_loss_at is not None:
                return
            self._stop.wait(WATCH_INTERVAL_S)

    def _look(self) -> None:
        now = time.time()
        if self.output_dir is None:
            self.output_dir = self.locate()
            if self.output_dir is None:
                return
        running_log = self.output_dir / "running_log.txt"
        try:
            with open(running_log, "rb") as handle:
                handle.seek(self._log_offset)
                chunk = handle.read()
        except OSError:
            chunk = b""
        if chunk:
            end = chunk.rfind(b"\n") + 1
            self._log_offset += end
            text = chunk[:end].decode("utf-8", errors="replace")
            for name, marker in PHASE_MARKERS:
                if name not in self.marks and (marker == "" or marker in text):
                    self.marks[name] = now
        try:
            with open(self.output_dir / "trainer_log.jsonl", "rb") as handle:
                if FIRST_LOSS_PATTERN.search(handle.read(4096)):
                    self.first_loss_at = now
        except OSError:
            pass


def phase_durations(click_at: float, process_start: float | None, marks: dict[str, float], first_loss_at: float | None, visible_at: float | None) -> dict[str, float | None]:
    """Each phase's duration, from consecutive moments; None where a moment is unknown."""
    moments = [("process_start", process_start)]
    moments += [(name, marks.get(name)) for name, _ in PHASE_MARKERS]
    moments += [("first_loss_on_disk", first_loss_at), ("first_loss_visible", visible_at)]
    durations: dict[str, float | None] = {}
    previous = click_at
    for name, moment in moments:
        if moment is None or previous is None:
            durations[name] = None
        else:
            durations[name] = moment - previous
        previous = moment if moment is not None else previous
    return durations


# --- RocBoard's server ---------------------------------------------------------------


class TimedAppServer(AppServer):
    """RocBoard's server (tests.harness.AppServer: `python app.py` on a free port with its
    own runs dir), with the time from spawn to its first HTTP 200 measured finely."""

    serving_after_s: float | None = None
    announced_after_s: float | None = None  # it printed its URL: page built, launch begins

    def start(self) -> TimedAppServer:
        spawned = time.monotonic()
        self.spawn()

        def serving() -> bool:
            if self.announced_after_s is None and b"RocBoard: http" in self.stderr_path.read_bytes():
                self.announced_after_s = time.monotonic() - spawned
            return self.answers()

        wait_until(serving, SERVER_START_TIMEOUT_S, interval=WATCH_INTERVAL_S, what=f"RocBoard on port {self.port} to answer")
        self.serving_after_s = time.monotonic() - spawned
        return self


def rocboard_server(workdir: Path) -> TimedAppServer:
    return TimedAppServer(workdir=workdir)


# Reads the number of points the page's loss chart draws (plotly keeps its traces on the div).
LOSS_CHART_POINTS_JS = """() => {
  const graph = document.querySelector('#loss-chart .js-plotly-plot');
  return graph && graph.data && graph.data[0] && graph.data[0].x ? graph.data[0].x.length : 0;
}"""
LOSS_CHART_LAST_STEP_JS = """() => {
  const graph = document.querySelector('#loss-chart .js-plotly-plot');
  if (!graph || !graph.data || !graph.data[0] || !graph.data[0].x) return null;
  const x = graph.data[0].x;
  return x.length ? x[x.length - 1] : null;
}"""


def newest_run(runs_dir: Path, known: set[str]) -> dict[str, Any] | None:
    for state in run_states(runs_dir):
        if state["id"] not in known:
            return state
    return None


def ready_for_a_new_run(page: Any, timeout_ms: int = 120_000) -> None:
    """Waits until the page can start a run: its load event decided what the form shows and,
    when that is an earlier run's settings (read-only), "New run from these settings" was
    pressed, as a user would."""
    page.wait_for_function(
        "() => (document.querySelector('#form-mode [data-testid=markdown]')?.innerText ?? '').trim().length > 0", polling=50, timeout=timeout_ms
    )
    if page.locator("#new-run").is_visible():
        page.locator("#new-run").click()
    page.wait_for_selector("#start:not([disabled])", state="visible", timeout=timeout_ms)


def start_and_see_first_point(page: Any, runs_dir: Path, known: set[str]) -> tuple[float, str, float]:
    """Clicks the page's Start and waits until the page shows the new run with one loss
    point drawn. Returns (time of the click, the new run's id, time the point was visible)."""
    clicked = time.time()
    page.click("#start")
    state = wait_until(lambda: newest_run(runs_dir, known), 300, interval=WATCH_INTERVAL_S, what="the new run to appear")
    run_id = state["id"]
    # The chart is the new run's once the watcher script says it drew that run (ui/live.js).
    page.wait_for_function(
        f"() => (document.querySelector('#status') || {{}}).innerText.includes('{run_id}')"
        f" && window.rocboardLive && window.rocboardLive.drawn.run === '{run_id}' && ({LOSS_CHART_POINTS_JS})() >= 1",
        polling=20,
        timeout=int(TRAINER_TIMEOUT_S * 1000),
    )
    return clicked, run_id, time.time()


# --- LlamaBoard (`llamafactory-cli webui`) ----------------------------------------------


class LlamaBoardServer(ServerProcess):
    """`llamafactory-cli webui` in its own temporary working dir (its `saves/` lands there),
    on a free loopback port; BROWSER=true so its `inbrowser=True` opens nothing."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        self.serving_after_s: float | None = None
        self.log_path = workdir / "webui.log"

    def start(self) -> LlamaBoardServer:
        from backend.runs.launcher import llamafactory_cli

        cli = llamafactory_cli()
        env = dict(os.environ)
        # LlamaBoard starts its trainer as plain `llamafactory-cli`, found on PATH.
        env["PATH"] = os.pathsep.join([str(Path(cli).parent), env.get("PATH", "")])
        env.update(
            GRADIO_SERVER_PORT=str(self.port),
            GRADIO_SERVER_NAME="127.0.0.1",
            GRADIO_ANALYTICS_ENABLED="False",
            GRADIO_TEMP_DIR=str(self.workdir / "gradio-tmp"),
            HF_HUB_OFFLINE="1",
            BROWSER="true",
            PYTHONUNBUFFERED="1",
        )
        spawned = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [cli, "webui"], cwd=self.workdir, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        wait_until(self.answers, SERVER_START_TIMEOUT_S, interval=WATCH_INTERVAL_S, what=f"LlamaBoard on port {self.port} to answer")
        self.serving_after_s = time.monotonic() - spawned
        return self

    def answers(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"LlamaBoard exited with {self.process.returncode}:\n{self.log_path.read_text(errors='replace')[-3000:]}")
        try:
            return http_get(self.port, "/")[0] == 200
        except OSError:
            return False

    def trainer(self) -> psutil.Process | None:
        """The `llamafactory-cli train` process LlamaBoard started, if any."""
        if self.process is None:
            return None
        try:
            for child in psutil.Process(self.process.pid).children(recursive=True):
                try:
                    if "train" in child.cmdline():
                        return child
                except psutil.NoSuchProcess:
                    continue
        except psutil.NoSuchProcess:
            return None
        return None

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)  # its trainers share its group
            self.process.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            kill_tree(self.process.pid)


@dataclass
class Workspace:
    """A temporary directory for one bench, removed afterwards."""

    prefix: str
    path: Path = field(init=False)

    def __enter__(self) -> Path:
        self._tmp = tempfile.TemporaryDirectory(prefix=self.prefix)
        self.path = Path(self._tmp.name)
        return self.path

    def __exit__(self, *exc_info: object) -> None:
        self._tmp.cleanup()
