"""The validation report: typed records, JSON round trip, storage under the runs folder.

A report is what a validation path proved: one RungResult per rung asked, the machine's
fingerprint and the data fingerprint. Every word a user reads is a message id + params
(`Note`), rendered at the edge (backend/validate/view.py).

The reader (`report_from_json`) is strict, because a report may come from elsewhere (an
upload, a file copied from another machine) and be malformed or hostile:
- at most MAX_REPORT_BYTES, nested at most as deep as a report is (RecursionError and the
  typed walk both stop a deeper one), every list bounded (MAX_RUNG_COUNT, MAX_CURVE_POINTS...);
- every field checked for its type; NaN and Infinity refused (not JSON, and a browser's
  JSON.parse refuses them too: `to_json` writes a non-finite figure as text and leaves a
  non-finite loss out of the curve);
- unknown keys REFUSED at every level whose keys RocBoard names (report, rung, note):
  a key it does not know is a newer format or a hand-made file, and silently dropping it
  would compare or show less than the file says. The keys of `figures`, `request`,
  `machine` and a note's `params` are free names, bounded in count and length, each value
  a scalar (request: a scalar or a short list of scalars).
Every refusal is a ReportError carrying a message id (`validate.report.*`) and its params.

Storage: `<runs>/validation/<report id>.json`, written atomically (backend/runs/safe_files.py:
a temporary name, then a rename; a link at the target is replaced, never written through),
read without following a link (the `validation` folder itself may not be a link either:
the runs folder is the one trusted path, as for runs). An uploaded report is parsed first and
copied in only once it parsed, under its own (checked) id.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import secrets
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.i18n import Message
from backend.i18n.errors import json_error, os_error
from backend.runs import safe_files

RUNGS = ("one_gpu", "n_gpus", "fault_drill", "nodes")
STATUSES = ("pass", "fail", "stopped", "skipped")
FORMAT_VERSION = 1  # the "format" key of a report file; a newer one is refused, by name

MAX_REPORT_BYTES = 2 * 1024 * 1024  # a 4-rung report with full curves is ~0.5 MiB
MAX_CURVE_POINTS = 5000  # per rung
MAX_RUNG_COUNT = 16  # RUNGS has 4; a rung repeated (a retry) is allowed, a thousand is not
MAX_RUN_IDS = 32
MAX_CAUSES = 32
MAX_FIGURES = 64
MAX_MAP_KEYS = 128  # request, machine, a note's params
MAX_KEY_CHARS = 100
MAX_TEXT_CHARS = 4096  # any text value (a model path, an environment value)
MAX_LIST_ITEMS = 64  # a list inside the request (the rungs asked)
MAX_REPORTS_LISTED = 500

VALIDATION_DIR = "validation"
SUFFIX = ".json"
REPORT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,79}")
MESSAGE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,119}")

Figure = float | int | str
Scalar = str | int | float | bool | None


class ReportError(ValueError):
    """A report that cannot be read, written or imported: `message_id` + `params` say why."""

    def __init__(self, message_id: str, **params: Any) -> None:
        super().__init__(f"{message_id} {params}")
        self.message_id = message_id
        self.params = params

    @property
    def message(self) -> Message:
        return Message(self.message_id, **self.params)


@dataclass(frozen=True)
class Note:
    """One thing to tell the user: a message id of the locale catalogues and its params."""

    message_id: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RungResult:
    rung: str  # one of RUNGS
    status: str  # one of STATUSES
    run_ids: tuple[str, ...] = ()  # the real runs the rung made (in the runs folder)
    # e.g. final_loss, max_loss_gap, tokens_per_s, steps_per_s,
    # vram_peak_mib_per_gpu ("0:123,1:120"), scaling_efficiency, resumed_from_step
    figures: dict[str, Figure] = field(default_factory=dict)
    causes: tuple[Note, ...] = ()  # on fail: the named cause and its fix
    curve: tuple[tuple[int, float], ...] = ()  # (step, loss), at most MAX_CURVE_POINTS


@dataclass(frozen=True)
class ValidationReport:
    id: str
    created_at: float
    # preset, model, dataset, gpus, drill_step, tolerance, rungs (asked)
    request: dict[str, Any]
    rungs: tuple[RungResult, ...]
    machine: dict[str, str]  # the machine fingerprint (backend/validate/fingerprint.py)
    data_fingerprint: str | None = None


def new_report_id(now: float | None = None) -> str:
    """A sortable, unguessable id: "20261202-013000-a1b2c3"."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(now if now is not None else time.time())) + "-" + secrets.token_hex(3)


