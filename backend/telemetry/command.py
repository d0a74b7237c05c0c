"""What the tool-based sources (amd-smi, rocm-smi, nvidia-smi) share: probe once, read with a
timeout, turn "the tool cannot work here" into a status with a hint, and never raise."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from backend.i18n import Message
from backend.telemetry.base import Reading, SourceStatus
from backend.telemetry.tool import ToolOutput, find_tool, run_tool
from backend.telemetry.topology import (
    CardIdentity,
    KfdGpu,
    VisibleGpu,
    read_kfd_gpus,
    to_run_indices,
    visible_gpus,
    with_visibility,
)

# What a source says and what to do are messages (backend/i18n: `telemetry.*`): English as
# strings (the command line), in the page's language on the Doctor tab; what a tool printed
# is a value inside them, as written.
GROUPS_HINT = Message("telemetry.hint.groups")
DRIVER_HINT = Message("telemetry.hint.driver")


def tool_said(line: str) -> Message:
    """A line a tool printed, as a message value: written as is in English, quoted in another
    language (the tool's own words are never a clause of a translated sentence)."""
    return Message("telemetry.tool_said", line=line)


def _json_values(text: str) -> Iterator[Any]:
    """Each top-level JSON object or array in `text`, in order; stray text around and
    between them is skipped."""
    decoder = json.JSONDecoder()
    position = 0
    while True:
        starts = [p for p in (text.find("{", position), text.find("[", position)) if p >= 0]
        if not starts:
            return
        start = min(starts)
        try:
            value, position = decoder.raw_decode(text, start)
        except ValueError:
            position = start + 1
            continue
        yield value


def extract_json(text: str) -> Any | None:
    """The first JSON object or array in `text`: tools print warnings (Python
    SyntaxWarnings, "WARNING: ..." lines) on stdout before their JSON."""
    return next(_json_values(text), None)


def iter_json(text: str) -> list[Any]:
    """Every top-level JSON object or array in `text`, in order (stray text between them
    skipped): one amd-smi release printed its whole answer twice."""
    return list(_json_values(text))


def first_line(text: str, limit: int = 200) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:limit]
    return ""


class CommandSource:
    """A source that runs a command-line tool. Subclasses say how to call it and parse it."""

    name = ""
    tool = ""
    install_hint: str = ""
    # A tool call costs a process start (rocm-smi: ~0.3 s of CPU, mostly Python start-up);
    # the sampler reads it no more often than this whatever its own interval.
    min_interval_s = 2.0

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        sysfs_root: Path = Path("/sys"),
        timeout_s: float = 5.0,
        probe_timeout_s: float = 15.0,  # the first call of a tool has taken seconds
    ) -> None:
        self.env = dict(os.environ if env is None else env)
        self.sysfs_root = Path(sysfs_root)
        self.timeout_s = timeout_s
        self.probe_timeout_s = probe_timeout_s
        self.last_failure = ""
        self._kfd: list[KfdGpu] | None = None
        self._gpus: list[VisibleGpu] | None = None

    # --- what subclasses provide -------------------------------------------------------

    def argv(self) -> list[str]:
        raise NotImplementedError

    def parse(self, output: ToolOutput) -> tuple[list[Reading], dict[int, CardIdentity]]:
        """Card-numbered readings and how to recognise each card."""
        raise NotImplementedError

    def unavailable(self, output: ToolOutput) -> SourceStatus | None:
        """A status when the output says the tool cannot work on this machine at all."""
        return None

    def after_probe(self) -> None:
        """Hook for a source that needs a second command once (amd-smi's card list)."""

    # --- the Source protocol -----------------------------------------------------------

    def probe(self) -> SourceStatus:
        if find_tool(self.tool, self.env) is None:
            return SourceStatus(self.name, False, Message("telemetry.tool_not_found", tool=self.tool), self.install_hint)
        output = run_tool(self.argv(), self.probe_timeout_s, self.env)
        if output.error:
            return SourceStatus(self.name, False, output.error, Message("telemetry.hint.check_command", command=" ".join(self.argv())))
        status = self.unavailable(output)
        if status is not None:
            return status
        parse_failure: str = ""
        try:
            readings, _ = self.parse(output)
        except Exception as exc:  # a parser bug must not take the app down
            readings = []
            parse_failure = Message("telemetry.parser_failed", error=str(exc))  # said instead of the tool's stdout
        if not readings:
            printed = first_line(output.stderr) or (None if parse_failure else first_line(output.stdout))
            seen = tool_said(printed) if printed else parse_failure or Message("telemetry.no_output")
            return SourceStatus(self.name, False, Message("telemetry.tool_no_gpu", tool=self.tool, seen=seen), self.install_hint)
        self.after_probe()
        self._kfd = read_kfd_gpus(self.sysfs_root)
        self._gpus = visible_gpus(self._kfd, self.env) if self._kfd is not None else None
        return SourceStatus(self.name, True, Message("telemetry.tool_works", tool=self.tool, count=len(readings), seconds=f"{output.seconds:.2f}"))

    def set_run_environment(self, run_env: Mapping[str, str]) -> None:
        """Show the GPUs the run sees, by the run's own *_VISIBLE_DEVICES (after probe)."""
        self.env = with_visibility(self.env, run_env)
        self._gpus = visible_gpus(self._kfd, self.env) if self._kfd is not None else None

    def read(self) -> list[Reading]:
        output = run_tool(self.argv(), self.timeout_s, self.env)
        if output.error:
            self.last_failure = output.error
            return []
        try:
            readings, identities = self.parse(output)
        except Exception as exc:
            readings, identities = [], {}
            self.last_failure = Message("telemetry.could_not_parse", tool=self.tool, error=str(exc))
            return []
        if not readings:
            printed = first_line(output.stdout) or first_line(output.stderr)
            self.last_failure = Message("telemetry.no_readings", tool=self.tool, line=tool_said(printed) if printed else Message("telemetry.empty_output"))
            return []
        self.last_failure = ""
        return self.to_run_indices(readings, identities)

    def to_run_indices(self, readings: list[Reading], identities: dict[int, CardIdentity]) -> list[Reading]:
        return to_run_indices(readings, identities, self._gpus, self.env)
