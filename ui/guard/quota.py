"""The upload quota: the uploads one app holds (Gradio's cache and the staging folder), capped
in number and bytes; the body cap of an upload; the refusal (status, text, Retry-After) every
check of the edge answers with.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, MutableSet
from dataclasses import dataclass
from pathlib import Path

MIB = 1024 * 1024
# One file of at most 1 MiB plus the multipart framing; serve raises it with --max-upload-mb
# (upload_body_cap): Gradio's own max_file_size is the per-file limit.
UPLOAD_BODY_CAP = 2 * MIB


def upload_body_cap(max_file_bytes: int) -> int:
    """The largest upload body for files of at most `max_file_bytes`: the file plus 1 MiB of
    multipart framing (headers, boundary)."""
    return max(UPLOAD_BODY_CAP, max_file_bytes + MIB)


@dataclass(frozen=True)
class Refusal:
    status: int
    text: str
    retry_after_s: float | None = None

    def headers(self) -> list[tuple[bytes, bytes]]:
        if self.retry_after_s is None:
            return []
        return [(b"retry-after", str(max(1, math.ceil(self.retry_after_s))).encode())]


def upload_refusal(held: list[tuple[float, int]], now: float, max_files: int, max_bytes: int, max_age_s: float) -> Refusal | None:
    """Whether one more upload may come, given the (mtime, size) of the uploads still held
    (those older than `max_age_s` already deleted)."""
    if len(held) >= max_files or sum(size for _, size in held) >= max_bytes:
        oldest = min((mtime for mtime, _ in held), default=now)
        wait = max(1.0, oldest + max_age_s - now)
        return Refusal(429, f"Too many uploads are held ({len(held)} files); try again in {math.ceil(wait / 60)} min.\n", wait)
    return None


class UploadQuota:
    """The uploads one app holds: Gradio's set of uploaded files (what it moved into its cache)
    plus the files in the upload staging folder (bodies being received, or left behind by a
    refused upload). An upload older than `max_age_s` has been read long ago (the page reads an
    upload as it arrives) and is deleted before counting. Leftovers in the staging folder are
    deleted whenever no upload is in flight."""

    def __init__(
        self,
        uploaded: MutableSet[str] | None = None,
        staging: Path | None = None,
        max_files: int = 64,
        max_bytes: int = 32 * MIB,
        max_age_s: float = 3600.0,
        clock: Callable[[], float] = time.time,
    ):
        self.uploaded = uploaded if uploaded is not None else set()
        self.staging = staging
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.clock = clock
        self.in_flight = 0

    def _staging_files(self) -> list[Path]:
        if self.staging is None:
            return []
        try:
            return [p for p in self.staging.iterdir() if p.is_file() and not p.is_symlink() and p.name.startswith("tmp")]
        except OSError:
            return []

    def held(self) -> list[tuple[float, int]]:
        now = self.clock()
        held = []
        for name in list(self.uploaded):
            try:
                info = Path(name).lstat()
            except OSError:
                self.uploaded.discard(name)
                continue
            if now - info.st_mtime > self.max_age_s:
                Path(name).unlink(missing_ok=True)
                self.uploaded.discard(name)
                continue
            held.append((info.st_mtime, info.st_size))
        for path in self._staging_files():
            try:
                info = path.stat()
            except OSError:
                continue
            held.append((info.st_mtime, info.st_size))
        return held

    def refusal(self) -> Refusal | None:
        return upload_refusal(self.held(), self.clock(), self.max_files, self.max_bytes, self.max_age_s)

    def begin(self) -> None:
        self.in_flight += 1

    def end(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            # Every body received has been moved into the cache or refused: what is left in
            # staging is a refused upload's body.
            for path in self._staging_files():
                path.unlink(missing_ok=True)
