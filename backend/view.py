"""What the page shows, as text and HTML, computed from snapshots and findings.

Kept out of ui/ so the widgets only wire events to these functions, and so the wording
can be tested (and translated) without a browser. Every sentence goes through the
catalogue (backend/i18n/locales/*.yaml) at this edge: the backend hands over message ids and
their values; `locale` is "en" or "zh-CN".
"""

from __future__ import annotations

import html
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from backend.diagnose import Alert
from backend.findings import Finding
from backend.i18n import CATALOGUE, DEFAULT_LOCALE, localized, render_message
from backend.i18n import translate as t
from backend.snapshot import RunSnapshot

if TYPE_CHECKING:
    from backend.config.yaml_import import FormLoad

# Which form field a config key's finding belongs next to.
# Findings about a LLaMA-Factory key are shown next to the form field that writes it: the
# schema says which keys each field writes ("datasets" is RunConfig's name for the dataset list).
FINDING_KEY_ALIASES = {"datasets": "dataset"}


def key_to_field() -> dict[str, str]:
    from backend.config import schema

    keys = {key: f.name for f in schema.run_fields() if f.yaml is not None for key in f.yaml.keys}
    return {**keys, **FINDING_KEY_ALIASES}


# --- user text in Markdown -------------------------------------------------------------------
#
# Every value the page did not write itself (a key or value from an imported YAML, a path, a
# run name, a preset's notes, a log line, a GPU's name) is escaped where it is put into
# Markdown: gr.Markdown renders links, images (a tracking pixel) and inline HTML. The page's
# own formatting (bold, code spans) is written around the escaped values and still renders.

# ASCII punctuation Markdown (CommonMark + GFM + Gradio's $$ LaTeX) may act on; a backslash
# makes each literal. ":" and "@" break GFM's bare-URL and e-mail autolinks.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~:@$=\"'])")
SHOWN_TEXT_MAX = 2000  # a finding or status line longer than this is cut (a pasted 250 kB value)


def escape_markdown(text: object, limit: int = SHOWN_TEXT_MAX) -> str:
    """`text` as Markdown that shows exactly these characters: no link, image, HTML, heading,
    list or emphasis; newlines become spaces (a value is one line of a message)."""
    value = str(text)
    if len(value) > limit:
        value = value[:limit] + "…"
    value = html.escape(value, quote=False)  # & < > first: the entities hold no special character
    value = _MARKDOWN_SPECIAL.sub(r"\\\1", value)
    return re.sub(r"[\r\n\t\v\f]+", " ", value)


def code_span(text: object, limit: int = 200) -> str:
    """`text` in a code span: shown literally (no escapes needed inside), a backtick in it
    replaced so the span cannot be closed early, newlines folded."""
    value = str(text)
    if len(value) > limit:
        value = value[:limit] + "…"
    value = re.sub(r"[\r\n\t\v\f]+", " ", value.replace("`", "ʼ")).strip() or " "
    return f"`{value}`"


def markdown_message(text: object, limit: int = SHOWN_TEXT_MAX) -> str:
    """A message of the page's own words with values inside (a finding's problem or fix, a
    diagnosis): its `code spans` stay code spans, everything else is escaped. A backtick a
    value brought in only shifts which parts are code; no part can render as a link or HTML."""
    value = str(text)
    if len(value) > limit:
        value = value[:limit] + "…"
    parts = value.split("`")
    if len(parts) % 2 == 0:  # an unmatched backtick: the last part is text
        parts[-2:] = [parts[-2] + "`" + parts[-1]]
    out = []
    for index, part in enumerate(parts):
        if index % 2 and part.strip():
            out.append(code_span(part, limit))
        else:
            out.append(escape_markdown(part, limit) if index % 2 == 0 else escape_markdown("`" + part + "`", limit))
    return "".join(out)


def field_for(key: str) -> str:
    return key_to_field().get(key, key)


def finding_text(finding: Finding, locale: str = "en") -> tuple[str, str]:
    """(problem, fix) in the page's language: the rule's translated fix when the
    catalogue has one, else the finding's own English words."""
    return finding.text(locale)


