"""An AMD box's first hour in the doctor (issue 29 §3): a CUDA torch on an AMD box is named
with the command that replaces it (the same choice `make` makes: backend/doctor/torch_choice.py,
on simulated /sys, /dev and /opt/rocm trees), and the Slurm checks (`sinfo`, munge, the runs
folder on the nodes) against the tests' real two-node cluster and against a missing or
refusing one."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from backend.doctor import Check, MachineFacts, TorchFacts, blocking_problems, gather_facts, run_checks
from backend.doctor.slurm import SlurmFacts, gather_slurm, parse_sinfo_nodes, read_auth
from backend.doctor.torch_choice import Choice
from backend.i18n import Message as M
from backend.i18n import localized
from backend.slurm.client import SlurmClient
from tests.test_doctor import by_name, cpu_box, mi300x_node, rdna2_box
from tests.test_torch_choice import choose_on, machine

CUDA_TORCH = TorchFacts(version="2.14.1+cu130", cuda_version="13.0", arch_list=("sm_80",), device_error="RuntimeError: Found no NVIDIA driver on your system.")
PYTHON = "/home/ana/rocboard/.venv/bin/python"
ROCM72_COMMAND = f"{PYTHON} -m pip install --force-reinstall torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/rocm7.2"


def torch_box(tmp_path: Path, rocm: str | None, amd_smi: str | None = None, torch: TorchFacts = CUDA_TORCH) -> MachineFacts:
    """The RX 6700 XT desktop with `torch` and the torch choice its simulated /opt/rocm gives."""
    choice = choose_on(machine(tmp_path, "drm", rocm=rocm), amd_smi=amd_smi)
    return rdna2_box(torch=torch, torch_choice=choice, python=PYTHON)


# --- a CUDA torch on an AMD box ------------------------------------------------------------


def test_a_cuda_torch_on_an_amd_box_is_named_with_the_command_for_its_rocm(tmp_path: Path) -> None:
    checks = by_name(run_checks(torch_box(tmp_path, "7.2.0-43\n")))
    build, gpus = checks["torch build"], checks["GPUs visible to torch"]
    assert build.verdict == "problem" and "CUDA 13.0 build" in build.saw
    assert build.fix == f"Install torch built for this machine's ROCm 7.2.0-43 (from {tmp_path}/opt/rocm/.info/version) in place of this one: `{ROCM72_COMMAND}`"
    assert gpus.verdict == "problem" and gpus.fix == build.fix
    # in Chinese the same command, as written
    assert f"`{ROCM72_COMMAND}`" in localized(build.fix, "zh-CN") and "请为本机的 ROCm 7.2.0-43" in localized(build.fix, "zh-CN")


def test_torch_missing_on_an_amd_box_gets_the_same_command(tmp_path: Path) -> None:
    box = torch_box(tmp_path, None, amd_smi="AMDSMI Tool: 26.2.1+fc0010cf6a | AMDSMI Library version: 26.2.1 | ROCm version: 7.2.0 | amdgpu version: 6.16.13 | hsmp version: N/A\n",
                    torch=TorchFacts(import_error="ModuleNotFoundError: No module named 'torch'"))
    build = by_name(run_checks(box))["torch build"]
    assert build.verdict == "problem" and build.fix.endswith(f"(from amd-smi version) in place of this one: `{ROCM72_COMMAND}`")


def test_an_old_or_unknown_rocm_names_the_nearest_wheels_and_why(tmp_path: Path) -> None:
    old = by_name(run_checks(torch_box(tmp_path / "old", "6.4.1-120\n")))["torch build"]
    assert old.fix.startswith("ROCm 6.4.1-120 (from ") and "older than ROCm 7.2, the oldest torch 2.14.1 has wheels for: upgrade ROCm" in old.fix
    assert old.fix.endswith(f"`{ROCM72_COMMAND}`")
    unknown = by_name(run_checks(torch_box(tmp_path / "unknown", None)))["torch build"]
    assert unknown.fix.startswith("This machine's ROCm version could not be told") and f"then `{ROCM72_COMMAND}` (torch for ROCm 7.2)" in unknown.fix


def test_a_rocm_torch_or_a_machine_without_an_amd_gpu_needs_no_command(tmp_path: Path) -> None:
    rocm = by_name(run_checks(torch_box(tmp_path, "7.2.0\n", torch=rdna2_box().torch)))["torch build"]
    assert (rocm.verdict, rocm.fix) == ("ok", "")
    cpu = by_name(run_checks(cpu_box(torch_choice=choose_on(machine(tmp_path / "cpu", "")), python=PYTHON)))["torch build"]
    assert (cpu.verdict, cpu.fix) == ("ok", "")


def test_gather_facts_makes_the_same_choice_as_make_on_the_simulated_machine(tmp_path: Path) -> None:
    root = machine(tmp_path, "pci-accel", rocm="7.2.0\n")
    (root / "dev" / "kfd").touch()

    def probe() -> dict:
        return {"torch": {"version": "2.14.1+cu130", "cuda_version": "13.0", "arch_list": ["sm_80"], "gpus": []}}

    facts = gather_facts(sysfs_root=root / "sys", env={"PATH": "/nonexistent"}, probe=probe, dev_root=root / "dev", rocm_root=root / "opt" / "rocm")
    assert facts.torch_choice == Choice(
        ("torch==2.14.1", "torchvision==0.29.1", "--index-url", "https://download.pytorch.org/whl/rocm7.2"),
        f"ROCm 7.2.0 ({root}/opt/rocm/.info/version): torch 2.14.1 from https://download.pytorch.org/whl/rocm7.2.",
        "/sys/bus/pci/devices/0000:c1:00.0 (vendor 0x1002, class 0x120000)",
        "7.2.0",
        f"{root}/opt/rocm/.info/version",
        "https://download.pytorch.org/whl/rocm7.2",
    )
    assert facts.slurm == SlurmFacts(False)  # no Slurm on that PATH: not asked
    build = by_name(run_checks(facts))["torch build"]
    assert build.verdict == "problem" and "--index-url https://download.pytorch.org/whl/rocm7.2`" in build.fix


# --- Slurm: the verdicts --------------------------------------------------------------------

UP = SlurmFacts(True, "/etc/slurm/slurm.conf", "", (("n1", "idle"), ("n2", "mixed")), ("debug*", "short"), "", "/run/munge/munge.socket.2", "", True, "/srv/runs", "yes", "n1.cluster")


def slurm_checks(slurm: SlurmFacts) -> dict[str, Check]:
    return {name: check for name, check in by_name(run_checks(mi300x_node(slurm=slurm))).items() if check.needed_for == "slurm"}


def test_slurm_not_set_up_is_one_ok_line_and_nothing_is_asked() -> None:
    checks = slurm_checks(SlurmFacts(False))
    assert [(c.name, c.verdict) for c in checks.values()] == [("Slurm", "ok")]
    assert checks["Slurm"].saw.startswith("not set up here")


def test_a_working_cluster_says_what_it_saw() -> None:
    checks = slurm_checks(UP)
    assert {name: c.verdict for name, c in checks.items()} == {"Slurm": "ok", "munge (Slurm's authentication)": "ok", "runs folder on the Slurm nodes": "ok"}
    assert checks["Slurm"].saw == "`sinfo` answers: 2 node(s) (n1 idle, n2 mixed), partitions debug*, short"
    assert checks["munge (Slurm's authentication)"].saw == "`munge -n | unmunge` works on /run/munge/munge.socket.2"
    assert checks["runs folder on the Slurm nodes"].saw == "/srv/runs is shared: a job step on n1.cluster read back the file written here"


SLURM_FAILURES = [
    (replace(UP, sinfo_error="slurm_load_partitions: Unable to contact slurm controller (connect failure)", nodes=(), partitions=(), shared="skipped", shared_detail=M("doctor.shared.sinfo_failed")),
     "Slurm", "problem", "`sinfo` gave no answer (/etc/slurm/slurm.conf): slurm_load_partitions: Unable to contact slurm controller (connect failure)", "`scontrol ping`"),
    (replace(UP, nodes=()), "Slurm", "problem", "`sinfo` lists no node (/etc/slurm/slurm.conf)", "NodeName="),
    (replace(UP, nodes=(("n1", "down*"), ("n2", "drained"))), "Slurm", "problem", "no node takes jobs: n1 down*, n2 drained", "state=resume"),
    (replace(UP, nodes=(("n1", "idle*"),)), "Slurm", "problem", "no node takes jobs: n1 idle*", "Start slurmd"),
    (replace(UP, sinfo_error="x", munge_error='munge -n: munge: Error: Failed to access "/run/munge/munge.socket.2": No such file or directory'),
     "munge (Slurm's authentication)", "problem", "munge does not work on /run/munge/munge.socket.2: munge -n: munge: Error:", "systemctl start munge"),
    (replace(UP, munge_error="munge -n: not found on PATH"), "munge (Slurm's authentication)", "warning", "only munge's own commands failed", "munge package"),
    (replace(UP, auth="auth/slurm", munge_checked=False), "munge (Slurm's authentication)", "ok", "not used: slurm.conf sets AuthType=auth/slurm", ""),
    (replace(UP, shared="no", shared_node="n2", shared_detail="cat: /srv/runs/.rocboard-doctor-shared-1a2b3c4d: No such file or directory"),
     "runs folder on the Slurm nodes", "problem", "a job step on n2 cannot see /srv/runs: cat: /srv/runs/.rocboard-doctor-shared-1a2b3c4d: No such file", "`--runs-dir`"),
    (replace(UP, shared="unknown", shared_node="", shared_detail="srun: error: Unable to allocate resources: Immediate execution impossible"),
     "runs folder on the Slurm nodes", "warning", "could not be checked: srun: error: Unable to allocate resources", "srun --nodes=1 ls /srv/runs"),
]


@pytest.mark.parametrize(("slurm", "name", "verdict", "saw", "fix"), SLURM_FAILURES)
def test_each_slurm_failure_is_named_with_its_fix(slurm: SlurmFacts, name: str, verdict: str, saw: str, fix: str) -> None:
    check = slurm_checks(slurm)[name]
    assert check.verdict == verdict and saw in check.saw and fix in check.fix


def test_the_clusters_problems_block_a_slurm_run_and_the_doctor_not_a_local_run() -> None:
    down = replace(UP, sinfo_error="slurm_load_partitions: Unable to contact slurm controller (connect failure)")
    checks = run_checks(mi300x_node(slurm=down))
    assert blocking_problems(checks) == [] and blocking_problems(checks, use_cpu=True) == []  # beside a local Start
    assert [c.name for c in blocking_problems(checks, slurm=True)] == ["Slurm"]  # the doctor's exit status
    assert [c.name for c in blocking_problems(checks, use_cpu=True, slurm=True)] == ["Slurm"]


def test_sinfo_and_slurm_conf_are_read_as_they_are_written(tmp_path: Path) -> None:
    assert parse_sinfo_nodes("n1|debug*|idle\nn1|short|idle\nn2|debug*|mixed\n\nnoise\n") == ((("n1", "idle"), ("n2", "mixed")), ("debug*", "short"))
    conf = tmp_path / "slurm.conf"
    conf.write_text("# AuthType=auth/none\nauthtype=auth/munge  # the default\nAuthInfo=ttl=60,socket=/srv/munge/munge.socket\n")
    assert read_auth(conf) == ("auth/munge", "/srv/munge/munge.socket")
    assert read_auth(tmp_path / "missing.conf") == ("", "")


# --- Slurm: for real ----------------------------------------------------------------------------


def test_no_slurm_on_path_asks_nothing(tmp_path: Path) -> None:
    assert gather_slurm(tmp_path, env={"PATH": str(tmp_path)}) == SlurmFacts(False)


def test_a_refusing_controller_and_a_munged_that_is_not_running(tmp_path: Path) -> None:
    """The real sinfo and munge against a slurm.conf whose controller is not there (a closed
    port) and whose munge socket does not exist: bounded, named, and no job is tried."""
    if SlurmClient(env={"PATH": os.environ.get("PATH", ""), "SLURM_CONF": "/nonexistent"}).missing():
        pytest.skip("Slurm's client commands are not installed (Debian's slurm-wlm; .ci/run installs it)")
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=nowhere\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=1\nTCPTimeout=1\nMessageTimeout=1\n"
        f"AuthType=auth/munge\nAuthInfo=socket={tmp_path}/munge.socket\nNodeName=x1 CPUs=1 State=UNKNOWN\nPartitionName=debug Nodes=x1 Default=YES\n"
    )
    started = time.monotonic()
    slurm = gather_slurm(tmp_path, env={"PATH": os.environ.get("PATH", ""), "SLURM_CONF": str(conf)})
    assert time.monotonic() - started < 30
    assert slurm.configured and "Unable to contact slurm controller" in slurm.sinfo_error
    assert slurm.munge_checked and slurm.munge_socket == f"{tmp_path}/munge.socket" and "munge -n: " in slurm.munge_error
    assert (slurm.shared, slurm.shared_detail) == ("skipped", "the cluster does not answer (see Slurm above)")
    checks = slurm_checks(slurm)
    assert checks["Slurm"].verdict == "problem" and checks["munge (Slurm's authentication)"].verdict == "problem"
    assert list(tmp_path.glob(".rocboard-doctor-shared-*")) == []


def test_the_real_cluster_answers_authenticates_and_shares_the_runs_folder(slurm_cluster, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    client = SlurmClient(env={"PATH": os.environ.get("PATH", ""), **slurm_cluster.env()})
    started = time.monotonic()
    slurm = gather_slurm(runs, client=client)
    took = time.monotonic() - started
    assert slurm.configured and slurm.sinfo_error == "", slurm
    assert {node for node, _ in slurm.nodes} == {"n1", "n2"} and "debug*" in slurm.partitions
    assert slurm.munge_checked and slurm.munge_socket == str(slurm_cluster.socket) and slurm.munge_error == ""
    assert (slurm.shared, slurm.shared_detail) == ("yes", ""), slurm
    assert slurm.shared_node  # the node's host name came back with the token
    assert list(runs.iterdir()) == []  # the marker is gone
    assert {c.verdict for c in slurm_checks(slurm).values()} == {"ok"}
    assert took < 60
    # without a job (the app's background gather at start) nothing is submitted
    quiet = gather_slurm(runs, client=client, job=False)
    assert (quiet.shared, quiet.sinfo_error, quiet.munge_error) == ("skipped", "", "")


def every_state_box() -> list[MachineFacts]:
    """Machines that between them reach every message of this part: the torch commands and
    each Slurm verdict (tests/test_zh_no_english.py renders them in Chinese)."""
    import tempfile

    boxes: list[MachineFacts] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, rocm in (("found", "7.2.0\n"), ("old", "6.4.1\n"), ("unknown", None)):
            boxes.append(torch_box(Path(tmp) / name, rocm))
    states = [SlurmFacts(False), UP, replace(UP, nodes=()), replace(UP, nodes=(("n1", "down*"),)), replace(UP, auth="auth/slurm", munge_checked=False)]
    states += [failure[0] for failure in SLURM_FAILURES]
    states += [replace(UP, shared="skipped", shared_detail=M("doctor.shared." + why)) for why in ("no_srun", "sinfo_failed", "no_runs_folder", "on_request")]
    states += [replace(UP, shared="skipped", shared_detail=M("doctor.shared.no_runs_dir", runs_dir="/srv/runs"))]
    states += [replace(UP, shared="unknown", shared_detail=M("doctor.shared.cannot_write", path="/srv/runs/.rocboard-doctor-shared-1a2b3c4d", error="Permission denied"))]
    return boxes + [mi300x_node(slurm=slurm) for slurm in states]
