"""Pure readers of what a chat server says: its streamed answer (server-sent events in the
OpenAI format LLaMA-Factory's API server writes) and its log while it loads.

Tested on output captured from the real server (tests/fixtures/chat/)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

DONE = "[DONE]"
# One SSE line the server writes is one JSON chunk of a few hundred bytes; a longer line is
# not the server's (the reader stops rather than buffer without end).
MAX_EVENT_LINE_BYTES = 64 * 1024


@dataclass(frozen=True)
class StreamChunk:
    """One event of a streamed answer: text to append, and/or the reason it finished."""

    content: str = ""
    finish_reason: str | None = None
    done: bool = False  # the `data: [DONE]` line: the answer is complete


def parse_sse_line(line: str) -> StreamChunk | None:
    """One line of the stream -> a chunk, or None for blank lines, comments and other fields.
    A `data:` line that is not the server's JSON raises ValueError."""
    line = line.rstrip("\r\n")
    if not line.startswith("data:"):
        return None
    data = line[len("data:") :].strip()
    if data == DONE:
        return StreamChunk(done=True)
    payload = json.loads(data)
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("a streamed chunk without choices")
    choice = choices[0]
    delta = choice.get("delta") or {}
    content = delta.get("content") if isinstance(delta, dict) else None
    finish = choice.get("finish_reason")
    return StreamChunk(content=content if isinstance(content, str) else "", finish_reason=finish if isinstance(finish, str) else None)


def parse_sse_deltas(lines: Iterable[str]) -> Iterator[StreamChunk]:
    """The chunks of a stream, in order, up to and including [DONE]."""
    for line in lines:
        chunk = parse_sse_line(line)
        if chunk is None:
            continue
        yield chunk
        if chunk.done:
            return


# --- the server's log while it loads -------------------------------------------------------

# Stages in the order LLaMA-Factory goes through them, each recognised by a line of its log
# (transformers' and LLaMA-Factory's own INFO lines, then uvicorn's).
LOAD_STAGES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("tokenizer", re.compile(r"loading configuration file|tokenization_utils|Add .* to stop words")),
    ("model", re.compile(r"loading weights file|Loading weights|Loading checkpoint shards")),
    ("adapter", re.compile(r"Loaded adapter\(s\)|Merged \d+ adapter")),
    ("ready", re.compile(r"Uvicorn running on")),
)
STAGES = ("starting", *(name for name, _ in LOAD_STAGES))

OOM_PATTERNS = (
    "CUDA out of memory",
    "HIP out of memory",
    "OutOfMemoryError",
    "DefaultCPUAllocator: can't allocate memory",
    "MemoryError",
)


def parse_load_stage(log_text: str) -> str:
    """The furthest stage the log shows ("starting" when none yet)."""
    reached = "starting"
    for name, pattern in LOAD_STAGES:
        if pattern.search(log_text):
            reached = name
    return reached


@dataclass(frozen=True)
class LoadFailure:
    kind: str  # "oom" | "error"
    line: str  # the log line that says why (the exception's last line), bounded


def parse_load_failure(log_text: str, max_line: int = 300) -> LoadFailure | None:
    """Why a server that exited failed to load, from its log's tail: out of memory, else the
    traceback's last line (the exception), else None."""
    lines = [line.strip() for line in log_text.splitlines() if line.strip()]
    for line in reversed(lines):
        if any(pattern in line for pattern in OOM_PATTERNS):
            return LoadFailure("oom", line[:max_line])
    for line in reversed(lines):
        if re.match(r"^[\w.]+(Error|Exception|Interrupt)\b", line) or re.match(r"^[\w.]+: ", line) and "Error" in line.split(":", 1)[0]:
            return LoadFailure("error", line[:max_line])
    return LoadFailure("error", lines[-1][:max_line]) if lines else None


__all__ = [
    "DONE",
    "LOAD_STAGES",
    "LoadFailure",
    "MAX_EVENT_LINE_BYTES",
    "OOM_PATTERNS",
    "STAGES",
    "StreamChunk",
    "parse_load_failure",
    "parse_load_stage",
    "parse_sse_deltas",
    "parse_sse_line",
]
