"""The web server's edge (ui/guard/, ui/serve.py, the login file rule in backend/security/__init__.py).

- Host and Origin: a DNS-rebinding page (its own name in Host) and a foreign page (its own
  Origin) get nothing, a CORS preflight from one gets no echo of its origin.
- A login instance answers an anonymous client with 401 on everything but the login page;
  wrong passwords from one address earn a growing wait (429 + Retry-After), right ones too.
- The login file is one USER:PASSWORD line, or the app refuses to start (never quoting it).
- A 5xx carries no traceback, a redirect never leaves the site, the proxy route is closed.
- Bodies over the cap are refused before they are read (Content-Length) or as they stream
  (chunked); uploads are capped in number; the app's folders go when it stops, and those of a
  dead app at the next start.

The decisions are unit-tested as plain functions; the wiring on real `python app.py` servers.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend.security import AUTH_FILE_MAX_BYTES, AuthError, Credentials, read_auth_file, resolve_credentials, share_refusal
from tests.harness import AppServer, free_port, wait_until
from tests.test_security import run_app
from ui.guard.asgi import EdgePolicy, Guard
from ui.guard.backoff import LoginBackoff, client_key
from ui.guard.origin import allowed_host_names, host_allowed, origin_allowed, same_site_location, split_host
from ui.guard.paths import EMPTY_API_INFO, anonymous_allowed, refused_path, without_api_info
from ui.guard.quota import UploadQuota, upload_refusal
from ui.serve import APP_DIR_PREFIX, app_dir_name, claim_app_dirs, parse_args, process_stamp, remove_stale_app_dirs

hostile = pytest.mark.hostile
LOOPBACK = allowed_host_names("127.0.0.1")
USER = "edge-tester"
PASSWORD = "Edge-Pw-77c1-never-printed"
ATTACKER = "attacker.example"


# --- Host ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1:7860", "localhost:7860", "LOCALHOST:7860", "[::1]:7860", "localhost.:7860", "127.0.0.1", "localhost:8000"])
def test_a_loopback_instance_answers_to_its_loopback_names(host: str) -> None:
    assert host_allowed(host, LOOPBACK)


REBINDING_HOSTS = [
    f"{ATTACKER}:7860",
    ATTACKER,
    "127.0.0.1.attacker.example:7860",
    "localhost.attacker.example:7860",
    "127.0.0.2:7860",
    "0.0.0.0:7860",
    "[::ffff:127.0.0.1]:7860",
    "",
    None,
    "[::1:7860",
    "::1",
    "localhost:",
    "localhost:port",
    "localhost:99999",
    "localhost:+80",
    "localhost:٧٨٦٠",  # Arabic-Indic digits are digits to str.isdigit, not to a port
    "evil@localhost:7860",
    "localhost/x",
    "localhost:7860, attacker.example",
    "local host",
    "localhost\x00.attacker.example",
]


@hostile
@pytest.mark.parametrize("host", REBINDING_HOSTS, ids=[repr(h) for h in REBINDING_HOSTS])
def test_a_loopback_instance_refuses_every_other_host(host) -> None:
    assert not host_allowed(host, LOOPBACK)


def test_a_named_or_listed_host_is_served_and_a_wildcard_bind_adds_this_machine() -> None:
    named = allowed_host_names("rocboard.example.com", ["proxy.example", "[fd00::5]"])
    assert host_allowed("rocboard.example.com:7860", named) and host_allowed("proxy.example", named) and host_allowed("[fd00::5]:443", named)
    assert host_allowed("localhost:7860", named)  # launch() calls itself as localhost
    assert not host_allowed(f"{ATTACKER}:7860", named) and not host_allowed("192.168.1.20:7860", named)
    wildcard = allowed_host_names("0.0.0.0", [], ["gpu-box", "192.168.1.20", "fe80::1%eth0"])
    assert host_allowed("192.168.1.20:7860", wildcard) and host_allowed("gpu-box:7860", wildcard) and host_allowed("[fe80::1]:7860", wildcard)
    assert not host_allowed(f"{ATTACKER}:7860", wildcard) and not host_allowed("0.0.0.0:7860", wildcard)
    assert host_allowed("127.8.9.10:7860", allowed_host_names("127.8.9.10"))  # a loopback bind's own address


@pytest.mark.parametrize(("host", "expected"), [("a.example:80", ("a.example", 80)), ("[::1]:7860", ("::1", 7860)), ("A.Example.", ("a.example", None))])
def test_split_host(host: str, expected) -> None:
    assert split_host(host) == expected


# --- Origin --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("origin", "host"),
    [
        (None, "127.0.0.1:7860"),
        ("http://127.0.0.1:7860", "127.0.0.1:7860"),
        ("http://[::1]:7860", "[::1]:7860"),
        ("https://rocboard.example", "rocboard.example"),
        ("http://LOCALHOST:7860", "localhost:7860"),
    ],
)
def test_the_pages_own_origin_is_allowed(origin, host) -> None:
    assert origin_allowed(origin, host)


FOREIGN_ORIGINS = [
    f"http://{ATTACKER}",
    f"http://{ATTACKER}:7860",
    "null",
    "http://127.0.0.1:7861",
    "http://localhost:7860",  # another origin than 127.0.0.1:7860, even if it is this machine
    "http://127.0.0.1.attacker.example:7860",
    "http://127.0.0.1:7860@attacker.example",
    "file://",
    "javascript:alert(1)",
    "http://127.0.0.1:7860/path",
    "",
    "http://[::1",
]


@hostile
@pytest.mark.parametrize("origin", FOREIGN_ORIGINS)
def test_a_foreign_origin_is_refused(origin: str) -> None:
    assert not origin_allowed(origin, "127.0.0.1:7860")


def test_a_listed_name_is_accepted_as_an_origin_behind_a_proxy() -> None:
    assert origin_allowed("https://board.example", "127.0.0.1:7860", frozenset({"board.example"}))
    assert not origin_allowed(f"https://{ATTACKER}", "127.0.0.1:7860", frozenset({"board.example"}))


# --- redirects and routes ------------------------------------------------------------------------


@pytest.mark.parametrize("location", ["/", "/login", "?x=1", "http://127.0.0.1:7860/", "gradio_api/x"])
def test_a_redirect_on_the_site_stays(location: str) -> None:
    assert same_site_location(location, "127.0.0.1:7860")
    assert same_site_location("https://board.example/", "127.0.0.1:7860", frozenset({"board.example"}))  # behind a listed proxy


OFF_SITE = [
    "http://evil.example/",
    "https://evil.example",
    "//evil.example/x",
    "/\\evil.example",
    "\\\\evil.example",
    "http:evil.example",
    "https:/evil.example",
    "javascript:alert(1)",
    "\thttp://evil.example",
    "http://127.0.0.1:7861/",
    "data:text/html,x",
]


@hostile
@pytest.mark.parametrize("location", OFF_SITE)
def test_a_redirect_off_the_site_is_refused(location: str) -> None:
    assert not same_site_location(location, "127.0.0.1:7860")


CLOSED_PATHS = [
    "/gradio_api/proxy=/etc/passwd%00.zip",
    "/gradio_api/proxy=http://169.254.169.254/",
    "/gradio_api/PROXY%3Dhttp://x",
    "/gradio_api/file=http://evil.example/x",
    "/gradio_api/file=https%3A//evil.example/x",
    "/gradio_api/file=%2568ttp://evil.example/x",
    "/gradio_api/file/http://evil.example/x",
    "/file=HTTP://evil.example",
]


@hostile
@pytest.mark.parametrize("path", CLOSED_PATHS)
def test_the_proxy_and_url_file_routes_are_closed(path: str) -> None:
    assert refused_path(path)


def test_file_routes_with_a_path_stay_open() -> None:
    assert not refused_path("/gradio_api/file=/tmp/gradio/abc/adapter.zip")
    assert not refused_path("/gradio_api/upload")


def test_an_anonymous_client_gets_only_the_login_page() -> None:
    assert anonymous_allowed("GET", "/") and anonymous_allowed("POST", "/login") and anonymous_allowed("GET", "/assets/index-x.js")
    assert anonymous_allowed("GET", "/theme.css") and anonymous_allowed("HEAD", "/")
    for method, path in [("GET", "/config"), ("POST", "/"), ("GET", "/login"), ("GET", "/gradio_api/heartbeat/x"), ("GET", "/assets/../config"), ("GET", "/gradio_api/app_id")]:
        assert not anonymous_allowed(method, path), (method, path)


# --- login back-off ------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_failed_logins_earn_a_growing_wait_and_a_success_forgets_them() -> None:
    clock = FakeClock()
    backoff = LoginBackoff(free_attempts=5, first_delay_s=2, max_delay_s=60, clock=clock)
    assert [backoff.begin("a") for _ in range(5)] == [0.0] * 5
    assert backoff.begin("a") == pytest.approx(2)  # the right password now is refused as well
    assert backoff.begin("b") == 0.0  # another client is not held up
    clock.now += 2
    assert backoff.begin("a") == 0.0
    assert backoff.begin("a") == pytest.approx(4)  # doubled
    for _ in range(10):
        clock.now += 100
        backoff.begin("a")
    assert backoff.begin("a") == pytest.approx(60)  # capped
    clock.now += 60
    assert backoff.begin("a") == 0.0
    backoff.succeeded("a")
    assert [backoff.begin("a") for _ in range(5)] == [0.0] * 5


def test_a_burst_sent_at_once_is_counted_before_any_answer() -> None:
    backoff = LoginBackoff(free_attempts=5, clock=FakeClock())
    assert sum(backoff.begin("a") == 0 for _ in range(19)) == 5


def test_the_back_off_table_is_bounded_and_keeps_clients_that_wait() -> None:
    clock = FakeClock()
    backoff = LoginBackoff(free_attempts=2, max_clients=50, clock=clock)
    backoff.begin("slow")
    backoff.begin("slow")  # waits now
    for n in range(10_000):
        backoff.begin(f"10.0.{n // 256}.{n % 256}")
    assert len(backoff) <= 50
    assert backoff.begin("slow") > 0


def test_an_ipv6_client_is_held_by_its_slash_64() -> None:
    assert client_key("2001:db8:1:2::1") == client_key("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert client_key("::ffff:10.1.2.3") == "10.1.2.3"
    assert client_key("10.1.2.3") != client_key("10.1.2.4")


# --- upload quota --------------------------------------------------------------------------------


def test_uploads_are_capped_in_number_and_size() -> None:
    assert upload_refusal([(100.0, 10)] * 3, 100.0, max_files=4, max_bytes=1000, max_age_s=60) is None
    full = upload_refusal([(100.0, 10)] * 4, 110.0, max_files=4, max_bytes=1000, max_age_s=60)
    assert full is not None and full.status == 429 and full.retry_after_s == pytest.approx(50)
    heavy = upload_refusal([(100.0, 600), (100.0, 600)], 100.0, max_files=4, max_bytes=1000, max_age_s=60)
    assert heavy is not None and heavy.status == 429


def test_old_uploads_are_deleted_and_a_refused_uploads_body_does_not_stay(tmp_path: Path) -> None:
    staging = tmp_path / "staging"
    staging.mkdir()
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text("a: 1\n")
    new.write_text("b: 2\n")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    uploaded = {str(old), str(new), str(tmp_path / "gone.yaml")}
    quota = UploadQuota(uploaded=uploaded, staging=staging, max_files=2, max_age_s=3600)
    assert quota.refusal() is None
    assert uploaded == {str(new)} and not old.exists()
    quota.begin()
    (staging / "tmpab12cd34").write_bytes(b"x" * 100)  # a body being received
    assert quota.refusal() is not None  # it counts
    quota.end()
    assert list(staging.iterdir()) == []


# --- the ASGI wrapper, on a fake app -------------------------------------------------------------


def run_guard(guard: Guard, app, *, path="/x", method="POST", headers=(), chunks=(b"",), scope_type="http"):
    """(status, headers, body, what the app read) of one request through `guard` around `app`."""
    read: list[bytes] = []
    sent: list[dict] = []
    queue = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]

    async def receive():
        return queue.pop(0) if queue else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    async def inner(scope, receive_, send_):
        await app(scope, receive_, send_, read)

    guard.inner = inner
    guard.session_user = lambda scope: None
    scope = {"type": scope_type, "method": method, "path": path, "headers": [(b"host", b"127.0.0.1:7860"), *headers], "client": ("127.0.0.1", 5000)}
    asyncio.run(guard(scope, receive, send))
    if scope_type == "websocket":
        return sent, read
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body, read


async def reading_app(scope, receive, send, read):
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionError("client went away")
        read.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def edge_guard(**policy) -> Guard:
    return Guard(EdgePolicy(host_names=LOOPBACK, **policy), log=lambda text: None)


@hostile
def test_while_launching_only_gradios_own_startup_call_gets_in_without_a_login_and_once() -> None:
    """launch() asks /gradio_api/startup-events itself once the server listens; a client on
    this machine racing it (the whole suite's login test did, under load) must not get in."""
    guard = edge_guard(login_required=True)

    def startup(agent: bytes | None):
        headers = [(b"host", b"127.0.0.1:7860")] + ([(b"user-agent", agent)] if agent else [])
        return guard.refusal({"type": "http", "method": "GET", "path": "/gradio_api/startup-events", "headers": headers, "client": ("127.0.0.1", 50000)})

    assert startup(b"Python-urllib/3.11").status == 401 and startup(None).status == 401
    assert startup(b"python-httpx/0.28.1") is None  # Gradio's own call
    assert startup(b"python-httpx/0.28.1").status == 401  # the window closed with it


@hostile
def test_a_content_length_over_the_cap_is_refused_before_the_app_reads_anything() -> None:
    status, _, body, read = run_guard(edge_guard(body_cap=1000), reading_app, headers=[(b"content-length", b"50000000")], chunks=(b"x" * 10,))
    assert status == 413 and read == [] and b"too large" in body


@hostile
def test_a_chunked_body_is_cut_at_the_cap() -> None:
    chunks = (b"x" * 400,) * 10 + (b"",)
    status, _, _, read = run_guard(edge_guard(body_cap=1000), reading_app, chunks=chunks)
    assert status == 413 and sum(map(len, read)) <= 1000


def test_a_body_under_the_cap_reaches_the_app() -> None:
    status, _, body, read = run_guard(edge_guard(body_cap=1000), reading_app, chunks=(b"x" * 400, b"y" * 400, b""))
    assert (status, body, sum(map(len, read))) == (200, b"ok", 800)


@hostile
@pytest.mark.parametrize("length", [b"-1", b"1e9", b" 12", b"0x10"])
def test_a_malformed_content_length_is_refused(length: bytes) -> None:
    status, _, _, read = run_guard(edge_guard(), reading_app, headers=[(b"content-length", length)])
    assert status == 400 and read == []


@hostile
@pytest.mark.parametrize("failure", ["raises", "answers 500"])
def test_a_failing_route_answers_a_short_500(failure: str) -> None:
    async def app(scope, receive, send, read):
        if failure == "raises":
            raise KeyError("secret-internal-name")
        await send({"type": "http.response.start", "status": 500, "headers": [(b"content-type", b"text/html")]})
        await send({"type": "http.response.body", "body": b"<pre>Traceback (most recent call last): secret-internal-name", "more_body": True})
        await send({"type": "http.response.body", "body": b"more", "more_body": False})

    status, headers, body, _ = run_guard(edge_guard(), app)
    assert status == 500 and body == b"Internal server error.\n" and headers["content-type"].startswith("text/plain")


@hostile
def test_a_redirect_off_the_site_is_replaced() -> None:
    async def app(scope, receive, send, read):
        await send({"type": "http.response.start", "status": 302, "headers": [(b"location", b"https://evil.example/")]})
        await send({"type": "http.response.body", "body": b""})

    status, headers, _, _ = run_guard(edge_guard(), app, method="GET")
    assert status == 403 and "location" not in headers


@hostile
def test_a_websocket_from_a_foreign_page_is_closed_before_it_opens() -> None:
    opened = []

    async def app(scope, receive, send, read):
        opened.append(True)

    sent, _ = run_guard(edge_guard(), app, scope_type="websocket", headers=[(b"origin", f"http://{ATTACKER}".encode())])
    assert sent == [{"type": "websocket.close", "code": 1008}] and not opened


@hostile
def test_several_host_headers_are_refused() -> None:
    status, _, _, read = run_guard(edge_guard(), reading_app, headers=[(b"host", ATTACKER.encode())])
    assert status == 400 and read == []


# --- the login file ------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["u:p", "u:p\n", "u:p\r\n", "u:pa:ss\n", "  u:p  \n"])
def test_a_login_file_of_one_line_is_read(tmp_path: Path, text: str) -> None:
    path = tmp_path / "auth"
    path.write_bytes(text.encode())
    assert read_auth_file(str(path)) == Credentials("u", "pa:ss" if "pa:ss" in text else "p")


SHADOW = "root:$6$Secret-hash-one$xyz:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\nuser:$6$Secret-hash-two$abc:19000:0:99999:7:::\n"
BAD_LOGIN_FILES = {
    "shadow": SHADOW,
    "two-lines": "u:Secret-one\nv:Secret-two\n",
    "blank-second-line": "u:Secret-pw\n\n",
    "leading-newline": "\nu:Secret-pw",
    "carriage-return": "u:Secret-pw\rv:x",
    "no-colon": "Secret-only-a-word\n",
    "no-user": ":Secret-pw\n",
    "no-password": "Secret-user:\n",
    "empty": "",
    "over-long": "u:" + "Secret-long-" * (AUTH_FILE_MAX_BYTES // 10),
    "nul": "u:Secret\0pw\n",
}


@hostile
@pytest.mark.parametrize("name", list(BAD_LOGIN_FILES))
def test_a_login_file_that_is_not_one_line_is_refused_without_quoting_it(tmp_path: Path, name: str) -> None:
    path = tmp_path / "auth"
    path.write_text(BAD_LOGIN_FILES[name])
    with pytest.raises(AuthError) as caught:
        resolve_credentials(None, str(path), {})
    assert "Secret" not in str(caught.value) and "$6$" not in str(caught.value)


@hostile
def test_a_binary_login_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "auth"
    path.write_bytes(b"u:\xff\xfe\x00secret")
    with pytest.raises(AuthError, match="not UTF-8"):
        read_auth_file(str(path))


@hostile
@pytest.mark.parametrize("kind", ["directory", "fifo", "device"])
def test_a_login_file_that_is_no_regular_file_is_refused_without_waiting(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "auth"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)  # opening it for reading would wait for a writer forever
    else:
        path = Path("/dev/zero")  # endless
    started = time.monotonic()
    with pytest.raises(AuthError):
        read_auth_file(str(path))
    assert time.monotonic() - started < 5


@hostile
def test_the_app_refuses_to_start_with_a_shadow_like_login_file(tmp_path: Path) -> None:
    path = tmp_path / "shadow"
    path.write_text(SHADOW)
    result = run_app("--host", "0.0.0.0", "--port", str(free_port()), "--runs-dir", str(tmp_path / "runs"), "--auth-file", str(path))
    assert result.returncode == 2
    assert "more than one line" in result.stderr
    printed = result.stdout + result.stderr
    assert "Secret-hash" not in printed and "daemon" not in printed
    assert not (tmp_path / "runs").exists()


@hostile
@pytest.mark.parametrize("value", ["http://board.example", "board.example:8080", "*.example", "a/b", ""])
def test_an_allowed_host_that_is_not_a_name_is_refused(tmp_path: Path, value: str) -> None:
    result = run_app("--port", str(free_port()), "--runs-dir", str(tmp_path / "runs"), "--allowed-host", value)
    assert result.returncode == 2 and "--allowed-host takes a host name" in result.stderr


@hostile
def test_a_share_link_without_a_login_is_refused(tmp_path: Path) -> None:
    assert share_refusal(True, None) and share_refusal(True, Credentials("u", "p")) is None and share_refusal(False, None) is None
    result = run_app("--share", "--port", str(free_port()), "--runs-dir", str(tmp_path / "runs"))
    assert result.returncode == 2 and "Refusing --share without a login" in result.stderr
    assert not (tmp_path / "runs").exists()


def test_allowed_host_is_repeatable() -> None:
    assert parse_args(["--allowed-host", "a.example", "--allowed-host", "b.example"]).allowed_host == ["a.example", "b.example"]


# --- the app's folders ---------------------------------------------------------------------------


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_start_removes_only_the_folders_of_dead_apps(tmp_path: Path) -> None:
    mine = tmp_path / app_dir_name(os.getpid(), process_stamp(os.getpid()))
    dead = tmp_path / app_dir_name(dead_pid(), 123)
    reused_pid = tmp_path / app_dir_name(os.getpid(), 123)  # this pid, another process's start time
    foreign = tmp_path / f"{APP_DIR_PREFIX}not-a-pid"
    for path in (mine, dead, reused_pid, foreign):
        (path / "exports").mkdir(parents=True)
    (tmp_path / f"{APP_DIR_PREFIX}1-1").symlink_to(mine)  # a link is never followed
    removed = remove_stale_app_dirs(tmp_path)
    assert sorted(removed) == sorted([dead, reused_pid])
    assert mine.is_dir() and foreign.is_dir() and (tmp_path / f"{APP_DIR_PREFIX}1-1").is_symlink()


def test_claim_makes_private_folders_named_after_this_process(tmp_path: Path) -> None:
    dirs = claim_app_dirs(tmp_path / "tmp", tmp_path / "gradio")
    assert dirs.root.name == dirs.gradio.name == app_dir_name(os.getpid(), process_stamp(os.getpid()))
    assert all(p.is_dir() and (p.stat().st_mode & 0o777) == 0o700 for p in (dirs.root, dirs.exports, dirs.staging, dirs.gradio))
    dirs.remove()
    assert not dirs.root.exists() and not dirs.gradio.exists()


# --- real servers ----------------------------------------------------------------------------------


def request(
    port: int, method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b"", chunks: list[bytes] | None = None, send_body: bool = True, timeout: float = 30
) -> tuple[int, dict[str, str], bytes]:
    """One raw HTTP/1.1 request: Host as given (or 127.0.0.1:PORT), a body that may be chunked or
    announced but never sent; (status, headers, body) of the answer."""
    headers = dict(headers or {})
    headers.setdefault("Host", f"127.0.0.1:{port}")
    if chunks is not None:
        headers["Transfer-Encoding"] = "chunked"
    elif body:
        headers.setdefault("Content-Length", str(len(body)))
    headers["Connection"] = "close"
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        sock.sendall(head.encode("latin-1"))
        try:
            if chunks is not None:
                for chunk in chunks:
                    sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sock.sendall(b"0\r\n\r\n")
            elif body and send_body:
                sock.sendall(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before the whole body went: what a cap does
        response = http.client.HTTPResponse(sock, method=method)
        response.begin()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()


def multipart(filename: str, content: bytes) -> tuple[dict[str, str], bytes]:
    body = b'--b\r\nContent-Disposition: form-data; name="files"; filename="' + filename.encode() + b'"\r\nContent-Type: application/x-yaml\r\n\r\n' + content + b"\r\n--b--\r\n"
    return {"Content-Type": "multipart/form-data; boundary=b"}, body


def join_body(text: str = "") -> bytes:
    return json.dumps({"data": [text], "fn_index": 0, "session_hash": "edgetest01", "event_data": None, "trigger_id": None}).encode()


def app_dirs_of(server: AppServer) -> list[Path]:
    return sorted([*server.tmp_dir.glob(APP_DIR_PREFIX + "*"), *server.gradio_temp.glob(APP_DIR_PREFIX + "*")])


@pytest.fixture(scope="module")
def loopback_server(tmp_path_factory, demo_assets, starts_app_server):
    """A default (loopback, no login) app, started over the folders of a dead app."""
    workdir = tmp_path_factory.mktemp("edge-loopback")
    stale = [workdir / "tmp" / app_dir_name(dead_pid(), 1), workdir / "gradio-tmp" / app_dir_name(dead_pid(), 1)]
    for path in stale:
        (path / "exports").mkdir(parents=True)
        (path / "exports" / "old.zip").write_bytes(b"x" * 1000)
    server = AppServer(workdir=workdir)
    server.stale_dirs = stale
    with server:
        yield server


@pytest.fixture(scope="module")
def login_server(tmp_path_factory, demo_assets, starts_app_server):
    """--host 0.0.0.0 with a login and one listed name."""
    workdir = tmp_path_factory.mktemp("edge-login")
    auth = workdir / "auth"
    auth.write_text(f"{USER}:{PASSWORD}\n")
    with AppServer("--auth-file", str(auth), "--allowed-host", "board.example", host="0.0.0.0", workdir=workdir) as server:
        yield server


def test_the_app_keeps_its_files_in_its_own_folders_and_removed_a_dead_apps(loopback_server) -> None:
    assert not any(p.exists() for p in loopback_server.stale_dirs)
    dirs = app_dirs_of(loopback_server)
    assert len(dirs) == 2 and all(p.name.startswith(f"{APP_DIR_PREFIX}{loopback_server.process.pid}-") for p in dirs)
    assert not list(loopback_server.tmp_dir.glob("rocboard-exports-*"))


@hostile
@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/"), ("GET", "/config"), ("GET", "/gradio_api/info"), ("POST", "/gradio_api/queue/join"), ("GET", "/gradio_api/heartbeat/x"), ("OPTIONS", "/gradio_api/queue/join")],
)
def test_a_rebinding_page_gets_nothing_from_a_loopback_app(loopback_server, method: str, path: str) -> None:
    port = loopback_server.port
    headers = {"Host": f"{ATTACKER}:{port}", "Origin": f"http://{ATTACKER}:{port}", "Content-Type": "application/json", "Access-Control-Request-Method": "POST"}
    status, answer, body = request(port, method, path, headers, body=join_body() if method == "POST" else b"")
    assert status == 400 and b"components" not in body and b"event_id" not in body
    assert "access-control-allow-origin" not in answer


@hostile
def test_a_foreign_page_cannot_run_an_event_or_get_a_cors_echo(loopback_server) -> None:
    port = loopback_server.port
    foreign = {"Origin": f"http://{ATTACKER}", "Content-Type": "application/json"}
    status, answer, body = request(port, "POST", "/gradio_api/queue/join", foreign, body=join_body())
    assert status == 403 and b"event_id" not in body and "access-control-allow-origin" not in answer
    status, answer, _ = request(port, "OPTIONS", "/gradio_api/queue/join", {**foreign, "Access-Control-Request-Method": "POST"})
    assert status == 403 and "access-control-allow-origin" not in answer


def test_the_pages_own_calls_still_work(loopback_server) -> None:
    port = loopback_server.port
    own = {"Origin": f"http://127.0.0.1:{port}", "Content-Type": "application/json"}
    status, _, body = request(port, "POST", "/gradio_api/queue/join", own, body=join_body())
    assert status == 200 and b"event_id" in body
    status, answer, _ = request(port, "OPTIONS", "/gradio_api/queue/join", {**own, "Access-Control-Request-Method": "POST"})
    assert status == 200 and answer.get("access-control-allow-origin") == f"http://127.0.0.1:{port}"
    status, _, body = request(port, "GET", "/config", {"Host": f"localhost:{port}"})
    assert status == 200 and b'"components"' in body


@hostile
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/gradio_api/stream/x"),
        ("POST", "/gradio_api/stream/x/close"),
        ("GET", "/gradio_api/proxy=/etc/passwd%00.zip"),
        ("GET", "/gradio_api/file=http://example.com/x"),
        ("GET", "/gradio_api/file=https%3A%2F%2Fexample.com"),
    ],
)
def test_no_traceback_and_no_redirect_reach_a_client(loopback_server, method: str, path: str) -> None:
    status, answer, body = request(loopback_server.port, method, path, {"Content-Type": "application/json"}, body=join_body() if method == "POST" else b"")
    assert status in (404, 500) and len(body) < 100, (status, body[:200])
    assert b"Traceback" not in body and b"File \"" not in body and "location" not in answer