def field_messages(findings: list[Finding], fields: tuple[str, ...], locale: str = "en") -> dict[str, str]:
    """The message to show next to each form field (empty where nothing is wrong)."""
    return {name: text for name, (text, _) in field_notes(findings, fields, locale).items()}


def field_notes(findings: list[Finding], fields: tuple[str, ...], locale: str = "en") -> dict[str, tuple[str, str]]:
    """Per form field: (the line under its label, its severity: "problem", "warning" or "" where
    nothing is wrong). Each finding says what it is with a mark and a word ("✗ Problem:",
    "⚠ Warning:"), the Doctor's marks: the page colours the field by the severity too, but
    colour is never the only sign."""
    notes: dict[str, list[str]] = {name: [] for name in fields}
    severities: dict[str, str] = {name: "" for name in fields}
    for finding in findings:
        name = field_for(finding.key)
        if name in notes:
            severity = "problem" if finding.severity == "problem" else "warning"
            problem, fix = finding_text(finding, locale)
            # A field's info line is Markdown too (Gradio renders it): escaped like the panel.
            line = t(f"field_note.{severity}", locale, problem=markdown_message(problem), fix=markdown_message(fix))
            notes[name].append(f"{DOCTOR_ICONS[severity]} {line}")
            if severity == "problem" or not severities[name]:
                severities[name] = severity
    return {name: (" ".join(lines), severities[name]) for name, lines in notes.items()}


def start_blockers(findings: list[Finding], fields: tuple[str, ...]) -> list[str]:
    """The form fields whose problems hold Start back, in the form's order; a problem about a
    key no field writes is named by its key (never dropped: Start would be disabled for no
    reason the page shows)."""
    keys = [field_for(f.key) for f in findings if f.severity == "problem"]
    named = [name for name in fields if name in keys]
    return named + [key for key in dict.fromkeys(keys) if key not in fields]


def start_reason_markdown(blockers: list[str], locale: str = "en", refused: bool = False) -> str:
    """Beside Start, in the action bar: what to fix before Start can act ("" when nothing).
    `refused`: a Start was pressed and its checks (LLaMA-Factory's own among them) refused it."""
    if not blockers:
        return ""

    def named(name: str) -> str:
        key = f"label.{name}"
        return f"**{escape_markdown(t(key, locale))}**" if key in CATALOGUE[DEFAULT_LOCALE] else code_span(name, 64)

    fields = t("actions.separator", locale).join(named(name) for name in blockers)
    return f"{DOCTOR_ICONS['problem']} " + t("actions.refused" if refused else "actions.fix_first", locale, fields=fields)


def findings_markdown(findings: list[Finding], locale: str = "en") -> str:
    if not findings:
        return ""
    lines = []
    for finding in findings:
        label = t("word.problem" if finding.severity == "problem" else "word.warning", locale)
        problem, fix = finding_text(finding, locale)
        lines.append(f"- **{label}** {code_span(finding.key, 64)}: {markdown_message(problem)} **{t('word.fix', locale)}:** {markdown_message(fix)}")
        if finding.quote:
            # Another program's own line, quoted under the finding (inside its list item).
            lines.append(f"  > {escape_markdown(t('word.llamafactory_line', locale))} {code_span(finding.quote, 400)}")
    return "\n".join(lines)


