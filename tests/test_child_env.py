"""What reaches a child process's environment (backend/security/child_env.py), on real processes.

Two attacks this file reproduces, and the leak:
- the Multi-GPU tab's "RCCL settings" lines went into the trainer's environment, so with
  nodes = 2 on the CPU demo, `PYTHONWARNINGS=all:0:antigravity.x:0:0` plus
  `BROWSER=/bin/sh -c 'touch marker' #%s` ran a command at Start (Python imports the
  `antigravity` module to resolve the warning category, which opens a web browser, which is
  whatever BROWSER says); so did an uploaded sitecustomize.py plus PYTHONPATH=<its folder>;
- a preset file's `env:` went in the same way;
- every child inherited the whole environment of the web server, ROCBOARD_AUTH included.

Each attack is first shown to be live (the same variables on a bare `python -c pass` do
create the marker), then refused where RocBoard takes it in.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
import yaml

from backend.config.distributed import (
    DistributedPlan,
    check_plan,
    distributed_env,
    launch_env,
    node_commands,
    parse_plan_form,
    plan_for_preset,
    plan_to_form,
    slurm_launch_env,
)
from backend.config.presets import PRESETS_DIR, load_presets
from backend.findings import translate_finding
from backend.runs import LOG_FILE, RunStore
from backend.runs.launcher import OFFLINE_ENV, TRAINER_SITE, trainer_env
from backend.runs.queue import launch_file
from backend.security import child_env as rules
from backend.security.child_env import (
    child_env,
    env_refusal,
    inherited_env,
    is_secret_name,
    refusal,
)
from tests.harness import wait_for

ROOT = Path(__file__).resolve().parent.parent
SECRET_VALUE = "hunter2-s3cret-value"
# What the web server's own environment may hold that no child may see.
SECRETS = {
    "ROCBOARD_AUTH": f"admin:{SECRET_VALUE}",
    "ROCBOARD_AUTH_FILE": "/run/secrets/rocboard_auth",
    "MY_SECRET": SECRET_VALUE,
    "HF_TOKEN": SECRET_VALUE,
    "HUGGING_FACE_HUB_TOKEN": SECRET_VALUE,
    "AWS_SECRET_ACCESS_KEY": SECRET_VALUE,
    "NCCL_API_KEY": SECRET_VALUE,  # an allowed prefix does not make a secret inheritable
    "GRADIO_SERVER_NAME": "0.0.0.0",
}


def browser_attack(marker: Path) -> str:
    return f"PYTHONWARNINGS=all:0:antigravity.x:0:0\nBROWSER=/bin/sh -c 'touch {marker}' #%s"


def sitecustomize_attack(upload_dir: Path, marker: Path) -> str:
    upload_dir.mkdir(parents=True, exist_ok=True)
    (upload_dir / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    return f"PYTHONPATH={upload_dir}"


def env_of_lines(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


@contextmanager
def started_processes() -> Iterator[list[tuple[list[str], dict[str, str] | None]]]:
    """(argv, env) of every process this one starts inside the block (env None: inherited)."""
    import subprocess

    started: list[tuple[list[str], dict[str, str] | None]] = []
    execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]  # CPython's private hook, not in typeshed

    def recording(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, *rest, **kwargs):
        started.append(([os.fsdecode(a) for a in args] if isinstance(args, (list, tuple)) else [os.fsdecode(args)], None if env is None else {os.fsdecode(k): os.fsdecode(v) for k, v in env.items()}))
        return execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, *rest, **kwargs)

    subprocess.Popen._execute_child = recording  # type: ignore[attr-defined]  # CPython's private hook, not in typeshed
    try:
        yield started
    finally:
        subprocess.Popen._execute_child = execute_child  # type: ignore[attr-defined]  # CPython's private hook, not in typeshed


def run_bare_python(env_lines: str) -> None:
    """`python -c pass` with the lines as its environment: what the trainer would have got."""
    import subprocess

    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), **env_of_lines(env_lines)}
    subprocess.run([sys.executable, "-c", "pass"], env=env, capture_output=True, timeout=60, check=False)


# --- the rule itself ------------------------------------------------------------------------

HOSTILE_NAMES = [
    ("PYTHONWARNINGS", "all:0:antigravity.x:0:0"),
    ("BROWSER", "/bin/sh -c 'touch /tmp/pwned' #%s"),
    ("PYTHONPATH", "/tmp/uploads"),
    ("PYTHONSTARTUP", "/tmp/uploads/x.py"),
    ("PYTHONHOME", "/tmp/uploads"),
    ("PYTHONINSPECT", "1"),
    ("LD_PRELOAD", "/tmp/uploads/x.so"),
    ("LD_LIBRARY_PATH", "/tmp/uploads"),
    ("LD_AUDIT", "/tmp/uploads/x.so"),
    ("PATH", "/tmp/uploads"),
    ("EDITOR", "sh -c 'touch /tmp/pwned'"),
    ("BASH_ENV", "/tmp/uploads/x.sh"),
    ("ENV", "/tmp/uploads/x.sh"),
    ("TORCH_EXTENSIONS_DIR", "/tmp/uploads"),  # compiled extensions are loaded from there
    ("TRITON_CACHE_DIR", "/tmp/uploads"),
    ("HF_HOME", "/tmp/uploads"),
    ("LLAMABOARD_WORKDIR", "/etc"),
    ("ROCBOARD_AUTH", "admin:x"),
    ("HF_TOKEN", "hf_x"),
    # Allowed prefixes, but the value is a library to dlopen() or a file to read/write:
    ("NCCL_NET_PLUGIN", "/tmp/uploads/libnccl-net.so"),
    ("NCCL_TUNER_PLUGIN", "/tmp/uploads/x.so"),
    ("NCCL_PROFILER_PLUGIN", "/tmp/uploads/x.so"),
    ("NCCL_DEBUG_FILE", "/home/user/.bashrc"),
    ("NCCL_CONF_FILE", "/tmp/uploads/nccl.conf"),
    ("NCCL_TOPO_DUMP_FILE", "/home/user/.profile"),
    ("HSA_TOOLS_LIB", "/tmp/uploads/x.so"),
    ("OMP_TOOL_LIBRARIES", "/tmp/uploads/x.so"),
    ("MIOPEN_USER_DB_PATH", "/tmp/uploads"),
    ("MIOPEN_CUSTOM_CACHE_DIR", "/tmp/uploads"),
    ("HIP_PATH", "/tmp/uploads"),
    ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/home/user/.bashrc"),
    ("NCCL_SECRET", "x"),
    ("nccl_debug", "INFO"),  # RCCL reads upper case only; nothing else is a setting
]

HOSTILE_VALUES = [
    ("NCCL_DEBUG", "INFO\nPYTHONPATH=/tmp/uploads", "bad-env-value"),
    ("NCCL_DEBUG", "INFO\rX", "bad-env-value"),
    ("NCCL_DEBUG", "INFO\u2028X", "bad-env-value"),
    ("NCCL_DEBUG", "INFO\x00X", "env-value-control"),
    ("NCCL_DEBUG", "INFO\x1b[2J", "env-value-control"),
    ("NCCL_DEBUG", "INFO\tX", "env-value-control"),
    ("NCCL_DEBUG", "I" * (rules.MAX_VALUE_LENGTH + 1), "env-value-too-long"),
]

ALLOWED = [
    ("NCCL_DEBUG", "INFO"),
    ("NCCL_DEBUG_SUBSYS", "INIT,NET"),
    ("NCCL_SOCKET_IFNAME", "ens50f0"),
    ("NCCL_IB_DISABLE", "1"),
    ("NCCL_P2P_DIRECT_DISABLE", "1"),
    ("RCCL_MSCCL_ENABLE", "0"),
    ("GLOO_SOCKET_IFNAME", "ens50f0"),
    ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    ("HSA_OVERRIDE_GFX_VERSION", "11.0.0"),
    ("HSA_FORCE_FINE_GRAIN_PCIE", "1"),
    ("HIP_FORCE_DEV_KERNARG", "1"),
    ("ROCR_VISIBLE_DEVICES", "0,1"),
    ("MIOPEN_FIND_MODE", "FAST"),
    ("OMP_NUM_THREADS", "1"),
    ("PYTORCH_HIP_ALLOC_CONF", "expandable_segments:True"),
    ("TORCH_BLAS_PREFER_HIPBLASLT", "1"),
    ("TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL", "1"),
    ("TORCH_DISTRIBUTED_DEBUG", "DETAIL"),
    ("NCCL_DEBUG", "I" * rules.MAX_VALUE_LENGTH),
]


@pytest.mark.hostile
@pytest.mark.parametrize("name, value", HOSTILE_NAMES, ids=[n for n, _ in HOSTILE_NAMES])
def test_a_name_that_can_run_code_or_leak_is_refused(name: str, value: str) -> None:
    found = refusal(name, value)
    assert found is not None and found.rule in ("env-not-settable", "env-names-location", "env-secret")
    assert env_refusal(name, value) == found.problem and name in found.problem


@pytest.mark.hostile
@pytest.mark.parametrize("name, value, rule", HOSTILE_VALUES, ids=["newline", "cr", "u2028", "nul", "escape", "tab", "too-long"])
def test_a_value_that_is_not_one_short_line_of_text_is_refused(name: str, value: str, rule: str) -> None:
    found = refusal(name, value)
    assert found is not None and found.rule == rule


@pytest.mark.parametrize("name, value", ALLOWED, ids=[f"{n}={v[:12]}" for n, v in ALLOWED])
def test_the_tuning_knobs_of_rccl_rocm_and_openmp_pass(name: str, value: str) -> None:
    assert env_refusal(name, value) is None


def test_every_shipped_preset_and_its_plan_pass_the_rule() -> None:
    presets, errors = load_presets()
    assert errors == []
    for preset in presets.values():
        assert [n for n, v in preset.env if env_refusal(n, v)] == [], preset.id
        assert [f.line() for f in check_plan(plan_for_preset(preset)) if f.severity == "problem"] == [], preset.id
    assert ("OMP_NUM_THREADS", "1") in presets["cpu-demo"].env
    assert ("HSA_OVERRIDE_GFX_VERSION", "11.0.0") in presets["rx7800xt"].env


def test_secret_names() -> None:
    for name in ("ROCBOARD_AUTH", "ROCBOARD_AUTH_FILE", "HF_TOKEN", "HFTOKEN", "API_KEY", "APIKEY", "MY_SECRET", "DB_PASSWORD", "SMTP_PASS", "GH_PAT", "AWS_SECRET_ACCESS_KEY"):
        assert is_secret_name(name), name
    for name in ("TOKENIZERS_PARALLELISM", "HF_HOME", "NCCL_DEBUG", "BYPASS_X", "PATH", "OMP_NUM_THREADS"):
        assert not is_secret_name(name), name


def test_a_child_inherits_the_allow_list_only() -> None:
    base = {
        **SECRETS,
        "PATH": "/usr/bin:/bin",
        "HOME": "/home/u",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HF_HOME": "/data/hf",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "LD_LIBRARY_PATH": "/opt/rocm/lib",
        "HSA_OVERRIDE_GFX_VERSION": "11.0.0",
        "ROCR_VISIBLE_DEVICES": "1",
        "NCCL_NET_PLUGIN": "/opt/aws-ofi-rccl/lib/librccl-net.so",  # the operator's cluster plugin
        "OMP_NUM_THREADS": "4",
        "PYTHONPATH": "/somewhere",
        "PYTHONWARNINGS": "all:0:antigravity.x:0:0",
        "BROWSER": "/bin/sh -c 'touch x' #%s",
        "LD_PRELOAD": "/x.so",
        "http_proxy": "http://user:pw@proxy:3128",
        "ROCBOARD_RUNS_DIR": "/runs",
        "TERM": "xterm",
    }
    env = inherited_env(base)
    assert set(env) == {
        "PATH", "HOME", "LANG", "LC_ALL", "HF_HOME", "HF_HUB_OFFLINE", "TOKENIZERS_PARALLELISM", "LD_LIBRARY_PATH",
        "HSA_OVERRIDE_GFX_VERSION", "ROCR_VISIBLE_DEVICES", "NCCL_NET_PLUGIN", "OMP_NUM_THREADS",
    }  # fmt: skip
    # A user's settings override what is inherited; refused ones are dropped; RocBoard's own win.
    built = child_env(base, [("OMP_NUM_THREADS", "1"), ("LD_PRELOAD", "/evil.so")], {"PATH": "/venv/bin:/usr/bin", "HF_TOKEN": "x"})
    assert built["OMP_NUM_THREADS"] == "1" and built["PATH"] == "/venv/bin:/usr/bin"
    assert "LD_PRELOAD" not in built and "HF_TOKEN" not in built


def test_each_refusal_reads_in_chinese_with_its_values() -> None:
    cases = HOSTILE_NAMES + [(n, v) for n, v, _ in HOSTILE_VALUES] + [("N" * 200, "1")]
    seen = set()
    for name, value in cases:
        found = refusal(name, value)
        finding = translate_finding(found.finding("rccl_env"), "zh-CN")
        assert finding.problem != found.problem and finding.fix != found.fix, found
        if found.rule not in ("bad-env-name", "env-name-too-long"):
            assert name in finding.problem
        seen.add(found.rule)
    assert seen >= {"env-not-settable", "env-names-location", "env-secret", "bad-env-value", "env-value-control", "env-value-too-long", "env-name-too-long"}


# --- the RCCL settings lines of the Multi-GPU tab -----------------------------------------------


@pytest.mark.hostile
@pytest.mark.parametrize(
    "lines, names",
    [
        ("PYTHONWARNINGS=all:0:antigravity.x:0:0\nBROWSER=/bin/sh -c 'touch /tmp/pwned' #%s", {"PYTHONWARNINGS", "BROWSER"}),
        ("NCCL_DEBUG=INFO\nPYTHONPATH=/tmp/uploads", {"PYTHONPATH"}),
        ("LD_PRELOAD=/tmp/uploads/x.so", {"LD_PRELOAD"}),
        ("PATH=/tmp/uploads:/usr/bin", {"PATH"}),
        ("HSA_TOOLS_LIB=/tmp/uploads/x.so", {"HSA_TOOLS_LIB"}),
    ],
    ids=["browser", "pythonpath", "ld-preload", "path", "hsa-tools-lib"],
)
def test_hostile_rccl_lines_are_problems_and_never_exported(lines: str, names: set[str]) -> None:
    form = {**plan_to_form(DistributedPlan(on_cpu=True, nproc=1, nnodes=2)), "dist_rccl_env": lines}
    plan, findings = parse_plan_form(form, on_cpu=True)
    refused = {f.problem.split()[0] for f in findings if f.key == "rccl_env" and f.severity == "problem"}
    assert refused == names
    # A plan that skipped the check (resumed from an older form.json) still exports none of them.
    for env in (distributed_env(plan), launch_env(plan, inherited_path="/usr/bin")):
        assert set(env) & (names - {"PATH"}) == set()
    assert launch_env(plan, inherited_path="/usr/bin")["PATH"].endswith(":/usr/bin")
    shown = "\n".join(node_commands(plan, "/runs/x/config.yaml")) + launch_file(slurm_launch_env(plan))
    assert all(f"{name}=" not in shown for name in names)


def test_allowed_rccl_lines_pass_and_are_exported_in_order() -> None:
    lines = "NCCL_DEBUG=INFO\nHSA_OVERRIDE_GFX_VERSION=11.0.0\nOMP_NUM_THREADS=1\nNCCL_SOCKET_IFNAME=eth0"
    form = {**plan_to_form(DistributedPlan(on_cpu=True, nproc=2)), "dist_rccl_env": lines}
    plan, findings = parse_plan_form(form, on_cpu=True)
    assert [f for f in findings if f.severity == "problem"] == []
    env = distributed_env(plan)
    assert [(k, env[k]) for k in ("NCCL_DEBUG", "HSA_OVERRIDE_GFX_VERSION", "OMP_NUM_THREADS", "NCCL_SOCKET_IFNAME")] == [
        ("NCCL_DEBUG", "INFO"), ("HSA_OVERRIDE_GFX_VERSION", "11.0.0"), ("OMP_NUM_THREADS", "1"), ("NCCL_SOCKET_IFNAME", "eth0"),
    ]  # fmt: skip


def test_a_plan_variable_in_the_rccl_lines_never_overrides_the_plan() -> None:
    plan = DistributedPlan(on_cpu=True, nproc=2, rccl_env=(("NNODES", "9"), ("HIP_VISIBLE_DEVICES", "7")))
    assert {f.rule for f in check_plan(plan)} == {"env-overrides-plan"}
    env = distributed_env(plan)
    assert env["NNODES"] == "1" and "HIP_VISIBLE_DEVICES" not in env


@pytest.fixture
def board(tmp_path: Path, demo_assets):
    from backend.service import RocBoard

    return RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports")


@pytest.mark.hostile
@pytest.mark.timeout(120)
@pytest.mark.parametrize("attack", ["browser", "sitecustomize", "ld-preload-and-path"])
@pytest.mark.parametrize("spread", [{"dist_nnodes": 2}, {"dist_nproc": 2}], ids=["two-nodes", "two-processes"])
def test_start_with_hostile_rccl_lines_refuses_and_runs_nothing(board, tmp_path: Path, attack: str, spread: dict) -> None:
    from backend.service import demo_form

    marker = tmp_path / "pwned"
    if attack == "browser":
        lines = browser_attack(marker)
        expected = {"PYTHONWARNINGS", "BROWSER"}
    elif attack == "sitecustomize":
        lines = sitecustomize_attack(tmp_path / "uploads", marker)
        expected = {"PYTHONPATH"}
    else:
        (tmp_path / "uploads").mkdir()
        lines = f"LD_PRELOAD={tmp_path / 'uploads' / 'x.so'}\nPATH={tmp_path / 'uploads'}"
        expected = {"LD_PRELOAD", "PATH"}
    if attack != "ld-preload-and-path":
        # The payload is live: on a bare python, these variables do create the marker.
        run_bare_python(lines)
        assert wait_for(marker.exists, timeout=10), "the attack no longer works on this Python; pick another payload"
        marker.unlink()

    form = {**demo_form(), **plan_to_form(DistributedPlan(on_cpu=True)), **spread, "dist_master_addr": "127.0.0.1", "dist_rccl_env": lines}
    runs_before = sorted(p.name for p in board.store.root.iterdir())
    with started_processes() as started:
        result = board.start(form)
    assert not result.started
    refused = {f.problem.split()[0] for f in result.findings if f.rule in ("env-not-settable", "env-names-location", "env-secret")}
    assert refused == expected, [f.line() for f in result.findings]
    assert board.store.list() == [] and sorted(p.name for p in board.store.root.iterdir()) == runs_before
    # Whatever the start ran (a check, say) got none of the lines: nothing can touch the marker later.
    attack_env = env_of_lines(lines).items()
    assert [argv for argv, env in started if env is not None and attack_env & env.items()] == []
    assert not marker.exists()
    # The same form without the hostile lines would start (nothing else was wrong with it).
    _, findings, _ = board.parse({**form, "dist_rccl_env": "NCCL_DEBUG=INFO\nOMP_NUM_THREADS=1"})
    assert [f.line() for f in findings if f.severity == "problem"] == []


# --- presets ------------------------------------------------------------------------------------

PRESET_BASE = (PRESETS_DIR / "cpu-demo.yaml").read_text(encoding="utf-8")


def preset_with_env(env: dict) -> str:
    data = yaml.safe_load(PRESET_BASE)
    data["env"] = env
    data["display_name"] = "Hostile"
    return yaml.safe_dump(data)


@pytest.mark.hostile
@pytest.mark.parametrize(
    "env, name",
    [
        ({"LD_PRELOAD": "x"}, "LD_PRELOAD"),
        ({"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "all:0:antigravity.x:0:0", "BROWSER": "sh -c 'touch x' #%s"}, "PYTHONWARNINGS"),
        ({"PYTHONPATH": "/tmp/uploads"}, "PYTHONPATH"),
        ({"NCCL_NET_PLUGIN": "/tmp/uploads/x.so"}, "NCCL_NET_PLUGIN"),
        ({"NCCL_DEBUG": "INFO\nLD_PRELOAD=/x.so"}, "NCCL_DEBUG"),
        ({"HF_TOKEN": "hf_x"}, "HF_TOKEN"),
    ],
    ids=["ld-preload", "browser", "pythonpath", "nccl-plugin", "multi-line-value", "token"],
)
def test_a_preset_file_with_a_refused_env_entry_is_skipped_by_name(tmp_path: Path, env: dict, name: str, demo_assets) -> None:
    from backend.service import RocBoard, demo_form

    presets_dir = tmp_path / "presets"
    presets_dir.mkdir()
    shutil.copy(PRESETS_DIR / "cpu-demo.yaml", presets_dir)
    (presets_dir / "evil.yaml").write_text(preset_with_env(env), encoding="utf-8")
    presets, errors = load_presets(presets_dir)
    assert set(presets) == {"cpu-demo"}
    assert [e.file for e in errors] == ["evil.yaml"] and name in errors[0].problem
    board = RocBoard(tmp_path / "runs", presets_dir=presets_dir, export_dir=tmp_path / "exports")
    assert [e.file for e in board.preset_errors] == ["evil.yaml"]
    result = board.start({**demo_form(), "preset": "evil"})
    assert not result.started and "unknown-preset" in {f.rule for f in result.findings}


def test_a_preset_with_allowed_env_entries_loads(tmp_path: Path) -> None:
    (tmp_path / "ok.yaml").write_text(
        preset_with_env({"OMP_NUM_THREADS": 1, "HSA_OVERRIDE_GFX_VERSION": "11.0.0", "NCCL_DEBUG": "INFO", "PYTORCH_HIP_ALLOC_CONF": "expandable_segments:True"}),
        encoding="utf-8",
    )
    presets, errors = load_presets(tmp_path)
    assert errors == [] and ("OMP_NUM_THREADS", "1") in presets["ok"].env


# --- what a real child sees ---------------------------------------------------------------------


@pytest.fixture
def secret_environment(monkeypatch):
    """The web server's environment with a login and made-up secrets in it."""
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PYTHONWARNINGS", "ignore")  # harmless here, but never the child's
    return SECRETS


