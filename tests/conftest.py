"""Shared fixtures. Tests run offline: no hub, no analytics.

RocBoard is imported as the installed package (`pip install -e .`, which `make test` does);
`tests` is a package itself, so `from tests.harness import ...` resolves from the repository
root that pytest puts first on the path for it.
"""

from __future__ import annotations

import os

import pytest

from tests.harness import CHROMIUM, AppServer, chromium_available, chromium_browser

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


@pytest.fixture(scope="session")
def demo_assets():
    """The tiny offline demo model and dataset (built once if missing)."""
    from backend.demo import build_demo

    return build_demo()


@pytest.fixture(scope="session")
def trained_demo_run(demo_assets, tmp_path_factory):
    """(runs dir, run id) of one finished CPU-demo run, trained once per session with the real
    llamafactory-cli. Read it, or `copy_run` it into a test's own runs dir to change it."""
    from tests.harness import train_demo_run

    runs_dir = tmp_path_factory.mktemp("trained-runs")
    return runs_dir, train_demo_run(runs_dir)


@pytest.fixture
def launcher(tmp_path):
    """A Launcher over a fresh runs dir; whatever it left running is stopped afterwards."""
    from backend.runs.launcher import Launcher
    from backend.runs import RunStore

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
def app_server(demo_assets, tmp_path_factory):
    """One app per test module, on a free loopback port with its own runs dir."""
    with AppServer(workdir=tmp_path_factory.mktemp("app")) as server:
        yield server


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A real Slurm cluster of two nodes on this machine (tests/slurm_cluster.py), with
    accounting when slurmdbd and MariaDB are installed; SLURM_CONF points at it for the whole
    session (the app's Slurm commands and the servers tests start read it)."""
    from tests.slurm_cluster import running_cluster, unavailable

    why = unavailable()
    if why:
        pytest.skip(f"SLURM TESTS SKIPPED: {why}")
    with running_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


# --- the hostile-input tally docs/security.md quotes -------------------------------------------

_hostile_outcomes: dict[str, bool] = {}


def pytest_runtest_logreport(report) -> None:
    """Counts each `@pytest.mark.hostile` case once: refused (passed) or not (failed)."""
    if "hostile" not in report.keywords:
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _hostile_outcomes[report.nodeid] = report.outcome == "passed" and _hostile_outcomes.get(report.nodeid, True)


def pytest_terminal_summary(terminalreporter) -> None:
    if _hostile_outcomes:
        refused = sum(_hostile_outcomes.values())
        terminalreporter.write_line(f"hostile inputs: {refused} of {len(_hostile_outcomes)} refused")