def form_load_markdown(load: FormLoad, locale: str = "en", preset=None) -> str:
    """What "Load into the form" did (a backend.config.yaml_import.FormLoad), short: one line
    of counts naming the preset the YAML was checked against (`preset`, a HardwarePreset),
    the fields the YAML set with their values, the keys kept in Other keys, and, folded
    away, the fields reset to the preset's defaults and those left as they were. Fields by
    their labels in the page's language; every value and key in a code span."""
    if not load.loaded:
        return escape_markdown(t("import.load_nothing", locale))

    def valued(name: str) -> str:
        return f"{_short_label(name, locale)} {code_span(load.values.get(name, ''), 80)}"

    other_keys = load.other_keys
    set_fields = [name for name in load.set_fields if name != "other_keys" or not other_keys]
    # The preset is named in the first line: it is the one the YAML was checked against.
    kept_fields = [name for name in load.kept_fields if name != "preset"]
    name = preset.name(locale) if preset is not None else str(load.values.get("preset", ""))
    counts = {"set": len(set_fields), "reset": len(load.reset_fields), "other": len(other_keys), "kept": len(kept_fields)}
    lines = [t("import.loaded", locale, preset=escape_markdown(name, 120), **counts)]
    separator = " · "
    if set_fields:
        lines.append(f"- **{escape_markdown(t('import.loaded_set', locale, count=len(set_fields)))}** " + separator.join(valued(n) for n in set_fields))
    if other_keys:
        lines.append(f"- **{escape_markdown(t('import.loaded_other', locale, count=len(other_keys)))}** " + separator.join(code_span(k, 64) for k in other_keys))
    text = "\n".join(lines)
    # Folded: what the YAML did not say is most of the form, and rarely what one looks for.
    for message, names, show in (
        ("import.loaded_reset", load.reset_fields, valued),
        ("import.loaded_kept", kept_fields, lambda n: _short_label(n, locale)),
    ):
        if names:
            title = html.escape(t(message, locale, count=len(names)), quote=False)
            text += f"\n\n<details><summary>{title}</summary>\n\n" + separator.join(show(n) for n in names) + "\n\n</details>"
    return text


def _short_label(name: str, locale: str) -> str:
    """A field's label without its parenthetical hint ("Max steps (0 = use epochs)" -> "Max
    steps"), escaped: a list of dozens of fields reads by their names."""
    label = t(f"label.{name}", locale)
    short = re.split(r"\s*[（(]", label, maxsplit=1)[0].strip()
    return escape_markdown(short or label)


@dataclass(frozen=True)
class Progress:
    step: int
    total: int
    percent: float
    elapsed_s: float | None  # since the trainer started; None: not started
    remaining_s: float | None  # LLaMA-Factory's estimate; None: it gave none
    throughput: float | None
    # Of a resumed run: the attempt shown and the step it resumed after (its checkpoint's).
    attempt: int | None = None
    resumed_from: int | None = None


def wall_time(snapshot: RunSnapshot, now: float | None = None) -> float | None:
    """Seconds since the trainer started (model loading included); None before it started."""
    run = snapshot.run
    if run.started_at is None:
        return None
    end = run.ended_at if run.ended_at is not None else (time.time() if now is None else now)
    return max(0.0, end - run.started_at)


_CLOCK = re.compile(r"^(?:(\d+) days?, )?(\d+):(\d{2}):(\d{2})$")


def clock_seconds(text: str) -> float | None:
    """LLaMA-Factory's "H:MM:SS" (Python's str(timedelta), "1 day, 2:03:04" past a day) in
    seconds; None for anything else."""
    match = _CLOCK.match(str(text or "").strip())
    if match is None:
        return None
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def progress_of(snapshot: RunSnapshot, now: float | None = None) -> Progress | None:
    """The progress line's numbers. A resumed run's are its current attempt's: the step counts
    on from the checkpoint it resumed from (the curve is cut back there too, and marked), and
    the tokens per second and time remaining are those of the steps this attempt trained
    (none until its first step: never the attempt before's)."""
    latest = snapshot.points[-1] if snapshot.points else None
    if latest is None:
        return None
    total = max(latest.total_steps, 1)
    percent = latest.percentage if latest.percentage is not None else 100.0 * latest.step / total
    attempt = snapshot.attempts[-1] if snapshot.attempts else None
    after = attempt.from_step if attempt is not None else None
    throughput = next((p.throughput for p in reversed(snapshot.points) if p.throughput and (after is None or p.step > after)), None)
    remaining = clock_seconds(latest.remaining) if after is None or latest.step > after else None
    return Progress(
        latest.step, latest.total_steps, float(percent), wall_time(snapshot, now), remaining, throughput,
        attempt.attempt if attempt is not None else None, after,
    )  # fmt: skip


def progress_html(snapshot: RunSnapshot | None, locale: str = "en") -> str:
    return _bar(*progress_parts(snapshot, locale))


