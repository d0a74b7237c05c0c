"""The config pipeline: form values -> typed config -> findings, and what is made of a config
(the YAML preview, the shell lines, the memory estimate, the YAML import and export).

It touches no run and no process: everything here is a pure function of the form, the
presets and the machine's files, apart from LLaMA-Factory's own check, whose answers are
cached by `LlamaFactoryCheckCache`.
"""

from __future__ import annotations

import json
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.config import RunConfig, parse_form, schema, to_llamafactory_args
from backend.config.placement import LocalPlacement, Placement
from backend.config.presets import PRESETS_DIR, HardwarePreset, PresetLoadError, load_presets
from backend.findings import Finding, has_problems
from backend.i18n import Joined
from backend.runs import CONFIG_FILE, OUTPUT_DIR

if TYPE_CHECKING:
    from backend.config.distributed import DistributedPlan
    from backend.config.estimate import MemoryEstimate
    from backend.config.path_keys import ReadPlaces
    from backend.config.yaml_import import FixResult, FormLoad, ImportResult

# Answers kept by a cache; each is a short list of findings for one exact set of arguments.
LF_CACHE_ENTRIES = 256


@dataclass(frozen=True)
class Preview:
    yaml_text: str
    command: str  # the shell lines a user could run by hand
    findings: list[Finding]
    config: RunConfig | None


@dataclass(frozen=True)
class CheckedForm:
    """A form checked for a start: its config, preset and launch plan, and every finding
    (LLaMA-Factory's own included when the form's own checks passed)."""

    config: RunConfig
    findings: list[Finding]
    preset: HardwarePreset | None
    plan: DistributedPlan | None
    placement: Placement = LocalPlacement()


class LlamaFactoryCheckCache:
    """LLaMA-Factory's answers by exact arguments, single-flight and bounded.

    Asking runs a helper process that imports torch (7-10 s): a Start during the start-up
    prewarm, or a second tab asking about the same config, waits for the answer already
    being computed instead of paying for it again. The oldest answers are dropped first."""

    def __init__(self, max_entries: int = LF_CACHE_ENTRIES, check: Callable[[dict[str, Any]], list[Finding]] | None = None):
        self.max_entries = max_entries
        self._check = check
        self._answers: OrderedDict[str, list[Finding]] = OrderedDict()
        self._pending: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def _ask(self, args: dict[str, Any]) -> list[Finding]:
        if self._check is not None:
            return self._check(args)
        # Looked up at each call: tests replace the helper on the module.
        from backend.llama_factory import check as lf_check

        return lf_check.check_with_llamafactory(args)

    def _cached(self, key: str) -> list[Finding] | None:
        with self._lock:
            answer = self._answers.get(key)
            if answer is not None:
                self._answers.move_to_end(key)
            return answer

    def findings(self, args: dict[str, Any]) -> list[Finding]:
        key = json.dumps(args, sort_keys=True, default=str)
        answer = self._cached(key)
        if answer is not None:
            return list(answer)
        with self._lock:
            pending = self._pending.setdefault(key, threading.Lock())
        with pending:
            answer = self._cached(key)
            if answer is None:
                try:
                    answer = self._ask(args)
                finally:
                    with self._lock:
                        if self._pending.get(key) is pending:
                            del self._pending[key]
                with self._lock:
                    self._answers[key] = answer
                    while len(self._answers) > self.max_entries:
                        self._answers.popitem(last=False)
        return list(answer)

    def cached(self, args: dict[str, Any]) -> list[Finding] | None:
        """The answer already known for `args`, without asking; None when not asked yet."""
        answer = self._cached(json.dumps(args, sort_keys=True, default=str))
        return None if answer is None else list(answer)

    def __len__(self) -> int:
        with self._lock:
            return len(self._answers)


# One per process: an answer depends only on the arguments (and the installed LLaMA-Factory),
# so every board of the process (the app's, and the tests' many) shares what was asked.
SHARED_LF_CACHE = LlamaFactoryCheckCache()


