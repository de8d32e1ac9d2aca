"""The one reconnect policy: capped exponential backoff with jitter."""

from __future__ import annotations

import random

from tunnel.process.backoff import Backoff


def test_backoff_grows_is_capped_jittered_and_resets() -> None:
    backoff = Backoff(initial=0.5, maximum=4.0, rng=random.Random(7))
    delays = [backoff.next_delay() for _ in range(10)]
    ceilings = [min(4.0, 0.5 * 2**n) for n in range(10)]
    assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    assert len(set(delays)) == len(delays)  # jittered
    backoff.reset()
    assert backoff.next_delay() <= 0.5
    for _ in range(10_000):
        assert backoff.next_delay() <= 4.0