def progress_parts(snapshot: RunSnapshot | None, locale: str = "en") -> tuple[float, str]:
    """(percent, words) of the progress bar. The watcher's answer carries them with the charts
    (backend/service/live.py), so the step it says and the chart's last step are one reading."""
    progress = progress_of(snapshot) if snapshot else None
    if progress is None:
        if snapshot is None:
            key = "progress.none"
        else:
            key = "progress.loading" if snapshot.run.active else "progress.no_steps"
            if snapshot.run.state == "finished" and getattr(snapshot.run, "kind", "train") == "evaluate":
                # A short evaluation logs no progress line (LLaMA-Factory logs every 5 batches).
                return 100.0, t("eval.panel.done", locale)
        return 0.0, t(key, locale)
    parts = [t("progress.step", locale, step=progress.step, total=progress.total), f"{progress.percent:.0f} %"]
    if progress.attempt is not None:
        parts.append(t("progress.attempt", locale, attempt=progress.attempt, step=progress.resumed_from))
    # Durations in the page's units, by the one formatter the runs table uses too.
    from backend.runs.history import format_duration

    if progress.elapsed_s is not None:
        parts.append(t("progress.elapsed", locale, elapsed=format_duration(progress.elapsed_s, locale)))
    if snapshot is not None and snapshot.run.active and progress.remaining_s is not None:
        parts.append(t("progress.eta", locale, eta=format_duration(progress.remaining_s, locale)))
    if progress.throughput:
        parts.append(t("progress.throughput", locale, rate=f"{progress.throughput:,.0f}"))
    return progress.percent, " · ".join(parts)


def _bar(percent: float, text: str) -> str:
    width = max(0.0, min(100.0, percent))
    return (
        f'<div class="rb-progress" role="progressbar" aria-valuenow="{width:.0f}" aria-valuemin="0" aria-valuemax="100">'
        f'<div class="rb-progress-track"><div class="rb-progress-fill" style="width:{width:.1f}%"></div></div>'
        f'<div class="rb-progress-text">{html.escape(text)}</div></div>'
    )


def stop_reason_text(run, locale: str = "en") -> str:
    """Why a run ended, in `locale`: its state holds a message id (`reason.*`) and values; a
    state file written before ids holds an English sentence, shown as written."""
    reason = run.stop_reason or ""
    if reason.startswith("reason.") and reason in CATALOGUE[DEFAULT_LOCALE]:
        return render_message(reason, getattr(run, "stop_reason_params", None) or {}, locale)
    return reason


def slurm_reason_text(reason: str, locale: str = "en") -> str:
    """Why Slurm holds a job, in words (`slurm.reason.*`); a reason the catalogue has no words
    for is shown as Slurm wrote it."""
    from backend.slurm.states import reason_key

    return t(reason_key(reason), locale, reason=code_span(reason or "None", 80)[1:-1])


def where_markdown(run, locale: str = "en", queue_position: int | None = None, slurm_problem: str = "") -> str:
    """Where the run executes and what it waits for: its place in this machine's queue, or its
    Slurm job (why it waits, its nodes, that a stop was asked). "" for a local run that is not
    queued."""
    job = code_span(run.job_id or "?")[1:-1]
    if run.state == "queued":
        return t("status.queued", locale, position=queue_position or "?")
    if getattr(run, "executor", "local") != "slurm":
        return ""
    lines = []
    if run.state == "pending":
        lines.append(t("status.slurm_pending", locale, job=job, reason=slurm_reason_text(run.slurm_reason, locale)))
        if run.slurm_start:
            lines.append(t("status.slurm_expected_start", locale, at=code_span(run.slurm_start, 40)[1:-1]))
    elif run.state in ("running", "starting"):
        lines.append(t("status.slurm_running", locale, job=job, nodes=code_span(run.slurm_nodes or "?", 200)[1:-1]))
    else:
        lines.append(t("status.slurm_ended", locale, job=job, slurm_state=code_span(run.slurm_state or "?", 40)[1:-1]))
    if run.active and run.stop_requested:
        lines.append(t("status.slurm_stopping", locale))
    if run.active and slurm_problem:
        lines.append(t("status.slurm_no_answer", locale, detail=code_span(slurm_problem, 300)[1:-1]))
    return "  \n".join(lines)


