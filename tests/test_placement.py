"""Where a run executes, from the form: the typed choice, every bad value refused with its fix,
the extra #SBATCH lines held to the options passed on, the plan a Slurm run runs, and the
batch script (checked by bash, and its #SBATCH lines by sbatch's own parser in the cluster
tests). No Slurm is needed here."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from backend.config import schema
from backend.config.distributed import parse_plan_form
from backend.config.placement import (
    SBATCH_EXTRA_OPTIONS,
    LocalPlacement,
    SlurmPlacement,
    parse_placement_form,
    parse_sbatch_lines,
    placement_to_form,
    plan_on_slurm,
)
from backend.config.run_form import form_from_saved, saved_form
from backend.findings import has_problems
from backend.i18n import CATALOGUE
from backend.service import RocBoard, demo_form
from backend.slurm.script import NODE_TASK, PRE_TIMEOUT_S, batch_script, sbatch_argv, sbatch_lines

SLURM = {"run_on": "slurm"}


def rules(findings):
    return {f.rule for f in findings}


def test_this_machine_is_the_default_and_ignores_the_slurm_fields():
    placement, findings = parse_placement_form({**schema.placement_form_defaults(), "slurm_nodes": "junk"})
    assert placement == LocalPlacement() and findings == []


def test_a_slurm_placement_from_the_form():
    values = {
        **SLURM,
        "slurm_partition": " gpu-mi300x ",
        "slurm_account": "proj_123",
        "slurm_time": "04:00:00",
        "slurm_nodes": "2",
        "slurm_gpus_per_node": 8,
        "slurm_cpus_per_task": "64",
        "slurm_mem": "512G",
        "slurm_extra": "#SBATCH --qos=high\n--constraint=mi300x&ib\n# a comment\n\n-x n7\n--exclusive",
    }
    placement, findings = parse_placement_form(values, use_cpu=False, gpus_per_preset=8)
    assert findings == []
    assert placement == SlurmPlacement(
        partition="gpu-mi300x", account="proj_123", nodes=2, gpus_per_node=8, cpus_per_task=64, memory="512G", time_limit="04:00:00",
        extra=(("qos", "high"), ("constraint", "mi300x&ib"), ("exclude", "n7"), ("exclusive", "")),
    )  # fmt: skip
    assert placement.time_limit_s == 14400 and placement.memory_mb == 512 * 1024
    back, again = parse_placement_form(placement_to_form(placement), gpus_per_preset=8)
    assert back == placement and again == []


@pytest.mark.hostile
@pytest.mark.parametrize(
    "field, value, rule",
    [
        ("slurm_partition", "gpu; rm -rf /", "slurm-bad-name"),
        ("slurm_partition", "$(reboot)", "slurm-bad-name"),
        ("slurm_account", "a b", "slurm-bad-name"),
        ("slurm_account", "x" * 65, "text-too-long"),
        ("slurm_time", "forever", "slurm-time-format"),
        ("slurm_time", "0", "slurm-time-format"),
        ("slurm_time", "1:2:3:4", "slurm-time-format"),
        ("slurm_mem", "lots", "slurm-mem-format"),
        ("slurm_mem", "64 G", "slurm-mem-format"),
        ("slurm_nodes", "0", "slurm-nodes-range"),
        ("slurm_nodes", "9" * 4000, "slurm-nodes-range"),
        ("slurm_nodes", "two", "not-a-number"),
        ("slurm_gpus_per_node", -1, "slurm-gpus-range"),
        ("slurm_gpus_per_node", 65, "slurm-gpus-range"),
        ("slurm_cpus_per_task", 1.5, "not-a-number"),
        ("slurm_cpus_per_task", 5000, "slurm-cpus-range"),
        ("slurm_partition", ["debug"], "text-not-text"),
        ("slurm_partition", "deb\x00ug", "text-bad-character"),
        ("run_on", "the-cloud", "bad-choice"),
        ("slurm_extra", 7, "text-not-text"),
        ("slurm_extra", "--qos=a\n" * 5000, "text-too-long"),
    ],
)
def test_a_bad_slurm_value_is_refused_with_its_fix(field, value, rule):
    placement, findings = parse_placement_form({**SLURM, "slurm_gpus_per_node": 1, field: value})
    assert rule in rules(findings), [(f.rule, f.problem) for f in findings]
    finding = next(f for f in findings if f.rule == rule)
    assert finding.key == field and finding.fix and has_problems([finding])
    assert f"check.{finding.message or rule}.problem" in CATALOGUE["zh-CN"]
    # The value fell back to its default: nothing of it reaches a #SBATCH line.
    if isinstance(placement, SlurmPlacement):
        assert "rm -rf" not in "\n".join(sbatch_lines(placement, "run"))


@pytest.mark.hostile
@pytest.mark.parametrize(
    "line, rule",
    [
        ("--output=/etc/passwd", "sbatch-option-refused"),
        ("--chdir=/", "sbatch-option-refused"),
        ("--wrap=rm -rf ~", "sbatch-option-refused"),
        ("--export=ALL,LD_PRELOAD=/tmp/x.so", "sbatch-option-refused"),
        ("-o /tmp/x", "sbatch-option-refused"),
        ("--uid=0", "sbatch-option-refused"),
        ("--partition=other", "sbatch-option-own"),
        ("-p other", "sbatch-option-own"),
        ("--time=99:00:00", "sbatch-option-own"),
        ("--job-name=x", "sbatch-option-own"),
        ("--qos=high; reboot", "sbatch-option-value"),
        ("--comment=$(id)", "sbatch-option-value"),
        ("--constraint='a b'", "sbatch-option-value"),
        ("--qos", "sbatch-option-value"),
        ("--requeue=yes", "sbatch-option-value"),
        ("qos=high", "sbatch-line-syntax"),
        ("-qos high", "sbatch-line-syntax"),
        ("#SBATCH", "sbatch-line-syntax"),
        ("--comment=a\x1b[2J", "sbatch-option-value"),
        ("--mail-user=a@b.c\x1b[2J", "sbatch-option-refused"),  # mail options are not passed on at all
    ],
)
def test_an_extra_sbatch_line_outside_the_list_is_refused(line, rule):
    options, findings = parse_sbatch_lines(f"--qos=normal\n{line}")
    assert options == (("qos", "normal"),)  # the good line stays, the bad one is dropped
    assert rules(findings) == {rule} and all(f.key == "slurm_extra" for f in findings)
    assert "line 2" in findings[0].problem


@pytest.mark.hostile
def test_more_extra_lines_than_the_limit_are_refused_whole():
    options, findings = parse_sbatch_lines("\n".join(["--qos=a"] * (schema.SBATCH_EXTRA_MAX_LINES + 1)))
    assert options == () and rules(findings) == {"too-many-items"}


def test_every_option_passed_on_has_a_one_word_name_and_an_example_that_passes():
    from backend.config.placement import SBATCH_VALUE_EXAMPLES

    for name in SBATCH_EXTRA_OPTIONS:
        line = f"--{name}" if SBATCH_EXTRA_OPTIONS[name] == "none" else f"--{name}={SBATCH_VALUE_EXAMPLES[name]}"
        assert parse_sbatch_lines(line) == (((name, SBATCH_VALUE_EXAMPLES.get(name, "")),), []), line


@pytest.mark.parametrize(
    "line, option",
    [
        ("--nodelist=node[01-04],gpu7", ("nodelist", "node[01-04],gpu7")),
        ("-w n1", ("nodelist", "n1")),
        ("--nodelist=rack[1-2]-n[01-16,20]", ("nodelist", "rack[1-2]-n[01-16,20]")),
        ("--exclude=n7,n9", ("exclude", "n7,n9")),
        ("--exclude=gpu-[1,3,5-7].ib", ("exclude", "gpu-[1,3,5-7].ib")),
        ("--qos=high", ("qos", "high")),
        ("--reservation=maint,other", ("reservation", "maint,other")),
        ("--wckey=proj_1", ("wckey", "proj_1")),
        ("--constraint=[rack1|rack2]&mi300x", ("constraint", "[rack1|rack2]&mi300x")),
        ("--constraint=(ib|roce)&gpu*2", ("constraint", "(ib|roce)&gpu*2")),
        ("--exclusive", ("exclusive", "")),
        ("--exclusive=user", ("exclusive", "user")),
        ("--nice", ("nice", "")),
        ("--nice=10", ("nice", "10")),
        ("--nice -5", ("nice", "-5")),
        ("--priority=TOP", ("priority", "TOP")),
        ("--priority=100", ("priority", "100")),
        ("--begin=now+1hour", ("begin", "now+1hour")),
        ("--begin=now+60", ("begin", "now+60")),
        ("--begin=16:00", ("begin", "16:00")),
        ("--begin=2026-01-20T12:34:00", ("begin", "2026-01-20T12:34:00")),
        ("--begin=tomorrow", ("begin", "tomorrow")),
        ("--begin=01/20/26", ("begin", "01/20/26")),
        ("--deadline=2026-02-01", ("deadline", "2026-02-01")),
        ("--hint=nomultithread", ("hint", "nomultithread")),
        ("--gres=gpu:mi300x:8", ("gres", "gpu:mi300x:8")),
        ("--gres=gpu:8,nvme:1", ("gres", "gpu:8,nvme:1")),
        ("--gpu-bind=closest", ("gpu-bind", "closest")),
        ("--gpu-bind=verbose,map_gpu:0,1,2,3", ("gpu-bind", "verbose,map_gpu:0,1,2,3")),
        ("--gpu-bind=mask_gpu:0x3,0xC", ("gpu-bind", "mask_gpu:0x3,0xC")),
        ("--gpus-per-task=1", ("gpus-per-task", "1")),
        ("--gpus-per-task=mi300x:2", ("gpus-per-task", "mi300x:2")),
        ("--mem-per-gpu=64G", ("mem-per-gpu", "64G")),
        ("--switches=1@01:00:00", ("switches", "1@01:00:00")),
        ("--switches=2", ("switches", "2")),
        ("--licenses=matlab:2,fluent", ("licenses", "matlab:2,fluent")),
        ("--comment=nightly-sweep_3", ("comment", "nightly-sweep_3")),
        ("--requeue", ("requeue", "")),
        ("--no-requeue", ("no-requeue", "")),
    ],
)
def test_each_option_passed_on_keeps_its_legitimate_values(line, option):
    assert parse_sbatch_lines(line) == ((option,), [])


@pytest.mark.hostile
@pytest.mark.parametrize(
    "line, message",
    [
        # sbatch reads a node list with a "/" in it from a file of that name on the submitting host.
        ("--nodelist=/etc/hosts", "sbatch-option-file"),
        ("-w ./nodes.txt", "sbatch-option-file"),
        ("--exclude=/home/someone/.ssh/id_rsa", "sbatch-option-file"),
        ("-x ../n", "sbatch-option-file"),
        ("--nodelist=n1,/etc/passwd", "sbatch-option-file"),
        ("--nodelist=node[01-04", "sbatch-option-shape"),
        ("--nodelist=-n1", "sbatch-option-shape"),
        ("--exclude=n1,,n2", "sbatch-option-shape"),
        ("--nice=lots", "sbatch-option-shape"),
        ("--nice=99999999999", "sbatch-option-shape"),
        ("--priority=-1", "sbatch-option-shape"),
        ("--begin=/etc/passwd", "sbatch-option-shape"),
        ("--deadline=whenever", "sbatch-option-shape"),
        ("--hint=fast", "sbatch-option-shape"),
        ("--exclusive=everyone", "sbatch-option-shape"),
        ("--gres=gpu:/dev/kfd", "sbatch-option-shape"),
        ("--gpus-per-task=all", "sbatch-option-shape"),
        ("--mem-per-gpu=lots", "sbatch-option-shape"),
        ("--switches=1@forever", "sbatch-option-shape"),
        ("--qos=a,b", "sbatch-option-shape"),
        ("--reservation=/x", "sbatch-option-shape"),
        ("--wckey=../x", "sbatch-option-shape"),
        ("--licenses=x:y", "sbatch-option-shape"),
        ("--gpu-bind=map_gpu:/x", "sbatch-option-shape"),
        ("--constraint=a/b", "sbatch-option-shape"),
        ("--comment=" + "a" * 257, "sbatch-option-value"),
        # Mail: the cluster would mail any address a page user types, as the app's account.
        ("--mail-user=me@example.com", "sbatch-option-mail"),
        ("--mail-type=ALL", "sbatch-option-mail"),
        ("#SBATCH --mail-user=someone@elsewhere.example", "sbatch-option-mail"),
    ],
)
def test_an_extra_option_takes_only_values_of_its_own_shape(line, message):
    options, findings = parse_sbatch_lines(f"--qos=normal\n{line}")
    assert options == (("qos", "normal"),)  # the good line stays, the bad one is dropped
    assert [(f.key, f.message or f.rule) for f in findings] == [("slurm_extra", message)]
    option = "--" + {"-w": "nodelist", "-x": "exclude"}.get(line[:2], line.removeprefix("#SBATCH ").lstrip("-").partition("=")[0].partition(" ")[0])
    finding = findings[0]
    assert "line 2" in finding.problem and option in finding.problem and finding.fix and has_problems(findings)
    problem, fix = finding.text("zh-CN")
    assert option in problem and fix and f"check.{message}.fix" in CATALOGUE["zh-CN"]
    placement, _ = parse_placement_form({**SLURM, "slurm_gpus_per_node": 1, "slurm_extra": f"--qos=normal\n{line}"})
    assert sbatch_lines(placement, "run")[-1] == "#SBATCH --qos=normal"  # nothing of the refused line is written


@pytest.mark.hostile
def test_an_over_long_extra_line_is_refused_by_its_length():
    from backend.config.placement import SBATCH_LINE_MAX_CHARS

    line = "--constraint=" + "a&" * 400 + "a"
    options, findings = parse_sbatch_lines(f"--qos=normal\n{line}")
    assert options == (("qos", "normal"),) and [f.rule for f in findings] == ["sbatch-line-too-long"]
    assert f"{len(line)}" in findings[0].problem and f"{SBATCH_LINE_MAX_CHARS}" in findings[0].problem


def test_a_gpu_preset_on_slurm_must_ask_for_gpus_and_the_cpu_demo_for_none():
    _, findings = parse_placement_form({**SLURM}, use_cpu=False, gpus_per_preset=8)
    finding = next(f for f in findings if f.rule == "slurm-no-gpus")
    assert finding.patch == {"slurm_gpus_per_node": 8}
    _, findings = parse_placement_form({**SLURM, "slurm_gpus_per_node": 2}, use_cpu=True)
    assert [(f.rule, f.severity) for f in findings] == [("slurm-gpus-on-cpu", "warning")]


def test_the_plan_on_slurm_is_the_forms_on_slurms_nodes_and_gpus():
    form_plan, _ = parse_plan_form({**schema.plan_form_defaults(), "dist_strategy": "zero3", "dist_nnodes": 4, "dist_master_addr": "10.0.0.1"}, check=False)
    plan = plan_on_slurm(form_plan, SlurmPlacement(nodes=2, gpus_per_node=8))
    assert (plan.nnodes, plan.nproc, plan.gpus, plan.strategy) == (2, 8, tuple(range(8)), "zero3")
    assert plan.master_addr != "10.0.0.1"  # the job's first node, found when it starts
    cpu_plan, _ = parse_plan_form({**schema.plan_form_defaults(), "dist_nproc": 2}, on_cpu=True, check=False)
    assert plan_on_slurm(cpu_plan, SlurmPlacement(nodes=3)).nproc == 2
    one, _ = parse_plan_form(schema.plan_form_defaults(), on_cpu=True, check=False)
    assert plan_on_slurm(one, SlurmPlacement(nodes=1)) is None  # one process: no torchrun


def test_a_slurm_runs_form_json_keeps_its_placement_and_not_the_node_fields_slurm_decides():
    board_form = {**demo_form(), **SLURM, "slurm_nodes": 2, "dist_nnodes": 1}
    from backend.config import parse_form

    config, _ = parse_form(board_form, use_cpu=True)
    placement, _ = parse_placement_form(board_form, use_cpu=True)
    form_plan, _ = parse_plan_form(board_form, on_cpu=True, check=False)
    saved = saved_form(config, plan_on_slurm(form_plan, placement), placement)
    assert saved["run_on"] == "slurm" and saved["slurm_nodes"] == 2 and saved["dist_nnodes"] == 1
    back = form_from_saved(saved)
    assert parse_placement_form(back, use_cpu=True)[0] == placement


def test_the_batch_script_asks_for_what_the_form_says_and_bash_reads_it(tmp_path):
    run_dir = tmp_path / "runs dir" / "20260101-000000-x"
    placement = SlurmPlacement(partition="gpu", account="proj", nodes=2, gpus_per_node=8, cpus_per_task=32, memory="256G", time_limit="1-00:00:00", extra=(("qos", "high"),))
    script = batch_script(run_dir, run_dir.name, placement, workers_per_node=8, python="/opt/rb/.venv/bin/python")
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    resources = ("--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=8", "--cpus-per-task=32", "--mem=256G", "--time=1-00:00:00")
    for expected in (*resources, "--partition=gpu", "--account=proj", "--qos=high", f"--signal=USR1@{PRE_TIMEOUT_S}"):
        assert f"#SBATCH {expected}" in lines
    srun = shlex.split(lines[-1])
    assert srun[:2] == ["srun", "--nodes=2"] and "--cpus-per-task=32" in srun and srun[-3:] == ["/opt/rb/.venv/bin/python", str(NODE_TASK), str(run_dir)]
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST"' in script
    (tmp_path / "slurm.sh").write_text(script)
    assert subprocess.run(["bash", "-n", str(tmp_path / "slurm.sh")], capture_output=True).returncode == 0
    # The run directory (spaces and all) is an argument of sbatch, never #SBATCH text.
    argv = sbatch_argv(run_dir, run_dir / "slurm.sh")
    assert argv[:2] == ["sbatch", "--parsable"] and f"--chdir={run_dir}" in argv and argv[-1] == str(run_dir / "slurm.sh")
    short = batch_script(run_dir, run_dir.name, SlurmPlacement(time_limit="00:10:00"), 1)
    assert "--signal" not in short  # under 20 minutes: the time limit ends it (TIMEOUT)


def test_the_page_preview_of_a_slurm_run_is_its_batch_script(tmp_path):
    board = RocBoard(tmp_path / "runs")
    preview = board.preview({**demo_form(), **SLURM, "slurm_nodes": 2, "slurm_time": "00:30:00"}, ask_llamafactory=False)
    assert preview.command.startswith("#!/bin/bash") and "#SBATCH --nodes=2" in preview.command and "#SBATCH --time=00:30:00" in preview.command
    assert "ddp_timeout" in preview.yaml_text  # two nodes: the plan's keys are in the YAML
    assert not has_problems(preview.findings)
    warned = board.preview({**demo_form(), **SLURM, "dist_nnodes": 3}, ask_llamafactory=False)
    finding = next(f for f in warned.findings if f.rule == "slurm-decides-nodes")
    assert finding.severity == "warning" and finding.patch == {"dist_nnodes": 1, "slurm_nodes": 3}
    # A value typed in a Multi-GPU field Slurm decides is not this run's problem.
    assert "node-rank-range" not in rules(board.preview({**demo_form(), **SLURM, "dist_node_rank": 5}, ask_llamafactory=False).findings)


def test_a_start_with_a_bad_slurm_value_creates_nothing(tmp_path):
    board = RocBoard(tmp_path / "runs")
    result = board.start({**demo_form(), **SLURM, "slurm_time": "soon"})
    assert not result.started and "slurm-time-format" in rules(result.findings)
    assert list((tmp_path / "runs").iterdir()) == []


def test_the_labels_of_where_it_runs_in_both_languages():
    from backend.view import run_on_choices

    assert [value for _, value in run_on_choices("zh-CN")] == list(schema.RUN_ON)
    assert run_on_choices("zh-CN") != run_on_choices("en")
    for form_field in schema.placement_fields():
        assert form_field.label_id in CATALOGUE["zh-CN"] and form_field.noun_id in CATALOGUE["zh-CN"]


def test_the_node_task_is_run_by_path_and_imports_nothing_heavy():
    source = Path(NODE_TASK).read_text()
    assert "import torch" not in source and "import llamafactory" not in source
