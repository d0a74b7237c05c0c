"""The health decisions on synthetic series (backend/health): imbalance, a lost rank and a
stall each fire once per episode, name the right GPU, never for a balanced run, and a watch
seeded with what was recorded says nothing again. Pure: no process, no clock."""

from __future__ import annotations

import json

import pytest

from backend.health import EpisodeEnd, HealthAlert, HealthSettings, HealthWatch
from backend.health.record import ALERTS_FILE, append_events, read_alerts, read_events
from backend.health.words import alert_text, alerts_markdown, status_mark, table_mark
from backend.telemetry.base import Reading
from tests.test_zh_no_english import english_runs

GIB = 2**30
FAST = HealthSettings(lost_rank_s=3, stall_s=4, imbalance_s=3)


def tick(at: float, loads: list[tuple[float, float]], node: str = "", total: float = 64) -> list[Reading]:
    """One sampler tick: per GPU (VRAM used in GiB, busy %)."""
    return [Reading(i, int(used * GIB), int(total * GIB), busy, 40.0, 100.0, "sysfs", at, f"GPU {i}", node) for i, (used, busy) in enumerate(loads)]


def series(start: float, seconds: float, loads: list[tuple[float, float]], every: float = 1.0) -> list[Reading]:
    out: list[Reading] = []
    t = start
    while t < start + seconds - 1e-9:
        out += tick(t, loads)
        t += every
    return out


BALANCED = [(30.0, 95.0), (30.5, 90.0), (29.8, 97.0), (30.2, 93.0)]


def alerts_of(events):
    return [e for e in events if isinstance(e, HealthAlert)]


def test_a_balanced_run_never_alerts_even_with_busy_dips_and_a_checkpoint_pause():
    watch = HealthWatch(FAST)
    readings = series(0, 60, BALANCED)
    # gpu_busy_percent dips between kernels: one GPU reads 0 % now and then (within GRACE_S).
    for t in range(60, 80):
        readings += tick(t, [(30.0, 95.0), (30.5, 0.0 if t % 2 else 88.0), (29.8, 97.0), (30.2, 93.0)])
    # A checkpoint save: every GPU idle a while, but the log moves on (a line each second).
    events = watch.observe(readings, log_at=80.0)
    for t in range(80, 100):
        events += watch.observe(tick(t, [(30.0, 0.0)] * 4), log_at=float(t))
    assert events == []


def test_imbalance_fires_once_naming_the_loaded_gpu_and_ends_when_it_evens_out():
    watch = HealthWatch(FAST)
    events = watch.observe(series(0, 10, BALANCED), log_at=0)
    heavy = [(60.0, 95.0), (2.0, 40.0), (1.0, 40.0), (30.0, 90.0)]
    events += watch.observe(series(10, 20, heavy), log_at=0)
    fired = alerts_of(events)
    assert [(a.kind, a.gpu) for a in fired] == [("imbalance", 0)]
    assert fired[0].since == 10 and fired[0].at == 13  # held imbalance_s (3 s) from its first reading
    assert fired[0].params["light"] == [["", 1], ["", 2]]
    text = fired[0].message().text("en")
    assert text.startswith("GPU 0 holds 60.0 of its 64.0 GiB") and "GPU 1, GPU 2" in text and "at most 2.0 GiB" in text
    ended = watch.observe(series(30, 3, BALANCED), log_at=0)
    assert ended == [EpisodeEnd("imbalance", "", 0, 10, 30)]
    # A second episode is a second alert, after the whole time again.
    again = alerts_of(watch.observe(series(33, 10, heavy), log_at=0))
    assert [(a.kind, a.gpu, a.since) for a in again] == [("imbalance", 0, 33)]


def test_one_card_full_of_a_small_model_is_no_imbalance():
    """Below loaded_pct the loaded card is not "full": a tiny model on one of four GPUs."""
    watch = HealthWatch(FAST)
    assert watch.observe(series(0, 30, [(8.0, 90.0), (0.5, 90.0), (0.5, 90.0), (0.5, 90.0)]), log_at=0) == []


def test_a_lost_rank_fires_once_for_the_idle_gpu_after_lost_rank_s():
    watch = HealthWatch(FAST)
    events = watch.observe(series(0, 10, BALANCED), log_at=0)
    lost = [(30.0, 95.0), (30.5, 90.0), (29.8, 0.0), (30.2, 93.0)]
    events += watch.observe(series(10, 30, lost), log_at=0)
    fired = alerts_of(events)
    assert [(a.kind, a.gpu, a.since, a.at) for a in fired] == [("lost_rank", 2, 10, 13)]
    assert "GPU 2 has been idle (0 % busy) for 3 s" in fired[0].message().text("en")
    assert fired[0].params["others_pct"] == 95.0


