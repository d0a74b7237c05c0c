"""Safe by default, tested against the real thing.

- The listen address: loopback unless a login is configured; the refusal and the login are
  checked on real `python app.py` processes, the password never appears in what they print.
- Paths: Gradio's file route and the other path-taking routes serve nothing outside what the
  app returned (traversal, encodings, symlinks planted in a run directory); every backend
  call that takes a run id refuses ids that could leave the runs directory.
- Data is data: a model path full of shell syntax is only ever a path; YAML is read safely,
  with a size limit, and garbage gets a clear message.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import yaml

from backend.runs import RunNotFound, RunState
from backend.runs.artifacts import build_adapter_zip, has_adapter
from backend.security import AuthError, Credentials, bind_refusal, resolve_credentials
from tests import tiers
from tests.harness import ROOT, AppServer, free_port, http_get, kill_tree, trainer_process, wait_until
from tests.tiers import starts

USER = "rocboard-tester"
PASSWORD = "Pw-9f3c-Zq81-never-printed"
SECRET = "SECRET-OUTSIDE-MARKER-5d1e"  # the content of a file outside every allowed place
PLANTED_RUN = "20250101-000000-planted"
NOT_SERVED = (403, 404)


# --- the listen address ----------------------------------------------------------------------


def run_app(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python app.py ARGS` to its end (it must end by itself: a refusal never listens, so the
    fast tier lets it start)."""
    environment = {k: v for k, v in os.environ.items() if k not in ("ROCBOARD_AUTH", "ROCBOARD_AUTH_FILE")}
    environment.update(GRADIO_ANALYTICS_ENABLED="False", **(env or {}))
    with tiers.let_through("an app.py that must refuse to start"):
        return subprocess.run([sys.executable, str(ROOT / "app.py"), *args], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=timeout)


@pytest.mark.hostile
@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "rocboard.example.com"])
def test_a_reachable_address_without_login_is_refused(tmp_path: Path, host: str) -> None:
    port = free_port()
    result = run_app("--host", host, "--port", str(port), "--runs-dir", str(tmp_path / "runs"))
    assert result.returncode == 2
    assert f"Refusing to listen on {host}" in result.stderr
    assert "--auth" in result.stderr  # the message says how to fix it
    assert not (tmp_path / "runs").exists()  # it stopped before doing anything


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--auth", "only-a-Secret-word"], {}, "--auth must read USER:PASSWORD"),
        (["--auth", "user:"], {}, "--auth must read USER:PASSWORD"),
        ([], {"ROCBOARD_AUTH": "Secret-without-user"}, "$ROCBOARD_AUTH must read USER:PASSWORD"),
        (["--auth-file", "/nonexistent/Secret-file"], {}, "cannot read the auth file"),
    ],
)
@pytest.mark.hostile
def test_a_malformed_login_is_refused_without_echoing_it(tmp_path: Path, args, env, expected) -> None:
    result = run_app("--host", "0.0.0.0", "--port", str(free_port()), "--runs-dir", str(tmp_path / "runs"), *args, env=env)
    assert result.returncode == 2
    assert expected in result.stderr
    printed = result.stdout + result.stderr
    assert "Secret-word" not in printed and "Secret-without-user" not in printed


def test_credentials_come_from_the_flag_then_the_file_then_the_environment(tmp_path: Path) -> None:
    auth_file = tmp_path / "auth"
    auth_file.write_text("fileuser:filepass\n")
    env = {"ROCBOARD_AUTH": "envuser:envpass", "ROCBOARD_AUTH_FILE": str(auth_file)}
    assert resolve_credentials("flaguser:flagpass", None, env) == Credentials("flaguser", "flagpass")
    assert resolve_credentials(None, str(auth_file), {}) == Credentials("fileuser", "filepass")
    assert resolve_credentials(None, None, env) == Credentials("fileuser", "filepass")
    assert resolve_credentials(None, None, {"ROCBOARD_AUTH": "envuser:envpass"}) == Credentials("envuser", "envpass")
    assert resolve_credentials(None, None, {}) is None
    assert resolve_credentials("u:pa:ss", None, {}) == Credentials("u", "pa:ss")  # a colon in a password is kept
    with pytest.raises(AuthError):
        resolve_credentials(None, str(tmp_path / "missing"), {})
    assert "flagpass" not in repr(Credentials("u", "flagpass")) and "flagpass" not in str(Credentials("u", "flagpass"))


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "[::1]", "127.8.9.10"])
def test_loopback_needs_no_login(host: str) -> None:
    assert bind_refusal(host, None) is None


