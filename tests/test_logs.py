import json
import os

from backend.runs.logs import JsonlTail, MetricSeries, parse_metric


def line(step, loss=1.0, total=30):
    return (
        json.dumps({"current_steps": step, "total_steps": total, "loss": loss, "lr": 1e-3, "epoch": 0.1, "percentage": step / total * 100, "elapsed_time": "0:00:01", "remaining_time": "0:00:09"})
        + "\n"
    )


def test_yields_each_record_once(tmp_path):
    path = tmp_path / "trainer_log.jsonl"
    tail = JsonlTail(path)
    assert tail.poll() == []  # no file yet is not an error
    path.write_text(line(1) + line(2))
    assert [r["current_steps"] for r in tail.poll()] == [1, 2]
    assert tail.poll() == []
    with open(path, "a") as f:
        f.write(line(3))
    assert [r["current_steps"] for r in tail.poll()] == [3]


def test_partial_last_line_is_left_for_next_poll(tmp_path):
    path = tmp_path / "log.jsonl"
    record = line(1)
    path.write_text(record[:-1])  # everything but the newline
    tail = JsonlTail(path)
    assert tail.poll() == []
    with open(path, "a") as f:
        f.write(record[-1])
    assert [r["current_steps"] for r in tail.poll()] == [1]
    half = line(2)
    with open(path, "a") as f:
        f.write(half[:10])
    assert tail.poll() == []
    with open(path, "a") as f:
        f.write(half[10:])
    assert [r["current_steps"] for r in tail.poll()] == [2]


