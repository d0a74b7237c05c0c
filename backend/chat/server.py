"""One chat server: LLaMA-Factory's API server for one model, in a child process of ours
(backend/chat/api_worker.py), on 127.0.0.1, a free port and a one-time key.

Starts it, tells how far its load got, streams answers from it, and stops it (the whole
process tree, with a bounded wait). The web process never imports llamafactory: it talks
to the server over HTTP with the standard library."""

from __future__ import annotations

import http.client
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.chat.stream import MAX_EVENT_LINE_BYTES, parse_load_failure, parse_load_stage, parse_sse_line
from backend.child_process import close_and_wait
from backend.runs import safe_files
from backend.runs.launcher import OFFLINE_ENV, ProcessIdentity, stop_tree
from backend.security.child_env import child_env

WORKER = Path(__file__).resolve().with_name("api_worker.py")
WORKER_MARK = "api_worker.py"  # in every chat server's command line (tests count them by it)
HOST = "127.0.0.1"  # never another interface: the server must not be reachable from another host
LOG_TAIL_BYTES = 64 * 1024
STOP_WAIT_S = 3.0  # after stdin closes, before signals
REQUEST_TIMEOUT_S = 300.0  # one read of the stream: a token on a slow machine, bounded


@dataclass(frozen=True)
class GenerationSettings:
    """What the page sets for one answer, within bounds the server accepts."""

    temperature: float = 0.7
    top_p: float = 0.9
    max_new_tokens: int = 256

    MIN_TEMPERATURE = 0.0
    MAX_TEMPERATURE = 2.0
    MAX_NEW_TOKENS = 4096

    def bounded(self) -> GenerationSettings:
        def number(value: Any, low: float, high: float, default: float) -> float:
            try:
                v = float(value)  # anything: what is not a number is the default
            except (TypeError, ValueError):
                return default
            return default if v != v else min(high, max(low, v))

        return GenerationSettings(
            temperature=number(self.temperature, self.MIN_TEMPERATURE, self.MAX_TEMPERATURE, 0.7),
            top_p=number(self.top_p, 0.01, 1.0, 0.9),
            max_new_tokens=int(number(self.max_new_tokens, 1, self.MAX_NEW_TOKENS, 256)),
        )

    def request_fields(self) -> dict[str, object]:
        """LLaMA-Factory's request fields (llamafactory/api/protocol.py): temperature 0 means
        greedy decoding, which it takes as do_sample false."""
        s = self.bounded()
        if s.temperature <= 0.0:
            return {"do_sample": False, "max_tokens": s.max_new_tokens}
        return {"do_sample": True, "temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_new_tokens}


@dataclass(frozen=True)
class ServerSpec:
    """Which model one server loads."""

    model_path: str
    template: str
    adapter_path: str = ""  # "" for the base model alone
    finetuning_type: str = "lora"

    def arguments(self) -> list[str]:
        args = ["--model_name_or_path", self.model_path, "--template", self.template, "--infer_backend", "huggingface"]
        if self.adapter_path:
            args += ["--adapter_name_or_path", self.adapter_path, "--finetuning_type", self.finetuning_type]
        return args


class StreamBroken(Exception):
    """The answer stopped before the server said it was complete."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def server_env(port: int, key: str, base: dict[str, str] | None = None, gpu: int | None = None) -> dict[str, str]:
    """The server's environment: a trainer's offline switches, the address to bind to, and
    the key; its GPU, side by side (HIP_ and CUDA_VISIBLE_DEVICES as a run's, never ROCR_:
    docs/multi-gpu.md), else no GPU hidden or chosen by us beyond what the app's own
    environment says."""
    own = {**OFFLINE_ENV, "API_HOST": HOST, "API_PORT": str(port)}
    if gpu is not None:
        own["HIP_VISIBLE_DEVICES"] = own["CUDA_VISIBLE_DEVICES"] = str(int(gpu))
    env = child_env(base, (), own)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    # child_env drops secret-looking names (API_KEY) even from RocBoard's own settings. This
    # key is RocBoard's own one-time key for this server, made here, not a user's secret
    # inherited from anywhere: it is set on purpose, after child_env.
    env["API_KEY"] = key
    return env


@dataclass
class ChatServer:
    """A running (or loading) server; `which` is "adapter" or "base"."""

    which: str
    spec: ServerSpec
    run_dir: Path
    log_relative: str
    port: int = 0
    key: str = ""
    process: subprocess.Popen | None = None
    identity: ProcessIdentity | None = None
    started_at: float = field(default_factory=time.monotonic)
    ready_after_s: float | None = None

    @classmethod
    def start(cls, which: str, spec: ServerSpec, run_dir: Path, log_relative: str, env_base: dict[str, str] | None = None, gpu: int | None = None) -> ChatServer:
        server = cls(which, spec, run_dir, log_relative, port=free_port(), key=secrets.token_urlsafe(24))
        log_fd = safe_files.open_in_run(run_dir, log_relative, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            server.process = subprocess.Popen(
                [sys.executable, str(WORKER), *spec.arguments()],
                stdin=subprocess.PIPE,  # our end closes when this process dies: the worker exits
                stdout=log_fd,
                stderr=subprocess.STDOUT,
                env=server_env(server.port, server.key, env_base, gpu),
                cwd=str(run_dir),
                start_new_session=True,  # Ctrl-C in a terminal reaches us, we stop it in order
            )
        finally:
            os.close(log_fd)
        server.started_at = time.monotonic()
        server.identity = ProcessIdentity.of(server.process.pid)  # None: gone already, its log says why
        return server

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self) -> str:
        try:
            return safe_files.read_tail(self.run_dir, self.log_relative, LOG_TAIL_BYTES).decode("utf-8", "replace")
        except OSError:
            return ""

    def stage(self) -> str:
        return parse_load_stage(self.log_tail())

    def failure(self):
        return parse_load_failure(self.log_tail())

    def answers(self, timeout: float = 2.0) -> bool:
        """GET /v1/models with the key answers 200: the model is loaded and serving."""
        try:
            connection = http.client.HTTPConnection(HOST, self.port, timeout=timeout)
            try:
                connection.request("GET", "/v1/models", headers={"Authorization": f"Bearer {self.key}"})
                return connection.getresponse().status == 200
            finally:
                connection.close()
        except (OSError, http.client.HTTPException):
            return False

    def stop(self) -> None:
        """Closes its stdin (the worker exits on its own), then signals the tree; bounded."""
        process = self.process
        if process is None:
            return
        identity = self.identity
        close_and_wait(process, STOP_WAIT_S, 2.0, before_kill=(lambda: stop_tree(identity, graceful_s=0.0, term_s=2.0)) if identity is not None else None)

    def stream(self, messages: list[dict[str, str]], settings: GenerationSettings, cancelled=lambda: False) -> Iterator[str]:
        """The answer's text deltas as the server generates them. Raises StreamBroken when
        the stream ends before [DONE] (the server died, or cut the answer)."""
        body = json.dumps({"model": "rocboard", "messages": messages, "stream": True, **settings.request_fields()}).encode()
        connection = http.client.HTTPConnection(HOST, self.port, timeout=REQUEST_TIMEOUT_S)
        try:
            try:
                connection.request(
                    "POST",
                    "/v1/chat/completions",
                    body=body,
                    headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
                )
                response = connection.getresponse()
            except (OSError, http.client.HTTPException) as error:
                raise StreamBroken(str(error)) from error
            if response.status != 200:
                raise StreamBroken(f"HTTP {response.status}: {response.read(2000).decode('utf-8', 'replace')}")
            while not cancelled():
                try:
                    raw = response.readline(MAX_EVENT_LINE_BYTES)
                except (OSError, http.client.HTTPException) as error:
                    raise StreamBroken(str(error)) from error
                if not raw:
                    raise StreamBroken("the stream ended before the answer was complete")
                try:
                    chunk = parse_sse_line(raw.decode("utf-8", "replace"))
                except ValueError as error:
                    raise StreamBroken(f"not the server's answer: {error}") from error
                if chunk is None:
                    continue
                if chunk.done:
                    return
                if chunk.content:
                    yield chunk.content
        finally:
            connection.close()


__all__ = ["ChatServer", "GenerationSettings", "HOST", "ServerSpec", "StreamBroken", "WORKER_MARK", "free_port", "server_env"]