def check_report_id(report_id: Any) -> str:
    """The id itself when it is one RocBoard could have made a file name of; else ReportError
    (no "..", no "/", no hidden name, at most 80 characters)."""
    if not isinstance(report_id, str) or not REPORT_ID.fullmatch(report_id):
        raise ReportError("validate.report.bad_id", id=_shown(report_id))
    return report_id


def _shown(value: Any) -> str:
    return (value if isinstance(value, str) else repr(value))[:100]


# --- writing ------------------------------------------------------------------------------------


def _finite_figure(value: Figure) -> Figure:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "nan", "inf": a loss that diverged stays visible, as text
    return value


def report_to_dict(report: ValidationReport) -> dict[str, Any]:
    return {
        "format": FORMAT_VERSION,
        "id": report.id,
        "created_at": report.created_at,
        "request": dict(report.request),
        "rungs": [
            {
                "rung": rung.rung,
                "status": rung.status,
                "run_ids": list(rung.run_ids),
                "figures": {name: _finite_figure(value) for name, value in rung.figures.items()},
                "causes": [{"message_id": note.message_id, "params": dict(note.params)} for note in rung.causes],
                "curve": [[step, loss] for step, loss in rung.curve[:MAX_CURVE_POINTS] if math.isfinite(loss)],
            }
            for rung in report.rungs
        ],
        "machine": dict(report.machine),
        "data_fingerprint": report.data_fingerprint,
    }


def to_json(report: ValidationReport) -> str:
    """The report as JSON text (what is saved and downloaded). The result reads back equal
    through report_from_json, but for non-finite figures and losses (see report_to_dict)."""
    text = json.dumps(report_to_dict(report), ensure_ascii=False, allow_nan=False, indent=1, default=str)
    return text


# --- reading ------------------------------------------------------------------------------------


def _refuse_constant(name: str) -> Any:
    raise ReportError("validate.report.not_finite", value=name)


def report_from_json(text: str | bytes) -> ValidationReport:
    """The report a JSON text holds; ReportError (a message id) for anything else."""
    size = len(text.encode("utf-8") if isinstance(text, str) else text)
    if size > MAX_REPORT_BYTES:
        raise ReportError("validate.report.too_large", size=size, limit=MAX_REPORT_BYTES)
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise ReportError("validate.report.not_utf8") from None
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise ReportError("validate.report.too_deep") from None
    except ReportError:  # NaN or Infinity (_refuse_constant)
        raise
    except ValueError as error:  # JSONDecodeError, or an integer of more than 4,300 digits
        raise ReportError("validate.report.not_json", error=json_error(error)) from None
    return report_from_dict(data)


def _type_error(where: str, expected: str) -> ReportError:
    return ReportError("validate.report.bad_field", field=where, expected=Message(f"validate.report.type.{expected}"))


