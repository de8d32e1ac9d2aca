"""A teammate that stops reading slows only its own channel, and the relay's memory stays flat."""

from __future__ import annotations

from pathlib import Path

import anyio
import psutil
import pytest

from tests.support import RelayProcess, host_settings, running_host
from tunnel.teammate.client import TeammateSession, connect_teammate

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]
RELAY_FRAMINGS = True
"""Tests that take `relay` run on websockets and on picows (tests/relay/conftest.py)."""

STALL_SECONDS = 10.0
MEASURE_SECONDS = 2.5
FLOOD_MESSAGES = 100
FLOOD_SIZE = 32 * 1024


async def echo_throughput(session: TeammateSession, seconds: float) -> float:
    """Stream 16 KiB messages through the echo host for `seconds`; return echoed bytes/s."""
    payload = b"s" * (16 * 1024)
    counts = {"sent": 0, "echoed": 0}
    done = anyio.Event()
    start = anyio.current_time()

    async def sender() -> None:
        while anyio.current_time() - start < seconds:
            await session.send(payload)
            counts["sent"] += 1
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(sender)
        # Bounded: at most one window of messages is in flight when the sender stops.
        while not (done.is_set() and counts["echoed"] == counts["sent"]):
            assert await session.receive_plaintext() == payload
            counts["echoed"] += 1
    return counts["echoed"] * len(payload) / (anyio.current_time() - start)


def flood_message(index: int) -> bytes:
    return index.to_bytes(4, "big") * (FLOOD_SIZE // 4)


async def test_a_teammate_that_stops_reading_slows_only_itself(
    relay: RelayProcess, tmp_path: Path
) -> None:
    assert relay.proc is not None
    relay_process = psutil.Process(relay.proc.pid)
    async with (
        running_host(host_settings(relay.url, tmp_path)) as host,
        connect_teammate(host.drive_link, name="streamer") as streamer,
    ):
        await echo_throughput(streamer, 0.5)  # warm up
        baseline = await echo_throughput(streamer, MEASURE_SECONDS)
        rss_before = relay_process.memory_info().rss

        async with connect_teammate(host.view_link, name="sleeper") as sleeper:
            sent = 0

            async def flood() -> None:
                nonlocal sent
                for index in range(FLOOD_MESSAGES):
                    await sleeper.send(flood_message(index))
                    sent += 1

            async with anyio.create_task_group() as tg:
                tg.start_soon(flood)
                stall_start = anyio.current_time()
                # Wait until the sleeper's sends block: windows full all along the path.
                previous = -1
                for _ in range(50):
                    await anyio.sleep(0.1)
                    if sent == previous:
                        break
                    previous = sent
                assert sent < FLOOD_MESSAGES, "flow control never pushed back"
                blocked_at = sent

                during = await echo_throughput(streamer, MEASURE_SECONDS)
                elapsed = anyio.current_time() - stall_start
                await anyio.sleep(max(0.0, STALL_SECONDS - elapsed))
                rss_after = relay_process.memory_info().rss
                # The sleeper's sender stayed blocked the whole time.
                assert sent == blocked_at

                # It wakes up: every message comes back, in order, none lost.
                with anyio.fail_after(60):
                    for index in range(FLOOD_MESSAGES):
                        assert await sleeper.receive_plaintext() == flood_message(index)

    print(
        f"\nstreamer echo throughput: alone {baseline / 1e6:.1f} MB/s, "
        f"with a stalled teammate {during / 1e6:.1f} MB/s (ratio {during / baseline:.2f}); "
        f"sleeper blocked after {blocked_at} messages of {FLOOD_SIZE // 1024} KiB"
    )
    print(
        f"relay RSS before stall {rss_before / 2**20:.1f} MiB, "
        f"after {STALL_SECONDS:.0f} s stall {rss_after / 2**20:.1f} MiB"
    )
    # Generous bounds: the CI machine is shared, but a stall must not halve anyone else's rate
    # several times over, and must not grow the relay by more than a few windows.
    assert during > baseline * 0.25
    assert rss_after - rss_before < 16 * 2**20