@hostile
def test_a_50_mb_paste_is_refused_before_it_is_sent(loopback_server) -> None:
    started = time.monotonic()
    status, _, body = request(
        loopback_server.port, "POST", "/gradio_api/queue/join", {"Content-Type": "application/json", "Content-Length": str(50_000_000)}, send_body=False, timeout=10
    )
    assert status == 413 and b"too large" in body
    assert time.monotonic() - started < 5  # answered without waiting for the body


@hostile
def test_a_chunked_body_over_the_cap_is_cut(loopback_server) -> None:
    status, _, _ = request(loopback_server.port, "POST", "/gradio_api/queue/join", {"Content-Type": "application/json"}, chunks=[b" " * 65536] * 100)
    assert status == 413


def staging_files(server: AppServer) -> list[Path]:
    return [p for p in server.tmp_dir.glob(f"{APP_DIR_PREFIX}*/tmp/*") if p.is_file()]


@hostile
@pytest.mark.parametrize("name", ["..", "../../evil.yaml", "."])
def test_a_refused_upload_leaves_no_file(loopback_server, name: str) -> None:
    headers, body = multipart(name, b"learning_rate: 1\n" * 100)
    status, _, _ = request(loopback_server.port, "POST", "/gradio_api/upload", headers, body=body)
    if status == 200:
        return  # Gradio kept only the base name: a normal upload, inside its cache
    assert status in (400, 413)
    # The guard clears the body once the request is over, which is just after the answer went.
    wait_until(lambda: staging_files(loopback_server) == [], timeout=10, what="the refused body to be removed")


