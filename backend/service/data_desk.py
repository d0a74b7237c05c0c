"""The user's own datasets, as the page sees them: read a file (an upload or a path on this
machine), show what is in it, register it, and measure it with the model's tokenizer.

`DatasetRegistry` (backend/data/registry.py) owns the folder and its `dataset_info.json`;
`inspect_dataset` (backend/data/dataset_file.py) reads a file in bounded time and memory;
`measure_lengths` (backend/data/lengths.py) asks a helper process (the web process never
imports transformers). This module turns their typed answers into what the page shows, in
the page's language: every text from the catalogue, every user string escaped.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.config import parse_form
from backend.config.paths import default_data_roots  # noqa: F401 (re-exported: the app and its tests name it here)
from backend.data.dataset_file import Inspection
from backend.data.layout import LAYOUTS, ColumnMapping, roles_of
from backend.data.registry import DatasetRegistry
from backend.findings import Finding
from backend.i18n import translate as t
from backend.view import code_span, escape_markdown, findings_markdown

NAME_MAX = 64
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")
# What a histogram of lengths is drawn from: at most this many examples are tokenized.
MEASURED_EXAMPLES_MAX = 2000
EXAMPLE_SHOWN_CHARS = 4000
# The preview table shows at most this many columns (a file may have a thousand: 20 rows of
# 300 characters each would be megabytes on the page); the summary lists them all.
PREVIEW_COLUMNS_MAX = 50
SUMMARY_COLUMNS_MAX = 200
TAG_CHARS_MAX = 64  # a tag is a key or a role name ("from", "human")


@dataclass(frozen=True)
class DataPreview:
    """What the page shows of one file before (or after) it is registered."""

    findings: str  # Markdown: the problems and warnings, each with its fix
    summary: str  # Markdown: the file, its rows, its layout, each column's emptiness
    headers: list[str]
    rows: list[list[str]]
    usable: bool
    mapping: ColumnMapping | None
    columns: tuple[str, ...]
    suggested_name: str
    existing: str | None = None  # the registered dataset this file already is, read this way
    notice: str = ""  # Markdown: that it is already there, and that it is picked to use


@dataclass(frozen=True)
class DataAdded:
    name: str | None  # registered under this name; None: refused (see message)
    message: str  # Markdown: what was added, or why not (the page already shows the file)
    existing: str | None = None  # refused: the file already is this dataset (the page picks it)


@dataclass(frozen=True)
class LengthsView:
    figure: dict | None  # a plotly figure (JSON-able), None when nothing was measured
    summary: str  # Markdown
    example: str  # HTML: one example as the trainer sees it, the trained part marked
    findings: str = ""


@dataclass(frozen=True)
class MappingForm:
    """The page's column choices: the layout, a file column per role, the tags."""

    layout: str | None
    columns: Mapping[str, str] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)

    def mapping(self) -> ColumnMapping | None:
        if self.layout not in LAYOUTS:
            return None
        roles = {role for role, _ in roles_of(self.layout)}
        columns = tuple((role, str(column)) for role, column in self.columns.items() if role in roles and column)
        tags = tuple((tag, str(value).strip()[:TAG_CHARS_MAX]) for tag, value in self.tags.items() if value and str(value).strip())
        return ColumnMapping(layout=self.layout, columns=columns, tags=tags if self.layout == "sharegpt" else ())


def fresh_run_name(dataset: str, taken: Sequence[str]) -> str:
    """A new run's name from the dataset it trains on: the dataset's name (a registry name is
    a valid run name), made unique among the runs' names with -2, -3, …"""
    return _unique(dataset[:NAME_MAX] or "run", taken)


# What "Train on it" keeps of the form it finds: the hardware preset, and the model and
# template the lengths were measured with. Every other run setting (the run's name, batch,
# accumulation, steps, LoRA, other keys, …) starts from the preset's defaults: the form may
# hold another run's settings, and the new run would carry them under its dataset's name.
# The page's own fields (the multi-GPU plan, where it runs) are not run settings: kept.
KEPT_FOR_A_NEW_RUN = ("preset", "model_path", "template")


def suggest_name(original_name: str, taken: Sequence[str]) -> str:
    """A registry name from a file name: its stem with only letters, digits, `_`, `.` and `-`,
    made unique with -2, -3, …"""
    stem = Path(original_name).name
    for suffix in (".jsonl", ".json", ".csv", ".parquet"):
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    # A name starts with a letter or digit: whatever comes before the first one goes.
    base = re.sub(r"^[^A-Za-z0-9]+", "", _NAME_CHARS.sub("-", stem)).rstrip("-.")[:NAME_MAX] or "dataset"
    return _unique(base, taken)


