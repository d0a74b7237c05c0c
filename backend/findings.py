"""A finding: one problem found in a config (or a log, or a machine), with its fix.

Every checker in RocBoard speaks in findings so the page, the command line and the
tests can show them the same way: which key, what is wrong, what to do.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from backend.i18n import render_message

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
    # The message's parameters. Set (by `Finding.of`) when the text comes from the catalogue
    # (`check.<rule>.problem` / `.fix`): any locale renders it from these, no matching back.
    # None for a finding built by hand from finished sentences: those are shown as written.
    params: dict[str, Any] | None = None
    # The message id when a rule has several messages ("nproc-range-digits" for the rule
    # "nproc-range"): the texts are `check.<message>.problem` / `.fix`. Empty: the rule's own.
    message: str = ""
    # A line of another program (LLaMA-Factory's own message), shown apart from our words as
    # the quoted line it is: never a parameter of a translated sentence.
    quote: str = ""

    @classmethod
    def of(
        cls,
        key: str,
        rule: str,
        *,
        message: str = "",
        severity: Severity = "problem",
        patch: dict[str, Any] | None = None,
        quote: str = "",
        **params: Any,
    ) -> Finding:
        """A finding whose words are the catalogue's `check.<message or rule>.problem` / `.fix`,
        filled with `params` (and `{key}` with the finding's key); `problem` and `fix` hold the
        English rendering (command line)."""
        message_id = message or rule
        values = {"key": key, **params}  # `{key}` in a message is the finding's key
        return cls(
            key=key,
            problem=render_message(f"check.{message_id}.problem", values, "en"),
            fix=render_message(f"check.{message_id}.fix", values, "en"),
            severity=severity,
            rule=rule,
            patch=dict(patch or {}),
            params=dict(params),
            message=message,
            quote=quote,
        )

    def text(self, locale: str = "en") -> tuple[str, str]:
        """(problem, fix) in `locale`."""
        if self.params is not None:
            message_id = self.message or self.rule
            values = {"key": self.key, **self.params}
            return (
                render_message(f"check.{message_id}.problem", values, locale),
                render_message(f"check.{message_id}.fix", values, locale),
            )
        # Built by hand from finished sentences (tests, a third party's words): shown as written.
        return self.problem, self.fix

    def line(self) -> str:
        """One line for the command line: key, problem, fix (and the quoted line, if any)."""
        quoted = f' LLaMA-Factory: "{self.quote}"' if self.quote else ""
        return f"{self.severity}: {self.key}: {self.problem} Fix: {self.fix}{quoted}"


def has_problems(findings: list[Finding]) -> bool:
    return any(f.severity == "problem" for f in findings)


def translate_finding(finding: Finding, locale: str) -> Finding:
    """`finding` with its problem and fix in `locale` (unchanged where no template fits)."""
    problem, fix = finding.text(locale)
    if problem == finding.problem and fix == finding.fix:
        return finding
    return replace(finding, problem=problem, fix=fix)