@hostile
def test_uploads_are_capped_in_number(loopback_server) -> None:
    statuses = []
    for n in range(80):
        headers, body = multipart(f"f{n}.yaml", f"learning_rate: {n}\n".encode())
        status, answer, text = request(loopback_server.port, "POST", "/gradio_api/upload", headers, body=body)
        statuses.append(status)
        if status != 200:
            break
    assert statuses[-1] == 429 and statuses.count(200) <= 64
    assert int(answer["retry-after"]) > 0 and b"Too many uploads" in text
    wait_until(lambda: staging_files(loopback_server) == [], timeout=10, what="the staging folder to empty")


def test_stopping_the_app_removes_its_folders(loopback_server) -> None:
    dirs = app_dirs_of(loopback_server)
    assert dirs
    loopback_server.stop()  # SIGTERM, as a service manager stops it
    assert loopback_server.process.returncode == 0, loopback_server.output()[-2000:]
    assert not any(p.exists() for p in dirs)
    assert "Traceback" not in loopback_server.output().partition("RocBoard: stopping.")[2]


ANONYMOUS_REFUSED = [
    ("GET", "/gradio_api/heartbeat/anon123"),
    ("POST", "/gradio_api/cancel"),
    ("POST", "/gradio_api/reset"),
    ("GET", "/gradio_api/startup-events"),
    ("GET", "/gradio_api/app_id"),
    ("GET", "/gradio_api/token"),
    ("GET", "/gradio_api/user"),
    ("GET", "/gradio_api/deep_link?session_hash=x"),
    ("GET", "/gradio_api/upload_progress?upload_id=x"),
    ("POST", "/gradio_api/stream/x"),
    ("GET", "/gradio_api/queue/data?session_hash=x"),
    ("GET", "/manifest.json"),
    ("GET", "/monitoring/summary"),
    ("GET", "/gradio_api/vibe-code"),
    ("GET", "/robots.txt"),
    ("GET", "/assets/../config"),
]