def _unique(base: str, taken: Sequence[str]) -> str:
    """`base`, or `base-2`, `base-3`, … (cut to NAME_MAX), whichever is not in `taken`."""
    name, n = base, 1
    taken_set = set(taken)
    while name in taken_set:
        n += 1
        suffix = f"-{n}"
        name = base[: NAME_MAX - len(suffix)] + suffix
    return name


DEFAULT_MAX_UPLOAD_BYTES = 512 * 1024 * 1024


class DataDesk:
    """One per app: the registry and what the page asks of it."""

    def __init__(self, runs_dir: Path, data_roots: Sequence[Path], max_upload_bytes: int):
        self.registry = DatasetRegistry(runs_dir, [Path(root) for root in data_roots], max_upload_bytes)

    @property
    def folder(self) -> Path:
        return self.registry.folder

    def names(self) -> list[str]:
        return self.registry.names()

    def layout_of(self, name: str) -> str | None:
        """The layout a registered dataset was added with (alpaca, sharegpt, openai, text)."""
        entry = self.registry.entry(name) or {}
        if entry.get("formatting") == "sharegpt":
            tags = entry.get("tags") or {}
            return "openai" if isinstance(tags, dict) and tags.get("role_tag") == "role" else "sharegpt"
        columns = entry.get("columns") or {}
        if isinstance(columns, dict) and columns and "response" not in columns and set(columns) <= {"prompt"}:
            return "text"
        return "alpaca" if entry else None

    def form_values(self, name: str, stage: str = "sft") -> dict[str, Any]:
        """What the Train form needs to train on registered dataset `name`: its folder and
        name, and a stage that reads its layout (plain text trains with pt, the rest with
        the form's stage unless that is pt)."""
        values: dict[str, Any] = {"dataset_dir": str(self.folder), "dataset": name}
        layout = self.layout_of(name)
        if layout == "text":
            values["stage"] = "pt"
        elif stage == "pt":
            values["stage"] = "sft"
        return values

    def use_notice(self, name: str, locale: str = "en") -> str:
        return t("datatab.use_notice", locale, name=code_span(name, NAME_MAX + 2))

    def new_run_form(self, name: str, current: Mapping[str, Any], defaults: Mapping[str, Any], run_names: Sequence[str]) -> dict[str, Any]:
        """The form "Train on it" opens for registered dataset `name`: `current` (the form
        as the page has it) with its run settings back to `defaults` (the preset's over the
        schema's) but for KEPT_FOR_A_NEW_RUN, the dataset's folder, name and stage, and a run
        name of its own (`run_names`: the runs there are)."""
        from backend.config import schema

        values = dict(current)
        for run_field in schema.run_fields():
            if run_field.name not in KEPT_FOR_A_NEW_RUN:
                values[run_field.name] = defaults.get(run_field.name, run_field.default)
        values.update(self.form_values(name, str(values.get("stage") or "sft")))
        values["run_name"] = fresh_run_name(name, run_names)
        return values

    def none_picked(self, locale: str = "en") -> str:
        """What "Train on it" says when no dataset is picked under Your datasets."""
        return findings_markdown([Finding.of("dataset", "data-none-picked")], locale)

    # --- reading a file -------------------------------------------------------------------

    def read_upload(self, uploaded: str | None, choices: MappingForm | None = None, locale: str = "en") -> DataPreview:
        if not uploaded:
            return self._preview(None, "", locale)
        path = Path(uploaded)
        inspection = self.registry.inspect_upload(path, path.name, choices.mapping() if choices else None)
        existing = self.registry.same_dataset(path, inspection.mapping) if inspection.usable else None
        return self._preview(inspection, path.name, locale, existing=existing)

    def read_path(self, raw: str, choices: MappingForm | None = None, locale: str = "en") -> DataPreview:
        raw = (raw or "").strip()
        if not raw:
            return self._preview(None, "", locale, [Finding.of("data_file", "data-path-empty")])
        inspection = self.registry.inspect_server_path(raw, choices.mapping() if choices else None)
        existing = self.registry.same_dataset(Path(inspection.source), inspection.mapping, server_path=True) if inspection.usable else None
        return self._preview(inspection, Path(raw).name, locale, existing=existing)

    def add(self, kind: str, source: str | None, name: str, choices: MappingForm | None = None, locale: str = "en") -> DataAdded:
        """Registers the file: `kind` "upload" (Gradio's copy of an upload) or "path" (a file
        on this machine, used where it is). Refused: nothing is written."""
        name = (name or "").strip()
        mapping = choices.mapping() if choices else None
        if not source:
            finding = Finding.of("data_file", "data-nothing-chosen")
            return DataAdded(None, findings_markdown([finding], locale))
        if kind == "upload":
            path = Path(source)
            result = self.registry.add_upload(name, path, path.name, mapping)
        else:
            result = self.registry.add_server_path(name, source, mapping)
        if result.name is None:
            return DataAdded(None, findings_markdown(list(result.findings), locale), result.existing)
        added = t("datatab.added", locale, name=code_span(result.name, NAME_MAX + 2), folder=code_span(str(self.folder), 4096))
        warnings = findings_markdown(list(result.findings), locale)
        return DataAdded(result.name, added + ("\n\n" + warnings if warnings else ""))

    def _preview(self, inspection: Inspection | None, shown_name: str, locale: str, extra: list[Finding] | None = None, existing: str | None = None) -> DataPreview:
        findings = list(extra or []) + (list(inspection.findings) if inspection is not None else [])
        if inspection is None:
            return DataPreview(findings_markdown(findings, locale), "", [], [], False, None, (), "")
        return DataPreview(
            findings=findings_markdown(findings, locale),
            summary=summary_markdown(inspection, shown_name, locale),
            headers=list(inspection.columns[:PREVIEW_COLUMNS_MAX]),
            rows=[list(row[:PREVIEW_COLUMNS_MAX]) for row in inspection.preview],
            usable=inspection.usable,
            mapping=inspection.mapping,
            columns=inspection.columns,
            suggested_name=suggest_name(shown_name, self.names()),
            existing=existing,
            notice=t("datatab.already_added", locale, name=code_span(existing, NAME_MAX + 2)) if existing else "",
        )

    # --- what the trainer will see ---------------------------------------------------------

    def measure(self, name: str, form: Mapping[str, Any], locale: str = "en") -> LengthsView:
        """The token lengths of registered dataset `name` with the form's model, template,
        stage and cutoff, computed in a helper process."""
        from backend.data.lengths import length_histogram, measure_lengths

        if not name or name not in self.names():
            return LengthsView(None, "", "", findings_markdown([Finding.of("dataset", "data-not-registered", name=repr(name or ""))], locale))
        # The form typed (its defaults and bounds are the schema's; a bad value is its default).
        config, _ = parse_form(form)
        model_path = config.model.model_name_or_path
        if not model_path:
            return LengthsView(None, "", "", findings_markdown([Finding.of("model_path", "data-model-needed")], locale))
        stage = "pt" if config.method.stage == "pt" else "sft"
        report, findings = measure_lengths(
            model_path, config.model.template, str(self.folder), name, config.data.cutoff_len, stage=stage, max_examples=MEASURED_EXAMPLES_MAX
        )
        shown_findings = findings_markdown(list(findings), locale)
        if report is None:
            return LengthsView(None, "", "", shown_findings)
        return LengthsView(length_histogram(report, locale), lengths_markdown(report, locale), example_html(report.example, locale), shown_findings)