def test_a_gpu_that_never_trained_is_not_a_lost_rank():
    watch = HealthWatch(FAST)
    assert watch.observe(series(0, 30, [(10.0, 95.0), (0.3, 0.0)]), log_at=0) == []


def test_a_stall_fires_once_when_every_gpu_is_idle_and_the_log_is_quiet():
    watch = HealthWatch(FAST)
    events = watch.observe(series(0, 10, BALANCED), log_at=9.5)
    idle = [(30.0, 0.0)] * 4
    events += watch.observe(series(10, 30, idle), log_at=9.5)
    fired = alerts_of(events)
    # No lost rank: nobody trains. The quiet time counts from the later of the two.
    assert [(a.kind, a.gpu, a.since) for a in fired] == [("stall", None, 10)]
    assert fired[0].params["gpus"] == 4 and fired[0].at == 14
    assert fired[0].message().text("en").startswith("All 4 GPU(s) of the run are idle and no log line came for 4 s")


def test_a_new_log_line_ends_a_stall_and_restarts_its_time():
    watch = HealthWatch(FAST)
    idle = [(30.0, 0.0)] * 2
    events = watch.observe(tick(-1, [(30.0, 90.0)] * 2) + series(0, 6, idle), log_at=0.0)
    assert [a.kind for a in alerts_of(events)] == ["stall"]
    events = watch.observe(series(6, 2, idle), log_at=6.5)  # the trainer printed a line
    assert [type(e) for e in events] == [EpisodeEnd]
    events = watch.observe(series(8, 10, idle), log_at=6.5)
    assert [(a.kind, a.since) for a in alerts_of(events)] == [("stall", 6.5)]


def test_gpus_that_never_trained_neither_stall_nor_carry_the_run():
    """A CPU run that sees GPUs (the demo on a GPU machine), or one still loading: its GPUs
    idle and its log quiet a while is no hang; another program's memory on one is no imbalance."""
    watch = HealthWatch(FAST)
    assert watch.observe(series(0, 30, [(60.0, 0.0), (0.3, 0.0)]), log_at=0.0) == []


def test_no_decision_while_the_run_is_not_training():
    watch = HealthWatch(FAST)
    trained = tick(-1, [(30.0, 90.0)] * 2)
    assert watch.observe(trained + series(0, 30, [(30.0, 0.0)] * 2), log_at=0.0, training=False) == []
    assert [a.kind for a in alerts_of(HealthWatch(FAST).observe(trained + series(0, 30, [(30.0, 0.0)] * 2), log_at=0.0))] == ["stall"]


def test_a_gap_in_the_readings_starts_an_unfired_condition_again():
    watch = HealthWatch(FAST)
    lost = [(30.0, 95.0), (30.0, 0.0)]
    watch.observe(series(0, 5, [(30.0, 95.0), (30.0, 95.0)]), log_at=0)
    assert watch.observe(series(5, 2, lost), log_at=0) == []  # 2 s of 3
    assert watch.observe(series(100, 2, lost), log_at=0) == []  # the app was down: 2 s of 3 again
    assert [a.since for a in alerts_of(watch.observe(series(102, 2, lost), log_at=0))] == [100]


def test_gpus_of_several_nodes_are_told_apart():
    watch = HealthWatch(FAST)
    readings = []
    for t in range(20):
        readings += tick(t, [(30.0, 95.0), (30.0, 95.0)], node="n1")
        readings += tick(t + 0.3, [(30.0, 95.0), (30.0, 0.0 if t >= 5 else 95.0)], node="n2")
    fired = alerts_of(HealthWatch(FAST).observe(readings, log_at=0))
    assert [(a.kind, a.node, a.gpu) for a in fired] == [("lost_rank", "n2", 1)]
    assert fired[0].message().text("en").startswith("n2 · GPU 1 has been idle")
    assert watch is not None


def test_a_watch_seeded_with_the_record_does_not_alert_again(tmp_path):
    """After a restart the monitor re-reads the samples from the start: the episodes already
    recorded (ended or still going) add no line; a later one does."""
    lost = [(30.0, 95.0), (30.5, 90.0), (29.8, 0.0), (30.2, 93.0)]
    history = series(0, 10, BALANCED) + series(10, 10, lost) + series(20, 10, BALANCED) + series(30, 10, lost)
    first = HealthWatch(FAST)
    events = first.observe(history, log_at=0)
    assert [(type(e).__name__, e.since) for e in events] == [("HealthAlert", 10), ("EpisodeEnd", 10), ("HealthAlert", 30)]
    append_events(tmp_path, events)
    again = HealthWatch(FAST, recorded=read_events(tmp_path))
    assert again.observe(history, log_at=0) == []
    # Only part of the history read again (the monitor's feed is bounded): still nothing new.
    assert HealthWatch(FAST, recorded=read_events(tmp_path)).observe(history[-20:], log_at=0) == []
    # The episode still going ends, and that end is recorded once.
    assert again.observe(series(40, 2, BALANCED), log_at=0) == [EpisodeEnd("lost_rank", "", 2, 30, 40)]
    later = alerts_of(again.observe(series(42, 10, lost), log_at=0))
    assert [(a.gpu, a.since) for a in later] == [(2, 42)]


