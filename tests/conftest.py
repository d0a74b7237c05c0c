"""Shared fixtures. Tests run offline: no hub, no analytics.

RocBoard is imported as the installed package (`pip install -e .`, which `make test` does);
`tests` is a package itself, so `from tests.harness import ...` resolves from the repository
root that pytest puts first on the path for it.
"""

from __future__ import annotations

import os

import psutil
import pytest

from tests import tiers
from tests.harness import CHROMIUM, AppServer, chromium_available, chromium_browser

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


@pytest.fixture(scope="session")
def demo_assets():
    """The tiny offline demo model and dataset (built once if missing)."""
    from backend.demo import build_demo

    return build_demo()


# --- tiers: a test's `slow` / `browser` marks follow from the fixtures it uses (tests/tiers.py) -----


@pytest.fixture(scope="session")
def starts_app_server():
    """Tag: `python app.py` serving. Asked for by a fixture or test that starts one: marks it slow."""


@pytest.fixture(scope="session")
def starts_trainer():
    """Tag: the real llamafactory-cli (a training run, an export, a real launch): marks it slow."""


@pytest.fixture(scope="session")
def starts_lf_helper():
    """Tag: a process that imports LLaMA-Factory (check worker, warm helper, lengths/keys
    worker, chat server): marks it slow."""


@pytest.fixture(scope="session")
def starts_slurm():
    """Tag: a Slurm cluster's daemons: marks it slow."""


@pytest.fixture(scope="session")
def starts_memory_probe():
    """Tag: a fresh web process driven to a reader's memory cap and measured from outside: marks it slow."""


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the marks
def pytest_collection_modifyitems(items) -> None:
    for item in items:
        have = {mark.name for mark in item.iter_markers()}
        for mark in sorted(tiers.tier_marks(item.fixturenames) - have):
            item.add_marker(mark)


def pytest_collection_finish(session) -> None:
    """A session whose selected tests hold no slow or browser one (`make test-fast`, or a few
    fast modules) refuses to start what only those may start."""
    if session.items and not any(item.get_closest_marker(mark) for item in session.items for mark in tiers.TIER_MARKS):
        guard = tiers.refusing_expensive_processes("no test of this session is marked slow or browser")
        guard.__enter__()
        session.config.add_cleanup(lambda: guard.__exit__(None, None, None))


@pytest.fixture
def runs(tmp_path):
    """A runs folder of the test's own; every trainer still live in it when the test ends is
    stopped (by pid and start time), so a failed test leaves no stand-in behind."""
    from backend.runs import RunStore
    from backend.runs.launcher import ProcessIdentity, stop_tree

    runs = tmp_path / "runs"
    yield runs
    for state in RunStore(runs).list():
        if state.active and state.pid and state.pid_started:
            stop_tree(ProcessIdentity(state.pid, state.pid_started, state.pid_start_key), graceful_s=0)


@pytest.fixture(autouse=True)
def fast_tier_guard():
    """In a fast session, a test whose code started an expensive process fails, naming it,
    even where the code under test caught the refusal."""
    tiers.refused.clear()
    yield
    if tiers.refused:
        refused, tiers.refused[:] = list(tiers.refused), []
        pytest.fail("\n".join(refused), pytrace=False)


@pytest.fixture(scope="session")
def trained_demo_run(demo_assets, tmp_path_factory, starts_trainer):
    """(runs dir, run id) of one finished CPU-demo run, trained once per session with the real
    llamafactory-cli. Read it, or `copy_run` it into a test's own runs dir to change it."""
    from tests.harness import train_demo_run

    runs_dir = tmp_path_factory.mktemp("trained-runs")
    return runs_dir, train_demo_run(runs_dir)


@pytest.fixture
def launcher(tmp_path):
    """A Launcher over a fresh runs dir; whatever it left running is stopped afterwards."""
    from backend.runs import RunStore
    from backend.runs.launcher import Launcher

    launcher = Launcher(RunStore(tmp_path / "runs"))
    yield launcher
    for state in launcher.store.list():
        if state.active:
            launcher.stop(state.id)


@pytest.fixture(scope="module")
def chromium():
    """One browser per test module; each test opens its own context (cookies, locale)."""
    if not chromium_available():
        pytest.skip(f"browser tests need Playwright and {CHROMIUM}")
    with chromium_browser() as browser:
        yield browser


@pytest.fixture
def new_tab(chromium):
    """Opens tabs, each in a context of its own (cookies, the browser's language; light theme,
    1400x1000), and closes them after the test: `new_tab("zh-CN")` is a blank page. A browser
    module's `page_in` builds on it with what it waits for on its own page."""
    contexts = []

    def opener(locale: str = "en-US", **options):
        context = chromium.new_context(**{"locale": locale, "color_scheme": "light", "viewport": {"width": 1400, "height": 1000}, **options})
        contexts.append(context)
        return context.new_page()

    yield opener
    for context in contexts:
        context.close()


