"""Shared fixtures. Tests run offline: no hub, no analytics."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


@pytest.fixture(scope="session")
def demo_assets():
    """The tiny offline demo model and dataset (built once if missing)."""
    from backend.demo import ensure_demo

    return ensure_demo()


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