@pytest.mark.hostile
def test_malformed_readings_from_a_samples_file_are_left_out():
    """Reading.from_json takes a line's values as they are: a hostile samples.jsonl must not
    make the watch raise, nor grow without bound."""
    bad = [
        Reading("0", 1, 2, 90.0, None, None, "sysfs", 1.0), Reading(True, 1, 2, 90.0, None, None, "sysfs", 1.0),
        Reading(0, "lots", 2, 90.0, None, None, "sysfs", 1.0), Reading(0, 1, 2, "busy", None, None, "sysfs", 1.0),
        Reading(0, 1, 2, 90.0, None, None, "sysfs", float("nan")), Reading(0, 1, 2, 90.0, None, None, "sysfs", 1.0, "", None),  # type: ignore[arg-type]
    ]  # fmt: skip
    many = [Reading(i % 4096, GIB, 64 * GIB, 90.0, None, None, "sysfs", 2.0, "", f"n{i // 4096}") for i in range(3 * 4096)]
    watch = HealthWatch(FAST)
    assert watch.observe([*bad, *many], log_at=0) == []
    assert len(watch._gpus) == 4096


def test_settings_are_bounded():
    for bad in ({"idle_pct": -1}, {"stall_s": 0}, {"imbalance_ratio": 1.0}, {"busy_pct": float("nan")}, {"idle_pct": 40, "busy_pct": 30}, {"lost_rank_s": True}):
        with pytest.raises(ValueError):
            HealthSettings(**bad)
    assert HealthSettings().stop_on_stall is False  # stopping a run is asked for, never assumed


@pytest.mark.hostile
def test_the_record_is_bounded_and_hostile_lines_are_skipped(tmp_path):
    good = HealthAlert("lost_rank", "", 1, 5.0, 8.0, {"busy_pct": 0.0, "others_pct": 90.0})
    lines = [
        "not json", json.dumps({"kind": "rm -rf", "gpu": 1}), json.dumps({"kind": "lost_rank", "gpu": -1, "since": 1, "at": 2}),
        json.dumps({"kind": "stall", "gpu": 3, "since": 1, "at": 2}), json.dumps({"kind": "lost_rank", "gpu": 1, "since": "x", "at": 2}),
        json.dumps({"kind": "imbalance", "node": "n" * 500, "gpu": 0, "since": 1, "at": 2}),
        json.dumps({"kind": "imbalance", "node": "n1\x1b]0;owned\x07", "gpu": 0, "since": 1, "at": 2}),  # a terminal escape
        json.dumps(good.to_json()), '{"kind": "lost_rank", "gpu": 1, "since": 5.0, "at"',
    ]  # fmt: skip
    (tmp_path / ALERTS_FILE).write_text("\n".join(lines))
    assert [a for a, _ in read_alerts(tmp_path)] == [good]
    # A link planted at the file is neither read nor written through.
    (tmp_path / ALERTS_FILE).unlink()
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.write_text(json.dumps(good.to_json()) + "\n")
    (tmp_path / ALERTS_FILE).symlink_to(outside)
    assert read_events(tmp_path) == ()
    with pytest.raises(OSError):
        append_events(tmp_path, [good])
    assert outside.read_text().count("\n") == 1
    # A full file gets nothing more.
    (tmp_path / ALERTS_FILE).unlink()
    (tmp_path / ALERTS_FILE).write_text(" " * (300 * 1024) + "\n" + json.dumps(good.to_json()) + "\n")
    append_events(tmp_path, [good])
    assert len(read_alerts(tmp_path)) == 1


def test_the_stall_clock_is_the_newer_of_the_two_logs_as_the_monitor_last_polled(tmp_path):
    import os

    from backend.service.monitors import RunMonitor

    monitor = RunMonitor(tmp_path)
    monitor.poll(force=True)
    assert monitor.last_log_at is None
    (tmp_path / "train.log").write_text("x\n")
    (tmp_path / "output").mkdir()
    (tmp_path / "output" / "trainer_log.jsonl").write_text("{}\n")
    os.utime(tmp_path / "train.log", (100, 100))
    os.utime(tmp_path / "output" / "trainer_log.jsonl", (200, 200))
    monitor.poll(force=True)
    assert monitor.last_log_at == 200
    os.utime(tmp_path / "train.log", (300, 300))
    monitor.poll(force=True)
    assert monitor.last_log_at == 300