class ConfigPipeline:
    """Parse, check, preview, estimate, import and export a form, on the loaded presets."""

    def __init__(
        self,
        runs_root: Path,
        export_dir: Path,
        presets_dir: Path = PRESETS_DIR,
        lf_cache: LlamaFactoryCheckCache | None = None,
        read_roots: Sequence[Path] | None = None,
    ):
        self.runs_root = runs_root
        self.export_dir = export_dir
        # Where a path of Other keys may be read from (besides the run and its model folder):
        # the data roots, and the runs folder (an earlier run's adapter, say).
        from backend.config.paths import default_data_roots

        self.read_roots: tuple[Path, ...] = (*(read_roots if read_roots is not None else default_data_roots()), Path(runs_root))
        self.presets: dict[str, HardwarePreset]
        self.preset_errors: list[PresetLoadError]
        self.presets, self.preset_errors = load_presets(presets_dir)
        # Not `or`: an empty cache has len 0 and is falsy.
        self.lf_cache = lf_cache if lf_cache is not None else SHARED_LF_CACHE

    # --- presets ---------------------------------------------------------------------

    def preset(self, preset_id: str) -> HardwarePreset | None:
        return self.presets.get(preset_id)

    def preset_choices(self, locale: str = "en") -> list[tuple[str, str]]:
        """(name in `locale`, id) of each preset, in the dropdown's order."""
        return [(p.name(locale), p.id) for p in self.presets.values()]

    def form_for_preset(self, preset_id: str) -> dict[str, Any]:
        preset = self.preset(preset_id)
        return preset.form_values() if preset else {}

    # --- parse and check -------------------------------------------------------------

    def parse(self, form: Mapping[str, Any]) -> tuple[RunConfig, list[Finding], HardwarePreset | None]:
        preset = self.preset(str(form.get("preset", "")))
        findings: list[Finding] = []
        if preset is None:
            findings.append(Finding.of("preset", "unknown-preset", preset=repr(form.get("preset"))))
        config, form_findings = self._typed(form, preset)
        findings += form_findings
        findings += self._check(config, preset)
        plan, plan_findings = self.plan_of(form, preset)
        findings += plan_findings
        placement, placement_findings = self.placement_of(form, preset)
        findings += placement_findings
        from backend.config.distributed import gpus_asked
        from backend.config.placement import check_local_gpus

        findings += check_local_gpus(placement, gpus_asked(plan))  # named GPUs: as many as the plan's
        from backend.config.other_keys import deepspeed_findings

        findings += deepspeed_findings(config, plan, bool(preset and preset.use_cpu), self.read_places(config))
        return config, findings, preset

    @staticmethod
    def _typed(form: Mapping[str, Any], preset: HardwarePreset | None) -> tuple[RunConfig, list[Finding]]:
        """The typed config of `form` on `preset`, and the form's own findings (no checks)."""
        return parse_form(form, preset_env=preset.env if preset else (), use_cpu=bool(preset and preset.use_cpu))

    def _check(self, config: RunConfig, preset: HardwarePreset | None) -> list[Finding]:
        from backend.config.checks import check_config, check_output_dir

        return check_config(config, preset, read_roots=self.read_roots) + check_output_dir(self.runs_root)

    def read_places(self, config: RunConfig) -> ReadPlaces:
        """Where a key of `config`'s Other keys may read a file (backend/config/path_keys.py)."""
        from backend.config.checks import read_places

        return read_places(config, self.read_roots)

    @staticmethod
    def placement_of(form: Mapping[str, Any], preset: HardwarePreset | None) -> tuple[Placement, list[Finding]]:
        """Where the form's run executes (this machine, or Slurm), and the findings about it."""
        from backend.config.placement import SlurmPlacement, parse_placement_form, plan_findings_on_slurm

        placement, findings = parse_placement_form(form, use_cpu=bool(preset and preset.use_cpu), gpus_per_preset=preset.devices_per_node if preset else 0)
        if isinstance(placement, SlurmPlacement):
            findings += plan_findings_on_slurm(form)
        return placement, findings

    @staticmethod
    def plan_of(form: Mapping[str, Any], preset: HardwarePreset | None) -> tuple[DistributedPlan | None, list[Finding]]:
        """The multi-GPU / multi-node plan the form asks for: None for one process. On Slurm,
        the plan on the nodes and GPUs the Slurm fields ask for (placement.plan_on_slurm)."""
        from backend.config.distributed import SLURM_DECIDES, check_plan, parse_plan_form
        from backend.config.placement import SlurmPlacement, plan_on_slurm

        on_cpu = bool(preset and preset.use_cpu)
        placement, _ = ConfigPipeline.placement_of(form, preset)
        if isinstance(placement, SlurmPlacement):
            form_plan, value_findings = parse_plan_form(form, on_cpu=on_cpu, check=False)
            # The fields Slurm decides are not used: a value typed there is not this run's problem.
            decided = {f.path for f in schema.plan_fields() if f.name in SLURM_DECIDES} | set(SLURM_DECIDES)
            findings = [f for f in value_findings if f.key not in decided]
            plan = plan_on_slurm(form_plan, placement)
            if plan is None:
                return None, [f for f in findings if f.severity == "problem"]
            return plan, findings + [f for f in check_plan(plan) if f.rule != "idle-gpus"]
        plan, findings = parse_plan_form(form, on_cpu=on_cpu)
        if plan.nproc <= 1 and plan.nnodes <= 1:
            # One process needs no plan, but a refused value (dist_nproc=100000 falls back to
            # its default of 1) must still reach the page rather than vanish with the plan.
            return None, [f for f in findings if f.severity == "problem"]
        return plan, findings

    @staticmethod
    def run_args(config: RunConfig, plan: DistributedPlan | None, output_dir: Path | str) -> dict[str, Any]:
        """The YAML's arguments: the config's, plus the launch plan's (ddp_timeout, deepspeed)."""
        from backend.config.distributed import extra_args
        from backend.config.other_keys import USER_DEEPSPEED_FILE, deepspeed_of

        args = to_llamafactory_args(config, output_dir)
        if deepspeed_of(config) is not None:
            # The run uses its own copy (RunManager writes it beside config.yaml): a later
            # edit of the user's file changes no run that already started.
            args["deepspeed"] = USER_DEEPSPEED_FILE
        if plan is not None:
            args.update(extra_args(plan))
        return args

    def deepspeed_file(self, config: RunConfig) -> Any:
        """The user's DeepSpeed file named in Other keys, read and checked; None without one
        (or when it cannot be used: its findings say why)."""
        from backend.config.other_keys import deepspeed_of, read_deepspeed_file

        value = deepspeed_of(config)
        return None if value is None else read_deepspeed_file(value, self.read_places(config))[0]

    def llamafactory_findings(self, config: RunConfig, plan: DistributedPlan | None = None) -> list[Finding]:
        """LLaMA-Factory's own parser on the config: the last word on which keys and values
        exist (cached by the exact arguments; the demo's are asked for at start-up)."""
        return self.lf_cache.findings(self.run_args(config, plan, "output"))

    def check_for_start(self, form: Mapping[str, Any], ask_llamafactory: bool = True) -> CheckedForm:
        """Everything a start needs to know about the form; LLaMA-Factory is only asked
        when the form's own checks found no problem (its answer takes seconds). Without
        `ask_llamafactory` (the page's live checks while the user types), only an answer
        LLaMA-Factory already gave for these exact arguments is added."""
        config, findings, preset = self.parse(form)
        plan, _ = self.plan_of(form, preset)
        placement, _ = self.placement_of(form, preset)
        if not has_problems(findings):
            if ask_llamafactory:
                findings = findings + self.llamafactory_findings(config, plan)
            else:
                findings = findings + (self.lf_cache.cached(self.run_args(config, plan, "output")) or [])
        return CheckedForm(config, findings, preset, plan, placement)

    def prewarm(self, form: Mapping[str, Any]) -> None:
        """Asks LLaMA-Factory about `form` now, so that a Start with it does not wait."""
        config, findings, _ = self.parse(form)
        if not has_problems(findings):
            self.llamafactory_findings(config)

    # --- what is made of a config ----------------------------------------------------

    def preview(self, form: Mapping[str, Any], ask_llamafactory: bool = True) -> Preview:
        import yaml

        checked = self.check_for_start(form, ask_llamafactory)
        config, preset, plan = checked.config, checked.preset, checked.plan
        output_dir = self.runs_root / "<run-id>" / OUTPUT_DIR
        command = self.shell_lines(config, preset)
        from backend.config.placement import SlurmPlacement

        if isinstance(checked.placement, SlurmPlacement):
            from backend.slurm.script import batch_script

            # What sbatch will be given, as it will be written (the run's id is made at Start).
            command = batch_script(self.runs_root / "<run-id>", "<run-id>", checked.placement, plan.nproc if plan else 1)
        elif plan is not None:
            from backend.config.distributed import describe, node_commands

            lines = node_commands(plan, CONFIG_FILE, extra_env=dict(preset.env) if preset else None)
            # A Joined of messages: the page renders the comment lines in its language.
            command = Joined((Joined(("# ", describe(plan)), ""), "\n".join(f"# node {rank}\n{line}" for rank, line in enumerate(lines))), "\n")
        deepspeed = self.deepspeed_file(config)
        if deepspeed is not None:
            command = Joined((Joined(("# ", deepspeed.summary()), ""), command), "\n")
        return Preview(
            yaml_text=yaml.safe_dump(self.run_args(config, plan, output_dir), sort_keys=False, allow_unicode=True),
            command=command,
            findings=checked.findings,
            config=config,
        )

    @staticmethod
    def shell_lines(config: RunConfig, preset: HardwarePreset | None) -> str:
        from backend.config.export import export_shell

        return export_shell(config, preset, CONFIG_FILE)

    def estimate(self, form: Mapping[str, Any]) -> MemoryEstimate:
        """Peak memory per device for the form's config on its preset."""
        from backend.config.estimate import estimate_memory

        # The typed config is all it needs: not the checks (they read the dataset's files),
        # which the page's live checks run once already beside it.
        preset = self.preset(str(form.get("preset", "")))
        config, _ = self._typed(form, preset)
        return estimate_memory(config, preset)

    def import_yaml(self, text: str, preset_id: str) -> ImportResult:
        """Findings and form values of a pasted or uploaded LLaMA-Factory YAML."""
        from backend.config.yaml_import import import_yaml

        return import_yaml(text or "", self.preset(preset_id), read_roots=self.read_roots)

    def fix_yaml(self, text: str, preset_id: str) -> FixResult:
        """The YAML with every mechanical fix applied (comments kept where they can be), and
        what is still wrong with it: the very function `app.py check --fix` writes with.
        Unpacks as `(fixed_text, result)`; `.comments_kept` says whether comments survived."""
        from backend.config.yaml_import import fix_yaml_text

        return fix_yaml_text(text or "", self.preset(preset_id), read_roots=self.read_roots)

    def load_into_form(self, text: str, preset_id: str, current: Mapping[str, Any]) -> FormLoad:
        """Every page field after loading the YAML over the form `current`: the YAML's values,
        the preset's defaults for the run fields it does not set, the rest as `current` has them."""
        from backend.config import schema
        from backend.config.yaml_import import form_load

        defaults = {**schema.form_defaults(), **self.form_for_preset(preset_id)}
        defaults.pop("preset", None)
        return form_load(self.import_yaml(text, preset_id), defaults, current)

    def export(self, form: Mapping[str, Any]) -> tuple[Path, str]:
        """A YAML file to download (in the temp export dir) and the shell lines that run it."""
        from backend.config.export import default_filenames, export_shell, export_yaml

        config, _, preset = self.parse(form)
        yaml_name, _ = default_filenames(config)
        target_dir = Path(tempfile.mkdtemp(prefix="yaml-", dir=self.export_dir))
        path = target_dir / yaml_name
        path.write_text(export_yaml(config, f"saves/{config.run_name or 'run'}"), encoding="utf-8")
        return path, export_shell(config, preset, yaml_name)


__all__ = ["CheckedForm", "ConfigPipeline", "LlamaFactoryCheckCache", "Preview", "SHARED_LF_CACHE"]