def test_a_reachable_address_with_a_login_is_allowed() -> None:
    assert bind_refusal("0.0.0.0", Credentials("u", "p")) is None
    assert bind_refusal("0.0.0.0", None)


def test_the_default_address_is_loopback_and_no_share_link() -> None:
    from ui.serve import parse_args

    args = parse_args([])
    assert args.host == "127.0.0.1"
    assert args.share is False


# --- a real server on 0.0.0.0 with a login ---------------------------------------------------


def plant_run(runs_dir: Path, outside: Path) -> Path:
    """A finished run, written as the app writes runs, with symlinks planted pointing outside."""
    run_dir = runs_dir / PLANTED_RUN
    output = run_dir / "output"
    output.mkdir(parents=True)
    state = RunState(id=PLANTED_RUN, name="planted", created="2025-01-01T00:00:00+00:00", preset="cpu-demo", model="/nowhere", state="finished", exit_code=0)
    (run_dir / "state.json").write_text(json.dumps(state.to_json()))
    (run_dir / "config.yaml").write_text("model_name_or_path: /nowhere\n# SECRET-CONFIG-MARKER\n")
    (run_dir / "train.log").write_text("SECRET-LOG-MARKER\n")
    (run_dir / "form.json").write_text("{}")
    (output / "adapter_model.safetensors").write_bytes(b"\0" * 64)
    (output / "adapter_config.json").write_text('{"peft_type": "LORA"}')
    (output / "trainer_log.jsonl").write_text(json.dumps({"current_steps": 1, "total_steps": 1, "loss": 1.0, "percentage": 100.0}) + "\n")
    (output / "tokenizer.json").symlink_to(outside / "secret.txt")  # must never be packed or served
    (output / "escape").symlink_to(outside)  # a directory link out of the run
    return run_dir


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("outside")
    (directory / "secret.txt").write_text(SECRET)
    return directory


@pytest.fixture(scope="module")
def guarded_server(tmp_path_factory, outside, demo_assets, starts_app_server):
    """`--host 0.0.0.0` with the login in a file; GRADIO_SHARE set, which must not matter."""
    workdir = tmp_path_factory.mktemp("guarded")
    auth_file = workdir / "auth"
    auth_file.write_text(f"{USER}:{PASSWORD}\n")
    auth_file.chmod(0o600)
    plant_run(workdir / "runs", outside)
    # --max-upload-mb 1: the upload limit is the command line's (512 MB by default, for datasets).
    with AppServer("--auth-file", str(auth_file), "--max-upload-mb", "1", host="0.0.0.0", env={"GRADIO_SHARE": "True"}, workdir=workdir) as server:
        yield server


def login(server: AppServer, password: str = PASSWORD) -> tuple[int, str]:
    status, headers, _ = http_get(
        server.port, "/login", method="POST", headers={"Content-Type": "application/x-www-form-urlencoded"}, body=f"username={USER}&password={password}".encode()
    )
    return status, headers.get("set-cookie", "").split(";")[0]


@pytest.fixture(scope="module")
def cookie(guarded_server) -> str:
    status, value = login(guarded_server)
    assert status == 200 and value
    return value


def test_the_page_asks_for_a_login(guarded_server) -> None:
    status, _, body = http_get(guarded_server.port, "/")
    assert status == 200
    assert b'"auth_required":true' in body
    assert PASSWORD.encode() not in body


