"""Where an export may write: `check_target`, the one check of the export folder for the page and
the command line (see backend/export/merge.py for the rules in order), and what it asks: the
protected folders, the export roots, the manifest an export leaves, the links on the way.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from backend.config.paths import path_problem
from backend.export.size import MIB
from backend.findings import Finding
from backend.i18n.errors import os_error

DEFAULT_EXPORT_FOLDER = "rocboard-exports"
MANIFEST_NAME = ".rocboard-export.json"  # in an export's folder: the files it wrote (name -> bytes)
MANIFEST_MAX_BYTES = 1 * MIB
FOREIGN_SCAN_MAX = 10_000  # entries of an existing folder looked at; more: all foreign
FOREIGN_SHOWN = 5


def default_export_root() -> Path:
    """The page's one export root unless `--export-root` names others: a folder of its own in
    the home, made (0700) by the first export."""
    return Path.home() / DEFAULT_EXPORT_FOLDER


def default_export_roots() -> list[Path]:
    return [default_export_root()]


def app_folder() -> Path:
    """RocBoard's own checkout: the folder holding app.py, ui/ and backend/."""
    return Path(__file__).resolve().parents[2]


def python_environment() -> list[Path]:
    """The Python RocBoard runs in: its prefixes (a venv's folder) and its site-packages, read
    when asked. A prefix that is `/` or holds the home (a Python installed into the home itself)
    is left out: its site-packages still count."""
    import site
    import sys

    found = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix]
    try:
        found += list(site.getsitepackages())
    except AttributeError:  # an old virtualenv's site module
        pass
    user_site = site.getusersitepackages()
    found += [user_site] if isinstance(user_site, str) else list(user_site or ())
    found += [entry for entry in sys.path if entry and os.path.basename(os.path.normpath(entry)) in ("site-packages", "dist-packages")]
    home = Path(os.path.realpath(Path.home()))
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix) if p}
    out: list[Path] = []
    for entry in found:
        if not entry:
            continue
        path = Path(os.path.realpath(entry))
        if str(path) in prefixes and (path == Path(path.anchor) or _inside(home, path)):
            continue
        if path not in out:
            out.append(path)
    return out


def resolved_roots(roots: Sequence[Path] | None) -> tuple[Path, ...] | None:
    if roots is None:
        return None
    return tuple(Path(os.path.realpath(os.path.expanduser(str(root)))) for root in roots)


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def trusted_bases(roots: Sequence[Path] | None) -> list[Path]:
    """Folders whose own path may go through links (the system's, the operator's): the home,
    the default export root and each export root, as given and resolved. Below them, an export
    path follows no link."""
    given = [Path.home(), default_export_root(), *(Path(os.path.expanduser(str(root))) for root in roots or ())]
    bases: list[Path] = []
    for path in given:
        for form in (Path(os.path.normpath(path)), Path(os.path.realpath(path))):
            if form.is_absolute() and form not in bases:
                bases.append(form)
    return bases


def link_on_the_way(literal: Path, bases: Sequence[Path]) -> Path | None:
    """The first link among the folders of `literal` below the deepest trusted base holding it
    (from `/` when none does); the folder itself is checked apart."""
    holding = [base for base in bases if literal != base and literal.is_relative_to(base)]
    base = max(holding, key=lambda b: len(b.parts)) if holding else Path(literal.anchor)
    here = base
    for part in literal.relative_to(base).parts[:-1]:
        here = here / part
        try:
            info = os.lstat(here)
        except OSError:
            return None  # missing (made by the export) or unusable (said later)
        if stat.S_ISLNK(info.st_mode):
            return here
    return None


