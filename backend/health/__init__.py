"""Multi-GPU health while a run trains: imbalance, a lost rank, a stall. Pure decisions.

Given a run's per-GPU readings over time (backend/telemetry/base.py `Reading`, as the run's
monitor reads them from its samples) and the time of its last new log line, `HealthWatch`
decides, with typed thresholds (`HealthSettings`):

- **imbalance**: one GPU, seen training, holds at least `loaded_pct` % of its VRAM while
  another of the run's GPUs holds `imbalance_ratio` times less, for `imbalance_s` ("one card
  full, the others watching": `device_map`, a single process on several GPUs, a wrong ZeRO
  stage, offload);
- **lost rank**: one of the run's GPUs, seen training before, idle (busy below `idle_pct` %)
  for `lost_rank_s` while another trains (busy at least `busy_pct` % within `GRACE_S`, and
  since this one was);
- **stall**: every GPU of the run idle and no new log line for `stall_s` while the run is
  "running", after its GPUs trained: a communication hang.

The run's GPUs are those its readings show (the sampler reads what the run's
`*_VISIBLE_DEVICES` let it see); each reading is of the whole device, so another tenant's work
on a shared GPU counts as the run's.

Each condition is an episode: its alert fires once when the condition has held for its time,
and the episode ends when the condition is gone (an `EpisodeEnd`); a new episode needs the
whole time again. A watch seeded with what was recorded (`recorded=`, the run's alerts.jsonl:
backend/health/record.py) does not fire again for an episode already recorded, so the app's
restart, which re-reads the run's samples from the start, adds no line.

No I/O and no clock here: time is the readings' own (`Reading.at`). Why its own package and
not backend/service: it decides from telemetry the way backend/diagnose.py decides from
logs, with nothing of the app's parts; backend/service/decisions.py feeds it and records
what it says (docs/multi-gpu.md, "GPU health").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from backend.i18n import Joined, Message
from backend.telemetry.base import Reading

KINDS = ("imbalance", "lost_rank", "stall")
GIB = 2**30
# A GPU "trains" when any of its readings this recent was busy: gpu_busy_percent dips between
# kernels, and one low reading of a training GPU must not end "while the others train".
GRACE_S = 10.0
# Readings further apart than this mean nothing was measured between (the app was down):
# a condition not yet alerted starts its time again (backend/service/monitors.py MEMORY_GAP_S).
GAP_S = 15.0
# A condition held this close to its time counts as held (the sampler's ticks jitter).
TICK_SLACK_S = 0.1
MAX_GPUS = 4096  # GPUs one watch follows (every node's of a Slurm job); a reading of one more is left out


@dataclass(frozen=True)
class HealthSettings:
    """The thresholds; `python app.py --health-*` sets them (ui/serve.py), bounded by BOUNDS."""

    idle_pct: float = 5.0  # a GPU busy below this is idle
    busy_pct: float = 30.0  # a GPU busy at least this trains
    lost_rank_s: float = 120.0  # one GPU idle this long while another trains
    stall_s: float = 600.0  # every GPU idle and no new log line this long
    imbalance_s: float = 60.0  # one GPU loaded, another nearly empty, this long
    imbalance_ratio: float = 4.0  # the loaded GPU holds at least this many times another's VRAM
    loaded_pct: float = 25.0  # ... and at least this % of its own VRAM
    stop_on_stall: bool = False  # stop a stalled run (it can then be resumed from its checkpoint)

    def __post_init__(self) -> None:
        for name, (low, high) in BOUNDS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not low <= value <= high:
                raise ValueError(f"{name} must be a number from {low:g} to {high:g}, not {value!r}")
        if self.idle_pct >= self.busy_pct:
            raise ValueError(f"idle_pct ({self.idle_pct:g}) must be below busy_pct ({self.busy_pct:g})")

    def hold_s(self, kind: str) -> float:
        return {"imbalance": self.imbalance_s, "lost_rank": self.lost_rank_s, "stall": self.stall_s}[kind]


# Each number's range (inclusive); the serve flags are checked against it.
BOUNDS: dict[str, tuple[float, float]] = {
    "idle_pct": (0.0, 50.0),
    "busy_pct": (1.0, 100.0),
    "lost_rank_s": (1.0, 86_400.0),
    "stall_s": (1.0, 86_400.0),
    "imbalance_s": (1.0, 86_400.0),
    "imbalance_ratio": (1.5, 1000.0),
    "loaded_pct": (1.0, 100.0),
}
assert set(BOUNDS) == {f.name for f in fields(HealthSettings)} - {"stop_on_stall"}

GpuKey = tuple[str, int]  # (node, index as the run sees it); node "" on this machine


def gpu_name(node: str, gpu: int) -> Message:
    """A GPU as the page names it: "GPU 1", or "n2 · GPU 1" for a node of a Slurm job."""
    return Message("health.gpu_on_node", node=node, gpu=gpu) if node else Message("health.gpu", gpu=gpu)


@dataclass(frozen=True)
class HealthAlert:
    """One alert: its kind, the GPU it names (None for a stall: the whole run), when its
    condition began (`since`) and when it was decided (`at`), and its figures."""

    kind: str
    node: str
    gpu: int | None
    since: float
    at: float
    params: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @property
    def key(self) -> tuple[str, str, int | None]:
        return (self.kind, self.node, self.gpu)

    def message(self) -> Message:
        """What was seen, with its figures and the GPU named."""
        p = self.params
        if self.kind == "imbalance":
            light = Joined([gpu_name(str(n), int(g)) for n, g in p.get("light", ())], Message("health.separator"))
            return Message(
                "health.imbalance.problem", gpu=gpu_name(self.node, self.gpu or 0), used=_gib(p.get("used_gib")),
                total=_gib(p.get("total_gib")), light=light, light_used=_gib(p.get("light_gib")), seconds=_secs(self.at - self.since),
            )  # fmt: skip
        if self.kind == "lost_rank":
            return Message(
                "health.lost_rank.problem", gpu=gpu_name(self.node, self.gpu or 0), seconds=_secs(self.at - self.since),
                busy=_pct(p.get("busy_pct")), others=_pct(p.get("others_pct")),
            )  # fmt: skip
        return Message("health.stall.problem", gpus=int(p.get("gpus", 0)), seconds=_secs(p.get("quiet_s", self.at - self.since)))

    def fix(self) -> Message:
        return Message(f"health.{self.kind}.fix")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "node": self.node, "gpu": self.gpu, "since": self.since, "at": self.at, "params": dict(self.params)}

    @classmethod
    def from_json(cls, data: Any) -> HealthAlert | None:
        """A recorded alert, or None for anything that is not one (a hostile line included)."""
        if not isinstance(data, dict) or data.get("kind") not in KINDS:
            return None
        node, gpu, since, at, params = data.get("node", ""), data.get("gpu"), data.get("since"), data.get("at"), data.get("params", {})
        if not isinstance(node, str) or len(node) > 64 or not node.isprintable() or not isinstance(since, (int, float)) or not isinstance(at, (int, float)):
            return None
        if not _finite(since) or not _finite(at) or not isinstance(params, dict):
            return None
        if gpu is not None and not (isinstance(gpu, int) and not isinstance(gpu, bool) and 0 <= gpu < 4096):
            return None
        if (gpu is None) != (data["kind"] == "stall"):
            return None
        return cls(data["kind"], node, gpu, float(since), float(at), _clean_params(params))


@dataclass(frozen=True)
class EpisodeEnd:
    """The condition of an alert that fired is gone (recorded, so that a restart knows the
    episode is over)."""

    kind: str
    node: str
    gpu: int | None
    since: float  # the episode's start, as its alert says
    ended: float

    @property
    def key(self) -> tuple[str, str, int | None]:
        return (self.kind, self.node, self.gpu)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "node": self.node, "gpu": self.gpu, "since": self.since, "ended": self.ended}

    @classmethod
    def from_json(cls, data: Any) -> EpisodeEnd | None:
        if not isinstance(data, dict) or "ended" not in data:
            return None
        alert = HealthAlert.from_json({**data, "at": data.get("ended"), "params": {}})
        return None if alert is None else cls(alert.kind, alert.node, alert.gpu, alert.since, alert.at)


Event = HealthAlert | EpisodeEnd


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _clean_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The figures an alert may carry: finite numbers, and the light GPUs as (node, index)."""
    clean: dict[str, Any] = {}
    for name in ("used_gib", "total_gib", "light_gib", "busy_pct", "others_pct", "quiet_s", "idle_s"):
        if _finite(params.get(name)):
            clean[name] = float(params[name])
    if _finite(params.get("gpus")):
        clean["gpus"] = int(params["gpus"])
    light = params.get("light")
    if isinstance(light, (list, tuple)):
        clean["light"] = [
            [item[0], item[1]] for item in light[:64]
            if isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str) and len(item[0]) <= 64 and item[0].isprintable()
            and isinstance(item[1], int) and not isinstance(item[1], bool) and 0 <= item[1] < 4096
        ]  # fmt: skip
    return clean


