"""The Train tab: the form, and the live view of the watched run. Wiring only."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import gradio as gr

from backend import view
from backend.config import schema
from backend.i18n import localized
from backend.service import RocBoard, RunView, demo_form
from backend.service.draft import NO_DRAFT, draft_of, form_from_draft
from backend.service.live import digest
from ui.live import live_state_html
from ui.widgets import Texts

DIST_FIELDS = tuple(f.name for f in schema.plan_fields())
ALL_FIELDS = tuple(f.name for f in schema.page_fields())

# Element ids that tests and automation rely on (backend/config/schema.py: kebab-case of the names).
FIELD_IDS = schema.element_ids()
# The accordions the schema's sections go into, and whether each starts open.
SECTIONS_OPEN = {"": True, "method": False, "training": True, "multi_gpu": False, "other_keys": False, "placement": False}
# The Slurm fields show only while "Run on" says Slurm, this machine's (local_gpus) only while it
# says this machine (backend/config/schema.py PLACEMENT_FIELDS: slurm_ and local_ prefixes).
SLURM_FIELDS = tuple(f.name for f in schema.placement_fields() if f.name.startswith("slurm_"))
LOCAL_FIELDS = tuple(f.name for f in schema.placement_fields() if f.name.startswith("local_"))
WIDGETS: dict[str, tuple[type, dict[str, Any]]] = {
    "textbox": (gr.Textbox, {}),
    "lines": (gr.Textbox, {"lines": 3}),
    "number": (gr.Number, {}),
    "integer": (gr.Number, {"precision": 0}),
    "dropdown": (gr.Dropdown, {}),
    "radio": (gr.Radio, {}),
    "checkbox": (gr.Checkbox, {}),
}


def build_form_fields(
    texts: Texts,
    defaults: dict[str, Any],
    choices: dict[str, list[Any]] | None = None,
    after: dict[str, Any] | None = None,
    form_fields: tuple[schema.Field, ...] | None = None,
    interactive: bool = True,
    hidden: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A widget per schema field, grouped by section (an accordion) and row, in the schema's
    order. `choices` gives choices the page knows better (the presets); `after[name]()` runs
    right after that field's widget (the preset notes)."""
    widgets: dict[str, Any] = {}
    form_fields = schema.page_fields() if form_fields is None else form_fields
    sections = list(dict.fromkeys(f.section for f in form_fields))

    def build(form_field: schema.Field) -> None:
        widget_class, options = WIDGETS[form_field.widget]
        kwargs = dict(options)
        if form_field.widget in ("dropdown", "radio"):
            kwargs["choices"] = (choices or {}).get(form_field.name) or view.choice_labels(form_field.name, texts.locale) or list(form_field.choices)
        widget = widget_class(
            value=defaults.get(form_field.name, form_field.default),
            elem_id=form_field.elem_id,
            label=texts(form_field.label_id),
            interactive=interactive,
            visible=form_field.name not in hidden,
            **kwargs,
        )
        widgets[form_field.name] = texts.label(widget, form_field.label_id)
        if after and form_field.name in after:
            after[form_field.name]()

    def build_section(members: list[schema.Field]) -> None:
        index = 0
        while index < len(members):
            row = [members[index]]
            while members[index].row and index + len(row) < len(members) and members[index + len(row)].row == members[index].row:
                row.append(members[index + len(row)])
            if len(row) > 1:
                with gr.Row():
                    for member in row:
                        build(member)
            else:
                build(row[0])
            index += len(row)

    for section in sections:
        members = [f for f in form_fields if f.section == section]
        if not section:
            build_section(members)
            continue
        with texts.label(gr.Accordion(texts(f"accordion.{section}"), open=SECTIONS_OPEN.get(section, False)), f"accordion.{section}"):
            build_section(members)
    return widgets


# Where the watcher script draws a chart (ui/live.js).
CHART_HOST = '<div class="rb-chart"></div>'

