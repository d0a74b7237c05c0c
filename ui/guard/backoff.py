"""The login back-off: wrong passwords from one client address (an IPv6 client's /64) earn a
growing wait (429), counted before any answer, bounded in the clients it remembers.
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass


def client_key(address: str | None) -> str:
    """The back-off table's key for a client address: an IPv6 client is its /64 (one host
    commonly owns a whole /64, and would otherwise get a fresh key per address)."""
    if not address:
        return "unknown"
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{ip}/64", strict=False))
    return str(ip)


@dataclass
class _Attempts:
    failures: int = 0
    blocked_until: float = 0.0
    last: float = 0.0


class LoginBackoff:
    """Per-client login attempts. Every attempt counts as a failure until it succeeds (so a
    burst sent at once is counted before any answer); from the `free_attempts`-th failure on,
    the client waits `first_delay_s`, doubling each time up to `max_delay_s`, and any attempt
    in that time (the right password included) is refused. A success forgets the client; so
    does an hour without attempts. At most `max_clients` are remembered (least recent first
    out, a client still waiting kept over one that is not)."""

    def __init__(
        self,
        free_attempts: int = 5,
        first_delay_s: float = 2.0,
        max_delay_s: float = 900.0,
        forget_after_s: float = 3600.0,
        max_clients: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.free_attempts = free_attempts
        self.first_delay_s = first_delay_s
        self.max_delay_s = max_delay_s
        self.forget_after_s = forget_after_s
        self.max_clients = max_clients
        self.clock = clock
        self._clients: OrderedDict[str, _Attempts] = OrderedDict()

    def __len__(self) -> int:
        return len(self._clients)

    def delay_after(self, failures: int) -> float:
        if failures < self.free_attempts:
            return 0.0
        return min(self.max_delay_s, self.first_delay_s * 2 ** min(failures - self.free_attempts, 32))

    def begin(self, client: str) -> float:
        """0 when this attempt may go on (it counts as a failure until `succeeded`), else the
        seconds the client has left to wait."""
        now = self.clock()
        entry = self._clients.get(client)
        if entry is not None and now < entry.blocked_until:
            return entry.blocked_until - now
        if entry is None or now - entry.last > self.forget_after_s:
            entry = self._clients[client] = _Attempts()
        self._clients.move_to_end(client)
        entry.last = now
        entry.failures += 1
        delay = self.delay_after(entry.failures)
        if delay:
            entry.blocked_until = now + delay
        self._trim(now)
        return 0.0

    def succeeded(self, client: str) -> None:
        self._clients.pop(client, None)

    def _trim(self, now: float) -> None:
        while len(self._clients) > self.max_clients:
            victim = next((key for key, entry in self._clients.items() if entry.blocked_until <= now), None)
            if victim is None:
                self._clients.popitem(last=False)
            else:
                del self._clients[victim]
