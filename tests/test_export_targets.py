"""Where an export may write (issue 26, item 4): never into or over RocBoard itself, its Python
environment or a hidden folder of the home; an existing folder holding files no export wrote
only when its name is typed; no link followed in the middle of the path, by the page and by
`app.py export` alike (one check decides for both: backend/export/target.py::check_target).

Every test runs with a temporary HOME, so nothing here can touch the real home. The cases
about RocBoard's own folders (ui/, backend/, .venv) only ever ask for a plan, or go through
the command line with its export job replaced by one that fails the test if it is started:
even on code that accepted them, nothing would be replaced.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from backend.export import cli
from backend.export.job import leftover_staging
from backend.export.merge import ExportRequest, plan_export
from backend.runs import RunStore
from backend.service import RocBoard
from tests.harness import copy_run

ROOT = Path(__file__).resolve().parents[1]  # the checkout: app.py, ui/, backend/


# --- fixtures and helpers ------------------------------------------------------------------------


@pytest.fixture
def run(trained_demo_run, tmp_path) -> tuple[RunStore, str]:
    source_runs, run_id = trained_demo_run
    copy_run(source_runs, run_id, tmp_path / "runs")
    return RunStore(tmp_path / "runs"), run_id


@pytest.fixture
def home(run, tmp_path, monkeypatch) -> Path:
    """A temporary home (HOME: what Path.home() and `~` read), with a dot-folder or two."""
    home = tmp_path / "home"
    (home / ".cache" / "huggingface" / "hub").mkdir(parents=True)
    (home / ".cache" / "huggingface" / "hub" / "weights.bin").write_bytes(b"cached model")
    (home / ".config").mkdir()
    monkeypatch.setenv("HOME", str(home))
    assert Path.home() == home and os.path.expanduser("~") == str(home)
    return home


@pytest.fixture
def board(run, home, tmp_path):
    """The app's facade with its default export roots (what `python app.py` gets with no
    --export-root)."""
    store, _ = run
    board = RocBoard(store.root, export_dir=tmp_path / "downloads")
    yield board
    board.close()


def listing(folder: Path) -> list[tuple[str, int, int, int]]:
    """Every path below `folder` (links not followed) with its kind, size and mtime."""
    found = []
    for here, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(here, name)
            info = os.lstat(path)
            found.append((os.path.relpath(path, folder), stat.S_IFMT(info.st_mode), info.st_size, info.st_mtime_ns))
    return sorted(found)


def app_folder_state(folder: Path) -> tuple[int, int, list[str]]:
    """What replacing one of RocBoard's own folders would change, without reading a tree other
    helpers edit: the folder's inode and device, and staging folders of its name beside it."""
    info = os.stat(folder)
    return info.st_ino, info.st_dev, [path.name for path in leftover_staging(folder.parent, folder.name)]


def refused_plan(store: RunStore, request: ExportRequest, roots) -> list[str]:
    """The rules of a refused plan (plan_export writes nothing)."""
    plan, findings = plan_export(store, request, roots)
    assert plan is None, f"accepted: an export into {plan.target} would run"
    assert findings, "refused without a finding"
    return [finding.rule for finding in findings]


class NoExport:
    """Stands in for the command line's ExportJob: being made means the export was accepted."""

    made: ClassVar[list] = []

    def __init__(self, plan, *args, **kwargs) -> None:
        NoExport.made.append(plan)
        raise AssertionError(f"the command line accepted an export into {plan.target}")


@pytest.fixture
def no_export(monkeypatch):
    NoExport.made = []
    monkeypatch.setattr(cli, "ExportJob", NoExport)
    return NoExport


def cli_refused(capsys, argv: list[str]) -> str:
    """Runs `app.py export ARGV` in this process: exit 2; its stderr."""
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


# --- the default root ----------------------------------------------------------------------------


