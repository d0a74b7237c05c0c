"""The Validate tab's desk (and `python app.py validate`'s): start a validation path, follow
it, stop it; the reports kept under `<runs>/validation/`, one compared with another, one
uploaded. docs/validate.md is its manual.

One path at a time per app, on a thread of its own; its rungs are ordinary runs through the
app's run manager, so a path never starts while another run trains here (it would only wait
in the queue behind it, and its figures would be that run's too).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from backend.runs import safe_files
from backend.validate import report as reports
from backend.validate.path import PathStatus, RequestError, Trainer, ValidationPath, ValidationRequest, check_request
from backend.validate.report import Comparison, ValidationReport

log = logging.getLogger(__name__)

PATHS_KEPT = 20  # the ended paths whose status is still answered


class ValidationDesk:
    """`board.validation`: the whole of the Validate tab's questions."""

    def __init__(
        self,
        trainer: Trainer,
        presets: Callable[[], Mapping[str, Any]],
        active_run: Callable[[], Any],
        fingerprint: Callable[[Any], dict[str, str]] | None = None,
        export_dir: Path | None = None,
        slurm: Callable[[], bool] | None = None,
        data_fingerprint: Callable[[list[Path]], str | None] | None = None,
    ):
        self.trainer = trainer
        self.export_dir = export_dir  # where a report's download copy goes (the app's served folder)
        self.store = trainer.store
        self._presets = presets
        self._active_run = active_run
        self._fingerprint = fingerprint
        self._slurm = slurm  # whether a Slurm cluster is set up here (the nodes rung)
        self._data_fingerprint_of = data_fingerprint or self._data_fingerprint
        self._lock = threading.Lock()
        self._paths: dict[str, ValidationPath] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._errors: dict[str, str] = {}

    @property
    def runs_dir(self) -> Path:
        return self.store.root

    # --- a path ---------------------------------------------------------------------

    def check(self, request: ValidationRequest) -> ValidationRequest:
        """The request with its defaults filled in, or RequestError (a message id): what
        `start` refuses, asked without starting anything."""
        return check_request(request, self._presets(), self.store, self._slurm)

    def start(self, request: ValidationRequest) -> str:
        """Checks the request and starts the path on a thread of its own; its id (the id of its
        report). RequestError, before anything is made, for bad input, a path already running,
        or a run training here."""
        checked = self.check(request)
        with self._lock:
            if any(thread.is_alive() for thread in self._threads.values()):
                raise RequestError("validate.bad.path_running")
            active = self._active_run()
            if active is not None:
                raise RequestError("validate.bad.run_active", run_id=active.id)
            path = ValidationPath(self.trainer, checked, {}, reports.save_report, data_fingerprint=self._data_fingerprint_of)
            self._paths[path.path_id] = path
            thread = threading.Thread(target=self._run, args=(path,), daemon=True, name=f"validate-{path.path_id}")
            self._threads[path.path_id] = thread
            self._forget_old()
        thread.start()
        return path.path_id

    def _run(self, path: ValidationPath) -> None:
        try:
            path.machine = self._machine(path.request.preset)
            path.run()
        except Exception as error:  # the path saved a report saying so; the thread ends quietly
            log.exception("validation path %s broke", path.path_id)
            self._errors[path.path_id] = f"{type(error).__name__}: {error}"[:300]

    def _machine(self, preset_id: str) -> dict[str, str]:
        """The machine's fingerprint for the report (the doctor's torch probe: a helper
        process, seconds); {} when it cannot be taken."""
        preset = self._presets().get(preset_id)
        try:
            if self._fingerprint is not None:
                return self._fingerprint(preset)
            from backend.validate.fingerprint import machine_fingerprint

            return machine_fingerprint(preset)
        except Exception:  # a report without a fingerprint beats no report
            log.exception("the machine fingerprint could not be taken")
            return {}

    @staticmethod
    def _data_fingerprint(run_dirs: list[Path]) -> str | None:
        """The data fingerprint of the path's runs (one recorded by the warm helper, else
        computed by LLaMA-Factory's own preprocessing in a one-shot helper: seconds)."""
        from backend.validate.fingerprint import path_data_fingerprint

        return path_data_fingerprint(run_dirs)

    def _forget_old(self) -> None:
        ended = [path_id for path_id, thread in self._threads.items() if not thread.is_alive()]
        for path_id in ended[: max(0, len(ended) - PATHS_KEPT)]:
            self._threads.pop(path_id, None)
            self._paths.pop(path_id, None)
            self._errors.pop(path_id, None)

    def status(self, path_id: str) -> PathStatus:
        """The path now: each rung's state, the rung running and its run, a progress note, and
        its report's id once one is saved. RequestError for a path this app does not know."""
        path = self._paths.get(path_id)
        if path is None:
            raise RequestError("validate.bad.no_path", path_id=str(path_id)[:80])
        status = path.status()
        thread = self._threads.get(path_id)
        if thread is not None and not thread.is_alive() and not status.done:
            status = replace(status, done=True)
        return status

    def running(self) -> str | None:
        """The path in progress, if any (a reloaded page finds it again)."""
        return next((path_id for path_id, thread in self._threads.items() if thread.is_alive()), None)

    def stop(self, path_id: str) -> PathStatus:
        """Stops the path at the rung it is at (that rung's run is stopped; the rungs after it
        are reported skipped). The report is saved by the path's own thread."""
        path = self._paths.get(path_id)
        if path is None:
            raise RequestError("validate.bad.no_path", path_id=str(path_id)[:80])
        path.stop()
        return path.status()

    def wait(self, path_id: str, timeout: float | None = None) -> PathStatus:
        """Until the path ends (or `timeout`): the command line waits so."""
        thread = self._threads.get(path_id)
        if thread is not None:
            thread.join(timeout)
        return self.status(path_id)

    def close(self) -> None:
        """The app stops: a path in progress stops with it (its report says "stopped")."""
        for path_id, thread in list(self._threads.items()):
            if thread.is_alive():
                self._paths[path_id].stop()
                thread.join(30)

    # --- reports --------------------------------------------------------------------

    def reports(self) -> list[ValidationReport]:
        return reports.list_reports(self.runs_dir)

    def report(self, report_id: str) -> ValidationReport:
        """ReportError (a message id) for an id that is not a kept report."""
        return reports.load_report(self.runs_dir, report_id)

    def compare(self, old_id: str, new_id: str) -> Comparison:
        return reports.compare_reports(self.report(old_id), self.report(new_id))

    def import_report(self, data: bytes) -> ValidationReport:
        """An uploaded report (JSON bytes), checked and kept; ReportError when refused."""
        return reports.import_report(self.runs_dir, data)

    def download(self, report_id: str) -> Path:
        """A servable copy of a kept report's JSON (the page's download; added for the Validate
        tab, H5): read as `report` reads it (no link followed, checked), written atomically to
        `<export dir>/validation/<id>.json`. ReportError for an id that is not a kept report."""
        report = self.report(report_id)
        if self.export_dir is None:
            import tempfile

            self.export_dir = Path(tempfile.mkdtemp(prefix="rocboard-exports-"))
        folder = self.export_dir / reports.VALIDATION_DIR
        folder.mkdir(parents=True, exist_ok=True)
        name = reports.check_report_id(report.id) + reports.SUFFIX
        safe_files.write_atomic(folder, name, reports.to_json(report).encode("utf-8"))
        return folder / name


__all__ = ["ValidationDesk"]
