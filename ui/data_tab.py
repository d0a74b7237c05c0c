"""The Data tab: add a dataset (an upload or a path on this machine), see what is in it,
remap its columns, register it, measure its token lengths, and train on it. Wiring only:
what a file holds and what may be registered is decided in backend/service/data_desk.py."""

from __future__ import annotations

from typing import Any

import gradio as gr

from backend.data.layout import LAYOUTS, roles_of
from backend.i18n import translate
from backend.service import RocBoard
from backend.service.data_desk import DataPreview, MappingForm
from ui.train_tab import ALL_FIELDS, TrainTab
from ui.widgets import Relabel, Texts, plot

DATA_FILE_TYPES = [".json", ".jsonl", ".csv", ".parquet"]
# Every role any layout maps, in the order the page shows them (one dropdown each).
ROLES: tuple[str, ...] = tuple(dict.fromkeys(role for layout in LAYOUTS for role, _ in roles_of(layout)))
# The sharegpt layout's tags (LLaMA-Factory's dataset_info "tags"), one textbox each.
TAGS: tuple[str, ...] = ("role_tag", "content_tag", "user_tag", "assistant_tag", "system_tag")

DATA_CSS = """
.rb-example { white-space: pre-wrap; word-break: break-word; max-height: 420px; overflow: auto;
  font-size: 13px; padding: 8px; border: 1px solid var(--border-color-primary); border-radius: 4px; }
.rb-trained { background: #fde68a; color: #111; }
.rb-prompt { color: var(--body-text-color-subdued); }
"""


def layout_choices(locale: str) -> list[tuple[str, str]]:
    """The layouts as the radio offers them: their names in `locale`, their ids as values."""
    return [(translate(f"datatab.layout.{name}", locale), name) for name in LAYOUTS]