def test_the_default_export_root_is_a_folder_of_its_own_in_the_home(board, run, home):
    store, run_id = run
    root = home / "rocboard-exports"
    assert board.exports.roots == [root]
    assert board.exports.default_target(run_id) == str(root / run_id)
    # Planning an export there is fine, and makes nothing (the root is made by the first export).
    plan, findings = plan_export(store, ExportRequest(run_id, str(root / run_id)), board.exports.roots)
    assert plan is not None and findings == [], findings
    assert not root.exists()
    # The home itself, and anywhere in it outside that folder, is outside the page's roots.
    assert refused_plan(store, ExportRequest(run_id, str(home / "models" / "m")), board.exports.roots) == ["export-dir-outside"]


# --- RocBoard itself and its Python environment: refused outright ---------------------------------


@pytest.mark.hostile
@pytest.mark.parametrize("name", ["ui", "backend"])
def test_replacing_the_apps_own_code_folder_is_refused(board, run, name):
    """The report: with the default roots (the home and the app's folder) `replace` was accepted
    for the app's ui/ or backend/; a copy of the app lost its code to model files."""
    store, run_id = run
    folder = ROOT / name
    before = app_folder_state(folder)
    assert refused_plan(store, ExportRequest(run_id, str(folder), overwrite=True), board.exports.roots) == ["export-dir-app"]
    # Typing the folder's name unlocks nothing here.
    assert refused_plan(store, ExportRequest(run_id, str(folder), overwrite=True, confirm=name), board.exports.roots) == ["export-dir-app"]
    # Anywhere inside the checkout either, a new folder included; nor the checkout itself.
    assert refused_plan(store, ExportRequest(run_id, str(folder / "exported-model")), board.exports.roots) == ["export-dir-app"]
    assert refused_plan(store, ExportRequest(run_id, str(ROOT), overwrite=True, confirm=ROOT.name), board.exports.roots) == ["export-dir-app"]
    # Even with the widest roots there are.
    assert refused_plan(store, ExportRequest(run_id, str(folder), overwrite=True, confirm=name), [Path("/")]) == ["export-dir-app"]
    answer = board.exports.start(ExportRequest(run_id, str(folder), overwrite=True, confirm=name))
    assert not answer.started and [f.rule for f in answer.findings] == ["export-dir-app"]
    assert str(ROOT) in answer.findings[0].problem
    assert app_folder_state(folder) == before
    assert not (folder / "exported-model").exists()


@pytest.mark.hostile
def test_replacing_the_apps_python_environment_is_refused(board, run):
    """sys.prefix (here the checkout's .venv) and site-packages."""
    store, run_id = run
    prefix = Path(sys.prefix)
    before = app_folder_state(prefix)
    rules = refused_plan(store, ExportRequest(run_id, str(prefix), overwrite=True), board.exports.roots)
    assert rules == ["export-dir-environment"], rules
    assert refused_plan(store, ExportRequest(run_id, str(prefix), overwrite=True, confirm=prefix.name), [Path("/")]) == ["export-dir-environment"]
    import site

    packages = Path(site.getsitepackages()[0])
    assert refused_plan(store, ExportRequest(run_id, str(packages / "merged-model")), [Path("/")]) == ["export-dir-environment"]
    assert app_folder_state(prefix) == before
    assert not (packages / "merged-model").exists()


@pytest.mark.hostile
def test_an_environment_outside_the_checkout_is_refused_too(run, home, tmp_path, monkeypatch, capsys, no_export):
    """The environment rule stands on its own: a venv that is not inside RocBoard's folder (and
    whose folder is not hidden) is refused, by the page with wide roots and by the command line."""
    store, run_id = run
    venv = tmp_path / "venv"
    packages = venv / "lib" / "python3" / "site-packages"
    packages.mkdir(parents=True)
    (packages / "torch.py").write_text("# a package")
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.setattr(sys, "exec_prefix", str(venv))
    before = listing(venv)
    assert refused_plan(store, ExportRequest(run_id, str(venv), overwrite=True, confirm="venv"), [tmp_path]) == ["export-dir-environment"]
    err = cli_refused(capsys, [run_id, "--to", str(venv), "--overwrite", "--runs-dir", str(store.root)])
    assert "Python environment" in err and str(venv) in err
    err = cli_refused(capsys, [run_id, "--to", str(venv / "lib" / "m"), "--runs-dir", str(store.root)])
    assert "Python environment" in err
    assert listing(venv) == before and no_export.made == []


