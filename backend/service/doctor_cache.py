"""The doctor's checks of this machine, gathered once (the torch probe takes seconds) and
kept: the Train tab shows the ones that would break a run beside Start."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from backend.config.presets import HardwarePreset

if TYPE_CHECKING:
    from backend.doctor import Check
    from backend.slurm.client import SlurmClient

log = logging.getLogger(__name__)


class DoctorCache:
    def __init__(self, sysfs_root: Path = Path("/sys"), runs_dir: Path | None = None, slurm_client: SlurmClient | None = None) -> None:
        # The tree the telemetry reads (`app.py --sysfs-root`, a fake one in demos and tests):
        # the Doctor looks at the same GPUs the VRAM chart shows.
        self.sysfs_root = Path(sysfs_root)
        # The cluster the app submits to (its run manager's Slurm client) and the runs folder
        # its nodes must see: checked where Slurm is set up.
        self.runs_dir = runs_dir
        self.slurm_client = slurm_client
        self._checks: list[Check] | None = None
        self._lock = threading.Lock()

    def gather(self) -> None:
        """Gathers the facts now; a broken probe is logged, never raised (a background job).
        No Slurm job is submitted from here (the shared-folder check waits for a Refresh)."""
        try:
            self.checks(refresh=True, cluster_job=False)
        except Exception:
            log.exception("the doctor's probe failed")

    def checks(self, refresh: bool = False, cluster_job: bool | None = None) -> list[Check]:
        """The checks, gathered now when `refresh` or never before. `cluster_job` (default:
        `refresh`, a user's Refresh): whether the Slurm shared-folder check may submit its
        one-node job step."""
        job = refresh if cluster_job is None else cluster_job
        if refresh or self._checks is None:
            from backend.doctor import gather_facts, run_checks
            from backend.doctor.slurm import gather_slurm

            client = self.slurm_client
            facts = gather_facts(sysfs_root=self.sysfs_root, runs_dir=self.runs_dir, slurm=lambda: gather_slurm(self.runs_dir, client=client, job=job))
            checks = run_checks(facts)
            with self._lock:
                self._checks = checks
        return self._checks

    def gathered(self) -> list[Check] | None:
        """The checks if they were gathered already; None, rather than waiting, if not."""
        return self._checks

    def blockers(self, preset: HardwarePreset | None) -> list[Check]:
        """The problems that would break a run on `preset` (none known before a gather)."""
        checks = self.gathered()
        if checks is None:
            return []
        from backend.doctor import blocking_problems

        return blocking_problems(checks, use_cpu=bool(preset and preset.use_cpu))


__all__ = ["DoctorCache"]