ANONYMOUS_CALLS = [
    ("GET", "/config", None),
    ("GET", "/gradio_api/info", None),
    ("GET", "/gradio_api/queue/status", None),
    ("POST", "/gradio_api/queue/join", json.dumps({"data": [], "fn_index": 0, "session_hash": "anonymous1"}).encode()),
    ("POST", "/gradio_api/run/predict", json.dumps({"data": [], "fn_index": 0}).encode()),
    ("GET", "/gradio_api/file=/etc/passwd", None),
]


@pytest.mark.hostile
@pytest.mark.parametrize(("method", "path", "body"), ANONYMOUS_CALLS, ids=[c[1] for c in ANONYMOUS_CALLS])
def test_the_api_refuses_anonymous_calls(guarded_server, method, path, body) -> None:
    status, _, _ = http_get(guarded_server.port, path, method=method, body=body, headers={"Content-Type": "application/json"} if body else {})
    assert status in (401, 403)


@pytest.mark.hostile
def test_an_anonymous_upload_is_refused(guarded_server) -> None:
    body = b'--b\r\nContent-Disposition: form-data; name="files"; filename="a.yaml"\r\n\r\nlr: 1\r\n--b--\r\n'
    status, _, _ = http_get(guarded_server.port, "/gradio_api/upload", method="POST", body=body, headers={"Content-Type": "multipart/form-data; boundary=b"})
    assert status in (401, 403)


@pytest.mark.hostile
def test_a_wrong_password_gets_no_cookie(guarded_server) -> None:
    status, value = login(guarded_server, "not-the-Password-123")
    assert status in (400, 401)
    assert not value


def test_the_right_password_opens_the_api(guarded_server, cookie) -> None:
    status, _, body = http_get(guarded_server.port, "/config", headers={"Cookie": cookie})
    assert status == 200 and b'"components"' in body


def test_the_password_never_appears_in_what_the_server_prints(guarded_server, cookie) -> None:
    login(guarded_server, "not-the-Password-123")
    printed = guarded_server.output()
    assert "RocBoard: http://0.0.0.0" in printed  # the server did print; it just never printed the secret
    assert PASSWORD not in printed and "not-the-Password-123" not in printed


def test_no_share_link_is_made_even_when_gradio_share_is_set(guarded_server) -> None:
    printed = guarded_server.output()
    assert "public URL" not in printed and "gradio.live" not in printed
    assert "To create a public link" in printed  # Gradio says this exactly when share is off


def served(server: AppServer, cookie: str, path: str) -> tuple[int, bytes]:
    status, _, body = http_get(server.port, path, headers={"Cookie": cookie})
    return status, body


@pytest.mark.hostile
def test_gradios_file_route_serves_nothing_the_app_did_not_return(guarded_server, cookie, outside) -> None:
    run_dir = guarded_server.runs_dir / PLANTED_RUN
    app_temp = guarded_server.tmp_dir / "rocboard-exports-probe"
    app_temp.mkdir(exist_ok=True)
    (app_temp / "copy.zip").write_text(SECRET)  # the app's own temp dir is not Gradio's cache
    cache = guarded_server.gradio_temp
    targets = [
        "/etc/passwd",
        str(outside / "secret.txt"),
        str(run_dir / "config.yaml"),
        str(run_dir / "train.log"),
        str(run_dir / "state.json"),
        str(run_dir / "output" / "tokenizer.json"),  # a symlink planted in the run
        str(run_dir / "output" / "escape" / "secret.txt"),  # through a planted directory link
        str(app_temp / "copy.zip"),
        str(guarded_server.runs_dir),
        f"{cache}/../runs/{PLANTED_RUN}/config.yaml",
        f"{cache}/../../../../../../etc/passwd",
        "../../../../../../etc/passwd",
        "..%2F..%2F..%2F..%2F..%2Fetc%2Fpasswd",
        "%2Fetc%2Fpasswd",
        "%252Fetc%252Fpasswd",
        f"{cache}%2F..%2F..%2F..%2F..%2Fetc%2Fpasswd",
        str(outside / "secret.txt").replace("/", "%2F"),
        "~/.bashrc",
        "file:///etc/passwd",
    ]
    for target in targets:
        for prefix in ("/gradio_api/file=", "/file=", "/gradio_api/file/", "/file/"):
            status, body = served(guarded_server, cookie, prefix + target)
            assert status in NOT_SERVED, f"{prefix}{target} answered {status}"
            assert SECRET.encode() not in body and b"root:x:0:0" not in body and b"SECRET-CONFIG-MARKER" not in body