def status_markdown(snapshot: RunSnapshot | None, cause: str = "", fix: str = "", locale: str = "en", where: str = "") -> str:
    if snapshot is None:
        return t("status.idle", locale)
    run = snapshot.run
    lines = [status_headline(snapshot, locale)]
    if where:
        lines.append(where)
    evaluation = getattr(run, "kind", "train") == "evaluate"
    if evaluation:  # LLaMA-Factory's predict mode on a trained run (backend/evaluate)
        lines.append(t("eval.panel.of", locale, run_id=code_span(getattr(run, "source_run", ""))[1:-1]))
    if run.state == "finished" and evaluation:
        lines.append(t("eval.panel.finished", locale))
    elif run.state == "failed":
        code = t("word.unknown", locale) if run.exit_code is None else escape_markdown(run.exit_code)
        lines.append(t("status.exit_code", locale, code=code))
        # A Slurm run's cause (the time limit, or its log's) says what its reason says, and more.
        if run.stop_reason and not (cause and getattr(run, "executor", "local") == "slurm"):
            lines.append(escape_markdown(stop_reason_text(run, locale)))
        if cause:
            lines.append(f"**{t('word.cause', locale)}:** {markdown_message(cause)}")
        if fix:
            lines.append(f"**{t('word.fix', locale)}:** {markdown_message(fix)}")
        if not cause:
            lines.append(t("status.see_log", locale))
    elif run.state == "stopped":
        lines.append(t("status.stopped", locale))
        if run.stop_reason and run.stop_reason != "reason.stopped_by_user":
            lines.append(escape_markdown(stop_reason_text(run, locale)))
        if snapshot.has_adapter:
            lines.append(t("status.stopped_adapter", locale))
    elif run.state == "finished":
        lines.append(t("status.finished", locale))
        if snapshot.has_adapter:
            lines.append(t("status.adapter_ready", locale))
    if snapshot.garbage_lines:
        lines.append(t("status.garbage", locale, count=snapshot.garbage_lines))
    return "  \n".join(lines)


def status_headline(snapshot: RunSnapshot | None, locale: str = "en") -> str:
    """The status's first line (the run's state and id), for the action bar: in view where
    Start, Stop and Resume are pressed, however far down the form is scrolled."""
    if snapshot is None:
        return ""
    # status.line puts the id in a code span itself: only a backtick in it needs replacing.
    return t("status.line", locale, state=t(f"state.{snapshot.run.state}", locale), run_id=code_span(snapshot.run.id)[1:-1])


def starting_markdown(locale: str = "en") -> str:
    """The status from the moment Start is accepted until the trainer's run exists."""
    return t("status.starting", locale)


def form_mode_markdown(editing: bool, run_id: str | None, locale: str = "en", draft: bool = False) -> str:
    """Which settings the form shows: a run's (read-only), or a new run's (editable, from a
    run's settings when `run_id` is given; `draft`: a new run's form kept in this browser,
    brought back by a reload: never a run's settings)."""
    if not editing and run_id:
        return t("form.mode_run", locale, run_id=code_span(run_id)[1:-1])
    if draft:
        return t("form.mode_draft", locale)
    if run_id:
        return t("form.mode_new_from", locale, run_id=code_span(run_id)[1:-1])
    return t("form.mode_new", locale)


def run_gone_markdown(run_id: str, locale: str = "en") -> str:
    return t("status.run_gone", locale, run_id=code_span(run_id)[1:-1])


def alert_markdown(snapshot: RunSnapshot, locale: str = "en") -> str:
    if not snapshot.alert:
        return ""
    # An Alert (backend/diagnose.py) is an id and its values: rendered in the page's language.
    text = snapshot.alert.text(locale) if isinstance(snapshot.alert, Alert) else snapshot.alert
    return f"⚠ **{t('word.alert', locale)}:** {escape_markdown(text)}"


def memory_title(snapshot: RunSnapshot, locale: str = "en") -> str:
    if not snapshot.memory:
        return t("chart.memory_waiting", locale)
    if all(series.source == "process" for series in snapshot.memory):
        return t("chart.memory_process", locale)
    sources = sorted({series.source for series in snapshot.memory})
    return t("chart.memory_gpu", locale, source=", ".join(sources))