# --- rendering ---------------------------------------------------------------------------------


def summary_markdown(inspection: Inspection, shown_name: str, locale: str = "en") -> str:
    layout = inspection.mapping.layout if inspection.mapping else None
    head = t(
        "datatab.summary",
        locale,
        file=code_span(shown_name, 256),
        format=inspection.file_format.upper(),
        rows=f"{inspection.rows:,}",
        layout=t(f"datatab.layout.{layout}", locale) if layout else t("datatab.layout.unknown", locale),
    )
    lines = [head, "", f"| {t('datatab.column', locale)} | {t('datatab.empty_share', locale)} |", "|---|---|"]
    for column, share in inspection.empty_share[:SUMMARY_COLUMNS_MAX]:
        lines.append(f"| {escape_markdown(column, 80)} | {share:.0%} |")
    return "\n".join(lines)


def lengths_markdown(report: Any, locale: str = "en") -> str:
    return t(
        "datatab.lengths_summary",
        locale,
        counted=f"{report.counted:,}",
        cutoff=report.cutoff_len,
        truncated=f"{report.truncated_share:.1%}",
        keeps_95=report.keeps_95,
        keeps_99=report.keeps_99,
    )


def example_html(segments: Sequence[Any], locale: str = "en") -> str:
    """One example as the trainer sees it: the template's text as is, the tokens it learns
    to produce (labels kept) marked. All of it escaped; cut at EXAMPLE_SHOWN_CHARS."""
    if not segments:
        return ""
    parts, used = [], 0
    for segment in segments:
        text = str(segment.text)[: max(0, EXAMPLE_SHOWN_CHARS - used)]
        used += len(text)
        escaped = html.escape(text)
        parts.append(f'<mark class="rb-trained">{escaped}</mark>' if segment.trained else f'<span class="rb-prompt">{escaped}</span>')
        if used >= EXAMPLE_SHOWN_CHARS:
            parts.append("…")
            break
    legend = (
        f'<div class="rb-example-legend"><span class="rb-prompt">{html.escape(t("datatab.example_prompt", locale))}</span> · '
        f'<mark class="rb-trained">{html.escape(t("datatab.example_trained", locale))}</mark></div>'
    )
    return legend + '<pre class="rb-example">' + "".join(parts) + "</pre>"
