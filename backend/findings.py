"""A finding: one problem found in a config (or a log, or a machine), with its fix.

Every checker in RocBoard speaks in findings so the page, the command line and the
tests can show them the same way: which key, what is wrong, what to do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["problem", "warning"]


@dataclass(frozen=True)
class Finding:
    key: str  # the config key (or form field) the finding is about, e.g. "learning_rate"
    problem: str  # what is wrong, in plain words
    fix: str  # what to do about it
    severity: Severity = "problem"
    rule: str = ""  # the name of the rule that produced it, for tests and i18n
    # When the fix can be applied mechanically: the keys to set (value None = remove the key).
    patch: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """One line for the command line: key, problem, fix."""
        return f"{self.severity}: {self.key}: {self.problem} Fix: {self.fix}"


def has_problems(findings: list[Finding]) -> bool:
    return any(f.severity == "problem" for f in findings)