def loss_chart_names(locale: str = "en") -> dict[str, str]:
    return {
        "loss": t("chart.loss_series", locale),
        "smoothed": t("chart.loss_smoothed", locale),
        "learning_rate": t("chart.learning_rate", locale),
        "step": t("chart.step", locale),
        "accuracy": t("chart.reward_accuracy", locale),
        "reward": t("chart.reward", locale),
        "eval_loss": t("chart.eval_loss", locale),
    }


def attempt_marks(snapshot: RunSnapshot, locale: str = "en") -> tuple[list[tuple[float, str]], list[tuple[float, str]]]:
    """Where each resumed attempt began, in words: (on the loss chart: the step it resumed
    after; on the memory chart: the seconds of its resume)."""
    loss = [(float(mark.from_step), t("chart.attempt", locale, attempt=mark.attempt)) for mark in snapshot.attempts]
    memory = [(at, t("chart.attempt", locale, attempt=attempt)) for attempt, at in snapshot.memory_breaks if at >= 0]
    return loss, memory


def memory_chart_names(locale: str = "en") -> dict[str, str]:
    return {"used": t("chart.used", locale), "total": t("chart.total", locale), "seconds": t("chart.seconds", locale), "gib": t("chart.gib", locale)}


def _value(value: float | None, unit: str) -> str:
    return "—" if value is None else f"{value:.0f} {unit}"


def gpu_table_markdown(snapshot: RunSnapshot, locale: str = "en") -> str:
    """Latest utilization, temperature and power per GPU (GPU sources only)."""
    gpus = [series for series in snapshot.memory if series.source != "process"]
    if not gpus:
        return ""
    header = f"| {t('word.gpu', locale)} | {t('word.used', locale)} | {t('word.utilization', locale)} | {t('word.temperature', locale)} | {t('word.power', locale)} |"
    rows = [header, "|---|---|---|---|---|"]
    for series in gpus:
        used = series.used_gib[-1] if series.used_gib else None
        total = series.total_gib[-1] if series.total_gib else None
        memory = "—" if used is None else f"{used:.1f}" + ("" if total is None else f" / {total:.0f}") + " GiB"
        rows.append(f"| {escape_markdown(series.label, 80)} | {memory} | {_value(series.util_pct, '%')} | {_value(series.temp_c, '°C')} | {_value(series.power_w, 'W')} |")
    return "\n".join(rows)


def estimate_markdown(estimate, locale: str = "en") -> str:
    """The VRAM fit estimate: breakdown, verdict and the cheapest change that fits."""
    # No parameters counted: the model's config.json could not be read. A count without a
    # verdict is a preset with no GPU memory to compare with (the CPU demo): still shown.
    if estimate is None or not estimate.num_params:
        return t("estimate.unknown", locale)
    lines = [f"**{t('estimate.title', locale)}:** {markdown_message(localized(estimate.summary(), locale))}"]
    if not estimate.vram_bytes:
        lines.append(t("estimate.no_device_memory", locale))
    # Paragraphs apart, the breakdown one list: Markdown joins lines that are only "\n" apart.
    lines.append("\n".join(f"- {escape_markdown(localized(name, locale))}: {_bytes_text(size)}" for name, size in estimate.breakdown()))
    if estimate.cheapest_fix:
        lines.append(f"**{t('estimate.cheapest_fix', locale)}:** {markdown_message(localized(estimate.cheapest_fix, locale))}")
    for assumption in estimate.assumptions:
        lines.append(f"_{markdown_message(localized(assumption, locale))}_")
    return "\n\n".join(line for line in lines if line)


def _bytes_text(size: float) -> str:
    """GiB with two decimals; below 0.1 GiB in MiB (a tiny model's parts are not "0.00 GiB")."""
    if size < 1024**3 / 10:
        return f"{size / 2**20:.1f} MiB"
    return f"{size / 1024**3:.2f} GiB"


# The doctor's verdict marks: text symbols from the Dingbats and Miscellaneous Symbols blocks
# that common fonts have (DejaVu, WenQuanYi), not emoji (✅ ❌ drew empty boxes without an
# emoji font). Never the emoji form (no U+FE0F).
DOCTOR_ICONS = {"ok": "✓", "warning": "⚠", "problem": "✗"}