# --- hidden folders of the home: refused outright -------------------------------------------------


@pytest.mark.hostile
def test_replacing_the_hugging_face_cache_is_refused(board, run, home, tmp_path, capsys, no_export):
    store, run_id = run
    cache = home / ".cache" / "huggingface"
    before = listing(home)
    wide = [Path("/")]
    assert refused_plan(store, ExportRequest(run_id, str(cache), overwrite=True), wide) == ["export-dir-hidden"]
    assert refused_plan(store, ExportRequest(run_id, str(cache), overwrite=True, confirm="huggingface"), wide) == ["export-dir-hidden"]
    assert refused_plan(store, ExportRequest(run_id, "~/.cache/huggingface/merged"), wide) == ["export-dir-hidden"]
    # The page with its default root says why, not only "outside the roots".
    answer = board.exports.start(ExportRequest(run_id, str(cache), overwrite=True, confirm="huggingface"))
    assert not answer.started and [f.rule for f in answer.findings] == ["export-dir-hidden"]
    assert str(home / ".cache") in answer.findings[0].problem
    err = cli_refused(capsys, [run_id, "--to", str(cache), "--overwrite", "--confirm-replace", "huggingface", "--runs-dir", str(store.root)])
    assert "hidden folder of your home" in err
    assert listing(home) == before and no_export.made == []


@pytest.mark.hostile
def test_creating_ssh_or_another_dot_folder_in_the_home_is_refused(board, run, home, capsys, no_export):
    store, run_id = run
    before = listing(home)
    for raw in ("~/.ssh", str(home / ".ssh"), "~/.ssh/model", "~/.config/autostart", "~/.bashrc.d", "~/.local/share/models"):
        assert refused_plan(store, ExportRequest(run_id, raw), [Path("/")]) == ["export-dir-hidden"], raw
        answer = board.exports.start(ExportRequest(run_id, raw))
        assert not answer.started and [f.rule for f in answer.findings] == ["export-dir-hidden"], (raw, answer.findings)
    err = cli_refused(capsys, [run_id, "--to", str(home / ".ssh"), "--runs-dir", str(store.root)])
    assert "hidden folder of your home" in err
    assert not (home / ".ssh").exists() and not (home / ".local").exists()
    assert listing(home) == before and no_export.made == []


# --- a folder holding files no export wrote -----------------------------------------------------


