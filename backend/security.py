"""Safe by default: loopback unless auth is configured; credentials never echoed."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

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


def parse_credentials(text: str, where: str) -> Credentials:
    user, sep, password = text.strip().partition(":")
    if not sep or not user or not password:
        raise AuthError(f"{where} must read USER:PASSWORD (both non-empty).")
    return Credentials(user, password)


def resolve_credentials(auth: str | None, auth_file: str | None, env: Mapping[str, str] = os.environ) -> Credentials | None:
    """From --auth, else --auth-file, else $ROCBOARD_AUTH, else $ROCBOARD_AUTH_FILE."""
    if auth:
        return parse_credentials(auth, "--auth")
    file = auth_file or env.get(AUTH_FILE_ENV)
    if file:
        try:
            text = Path(file).read_text(encoding="utf-8")
        except OSError as error:
            raise AuthError(f"cannot read the auth file {file}: {error.strerror}.") from None
        return parse_credentials(text, f"the auth file {file}")
    if env.get(AUTH_ENV):
        return parse_credentials(env[AUTH_ENV], f"${AUTH_ENV}")
    return None


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