@hostile
@pytest.mark.parametrize(("method", "path"), ANONYMOUS_REFUSED, ids=[p for _, p in ANONYMOUS_REFUSED])
def test_an_anonymous_client_gets_401_and_nothing_else(login_server, method: str, path: str) -> None:
    status, _, body = request(
        login_server.port, method, path, {"Content-Type": "application/json"}, body=b'{"session_hash": "x", "fn_index": 0, "event_id": "x"}' if method == "POST" else b"", timeout=10
    )
    assert status == 401 and body == b"Login required.\n"


def test_the_login_page_loads_without_a_login(login_server) -> None:
    port = login_server.port
    status, _, page = request(port, "GET", "/")
    assert status == 200 and b'"auth_required":true' in page
    assert b"window.gradio_api_info = " + EMPTY_API_INFO in page
    assets = re.findall(rb'(?:src|href)="(?:\./|/)?(assets/[^"]+)"', page)
    assert assets
    for asset in assets:
        assert request(port, "GET", "/" + asset.decode())[0] == 200
    assert request(port, "GET", "/theme.css")[0] == 200


@hostile
@pytest.mark.parametrize("path", ["/", "/?all_endpoints=true"])
def test_the_login_page_describes_no_endpoint(login_server, path: str) -> None:
    status, _, page = request(login_server.port, "GET", path, {"Accept-Encoding": "br, gzip"})
    assert status == 200 and b"on_preset" not in page and b"parameter_name" not in page