# The action bar stays in view at the bottom of the window while the form scrolls (a
# 1000-px-high window otherwise puts Start 700 px below the fold), in both languages.
# Gradio's container has overflow: hidden, which would make it the bar's scroll box (and
# the bar never stick); `clip` cuts the same overflow without being one. Above the fields it
# passes over: Gradio lifts a field's label to z-index 40 (--layer-4), under its option
# lists (--layer-top). The bar's own two lines say why Start waits and what the run shown
# does, where the buttons are pressed.
# A field's line under its label: red for a problem, amber for a warning (with the mark and
# the word: colour is never the only sign), the field's frame too (an outline drawn inside
# the field: its group clips anything outside).
ACTIONS_CSS = """
.rb-hidden { display: none !important; }
.rb-chart { width: 100%; min-height: 340px; }
.gradio-container { overflow: clip !important; }
#actions { position: sticky; bottom: 0; z-index: 50; background: var(--background-fill-primary);
  padding: 8px 0; border-top: 1px solid var(--border-color-primary); gap: 4px; }
#actions .prose, #actions .prose p { margin: 0; font-size: 0.9em; }
#start-reason, #start-reason * { color: #b91c1c !important; }
.dark #start-reason, .dark #start-reason * { color: #f87171 !important; }
.rb-field-problem { outline: 2px solid #b91c1c; outline-offset: -2px; }
.rb-field-problem [data-testid=block-info] + div, .rb-field-problem [data-testid=block-info] + div * { color: #b91c1c !important; }
.rb-field-warning { outline: 2px solid #d97706; outline-offset: -2px; }
.rb-field-warning [data-testid=block-info] + div, .rb-field-warning [data-testid=block-info] + div * { color: #92400e !important; }
.dark .rb-field-problem [data-testid=block-info] + div, .dark .rb-field-problem [data-testid=block-info] + div * { color: #f87171 !important; }
.dark .rb-field-warning [data-testid=block-info] + div, .dark .rb-field-warning [data-testid=block-info] + div * { color: #fbbf24 !important; }
#bar-status .pending, #start-reason .pending { animation: none !important; opacity: 1 !important; }
#status .pending, #form-mode .pending { opacity: 1 !important; }
/* The watcher refreshes these every second while a run trains: no "pending" flash (an
   animation the browser would paint for each refresh) and no relayout of the whole page. */
#status, #alert, #progress, #gpu-table, #live-state, #loss-chart, #memory-chart { contain: layout paint style; }
#status .pending, #alert .pending, #progress .pending, #gpu-table .pending, #live-state .pending { animation: none !important; opacity: 1 !important; }
"""


@dataclass
class TrainTab:
    fields: dict[str, Any]
    watched_run: Any
    shown_version: Any
    mode: Any  # gr.State: {"editing": bool, "run_id": str | None, "draft": bool}, what the form shows
    run_outputs: list[Any]  # the run panel's components, in the order `show` and `render` update them
    open_outputs: list[Any]  # what `open_run` updates: the watched run, the form, the panel
    refresh: Any  # the hidden button the watcher script presses when the run shown changed (ui/live.py)
    show: Any  # (RunView, editing) -> updates for run_outputs
    render: Any  # (run_id, shown_version, locale, mode) -> updates for run_outputs
    open_run: Any  # (run_id, locale) -> updates for open_outputs: the form shows that run, read-only
    edit_form: Any  # (values, run_id, locale, notice) -> updates for open_outputs: an editable new run
    open_first: Any  # (run_id, saved draft, locale) -> updates for open_outputs: a page just opened
    draft: Any  # gr.BrowserState: this browser's draft (backend/service/draft.py)
    preset_notes: Any
    stop_on_nan: Any
    findings_box: Any
    mode_box: Any
    notice_box: Any
    then_derive: Any  # (event) -> the event followed by recomputing what is derived from the form
    dataset_pick: Any  # the datasets added on the Data tab, offered beside the dataset field


