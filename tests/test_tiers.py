"""The tiers are mechanical (tests/tiers.py): a test is `slow` or `browser` by the fixtures it
uses, and the fast tier refuses to start what only those may start."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests import tiers

TESTS = Path(__file__).resolve().parent
# Calls that start an expensive thing; a fixture or test that makes one asks for the tag.
STARTERS = {
    "AppServer": "starts_app_server",
    "train_demo_run": "starts_trainer",
    "install_shared": "starts_lf_helper",
    "running_cluster": "starts_slurm",
    "chromium_browser": "chromium",
}


def test_a_tag_gives_its_mark_and_a_browser_tests_own_app_leaves_it_browser_only() -> None:
    assert tiers.tier_marks(["tmp_path", "demo_assets", "board"]) == set()
    assert tiers.tier_marks(["trained_demo_run", "starts_trainer"]) == {"slow"}
    assert tiers.tier_marks(["guarded_server", "starts_app_server"]) == {"slow"}
    assert tiers.tier_marks(["helper", "starts_lf_helper"]) == {"slow"}
    assert tiers.tier_marks(["slurm_cluster", "starts_slurm"]) == {"slow"}
    assert tiers.tier_marks(["page_of", "chromium", "app_server", "starts_app_server"]) == {"browser"}
    assert tiers.tier_marks(["chromium", "starts_app_server", "starts_trainer"]) == {"browser", "slow"}
    with pytest.raises(ValueError, match="no such tag"):
        tiers.starts("gpu")
    assert tiers.starts("trainer", "lf_helper").args == ("starts_trainer", "starts_lf_helper")


def test_every_test_of_this_session_carries_the_marks_of_its_fixtures(request) -> None:
    """What conftest's collection hook did, read back on every test this session runs."""
    unmarked = [item.nodeid for item in request.session.items if not tiers.tier_marks(item.fixturenames) <= {m.name for m in item.iter_markers()}]
    assert unmarked == []


def _fixture_or_test_functions(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            is_fixture = any("fixture" in ast.unparse(d) for d in node.decorator_list)
            if is_fixture or node.name.startswith("test_"):
                yield node


def _asked(function: ast.FunctionDef) -> set[str]:
    """The tags a fixture or test asks for: its arguments, `@starts(...)`, usefixtures."""
    asked = {a.arg for a in function.args.args} | {function.name}
    for decorator in function.decorator_list:
        for call in (c for c in ast.walk(decorator) if isinstance(c, ast.Call)):
            name = getattr(call.func, "id", getattr(call.func, "attr", ""))
            words = {a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
            asked |= {f"starts_{w}" for w in words} if name == "starts" else words if name == "usefixtures" else set()
    return asked


def test_every_fixture_and_test_that_starts_something_asks_for_its_tag() -> None:
    """AppServer(...), train_demo_run(...), a warm helper, a Slurm cluster, Chromium: the
    function that makes one names the tag in its arguments or in `@starts(...)`, or carries the
    mark by hand (a browser module's pytestmark, `@pytest.mark.slow`)."""
    missing = []
    for path in sorted(TESTS.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module_marks = " ".join(ast.unparse(n) for n in tree.body if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets))
        # A module's own kind of app server (a subclass of AppServer) starts one too.
        starters = STARTERS | {n.name: "starts_app_server" for n in tree.body if isinstance(n, ast.ClassDef) and "AppServer" in map(ast.unparse, n.bases)}
        for function in _fixture_or_test_functions(tree):
            called = {getattr(c.func, "id", getattr(c.func, "attr", "")) for c in ast.walk(function) if isinstance(c, ast.Call)}
            marks = " ".join(ast.unparse(d) for d in function.decorator_list) + " " + module_marks
            for call, tag in starters.items():
                if call in called and tag not in _asked(function) and "mark.slow" not in marks and "mark.browser" not in marks:
                    missing.append(f"{path.name}::{function.name} calls {call}() without {tag}")
    assert missing == []


def test_the_armed_guard_refuses_an_app_server_a_trainer_and_a_helper_and_lets_the_rest_run() -> None:
    with tiers.refusing_expensive_processes("a test of the guard"):
        for argv in (
            [sys.executable, str(tiers.ROOT / "app.py"), "--host", "127.0.0.1", "--port", "7860"],
            ["llamafactory-cli", "train", "config.yaml"],
            [sys.executable, str(tiers.ROOT / "backend" / "llama_factory" / "worker.py")],
            [sys.executable, "-c", "import llamafactory"],
            ["slurmctld", "-D"],
        ):
            with pytest.raises(tiers.ExpensiveProcess, match="Mark it slow"):
                subprocess.run(argv, capture_output=True, check=False)
        assert len(tiers.refused) == 5
        tiers.refused.clear()  # read here, not by the fast tier's check after this test
        # A command line's app.py (`app.py status`), a stand-in trainer and a tool still run.
        assert tiers.expensive([sys.executable, str(tiers.ROOT / "app.py"), "status"]) is None
        assert subprocess.run([sys.executable, "-c", "print('stand-in trainer')"], capture_output=True, text=True, check=True).stdout == "stand-in trainer\n"
    assert tiers.refused == []
