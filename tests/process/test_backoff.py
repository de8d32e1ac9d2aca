"""The one reconnect policy: capped exponential backoff with jitter."""

from __future__ import annotations

import random

from tunnel.process.backoff import HOST_MAX_BACKOFF, JITTER, REFUSED_MAX_BACKOFF, Backoff


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


def test_attempts_refused_at_once_are_capped_low_and_only_timeouts_grow_to_the_full_cap() -> None:
    backoff = Backoff(rng=random.Random(11))
    refused = [backoff.next_delay(refused=True) for _ in range(50)]
    assert max(refused) <= REFUSED_MAX_BACKOFF < HOST_MAX_BACKOFF
    assert min(refused[5:]) >= REFUSED_MAX_BACKOFF * (1 - JITTER)  # jittered below the cap only
    # A relay that starts timing out is waited for from the low cap on, growing to the full cap:
    # fifty refusals did not make its first delay long.
    timeouts = [backoff.next_delay() for _ in range(12)]
    assert timeouts[0] <= REFUSED_MAX_BACKOFF
    assert timeouts[-1] >= HOST_MAX_BACKOFF * (1 - JITTER)
    assert max(timeouts) <= HOST_MAX_BACKOFF


def test_the_refused_cap_never_exceeds_the_full_cap() -> None:
    backoff = Backoff(maximum=0.2, refused_maximum=1.0, rng=random.Random(3))
    assert all(backoff.next_delay(refused=True) <= 0.2 for _ in range(100))
