"""`ReplayLimit`: a channel's replay bytes stay within its burst plus its rate, whatever it asks.
Sans-I/O: the test passes the time."""

from __future__ import annotations

import pytest

from tunnel.host.replay_limit import ReplayLimit

PAGE = 100


def test_pages_within_the_burst_go_at_once() -> None:
    limit = ReplayLimit(now=0.0, burst=10 * PAGE, rate=PAGE)
    assert [limit.take(PAGE, 0.0) for _ in range(10)] == [0.0] * 10


def test_a_page_beyond_the_burst_waits_for_the_refill() -> None:
    limit = ReplayLimit(now=0.0, burst=2 * PAGE, rate=PAGE)
    limit.take(2 * PAGE, 0.0)
    assert limit.take(PAGE, 0.0) == pytest.approx(1.0)


def test_repeated_replays_cost_at_most_the_burst_plus_the_rate() -> None:
    burst, rate = 10 * PAGE, PAGE
    limit = ReplayLimit(now=0.0, burst=burst, rate=rate)
    now, sent = 0.0, 0
    for _ in range(1000):  # a teammate repeating its subscribe from the start
        now += limit.take(PAGE, now)
        sent += PAGE
    assert sent <= burst + rate * now + PAGE


def test_an_idle_channel_refills_up_to_the_burst_only() -> None:
    limit = ReplayLimit(now=0.0, burst=2 * PAGE, rate=PAGE)
    limit.take(2 * PAGE, 0.0)
    assert limit.take(2 * PAGE, 1000.0) == 0.0
    assert limit.take(PAGE, 1000.0) > 0.0


def test_a_page_larger_than_the_burst_is_paid_for_by_waiting() -> None:
    limit = ReplayLimit(now=0.0, burst=PAGE, rate=PAGE)
    assert limit.take(3 * PAGE, 0.0) == pytest.approx(2.0)


@pytest.mark.parametrize(("burst", "rate"), [(0, 1.0), (1, 0.0)])
def test_a_limit_needs_a_positive_burst_and_rate(burst: int, rate: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        ReplayLimit(now=0.0, burst=burst, rate=rate)