@pytest.mark.hostile
def test_a_folder_with_files_no_export_wrote_is_replaced_only_when_its_name_is_typed(board, run, home, tmp_path, capsys, no_export):
    store, run_id = run
    root = home / "rocboard-exports"
    taken = root / "taken"
    taken.mkdir(parents=True)
    (taken / "notes.txt").write_text("mine")
    (taken / "data").mkdir()
    roots = board.exports.roots
    before = listing(root)
    # The replace box alone is not enough.
    assert refused_plan(store, ExportRequest(run_id, str(taken), overwrite=True), roots) == ["export-dir-foreign"]
    answer = board.exports.start(ExportRequest(run_id, str(taken), overwrite=True))
    assert not answer.started and [f.rule for f in answer.findings] == ["export-dir-foreign"]
    problem = answer.findings[0].problem + " " + answer.findings[0].fix
    assert "notes.txt" in problem and "data" in problem and "taken" in problem
    # A wrong name is no confirmation.
    assert refused_plan(store, ExportRequest(run_id, str(taken), overwrite=True, confirm="Taken"), roots) == ["export-dir-foreign"]
    assert refused_plan(store, ExportRequest(run_id, str(taken), overwrite=True, confirm=str(taken)), roots) == ["export-dir-foreign"]
    assert listing(root) == before
    # Its name typed: accepted, and the plan says what goes.
    plan, findings = plan_export(store, ExportRequest(run_id, str(taken), overwrite=True, confirm="taken"), roots)
    assert plan is not None and findings == [], findings
    assert plan.replaces and plan.foreign == ("data", "notes.txt")
    line = board.exports.plan_markdown(ExportRequest(run_id, str(taken), overwrite=True, confirm="taken"))
    assert "replaced once the new export is complete" in line and "2 of its entries were not written by an export" in line, line
    assert listing(root) == before
    # The command line: the same refusal, and --confirm-replace NAME accepts (and implies --overwrite).
    outside = tmp_path / "elsewhere" / "taken"
    outside.mkdir(parents=True)
    (outside / "notes.txt").write_text("mine")
    err = cli_refused(capsys, [run_id, "--to", str(outside), "--overwrite", "--runs-dir", str(store.root)])
    assert "no RocBoard export wrote" in err and "--confirm-replace taken" in err
    cli_refused(capsys, [run_id, "--to", str(outside), "--confirm-replace", "elsewhere", "--runs-dir", str(store.root)])
    assert NoExport.made == []
    with pytest.raises(AssertionError, match="accepted an export"):
        cli.main([run_id, "--to", str(outside), "--confirm-replace", "taken", "--runs-dir", str(store.root)])
    assert [plan.target for plan in NoExport.made] == [outside]
    assert (outside / "notes.txt").read_text() == "mine"


# --- links in the middle of the path: the page and the command line alike --------------------------


@pytest.mark.hostile
def test_a_link_in_the_middle_of_to_is_refused_by_the_command_line_as_by_the_page(run, home, tmp_path, capsys, no_export):
    store, run_id = run
    real = tmp_path / "real"
    real.mkdir()
    (real / "keep.txt").write_text("kept")
    (tmp_path / "via").symlink_to(real)
    before = listing(real)
    target = tmp_path / "via" / "model"
    err = cli_refused(capsys, [run_id, "--to", str(target), "--runs-dir", str(store.root)])
    assert "goes through the link" in err and str(tmp_path / "via") in err and str(real) in err
    # The page, with a root that holds both the link and where it leads: the same finding.
    page = refused_plan(store, ExportRequest(run_id, str(target)), [tmp_path])
    assert page == ["export-dir-link"]
    _, page_findings = plan_export(store, ExportRequest(run_id, str(target)), [tmp_path])
    assert page_findings[0].line() in err
    # Deeper, and inside the default root: the same.
    root = home / "rocboard-exports"
    (root / "inner").mkdir(parents=True)
    (root / "hop").symlink_to(root / "inner")
    assert refused_plan(store, ExportRequest(run_id, str(root / "hop" / "m")), [root]) == ["export-dir-link"]
    err = cli_refused(capsys, [run_id, "--to", "~/rocboard-exports/hop/a/b", "--runs-dir", str(store.root)])
    assert "goes through the link" in err
    assert listing(real) == before and os.listdir(root / "inner") == []
    assert no_export.made == []


@pytest.mark.hostile
def test_the_command_line_refuses_the_apps_own_folders(run, home, capsys, no_export):
    store, run_id = run
    states = {name: app_folder_state(ROOT / name) for name in ("ui", "backend")}
    for name in states:
        err = cli_refused(capsys, [run_id, "--to", str(ROOT / name), "--overwrite", "--runs-dir", str(store.root)])
        assert "RocBoard itself" in err, err
        err = cli_refused(capsys, [run_id, "--to", str(ROOT / name), "--confirm-replace", name, "--runs-dir", str(store.root)])
        assert "RocBoard itself" in err, err
    err = cli_refused(capsys, [run_id, "--to", sys.prefix, "--confirm-replace", Path(sys.prefix).name, "--runs-dir", str(store.root)])
    assert "Python environment" in err
    assert {name: app_folder_state(ROOT / name) for name in states} == states
    assert no_export.made == []
