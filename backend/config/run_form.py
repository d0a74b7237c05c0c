"""A run's saved form (form.json), written at Start and read back through the schema.

form.json holds the *checked* config, plan and placement as form values (`saved_form`), so a
resume re-parses what was run, not what was typed. Every reader of a saved run's settings
(the runs table, chat, evaluation, export, the Train tab showing a run, resume) asks this
module: `read_saved_run(run_dir)` gives the form values (the schema's default where the file
has none) and the typed `RunConfig` that `parse_form` makes of them. None opens form.json
itself or keeps defaults of its own: a field added to backend/config/schema.py is read back
everywhere with no edit here.

It sits above config, distributed and placement (it imports all three; none imports it), so
the typed config never has to reach back up for a saved form.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.config import RunConfig, parse_form, schema, to_form
from backend.config.distributed import SLURM_DECIDES, DistributedPlan, plan_to_form
from backend.config.placement import LocalPlacement, Placement, SlurmPlacement, placement_to_form
from backend.findings import Finding
from backend.runs import read_form_file


def saved_form(config: RunConfig, plan: DistributedPlan | None, placement: Placement | None = None) -> dict[str, Any]:
    """What a run's form.json holds: the *checked* config, plan and placement as form values
    (every value already parsed and bounded)."""
    values = {**to_form(config), **(plan_to_form(plan) if plan is not None else {}), **placement_to_form(placement or LocalPlacement())}
    if isinstance(placement, SlurmPlacement):
        values.update((name, schema.field(name).default) for name in SLURM_DECIDES)
    return values


def form_from_saved(saved: Any) -> dict[str, Any]:
    """The form values a form.json gives back: the schema's fields only (defaults where one
    is missing, e.g. a file written before a field existed); anything else is dropped."""
    values = {**schema.form_defaults(), **schema.side_form_defaults()}
    if isinstance(saved, Mapping):
        values.update((name, saved[name]) for name in values if name in saved)
    return values


def form_from_args(args: Any) -> dict[str, Any]:
    """The run fields a LLaMA-Factory YAML mapping (a run's config.yaml) sets, as form values:
    each field's codec reads its keys back (schema.YamlCodec.read). Other keys are left out
    (they need LLaMA-Factory's key list: backend/config/yaml_import.py reads them)."""
    values: dict[str, Any] = {}
    if not isinstance(args, Mapping):
        return values
    for form_field in schema.run_fields():
        if form_field.yaml is None or form_field.kind == "other_keys":
            continue
        value = form_field.yaml.read(args)
        if value is not schema.ABSENT:
            values[form_field.name] = value
    return values


@dataclass(frozen=True)
class SavedRun:
    """A saved run's settings, typed. `config.hardware` holds the preset's id only: the
    preset's environment and use_cpu are the preset file's, not the run's (the pipeline adds
    them when it checks the form again)."""

    form: dict[str, Any]  # every page field's value; the schema's default where none was saved
    config: RunConfig  # `form` through parse_form
    findings: tuple[Finding, ...] = ()  # fields that did not parse (a file edited by hand): they hold their default
    given: frozenset[str] = frozenset()  # the fields the saved files set (the rest are defaults)

    def known(self, name: str) -> bool:
        """Whether field `name` was saved and parsed: a shown value, not a default."""
        return name in self.given and not any(finding.key == name for finding in self.findings)


def saved_run(*saved: Any) -> SavedRun:
    """The SavedRun of form values already read (form.json's mapping; later ones win)."""
    given: dict[str, Any] = {}
    for values in saved:
        if isinstance(values, Mapping):
            given.update(values)
    form = form_from_saved(given)
    config, findings = parse_form(form)
    return SavedRun(form, config, tuple(findings), frozenset(name for name in form if name in given))


def read_saved_run(run_dir: Path) -> SavedRun:
    """The run's saved form, typed (form.json through the schema and parse_form)."""
    return saved_run(read_form_file(run_dir))


__all__ = ["SavedRun", "form_from_args", "form_from_saved", "read_saved_run", "saved_form", "saved_run"]