def build_data_tab(board: RocBoard, texts: Texts, locale_state: Any, train: TrainTab, tabs: Any, train_tab_id: str) -> dict[str, Any]:
    source = gr.State({"kind": "upload", "path": None})  # the file the tab shows: an upload or a path
    to_measure = gr.State(None)  # the dataset an add registered (or found already there), measured next
    with gr.Row():
        with gr.Column(scale=2, min_width=360):
            with texts.label(gr.Tab(texts("datatab.tab_upload"), elem_id="data-tab-upload"), "datatab.tab_upload"):
                upload = texts.label(gr.File(label=texts("datatab.upload"), file_types=DATA_FILE_TYPES, type="filepath", elem_id="data-upload"), "datatab.upload")
            with texts.label(gr.Tab(texts("datatab.tab_path"), elem_id="data-tab-path"), "datatab.tab_path"):
                path_box = texts.label(gr.Textbox(label=texts("datatab.path"), placeholder="/data/my-dataset.jsonl", elem_id="data-path"), "datatab.path")
                read_button = texts.value(gr.Button(texts("datatab.read"), elem_id="data-read"), "datatab.read")
            findings = gr.Markdown("", elem_id="data-findings")
            summary = gr.Markdown("", elem_id="data-summary")
            with texts.label(gr.Accordion(texts("datatab.columns"), open=True), "datatab.columns"):
                layout = texts.label(
                    gr.Radio(layout_choices(texts.locale), value=None, label=texts("datatab.layout"), elem_id="data-layout"), "datatab.layout"
                )
                role_boxes = {
                    role: texts.label(
                        gr.Dropdown([], value=None, label=texts(f"datatab.role.{role}"), allow_custom_value=False, visible=False, elem_id=f"data-col-{role}"), f"datatab.role.{role}"
                    )
                    for role in ROLES
                }
                with gr.Row(visible=False) as tag_row:
                    tag_boxes = {
                        tag: texts.label(gr.Textbox(label=texts(f"datatab.tag.{tag}"), elem_id=f"data-{tag.replace('_', '-')}", min_width=100, max_length=64), f"datatab.tag.{tag}") for tag in TAGS
                    }
                remap_button = texts.value(gr.Button(texts("datatab.remap"), elem_id="data-remap"), "datatab.remap")
            with gr.Row():
                name_box = texts.label(gr.Textbox(label=texts("datatab.name"), elem_id="data-name", max_length=64), "datatab.name")
                add_button = texts.value(gr.Button(texts("datatab.add"), variant="primary", elem_id="data-add"), "datatab.add")
            added = gr.Markdown("", elem_id="data-added")
        with gr.Column(scale=3):
            # Shown once a file is read: empty, Gradio's table would show numbered headers (1 2 3).
            preview_empty = texts.value(gr.Markdown(texts("datatab.preview_empty"), elem_id="data-preview-empty"), "datatab.preview_empty")
            preview = gr.Dataframe(value=None, interactive=False, wrap=True, max_height=360, visible=False, elem_id="data-preview")
            with gr.Row():
                registered = texts.label(gr.Dropdown(board.data.names(), value=None, label=texts("datatab.registered"), elem_id="data-registered"), "datatab.registered")
                measure_button = texts.value(gr.Button(texts("datatab.measure"), elem_id="data-measure"), "datatab.measure")
                use_button = texts.value(gr.Button(texts("datatab.use"), variant="primary", elem_id="data-use"), "datatab.use")
            texts.value(gr.Markdown(texts("datatab.measure_help")), "datatab.measure_help")
            lengths_findings = gr.Markdown("", elem_id="data-lengths-findings")
            lengths_summary = gr.Markdown("", elem_id="data-lengths-summary")
            histogram = gr.Plot(elem_id="data-lengths", show_label=False)
            example = gr.HTML("", elem_id="data-example")

    form_inputs = [train.fields[name] for name in ALL_FIELDS]
    mapping_inputs = [layout, *role_boxes.values(), *tag_boxes.values()]

    def choices_of(layout_value: str | None, *values: Any) -> MappingForm:
        columns = dict(zip(ROLES, values[: len(ROLES)], strict=True))
        tags = dict(zip(TAGS, values[len(ROLES) :], strict=True))
        return MappingForm(layout_value, columns, tags)

    def mapping_updates(shown: DataPreview) -> list[Any]:
        """The layout and a dropdown per role of that layout, set to the file's columns."""
        mapping = shown.mapping
        layout_value = mapping.layout if mapping else None
        chosen = dict(mapping.columns) if mapping else {}
        roles = {role for role, _ in roles_of(layout_value)} if layout_value else set()
        tags = dict(mapping.tags) if mapping else {}
        return [
            gr.update(value=layout_value),
            *[gr.update(choices=[""] + list(shown.columns), value=chosen.get(role, ""), visible=role in roles) for role in ROLES],
            gr.update(visible=layout_value == "sharegpt"),
            *[gr.update(value=tags.get(tag, "")) for tag in TAGS],
        ]

    shown_outputs = [findings, summary, preview_empty, preview, layout, *role_boxes.values(), tag_row, *tag_boxes.values(), name_box]
    measure_outputs = [lengths_findings, lengths_summary, histogram, example]
    # The lengths shown are a registered dataset's: another file read, or another dataset
    # picked, and they are not what the tab shows any more.
    no_lengths = ["", "", None, ""]

    def show(shown: DataPreview, name: Any = None) -> list[Any]:
        table = {"headers": shown.headers, "data": shown.rows} if shown.headers else None
        return [
            shown.findings,
            shown.summary,
            gr.update(visible=table is None),
            gr.update(value=table, visible=table is not None),
            *mapping_updates(shown),
            gr.update(value=shown.suggested_name) if name is None else name,
        ]

    def read_outputs(current: dict, shown: DataPreview) -> list[Any]:
        """A file read: what the tab shows of it, the lengths gone, and the dataset it already
        is (if it is one) picked under Your datasets, with a line that says so."""
        picked = gr.update(value=shown.existing) if shown.existing else gr.skip()
        return [current, shown.notice, *show(shown), *no_lengths, picked]

    read_targets = [source, added, *shown_outputs, *measure_outputs, registered]

    def on_upload(path: str | None, locale: str):
        return read_outputs({"kind": "upload", "path": path}, board.data.read_upload(path, None, locale))

    upload.upload(on_upload, [upload, locale_state], read_targets)
    upload.clear(lambda: read_outputs({"kind": "upload", "path": None}, DataPreview("", "", [], [], False, None, (), "")), None, read_targets)

    def on_read(raw: str, locale: str):
        return read_outputs({"kind": "path", "path": raw}, board.data.read_path(raw, None, locale))

    read_button.click(on_read, [path_box, locale_state], read_targets)
    path_box.submit(on_read, [path_box, locale_state], read_targets)
    registered.input(lambda: no_lengths, None, measure_outputs, show_progress="hidden")

    def on_layout(layout_value: str | None):
        roles = {role for role, _ in roles_of(layout_value)} if layout_value in LAYOUTS else set()
        return [*[gr.update(visible=role in roles) for role in ROLES], gr.update(visible=layout_value == "sharegpt")]

    layout.input(on_layout, layout, [*role_boxes.values(), tag_row])

    def on_remap(current: dict, locale: str, *values: Any):
        """The file read again with the user's layout and columns."""
        choices = choices_of(*values)
        path = current.get("path")
        shown = board.data.read_path(path or "", choices, locale) if current.get("kind") == "path" else board.data.read_upload(path, choices, locale)
        return show(shown, gr.skip())

    remap_button.click(on_remap, [source, locale_state, *mapping_inputs], shown_outputs)

    def on_add(current: dict, name: str, locale: str, *values: Any):
        choices = choices_of(*values)
        result = board.data.add(current.get("kind", "upload"), current.get("path"), name, choices, locale)
        names = board.data.names()
        # The dataset added, or the one the file already is: picked, and measured next. A
        # refusal leaves the pick as it was (a value of gr.skip() inside an update would be
        # taken for a choice, and fail).
        picked = result.name or result.existing
        pick = gr.update(choices=names, value=picked) if picked else gr.update(choices=names)
        # The Train form's pick offers it at once (its value and whether it may be used stay).
        return [result.message, pick, gr.update(choices=names), picked]

    added_event = add_button.click(
        on_add,
        [source, name_box, locale_state, *mapping_inputs],
        [added, registered, train.dataset_pick, to_measure],
        concurrency_limit=1,
        concurrency_id="data-add",
    )

    def on_measure(name: str | None, locale: str, *values: Any):
        if not name:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip()
        lengths = board.data.measure(name, dict(zip(ALL_FIELDS, values, strict=True)), locale)
        return lengths.findings, lengths.summary, plot(lengths.figure), lengths.example

    # A dataset just added (or found already there) is measured at once with the Train form's
    # model and cutoff; nothing is measured after a refusal.
    added_event.then(on_measure, [to_measure, locale_state, *form_inputs], measure_outputs, concurrency_limit=2, concurrency_id="data-measure")
    measure_button.click(on_measure, [registered, locale_state, *form_inputs], measure_outputs, concurrency_limit=2, concurrency_id="data-measure")

    def on_use(name: str | None, run_id: str | None, locale: str, *values: Any):
        """A new run's form on the Train tab, training on the picked dataset: named after it,
        the preset's defaults for the rest of the run's settings (RocBoard.form_for_dataset)."""
        if not name:
            return [board.data.none_picked(locale), gr.skip(), *[gr.skip()] * len(train.open_outputs)]
        form = board.form_for_dataset(name, dict(zip(ALL_FIELDS, values, strict=True)))
        opened = train.edit_form(form, run_id, locale, board.data.use_notice(name, locale), from_run=False)
        # The form trains on this dataset: the pick beside the dataset field says so.
        opened[train.open_outputs.index(train.dataset_pick)] = gr.update(choices=board.data.names(), value=name, interactive=True)
        return ["", gr.Tabs(selected=train_tab_id), *opened]

    used = use_button.click(on_use, [registered, train.watched_run, locale_state, *form_inputs], [lengths_findings, tabs, *train.open_outputs])
    train.then_derive(used)

    def refresh_registered():
        return gr.update(choices=board.data.names())

    def relabel(locale: str):
        """The layouts' names in the page's language (the radio's choices are data, not a label)."""
        return gr.update(choices=layout_choices(locale))

    return {"refresh": refresh_registered, "registered": registered, "relabel": Relabel(relabel, [], [layout])}