@pytest.mark.hostile
def test_static_routes_do_not_walk_out(guarded_server, cookie) -> None:
    for path in (
        "/static/../../../../etc/passwd",
        "/static/..%2F..%2F..%2F..%2Fetc%2Fpasswd",
        "/assets/..%2F..%2F..%2F..%2Fetc%2Fpasswd",
        "/gradio_api/static/..%2F..%2Fetc%2Fpasswd",
        "/favicon.ico/..%2F..%2Fetc%2Fpasswd",
        "/custom_component/x/y/..%2F..%2F..%2Fetc%2Fpasswd",
    ):
        status, body = served(guarded_server, cookie, path)
        assert status >= 400, f"{path} answered {status}"
        assert b"root:x:0:0" not in body


@pytest.mark.hostile
def test_the_proxy_route_reaches_nothing(guarded_server, cookie) -> None:
    for target in (f"http://127.0.0.1:{guarded_server.port}/config", "file:///etc/passwd", "http://169.254.169.254/latest/meta-data/"):
        status, body = served(guarded_server, cookie, "/gradio_api/proxy=" + target)
        assert status >= 400, f"proxy to {target} answered {status}"


@pytest.mark.hostile
def test_a_file_the_app_did_not_return_from_gradios_cache_needs_its_exact_name(guarded_server, cookie) -> None:
    # What is served from the cache is only what the app returned or a user uploaded; a
    # directory listing or a guessed name gets nothing.
    for path in (str(guarded_server.gradio_temp), f"{guarded_server.gradio_temp}/", f"{guarded_server.gradio_temp}/nothing-here.zip"):
        status, _ = served(guarded_server, cookie, "/gradio_api/file=" + path)
        assert status in NOT_SERVED


@pytest.mark.hostile
def test_an_upload_over_the_size_limit_is_refused(guarded_server, cookie) -> None:
    body = b'--b\r\nContent-Disposition: form-data; name="files"; filename="big.yaml"\r\n\r\n' + b"a: 1\n" * 400_000 + b"\r\n--b--\r\n"
    status, _, _ = http_get(guarded_server.port, "/gradio_api/upload", method="POST", body=body, headers={"Cookie": cookie, "Content-Type": "multipart/form-data; boundary=b"})
    assert status == 413


@pytest.mark.browser
def test_the_browser_shows_a_login_form_and_then_the_page(guarded_server, chromium) -> None:
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.goto(guarded_server.url)
        page.wait_for_selector("input[type=password]", timeout=60_000)
        assert page.locator("#start").count() == 0  # nothing of the app before the login
        page.locator("input[type=password]").fill("wrong-Password-0")
        page.locator("input:not([type=password])").first.fill(USER)
        page.locator("button", has_text="Login").click()
        page.wait_for_selector("text=Incorrect", timeout=30_000)
        page.locator("input:not([type=password])").first.fill(USER)
        page.locator("input[type=password]").fill(PASSWORD)
        page.locator("button", has_text="Login").click()
        page.wait_for_selector("#start", timeout=60_000)
    finally:
        context.close()


# --- run ids and symlinks in the backend ---------------------------------------------------------

