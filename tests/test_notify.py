"""Word when a run ends (backend/notify, issue 30 §3): a local HTTP receiver of the test's own
gets one POST per event in each payload shape; a receiver that hangs, fails or refuses costs a
run nothing (the send returns at once, the run's end is recorded while the receiver still
holds the request, tries are bounded); URLs that are not http(s) or point at the app are
refused with a message before anything is sent; the secret part of the URL is never logged
and the URL never reaches a child's environment. Stand-in trainers, as test_run_decisions.py."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from backend.notify import Notifier, RunEvent
from backend.notify.webhook import ENV_URL, WebhookSettings, check_url, kind_for, redact, webhook_settings
from backend.runs import ADAPTER_ZIP
from backend.security.child_env import child_env
from backend.service import LlamaFactoryCheckCache, RocBoard
from tests.harness import wait_until

SECRET = "T0SECRET/B0SECRET/xyzSECRET"


class Receiver:
    """A local HTTP server: records each POST (path, JSON body); `mode` says how it answers:
    "ok" (200), "500", "404", or "hang" (holds the request until `release` is set)."""

    def __init__(self, mode: str = "ok"):
        self.mode = mode
        self.posts: list[tuple[str, dict]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.posts.append((self.path, json.loads(body)))
                receiver.entered.set()
                if receiver.mode == "hang":
                    receiver.release.wait(20)
                code = {"ok": 200, "500": 500, "404": 404, "hang": 200}[receiver.mode]
                self.send_response(code)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, secret: str = SECRET) -> str:
        return f"http://127.0.0.1:{self.port}/services/{secret}?token={secret}"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    made: list[Receiver] = []

    def make(mode: str = "ok") -> Receiver:
        made.append(Receiver(mode))
        return made[-1]

    yield make
    for one in made:
        one.close()


def settings(url: str, kind: str = "json", locale: str = "en", **bounds) -> WebhookSettings:
    made = webhook_settings(url, kind, locale, **bounds)
    assert isinstance(made, WebhookSettings), made
    return made


EVENTS = [
    RunEvent("run_finished", "r-fin", "finished", figures={"step": 20, "total": 20, "loss": 1.25, "minutes": 3.5}, run_name="lr-1e-4"),
    RunEvent("run_failed", "r-fail", "failed", "diagnose.gpu_out_of_memory.cause", figures={"step": 3}),
    RunEvent("run_nan_stop", "r-nan", "stopped", "reason.stopped_on_nan"),
    RunEvent("run_stalled", "r-stall", "running", "health.stall.problem", {"gpus": 2, "seconds": "30"}),
    RunEvent("sweep_finished", "", "finished", figures={"runs": 4, "best_run": "lr-2e-4"}, sweep_id="sw-1"),
]


def test_the_shape_follows_the_host_and_only_the_host_is_ever_shown():
    assert kind_for("https://hooks.slack.com/services/T/B/X") == "slack"
    assert kind_for("https://open.feishu.cn/open-apis/bot/v2/hook/abc") == "feishu"
    assert kind_for("https://open.larksuite.com/open-apis/bot/v2/hook/abc") == "feishu"
    assert kind_for("https://oapi.dingtalk.com/robot/send?access_token=abc") == "dingtalk"
    assert kind_for("https://example.com/hook") == "json"
    assert kind_for("https://hooks.slack.com/services/T/B/X", "json") == "json"  # --webhook-kind wins
    assert redact(f"https://hooks.slack.com/services/{SECRET}?a={SECRET}") == "https://hooks.slack.com/…"
    assert redact(f"http://user:pwSECRET@[::1]:8080/{SECRET}") == "http://[::1]:8080/…"
    assert repr(settings(f"https://example.com/{SECRET}")).count("SECRET") == 0


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://example.com/hook", "notify.webhook.not_http"),
        ("file:///etc/passwd", "notify.webhook.not_http"),
        ("javascript:alert(1)", "notify.webhook.not_http"),
        ("example.com/hook", "notify.webhook.not_http"),
        ("https:///hook", "notify.webhook.no_host"),
        ("https://example.com/a b", "notify.webhook.bad_url"),
        ("https://example.com:99999/x", "notify.webhook.bad_url"),
        ("https://example.com/\x00", "notify.webhook.bad_url"),
        (f"http://127.0.0.1:7860/{SECRET}", "notify.webhook.self"),
        (f"http://localhost:7860/{SECRET}", "notify.webhook.self"),
        (f"http://[::1]:7860/{SECRET}", "notify.webhook.self"),
        (f"http://0.0.0.0:7860/{SECRET}", "notify.webhook.self"),
        (f"http://127.9.9.9:7860/{SECRET}", "notify.webhook.self"),
        (f"http://MyBox.lan:7860/{SECRET}", "notify.webhook.self"),  # one of the app's own names
        (f"http://10.0.0.5:7860/{SECRET}", "notify.webhook.self"),  # the address it binds
    ],
)
@pytest.mark.hostile
def test_a_url_that_is_not_http_or_points_at_the_app_is_refused_by_a_message(url, message):
    refusal = check_url(url, "auto", app_port=7860, own_hosts=["10.0.0.5", "mybox.lan"])
    assert refusal is not None and refusal.key == message
    for locale in ("en", "zh-CN"):
        assert "SECRET" not in refusal.text(locale)


def test_a_url_elsewhere_or_on_another_port_is_taken():
    assert check_url("http://127.0.0.1:9000/hook", app_port=7860) is None
    assert check_url("https://hooks.slack.com/services/T/B/X", app_port=443) is None
    assert check_url("https://example.com/x", "teams").key == "notify.webhook.kind"


def test_each_shape_gets_one_post_per_event_with_its_fields(receiver):
    plain = receiver()
    notifier = Notifier(settings(plain.url(), "json", backoff_s=0.01))
    for event in EVENTS:
        notifier.send(event)
    assert notifier.idle(20)
    assert [body["event"] for _, body in plain.posts] == [e.kind for e in EVENTS]
    assert all(path == f"/services/{SECRET}?token={SECRET}" for path, _ in plain.posts)
    finished, failed, nan, stall, sweep = (body for _, body in plain.posts)
    assert finished["run"] == "r-fin" and finished["run_name"] == "lr-1e-4" and finished["state"] == "finished"
    assert finished["figures"] == {"step": 20, "total": 20, "loss": 1.25, "minutes": 3.5}
    assert "lr-1e-4 finished" in finished["text"] and "step 20 of 20" in finished["text"]
    assert failed["cause"]["id"] == "diagnose.gpu_out_of_memory.cause" and "memory" in failed["cause"]["text"]
    assert nan["cause"]["id"] == "reason.stopped_on_nan" and nan["state"] == "stopped"
    assert stall["cause"]["params"] == {"gpus": 2, "seconds": "30"} and "30 s" in stall["cause"]["text"]
    assert sweep["sweep"] == "sw-1" and sweep["figures"]["best_run"] == "lr-2e-4"
    assert notifier.delivered == 5 and notifier.dropped == 0

    chats = {kind: receiver() for kind in ("slack", "feishu", "dingtalk")}
    event = RunEvent("run_failed", "r-x", "failed", "diagnose.gpu_out_of_memory.cause", run_name="a<b>&c")
    for kind, chat in chats.items():
        one = Notifier(settings(chat.url(), kind, "zh-CN"))
        one.send(event)
        assert one.idle(10)
        assert len(chat.posts) == 1, kind
    slack, feishu, dingtalk = (chats[k].posts[0][1] for k in ("slack", "feishu", "dingtalk"))
    assert set(slack) == {"text"} and "a&lt;b&gt;&amp;c" in slack["text"] and "失败" in slack["text"]
    assert feishu["msg_type"] == "text" and set(feishu["content"]) == {"text"} and "a<b>&c" in feishu["content"]["text"]
    assert dingtalk["msgtype"] == "text" and set(dingtalk["text"]) == {"content"} and "原因" in dingtalk["text"]["content"]


def test_a_receiver_that_fails_is_tried_a_bounded_number_of_times(receiver):
    failing, refusing = receiver("500"), receiver("404")
    for server, tries in ((failing, 3), (refusing, 1)):  # a 5xx is tried again, a 4xx is not
        notifier = Notifier(settings(server.url(), tries=3, backoff_s=0.01))
        notifier.send(EVENTS[0])
        assert notifier.idle(20)
        assert len(server.posts) == tries and notifier.delivered == 0 and notifier.dropped == 1


def test_a_receiver_that_hangs_does_not_hold_the_sender(receiver):
    hanging = receiver("hang")
    notifier = Notifier(settings(hanging.url(), timeout_s=0.5, tries=2, backoff_s=0.01), queue_size=3)
    notifier.send(EVENTS[0])
    assert hanging.entered.wait(10)  # the receiver holds the first POST ...
    for event in EVENTS:
        notifier.send(event)  # ... and sends go on returning (a full queue drops, never waits)
    assert notifier.dropped >= 2
    assert notifier.idle(30)  # each try ends at its timeout: bounded
    assert notifier.delivered == 0


def test_the_secret_part_is_never_logged(receiver, caplog):
    caplog.set_level(logging.DEBUG, logger="backend.notify")
    failing = receiver("500")
    for url in (failing.url(), f"http://127.0.0.1:1/{SECRET}?token={SECRET}"):  # answered 500; refused
        notifier = Notifier(settings(url, tries=2, backoff_s=0.01, timeout_s=1))
        notifier.send(EVENTS[1])
        assert notifier.idle(20)
    full = Notifier(settings(failing.url()), queue_size=1)
    failing.mode = "hang"
    for event in EVENTS:
        full.send(event)
    assert "not posted" in caplog.text and "127.0.0.1" in caplog.text
    assert "SECRET" not in caplog.text


STAND_IN = textwrap.dedent(
    """
    import json, os, sys, time
    os.makedirs("output", exist_ok=True)
    losses = [float(v) for v in sys.argv[1].split(",")]
    with open("output/trainer_log.jsonl", "a") as log:
        for step, loss in enumerate(losses, 1):
            log.write(json.dumps({"current_steps": step, "total_steps": len(losses), "loss": loss}) + "\\n")
            log.flush()
    if sys.argv[2] == "adapter":
        for name in ("adapter_model.safetensors", "adapter_config.json"):
            with open(os.path.join("output", name), "w") as f:
                f.write("{}")
        sys.exit(0)
    if sys.argv[2] == "oom":
        print("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB", flush=True)
        sys.exit(1)
    time.sleep(60)
    """
)


def launch(board: RocBoard, name: str, losses: str, then: str, stop_on_nan: bool = False) -> str:
    state = board.store.create(name, "cpu-demo", "m", {"config.yaml": "", "train.log": ""})
    board.store.update(state.id, stop_on_nan=stop_on_nan)
    board.run_manager.launch(state.id, {}, command=[sys.executable, "-c", STAND_IN, losses, then])
    return state.id


def child_environment(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as handle:
        return dict(item.decode().partition("=")[::2] for item in handle.read().split(b"\0") if item)


def test_run_ends_are_posted_while_a_hanging_receiver_holds_nothing_up(tmp_path, receiver, monkeypatch):
    """A finished run whose webhook hangs: its end and adapter zip are recorded while the
    receiver still holds the POST; then, with a receiver that answers, a failure (with its
    diagnosed cause) and a NaN stop, each posted once, with the run's own figures. The app's
    ROCBOARD_WEBHOOK_URL is not in the trainer's environment."""
    monkeypatch.setenv(ENV_URL, f"http://127.0.0.1:9/{SECRET}")
    hanging = receiver("hang")
    notifier = Notifier(settings(hanging.url(), timeout_s=15, tries=1))
    board = RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports", lf_cache=LlamaFactoryCheckCache(check=lambda args: []), notifier=notifier)
    try:
        run_id = launch(board, "quick", "2.0,1.5", "adapter")
        assert ENV_URL not in child_environment(board.store.read(run_id).pid)
        wait_until(lambda: (board.store.run_dir(run_id) / ADAPTER_ZIP).is_file(), 20, what="the run's end dealt with")
        assert hanging.entered.wait(10)
        assert board.store.read(run_id).state == "finished" and not hanging.release.is_set()
        assert hanging.posts[0][1]["event"] == "run_finished" and hanging.posts[0][1]["figures"]["step"] == 2
        hanging.release.set()
        assert notifier.idle(20)

        answering = receiver("ok")
        board.notifier.webhook = settings(answering.url())
        failed = launch(board, "oom", "3.0", "oom")
        wait_until(lambda: len(answering.posts) >= 1, 20, what="the failure posted")
        nan = launch(board, "diverges", "2.5,nan", "sleep", stop_on_nan=True)
        wait_until(lambda: len(answering.posts) >= 2, 30, what="the NaN stop posted")
        assert notifier.idle(10)
        (_, fail), (_, stopped) = answering.posts
        assert (fail["event"], fail["run"], fail["state"], fail["cause"]["id"]) == ("run_failed", failed, "failed", "diagnose.gpu_out_of_memory.cause")
        assert fail["figures"]["step"] == 1 and fail["figures"]["loss"] == 3.0
        assert (stopped["event"], stopped["run"], stopped["state"]) == ("run_nan_stop", nan, "stopped")
        assert len(answering.posts) == 2  # one word per end
        # The tabs' notifications read the same events, in their language.
        recent = board.notices(0, "zh-CN")["events"]
        assert [e["kind"] for e in recent] == ["run_finished", "run_failed", "run_nan_stop"] and "已完成" in recent[0]["title"]
    finally:
        for state in board.store.list():
            if state.active:
                board.stop(state.id)