def protected_finding(raw: str, real: Path, keep_out: Sequence[Path] = ()) -> Finding | None:
    """What no export writes into or replaces, whatever is typed or ticked: `keep_out` (the base
    model's folder, the run, the runs folder), the Python environment RocBoard runs in,
    RocBoard's own folder, the home's hidden folders. A folder the target is inside is named
    first (the most particular: the base model inside RocBoard's folder is "the base model"),
    then one it would replace with it (RocBoard first)."""
    kept = [("export-dir-kept", "kept", Path(os.path.realpath(folder))) for folder in keep_out]
    env = [("export-dir-environment", "env", folder) for folder in python_environment()]
    app = [("export-dir-app", "app", app_folder())]
    for rule, name, folder in kept + env + app:
        if _inside(real, folder):
            named: dict[str, Any] = {name: str(folder)}
            return Finding.of("export_dir", rule, path=repr(raw), **named)
    home = Path(os.path.realpath(Path.home()))
    if real != home and real.is_relative_to(home):
        first = real.relative_to(home).parts[0]
        if first.startswith("."):
            return Finding.of("export_dir", "export-dir-hidden", path=repr(raw), hidden=str(home / first))
    for rule, name, folder in app + env + kept:
        if _inside(folder, real):
            named = {name: str(folder)}
            return Finding.of("export_dir", rule, path=repr(raw), **named)
    return None