@pytest.mark.parametrize("locale", ["en", "zh-CN"])
def test_every_alert_in_words_in_both_languages(tmp_path, locale):
    alerts = [
        HealthAlert("imbalance", "", 0, 1.0, 61.0, {"used_gib": 60.0, "total_gib": 64.0, "light": [["", 1], ["", 2]], "light_gib": 1.2}),
        HealthAlert("lost_rank", "node-7", 3, 1.0, 121.0, {"busy_pct": 0.0, "others_pct": 98.0}),
        HealthAlert("stall", "", None, 1.0, 601.0, {"gpus": 4, "quiet_s": 600.0}),
    ]
    append_events(tmp_path, [*alerts, EpisodeEnd("imbalance", "", 0, 1.0, 90.0)])
    panel = alerts_markdown(tmp_path, locale)
    assert panel.count("\n- ") == 3 and "NCCL_DEBUG=INFO" in panel and "ddp_timeout" in panel
    assert "GPU 0" in panel and "node\\-7 · GPU 3" in panel  # a node name is escaped like any text
    assert table_mark(tmp_path, "running", locale) == "running ⚠3"
    assert "⚠ 3" in status_mark(tmp_path, locale)
    for alert in alerts:
        for text in (alert_text(alert, None, locale), alert.fix().text(locale)):
            assert "{" not in text
            if locale == "zh-CN":
                assert english_runs(text) == [], text
    assert table_mark(tmp_path / "none", "finished", locale) == "finished"


def test_a_finished_run_shows_its_alerts_on_the_panel_in_the_table_and_in_status(tmp_path):
    """Read from the run's folder alone (no process): what a restarted app shows."""
    import io

    from backend.runs_cli import status_main
    from backend.service import RocBoard

    board = RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports")
    state = board.store.create("gpus", "mi250", "m", {"config.yaml": "", "train.log": ""})
    board.store.update(state.id, state="finished", exit_code=0)
    run_dir = board.store.run_dir(state.id)
    lost = HealthAlert("lost_rank", "", 3, 10.0, 130.0, {"busy_pct": 0.0, "others_pct": 97.0})
    append_events(run_dir, [lost, EpisodeEnd("lost_rank", "", 3, 10.0, 200.0)])
    assert "GPU 3 has been idle (0 % busy) for 120 s" in board.run_view(state.id, "en").alert.replace("\\", "")
    assert "GPU 3 已空闲 120 秒" in board.run_view(state.id, "zh-CN").alert
    for locale, word in (("en", "finished ⚠1"), ("zh-CN", "已完成 ⚠1")):
        _, shown, _ = board.history_table(locale)
        assert [row[2] for row in shown if row[0] == state.id] == [word]
    out = io.StringIO()
    assert status_main([state.id, "--runs-dir", str(tmp_path / "runs"), "--lang", "zh-CN"], out=out, err=io.StringIO()) == 0
    lines = out.getvalue().splitlines()
    assert "⚠ 1 条 GPU 告警" in lines[0] and "丢失进程" in lines[0]
    assert lines[1].startswith("  ⚠ 丢失进程：GPU 3 已空闲") and "NCCL_DEBUG=INFO" in lines[2]
    out = io.StringIO()
    assert status_main([state.id, "--runs-dir", str(tmp_path / "runs"), "--json"], out=out, err=io.StringIO()) == 0
    (alert,) = json.loads(out.getvalue())["health_alerts"]
    assert (alert["kind"], alert["gpu"], alert["ended"]) == ("lost_rank", 3, 200.0)


def test_the_serve_flags_set_the_thresholds_within_their_bounds():
    from ui.serve import parse_args

    args = parse_args(["--health-stall-s", "90", "--health-imbalance-ratio", "8", "--health-stop-on-stall"])
    assert (args.health.stall_s, args.health.imbalance_ratio, args.health.stop_on_stall, args.health.lost_rank_s) == (90, 8, True, 120)
    assert parse_args([]).health == HealthSettings()
    for bad in (["--health-stall-s", "0"], ["--health-idle-pct", "60"], ["--health-busy-pct", "3", "--health-idle-pct", "5"], ["--health-lost-rank-s", "nan"]):
        with pytest.raises(SystemExit):
            parse_args(bad)