def test_the_webhook_url_is_not_a_childs_to_inherit(monkeypatch):
    monkeypatch.setenv(ENV_URL, f"https://hooks.slack.com/services/{SECRET}")
    assert ENV_URL not in child_env()


def test_the_app_refuses_a_bad_webhook_url_before_it_starts(capsys, monkeypatch):
    from ui.serve import serve_main

    assert serve_main(["--port", "7999", "--webhook-url", f"http://localhost:7999/{SECRET}"]) == 2
    said = capsys.readouterr().err
    assert "points at this app itself" in said and "http://localhost:7999/…" in said and "SECRET" not in said
    monkeypatch.setenv(ENV_URL, f"gopher://example.com/{SECRET}")
    assert serve_main(["--lang", "zh-CN"]) == 2
    said = capsys.readouterr().err
    assert "回调地址" in said and "SECRET" not in said
    assert ENV_URL not in os.environ  # read once, gone from the app's environment


def ask(board: RocBoard, query: bytes, method: str = "GET") -> tuple[int, bytes]:
    from ui.notify import NoticeRoutes

    sent: list[dict] = []

    async def inner(scope, receive, send):
        raise AssertionError("not the notices route")

    async def receive():
        return {"type": "http.request"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": "/rocboard/notices", "method": method, "query_string": query, "headers": []}
    asyncio.run(NoticeRoutes(inner, board)(scope, receive, send))
    return sent[0]["status"], sent[1]["body"]


def test_a_tab_asks_for_the_events_after_its_cursor_in_its_language(tmp_path):
    board = RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports")
    status, body = ask(board, b"lang=en")
    assert status == 200 and json.loads(body) == {"seq": 0, "events": []}  # the first question: a cursor
    board.notifier.send(RunEvent("run_failed", "r1", "failed", "diagnose.gpu_out_of_memory.cause", run_name="<img src=x onerror=alert(1)>"))
    board.notifier.send(EVENTS[0])
    answer = json.loads(ask(board, b"after=0&lang=zh-CN")[1])
    assert answer["seq"] == 2 and [e["seq"] for e in answer["events"]] == [1, 2]
    assert answer["events"][0]["title"] == "运行 <img src=x onerror=alert(1)> 失败"  # plain text: the Notification API renders no markup
    assert json.loads(ask(board, b"after=2&lang=en")[1])["events"] == []
    assert json.loads(ask(board, b"after=99&lang=en")[1]) == {"seq": 2, "events": []}  # a cursor from before a restart
    assert ask(board, b"after=x")[0] == 400 and ask(board, b"run=1")[0] == 400
    assert ask(board, b"after=1", method="POST")[0] == 405


def test_a_stall_alert_is_posted_once_with_its_words(tmp_path, receiver):
    """The stall of test_health_training.py (a stand-in that never logs, its simulated GPUs gone
    idle after training): its alert is posted once, its cause the alert's own message."""
    from backend.health import HealthSettings
    from backend.telemetry.fake_sysfs import build_fake_sysfs, server_cards, set_load
    from backend.telemetry.sampler import Sampler

    gib = 2**30
    gpus = build_fake_sysfs(tmp_path / "sys", server_cards(2), bmc_vga=False)
    set_load(gpus, {0: (20 * gib, 92), 1: (20 * gib, 90)})
    answering = receiver("ok")
    sampler = Sampler(interval_s=0.25, sysfs_root=gpus)
    sampler.start()
    board = RocBoard(tmp_path / "runs", sampler=sampler, export_dir=tmp_path / "exports", health=HealthSettings(stall_s=1.0), notifier=Notifier(settings(answering.url())))
    state = board.store.create("hung", "mi250", "m", {"config.yaml": "", "train.log": ""})
    board.run_manager.launch(state.id, {}, command=[sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        wait_until(lambda: (board.decisions.health_seen(state.id) or 0) > 0, 30, what="the health watch's first reading")
        seen = board.decisions.health_seen(state.id) or 0
        wait_until(lambda: (board.decisions.health_seen(state.id) or 0) > seen, 30, what="a reading of the GPUs training")
        set_load(gpus, {0: (None, 0), 1: (None, 0)})
        wait_until(lambda: answering.posts, 30, what="the stall's POST")
        stalled_at = board.decisions.health_seen(state.id) or 0
        wait_until(lambda: (board.decisions.health_seen(state.id) or 0) > stalled_at + 2, 30, what="readings after the alert")
        assert board.notifier.idle(10)
        [(_, body)] = answering.posts  # once per episode
        assert (body["event"], body["run"], body["state"], body["cause"]["id"]) == ("run_stalled", state.id, "running", "health.stall.problem")
        assert body["cause"]["params"]["gpus"] == 2 and "communication hang" in body["cause"]["text"]
    finally:
        board.stop(state.id)
        sampler.stop()


def test_the_apps_help_prints_with_the_webhook_flags(capsys):
    """`python app.py --help` prints (argparse formats each help with %: a bare % broke it)."""
    from ui.serve import parse_args

    with pytest.raises(SystemExit) as ended:
        parse_args(["--help"])
    assert ended.value.code == 0
    printed = capsys.readouterr().out
    assert "--webhook-url URL" in printed and "--webhook-kind" in printed and "busy below this % is idle" in printed
