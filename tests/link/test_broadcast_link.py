"""The host's broadcast at the link layer: casts among a channel's data, `send_sealed(then=)` and
`Link.wait_writable` (docs/protocol.md, "Broadcast").

In `linked()` the dialer stands for a host or a teammate and the accepter for the relay, so the
accepter casts to a channel (`send_cast`, `cut`) and the dialer casts without one and joins.
"""

from __future__ import annotations

from functools import partial

import anyio
import pytest

from tests.link.memory_websocket import Endpoint, linked
from tunnel.handshake import CAST_GROUPS
from tunnel.link import Casted, LinkChannel
from tunnel.proto import (
    MAX_CAST_GROUPS,
    CastJoined,
    CastReceived,
    DataReceived,
    Limits,
    LocalProtocolError,
    WindowUpdated,
)

pytestmark = pytest.mark.anyio

WINDOW = 100
SMALL_WINDOW = Limits(initial_window=WINDOW)


async def open_pair(dialer: Endpoint, accepter: Endpoint) -> tuple[LinkChannel, LinkChannel]:
    """Open a channel from the dialer; return (dialer's end, accepter's end)."""
    ours = dialer.mux.open_channel("session", {})
    theirs = await accepter.mux.accept()
    return ours, theirs


def send_cast(relay: Endpoint, channel: int, data: bytes) -> None:
    assert relay.link.connection.send_cast(channel, data)
    relay.link.flush()


def cut(relay: Endpoint, channel: int) -> None:
    relay.link.connection.cut(channel)
    relay.link.flush()


# -- receiving casts ------------------------------------------------------------------------------


async def test_receive_skips_casts_and_acknowledges_their_bytes() -> None:
    with anyio.fail_after(10):
        async with linked(limits=SMALL_WINDOW) as (teammate, relay):
            ours, theirs = await open_pair(teammate, relay)
            # Two casts take the channel's whole window: the relay's data must wait for it.
            send_cast(relay, ours.id, b"c" * 60)
            send_cast(relay, ours.id, b"c" * 40)
            assert relay.link.connection.send_window(ours.id) == 0
            async with anyio.create_task_group() as tg:
                tg.start_soon(theirs.send, b"after the casts")
                # receive() skips both casts, and acknowledging them lets the data through.
                assert await ours.receive() == b"after the casts"
            await relay.log.wait_for(
                lambda events: WindowUpdated(channel=ours.id, available=WINDOW) in events
            )


async def test_receive_any_returns_casts_and_cuts_in_arrival_order_with_data() -> None:
    with anyio.fail_after(10):
        async with linked(limits=SMALL_WINDOW) as (teammate, relay):
            ours, theirs = await open_pair(teammate, relay)
            await theirs.send(b"d1")
            send_cast(relay, ours.id, b"c1")
            await theirs.send(b"d2")
            cut(relay, ours.id)
            send_cast(relay, ours.id, b"c2")
            await theirs.send(b"d3")
            received = [await ours.receive_any() for _ in range(6)]
            assert received == [
                b"d1",
                Casted(b"c1"),
                b"d2",
                Casted(None),
                Casted(b"c2"),
                b"d3",
            ]
            # Everything read is acknowledged, casts included: the window is whole again.
            await relay.log.wait_for(
                lambda events: WindowUpdated(channel=ours.id, available=WINDOW) in events
            )
            assert relay.link.connection.send_window(ours.id) == WINDOW


async def test_a_cast_for_a_channel_closed_here_is_not_delivered() -> None:
    with anyio.fail_after(10):
        async with linked(limits=SMALL_WINDOW) as (teammate, relay):
            ours, _ = await open_pair(teammate, relay)
            other, other_theirs = await open_pair(teammate, relay)
            send_cast(relay, ours.id, b"crossing")
            ours.close_soon()
            await other_theirs.send(b"marker")
            assert await other.receive_any() == b"marker"
            assert [e for e in teammate.log.events if isinstance(e, CastReceived)] == []


# -- send_sealed(then=) ----------------------------------------------------------------------------


