"""A run's health alerts on disk: `alerts.jsonl` in its folder, one JSON object a line (an
alert as it fired, or the end of its episode), so the page, the runs table and
`app.py status` show them after a restart. Written and read through backend/runs/safe_files.py
(no link followed), bounded both ways; read again only when the file's size or mtime changed.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from backend.health import EpisodeEnd, Event, HealthAlert
from backend.runs import safe_files
from backend.runs.file_cache import file_key, memo

log = logging.getLogger(__name__)

ALERTS_FILE = "alerts.jsonl"
MAX_FILE_BYTES = 256 * 1024  # ~800 alerts; past this nothing more is written, only the end is read
MAX_SHOWN = 20  # the latest alerts a page or `status` lists

_cache: dict[Path, tuple[tuple[int, int] | None, tuple[Event, ...]]] = {}
_CACHE_RUNS = 4096


def append_events(run_dir: Path, events: list[Event]) -> None:
    """Adds what a watch said to the run's alerts.jsonl (never through a link; a file grown
    past MAX_FILE_BYTES gets nothing more, said once in the log)."""
    if not events:
        return
    found = safe_files.lstat_in_run(run_dir, ALERTS_FILE)
    if found is not None and found.st_size >= MAX_FILE_BYTES:
        log.warning("%s/%s is full (%d bytes): %d health event(s) not recorded", run_dir, ALERTS_FILE, found.st_size, len(events))
        return
    data = "".join(json.dumps(event.to_json(), allow_nan=False) + "\n" for event in events).encode()
    with safe_files.opened(run_dir, ALERTS_FILE, "ab") as handle:
        handle.write(data)


def read_events(run_dir: Path) -> tuple[Event, ...]:
    """Every event recorded (the last MAX_FILE_BYTES of the file, malformed lines skipped),
    oldest first; () when there is no file or it cannot be read safely."""
    key = file_key(run_dir / ALERTS_FILE, run_dir)
    if key is None:
        return ()

    def read() -> tuple[Event, ...]:
        try:
            data = safe_files.read_tail(run_dir, ALERTS_FILE, MAX_FILE_BYTES)
        except OSError:
            return ()
        events: list[Event] = []
        for line in data.split(b"\n"):
            try:
                record = json.loads(line)
            except (ValueError, UnicodeDecodeError):
                continue  # blank, half-written or not ours
            event = EpisodeEnd.from_json(record) if isinstance(record, dict) and "ended" in record else HealthAlert.from_json(record)
            if event is not None:
                events.append(event)
        return tuple(events)

    if len(_cache) > _CACHE_RUNS:
        _cache.clear()
    return memo(_cache, Path(run_dir), key, read)


def read_alerts(run_dir: Path, limit: int = MAX_SHOWN) -> list[tuple[HealthAlert, float | None]]:
    """The latest `limit` alerts, each with when its episode ended (None: it still held when
    last seen), oldest first."""
    alerts: list[list] = []
    for event in read_events(run_dir):
        if isinstance(event, HealthAlert):
            alerts.append([event, None])
        else:
            for entry in reversed(alerts):
                if entry[0].key == event.key and abs(entry[0].since - event.since) < 1e-3:
                    entry[1] = event.ended
                    break
    return [(alert, ended) for alert, ended in alerts[-limit:]]


__all__ = ["ALERTS_FILE", "MAX_FILE_BYTES", "MAX_SHOWN", "append_events", "read_alerts", "read_events"]
