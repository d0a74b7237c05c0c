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
