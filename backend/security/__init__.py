"""Safe by default: loopback unless auth is configured; credentials never echoed."""

from __future__ import annotations

import ipaddress
import os
import stat
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

AUTH_ENV = "ROCBOARD_AUTH"  # "user:password"
AUTH_FILE_ENV = "ROCBOARD_AUTH_FILE"  # a file holding "user:password"


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str

    def __repr__(self) -> str:  # never print the password, even by accident
        return f"Credentials(user={self.user!r}, password='***')"


class AuthError(ValueError):
    pass


# A login file holds one short line; reading more than this says it is some other file.
AUTH_FILE_MAX_BYTES = 4096


def parse_credentials(text: str, where: str) -> Credentials:
    """One USER:PASSWORD line (surrounding blanks dropped; the password may hold colons).
    The message never repeats the text: it may be a password, or another file's secrets."""
    line = text.strip()
    if "\n" in line or "\r" in line or "\0" in line:
        raise AuthError(f"{where} must be a single USER:PASSWORD line.")
    user, sep, password = line.partition(":")
    if not sep or not user or not password:
        raise AuthError(f"{where} must read USER:PASSWORD (both non-empty).")
    return Credentials(user, password)


def read_auth_file(file: str) -> Credentials:
    """The login in `file`: exactly one USER:PASSWORD line, a trailing newline allowed.

    Anything else (more lines, no colon, not text, longer than AUTH_FILE_MAX_BYTES, not a
    regular file) is refused without reading further or quoting it: `--auth-file /etc/shadow`
    must not turn the rest of root's line into a password."""
    where = f"the auth file {file}"
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (a regular file ignores it).
        with os.fdopen(os.open(file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)), "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise AuthError(f"{where} is not a regular file.")
            data = handle.read(AUTH_FILE_MAX_BYTES + 1)
    except OSError as error:
        raise AuthError(f"cannot read {where}: {error.strerror}.") from None
    if len(data) > AUTH_FILE_MAX_BYTES:
        raise AuthError(f"{where} is longer than {AUTH_FILE_MAX_BYTES} bytes; it must hold one USER:PASSWORD line.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthError(f"{where} is not UTF-8 text; it must hold one USER:PASSWORD line.") from None
    for ending in ("\r\n", "\n"):
        if text.endswith(ending):
            text = text[: -len(ending)]
            break
    if "\n" in text or "\r" in text:
        raise AuthError(f"{where} holds more than one line; it must hold exactly one USER:PASSWORD line.")
    return parse_credentials(text, where)


def resolve_credentials(auth: str | None, auth_file: str | None, env: Mapping[str, str] = os.environ) -> Credentials | None:
    """From --auth, else --auth-file, else $ROCBOARD_AUTH, else $ROCBOARD_AUTH_FILE."""
    if auth:
        return parse_credentials(auth, "--auth")
    file = auth_file or env.get(AUTH_FILE_ENV)
    if file:
        return read_auth_file(file)
    if env.get(AUTH_ENV):
        return parse_credentials(env[AUTH_ENV], f"${AUTH_ENV}")
    return None


def forget_login_env(env: MutableMapping[str, str] = os.environ) -> bool:
    """Removes $ROCBOARD_AUTH and $ROCBOARD_AUTH_FILE from `env` once the login was read, so
    that nothing started later finds them: a child that inherits the environment instead of
    getting child_env's (a library's own child, such as Gradio's share tunnel), or code that
    reads os.environ or getenv(). For the process's own environment, the value is also
    masked in the block the process was started with, which Linux shows as
    /proc/<pid>/environ whatever unsetenv() does. Whether that block was masked (best effort:
    False where /proc/self/mem cannot be written, and when there was no $ROCBOARD_AUTH)."""
    secret = env.pop(AUTH_ENV, None)
    env.pop(AUTH_FILE_ENV, None)
    if secret is None or env is not os.environ:
        return False
    return _mask_start_environ(f"{AUTH_ENV}=".encode())


def _mask_start_environ(prefix: bytes) -> bool:
    """Overwrites with "*" the value of each entry starting with `prefix` (`NAME=`) in this
    process's start-up environment block (between env_start and env_end of /proc/self/stat,
    proc(5) fields 50 and 51). The entry keeps its length and stays one NAME=VALUE string, so
    a reader of the block (psutil stops at an empty entry) still sees every variable after it;
    unsetenv() has already taken it out of libc's list, so nothing reads it there."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])
        with open("/proc/self/mem", "r+b", buffering=0) as memory:
            memory.seek(start)
            block = memory.read(end - start)
            offset = 0
            for entry in block.split(b"\0"):
                if entry.startswith(prefix) and len(entry) > len(prefix):
                    memory.seek(start + offset + len(prefix))
                    memory.write(b"*" * (len(entry) - len(prefix)))
                offset += len(entry) + 1
    except (OSError, ValueError, IndexError):
        return False
    return True


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


def bind_refusal(host: str, credentials: Credentials | None) -> str | None:
    """Why serving on `host` is refused, or None when it is allowed."""
    if is_loopback(host) or credentials is not None:
        return None
    return (
        f"Refusing to listen on {host}: that is reachable from other machines and no login is configured. "
        f"Fix: add --auth USER:PASSWORD (or --auth-file FILE, or set ${AUTH_ENV}), or listen on 127.0.0.1 "
        "and reach it through an SSH tunnel (ssh -L 7860:127.0.0.1:7860 host)."
    )


def share_refusal(share: bool, credentials: Credentials | None) -> str | None:
    """Why asking for a public share link is refused, or None: a gradio.live link reaches the
    page from anywhere, so it needs a login as much as a reachable --host does."""
    if not share or credentials is not None:
        return None
    return (
        "Refusing --share without a login: a share link is reachable from anywhere. "
        f"Fix: add --auth USER:PASSWORD (or --auth-file FILE, or set ${AUTH_ENV}), or drop --share."
    )