def _gib(value: Any) -> str:
    return f"{float(value):.1f}" if _finite(value) else "?"


def _pct(value: Any) -> str:
    return f"{float(value):.0f}" if _finite(value) else "?"


def _secs(value: Any) -> str:
    return f"{float(value):.0f}" if _finite(value) else "?"


def _usable(reading: Reading) -> bool:
    """Whether a reading read back from a samples file has the types it should (the file is
    the run's, and a run folder can come from anywhere)."""
    def count(value: Any) -> bool:
        return value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)

    return (
        isinstance(reading.gpu, int) and not isinstance(reading.gpu, bool) and 0 <= reading.gpu < 4096
        and isinstance(reading.node, str) and _finite(reading.at) and count(reading.used_bytes) and count(reading.total_bytes)
        and (reading.util_pct is None or _finite(reading.util_pct))
    )  # fmt: skip


@dataclass
class _Gpu:
    node: str
    gpu: int
    at: float = float("-inf")
    used: int | None = None
    total: int | None = None
    util: float | None = None
    last_busy_at: float = float("-inf")  # the last reading at or above busy_pct
    seen_busy: bool = False


@dataclass
class _Episode:
    since: float
    fired: HealthAlert | None = None


class HealthWatch:
    """The health of one run, decided reading by reading (`observe`)."""

    def __init__(self, settings: HealthSettings | None = None, recorded: Iterable[Event] = ()):
        self.settings = settings or HealthSettings()
        self._gpus: dict[GpuKey, _Gpu] = {}
        self._episodes: dict[tuple[str, str, int | None], _Episode] = {}
        self._now = float("-inf")
        self._all_idle_since: float | None = None
        # What was recorded: (alert, its end or None) per key, oldest first.
        self._recorded: dict[tuple[str, str, int | None], list[list[Any]]] = {}
        for event in recorded:
            self._remember(event)

    def _remember(self, event: Event) -> None:
        episodes = self._recorded.setdefault(event.key, [])
        if isinstance(event, HealthAlert):
            episodes.append([event, None])
        else:
            for episode in episodes:
                if abs(episode[0].since - event.since) < 1e-3 and episode[1] is None:
                    episode[1] = event.ended

    def _recorded_episode(self, kind: str, node: str, gpu: int | None, since: float) -> HealthAlert | None:
        """The recorded alert of the episode that began at `since` (or that was still going
        then: a watch that saw only part of it), if any."""
        for alert, ended in self._recorded.get((kind, node, gpu), ()):
            if alert.since - TICK_SLACK_S <= since and (ended is None or since <= ended + TICK_SLACK_S):
                return alert
        return None

    def observe(self, readings: Iterable[Reading], log_at: float | None = None, training: bool = True) -> list[Event]:
        """Takes new readings (in the order they were written) and the time of the run's last
        new log line; returns the alerts that fire and the episodes that end. Conditions are
        decided only while `training` (the run's state is "running")."""
        events: list[Event] = []
        batch: list[Reading] = []
        for reading in readings:
            if reading.source == "process" or not _usable(reading):
                continue  # the CPU memory of the training process is no GPU; a malformed line no reading
            if batch and reading.at != batch[0].at:
                events += self._tick(batch, log_at, training)
                batch = []
            batch.append(reading)
        if batch:
            events += self._tick(batch, log_at, training)
        return events

    def _tick(self, batch: Sequence[Reading], log_at: float | None, training: bool) -> list[Event]:
        settings = self.settings
        at = max(reading.at for reading in batch)
        if at - self._now > GAP_S:
            # Nothing measured for a while: what had not fired yet starts again.
            self._episodes = {key: episode for key, episode in self._episodes.items() if episode.fired is not None}
            self._all_idle_since = None
        self._now = max(self._now, at)
        for reading in batch:
            gpu = self._gpus.get((reading.node, reading.gpu))
            if gpu is None:
                if len(self._gpus) >= MAX_GPUS:
                    continue
                gpu = self._gpus[(reading.node, reading.gpu)] = _Gpu(reading.node, reading.gpu)
            gpu.at, gpu.used, gpu.total, gpu.util = reading.at, reading.used_bytes, reading.total_bytes, reading.util_pct
            if gpu.util is not None and gpu.util >= settings.busy_pct:
                gpu.last_busy_at, gpu.seen_busy = reading.at, True
        now = self._now
        live = [g for g in self._gpus.values() if now - g.at <= GAP_S]
        with_util = [g for g in live if g.util is not None]
        all_idle = bool(with_util) and all(g.util is not None and g.util < settings.idle_pct for g in with_util)
        if all_idle:
            self._all_idle_since = now if self._all_idle_since is None else self._all_idle_since
        else:
            self._all_idle_since = None
        held: dict[tuple[str, str, int | None], tuple[float, dict[str, Any]]] = {}  # key -> (earliest start, figures)
        if training:
            held.update(self._imbalance(live))
            held.update(self._lost_ranks(with_util))
            # A run whose GPUs never trained (a CPU run that sees GPUs, one still starting)
            # has no collective to hang: its quiet is not a stall.
            if all_idle and self._all_idle_since is not None and any(g.seen_busy for g in with_util):
                quiet_since = max(self._all_idle_since, log_at) if log_at is not None else self._all_idle_since
                if log_at is None or log_at <= now:
                    held[("stall", "", None)] = (quiet_since, {"gpus": len(with_util), "idle_s": now - self._all_idle_since})
        return self._settle(held, now)

    def _imbalance(self, live: list[_Gpu]) -> dict:
        known = [g for g in live if g.used is not None and g.total]
        if len(known) < 2:
            return {}
        heavy = max(known, key=lambda g: (g.used or 0, -g.gpu))
        used, total = heavy.used or 0, heavy.total or 1
        # The loaded GPU is the run's (it trained); the light ones may never have (device_map).
        if not heavy.seen_busy or used * 100 < self.settings.loaded_pct * total:
            return {}
        light = [g for g in known if g is not heavy and (g.used or 0) * self.settings.imbalance_ratio <= used]
        if not light:
            return {}
        figures = {
            "used_gib": used / GIB, "total_gib": total / GIB, "light": [[g.node, g.gpu] for g in sorted(light, key=lambda g: (g.node, g.gpu))],
            "light_gib": max((g.used or 0) for g in light) / GIB,
        }  # fmt: skip
        return {("imbalance", heavy.node, heavy.gpu): (self._now, figures)}

    def _lost_ranks(self, with_util: list[_Gpu]) -> dict:
        settings, now = self.settings, self._now
        # Another GPU trains while this one idles: it was busy within the grace (a third of the
        # lost-rank time at most, so that GPUs going idle a tick apart are not a lost rank),
        # and busy after this one last was (all going idle together is a pause, not a loss).
        grace = min(GRACE_S, settings.lost_rank_s / 3)
        # The two that trained last, and the two busiest now: enough to answer for every GPU
        # in one pass (a watch may follow thousands).
        training = [g for g in with_util if now - g.last_busy_at <= grace]
        latest = sorted(training, key=lambda g: g.last_busy_at, reverse=True)[:2]
        busiest = sorted(training, key=lambda g: g.util or 0.0, reverse=True)[:2]
        held = {}
        for gpu in with_util:
            if gpu.seen_busy and gpu.util is not None and gpu.util < settings.idle_pct:
                other = next((g for g in latest if g is not gpu), None)
                if other is not None and other.last_busy_at > gpu.last_busy_at:
                    others_pct = next((g.util or 0.0 for g in busiest if g is not gpu), 0.0)
                    held[("lost_rank", gpu.node, gpu.gpu)] = (now, {"busy_pct": gpu.util, "others_pct": others_pct})
        return held

    def _settle(self, held: dict, now: float) -> list[Event]:
        events: list[Event] = []
        for key, episode in list(self._episodes.items()):
            still = held.get(key)
            # A stall whose log moved on (a new line after it began) is over too.
            if still is None or (key[0] == "stall" and still[0] > episode.since + TICK_SLACK_S):
                del self._episodes[key]
                if episode.fired is not None:
                    recorded = self._recorded_episode(*key, episode.fired.since)
                    if recorded is None or self._recorded_end(key, recorded) is None:
                        end = EpisodeEnd(*key, episode.fired.since, now)
                        self._remember(end)
                        events.append(end)
        for key, (since, figures) in held.items():
            episode = self._episodes.setdefault(key, _Episode(since))
            if episode.fired is not None:
                continue
            kind, node, gpu = key
            if now - episode.since + TICK_SLACK_S < self.settings.hold_s(kind):
                continue
            alert = HealthAlert(kind, node, gpu, episode.since, now, {**figures, **({"quiet_s": now - episode.since} if kind == "stall" else {})})
            recorded = self._recorded_episode(kind, node, gpu, episode.since)
            if recorded is not None:
                episode.fired = recorded  # already said (before a restart): not again
                continue
            episode.fired = alert
            self._remember(alert)
            events.append(alert)
        return events

    def _recorded_end(self, key: tuple[str, str, int | None], alert: HealthAlert) -> float | None:
        for recorded, ended in self._recorded.get(key, ()):
            if recorded is alert:
                return ended
        return None

    @property
    def now(self) -> float | None:
        """The time of the latest reading decided on (None before the first)."""
        return None if self._now == float("-inf") else self._now

    def open_alerts(self) -> list[HealthAlert]:
        """The alerts whose condition still holds."""
        return [episode.fired for episode in self._episodes.values() if episode.fired is not None]


__all__ = [
    "BOUNDS",
    "GRACE_S",
    "EpisodeEnd",
    "Event",
    "HealthAlert",
    "HealthSettings",
    "HealthWatch",
    "KINDS",
    "gpu_name",
]