def start_intent(mode_value: Any, request: gr.Request | None) -> str:
    """The intent a Start carries: its form's, or, when the tab's load has not given it one
    yet (Start pressed the moment the page appeared), the tab's own session: that tab has had
    one form only, so its Starts so far are one Start."""
    intent = str(mode_value.get("intent") or "") if isinstance(mode_value, dict) else ""
    if intent:
        return intent
    session = getattr(request, "session_hash", None) if request is not None else None
    return f"tab:{session}" if session else ""


def new_intent() -> str:
    """A new form for a new run: its Starts are one (RunManager.start's `intent`)."""
    return secrets.token_hex(8)


def build_train_tab(board: RocBoard, texts: Texts, locale_state: Any) -> TrainTab:
    defaults = {**demo_form(), **schema.side_form_defaults()}
    shown: dict[str, Any] = {}

    watched_run = gr.State(None)  # the run this tab shows
    shown_version = gr.State(None)  # what the tab last drew (see `render`): nothing is sent when unchanged
    # "intent": made anew each time the form opens for a new run; the backend makes one run of
    # two Starts of one intent (a double-click). The page's load gives each tab its own.
    # "draft": the form is a draft this browser kept, brought back by a reload (the line above
    # the form says so: a draft is never a run's settings).
    mode = gr.State({"editing": True, "run_id": None, "intent": ""})
    # The form of a new run not started yet, kept in this browser's localStorage (a fixed key
    # and secret: it survives a reload and a restart of the app): see backend/service/draft.py.
    draft = gr.BrowserState(None, storage_key="rocboard-draft", secret="rocboard-draft")
    with gr.Row():
        with gr.Column(scale=2, min_width=360):
            # Empty and read-only until the page's load event says whether the form shows a run
            # or a new one: never an editable form that turns read-only under the user's hand.
            mode_box = gr.Markdown("", elem_id="form-mode")
            notice_box = gr.Markdown("", elem_id="form-notice")

            def notes() -> Any:
                return shown.setdefault("notes", gr.Markdown(view.preset_notes_markdown(board.preset(defaults["preset"])), elem_id="preset-notes"))

            # The datasets added on the Data tab, one pick away (it fills the folder and name).
            def pick() -> Any:
                return shown.setdefault(
                    "pick",
                    texts.label(
                        gr.Dropdown(board.data.names(), value=None, label=texts("datatab.pick"), interactive=False, elem_id="dataset-pick"),
                        "datatab.pick",
                    ),
                )

            fields = build_form_fields(
                texts,
                defaults,
                choices={"preset": board.preset_choices(), "run_on": view.run_on_choices()},
                after={"preset": notes, "dataset": pick},
                interactive=False,
                hidden=SLURM_FIELDS if defaults.get("run_on") != "slurm" else LOCAL_FIELDS,
            )
            preset_notes = shown["notes"]
            dataset_pick = shown["pick"]
            estimate_box = gr.Markdown("", elem_id="estimate")
            findings_box = gr.Markdown("", elem_id="findings")
            doctor_box = gr.Markdown(board.doctor_blockers_markdown(defaults["preset"]), elem_id="doctor-blockers")
            with gr.Row():
                preview_button = texts.value(gr.Button(texts("button.preview"), elem_id="preview"), "button.preview")
                estimate_button = texts.value(gr.Button(texts("button.estimate"), elem_id="estimate-button"), "button.estimate")
            stop_on_nan = texts.label(gr.Checkbox(False, label=texts("label.stop_on_nan"), elem_id="stop-on-nan"), "label.stop_on_nan")
            with gr.Column(elem_id="actions"):
                with gr.Row():
                    # Narrow enough that Start, Stop and Resume share one line in a 360-px column.
                    start_button = texts.value(gr.Button(texts("button.start"), variant="primary", interactive=False, min_width=80, elem_id="start"), "button.start")
                    stop_button = texts.value(gr.Button(texts("button.stop"), variant="stop", interactive=False, min_width=80, elem_id="stop"), "button.stop")
                    resume_button = texts.value(gr.Button(texts("button.resume"), interactive=False, min_width=80, elem_id="resume"), "button.resume")
                    new_run_button = texts.value(gr.Button(texts("button.new_run"), visible=False, min_width=200, elem_id="new-run"), "button.new_run")
                # Why Start waits (the form's problems) or why it was refused: written by the
                # live checks and by Start. The state of the run shown: written with the panel.
                start_reason = gr.Markdown("", elem_id="start-reason")
                bar_status = gr.Markdown("", elem_id="bar-status")
        with gr.Column(scale=3):
            status = gr.Markdown(view.status_markdown(None), elem_id="status")
            alert = gr.Markdown("", elem_id="alert")
            progress = gr.HTML(view.progress_html(None), elem_id="progress")
            # Drawn by the page's watcher script with the charts it fetches (ui/live.py, live.js);
            # Gradio never re-sends them.
            gr.HTML(CHART_HOST, elem_id="loss-chart", padding=False)
            gr.HTML(CHART_HOST, elem_id="memory-chart", padding=False)
            gpu_table = gr.Markdown("", elem_id="gpu-table")
            # A DownloadButton's words are its label; its value is the file.
            download = texts.label(
                gr.DownloadButton(texts("button.download"), value=None, interactive=False, elem_id="download"), "button.download"
            )
            with texts.label(gr.Accordion(texts("accordion.preview"), open=False), "accordion.preview") as preview_panel:
                preview_yaml = gr.Code(language="yaml", label="config.yaml", elem_id="preview-yaml")
                preview_command = gr.Code(language="shell", label="shell", elem_id="preview-command")
            with texts.label(gr.Accordion(texts("accordion.run_config"), open=False), "accordion.run_config"):
                run_config = gr.Code(language="yaml", label="config.yaml", elem_id="run-config")
            with texts.label(gr.Accordion(texts("accordion.log"), open=False), "accordion.log"):
                log_tail = gr.Code(label="train.log", elem_id="log-tail")
    # What the watcher script reads (which run, which version, whether it trains) and the
    # button it presses when that run changed: the panel's one Gradio event while watching.
    live_state = gr.HTML(live_state_html(None, None, False, "en", initial=True), elem_id="live-state", elem_classes=["rb-hidden"])
    refresh = gr.Button("", elem_id="live-refresh-all", elem_classes=["rb-hidden"])
    # The same for a run that still trains: only what changes while it does (fewer outputs,
    # less work for the browser, which re-renders every output of an event).
    refresh_ticking = gr.Button("", elem_id="live-refresh", elem_classes=["rb-hidden"])

    form_inputs = [fields[name] for name in ALL_FIELDS]
    # The run panel: each member of a RunView and the component that shows it, by name.
    panel = {
        "status": status,
        "bar": bar_status,
        "alert": alert,
        "progress": progress,
        "gpu_table": gpu_table,
        "download": download,
        "log_tail": log_tail,
        "config_yaml": run_config,
        "stop_on_nan": stop_on_nan,
        "version": shown_version,
        "live": live_state,
        "start": start_button,
        "stop": stop_button,
        "resume": resume_button,
    }
    run_outputs = list(panel.values())

    def show(run: RunView, editing: bool = True, locale: str = "en", sent: dict[str, str] | None = None) -> list[Any]:
        """The panel's updates for `run`, component by component; gr.skip() for what the tab
        already shows: all of it when the run's version is the one drawn, else each member
        whose value is the one last sent (`sent`: a digest per member; None: send all).
        Start is disabled on a read-only form; on an editable one the live checks decide
        (`on_form_change`: it can act when the form has no problem); Stop acts on a training
        run; Resume on a stopped or failed run with a checkpoint."""
        if run.unchanged:
            return [gr.skip()] * len(panel)
        updates: dict[str, Any] = {
            "live": live_state_html(run.run_id, run.version, run.active, locale),
            "status": run.status,
            "bar": run.headline,
            "alert": run.alert,
            "progress": run.progress,
            "gpu_table": run.gpu_table,
            "download": gr.update(value=None if run.download is None else str(run.download), interactive=run.download is not None),
            "log_tail": run.log_tail,
            "stop": gr.update(interactive=run.active),
            "resume": gr.update(interactive=run.resumable and not run.active),
        }
        if run.config_yaml is not None:
            updates["config_yaml"] = run.config_yaml
        if run.stop_on_nan is not None:
            updates["stop_on_nan"] = run.stop_on_nan
        # While a run trains only its progress and readings change from second to second:
        # each update re-renders its component in the browser, so what is already there is
        # not sent again.
        if not editing:
            updates["start"] = gr.update(interactive=False)
        digests = {name: digest(value) for name, value in updates.items()}
        if sent:
            updates = {name: value for name, value in updates.items() if sent.get(name) != digests[name]}
        # Start's digest counts only while this panel decides it (a read-only form): an editable
        # form's checks enable it meanwhile, and the next read-only form must disable it again.
        sent_now = {name: value for name, value in {**(sent or {}), **digests}.items() if name != "start" or not editing}
        updates["version"] = {"version": run.version, "sent": sent_now}
        return [updates.get(name, gr.skip()) for name in panel]

    def form_of(values: tuple[Any, ...]) -> dict[str, Any]:
        return dict(zip(ALL_FIELDS, values, strict=True))

    def field_updates(findings, locale: str = "en") -> list[Any]:
        notes = view.field_notes(findings, ALL_FIELDS, locale)
        # "" clears a warning; None would mean "leave it", and the old warning would stay.
        return [gr.update(info=notes[name][0] or "", elem_classes=[f"rb-field-{notes[name][1]}"] if notes[name][1] else []) for name in ALL_FIELDS]

    def editing_of(mode_value: Any) -> bool:
        return not isinstance(mode_value, dict) or bool(mode_value.get("editing", True))

    def render(run_id: str | None, shown: Any = None, locale: str = "en", mode_value: Any = None) -> list[Any]:
        """Everything the run panel shows of `run_id`; gr.skip() where nothing changed since
        `shown` (the `version` state: the version drawn and a digest of each member sent;
        None: draw it all)."""
        drawn = shown if isinstance(shown, dict) else {}
        return show(board.run_view(run_id, locale, drawn.get("version")), editing_of(mode_value), locale, drawn.get("sent"))

    # --- what the form shows: a run's settings (read-only) or a new run's (editable) ------
    open_outputs = [watched_run, mode, mode_box, notice_box, new_run_button, dataset_pick, *form_inputs, *run_outputs]

    def pick_update(editing: bool) -> Any:
        # The list is read from disk each time a form opens: datasets added since are there.
        return gr.update(choices=board.data.names(), value=None, interactive=editing)

    def open_run(run_id: str | None, locale: str = "en") -> list[Any]:
        """The page shows `run_id`: its charts, and its settings in the form, read-only. With
        no run (or one whose directory is gone), an editable form for a new run."""
        values = board.run_form(run_id) if run_id else None
        new_mode: dict[str, Any]
        if values is None:
            new_mode = {"editing": True, "run_id": None, "intent": new_intent()}
            fields_updates = [gr.update(interactive=True)] * len(ALL_FIELDS)
        else:
            new_mode = {"editing": False, "run_id": run_id}
            fields_updates = [gr.update(value=values[name], interactive=False) if name in values else gr.update(interactive=False) for name in ALL_FIELDS]
        return [
            run_id,
            new_mode,
            view.form_mode_markdown(new_mode["editing"], new_mode["run_id"], locale),
            "",
            gr.update(visible=not new_mode["editing"]),
            pick_update(new_mode["editing"]),
            *fields_updates,
            *render(run_id, None, locale, new_mode),
        ]

    def edit_form(
        values: dict[str, Any] | None, run_id: str | None, locale: str = "en", notice: str = "", from_run: bool = True, draft: bool = False
    ) -> list[Any]:
        """An editable form for a new run, filled with `values` where given (else the settings
        of the watched `run_id`, `from_run`); the watched run stays on the panel (Start waits
        while it trains). `draft`: the values are the draft this browser kept."""
        new_mode: dict[str, Any] = {"editing": True, "run_id": run_id if from_run else None, "intent": new_intent(), **({"draft": True} if draft else {})}
        fields_updates = [gr.update(value=values[name], interactive=True) if values and name in values else gr.update(interactive=True) for name in ALL_FIELDS]
        return [
            gr.skip(),
            new_mode,
            view.form_mode_markdown(True, new_mode["run_id"], locale, draft=draft),
            notice,
            gr.update(visible=False),
            pick_update(True),
            *fields_updates,
            *render(run_id, None, locale, new_mode),
        ]

    new_run_button.click(lambda run_id, locale: edit_form(None, run_id, locale), [watched_run, locale_state], open_outputs, show_progress="hidden")

    def open_first(run_id: str | None, saved_draft: Any, locale: str = "en") -> list[Any]:
        """What a page just opened shows: the draft this browser kept (an editable new run's
        form, the line above it saying it is a draft) beside the run `run_id`; with no draft,
        `open_run(run_id)`."""
        values = form_from_draft(saved_draft, [preset_id for _, preset_id in board.preset_choices()])
        if values is None:
            return open_run(run_id, locale)
        opened = edit_form(values, run_id, locale, from_run=False, draft=True)
        opened[open_outputs.index(watched_run)] = run_id  # the panel watches the run it shows
        return opened

    def on_pick(name: str | None, stage: str):
        if not name:
            return [gr.skip()] * len(ALL_FIELDS)
        values = board.data.form_values(name, str(stage or "sft"))
        return [gr.update(value=values[field]) if field in values else gr.skip() for field in ALL_FIELDS]

    dataset_pick.input(on_pick, [dataset_pick, fields["stage"]], form_inputs, show_progress="hidden")

    def on_preset(preset_id: str):
        values = board.form_for_preset(preset_id)
        return [gr.update(value=values[name]) if name in values and name != "preset" else gr.skip() for name in ALL_FIELDS]

    # .input, not .change: filling the form must not re-fire when the value is set by code.
    fields["preset"].input(on_preset, fields["preset"], form_inputs, show_progress="hidden")

    # The Slurm fields (and this machine's) follow "Run on" however it is set (typed, a run
    # opened, an import).
    fields["run_on"].change(
        lambda run_on: [gr.update(visible=run_on == "slurm") for _ in SLURM_FIELDS] + [gr.update(visible=run_on != "slurm") for _ in LOCAL_FIELDS],
        fields["run_on"],
        [fields[name] for name in (*SLURM_FIELDS, *LOCAL_FIELDS)],
        show_progress="hidden",
    )

    # --- everything derived from the form follows it -----------------------------------
    # Any change of a field (typed, a preset, a run opened, an import) recomputes the findings,
    # the field warnings, the preview, the estimate and the doctor's blockers, so none is ever
    # shown for other values. LLaMA-Factory's own parser (seconds) is not run here: its answer
    # is shown when it is already known for these exact values. Quietly: no spinner per field.
    # Start follows the same checks: on an editable form it can act exactly when they find no
    # problem (the action bar says which fields to fix first; while a run trains here, Start
    # queues the new run behind it); LLaMA-Factory's own check runs at Start, and a refusal
    # of it is said in the bar the same way (`on_start`).
    # The form of a new run is kept as this browser's draft as it changes; a read-only form
    # (a run's settings) is no draft, and clears it: a started run keeps its own settings.
    def on_form_change(locale, mode_value, *values):
        form = form_of(values)
        result = board.preview(form, ask_llamafactory=False)
        preset_id = str(form.get("preset", ""))
        editing = editing_of(mode_value)
        blockers = view.start_blockers(result.findings, ALL_FIELDS) if editing else []
        return [
            view.findings_markdown(result.findings, locale),
            view.estimate_markdown(board.estimate(form), locale),
            board.doctor_blockers_markdown(preset_id, locale),
            board.preset_notes(preset_id, locale),
            result.yaml_text,
            localized(result.command, locale),
            *field_updates(result.findings, locale),
            gr.update(interactive=editing and not blockers),
            view.start_reason_markdown(blockers, locale),
            draft_of(form, defaults) if editing else NO_DRAFT,
        ]

    derived_outputs = [findings_box, estimate_box, doctor_box, preset_notes, preview_yaml, preview_command, *form_inputs, start_button, start_reason, draft]
    derived_inputs = [locale_state, mode, *form_inputs]
    # The mode too: a form opened read-only or for a new run with the same values changes no
    # field, and Start must follow it all the same.
    gr.on(
        [widget.change for widget in form_inputs] + [mode.change],
        on_form_change,
        derived_inputs,
        derived_outputs,
        trigger_mode="always_last",
        show_progress="hidden",
        queue=False,  # answered in milliseconds: not queued (ui/app.py says why)
    )

    def then_derive(event: Any) -> Any:
        """After `event` (the page's load, a language switch): the derived texts for the form
        as it is, in the page's language."""
        return event.then(on_form_change, derived_inputs, derived_outputs, show_progress="hidden", queue=False)

    def on_preview(locale, *values):
        result = board.preview(form_of(values))
        return [result.yaml_text, localized(result.command, locale), view.findings_markdown(result.findings, locale), gr.Accordion(open=True), *field_updates(result.findings, locale)]

    preview_button.click(on_preview, [locale_state, *form_inputs], [preview_yaml, preview_command, findings_box, preview_panel, *form_inputs], show_progress="hidden")

    def on_estimate(locale, *values):
        return view.estimate_markdown(board.estimate(form_of(values)), locale)

    estimate_button.click(on_estimate, [locale_state, *form_inputs], estimate_box, show_progress="hidden")

    # --- start, resume, stop -------------------------------------------------------------
    def on_start_accepted(locale):
        """At once, before the seconds of checks: the status (and the action bar, in view
        where Start was pressed) says Start was taken, and Start cannot be pressed again."""
        starting = view.starting_markdown(locale)
        return starting, starting, "", gr.update(interactive=False)

    def on_start(run_id, mode_value, locale, stop_on_nan_value, request: gr.Request, *values):
        intent = start_intent(mode_value, request)
        result = board.start(form_of(values), stop_on_nan=bool(stop_on_nan_value), intent=intent)
        findings_text = view.findings_markdown(result.findings, locale)
        if result.run is None:  # not started
            # Nothing was created: the panel goes back to what it showed, the form as the user
            # left it with its fields marked, and the bar says what to fix first: Start stays
            # disabled until a field changes. (A double-click's second Start is not refused:
            # it answers with the run the first made, opened below.)
            before_form = open_outputs.index(form_inputs[0])
            refused = [*[gr.skip()] * before_form, *field_updates(result.findings, locale), *render(run_id, None, locale, mode_value)]
            blockers = view.start_blockers(result.findings, ALL_FIELDS)
            refused[open_outputs.index(start_button)] = gr.update(interactive=editing_of(mode_value) and not blockers)
            return [*refused, findings_text, view.start_reason_markdown(blockers, locale, refused=True)]
        opened = open_run(result.run.id, locale)
        # The form already holds these values: only its fields' warnings change.
        form_start = open_outputs.index(form_inputs[0])
        opened[form_start : form_start + len(form_inputs)] = [{**update, "interactive": False} for update in field_updates(result.findings, locale)]
        return [*opened, findings_text, ""]

    start_button.click(on_start_accepted, locale_state, [status, bar_status, start_reason, start_button], queue=False, show_progress="hidden").then(
        on_start,
        [watched_run, mode, locale_state, stop_on_nan, *form_inputs],
        [*open_outputs, findings_box, start_reason],
        concurrency_limit=1,
        concurrency_id="start",
        show_progress="hidden",
    )

    def on_resume(run_id, mode_value, locale):
        result = board.resume(run_id) if run_id else None
        if result is None or result.run is None:  # not started
            findings = result.findings if result else []
            return [*[gr.skip()] * len(open_outputs), view.findings_markdown(findings, locale)]
        return [*open_run(result.run.id, locale), ""]

    resume_button.click(
        on_resume, [watched_run, mode, locale_state], [*open_outputs, findings_box], concurrency_limit=1, concurrency_id="start", show_progress="hidden"
    )

    def on_stop(run_id, mode_value, locale):
        if run_id is None:
            return [gr.skip()] * len(run_outputs)
        board.stop(run_id)
        return render(run_id, None, locale, mode_value)

    stop_button.click(on_stop, [watched_run, mode, locale_state], run_outputs, concurrency_limit=1, concurrency_id="stop", show_progress="hidden")

    def on_stop_on_nan(run_id, on: bool):
        """The watched run's own setting follows the box while it trains (the backend acts
        on it); otherwise the box is the setting the next Start saves with its run."""
        if run_id is not None:
            board.set_stop_on_nan(run_id, bool(on))

    # .input, not .change: the panel sets the box to the watched run's setting by code.
    stop_on_nan.input(on_stop_on_nan, [watched_run, stop_on_nan], None, show_progress="hidden")
    refresh.click(render, [watched_run, shown_version, locale_state, mode], run_outputs, show_progress="hidden", queue=False)
    ticking_names = ("status", "bar", "alert", "progress", "gpu_table", "live", "version")

    def render_ticking(run_id: str | None, shown: Any = None, locale: str = "en", mode_value: Any = None) -> list[Any]:
        """The members that change while a run trains. A run that has ended meanwhile is left
        as it is here: its end changes the buttons, the download, the log, which only the
        whole panel's refresh sends (the script asks for it at its next tick, seeing the run
        no longer trains); drawn here, its version would be taken as shown and that refresh
        would send nothing."""
        drawn = shown if isinstance(shown, dict) else {}
        run = board.run_view(run_id, locale, drawn.get("version"))
        if not run.active or run.unchanged:
            # Unchanged: another event drew this version meanwhile (gr.skip() is a dict too,
            # so it must not reach the digests below).
            return [gr.skip()] * len(ticking_names)
        updates = dict(zip(panel, show(run, editing_of(mode_value), locale, drawn.get("sent")), strict=True))
        version = updates["version"]
        if isinstance(version, dict):
            # Only what this event sends counts as sent: the other members' digests stay the
            # whole panel's last ones.
            sent = dict(drawn.get("sent") or {})
            sent.update({name: version["sent"][name] for name in ticking_names if name in version["sent"]})
            updates["version"] = {"version": version["version"], "sent": sent}
        return [updates[name] for name in ticking_names]

    refresh_ticking.click(
        render_ticking, [watched_run, shown_version, locale_state, mode], [panel[name] for name in ticking_names], show_progress="hidden", queue=False
    )
    return TrainTab(
        fields,
        watched_run,
        shown_version,
        mode,
        run_outputs,
        open_outputs,
        refresh,
        show,
        render,
        open_run,
        edit_form,
        open_first,
        draft,
        preset_notes,
        stop_on_nan,
        findings_box,
        mode_box,
        notice_box,
        then_derive,
        dataset_pick,
    )