@pytest.fixture
def page_of(chromium, app_server):
    """Opens tabs on the module's app (its `app_server`, which a module may override) and
    closes them after the test: `page_of(locale="en-US", editable=True)`."""
    from tests.test_browser_app import open_page

    contexts = []

    def opener(locale: str = "en-US", editable: bool = True):
        context, page = open_page(chromium, app_server, locale, editable)
        contexts.append(context)
        return page

    yield opener
    for context in contexts:
        context.close()


@pytest.fixture(scope="module")
def app_server(demo_assets, tmp_path_factory, starts_app_server):
    """One app per test module, on a free loopback port with its own runs dir."""
    with AppServer(workdir=tmp_path_factory.mktemp("app")) as server:
        yield server


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory, starts_slurm):
    """A real Slurm cluster of two nodes on this machine (tests/slurm_cluster.py), with
    accounting when slurmdbd and MariaDB are installed; SLURM_CONF points at it for the whole
    session (the app's Slurm commands and the servers tests start read it)."""
    from tests.slurm_cluster import running_cluster, unavailable

    why = unavailable()
    if why:
        pytest.skip(f"SLURM TESTS SKIPPED: {why}")
    with running_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


# --- processes a test module left behind -------------------------------------------------------

# What RocBoard starts (trainers, warm trainers forked from the helper, chat servers, apps).
_OURS = ("llamafactory-cli", "backend/llama_factory/zygote.py", "backend/llama_factory/worker.py", "backend/chat/api_worker.py", "torchrun", "app.py")
_LINGER_S = 10.0  # a cold check worker whose app was just stopped ends by itself within seconds
_left_behind: list[str] = []


def _ours_started_since(since: float, base: str) -> list[psutil.Process]:
    import psutil

    # This session's: a descendant of this pytest, or an orphan (a trainer whose app a test
    # killed is adopted by init) that works in this session's temporary folder `base`. Another
    # pytest on the same machine keeps its processes, and so does a developer's own trainer.
    try:
        descendants = {child.pid for child in psutil.Process().children(recursive=True)}
    except psutil.Error:
        descendants = set()
    found = []
    for process in psutil.process_iter(["cmdline", "create_time", "ppid", "cwd"]):
        cmdline = " ".join(process.info["cmdline"] or ())
        in_base = base in cmdline or (process.info["cwd"] or "").startswith(base)
        mine = process.pid in descendants or (process.info["ppid"] == 1 and in_base)
        if mine and (process.info["create_time"] or 0) >= since and process.pid != os.getpid() and any(mark in cmdline for mark in _OURS):
            found.append(process)
    return found


@pytest.fixture(scope="module", autouse=True)
def no_process_left_behind(request, tmp_path_factory):
    """A trainer or server a module's tests started and did not stop trains on into the next
    modules: on 2 cores that slows them into timeouts far from the cause. Whatever of ours the
    module started and is still running a little after its own fixtures were torn down is
    killed here and named at the end of the session. (A session's Slurm cluster is not ours:
    its daemons never match; a Slurm job's trainer does, and a module stops its jobs.)"""
    import time

    import psutil

    from tests.harness import kill_processes

    started = time.time() - 1.0  # create_time has tick granularity
    base = str(tmp_path_factory.getbasetemp())
    yield
    deadline = time.monotonic() + _LINGER_S
    while (left := _ours_started_since(started, base)) and time.monotonic() < deadline:
        time.sleep(0.5)
    for process in left:
        try:
            _left_behind.append(f"{request.module.__name__}: pid {process.pid} {' '.join(process.cmdline())[:200]}")
        except psutil.Error:
            continue
    kill_processes(left)


# --- the hostile-input tally docs/security.md quotes -------------------------------------------

_hostile_outcomes: dict[str, bool] = {}


def pytest_runtest_logreport(report) -> None:
    """Counts each `@pytest.mark.hostile` case once: refused (passed) or not (failed)."""
    if "hostile" not in report.keywords:
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _hostile_outcomes[report.nodeid] = report.outcome == "passed" and _hostile_outcomes.get(report.nodeid, True)


def pytest_terminal_summary(terminalreporter) -> None:
    if _left_behind:
        terminalreporter.section("processes left behind (killed at their module's end)", yellow=True)
        for line in _left_behind:
            terminalreporter.write_line(line)
    if _hostile_outcomes:
        refused = sum(_hostile_outcomes.values())
        terminalreporter.write_line(f"hostile inputs: {refused} of {len(_hostile_outcomes)} refused")
