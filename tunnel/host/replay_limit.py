"""How fast one channel's catch-up may go: a token bucket of snapshot bytes, with no I/O.

A `subscribe` from a cursor replays everything after it, so a teammate repeating `subscribe
after:-1` would make the host send its whole log again and again. Each channel's replay spends
from its own bucket (`burst` bytes, refilled at `rate` bytes a second); a page beyond it waits
until the bucket has refilled, so a channel costs the host's uplink at most `burst` plus `rate`
a second of replay, however often it asks (docs/application.md, "Catch-up").
"""

from __future__ import annotations

REPLAY_BURST = 8 * 1024 * 1024
"""Bytes of replay a channel may send at once: a long log's catch-up after a reconnect."""

REPLAY_RATE = 1024 * 1024
"""Bytes a second a channel's replay budget refills by."""


class ReplayLimit:
    """One channel's replay budget. The caller passes the time; nothing here sleeps."""

    def __init__(self, *, now: float, burst: int = REPLAY_BURST, rate: float = REPLAY_RATE) -> None:
        if burst < 1 or rate <= 0:
            raise ValueError("a replay limit needs a positive burst and rate")
        self._burst = burst
        self._rate = rate
        self._tokens = float(burst)
        self._at = now

    def take(self, size: int, now: float) -> float:
        """Spend `size` bytes sent at `now`; return the seconds the caller must wait before
        sending them (0.0 within the budget). A page larger than the whole burst is allowed, and
        paid for by waiting: the budget may go into debt, never the host's uplink."""
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        self._tokens -= size
        return 0.0 if self._tokens >= 0 else -self._tokens / self._rate