def test_the_api_description_is_emptied_from_a_page() -> None:
    page = b'<script>window.gradio_config = {"a": 1};</script><script>window.gradio_api_info = {"named_endpoints": {"/x": {"p": ";"}}};</script><p>'
    assert without_api_info(page) == b'<script>window.gradio_config = {"a": 1};</script><script>window.gradio_api_info = ' + EMPTY_API_INFO + b";</script><p>"


def test_a_listed_name_and_this_machines_name_are_served(login_server) -> None:
    port = login_server.port
    assert request(port, "GET", "/", {"Host": f"board.example:{port}"})[0] == 200
    assert request(port, "GET", "/", {"Host": f"{socket.gethostname()}:{port}"})[0] == 200


@hostile
def test_a_login_app_refuses_a_foreign_host(login_server) -> None:
    assert request(login_server.port, "GET", "/", {"Host": f"{ATTACKER}:{login_server.port}"})[0] == 400


def login(port: int, password: str) -> tuple[int, dict[str, str]]:
    status, headers, _ = request(port, "POST", "/login", {"Content-Type": "application/x-www-form-urlencoded"}, body=f"username={USER}&password={password}".encode())
    return status, headers


@hostile
def test_guessing_the_password_earns_a_wait_even_for_the_right_one(login_server) -> None:
    port = login_server.port
    statuses = [login(port, f"wrong-{n}")[0] for n in range(8)]
    assert statuses[:5] == [400] * 5 and statuses[5:] == [429] * 3
    status, headers = login(port, PASSWORD)
    assert status == 429 and "set-cookie" not in headers
    assert 1 <= int(headers["retry-after"]) <= 900
    # What comes after the wait is the next test's, on a fake clock: here it would sleep real seconds.


