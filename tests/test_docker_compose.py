"""docker-compose.yml for AMD GPUs: the properties a ROCm container needs, checked without an engine.

`docker compose config` runs where a Compose tool is installed (it resolves the variables
and validates the file against the Compose schema); elsewhere that test is skipped.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from backend.security import AUTH_FILE_ENV, bind_refusal, resolve_credentials

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
CONTAINER_PORT = 7860


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def service(compose: dict) -> dict:
    assert list(compose["services"]) == ["rocboard"]
    return compose["services"]["rocboard"]


def default_of(reference: str) -> str:
    """"${NAME:-default}" -> "default"."""
    match = re.fullmatch(r"\$\{\w+:-(.+)\}", reference)
    assert match, f"{reference!r} is not a variable with a default"
    return match.group(1)


def size_bytes(text: str) -> int:
    match = re.fullmatch(r"(\d+)\s*([kmg]?)b?", str(text).strip().lower())
    assert match, text
    return int(match.group(1)) * {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[match.group(2)]


def test_built_on_rocm_pytorch_keeping_its_torch(service: dict) -> None:
    image = default_of(service["build"]["args"]["ROCM_PYTORCH_IMAGE"])
    assert re.fullmatch(r"rocm/pytorch:rocm[\d.]+_ubuntu[\d.]+_py3\.1[1-9]_pytorch_release_[\d.]+", image)
    dockerfile = DOCKERFILE.read_text(encoding="utf-8")
    # the Dockerfile's own default is the same image, and it is what FROM uses
    assert f"ARG ROCM_PYTORCH_IMAGE={image}" in dockerfile
    assert re.search(r"^FROM \$\{ROCM_PYTORCH_IMAGE\}$", dockerfile, re.MULTILINE)
    # requirements go on top under a constraint that pins the image's torch ...
    install = next(line for line in dockerfile.splitlines() if "pip install" in line)
    assert "-c /etc/rocboard-keep-torch.txt" in install and "-r /app/requirements.txt" in install
    # ... no step installs torch itself, and the build proves the ROCm build survived
    assert not re.search(r"pip install[^\n]*\btorch\b(?!\.)", dockerfile.replace("rocboard-keep-torch", ""))
    assert "assert torch.version.hip" in dockerfile


def test_gpu_devices_and_numeric_groups(service: dict) -> None:
    assert {"/dev/kfd", "/dev/dri"} <= set(service["devices"])
    groups = service["group_add"]
    assert len(groups) == 2
    # numbers from the host, never names (names do not resolve inside the container)
    assert re.fullmatch(r"\$\{VIDEO_GID:-\d+\}", groups[0])
    assert re.fullmatch(r"\$\{RENDER_GID:\?.*getent group render.*\}", groups[1])
    assert not {"video", "render"} & set(groups)


def test_rocm_container_settings(service: dict) -> None:
    assert "seccomp:unconfined" in service["security_opt"]
    assert service.get("ipc") == "host" or size_bytes(service["shm_size"]) >= 8 * 1024**3


def test_port_on_loopback_and_app_on_all_interfaces_with_a_login(compose: dict, service: dict, tmp_path: Path) -> None:
    for mapping in service["ports"]:
        match = re.fullmatch(r"([\d.]+):(\$\{\w+:-\d+\}|\d+):(\d+)", str(mapping))
        assert match, mapping
        assert match.group(1) == "127.0.0.1" and int(match.group(3)) == CONTAINER_PORT
    command = service["command"]
    assert command[command.index("--host") + 1] == "0.0.0.0"
    assert int(command[command.index("--port") + 1]) == CONTAINER_PORT
    # the login comes from a Compose secret that the app reads through its own variable
    secret_path = service["environment"][AUTH_FILE_ENV]
    secret_name = Path(secret_path).name
    assert secret_path == f"/run/secrets/{secret_name}"
    assert secret_name in service["secrets"] and secret_name in compose["secrets"]
    auth_file = str(Path(compose["secrets"][secret_name]["file"]))  # "./x" -> "x"
    assert auth_file in (ROOT / ".dockerignore").read_text(encoding="utf-8").split()  # never baked into the image
    # what the app does with exactly that: refuses 0.0.0.0 without the file, serves with it
    assert bind_refusal("0.0.0.0", resolve_credentials(None, None, env={})) is not None
    secret = tmp_path / secret_name
    secret.write_text("admin:s3cret\n", encoding="utf-8")
    credentials = resolve_credentials(None, None, env={AUTH_FILE_ENV: str(secret)})
    assert credentials is not None and bind_refusal("0.0.0.0", credentials) is None


def test_volumes_for_models_data_and_runs(service: dict) -> None:
    targets = {str(v).split(":")[1] for v in service["volumes"]}
    assert {"/models", "/data", "/runs"} <= targets
    command = service["command"]
    assert command[command.index("--runs-dir") + 1] == "/runs"


def test_gpu_variables_pass_through_only_when_set(service: dict) -> None:
    env = service["environment"]
    for name in ("HSA_OVERRIDE_GFX_VERSION", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        # a bare key: taken from the host if set there, absent otherwise (never an empty value)
        assert name in env and env[name] is None


def test_health_check_fetches_the_page(service: dict) -> None:
    check = service["healthcheck"]
    test = " ".join(check["test"])
    assert check["test"][0] == "CMD"
    assert f"http://127.0.0.1:{CONTAINER_PORT}/" in test
    assert "start_period" in check


def test_docs_give_the_commands() -> None:
    docs = (ROOT / "docs" / "docker.md").read_text(encoding="utf-8")
    for command in ("getent group video render", "docker compose up -d --build", "rocboard-auth.txt", "RENDER_GID"):
        assert command in docs


def compose_tool() -> list[str] | None:
    for tool in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(tool[0]) is None:
            continue
        try:
            done = subprocess.run([*tool, "version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return tool
    return None


@pytest.mark.skipif(compose_tool() is None, reason="no docker compose / docker-compose here")
def test_docker_compose_config_accepts_it(tmp_path: Path) -> None:
    project = tmp_path / "rocboard"
    project.mkdir()
    shutil.copy(COMPOSE, project / "docker-compose.yml")
    shutil.copy(DOCKERFILE, project / "Dockerfile")
    (project / "rocboard-auth.txt").write_text("admin:s3cret\n", encoding="utf-8")
    tool = compose_tool()
    assert tool is not None
    env = {k: v for k, v in os.environ.items() if not k.endswith("_GID")}
    done = subprocess.run([*tool, "config", "--format", "json"], cwd=project, capture_output=True, text=True,
                          timeout=60, env={**env, "RENDER_GID": "109"})
    assert done.returncode == 0, done.stderr
    resolved = json.loads(done.stdout)["services"]["rocboard"]
    assert [str(g) for g in resolved["group_add"]] == ["44", "109"]
    # without RENDER_GID, compose stops and says how to find it
    missing = subprocess.run([*tool, "config"], cwd=project, capture_output=True, text=True, timeout=60, env=env)
    assert missing.returncode != 0 and "getent group render" in missing.stderr


def test_dockerfile_constraints_pin_the_installed_torch(tmp_path: Path) -> None:
    """Run the Dockerfile's own constraint step here: it must name the torch that is installed,
    in a form pip accepts together with requirements.txt (offline: everything is installed)."""
    dockerfile = DOCKERFILE.read_text(encoding="utf-8")
    snippet = re.search(r'RUN python3 -c "(.+?)" > /etc/rocboard-keep-torch\.txt', dockerfile).group(1)
    # the shell passes the double-quoted text unchanged, so Python gets exactly these characters
    done = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    pins = dict(line.split("==") for line in done.stdout.split())
    assert pins["torch"] == importlib.metadata.version("torch")
    constraints = tmp_path / "keep-torch.txt"
    constraints.write_text(done.stdout, encoding="utf-8")
    check = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "-q", "-c", str(constraints),
         "-r", str(ROOT / "requirements.txt")],
        capture_output=True, text=True, timeout=240,
    )
    assert check.returncode == 0, check.stderr[-2000:]