def read_manifest(folder: Path) -> dict[str, int]:
    """The files an export wrote in `folder` (its MANIFEST_NAME: name -> bytes); {} when there
    is none or it is not one (a link, too big, not that JSON)."""
    try:
        fd = os.open(folder / MANIFEST_NAME, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return {}
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MANIFEST_MAX_BYTES:
            return {}
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = json.loads(handle.read(MANIFEST_MAX_BYTES))
    except (OSError, ValueError):
        return {}
    finally:
        os.close(fd)
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        return {}
    return {name: size for name, size in files.items() if isinstance(name, str) and isinstance(size, int) and not isinstance(size, bool)}


def write_manifest(folder: Path, run_id: str) -> None:
    files = {entry.name: entry.stat(follow_symlinks=False).st_size for entry in os.scandir(folder) if entry.is_file(follow_symlinks=False) and entry.name != MANIFEST_NAME}
    (folder / MANIFEST_NAME).write_text(json.dumps({"written_by": "rocboard export", "run": run_id, "files": files}, indent=1, sort_keys=True), encoding="utf-8")


def foreign_entries(folder: Path) -> tuple[str, ...]:
    """The names in an existing `folder` that no RocBoard export wrote: everything but the
    regular files its manifest lists with their size (and the manifest). Sorted."""
    written = read_manifest(folder)
    foreign = []
    with os.scandir(folder) as entries:
        for count, entry in enumerate(entries):
            if count >= FOREIGN_SCAN_MAX:
                foreign.append("…")
                break
            if entry.name == MANIFEST_NAME and written:
                continue
            try:
                ours = entry.is_file(follow_symlinks=False) and written.get(entry.name) == entry.stat(follow_symlinks=False).st_size
            except OSError:
                ours = False
            if not ours:
                foreign.append(entry.name)
    return tuple(sorted(foreign))


def foreign_finding(raw: str, real: Path, foreign: Sequence[str]) -> Finding:
    shown = ", ".join(foreign[:FOREIGN_SHOWN]) + (", …" if len(foreign) > FOREIGN_SHOWN else "")
    return Finding.of("export_dir", "export-dir-foreign", path=repr(raw), count=len(foreign), names=shown, name=real.name)


def replace_confirmed(request_confirm: str, real: Path) -> bool:
    """The user typed the folder's own name (exactly) to replace what no export wrote."""
    return bool(request_confirm) and request_confirm.strip() == real.name


def check_target(
    raw: str, roots: Sequence[Path] | None, overwrite: bool, keep_out: Sequence[Path] = (), confirm: str = ""
) -> tuple[Path | None, list[Finding]]:
    """The export folder `raw` names, resolved, or why not: the one check for the page and the
    command line. `roots` None: anywhere (the command line: its user is the machine's own);
    every other rule is the same for both:

    - a full path; no link as the folder itself, nor among its folders below the home or an
      export root (`link_on_the_way`);
    - never `/`, the home or a folder holding it; never into or over `keep_out` (the base
      model's folder, the run, the runs folder), the Python environment, RocBoard's own folder
      or a hidden folder of the home (`protected_finding`): no confirmation unlocks these;
    - inside a root, not a root itself (the page);
    - an existing non-empty folder only with `overwrite`, and when it holds anything no export
      wrote (`foreign_entries`), only with its name typed in `confirm` (which implies
      `overwrite`)."""
    raw = (raw or "").strip()
    if not raw:
        return None, [Finding.of("export_dir", "export-dir-empty")]
    problem = path_problem(raw)
    if problem:
        return None, [Finding.of("export_dir", "export-dir-unusable", path=repr(raw[:120]), problem=problem)]
    expanded = os.path.expanduser(raw)
    if not os.path.isabs(expanded):
        return None, [Finding.of("export_dir", "export-dir-not-absolute", path=repr(raw))]
    literal = Path(os.path.normpath(expanded))
    if os.path.islink(literal):
        return None, [Finding.of("export_dir", "export-dir-link", path=repr(raw), target=os.path.realpath(literal))]
    link = link_on_the_way(literal, trusted_bases(roots))
    if link is not None:
        real_path = os.path.realpath(literal)
        return None, [Finding.of("export_dir", "export-dir-link", message="export-dir-link-on-way", path=repr(raw), link=str(link), target=os.path.realpath(link), real=real_path)]
    real = Path(os.path.realpath(literal))
    home = Path(os.path.realpath(Path.home()))
    if real == Path(real.anchor) or _inside(home, real):
        return None, [Finding.of("export_dir", "export-dir-is-root", path=repr(raw))]
    protected = protected_finding(raw, real, keep_out)
    if protected is not None:
        return None, [protected]
    allowed = resolved_roots(roots)
    if allowed is not None:
        shown = ", ".join(str(root) for root in allowed)
        if not allowed:
            return None, [Finding.of("export_dir", "export-dir-outside", path=repr(raw), roots="-")]
        if not any(_inside(real, root) for root in allowed):
            return None, [Finding.of("export_dir", "export-dir-outside", path=repr(raw), roots=shown)]
        if any(real == root for root in allowed):
            return None, [Finding.of("export_dir", "export-dir-is-root", path=repr(raw))]
    try:
        info = os.lstat(real)
    except FileNotFoundError:
        return real, []
    except OSError as error:
        return None, [Finding.of("export_dir", "export-dir-unusable", path=repr(raw), problem=os_error(error))]
    if not stat.S_ISDIR(info.st_mode):
        return None, [Finding.of("export_dir", "export-dir-not-dir", path=repr(raw))]
    try:
        foreign = foreign_entries(real)
        empty = not foreign and not any(True for _ in os.scandir(real))
    except OSError as error:
        return None, [Finding.of("export_dir", "export-dir-unusable", path=repr(raw), problem=os_error(error))]
    if empty:
        return real, []
    refusal = replace_finding(raw, real, foreign, overwrite, confirm)
    return (None, [refusal]) if refusal is not None else (real, [])


def replace_finding(raw: str, real: Path, foreign: Sequence[str], overwrite: bool, confirm: str) -> Finding | None:
    """Why the existing non-empty folder `real` may not be replaced, or None: the replace box
    (`overwrite`) for what an export wrote; its name typed (`confirm`) for anything else."""
    confirmed = replace_confirmed(confirm, real)
    if foreign and not confirmed:
        if not overwrite and not confirm:
            return Finding.of("export_dir", "export-dir-exists", path=str(real))
        return foreign_finding(raw, real, foreign)
    if not foreign and not (overwrite or confirmed):
        return Finding.of("export_dir", "export-dir-exists", path=str(real))
    return None


def foreign_or_none(folder: Path) -> tuple[str, ...]:
    try:
        return foreign_entries(folder) if folder.is_dir() else ()
    except OSError:
        return ()


def existing_parent(path: Path) -> Path:
    """The nearest folder of `path` that exists (where its filesystem is measured)."""
    here = path
    while not here.exists() and here != here.parent:
        here = here.parent
    return here
