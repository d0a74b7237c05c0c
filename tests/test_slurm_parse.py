"""backend/slurm/parse.py and states.py on what Slurm 22.05 really printed (tests/fixtures/slurm/,
captured byte for byte from the test cluster by tests/fixtures/slurm/capture.py), and on what
it could print that is odd or hostile: bounded, never raising."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.i18n import CATALOGUE
from backend.slurm import parse
from backend.slurm.parse import JobInfo
from backend.slurm.states import reason_key, update_for, update_when_forgotten

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"


def captured(name: str, stream: str = "stdout") -> str:
    return (FIXTURES / f"{name}.{stream}").read_text()


def job_ids(command: str) -> list[str]:
    """The job ids a captured command asked about (commands.txt)."""
    for line in (FIXTURES / "commands.txt").read_text().splitlines():
        name, _, argv = line.partition(": ")
        if name == command:
            jobs = next(part for part in argv.split() if part.startswith("--jobs="))
            return jobs.removeprefix("--jobs=").split(",")
    raise KeyError(command)


# --- squeue ---------------------------------------------------------------------------------


def test_squeue_gives_each_known_job_with_why_it_waits():
    running, pending, behind, unknown = job_ids("squeue_mixed")
    jobs = {job.job_id: job for job in parse.parse_squeue(captured("squeue_mixed"))}
    assert set(jobs) == {running, pending, behind}  # the unknown id is simply not there
    assert jobs[running].state == "RUNNING" and jobs[running].running and jobs[running].nodes == "n[1-2]" and jobs[running].node_count == 2
    assert jobs[running].start_time.startswith("20")
    assert (jobs[pending].state, jobs[pending].reason, jobs[pending].waiting) == ("PENDING", "Resources", True)
    assert jobs[behind].reason == "Priority" and jobs[behind].start_time == "" and jobs[behind].nodes == ""
    assert jobs[pending].time_limit_s is None  # UNLIMITED


def test_squeue_of_ended_jobs_and_of_unknown_ones():
    done, failed, timeout = job_ids("squeue_ended")
    jobs = {job.job_id: job for job in parse.parse_squeue(captured("squeue_ended"))}
    assert jobs[done].state == "COMPLETED" and jobs[done].ended
    assert (jobs[failed].state, jobs[failed].reason) == ("FAILED", "NonZeroExitCode")
    assert (jobs[timeout].state, jobs[timeout].reason, jobs[timeout].time_limit_s) == ("TIMEOUT", "TimeLimit", 60)
    assert parse.parse_squeue(captured("squeue_unknown")) == []
    assert "Invalid job id" in captured("squeue_unknown", "stderr")
    assert (FIXTURES / "squeue_unknown.rc").read_text().strip() == "1"


# --- scontrol -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, state, reason, code, signal",
    [
        ("show_job_running", "RUNNING", "", 0, 0),
        ("show_job_pending", "PENDING", "Resources", 0, 0),
        ("show_job_never", "PENDING", "PartitionConfig", 0, 0),
        ("show_job_cancelled", "CANCELLED", "Resources", 0, 0),
        ("show_job_completed", "COMPLETED", "", 0, 0),
        ("show_job_failed", "FAILED", "NonZeroExitCode", 3, 0),
        ("show_job_timeout", "TIMEOUT", "TimeLimit", 0, 15),
    ],
)
def test_show_job_gives_state_reason_and_exit_code(name, state, reason, code, signal):
    job = parse.parse_show_job(captured(name))
    assert job is not None and job.job_id.isdigit()
    assert (job.state, job.reason, job.exit_code, job.exit_signal) == (state, reason, code, signal)


def test_show_job_of_an_unknown_id_is_none():
    assert parse.parse_show_job(captured("show_job_unknown")) is None
    assert "Invalid job id specified" in captured("show_job_unknown", "stderr")


def test_key_values_keep_a_value_with_spaces_whole():
    values = parse.parse_key_values("JobId=7 JobState=RUNNING Command=/runs/my run/slurm.sh WorkDir=/runs/my run StdOut=/x")
    assert values["Command"] == "/runs/my run/slurm.sh" and values["WorkDir"] == "/runs/my run" and values["JobState"] == "RUNNING"
    assert parse.parse_key_values(captured("show_job_running").splitlines()[0])["AllocNode:Sid"]


def test_partitions_and_nodes_of_the_test_cluster():
    partitions = {p.name: p for p in parse.parse_show_partitions(captured("show_partition"))}
    assert partitions["debug"].default and partitions["debug"].max_time_s is None and partitions["debug"].total_nodes == 2
    assert partitions["short"].max_time_s == 120 and not partitions["short"].default and partitions["short"].state == "UP"
    nodes = {n.name: n for n in parse.parse_show_nodes(captured("show_node"))}
    assert set(nodes) == {"n1", "n2"}
    assert nodes["n1"].cpus == 2 and nodes["n1"].memory_mb == 4000 and nodes["n1"].gpus == 0 and nodes["n1"].address == "127.0.0.1"
    assert set(nodes["n1"].partitions) == {"debug", "short"} and nodes["n2"].partitions == ("debug",)
    assert parse.parse_hostnames(captured("hostnames")) == ["n1", "n2"]


@pytest.mark.parametrize("gres, gpus", [("(null)", 0), ("gpu:8", 8), ("gpu:mi300x:8(S:0-1)", 8), ("gpu:4,nic:1", 4), ("gpu:a:2,gpu:b:2", 4), ("gpu", 1), ("gpu:x", 0)])
def test_gpus_of_a_gres(gres, gpus):
    assert parse.gres_gpus(gres) == gpus


# --- sacct ----------------------------------------------------------------------------------


def test_sacct_gives_the_job_line_not_its_steps():
    done, failed, timeout = job_ids("sacct_ended")
    text = captured("sacct_ended")
    assert parse.parse_sacct(text, done).state == "COMPLETED"
    assert (parse.parse_sacct(text, failed).state, parse.parse_sacct(text, failed).exit_code) == ("FAILED", 3)
    timed_out = parse.parse_sacct(text, timeout)
    assert timed_out.state == "TIMEOUT" and timed_out.time_limit_s == 60  # not its CANCELLED batch step
    assert parse.parse_sacct(text, "99999") is None
    assert parse.parse_sacct("Slurm accounting storage is disabled\n", done) is None


# --- sbatch ---------------------------------------------------------------------------------


def test_sbatch_parsable_gives_the_job_id():
    assert parse.parse_sbatch_job_id(captured("sbatch_parsable")).isdigit()
    assert parse.parse_sbatch_job_id("123;cluster-a\n") == "123"
    assert parse.parse_sbatch_job_id("sbatch: warning: something\n42\n") == "42"
    assert parse.parse_sbatch_job_id("") is None and parse.parse_sbatch_job_id("Submitted batch job x\n") is None


@pytest.mark.parametrize(
    "name, rule, value",
    [
        ("sbatch_bad_partition", "slurm-bad-partition", "nope"),
        ("test_only_bad_partition", "slurm-bad-partition", "nope"),
        ("sbatch_bad_account", "slurm-bad-account", ""),
        ("sbatch_gpus", "slurm-bad-gpus", ""),
        ("sbatch_bad_time", "slurm-bad-time", ""),
        ("sbatch_bad_mem", "slurm-too-much-memory", ""),
    ],
)
def test_sbatch_refusals_are_named(name, rule, value):
    assert (FIXTURES / f"{name}.rc").read_text().strip() != "0"
    refusal = parse.parse_sbatch_refusal(captured(name, "stderr"))
    assert (refusal.rule, refusal.value) == (rule, value)
    assert refusal.detail and "\n" not in refusal.detail
    assert f"check.{rule}.problem" in CATALOGUE["zh-CN"]


def test_an_impossible_job_was_taken_by_slurm_and_left_waiting():
    """Why RocBoard compares a request with the nodes itself (backend/slurm/preflight.py):
    Slurm 22.05 took a job of 64 CPUs per node and 3 nodes on this 2 x 2-CPU cluster."""
    assert captured("sbatch_too_many_cpus").strip().isdigit() and captured("sbatch_too_many_nodes").strip().isdigit()
    assert parse.parse_show_job(captured("show_job_never")).reason == "PartitionConfig"


def test_unknown_refusal_words_keep_the_last_error_line():
    refusal = parse.parse_sbatch_refusal("sbatch: error: something new went wrong\nsbatch: error: Batch job submission failed: Frobnication denied\n")
    assert refusal.rule == "slurm-refused" and refusal.detail.endswith("Frobnication denied")
    assert parse.parse_sbatch_refusal("sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)\n").rule == "slurm-unreachable"


def test_test_only_says_when_and_where_it_would_start():
    at, nodes = parse.parse_test_only(captured("test_only_ok", "stderr"))
    assert at[:1].isdigit() and nodes == "n1"


# --- times and sizes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("30", 1800),
        ("30:00", 1800),
        ("1:30", 90),
        ("04:00:00", 14400),
        ("2-12", 216000),
        ("2-12:30", 217800),
        ("2-00:00:00", 172800),
        ("UNLIMITED", None),
        ("INFINITE", None),
        ("Partition_Limit", None),
        ("1:00", 60),
    ],
)
def test_slurm_times(text, seconds):
    assert parse.parse_time_limit(text) == seconds
    if seconds is not None:
        assert parse.parse_time_limit(parse.format_time_limit(seconds)) == seconds


@pytest.mark.hostile
@pytest.mark.parametrize("text", ["abc", "1:2:3:4", "-5", "1-", "9" * 50, "1h", "00:00:00:00", "1;rm", "\u0661\u0662"])
def test_a_time_that_is_not_one_raises_value_error(text):
    with pytest.raises(ValueError):
        parse.parse_time_limit(text)


@pytest.mark.parametrize("text, mb", [("4000", 4000), ("4000M", 4000), ("64G", 65536), ("1T", 1048576), ("512K", 1), ("2g", 2048), ("8GB", 8192)])
def test_memory_sizes(text, mb):
    assert parse.parse_memory_mb(text) == mb


@pytest.mark.hostile
@pytest.mark.parametrize("text", ["", "64 G", "-1G", "1.5G", "64X", "9" * 40, "G"])
def test_a_memory_size_that_is_not_one_raises_value_error(text):
    with pytest.raises(ValueError):
        parse.parse_memory_mb(text)


@pytest.mark.hostile
def test_odd_output_is_skipped_and_bounded():
    long = "x" * 100_000
    text = f"1|RUNNING|None|{long}|1|0:01|1:00|N/A\nnot a job\n|||||||\n2|PENDING|Resources||1|0:00|UNLIMITED|N/A|extra\n3|RUNNING+|None|n1|one|0:01|soon|N/A\n"
    jobs = parse.parse_squeue(text)
    assert [job.job_id for job in jobs] == ["1", "3"]
    assert len(jobs[0].nodes) == parse.MAX_FIELD_CHARS
    assert jobs[1].state == "RUNNING" and jobs[1].node_count is None and jobs[1].time_limit_s is None
    assert parse.parse_show_job("no job here\nJobId=5\n") is None  # no JobState: not a job line
    assert parse.parse_show_job("JobId=5 JobState=CANCELLED by 0 ExitCode=nope\n").state == "CANCELLED"
    assert parse.parse_exit_code("999999999999999999999:1") == (None, 1)


# --- states -----------------------------------------------------------------------------------


def job(state: str, **fields) -> JobInfo:
    return JobInfo("42", state, **fields)


@pytest.mark.parametrize(
    "slurm, stop_requested, tasks, state, reason",
    [
        ("PENDING", False, (), "pending", ""),
        ("CONFIGURING", False, (), "pending", ""),
        ("RUNNING", False, (), "running", ""),
        ("COMPLETING", False, (), "running", ""),
        ("COMPLETED", False, (), "finished", ""),
        ("COMPLETED", True, (), "stopped", "reason.stopped_by_user"),
        ("FAILED", True, (), "stopped", "reason.stopped_by_user"),
        ("COMPLETED", False, ({"stopped": True},), "stopped", "reason.slurm_saved_before_limit"),
        ("CANCELLED", False, (), "stopped", "reason.slurm_cancelled"),
        ("TIMEOUT", False, (), "failed", "reason.slurm_timeout"),
        ("FAILED", False, (), "failed", "reason.slurm_failed"),
        ("NODE_FAIL", False, (), "failed", "reason.slurm_node_fail"),
        ("OUT_OF_MEMORY", False, (), "failed", "reason.slurm_out_of_memory"),
        ("PREEMPTED", False, (), "failed", "reason.slurm_preempted"),
        ("BOOT_FAIL", False, (), "failed", "reason.slurm_boot_fail"),
        ("DEADLINE", False, (), "failed", "reason.slurm_deadline"),
        ("REVOKED", False, (), "failed", "reason.slurm_ended"),
    ],
)
def test_a_job_state_is_a_run_state(slurm, stop_requested, tasks, state, reason):
    update = update_for(job(slurm, exit_code=0, time_limit_s=60), stop_requested, tasks)
    assert (update.state, update.stop_reason) == (state, reason)
    if reason:
        assert reason in CATALOGUE["zh-CN"]
    assert update.ended == (state in ("finished", "stopped", "failed"))


def test_a_forgotten_job_is_told_from_its_node_records():
    finished = update_when_forgotten("RUNNING", False, [{"ended_at": 1.0, "exit_code": 0}, {"ended_at": 1.0, "exit_code": 0}], ("finished", "reason.finished_unwatched"))
    assert finished.state == "finished"
    half = update_when_forgotten("RUNNING", False, [{"ended_at": 1.0, "exit_code": 0}, {"started_at": 1.0}], ("finished", "reason.finished_unwatched"))
    assert (half.state, half.stop_reason) == ("failed", "reason.slurm_job_gone")
    assert update_when_forgotten("PENDING", False, [], ("failed", "reason.failed_unwatched")).state == "failed"
    assert update_when_forgotten("RUNNING", True, [], ("failed", "")).state == "stopped"


@pytest.mark.parametrize(
    "reason, key",
    [
        ("Resources", "slurm.reason.Resources"),
        ("ReqNodeNotAvail, UnavailableNodes:n1", "slurm.reason.ReqNodeNotAvail"),
        ("QOSMaxJobsPerUserLimit", "slurm.reason.QOSMaxJobsPerUserLimit"),
        ("QOSMaxWallDurationPerJobLimit", "slurm.reason.QOSLimit"),
        ("", "slurm.reason.None"),
        ("SomethingNew", "slurm.reason.other"),
        ("<img src=x onerror=alert(1)>", "slurm.reason.other"),
    ],
)
def test_every_pending_reason_has_words(reason, key):
    assert reason_key(reason) == key
    assert key in CATALOGUE["en"] and key in CATALOGUE["zh-CN"]


# --- what the page shows, and what a tampered state file can do --------------------------------


@pytest.mark.hostile
@pytest.mark.parametrize("job_id", ["1;scancel -u root", "$(reboot)", "-1", "12 13", "١٢", "9" * 40, 7, None])
def test_a_job_id_that_is_not_digits_never_reaches_a_slurm_command(tmp_path, job_id):
    import json as json_module

    from backend.runs import RunStore
    from backend.slurm.executor import SlurmExecutor

    store = RunStore(tmp_path / "runs")
    state = store.create(name="x", preset="cpu-demo", model="demo", files={}, executor="slurm")
    path = store.run_dir(state.id) / "state.json"
    data = json_module.loads(path.read_text())
    data.update(state="running", job_id=job_id)
    path.write_text(json_module.dumps(data))
    read = store.read(state.id)
    assert read.job_id == "" and read.executor == "slurm"

    class Recording:
        calls: list = []

        def __getattr__(self, name):
            return lambda *args, **kwargs: Recording.calls.append((name, args))

    executor = SlurmExecutor(store, client=Recording())
    assert executor.refresh(read) == read and executor.stop(state.id).job_id == ""
    assert Recording.calls == []


def test_a_slurm_run_whose_submitter_died_before_sbatch_answered_is_settled_without_asking_slurm(tmp_path):
    import subprocess
    import sys

    import psutil

    from backend.runs import RunStore
    from backend.slurm.executor import SlurmExecutor

    store = RunStore(tmp_path / "runs")
    state = store.create(name="x", preset="cpu-demo", model="demo", files={}, executor="slurm")

    class Refusing:
        def __getattr__(self, name):
            raise AssertionError(f"Slurm asked: {name}")

    executor = SlurmExecutor(store, client=Refusing())
    assert executor.refresh(state).state == "starting"  # this process is still submitting it
    gone = psutil.Popen([sys.executable, "-c", "pass"], stdout=subprocess.DEVNULL)
    started = gone.create_time()
    gone.wait(10)
    orphan = store.update(state.id, starter_pid=gone.pid, starter_started=started)
    settled = executor.refresh(orphan)
    assert (settled.state, settled.stop_reason, settled.job_id) == ("failed", "reason.start_interrupted", "")


def test_an_unknown_executor_in_a_state_file_is_this_machine(tmp_path):
    import json as json_module

    from backend.runs import RunStore

    store = RunStore(tmp_path / "runs")
    state = store.create(name="x", preset="cpu-demo", model="demo", files={})
    path = store.run_dir(state.id) / "state.json"
    path.write_text(json_module.dumps({**json_module.loads(path.read_text()), "executor": "kubernetes"}))
    assert store.read(state.id).executor == "local"


@pytest.mark.hostile
def test_slurms_words_are_escaped_where_the_page_shows_them():
    from dataclasses import replace

    from backend.runs import RunState
    from backend.view import queue_markdown, where_markdown

    run = RunState("r1", "<b>name</b>", "2026-01-01", "cpu-demo", "m", state="pending", executor="slurm", job_id="12", slurm_reason="<img src=x onerror=alert(1)>")
    for locale in ("en", "zh-CN"):
        shown = where_markdown(run, locale)
        assert "<img" not in shown.replace("`<img src=x onerror=alert(1)>`", "")  # only inside a code span
        assert "`12`" in shown
    running = replace(run, state="running", slurm_nodes="n[1-2]`](javascript:x)")
    assert "](javascript" not in where_markdown(running).replace("`n[1-2]ʼ](javascript:x)`", "")
    queued = replace(run, state="queued", executor="local", queued_at=0.0)
    table = queue_markdown(None, [queued], [run], "en")
    assert "<b>" not in table and "&lt;b&gt;" in table