def test_garbage_lines_are_counted_and_skipped(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text(line(1) + "not json at all\n" + "[1, 2]\n" + "\xff\n" + line(2))
    tail = JsonlTail(path)
    assert [r["current_steps"] for r in tail.poll()] == [1, 2]
    assert tail.garbage_lines == 3


def test_replaced_file_is_read_from_the_start(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text(line(1) + line(2) + line(3))
    tail = JsonlTail(path)
    assert len(tail.poll()) == 3
    replacement = tmp_path / "new.jsonl"
    replacement.write_text(line(1) + line(2) + line(3) + line(4))  # longer, but a new file
    os.replace(replacement, path)
    assert [r["current_steps"] for r in tail.poll()] == [1, 2, 3, 4]
    assert tail.restarts == 1


def test_truncated_file_is_read_from_the_start(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text(line(1) + line(2))
    tail = JsonlTail(path)
    tail.poll()
    with open(path, "r+") as f:
        f.truncate(0)
        f.write(line(7))
    assert [r["current_steps"] for r in tail.poll()] == [7]


def test_metric_series_resume_replaces_repeated_steps():
    series = MetricSeries()
    series.extend([parse_metric(json.loads(line(s))) for s in (1, 2, 3, 4, 5)])
    # A resume from checkpoint-3 logs steps 4 and 5 again, then goes on.
    series.extend([parse_metric(json.loads(line(s, loss=0.5))) for s in (4, 5, 6)])
    assert [p.step for p in series.points] == [1, 2, 3, 4, 5, 6]
    assert [p.loss for p in series.points][3:] == [0.5, 0.5, 0.5]


def test_last_line_without_loss_parses():
    record = {"current_steps": 30, "total_steps": 30, "epoch": 1.0, "percentage": 100.0, "elapsed_time": "0:00:10", "remaining_time": "0:00:00"}
    point = parse_metric(record)
    assert point is not None and point.loss is None and point.step == 30
    assert parse_metric({"foo": 1}) is None


def test_text_tail_sees_trainer_prints_between_progress_bars(tmp_path):
    from pathlib import Path

    from backend.runs.logs import TextTail, parse_trainer_print

    real = (Path(__file__).parent / "fixtures" / "logs" / "real_grad_norm_nan.log").read_text()
    path = tmp_path / "train.log"
    tail = TextTail(path)
    half = len(real) // 2
    path.write_text(real[:half])
    first = [p for p in map(parse_trainer_print, tail.poll()) if p]
    with open(path, "a") as handle:
        handle.write(real[half:])
    second = [p for p in map(parse_trainer_print, tail.poll()) if p]
    printed = first + second
    assert printed[0] == {"loss": 6.212, "grad_norm": 3.759}
    assert any(p["grad_norm"] != p["grad_norm"] for p in printed)  # NaN read as NaN
    assert len(printed) == real.count("'grad_norm'")  # each exactly once across polls


def test_monitor_alerts_on_nan_grad_norm_from_train_log(tmp_path):
    from pathlib import Path

    from backend.service import RunMonitor

    run_dir = tmp_path / "run"
    (run_dir / "output").mkdir(parents=True)
    (run_dir / "train.log").write_text((Path(__file__).parent / "fixtures" / "logs" / "real_grad_norm_nan.log").read_text())
    monitor = RunMonitor(run_dir)
    monitor.poll()
    alert = monitor.alert()
    assert alert is not None and "nan" in alert.lower()


def test_monitor_alert_is_worked_out_again_only_when_new_points_or_grad_norms_arrived(tmp_path, monkeypatch):
    # The decisions loop asks at every look (twice a second per run) and every tab at each refresh.
    from pathlib import Path

    import backend.diagnose
    from backend.service import RunMonitor

    real = (Path(__file__).parent / "fixtures" / "logs" / "real_grad_norm_nan.log").read_text()
    nan_at = real.index("nan")
    run_dir = tmp_path / "run"
    (run_dir / "output").mkdir(parents=True)
    (run_dir / "train.log").write_text(real[: real.rindex("\n", 0, nan_at) + 1])
    monitor = RunMonitor(run_dir)
    monitor.poll()
    asked = []
    real_loss_alert = backend.diagnose.loss_alert
    monkeypatch.setattr(backend.diagnose, "loss_alert", lambda points: asked.append(len(points)) or real_loss_alert(points))
    assert monitor.alert() is None and asked
    worked_out = len(asked)
    assert monitor.alert() is None and monitor.alert() is None
    assert len(asked) == worked_out  # nothing new arrived: the answer kept
    with open(run_dir / "train.log", "a") as handle:
        handle.write(real[real.rindex("\n", 0, nan_at) + 1 :])
    monitor.poll(force=True)
    alert = monitor.alert()
    assert alert is not None and "nan" in alert.lower() and len(asked) > worked_out


def test_unchanged_says_a_read_would_find_nothing_only_for_the_same_file_read_to_its_end(tmp_path):
    # The monitor skips a file's read when its stat says unchanged (one stat per look at a
    # quiet run): anything a read would see must make it False.
    path = tmp_path / "log.jsonl"
    path.write_text(line(1) + line(2))
    tail = JsonlTail(path)
    assert not tail.unchanged(os.lstat(path))  # never read
    assert len(tail.poll()) == 2
    assert tail.unchanged(os.lstat(path))
    assert not tail.unchanged(None)  # gone, or not reachable without a link
    with open(path, "a") as f:
        f.write(line(3)[:10])  # a half line: read again until its newline arrives
    assert not tail.unchanged(os.lstat(path))
    assert tail.poll() == [] and not tail.unchanged(os.lstat(path))
    with open(path, "a") as f:
        f.write(line(3)[10:])
    assert [r["current_steps"] for r in tail.poll()] == [3] and tail.unchanged(os.lstat(path))
    # Replaced by a file of the same size, mtime set back: another inode, read from the start.
    before = os.lstat(path)
    replacement = tmp_path / "new.jsonl"
    replacement.write_text(line(1, loss=2.0) + line(2, loss=2.0) + line(3, loss=2.0))
    os.utime(replacement, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(replacement, path)
    assert os.lstat(path).st_size == before.st_size and not tail.unchanged(os.lstat(path))
    assert [r["loss"] for r in tail.poll()] == [2.0, 2.0, 2.0]
    link = tmp_path / "link.jsonl"
    link.symlink_to(path)
    assert not tail.unchanged(os.lstat(link))  # a link is never the file read


def test_the_monitor_reads_what_a_file_gained_and_not_a_quiet_file(tmp_path):
    from backend.runs import LOG_FILE, SAMPLES_FILE
    from backend.runs.trainer_log import log_path
    from backend.service.monitors import RunMonitor

    run_dir = tmp_path / "run"
    (run_dir / "output").mkdir(parents=True)
    (run_dir / LOG_FILE).write_text("")
    (run_dir / SAMPLES_FILE).write_text("")
    log_path(run_dir).write_text(line(1))
    monitor = RunMonitor(run_dir)
    monitor.poll(force=True)
    assert [p.step for p in monitor.series.points] == [1]
    opened: list[str] = []
    from backend.runs import safe_files

    real_open = safe_files.open_in_run

    def counted(directory, relative):
        opened.append(str(relative))
        return real_open(directory, relative)

    safe_files.open_in_run = counted
    try:
        monitor.poll(force=True)
        assert opened == []  # nothing changed: three stats, no file opened
        with open(log_path(run_dir), "a") as f:
            f.write(line(2))
        monitor.poll(force=True)
        assert opened == ["output/trainer_log.jsonl"]
        assert [p.step for p in monitor.series.points] == [1, 2]
        # A Slurm run's nodes/ folder, looked for only where it is: its node's samples charted.
        from backend.telemetry.base import Reading

        (run_dir / "nodes" / "0").mkdir(parents=True)
        reading = Reading(0, 2**30, 2**34, 50.0, None, None, "sysfs", 1.0, node="n1")
        (run_dir / "nodes" / "0" / "samples.jsonl").write_text(json.dumps(reading.to_json()) + "\n")
        monitor.poll(force=True)
        assert [series.label for series in monitor.memory.values()] == ["n1 · GPU 0"]
    finally:
        safe_files.open_in_run = real_open
