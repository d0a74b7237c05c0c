"""Back off from a source that keeps failing, so a broken tool is not re-run every second."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Backoff:
    """Consecutive-failure counter with an exponential, capped pause.

    After `threshold` failures in a row the source is skipped for `base_s`, then twice that
    after the next failure, and so on up to `cap_s`. One success clears it.
    """

    threshold: int = 3
    base_s: float = 2.0
    cap_s: float = 60.0
    failures: int = 0
    until: float = 0.0  # monotonic time before which the source is skipped
    last_error: str = ""

    def ready(self, now: float) -> bool:
        return now >= self.until

    def succeeded(self) -> None:
        self.failures = 0
        self.until = 0.0
        self.last_error = ""

    def failed(self, now: float, error: str) -> None:
        self.failures += 1
        self.last_error = error
        if self.failures >= self.threshold:
            self.until = now + self.pause_s

    @property
    def pause_s(self) -> float:
        """How long the current pause is (0 below the threshold)."""
        if self.failures < self.threshold:
            return 0.0
        return min(self.cap_s, self.base_s * 2 ** (self.failures - self.threshold))

    @property
    def backed_off(self) -> bool:
        return self.failures >= self.threshold