def _object(value: Any, where: str, keys: tuple[str, ...], required: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _type_error(where, "object")
    for key in value:
        if key not in keys:
            raise ReportError("validate.report.unknown_key", field=where, key=_shown(key))
    for key in required:
        if key not in value:
            raise ReportError("validate.report.missing_key", field=where, key=key)
    return value


def _text(value: Any, where: str, limit: int = MAX_TEXT_CHARS) -> str:
    if not isinstance(value, str):
        raise _type_error(where, "text")
    if len(value) > limit or "\0" in value:
        raise ReportError("validate.report.too_long", field=where, limit=limit)
    return value


def _number(value: Any, where: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _type_error(where, "number")
    if isinstance(value, int) and abs(value) > 2**63:
        raise _type_error(where, "number")
    return value


def _list(value: Any, where: str, limit: int) -> list[Any]:
    if not isinstance(value, list):
        raise _type_error(where, "list")
    if len(value) > limit:
        raise ReportError("validate.report.too_many", field=where, count=len(value), limit=limit)
    return value


def _scalar(value: Any, where: str) -> Scalar:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _text(value, where)
    return _number(value, where)


def _map(value: Any, where: str, item: Any) -> dict[str, Any]:
    """A dict of free names (bounded) whose values `item(value, where)` checks."""
    if not isinstance(value, dict):
        raise _type_error(where, "object")
    if len(value) > MAX_MAP_KEYS:
        raise ReportError("validate.report.too_many", field=where, count=len(value), limit=MAX_MAP_KEYS)
    return {_text(key, where, MAX_KEY_CHARS): item(inner, f"{where}.{key[:MAX_KEY_CHARS]}") for key, inner in value.items()}


def _request_value(value: Any, where: str) -> Any:
    if isinstance(value, list):
        return [_scalar(inner, where) for inner in _list(value, where, MAX_LIST_ITEMS)]
    return _scalar(value, where)


def _figure(value: Any, where: str) -> Figure:
    if isinstance(value, str):
        return _text(value, where)
    return _number(value, where)


def _note(value: Any, where: str) -> Note:
    data = _object(value, where, ("message_id", "params"), ("message_id",))
    message_id = _text(data["message_id"], f"{where}.message_id", 120)
    if not MESSAGE_ID.fullmatch(message_id):
        raise _type_error(f"{where}.message_id", "message_id")
    return Note(message_id, _map(data.get("params", {}), f"{where}.params", _scalar))


def _curve(value: Any, where: str) -> tuple[tuple[int, float], ...]:
    points = []
    for index, point in enumerate(_list(value, where, MAX_CURVE_POINTS)):
        if not isinstance(point, list) or len(point) != 2:
            raise _type_error(f"{where}[{index}]", "point")
        step, loss = point
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= 2**53:
            raise _type_error(f"{where}[{index}]", "point")
        points.append((step, float(_number(loss, f"{where}[{index}]"))))
    return tuple(points)


def _rung(value: Any, where: str) -> RungResult:
    data = _object(value, where, ("rung", "status", "run_ids", "figures", "causes", "curve"), ("rung", "status"))
    rung = data["rung"]
    if rung not in RUNGS:
        raise ReportError("validate.report.bad_choice", field=f"{where}.rung", value=_shown(rung), choices=", ".join(RUNGS))
    status = data["status"]
    if status not in STATUSES:
        raise ReportError("validate.report.bad_choice", field=f"{where}.status", value=_shown(status), choices=", ".join(STATUSES))
    run_ids = tuple(_text(run_id, f"{where}.run_ids", 200) for run_id in _list(data.get("run_ids", []), f"{where}.run_ids", MAX_RUN_IDS))
    figures = _map(data.get("figures", {}), f"{where}.figures", _figure)
    if len(figures) > MAX_FIGURES:
        raise ReportError("validate.report.too_many", field=f"{where}.figures", count=len(figures), limit=MAX_FIGURES)
    causes = tuple(_note(note, f"{where}.causes[{index}]") for index, note in enumerate(_list(data.get("causes", []), f"{where}.causes", MAX_CAUSES)))
    return RungResult(rung, status, run_ids, figures, causes, _curve(data.get("curve", []), f"{where}.curve"))


def report_from_dict(data: Any) -> ValidationReport:
    """The typed report of a parsed JSON value; ReportError for anything else."""
    data = _object(data, "report", ("format", "id", "created_at", "request", "rungs", "machine", "data_fingerprint"), ("format", "id", "created_at", "rungs"))
    version = data["format"]
    if version != FORMAT_VERSION:
        raise ReportError("validate.report.format", version=_shown(version), supported=FORMAT_VERSION)
    report_id = check_report_id(data["id"])
    created_at = float(_number(data["created_at"], "report.created_at"))
    request = _map(data.get("request", {}), "report.request", _request_value)
    rungs = tuple(_rung(rung, f"report.rungs[{index}]") for index, rung in enumerate(_list(data["rungs"], "report.rungs", MAX_RUNG_COUNT)))
    machine = _map(data.get("machine", {}), "report.machine", _text)
    fingerprint = data.get("data_fingerprint")
    if fingerprint is not None:
        fingerprint = _text(fingerprint, "report.data_fingerprint", 200)
    return ValidationReport(report_id, created_at, request, rungs, machine, fingerprint)


# --- storage ------------------------------------------------------------------------------------


def validation_dir(runs_dir: Path) -> Path:
    return Path(runs_dir) / VALIDATION_DIR


def _ensure_dir(runs_dir: Path) -> Path:
    """<runs>/validation, made if missing; ReportError when it is a link or not a folder."""
    folder = validation_dir(runs_dir)
    Path(runs_dir).mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(folder, 0o755)
    except FileExistsError:
        pass
    except OSError as error:
        raise ReportError("validate.report.unwritable", path=str(folder), error=os_error(error)) from None
    try:
        os.close(safe_files.open_run_dir(folder))
    except safe_files.UnsafePath:
        raise ReportError("validate.report.unsafe_dir", path=str(folder)) from None
    except OSError as error:
        raise ReportError("validate.report.unwritable", path=str(folder), error=os_error(error)) from None
    return folder


def save_report(runs_dir: Path, report: ValidationReport) -> Path:
    """Writes the report to <runs>/validation/<id>.json atomically (a reader sees the old file
    or the new one, never half); returns its path."""
    name = check_report_id(report.id) + SUFFIX
    folder = _ensure_dir(runs_dir)
    data = to_json(report).encode("utf-8")
    if len(data) > MAX_REPORT_BYTES:
        raise ReportError("validate.report.too_large", size=len(data), limit=MAX_REPORT_BYTES)
    try:
        safe_files.write_atomic(folder, name, data)
    except safe_files.UnsafePath:
        raise ReportError("validate.report.unsafe_dir", path=str(folder)) from None
    except OSError as error:
        raise ReportError("validate.report.unwritable", path=str(folder / name), error=os_error(error)) from None
    return folder / name


def load_report(runs_dir: Path, report_id: str) -> ValidationReport:
    """The saved report `report_id`; ReportError when missing, a link, not a regular file,
    too large or not a report (and when the id inside is not its file's name)."""
    name = check_report_id(report_id) + SUFFIX
    folder = validation_dir(runs_dir)
    try:
        data = safe_files.read_bytes(folder, name, MAX_REPORT_BYTES)
    except safe_files.UnsafePath as error:
        if error.errno == errno.EFBIG:
            raise ReportError("validate.report.too_large", size=MAX_REPORT_BYTES + 1, limit=MAX_REPORT_BYTES) from None
        raise ReportError("validate.report.unsafe", id=report_id) from None
    except FileNotFoundError:
        raise ReportError("validate.report.not_found", id=report_id) from None
    except OSError as error:
        raise ReportError("validate.report.unreadable", id=report_id, error=os_error(error)) from None
    report = report_from_json(data)
    if report.id != report_id:
        raise ReportError("validate.report.id_mismatch", id=report_id, inside=report.id)
    return report


def list_reports(runs_dir: Path) -> list[ValidationReport]:
    """The saved reports, newest first; a file that is a link, not a report or unreadable is
    left out (load_report names why, for one asked by id). At most MAX_REPORTS_LISTED."""
    folder = validation_dir(runs_dir)
    entries = [
        (name, found)
        for name, found in safe_files.list_dir(folder)
        if name.endswith(SUFFIX) and stat.S_ISREG(found.st_mode) and REPORT_ID.fullmatch(name[: -len(SUFFIX)])
    ]
    entries.sort(key=lambda entry: entry[0], reverse=True)  # ids start with the UTC time
    reports = []
    for name, _ in entries[:MAX_REPORTS_LISTED]:
        try:
            reports.append(load_report(runs_dir, name[: -len(SUFFIX)]))
        except ReportError:
            continue
    reports.sort(key=lambda report: (report.created_at, report.id), reverse=True)
    return reports


def import_report(runs_dir: Path, data: bytes) -> ValidationReport:
    """An uploaded report file: parsed first (everything report_from_json refuses is refused
    and nothing is written), then saved under its own id; an id already there is refused
    unless the file there says the same (importing twice is not an error)."""
    if len(data) > MAX_REPORT_BYTES:
        raise ReportError("validate.report.too_large", size=len(data), limit=MAX_REPORT_BYTES)
    report = report_from_json(data)
    _ensure_dir(runs_dir)  # a folder that is a link is named as such, before anything is read
    try:
        existing = load_report(runs_dir, report.id)
    except ReportError as error:
        if error.message_id != "validate.report.not_found":
            raise
    else:
        if existing == report:
            return existing
        raise ReportError("validate.report.exists", id=report.id)
    save_report(runs_dir, report)
    return report


# --- comparing two reports ---------------------------------------------------------------------

# What "moved beyond tolerance" means between an earlier report and a new one (an upgrade):
# - the loss curve: the same model, data, seed and batch give the same losses up to the
#   GPU's non-deterministic reductions, well under 1 % over a short run; a precision or a
#   flash-attention kernel that changed with ROCm moves them by more. Relative gap at the
#   steps both curves have, beyond 2 %.
LOSS_TOLERANCE = 0.02
# - throughput (tokens/s, steps/s): a short run's speed varies by a few percent from one run
#   to the next (warm-up, clocks, a busy CPU); beyond 10 % is the machine, not the noise.
THROUGHPUT_TOLERANCE = 0.10
# - VRAM peak per GPU: the caching allocator's peak moves by a few percent between runs;
#   beyond 10 % and at least 256 MiB (a tiny model's peak is small and jumpy in relative terms).
VRAM_TOLERANCE = 0.10
VRAM_MIN_MIB = 256
# - scaling efficiency (a share 0..1): beyond 0.10 absolute.
EFFICIENCY_TOLERANCE = 0.10
THROUGHPUT_FIGURES = ("tokens_per_s", "steps_per_s")
LOSS_FIGURES = ("final_loss",)
VRAM_FIGURE = "vram_peak_mib_per_gpu"
EFFICIENCY_FIGURE = "scaling_efficiency"


@dataclass(frozen=True)
class FingerprintChange:
    key: str
    old: str | None  # None: the key is new
    new: str | None  # None: the key is gone


@dataclass(frozen=True)
class FigureMove:
    figure: str  # a figure's name, "loss_curve", or "vram_peak_mib_per_gpu:<gpu>"
    old: float
    new: float
    change: float  # relative (new - old) / |old|, or absolute for a share
    tolerance: float
    relative: bool = True


@dataclass(frozen=True)
class RungComparison:
    rung: str
    old_status: str | None  # None: the rung is not in the old report
    new_status: str | None
    moved: tuple[FigureMove, ...] = ()

    @property
    def status_changed(self) -> bool:
        return self.old_status != self.new_status


@dataclass(frozen=True)
class Comparison:
    old_id: str
    new_id: str
    machine: tuple[FingerprintChange, ...]  # keys that changed, in key order
    data_changed: bool  # the data fingerprints differ (both known)
    old_data: str | None
    new_data: str | None
    rungs: tuple[RungComparison, ...]  # every rung of either report, in RUNGS order

    @property
    def moved(self) -> bool:
        """Anything beyond tolerance, or a rung whose status changed."""
        return any(r.moved or r.status_changed for r in self.rungs)


def _relative(old: float, new: float) -> float:
    if old == 0:
        return 0.0 if new == 0 else math.inf
    return (new - old) / abs(old)


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def parse_per_gpu(text: Any) -> dict[str, float]:
    """"0:123,1:120" -> {"0": 123.0, "1": 120.0}; parts that are not "gpu:number" are left out."""
    found: dict[str, float] = {}
    if not isinstance(text, str):
        return found
    for part in text.split(",")[:MAX_MAP_KEYS]:
        gpu, _, mib = part.strip().partition(":")
        try:
            value = float(mib)
        except ValueError:
            continue
        if gpu and math.isfinite(value):
            found[gpu.strip()] = value
    return found


def curve_gap(old: tuple[tuple[int, float], ...], new: tuple[tuple[int, float], ...]) -> tuple[float, float, float] | None:
    """(old loss, new loss, relative gap) at the step both curves have where they differ most
    (relative to the old loss); None when they share no step."""
    new_by_step = dict(new)
    worst: tuple[float, float, float] | None = None
    for step, loss in old:
        if step not in new_by_step:
            continue
        gap = _relative(loss, new_by_step[step])
        if worst is None or abs(gap) > abs(worst[2]):
            worst = (loss, new_by_step[step], gap)
    return worst


def _rung_moves(old: RungResult, new: RungResult) -> tuple[FigureMove, ...]:
    moves: list[FigureMove] = []
    gap = curve_gap(old.curve, new.curve)
    if gap is not None and abs(gap[2]) > LOSS_TOLERANCE:
        moves.append(FigureMove("loss_curve", gap[0], gap[1], gap[2], LOSS_TOLERANCE))
    for name, tolerance in ((name, LOSS_TOLERANCE) for name in LOSS_FIGURES):
        before, after = _as_number(old.figures.get(name)), _as_number(new.figures.get(name))
        if before is not None and after is not None and abs(_relative(before, after)) > tolerance:
            moves.append(FigureMove(name, before, after, _relative(before, after), tolerance))
    for name in THROUGHPUT_FIGURES:
        before, after = _as_number(old.figures.get(name)), _as_number(new.figures.get(name))
        if before is not None and after is not None and abs(_relative(before, after)) > THROUGHPUT_TOLERANCE:
            moves.append(FigureMove(name, before, after, _relative(before, after), THROUGHPUT_TOLERANCE))
    before, after = _as_number(old.figures.get(EFFICIENCY_FIGURE)), _as_number(new.figures.get(EFFICIENCY_FIGURE))
    if before is not None and after is not None and abs(after - before) > EFFICIENCY_TOLERANCE:
        moves.append(FigureMove(EFFICIENCY_FIGURE, before, after, after - before, EFFICIENCY_TOLERANCE, relative=False))
    old_vram, new_vram = parse_per_gpu(old.figures.get(VRAM_FIGURE)), parse_per_gpu(new.figures.get(VRAM_FIGURE))
    for gpu in sorted(set(old_vram) & set(new_vram)):
        before, after = old_vram[gpu], new_vram[gpu]
        if abs(after - before) >= VRAM_MIN_MIB and abs(_relative(before, after)) > VRAM_TOLERANCE:
            moves.append(FigureMove(f"{VRAM_FIGURE}:{gpu}", before, after, _relative(before, after), VRAM_TOLERANCE))
    return tuple(moves)


def compare_reports(old: ValidationReport, new: ValidationReport) -> Comparison:
    """What changed from `old` to `new`: the fingerprint keys (changed, added, removed), the
    data fingerprint, and per rung its status and the figures beyond tolerance (the
    constants above). A rung run several times in one report: its last result counts."""
    keys = sorted(set(old.machine) | set(new.machine))
    machine = tuple(FingerprintChange(key, old.machine.get(key), new.machine.get(key)) for key in keys if old.machine.get(key) != new.machine.get(key))
    old_rungs = {rung.rung: rung for rung in old.rungs}
    new_rungs = {rung.rung: rung for rung in new.rungs}
    rungs = []
    for name in RUNGS:
        before, after = old_rungs.get(name), new_rungs.get(name)
        if before is None and after is None:
            continue
        moved = _rung_moves(before, after) if before is not None and after is not None else ()
        rungs.append(RungComparison(name, before.status if before else None, after.status if after else None, moved))
    data_changed = old.data_fingerprint is not None and new.data_fingerprint is not None and old.data_fingerprint != new.data_fingerprint
    return Comparison(old.id, new.id, machine, data_changed, old.data_fingerprint, new.data_fingerprint, tuple(rungs))


__all__ = [
    "FORMAT_VERSION",
    "LOSS_TOLERANCE",
    "THROUGHPUT_TOLERANCE",
    "VRAM_TOLERANCE",
    "Comparison",
    "FigureMove",
    "FingerprintChange",
    "RungComparison",
    "compare_reports",
    "curve_gap",
    "parse_per_gpu",
    "MAX_CURVE_POINTS",
    "MAX_REPORT_BYTES",
    "RUNGS",
    "STATUSES",
    "Note",
    "ReportError",
    "RungResult",
    "ValidationReport",
    "check_report_id",
    "import_report",
    "list_reports",
    "load_report",
    "new_report_id",
    "report_from_dict",
    "report_from_json",
    "report_to_dict",
    "save_report",
    "to_json",
    "validation_dir",
]