HOSTILE_RUN_IDS = [
    "..",
    ".",
    "../",
    "../outside",
    "../../etc",
    "/etc",
    "/etc/passwd",
    "a/../../b",
    "..%2F..%2Fetc",
    "%2Fetc%2Fpasswd",
    "run\x00.txt",
    "run\n",
    "-rf",
    ".hidden",
    "",
    " ",
    "~",
    "x" * 300,
]


@pytest.fixture
def board(tmp_path: Path, outside: Path, demo_assets):
    from backend.service import RocBoard

    runs = tmp_path / "runs"
    plant_run(runs, outside)
    return RocBoard(runs, export_dir=tmp_path / "exports")


@pytest.mark.hostile
@pytest.mark.parametrize("run_id", HOSTILE_RUN_IDS, ids=[repr(r)[:24] for r in HOSTILE_RUN_IDS])
def test_every_backend_call_that_takes_a_run_id_refuses_a_hostile_one(board, tmp_path: Path, run_id: str) -> None:
    calls = {
        "run_dir": board.store.run_dir,
        "read": board.store.read,
        "snapshot": board.snapshot,
        "adapter_download": board.adapter_download,
        "failure_cause": board.failure_cause,
        "stop": board.stop,
        "delete": board.delete,
        "monitor": board.monitor,
    }
    for name, call in calls.items():
        with pytest.raises((RunNotFound, ValueError)):
            call(run_id)
            pytest.fail(f"{name}({run_id!r}) accepted it")
    if hasattr(board, "resume"):
        assert not board.resume(run_id).started
    try:
        assert board.store.read_form(run_id) == {}
    except RunNotFound:
        pass  # refused outright: as good as nothing read
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [PLANTED_RUN]


@pytest.mark.hostile
def test_the_adapter_zip_never_packs_a_planted_symlink(board, outside: Path) -> None:
    run_dir = board.store.run_dir(PLANTED_RUN)
    zip_path = board.adapter_download(PLANTED_RUN)
    with zipfile.ZipFile(zip_path) as archive:
        names = set(archive.namelist())
        contents = b"".join(archive.read(name) for name in names)
    assert names == {"adapter_model.safetensors", "adapter_config.json", "config.yaml"}  # no tokenizer.json: it is a link
    assert SECRET.encode() not in contents
    assert zip_path.resolve().is_relative_to(board.export_dir.resolve())
    assert (outside / "secret.txt").read_text() == SECRET
    assert run_dir.is_dir()


@pytest.mark.hostile
def test_a_planted_adapter_zip_link_is_replaced_not_followed(board, outside: Path) -> None:
    run_dir = board.store.run_dir(PLANTED_RUN)
    target = outside / "victim.zip"
    target.write_text("must stay")
    (run_dir / "adapter.zip").symlink_to(target)
    future = time.time() + 3600
    os.utime(run_dir / "adapter.zip", (future, future), follow_symlinks=False)  # "newer than the adapter"
    archive = build_adapter_zip(run_dir)
    assert not archive.is_symlink() and zipfile.is_zipfile(archive)
    assert target.read_text() == "must stay"


@pytest.mark.hostile
def test_an_adapter_that_is_a_link_is_no_adapter(board, outside: Path) -> None:
    output = board.store.run_dir(PLANTED_RUN) / "output"
    (output / "adapter_model.safetensors").unlink()
    (output / "adapter_model.safetensors").symlink_to(outside / "secret.txt")
    assert not has_adapter(output.parent)
    assert not board.snapshot(PLANTED_RUN).has_adapter


@pytest.mark.hostile
def test_deleting_a_run_does_not_follow_its_links(board, outside: Path) -> None:
    board.delete(PLANTED_RUN)
    assert (outside / "secret.txt").read_text() == SECRET
    with pytest.raises(RunNotFound):
        board.store.run_dir(PLANTED_RUN)


