"""A login given as $ROCBOARD_AUTH is gone from the app's environment once it is read, on a
real `python app.py` process.

What can be seen from outside, and what each check here stands for:

- a child the app starts afterwards *without* `child_env` (a library's own child: Gradio's
  share tunnel is started with the inherited environment; a plugin; `os.system`). Its
  `/proc/<pid>/environ` is what execve gave it: the app's environment at that moment. This
  is the check that matters: every child RocBoard starts itself already gets the allow-list
  (tests/test_child_env.py), and this one proves the variable is no longer there to inherit.
- the app's own `os.environ` and libc's `getenv` (what any Python or C code inside the
  process would read later), reported by the process itself.
- the app's own `/proc/<pid>/environ`. Linux shows there the block the process was started
  with, which unsetenv() does not touch; the app masks the value there with "*" (another
  process of the same user may read that file where Yama forbids reading the app's memory),
  keeping every other variable of the block readable.

The app runs under a small wrapper (`runpy` of app.py in the same process) that, when the
test asks, starts `sleep` with the inherited environment and writes what it sees.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import psutil
import pytest

from tests.harness import AppServer, http_get, wait_until
from tests.tiers import starts

USER = "rocboard-env-tester"
PASSWORD = "Pw-env-7c2e-Kx40-never-inherited"

WRAPPER = textwrap.dedent(
    '''
    import ctypes, json, os, runpy, subprocess, sys, threading, time
    from pathlib import Path

    trigger, app = Path(sys.argv[1]), sys.argv[2]


    def watch():
        while not trigger.exists():
            time.sleep(0.1)
        # No env=: the child inherits the process's environment as it is now.
        child = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)
        libc = ctypes.CDLL(None)
        libc.getenv.restype = ctypes.c_char_p
        report = {
            "child": child.pid,
            "os_environ": sorted(name for name in os.environ if name.startswith("ROCBOARD_AUTH")),
            "getenv": [name for name in ("ROCBOARD_AUTH", "ROCBOARD_AUTH_FILE") if libc.getenv(name.encode()) is not None],
        }
        partial = trigger.with_suffix(".partial")
        partial.write_text(json.dumps(report))
        partial.rename(trigger.with_suffix(".json"))


    threading.Thread(target=watch, daemon=True).start()
    sys.argv = [app, *sys.argv[3:]]
    sys.path.insert(0, os.path.dirname(app))
    runpy.run_path(app, run_name="__main__")
    '''
)


class WrappedApp(AppServer):
    """`python app.py ...` run by WRAPPER, in the same process."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.wrapper = self.workdir / "wrapper.py"
        self.wrapper.write_text(WRAPPER, encoding="utf-8")
        self.trigger = self.workdir / "spawn-now"

    def command(self) -> list[str]:
        python, app, *rest = super().command()
        return [python, str(self.wrapper), str(self.trigger), app, *rest]

    def spawn_inheriting_child(self) -> dict:
        self.trigger.write_text("")
        report = self.trigger.with_suffix(".json")
        wait_until(report.exists, 30, what="the wrapper's report")
        return json.loads(report.read_text())


def environ_bytes(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


def test_forgetting_the_login_takes_both_names_out_of_a_mapping() -> None:
    from backend.security import forget_login_env

    env = {"ROCBOARD_AUTH": "u:p", "ROCBOARD_AUTH_FILE": "/run/secrets/login", "PATH": "/bin"}
    assert forget_login_env(env) is False  # not this process's environment: no block to mask
    assert env == {"PATH": "/bin"}
    assert forget_login_env(env) is False and env == {"PATH": "/bin"}  # nothing to forget twice


@pytest.mark.hostile
@starts("app_server")
def test_a_login_from_the_environment_is_gone_from_it_once_read() -> None:
    env = {"ROCBOARD_AUTH": f"{USER}:{PASSWORD}", "ROCBOARD_WARM_START": "0"}
    with WrappedApp("--no-warm-start", host="0.0.0.0", env=env) as server:
        # The login was read: a reachable address is served, anonymous calls get 401, the
        # password opens the API.
        assert http_get(server.port, "/config")[0] == 401
        status, headers, _ = http_get(
            server.port, "/login", method="POST", headers={"Content-Type": "application/x-www-form-urlencoded"}, body=f"username={USER}&password={PASSWORD}".encode()
        )
        assert status == 200 and headers.get("set-cookie")
        report = server.spawn_inheriting_child()
        try:
            child_environ = wait_until(lambda: (seen := environ_bytes(report["child"])) and b"PATH=" in seen and seen, 10, what="the child's environ")
            assert b"ROCBOARD_AUTH=" not in child_environ and PASSWORD.encode() not in child_environ
            assert report["os_environ"] == [] and report["getenv"] == []
            assert PASSWORD.encode() not in environ_bytes(server.process.pid)
            # The block is still one NAME=VALUE list: what came after the login is still read.
            assert psutil.Process(server.process.pid).environ()["ROCBOARD_WARM_START"] == "0"
            # Every other process the app started by then (its own children, each with child_env).
            for process in psutil.Process(server.process.pid).children(recursive=True):
                try:
                    assert PASSWORD.encode() not in environ_bytes(process.pid), process.cmdline()
                except (FileNotFoundError, ProcessLookupError):
                    pass  # ended meanwhile
        finally:
            psutil.Process(report["child"]).kill()
        # And it still is the password: reading it once was enough.
        status, headers, _ = http_get(
            server.port, "/login", method="POST", headers={"Content-Type": "application/x-www-form-urlencoded"}, body=f"username={USER}&password={PASSWORD}".encode()
        )
        assert status == 200 and headers.get("set-cookie")
        assert PASSWORD not in server.output()