def checks_markdown(checks, locale: str = "en") -> str:
    """The doctor's verdicts, one row each."""
    icons = DOCTOR_ICONS
    rows = [f"| | {t('doctor.check', locale)} | {t('doctor.saw', locale)} | {t('word.fix', locale)} |", "|---|---|---|---|"]
    for check in checks:
        # A check's words are messages (backend/doctor/__init__.py): rendered in the page's language,
        # with what the machine said inside them as written.
        name, saw, fix = (localized(part, locale) for part in (check.name, check.saw, check.fix))
        # markdown_message escapes "|" outside code spans; inside one it would still end the cell.
        saw = markdown_message(saw).replace("|", "\\|") if "`" in saw else markdown_message(saw)
        fix = markdown_message(fix).replace("|", "\\|") if "`" in fix else markdown_message(fix)
        rows.append(f"| {icons.get(check.verdict, '')} {t('verdict.' + check.verdict, locale)} | {escape_markdown(name)} | {saw} | {fix} |")
    return "\n".join(rows)


def preset_notes_markdown(preset, locale: str = "en") -> str:
    """One line on a preset's hardware, and its notes, in the page's language. The notes and
    env values come from a preset file, which anyone with access to presets/ can write."""
    if preset is None:
        return ""
    parts = [code_span(preset.gfx_target)]
    if preset.vram_gb:
        parts.append(f"{preset.vram_gb:g} GB × {preset.devices_per_node}")
    # The precision the preset puts in the form (fp32 on the CPU, fp16 on RDNA2): the line,
    # the form and the Doctor say the same.
    parts.append(t("preset.bf16", locale) if preset.bf16 else t("preset.no_bf16", locale, precision=preset.precision))
    if preset.env:
        parts.append(t("preset.env", locale, vars=", ".join(code_span(f"{k}={v}") for k, v in preset.env)))
    text = " · ".join(parts)
    notes = preset.notes_zh if locale.startswith("zh") and preset.notes_zh else preset.notes
    return f"{text}  \n{markdown_message(notes)}" if notes else text


def doctor_blockers_markdown(checks, locale: str = "en") -> str:
    """The doctor's problems that would break a run, for beside Start, in the page's language
    (what the machine said inside them is its own text: escaped)."""
    return "\n".join(
        f"{DOCTOR_ICONS['problem']} **{escape_markdown(localized(c.name, locale))}:** {markdown_message(localized(c.saw, locale))} — {markdown_message(localized(c.fix, locale))}"
        for c in checks
    )


def _clock(at: float | None) -> str:
    return "—" if at is None else time.strftime("%H:%M:%S", time.localtime(at))


def queue_markdown(active, queued, slurm_runs, locale: str = "en", slurm_problem: str = "") -> str:
    """The queue, as the Runs tab shows it: what trains here now, the runs queued here in the
    order they start, and every Slurm run that waits or runs with why it waits."""
    return local_queue_markdown(active, queued, locale) + "\n\n" + slurm_queue_markdown(slurm_runs, locale, slurm_problem)


MAX_DETAILED_RUNS = 8  # runs side by side in the Runs tab's details; the first ones chosen


