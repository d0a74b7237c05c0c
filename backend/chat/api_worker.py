"""A chat server: LLaMA-Factory's OpenAI-compatible API server, tied to the web process.

Run by path (`python backend/chat/api_worker.py --model_name_or_path ... --template ...`),
never imported by the web process: it imports llamafactory (torch, transformers). The
arguments are LLaMA-Factory's own, exactly as `llamafactory-cli api` takes them; API_HOST,
API_PORT and API_KEY come from the environment (RocBoard sets 127.0.0.1, a free port and a
one-time key).

Why a worker and not `llamafactory-cli api` itself: nothing may outlive the app, even when
the web process is killed with SIGKILL and cannot stop its children. The web process holds
the write end of this process's stdin; when that process dies, for any reason, the kernel
closes the pipe, the read below sees end-of-file and this process exits at once.
(PR_SET_PDEATHSIG would be tied to the thread that started us, and Gradio starts us from a
worker thread that ends long before the app.)
"""

from __future__ import annotations

import os
import sys
import threading
import traceback


def _exit_when_parent_goes() -> None:
    # The raw descriptor, not sys.stdin: a daemon thread blocked in a buffered reader aborts
    # the interpreter's shutdown ("could not acquire lock for <stdin>").
    try:
        while os.read(0, 4096):
            pass  # the parent never writes; anything it did write is ignored
    except OSError:
        pass
    # os._exit, not sys.exit: uvicorn's loop and the model's threads must not keep us alive.
    os._exit(0)


def main() -> None:
    threading.Thread(target=_exit_when_parent_goes, name="parent-watch", daemon=True).start()
    from llamafactory.api.app import run_api

    # LLaMA-Factory parses its arguments from sys.argv[1:], as after `llamafactory-cli api`.
    try:
        run_api()
    except BaseException:  # a failed load: the traceback is the log's last lines, read by the desk
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)


if __name__ == "__main__":
    main()