@pytest.mark.parametrize("wait_for_window", [False, True], ids=["at-once", "after-waiting"])
async def test_send_sealed_runs_then_right_after_queueing(wait_for_window: bool) -> None:
    with anyio.fail_after(10):
        async with linked(limits=SMALL_WINDOW) as (host, relay):
            ours, theirs = await open_pair(host, relay)
            connection = host.link.connection
            steps: list[str] = []

            def seal() -> bytes:
                steps.append("seal")
                return b"m" * 50

            def then() -> None:
                # The message is queued, and nothing after it yet: the join follows it directly.
                assert connection.send_window(ours.id) == WINDOW - 50
                steps.append("then")
                ours.join_broadcast()

            if wait_for_window:
                await ours.send(b"x" * WINDOW)
            async with anyio.create_task_group() as tg:
                tg.start_soon(partial(ours.send_sealed, 50, seal, then=then))
                await anyio.wait_all_tasks_blocked()
                assert steps == ([] if wait_for_window else ["seal", "then"])
                # A later send on the same channel queues behind the message and its join.
                tg.start_soon(ours.send, b"later")
                if wait_for_window:
                    assert await theirs.receive() == b"x" * WINDOW
            assert steps == ["seal", "then"]
            later = DataReceived(channel=ours.id, data=b"later")
            await relay.log.wait_for(lambda events: later in events)
            arrived = [e for e in relay.log.events if isinstance(e, DataReceived | CastJoined)]
            assert arrived[-3:] == [
                DataReceived(channel=ours.id, data=b"m" * 50),
                CastJoined(channel=ours.id),
                later,
            ]


async def test_send_sealed_accepts_a_message_shorter_than_size_and_charges_its_length() -> None:
    with anyio.fail_after(10):
        async with linked(limits=SMALL_WINDOW) as (teammate, relay):
            ours, theirs = await open_pair(teammate, relay)
            await ours.send_sealed(WINDOW, lambda: b"short")
            assert teammate.link.connection.send_window(ours.id) == WINDOW - 5
            assert await theirs.receive() == b"short"


# -- Link.wait_writable ----------------------------------------------------------------------------


async def test_wait_writable_returns_at_once_when_the_socket_is_not_backed_up() -> None:
    with anyio.fail_after(10):
        async with linked() as (host, _):
            with anyio.CancelScope() as scope:
                scope.cancel()
                # Cancelled before it starts: it returns only if it never waits.
                await host.link.wait_writable()
            assert not scope.cancelled_caught


async def test_wait_writable_waits_while_the_socket_is_backed_up() -> None:
    size = 40 * 1024  # three casts: over the socket's 64 KiB high-water mark
    with anyio.fail_after(10):
        async with linked() as (host, relay):
            relay.link.websocket.transport.pause_reading()
            for n in range(3):
                host.link.connection.cast(bytes([n]) * size)
            host.link.flush()
            await anyio.wait_all_tasks_blocked()
            writable = anyio.Event()

            async def wait() -> None:
                await host.link.wait_writable()
                writable.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await anyio.wait_all_tasks_blocked()
                assert not writable.is_set()
                relay.link.websocket.transport.resume_reading()
                await writable.wait()
            await relay.log.wait_for(
                lambda events: sum(isinstance(e, CastReceived) for e in events) == 3
            )
            assert [e for e in relay.log.events if isinstance(e, CastReceived)] == [
                CastReceived(channel=None, data=bytes([n]) * size) for n in range(3)
            ]


async def test_wait_writable_returns_once_the_link_is_closed() -> None:
    with anyio.fail_after(10):
        async with linked() as (host, relay):
            relay.link.websocket.transport.pause_reading()
            host.link.connection.cast(b"x" * 200 * 1024)
            host.link.flush()
            await anyio.wait_all_tasks_blocked()
            async with anyio.create_task_group() as tg:
                tg.start_soon(host.link.wait_writable)
                await anyio.wait_all_tasks_blocked()
                # The relay's end drops the connection: the link closes, and with it the wait.
                relay.link.websocket.transport.abort()
            assert host.link.closed is not None
            await host.link.wait_writable()


# -- broadcast groups -----------------------------------------------------------------------------


async def test_a_host_joins_a_group_only_on_a_relay_that_advertised_groups() -> None:
    with anyio.fail_after(10):
        async with linked() as (host, relay):
            ours, theirs = await open_pair(relay, host)
            # The accepter's hello here names no capability, as a relay from before groups.
            assert not host.mux.cast_groups
            with pytest.raises(LocalProtocolError):
                theirs.join_broadcast(group=1)
            assert host.link.connection.failure is None
            theirs.join_broadcast()  # group 0 is every relay's
            await relay.log.wait_for(lambda events: CastJoined(channel=ours.id) in events)
            host.mux.hello = {"role": "relay", "capabilities": [CAST_GROUPS]}
            assert host.mux.cast_groups
            theirs.join_broadcast(group=MAX_CAST_GROUPS - 1)
            joined = CastJoined(channel=ours.id, group=MAX_CAST_GROUPS - 1)
            await relay.log.wait_for(lambda events: joined in events)
            for bad in (-1, MAX_CAST_GROUPS):
                with pytest.raises(LocalProtocolError):
                    theirs.join_broadcast(group=bad)
