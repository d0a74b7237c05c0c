"""What the OS cannot look up at all: shared by the checks of every path a user types
(imports nothing of backend.config, so any module of it may use it). The reasons are
messages (`path-problem.*`), put into the reader's language where a finding shows them."""

from __future__ import annotations

import os
from pathlib import Path

from backend.i18n import Message

PATH_MAX_BYTES = 4096  # Linux PATH_MAX
NAME_MAX_BYTES = 255  # Linux NAME_MAX: one component of a path


def path_problem(raw: str) -> Message | str:
    """Why the OS cannot look `raw` up at all (before any stat), or "": a NUL byte
    (ValueError "embedded null byte"), a path or one of its names too long for Linux
    (OSError "File name too long"), text that is not encodable as a file name."""
    if "\0" in raw:
        return Message("path-problem.nul")
    try:
        encoded = os.fsencode(raw)
    except UnicodeError:
        return Message("path-problem.not-encodable")
    if len(encoded) >= PATH_MAX_BYTES:
        return Message("path-problem.too-long", length=len(encoded), limit=PATH_MAX_BYTES - 1)
    longest = max((len(part) for part in encoded.split(b"/")), default=0)
    if longest > NAME_MAX_BYTES:
        return Message("path-problem.name-too-long", length=longest, limit=NAME_MAX_BYTES)
    return ""


def default_data_roots() -> list[Path]:
    """Where a dataset may be registered by path, and a key of Other keys may read from, when
    the app is given no --data-root: the user's home and the folder the app started in (the
    demo's data is there)."""
    roots = [Path.home(), Path.cwd()]
    return [root for i, root in enumerate(roots) if root not in roots[:i]]
