"""The one reader of a run's trainer log (backend/runs/trainer_log.py): a half-written last line
is left for the next poll and said to be cut off, a resume's line is read as the start of an
attempt by every reader, and no other module opens the file."""

from __future__ import annotations

import json
import re
from pathlib import Path

from backend.runs import OUTPUT_DIR
from backend.runs.logs import AttemptStart
from backend.runs.trainer_log import LiveTrainerLog, append_records, log_path, mark_attempt, parse_tail, read_curve, read_log_tail

ROOT = Path(__file__).resolve().parents[1]


def line(step: int, total: int = 10, loss: float | None = None) -> bytes:
    record = {"current_steps": step, "total_steps": total, "loss": 2.0 - step / 10 if loss is None else loss, "lr": 1e-4, "epoch": step / total}
    return (json.dumps(record) + "\n").encode()


def run_dir(tmp_path: Path) -> Path:
    (tmp_path / OUTPUT_DIR).mkdir()
    return tmp_path


def test_a_half_written_last_line_waits_for_its_end_and_is_said_to_be_cut_off(tmp_path: Path) -> None:
    run = run_dir(tmp_path)
    path = log_path(run)
    path.write_bytes(line(1) + line(2))
    live = LiveTrainerLog(run, sample_above=1 << 30, tail_bytes=1 << 20)
    assert [p.step for batch in live.poll() for p in batch] == [1, 2]
    third = line(3)
    with open(path, "ab") as handle:
        handle.write(third[:-5])  # cut inside its JSON
    assert [p for batch in live.poll() for p in batch] == []
    tail = read_log_tail(path, run)
    assert (tail.step, tail.cut_off) == (2, True)  # the half line is not parsed, and is noticed
    with open(path, "ab") as handle:
        handle.write(third[-5:-1])  # the record minus its last byte, the newline
    assert [p for batch in live.poll() for p in batch] == []  # the live reader waits for it
    tail = read_log_tail(path, run)
    assert (tail.step, tail.cut_off) == (3, True)  # whole JSON: the step was logged (a resume closes the line)
    with open(path, "ab") as handle:
        handle.write(third[-1:])
    assert [p.step for batch in live.poll() for p in batch] == [3]
    assert [p for batch in live.poll() for p in batch] == []  # each record once
    tail = read_log_tail(path, run)
    assert (tail.step, tail.cut_off) == (3, False)
    assert parse_tail(line(1) + line(2)[:-5]).cut_off and not parse_tail(line(1)).cut_off


def test_a_resumes_lines_are_read_in_one_place_by_every_reader(tmp_path: Path) -> None:
    """The repair closes the half line; the attempt's line cuts the curve back to its
    checkpoint (live and fresh alike) and is no step of the log's end."""
    run = run_dir(tmp_path)
    path = log_path(run)
    path.write_bytes(b"".join(line(s) for s in range(1, 7)) + line(7)[:-9])  # killed mid-write
    live = LiveTrainerLog(run, sample_above=1 << 30, tail_bytes=1 << 20)
    assert [p.step for batch in live.poll() for p in batch] == [1, 2, 3, 4, 5, 6]
    end = read_log_tail(path, run, loss=False)
    assert (end.step, end.cut_off) == (6, True)
    append_records(run, [], close_cut_line=end.cut_off)
    mark_attempt(run, AttemptStart(2, 4, None, 1.0))
    assert read_log_tail(path, run).step == 6 and not read_log_tail(path, run).cut_off
    with open(path, "ab") as handle:
        handle.write(line(5, loss=0.5) + line(6, loss=0.4))
    assert [p.step for p in read_curve(path, run)] == [1, 2, 3, 4, 5, 6]
    assert [p.loss for p in read_curve(path, run)][-2:] == [0.5, 0.4]  # the resumed attempt's, not the first one's
    items = [item for batch in live.poll() for item in batch]
    assert isinstance(items[0], AttemptStart) and (items[0].attempt, items[0].from_step) == (2, 4)
    assert [p.step for p in items[1:]] == [5, 6]


def test_a_finished_log_and_a_bool_step_are_told_apart(tmp_path: Path) -> None:
    run = run_dir(tmp_path)
    log_path(run).write_bytes(line(9) + line(10) + (json.dumps({"current_steps": 10, "total_steps": 10}) + "\n").encode())
    assert read_log_tail(log_path(run), run, loss=False).finished
    assert not parse_tail(line(9)).finished
    assert parse_tail(b'{"current_steps": true, "total_steps": 1}\n').step is None


def test_no_module_but_the_reader_names_the_trainer_log() -> None:
    """Every part that looks at trainer_log.jsonl asks backend/runs/trainer_log.py (logs.py
    holds its name and record types)."""
    allowed = {ROOT / "backend" / "runs" / "trainer_log.py", ROOT / "backend" / "runs" / "logs.py"}
    found = []
    for folder in ("backend", "ui"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path in allowed:
                continue
            text = path.read_text(encoding="utf-8")
            if re.search(r"\bTRAINER_LOG\b|[\"']trainer_log\.jsonl[\"']", text):
                found.append(str(path.relative_to(ROOT)))
    assert found == [], f"these open the trainer log themselves: {found}"
