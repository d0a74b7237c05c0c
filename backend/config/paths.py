"""What the OS cannot look up at all: shared by the checks of every path a user types
(imports nothing of backend.config, so any module of it may use it)."""

from __future__ import annotations

import os
from pathlib import Path

PATH_MAX_BYTES = 4096  # Linux PATH_MAX
NAME_MAX_BYTES = 255  # Linux NAME_MAX: one component of a path


def path_problem(raw: str) -> str:
    """Why the OS cannot look `raw` up at all (before any stat), or "": a NUL byte
    (ValueError "embedded null byte"), a path or one of its names too long for Linux
    (OSError "File name too long"), text that is not encodable as a file name."""
    if "\0" in raw:
        return "it holds a NUL character"
    try:
        encoded = os.fsencode(raw)
    except UnicodeError:
        return "it holds characters a file name cannot have"
    if len(encoded) >= PATH_MAX_BYTES:
        return f"it is {len(encoded)} bytes long; a path has at most {PATH_MAX_BYTES - 1}"
    longest = max((len(part) for part in encoded.split(b"/")), default=0)
    if longest > NAME_MAX_BYTES:
        return f"one of its names is {longest} bytes long; a file or folder name has at most {NAME_MAX_BYTES}"
    return ""


def default_data_roots() -> list[Path]:
    """Where a dataset may be registered by path, and a key of Other keys may read from, when
    the app is given no --data-root: the user's home and the folder the app started in (the
    demo's data is there)."""
    roots = [Path.home(), Path.cwd()]
    return [root for i, root in enumerate(roots) if root not in roots[:i]]
