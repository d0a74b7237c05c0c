"""The Evaluate tab's questions: predict with a run's adapter on held-out data, and its scores.

An evaluation is a run like any other (kind "evaluate" in its state): a run directory with
its own config.yaml for LLaMA-Factory's predict mode, started by the RunManager under its
lock (one run at a time) and the same Launcher (warm or cold), so Stop, train.log, the
failure diagnosis, re-attach after a restart and delete work on it unchanged. On a node of
several GPUs it asks one GPU like a run and waits in the run queue when none is free
(RunManager.start_evaluation). Every refusal is a Finding returned before anything is made.
See docs/evaluate.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.config.run_form import SavedRun, read_saved_run
from backend.evaluate.held_out import SameData, TrainedOn, trained_on
from backend.evaluate.plan import (
    EVAL_BATCH_DEFAULT,
    EVAL_BATCH_LIMIT,
    MAX_NEW_TOKENS_DEFAULT,
    MAX_NEW_TOKENS_LIMIT,
    MAX_SAMPLES_DEFAULT,
    MAX_SAMPLES_LIMIT,
    VALIDATION_SPLIT,
    HeldOut,
    bounded_int,
    predict_args,
)
from backend.evaluate.results import (
    EVALUATION_FILE,
    Prediction,
    PredictProgress,
    Scores,
    format_number,
    read_predictions,
    read_progress,
    read_scores,
)
from backend.findings import Finding, has_problems
from backend.i18n import Message, translate
from backend.runs import CONFIG_FILE, FORM_FILE, LOG_FILE, OUTPUT_DIR, RunNotFound, RunState, artifacts
from backend.service.failure import failure_cause

if TYPE_CHECKING:
    from backend.runs import RunStore
    from backend.service.data_desk import DataDesk
    from backend.service.pipeline import ConfigPipeline
    from backend.service.run_manager import RunManager, StartResult

# The dataset dropdown's values: "split" (the run's validation split), "data:<name>" (a
# dataset registered on the Data tab), "demo:<name>" (the demo's).
SPLIT_CHOICE = "split"
DATA_PREFIX = "data:"
DEMO_PREFIX = "demo:"
FINAL_CHECKPOINT = "final"  # the adapter the run ended with, in output/ (never a checkpoint-N name)
TABLE_ROWS = 100  # rows of predictions the page shows
CELL_MAX_CHARS = 300  # one cell as shown (the files keep the whole text)
# Demo datasets that hold a reference answer (an SFT layout): the others are for pt, dpo, kto.
DEMO_EVAL_DATASETS = ("demo",)


@dataclass(frozen=True)
class EvaluationView:
    """One evaluation as the Evaluate tab shows it."""

    run_id: str | None
    state: str = ""  # RunState.state; "" without an evaluation
    active: bool = False
    status: str = ""  # Markdown: the state and progress line, or why it failed
    scores: str = ""  # Markdown: BLEU-4 and ROUGE
    rows: list[list[str]] = field(default_factory=list)  # the user's prompt, reference, prediction
    prompts: list[str] = field(default_factory=list)  # each row's prompt as the model read it (the template's)


def _clip(text: str, limit: int = CELL_MAX_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _safe_name(name: str) -> str:
    """A run name for the evaluation: the source's name in the characters a run name allows
    (letters of any language: "水果" -> "eval-水果"; its id is made ASCII by RunStore)."""
    cleaned = re.sub(r"[^\w.-]+", "-", name).strip("-.") or "run"
    return f"eval-{cleaned}"[:60]


class EvaluationDesk:
    def __init__(self, store: RunStore, run_manager: RunManager, pipeline: ConfigPipeline, data: DataDesk):
        self.store = store
        self.run_manager = run_manager
        self.pipeline = pipeline
        self.data = data
        self._same = SameData()

    # --- what can be evaluated, on what ---------------------------------------------------

    def checkpoints(self, run_id: str) -> list[str]:
        """The adapters of a run: "final" (the one it ended with) first when there is one, then
        its checkpoint-N folders that hold an adapter, newest first."""
        try:
            run_dir = self.store.run_dir(run_id)
        except RunNotFound:
            return []
        return ([FINAL_CHECKPOINT] if artifacts.has_adapter_at(run_dir) else []) + artifacts.adapter_checkpoints(run_dir)

    def sources(self) -> list[RunState]:
        """Training runs that ended with an adapter (final or a checkpoint's), newest first."""
        return artifacts.runs_with_adapters(self.store)

    def source_choices(self) -> list[tuple[str, str]]:
        return [(f"{s.id} · {s.name}" if s.name != s.id else s.id, s.id) for s in self.sources()]

    def checkpoint_choices(self, run_id: str | None, locale: str = "en") -> list[tuple[str, str]]:
        if not run_id:
            return []
        return [(translate("word.final_adapter", locale) if name == FINAL_CHECKPOINT else name, name) for name in self.checkpoints(run_id)]

    def _saved(self, run_id: str) -> SavedRun:
        """The run's saved form, typed (backend/config/run_form.py)."""
        return read_saved_run(self.store.run_dir(run_id))

    def _val_size(self, run_id: str) -> float:
        return float(self._saved(run_id).config.value("val_size"))

    @staticmethod
    def _demo_dir() -> Path:
        from backend.demo import DEMO_DIR

        return DEMO_DIR / "data"

    def _datasets(self) -> list[tuple[str, str]]:
        """(value, name) of every dataset with reference answers RocBoard knows: the registered
        ones (plain text has no answer), then the demo's."""
        found = [(DATA_PREFIX + name, name) for name in self.data.names() if self.data.layout_of(name) != "text"]
        if (self._demo_dir() / "dataset_info.json").is_file():
            found += [(DEMO_PREFIX + name, name) for name in DEMO_EVAL_DATASETS]
        return found

    def _trained_on(self, run_id: str) -> TrainedOn:
        try:
            return trained_on(self._saved(run_id).config, self.store.run_dir(run_id))
        except RunNotFound:
            return TrainedOn("", (), ())

    def _is_training_data(self, trained: TrainedOn, value: str) -> bool:
        held_out = self._held_out(value)
        return held_out is not None and not held_out.is_split and self._same.same(trained, held_out.dataset_dir, held_out.name)

    def held_out_values(self, run_id: str | None) -> tuple[list[str], list[str]]:
        """(the values of the held-out data run `run_id` may be evaluated on, the names of the
        datasets left out because it trained on them). Its validation split, when it trained
        with one; every known dataset that is not one it trained on, by name, file or bytes."""
        if not run_id:
            return [], []
        trained = self._trained_on(run_id)
        offered = [SPLIT_CHOICE] if self._val_size(run_id) > 1e-6 else []
        left_out: list[str] = []
        for value, name in self._datasets():
            if self._is_training_data(trained, value):
                left_out.append(name)
            else:
                offered.append(value)
        left_out.sort(key=lambda name: name not in trained.names)  # the run's own names first (a stable sort)
        return offered, left_out

    def dataset_label(self, value: str, locale: str = "en") -> str:
        if value == SPLIT_CHOICE:
            return translate("eval.dataset.split", locale)
        if value.startswith(DATA_PREFIX):
            return translate("eval.dataset.registered", locale, name=value[len(DATA_PREFIX) :])
        return translate("eval.dataset.demo", locale, name=value[len(DEMO_PREFIX) :])

    def dataset_choices(self, run_id: str | None, locale: str = "en") -> list[tuple[str, str]]:
        """(label, value) of the held-out data a run can be evaluated on: its validation
        split when it trained with one, the registered datasets and the demo's that it did not
        train on."""
        return [(self.dataset_label(value, locale), value) for value in self.held_out_values(run_id)[0]]

    def held_out_note(self, run_id: str | None, choice: str | None, locale: str = "en") -> str:
        """Markdown under the dataset: what the evaluation runs on and why it is held out, the
        datasets left out because the run trained on them; or why there is nothing to run on."""
        from backend.view import code_span

        if not run_id:
            return ""
        offered, left_out = self.held_out_values(run_id)

        def names(found: Any) -> str:
            return translate("actions.separator", locale).join(code_span(name, 80) for name in found)

        trained = self._trained_on(run_id)
        if not offered:
            return translate("eval.held_out.none", locale, datasets=names(trained.names) or code_span("?"))
        choice = choice if choice in offered else offered[0]
        if choice == SPLIT_CHOICE:
            line = translate("eval.held_out.split", locale, datasets=names(trained.names), val_size=f"{self._val_size(run_id):g}", seed=self._saved(run_id).config.training.seed)
        elif choice.startswith(DATA_PREFIX):
            line = translate("eval.held_out.registered", locale, name=code_span(choice[len(DATA_PREFIX) :], 80))
        else:
            line = translate("eval.held_out.demo", locale, name=code_span(choice[len(DEMO_PREFIX) :], 80))
        if left_out:
            line += " " + translate("eval.held_out.left_out", locale, names=names(left_out))
        return line

    def _held_out(self, choice: str) -> HeldOut | None:
        if choice == SPLIT_CHOICE:
            return HeldOut("", VALIDATION_SPLIT)
        if choice.startswith(DATA_PREFIX) and choice[len(DATA_PREFIX) :] in self.data.names():
            return HeldOut(str(self.data.folder), choice[len(DATA_PREFIX) :])
        if choice.startswith(DEMO_PREFIX) and choice[len(DEMO_PREFIX) :] in DEMO_EVAL_DATASETS:
            return HeldOut(str(self._demo_dir()), choice[len(DEMO_PREFIX) :])
        return None

    # --- start ---------------------------------------------------------------------------

    def start(
        self,
        run_id: str,
        dataset: str,
        checkpoint: str = FINAL_CHECKPOINT,
        max_samples: Any = MAX_SAMPLES_DEFAULT,
        max_new_tokens: Any = MAX_NEW_TOKENS_DEFAULT,
    ) -> StartResult:
        """Checks the request and starts the evaluation run; every refusal comes back as
        findings before any run directory is made."""
        from backend.service.run_manager import StartResult

        findings, prepared = self._prepare(run_id, dataset, checkpoint, max_samples, max_new_tokens)
        if prepared is None:
            return StartResult(None, findings)
        new_id, model, preset, files, env = prepared
        return self.run_manager.start_evaluation(new_id, _safe_name(self.store.read(run_id).name), model, preset, files, run_id, env, findings)

    def _prepare(self, run_id: Any, dataset: Any, checkpoint: Any, max_samples: Any, max_new_tokens: Any):
        import yaml


        def refuse(*found: Any) -> tuple[list[Any], None]:
            return list(found), None

        try:
            source = self.store.read(run_id)
            source_dir = self.store.run_dir(run_id)
        except (RunNotFound, TypeError):
            return refuse(Finding.of("evaluate", "eval-run-missing", run_id=str(run_id)[:80]))
        if source.kind != "train":
            return refuse(Finding.of("evaluate", "eval-not-trained", run_id=run_id))
        active = None if self.run_manager.side_by_side else self.run_manager.active_run()
        if active is not None:  # side by side it queues for a GPU instead (start_evaluation)
            return refuse(Finding.of("evaluate", "run-active", message="eval-run-active", run_id=active.id, state=Message(f"state.{active.state}")))
        checkpoint = checkpoint or FINAL_CHECKPOINT
        adapters = self.checkpoints(run_id)
        if not adapters:
            return refuse(Finding.of("evaluate", "eval-no-adapter", run_id=run_id))
        if checkpoint not in adapters:
            return refuse(Finding.of("checkpoint", "eval-checkpoint-missing", run_id=run_id, checkpoint=str(checkpoint)[:80]))
        samples = bounded_int(max_samples, 1, MAX_SAMPLES_LIMIT)
        tokens = bounded_int(max_new_tokens, 1, MAX_NEW_TOKENS_LIMIT)
        numbers = []
        if samples is None:
            numbers.append(Finding.of("max_samples", "eval-bad-number", value=str(max_samples)[:40], low=1, high=MAX_SAMPLES_LIMIT))
        if tokens is None:
            numbers.append(Finding.of("max_new_tokens", "eval-bad-number", value=str(max_new_tokens)[:40], low=1, high=MAX_NEW_TOKENS_LIMIT))
        if samples is None or tokens is None:  # each has its finding in `numbers`
            return refuse(*numbers)
        held_out = self._held_out(str(dataset or ""))
        if held_out is None:
            return refuse(Finding.of("dataset", "eval-dataset-missing", dataset=str(dataset)[:80]))
        saved = self._saved(run_id)
        form = saved.form
        if held_out.is_split and self._val_size(run_id) <= 1e-6:
            return refuse(Finding.of("dataset", "eval-no-split", run_id=run_id))
        if self._is_training_data(self._trained_on(run_id), str(dataset)):
            return refuse(Finding.of("dataset", "eval-trained-on", run_id=run_id, dataset=held_out.name[:80]))
        model = saved.config.model.model_name_or_path
        if model.startswith(("/", ".", "~")) and not Path(model).expanduser().is_dir():
            return refuse(Finding.of("model_path", "eval-base-missing", run_id=run_id, model=model))
        # The source's form, held out as asked, through the pipeline: its checks (the dataset's
        # files, the model, the preset) and its environment apply as to a training run.
        checked_form = {**form, "run_name": _safe_name(source.name)}
        if not held_out.is_split:
            checked_form.update(dataset_dir=held_out.dataset_dir, dataset=held_out.name, val_size=0.0, eval_strategy="no", stage="sft", max_samples=samples)
        config, findings, preset = self.pipeline.parse(checked_form)
        if has_problems(findings):
            return findings, None
        eval_batch = bounded_int(saved.config.value("per_device_eval_batch_size"), 1, EVAL_BATCH_LIMIT) or EVAL_BATCH_DEFAULT
        adapter_dir = source_dir / OUTPUT_DIR if checkpoint == FINAL_CHECKPOINT else source_dir / OUTPUT_DIR / checkpoint
        train_args = self.pipeline.run_args(config, None, OUTPUT_DIR)
        # LLaMA-Factory's own parser on what the predict run will read (with a scratch
        # output_dir, as for a training run): a refused config leaves no run behind.
        lf_findings = self.pipeline.lf_cache.findings(predict_args(train_args, str(adapter_dir), held_out, OUTPUT_DIR, samples, tokens, eval_batch))
        findings = findings + lf_findings
        if has_problems(findings):
            return findings, None
        run_id_new = self.store.new_run_id(_safe_name(source.name))
        args = predict_args(train_args, str(adapter_dir), held_out, str(self.store.root / run_id_new / OUTPUT_DIR), samples, tokens, eval_batch)
        request = {
            "source_run": run_id,
            "checkpoint": checkpoint,
            "dataset": str(dataset),
            "dataset_name": held_out.name if not held_out.is_split else f"{','.join(saved.config.data.datasets)} · val_size {self._val_size(run_id):g}",
            "max_samples": None if held_out.is_split else samples,
            "max_new_tokens": tokens,
        }
        files = {
            CONFIG_FILE: yaml.safe_dump(args, sort_keys=False, allow_unicode=True),
            # The source's form: the Train tab shows what the adapter was trained with.
            FORM_FILE: json.dumps(self.store.read_form(run_id), indent=2),
            EVALUATION_FILE: json.dumps(request, indent=2),
            LOG_FILE: "",
        }
        return findings, (run_id_new, config.model.model_name_or_path, config.hardware.preset, files, dict(config.hardware.env))

    # --- what an evaluation shows ----------------------------------------------------------

    def stop(self, eval_id: str) -> RunState | None:
        try:
            state = self.store.read(eval_id)
        except RunNotFound:
            return None
        if state.kind != "evaluate":
            return state
        return self.run_manager.stop(eval_id)

    def evaluations_of(self, run_id: str) -> list[RunState]:
        """The evaluations of training run `run_id`, newest first."""
        return [s for s in self.store.list() if s.kind == "evaluate" and s.source_run == run_id]

    def table_headers(self, locale: str = "en") -> list[str]:
        return [translate(f"eval.table.{column}", locale) for column in ("prompt", "reference", "prediction")]

    def latest(self, run_id: str | None = None) -> RunState | None:
        """The newest evaluation (of `run_id` when given)."""
        for state in self.store.list():
            if state.kind == "evaluate" and (run_id is None or state.source_run == run_id):
                return state
        return None

    def scores(self, eval_id: str) -> Scores | None:
        try:
            return read_scores(self.store.run_dir(eval_id))
        except RunNotFound:
            return None

    def predictions(self, eval_id: str, max_rows: int = TABLE_ROWS) -> list[Prediction]:
        try:
            return read_predictions(self.store.run_dir(eval_id), max_rows)
        except RunNotFound:
            return []

    def progress(self, eval_id: str) -> PredictProgress | None:
        try:
            return read_progress(self.store.run_dir(eval_id))
        except RunNotFound:
            return None

    def view(self, eval_id: str | None, locale: str = "en") -> EvaluationView:
        """The evaluation's state, progress, scores and first predictions, as the tab shows them."""
        from backend import view as words

        if not eval_id:
            return EvaluationView(None, status=translate("eval.status.none", locale))
        try:
            state = self.run_manager.refresh(eval_id)
        except RunNotFound:
            return EvaluationView(eval_id, status=translate("eval.status.gone", locale, run_id=words.code_span(eval_id, 140)))
        run = words.code_span(eval_id, 140)
        if state.state == "queued":  # side by side, every GPU taken: Stop takes it out of the queue
            return EvaluationView(eval_id, state.state, True, translate("eval.status.queued", locale, run_id=run))
        if state.active:
            progress = self.progress(eval_id)
            if progress is None:
                status = translate("eval.status.loading", locale, run_id=run)
            else:
                status = translate("eval.status.progress", locale, run_id=run, step=progress.step, total=progress.total)
            return EvaluationView(eval_id, state.state, True, status)
        predictions = self.predictions(eval_id)
        rows = [[_clip(p.user_text), _clip(p.label), _clip(p.predict)] for p in predictions]
        prompts = [_clip(p.prompt) for p in predictions]
        scores = self.scores(eval_id)
        if state.state == "finished":
            status = translate("eval.status.finished", locale, run_id=run, rows=len(rows))
        elif state.state == "stopped":
            status = translate("eval.status.stopped", locale, run_id=run)
        else:
            status = translate("eval.status.failed", locale, run_id=run)
            cause, fix = failure_cause(self.store, state, locale)
            if cause:
                status += f"\n\n**{translate('word.cause', locale)}:** {cause}\n\n**{translate('word.fix', locale)}:** {fix}"
        return EvaluationView(eval_id, state.state, False, status, scores_markdown(scores, locale), rows, prompts)

    def table(self, answer: EvaluationView, locale: str = "en", with_template: bool = False) -> dict[str, Any] | None:
        """The predictions table's value (headers in `locale`), None when there is no row: the
        user's prompt, or with `with_template` the prompt as the model read it."""
        if not answer.rows:
            return None
        rows = [[prompt, *row[1:]] for prompt, row in zip(answer.prompts, answer.rows, strict=True)] if with_template else answer.rows
        return {"headers": self.table_headers(locale), "data": rows}

    @staticmethod
    def table_empty(answer: EvaluationView, locale: str = "en") -> str:
        """What stands in place of an empty predictions table ("" when it has rows)."""
        if answer.rows:
            return ""
        ended = answer.state in ("finished", "stopped", "failed")
        return translate("eval.table.none_written" if ended else "eval.table.empty", locale)


def scores_markdown(scores: Scores | None, locale: str = "en") -> str:
    if scores is None:
        return ""
    return translate(
        "eval.scores",
        locale,
        bleu4=format_number(scores.bleu4),
        rouge1=format_number(scores.rouge1),
        rouge2=format_number(scores.rouge2),
        rougel=format_number(scores.rougel),
        seconds=format_number(scores.runtime_s),
    )


__all__ = ["EvaluationDesk", "EvaluationView", "MAX_NEW_TOKENS_DEFAULT", "MAX_SAMPLES_DEFAULT", "scores_markdown"]