def run_details_markdown(summaries, run_ids: list[str], locale: str = "en") -> str:
    """The chosen runs (backend.runs.history.RunSummary) with every column, the ones the
    table leaves out too, side by side: a column per run in the order chosen, a row per
    setting. "" when none of them is on disk."""
    from backend.runs.history import history_columns, history_headers, summary_words

    by_id = {s.id: s for s in summaries}
    chosen = [by_id[run_id] for run_id in dict.fromkeys(run_ids) if run_id in by_id][:MAX_DETAILED_RUNS]
    if not chosen:
        return ""
    words = [summary_words(s, locale) for s in chosen]
    columns = history_columns()
    headers = dict(zip(columns, history_headers(locale, columns), strict=True))
    lines = [
        f"**{escape_markdown(t('runs.details', locale))}**",
        "",
        "| | " + " | ".join(code_span(s.id) for s in chosen) + " |",
        "|---|" + "---|" * len(chosen),
    ]
    for column in columns[1:]:
        cells = [escape_markdown(w[column], 300) if w[column] else "—" for w in words]
        lines.append(f"| {escape_markdown(headers[column])} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def delete_confirm_markdown(run_ids: list[str], locale: str = "en") -> str:
    """What Delete asks before it deletes: of the one run, or of the several chosen."""
    names = t("actions.separator", locale).join(code_span(run_id) for run_id in run_ids)
    if len(run_ids) == 1:
        return t("runs.confirm_delete_one", locale, run=names)
    return t("runs.confirm_delete_many", locale, count=len(run_ids), runs=names)


def local_queue_markdown(active, queued, locale: str = "en") -> str:
    """This machine's queue: what trains here now and the runs queued here, in the order they
    start; one line when none waits."""
    lines = [f"**{t('queue.here', locale)}**", ""]
    if active is not None:
        lines += [t("queue.training_now", locale, run_id=code_span(active.id)[1:-1]), ""]
    if queued:
        lines += [f"| # | {t('runs.column.run', locale)} | {t('runs.column.name', locale)} | {t('queue.column.since', locale)} |", "|---|---|---|---|"]
        for number, state in enumerate(queued, start=1):
            lines.append(f"| {number} | {code_span(state.id)} | {escape_markdown(state.name, 80)} | {_clock(state.queued_at)} |")
    else:
        lines.append(t("queue.empty", locale))
    return "\n".join(lines)


def slurm_queue_markdown(slurm_runs, locale: str = "en", slurm_problem: str = "") -> str:
    """Every Slurm run that waits or runs, with why it waits (Slurm is their queue)."""
    lines = [f"**{t('queue.slurm', locale)}**", ""]
    if slurm_runs:
        lines += [f"| {t('runs.column.run', locale)} | {t('queue.column.job', locale)} | {t('runs.column.state', locale)} | {t('queue.column.detail', locale)} |", "|---|---|---|---|"]
        for state in slurm_runs:
            detail = slurm_reason_text(state.slurm_reason, locale) if state.state == "pending" else code_span(state.slurm_nodes or "?", 80)
            lines.append(f"| {code_span(state.id)} | {code_span(state.job_id or '?')} | {escape_markdown(t(f'state.{state.state}', locale))} | {detail} |")
    else:
        lines.append(t("queue.slurm_empty", locale))
    if slurm_problem:
        lines += ["", t("status.slurm_no_answer", locale, detail=code_span(slurm_problem, 300)[1:-1])]
    return "\n".join(lines)


def choice_labels(name: str, locale: str = "en") -> list[tuple[str, Any]]:
    """A choice field's (label in `locale`, value) pairs: the words of its schema's label ids."""
    from backend.config import schema

    return [(t(label, locale), value) for label, value in schema.field(name).choice_labels]


def run_on_choices(locale: str = "en") -> list[tuple[str, str]]:
    """Where a run executes, as (label in `locale`, value) pairs for the radio's choices."""
    return choice_labels("run_on", locale)


def slurm_cause(run, checkpoint: str, locale: str = "en") -> tuple[str, str]:
    """(cause, fix) of a Slurm run that Slurm ended (time limit, a node, memory...); ("", "")
    when the job's own end says nothing more than its log does."""
    state = getattr(run, "slurm_state", "")
    if state not in ("TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE"):
        return "", ""
    values = {
        "limit": code_span((run.stop_reason_params or {}).get("limit", "?"), 40)[1:-1],
        "nodes": code_span(run.slurm_nodes or "?", 200)[1:-1],
        "checkpoint": code_span(checkpoint, 80)[1:-1] if checkpoint else "",
    }
    resume = t("slurm.fix.resume_from", locale, checkpoint=values["checkpoint"]) if checkpoint else t("slurm.fix.no_checkpoint", locale)
    return t(f"slurm.cause.{state}", locale, **values), t(f"slurm.fix.{state}", locale, resume=resume, **values)


def strategy_choices(locale: str = "en") -> list[tuple[str, str]]:
    """The Multi-GPU strategies as (label in `locale`, value) pairs for a dropdown's choices."""
    return choice_labels("dist_strategy", locale)


PROGRESS_CSS = """
.rb-progress-track { background: #e5e7eb; border-radius: 6px; height: 14px; overflow: hidden; }
.rb-progress-fill { background: #ed1c24; height: 100%; transition: width 0.4s; }
.rb-progress-text { margin-top: 4px; font-size: 0.95em; }
"""