def no_secret_in(env: dict[str, str]) -> list[str]:
    return sorted(name for name, value in env.items() if name in SECRETS or SECRET_VALUE in value)


def new_run(store: RunStore, name: str = "probe") -> str:
    store.ensure_root()
    return store.create(name=name, preset="cpu-demo", model="m", files={LOG_FILE: ""}).id


@pytest.mark.timeout(60)
def test_the_trainers_proc_environ_holds_no_secret_and_keeps_what_training_needs(launcher, tmp_path: Path, secret_environment) -> None:
    run_id = new_run(launcher.store)
    settings = {"OMP_NUM_THREADS": "1", "HSA_OVERRIDE_GFX_VERSION": "11.0.0", **launch_env(DistributedPlan(on_cpu=True, nproc=2))}
    state = launcher.start(run_id, settings, command=[sys.executable, "-c", "import time; time.sleep(60)"])
    # Read from /proc/<pid>/environ; just after exec() the kernel may not have it filled in yet.
    environ = wait_for(lambda: (seen := psutil.Process(state.pid).environ()) and "PATH" in seen and seen, timeout=10)
    launcher.stop(run_id)
    assert no_secret_in(environ) == []
    assert not any(name.startswith(("GRADIO_", "ROCBOARD_", "PYTHONWARNINGS")) for name in environ)
    # A CPU plan of several processes: RocBoard's own trainer_site folder, and nothing else
    # (it lets transformers resume such a run: backend/runs/trainer_site/sitecustomize.py).
    assert environ["PYTHONPATH"] == str(TRAINER_SITE)
    assert environ["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)  # the venv's torchrun first
    assert {k: environ[k] for k in OFFLINE_ENV} == OFFLINE_ENV
    assert (environ["OMP_NUM_THREADS"], environ["HSA_OVERRIDE_GFX_VERSION"], environ["FORCE_TORCHRUN"], environ["NPROC_PER_NODE"]) == ("1", "11.0.0", "1", "2")
    assert environ["HOME"] == os.environ["HOME"]


@pytest.mark.hostile
@pytest.mark.timeout(60)
def test_a_refused_setting_that_reaches_the_launcher_is_left_out_and_logged(launcher, tmp_path: Path) -> None:
    # As a run resumed from a form.json written before the check would hand it over.
    marker = tmp_path / "pwned"
    hostile = env_of_lines(browser_attack(marker)) | {"PYTHONPATH": str(tmp_path), "LD_PRELOAD": str(tmp_path / "x.so")}
    sitecustomize_attack(tmp_path, marker)
    run_id = new_run(launcher.store)
    with started_processes() as started:
        launcher.start(run_id, {**hostile, "NCCL_DEBUG": "INFO"}, command=[sys.executable, "-c", "import os; print('child', os.environ['NCCL_DEBUG'])"])
    assert wait_for(lambda: launcher.store.read(run_id).state == "finished", timeout=30)
    # The child got none of it (so no grandchild of its, a browser say, can touch the marker later).
    assert started and [argv for argv, env in started if env is not None and hostile.items() & env.items()] == []
    assert not marker.exists()
    log = (launcher.store.run_dir(run_id) / LOG_FILE).read_text()
    assert "child INFO" in log
    for name in hostile:
        assert f"{name} cannot be set here" in log
    assert {"PYTHONWARNINGS", "BROWSER", "PYTHONPATH", "LD_PRELOAD"}.isdisjoint(trainer_env(tmp_path, hostile))


def write_env_dumper(path: Path, dump: Path) -> Path:
    """A stand-in executable that writes its environment to `dump` as JSON."""
    path.write_text(
        "#!/bin/sh\n"
        f"exec {sys.executable} -c 'import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], \"w\"))' {dump}\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_telemetry_tools_see_no_secret(tmp_path: Path, secret_environment) -> None:
    from backend.telemetry.tool import run_tool

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    dump = tmp_path / "env.json"
    write_env_dumper(bin_dir / "rocm-smi", dump)
    output = run_tool(["rocm-smi"], 30.0, {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "HIP_VISIBLE_DEVICES": "1"})
    assert output.ran, output
    seen = json.loads(dump.read_text())
    assert no_secret_in(seen) == [] and seen["HIP_VISIBLE_DEVICES"] == "1"
    # Without an environment of its own, the tool gets the allow-listed part of the server's.
    run_tool([str(bin_dir / "rocm-smi")], 30.0)
    assert no_secret_in(json.loads(dump.read_text())) == []


def test_the_doctor_probe_sees_no_secret(tmp_path: Path, secret_environment) -> None:
    from backend.doctor import run_probe

    dump = tmp_path / "env.json"
    fake_python = write_env_dumper(tmp_path / "python", dump)
    run_probe(python=str(fake_python), timeout_s=30)
    seen = json.loads(dump.read_text())
    assert no_secret_in(seen) == [] and seen["PATH"] == os.environ["PATH"]


def test_the_llamafactory_check_helper_sees_no_secret(tmp_path: Path, secret_environment, monkeypatch) -> None:
    from backend.llama_factory import check as lf_check

    dump = tmp_path / "env.json"
    worker = tmp_path / "worker.py"
    worker.write_text(
        textwrap.dedent(
            f"""
            import json, os
            json.dump(dict(os.environ), open({str(dump)!r}, "w"))
            print(json.dumps({{"ok": False, "error": {{"type": "Stand-in", "message": "no llamafactory here"}}}}))
            """
        )
    )
    monkeypatch.setattr(lf_check, "WORKER", worker)
    findings = lf_check.check_with_llamafactory({"stage": "sft"}, timeout_s=60)
    assert findings and findings[0].rule == "lf-import-failed"
    assert no_secret_in(json.loads(dump.read_text())) == []