def test_after_the_wait_the_right_password_logs_in_and_the_failures_are_forgotten() -> None:
    """The guessing above, through the ASGI wrapper around a stand-in for Gradio's login, with
    the back-off on a fake clock that is moved on by the Retry-After the wrapper answered."""
    clock = FakeClock()
    guard = Guard(EdgePolicy(host_names=LOOPBACK, login_required=True), backoff=LoginBackoff(clock=clock), log=lambda text: None)

    async def gradio_login(scope, receive, send, read):
        right = (await receive()).get("body") == f"username={USER}&password={PASSWORD}".encode()
        await send({"type": "http.response.start", "status": 200 if right else 400, "headers": [(b"set-cookie", b"access-token=t")] if right else []})
        await send({"type": "http.response.body", "body": b""})

    def login_here(password: str) -> tuple[int, dict[str, str]]:
        status, headers, _, _ = run_guard(guard, gradio_login, path="/login", chunks=(f"username={USER}&password={password}".encode(),))
        return status, headers

    assert [login_here(f"wrong-{n}")[0] for n in range(8)] == [400] * 5 + [429] * 3
    status, headers = login_here(PASSWORD)
    assert status == 429 and "set-cookie" not in headers
    clock.now += int(headers["retry-after"]) - 0.5
    assert login_here(PASSWORD)[0] == 429  # not yet
    clock.now += 0.5
    status, headers = login_here(PASSWORD)
    assert status == 200 and "set-cookie" in headers
    assert login_here("wrong-again")[0] == 400  # a success forgot the failures


def test_a_logged_in_client_reaches_the_app(login_server) -> None:
    status, headers = wait_until(lambda: (lambda r: r if r[0] == 200 else None)(login(login_server.port, PASSWORD)), timeout=60, interval=2, what="a login")
    cookie = headers["set-cookie"].split(";")[0]
    status, _, body = request(login_server.port, "GET", "/config", {"Cookie": cookie})
    assert status == 200 and b'"components"' in body
    status, _, page = request(login_server.port, "GET", "/", {"Cookie": cookie})
    assert status == 200 and b"on_preset" in page  # the logged-in page is Gradio's own
    printed = login_server.output()
    assert PASSWORD not in printed