@pytest.mark.hostile
def test_a_run_dir_link_out_of_the_runs_dir_is_not_a_run(board, outside: Path, tmp_path: Path) -> None:
    fake = tmp_path / "elsewhere"
    fake.mkdir()
    (fake / "state.json").write_text((board.store.root / PLANTED_RUN / "state.json").read_text().replace(PLANTED_RUN, "linked"))
    (board.store.root / "linked").symlink_to(fake)
    # Listing may show it (it is a run directory by its content), but reading it must not
    # let a download or a delete act outside the runs dir.
    try:
        run_dir = board.store.run_dir("linked")
    except RunNotFound:
        return
    assert run_dir.resolve().is_relative_to(board.store.root.resolve()), "a run id resolves outside the runs dir"


@pytest.mark.hostile
@pytest.mark.parametrize("name", ["../evil", "a/b", "/abs", "-rf", ".hidden", "x; rm -rf ~", "$(touch pwned)", "a\nb"])
def test_an_unsafe_run_name_starts_nothing_and_creates_nothing(board, tmp_path: Path, name: str) -> None:
    from backend.service import demo_form

    before = sorted(p.name for p in tmp_path.rglob("*"))
    result = board.start({**demo_form(), "run_name": name})
    assert not result.started
    # A control character is refused as such before the name's shape is looked at.
    assert any(f.key == "run_name" and f.rule in ("run-name-unsafe", "text-bad-character") for f in result.findings)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


# --- data is never shell ------------------------------------------------------------------------


def injected_model_dir(root: Path, demo_model: Path) -> tuple[Path, list[Path]]:
    """A real copy of the demo model under a path full of shell syntax; the markers a shell
    would create if it ever evaluated that path."""
    markers = [root / f"pwned-{n}" for n in range(1, 5)]
    injection = f"m; touch {markers[0]}; x $(touch {markers[1]}) `touch {markers[2]}` && touch {markers[3]} #"
    model_dir = root / injection / "model"
    shutil.copytree(demo_model, model_dir)
    return model_dir, markers


@pytest.mark.hostile
@pytest.mark.timeout(300)
@starts("lf_helper", "trainer")
def test_a_model_path_full_of_shell_syntax_is_only_ever_a_path(tmp_path: Path, demo_assets) -> None:
    from backend.service import RocBoard, demo_form

    model_dir, markers = injected_model_dir(tmp_path, Path(demo_assets.model_dir))
    assert model_dir.is_dir() and ";" in str(model_dir)
    board = RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports")
    form = {**demo_form(), "model_path": str(model_dir), "max_steps": 2, "save_steps": 2}

    preview = board.preview(form)
    assert yaml.safe_load(preview.yaml_text)["model_name_or_path"] == str(model_dir)

    result = board.start(form)
    assert result.started, [f.line() for f in result.findings]
    run_id = result.run.id
    run_dir = board.store.run_dir(run_id)
    try:
        assert yaml.safe_load((run_dir / "config.yaml").read_text())["model_name_or_path"] == str(model_dir)
        assert all(str(model_dir) not in part for part in board.store.read(run_id).command)  # the path travels in the YAML only
        # Wait until the trainer has opened the model by that path (or ended): by then a
        # shell, had one been involved anywhere, would have run the commands in it.
        wait_until(
            lambda: "config.json" in (run_dir / "train.log").read_text(errors="replace") or not board.snapshot(run_id).run.active,
            timeout=240,
            interval=1.0,
            what="the trainer to read the model's config.json",
        )
    finally:
        board.stop(run_id)
        process = trainer_process(board.store.read(run_id).to_json())
        if process is not None:
            kill_tree(process)
    assert [m.name for m in markers if m.exists()] == []
    assert "config.json" in (run_dir / "train.log").read_text(errors="replace"), "the trainer never got to the model"


