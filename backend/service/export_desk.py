"""The Export tab's questions: merge a run's adapter into its base, GGUF, where and how big.

One export at a time for the app (a merge holds a whole model in memory). The rules live in
backend/export/ (merge.py the plan, target.py where, size.py how big, job.py the job); here: which runs and checkpoints to offer, the plan line shown before
Export, the job, its progress in words, and the app's end (`close()`: the export stops, its
staging folder goes, no process stays).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.export import gguf_convert as gguf_tools
from backend.export.job import ExportJob, ExportProgress
from backend.export.merge import DEVICES, GGUF_CHOICES, ExportRequest, exportable_runs, plan_export
from backend.export.size import size_text
from backend.export.target import default_export_root
from backend.findings import Finding
from backend.i18n import render_message
from backend.runs import RunNotFound, artifacts

if TYPE_CHECKING:
    from backend.runs import RunStore

CLOSE_WAIT_S = 30.0
PHASES = ("config", "loading", "merging", "saving", "gguf", "finishing", "done", "failed", "cancelled")


@dataclass(frozen=True)
class StartAnswer:
    started: bool
    findings: tuple[Finding, ...] = ()


class ExportDesk:
    def __init__(self, store: RunStore, roots: Sequence[Path] | None, export_dir: Path | None):
        self.store = store
        # None: anywhere (the command line); the page always has roots.
        self.roots = None if roots is None else [Path(root) for root in roots]
        self.export_dir = export_dir
        self._job: ExportJob | None = None
        self._lock = threading.Lock()

    # --- what the page offers ---------------------------------------------------------------

    def runs(self) -> list[str]:
        return exportable_runs(self.store)

    def checkpoints(self, run_id: str | None) -> list[str]:
        try:
            return artifacts.adapter_checkpoints(self.store.run_dir(run_id)) if run_id else []
        except RunNotFound:
            return []

    def default_target(self, run_id: str | None) -> str:
        """The run's own folder in the default export root (~/rocboard-exports), or in the first
        --export-root when that one is not allowed."""
        default = default_export_root()
        roots = self.roots or [default]
        base = default if default in roots else roots[0]
        return str(base / (run_id or "model"))

    @staticmethod
    def converter() -> Path | None:
        return gguf_tools.find_converter()

    def request(
        self, run_id: str | None, target: str | None, checkpoint: str | None, shard_gb: Any, device: str | None, gguf: str | None, overwrite: bool, confirm: str | None = ""
    ) -> ExportRequest:
        try:
            shard = int(float(shard_gb))  # a Number widget hands floats
        except (TypeError, ValueError):
            shard = -1
        return ExportRequest(
            run_id=str(run_id or ""),
            target=str(target or ""),
            checkpoint=str(checkpoint or ""),
            shard_gb=shard,
            device=device if device in DEVICES else str(device),
            gguf=gguf if gguf in GGUF_CHOICES else str(gguf or "none"),
            overwrite=bool(overwrite),
            confirm=str(confirm or "")[:255],
        )

    # --- before starting --------------------------------------------------------------------

    def plan_markdown(self, request: ExportRequest, locale: str = "en") -> str:
        """The size line: what is needed and what is free; or why the export cannot start."""
        from backend.view import findings_markdown

        if not request.run_id:
            return ""
        plan, findings = plan_export(self.store, request, self.roots)
        if plan is None:
            return findings_markdown(findings, locale)
        line = render_message(
            "export.plan",
            {
                "needed": size_text(plan.needed_disk),
                "free": size_text(plan.free_disk),
                "params": f"{plan.size.params:,}",
                "dtype": plan.size.dtype,
            },
            locale,
        )
        if plan.needed_ram:
            line += " " + render_message("export.plan_ram", {"needed": size_text(plan.needed_ram), "free": size_text(plan.available_ram)}, locale)
        if plan.replaces and plan.foreign:
            line += " " + render_message("export.plan_replaces_foreign", {"path": str(plan.target), "count": len(plan.foreign)}, locale)
        elif plan.replaces:
            line += " " + render_message("export.plan_replaces", {"path": str(plan.target)}, locale)
        return line + ("\n\n" + findings_markdown(findings, locale) if findings else "")

    def refused_markdown(self, request: ExportRequest, answer: StartAnswer, locale: str = "en") -> str:
        """The plan line after a refused Export: the plan's own line (which already holds the
        plan's refusals), and a refusal the plan does not make (another export running)."""
        from backend.view import findings_markdown

        line = self.plan_markdown(request, locale)
        extra = [finding for finding in answer.findings if finding.rule == "export-busy"]
        return line + ("\n\n" + findings_markdown(extra, locale) if extra else "")

    # --- the job ----------------------------------------------------------------------------

    def start(self, request: ExportRequest) -> StartAnswer:
        with self._lock:
            if self._job is not None and self._job.progress.running:
                return StartAnswer(False, (Finding.of("export", "export-busy", run=self._job.plan.request.run_id),))
            plan, findings = plan_export(self.store, request, self.roots)
            if plan is None or findings:
                return StartAnswer(False, tuple(findings))
            self._job = ExportJob(plan, self.export_dir)
            self._job.start()
            return StartAnswer(True)

    def progress(self) -> ExportProgress | None:
        job = self._job
        return job.progress if job is not None else None

    def running(self) -> bool:
        job = self._job
        return job is not None and job.progress.running

    def child_pid(self) -> int | None:
        job = self._job
        return job.child_pid if job is not None else None

    def cancel(self) -> None:
        job = self._job
        if job is not None:
            job.cancel()

    def wait(self, timeout: float) -> ExportProgress | None:
        job = self._job
        if job is not None:
            job.join(timeout)
        return self.progress()

    def status_markdown(self, locale: str = "en", now: float | None = None) -> str:
        from backend.view import code_span, escape_markdown, findings_markdown

        progress = self.progress()
        if progress is None:
            return ""
        elapsed = int(progress.elapsed(now))
        head = render_message(
            "export.status",
            {"phase": render_message(f"export.phase.{progress.phase}", {}, locale), "seconds": elapsed, "run": progress.run_id},
            locale,
        )
        lines = [head]
        if progress.running and progress.expected_bytes:
            # Toward the size the plan showed; past it, no longer progress: the end is near.
            key = "export.written" if progress.written_bytes <= progress.expected_bytes else "export.written_over"
            lines.append(render_message(key, {"written": size_text(progress.written_bytes), "expected": size_text(progress.expected_bytes)}, locale))
        if progress.findings:
            lines.append(findings_markdown(progress.findings, locale))
        result = progress.result
        if result is not None:
            lines.append(render_message("export.done_in", {"path": str(result.target).replace("`", "ʼ"), "seconds": f"{result.seconds:.1f}", "size": size_text(result.total_bytes)}, locale))
            lines.append("\n".join(f"- {code_span(name, 200)} · {size_text(size)}" for name, size in result.files[:100]))
            if result.gguf:
                lines.append(
                    render_message(
                        "export.gguf_read",
                        {"architecture": str(result.gguf.get("architecture")), "tensors": result.gguf.get("tensors"), "tokens": result.gguf.get("tokens")},
                        locale,
                    )
                )
            for warning in result.warnings:
                lines.append("⚠ " + render_message(f"export.warning.{warning}", {}, locale))
            if result.download is None:
                lines.append(render_message("export.no_download", {"path": escape_markdown(str(result.target), 1000)}, locale))
        return "\n\n".join(lines)

    def download(self) -> Path | None:
        progress = self.progress()
        return progress.result.download if progress is not None and progress.result is not None else None

    def close(self) -> None:
        """Stops an export in progress (its staging folder is removed)."""
        job = self._job
        if job is None:
            return
        job.cancel()
        deadline = time.monotonic() + CLOSE_WAIT_S
        job.join(max(0.0, deadline - time.monotonic()))