@starts("lf_helper")
def test_the_shell_lines_shown_for_a_run_quote_every_value(tmp_path: Path, demo_assets) -> None:
    import shlex

    from backend.service import RocBoard, demo_form

    model_dir, markers = injected_model_dir(tmp_path, Path(demo_assets.model_dir))
    board = RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports")
    command = board.preview({**demo_form(), "model_path": str(model_dir), "run_name": "demo"}).command
    # Run the shown lines with a fake llamafactory-cli: the markers must not appear.
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "llamafactory-cli").write_text("#!/bin/sh\nexit 0\n")
    (fake_bin / "llamafactory-cli").chmod(0o755)
    script = tmp_path / "run.sh"
    script.write_text(command)
    completed = subprocess.run(["bash", str(script)], cwd=tmp_path, env={**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}"}, capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr
    assert [m.name for m in markers if m.exists()] == []
    for line in command.splitlines():
        if line and not line.startswith("#"):
            shlex.split(line)  # every line is well-formed shell


@pytest.mark.hostile
@starts("lf_helper")
def test_model_code_from_the_model_folder_is_never_trusted(tmp_path: Path, demo_assets) -> None:
    from backend.config.yaml_import import import_yaml
    from backend.service import RocBoard, demo_form

    board = RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports")
    assert yaml.safe_load(board.preview(demo_form()).yaml_text)["trust_remote_code"] is False
    imported = import_yaml(f"model_name_or_path: {demo_form()['model_path']}\ntrust_remote_code: true\n")
    assert "trust_remote_code" not in imported.form_values
    merged = {**demo_form(), **imported.form_values}
    assert yaml.safe_load(board.preview(merged).yaml_text)["trust_remote_code"] is False


# --- YAML import ------------------------------------------------------------------------------------

PYTHON_PAYLOADS = [
    "!!python/object/apply:os.system ['touch {marker}']",
    "model_name_or_path: !!python/object/apply:os.system ['touch {marker}']",
    "x: !!python/object/new:subprocess.Popen [['touch', '{marker}']]",
    "x: !!python/name:os.system",
    "x: !!python/module:os",
    "!!python/object:__main__.Evil {{}}",
]


@pytest.mark.hostile
@pytest.mark.parametrize("payload", PYTHON_PAYLOADS)
def test_a_python_object_payload_is_refused(tmp_path: Path, payload: str) -> None:
    from backend.config.yaml_import import import_yaml

    marker = tmp_path / "pwned"
    result = import_yaml(payload.format(marker=marker))
    assert not marker.exists()
    assert result.form_values == {}
    assert result.findings and result.findings[0].severity == "problem"
    assert "python" in result.findings[0].problem.lower() or result.findings[0].rule == "yaml-syntax"


@pytest.mark.hostile
def test_an_oversized_yaml_is_refused_before_it_is_parsed() -> None:
    from backend.config.yaml_import import import_yaml

    result = import_yaml("learning_rate: 1.0e-4\n" * 50_000)
    assert [f.rule for f in result.findings] == ["yaml-too-large"]
    assert result.form_values == {}


@pytest.mark.hostile
def test_a_yaml_bomb_is_refused() -> None:
    from backend.config.yaml_import import import_yaml

    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for level in "bcdefgh":
        previous = chr(ord(level) - 1)
        lines.append(f"{level}: &{level} [" + ",".join([f"*{previous}"] * 9) + "]")
    result = import_yaml("\n".join(lines))
    assert [f.rule for f in result.findings] == ["yaml-too-many-values"]


@pytest.mark.parametrize(
    "text",
    [
        "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
        "<html><body>not yaml</body></html>",
        "just a sentence, no keys",
        "- a\n- list\n",
        "key: [unclosed",
        "\tlearning_rate: 1",
    ],
    ids=["binary", "html", "sentence", "list", "syntax", "tab"],
)
@pytest.mark.hostile
def test_something_that_is_not_a_training_yaml_gets_a_clear_message(text: str) -> None:
    from backend.config.yaml_import import import_yaml

    result = import_yaml(text)
    assert result.form_values == {}
    problems = [f for f in result.findings if f.severity == "problem"]
    assert problems, "no message"
    assert problems[0].key == "file" and problems[0].problem and problems[0].fix
