"""A link behaves the same over each framing (python-websockets, picows), on a real socket: what
it carries, the close codes each side sees, the limits, keepalive and backpressure."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from tests.link.socket_pair import FRAMINGS, socket_pair
from tunnel.link import ChannelClosedError, ChannelMux, Link, LinkClosedError, core
from tunnel.proto import Side
from tunnel.proto.codes import CloseCode

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("framing", FRAMINGS)]


class Running:
    """A link and its mux, run in a task group; `closed` once its run returned."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.mux = ChannelMux(link)
        self.closed: LinkClosedError | None = None
        self._done = anyio.Event()

    async def run(self) -> None:
        self.closed = await self.link.run(self.mux.on_event)
        self.mux.link_closed(self.closed)
        self._done.set()

    async def wait_closed(self) -> LinkClosedError:
        await self._done.wait()
        assert self.closed is not None
        return self.closed


@asynccontextmanager
async def running(*links: Link) -> AsyncIterator[list[Running]]:
    ends = [Running(link) for link in links]
    async with anyio.create_task_group() as tg:
        for end in ends:
            tg.start_soon(end.run)
        yield ends
        for end in ends:
            await end.link.aclose()


async def hellos(dialer: Running, accepter: Running) -> None:
    for end in (dialer, accepter):
        end.link.connection.send_hello({})
        end.link.flush()
    await dialer.mux.wait_hello()
    await accepter.mux.wait_hello()


@pytest.mark.parametrize("closer", ["dialer", "accepter"])
async def test_channels_carry_data_and_both_sides_see_the_close_code(
    framing: str, closer: str
) -> None:
    with anyio.fail_after(10):
        async with (
            socket_pair(framing) as (client, server),
            running(client.link(Side.DIALER), server.link(Side.ACCEPTER)) as (dialer, accepter),
        ):
            await hellos(dialer, accepter)
            channel = dialer.mux.open_channel("echo", {})
            incoming = await accepter.mux.accept()
            sent = [
                bytes([n]) * size for n, size in enumerate((1, 125, 126, 65535, 65536, 200_000))
            ]
            for message in sent:
                await channel.send(message)
            assert [await incoming.receive() for _ in sent] == sent
            await incoming.send(b"back")
            assert await channel.receive() == b"back"

            ours, theirs = (dialer, accepter) if closer == "dialer" else (accepter, dialer)
            closed = await ours.link.aclose(4001, "done")
            assert (closed.code, closed.reason, closed.by_peer) == (4001, "done", False)
            seen = await theirs.wait_closed()
            assert (seen.code, seen.reason, seen.by_peer) == (4001, "done", True)


async def test_messages_queued_before_the_link_takes_them_as_they_come_are_read_first(
    framing: str,
) -> None:
    with anyio.fail_after(10):
        async with socket_pair(framing) as (client, server):
            pushed: list[bytes | str] = []
            client.framing.write_messages([b"one", b"two"])
            while server.queued() < 2:
                await anyio.sleep(0.01)
            # Taking messages as they come now would put b"three" before them: refused.
            assert not server.framing.receive_with(pushed.append)
            messages = aiter(server.framing.messages())
            assert await anext(messages) == b"one"
            assert not server.framing.receive_with(pushed.append)
            assert await anext(messages) == b"two"
            assert server.framing.receive_with(pushed.append)

            client.framing.write_messages([b"three"])
            client.write_frame(0x02, b"frag")  # binary, more to come
            client.write_frame(0x00, b"men")  # continuation
            client.write_frame(0x80, b"ted")  # continuation, the last
            client.write_frame(0x01, "t\u00e9".encode()[:2])  # text, split inside a character
            client.write_frame(0x80, "t\u00e9".encode()[2:])
            client.framing.write_messages([b"four"])
            while len(pushed) < 4:
                await anyio.sleep(0.01)
            assert pushed == [b"three", b"fragmented", "t\u00e9", b"four"]
            assert server.queued() == 0


async def test_a_fault_in_the_event_handler_ends_that_link_and_is_raised_by_run(
    framing: str,
) -> None:
    def faulty(event: object) -> None:
        raise RuntimeError("a fault in the handler")

    with anyio.fail_after(10):
        async with socket_pair(framing) as (client, server):
            link = server.link(Side.ACCEPTER)
            async with anyio.create_task_group() as tg:
                peer = Running(client.link(Side.DIALER))
                tg.start_soon(peer.run)
                peer.link.connection.send_hello({})
                peer.link.flush()
                with pytest.raises(RuntimeError, match="a fault in the handler"):
                    await link.run(faulty)
                seen = await peer.wait_closed()
                assert (seen.code, seen.by_peer) == (CloseCode.ABNORMAL_CLOSURE, True)


async def test_a_message_over_max_size_is_refused_with_1009(framing: str) -> None:
    with anyio.fail_after(10):
        async with (
            socket_pair(framing, max_size=1024) as (client, server),
            running(client.link(Side.DIALER), server.link(Side.ACCEPTER)) as (dialer, accepter),
        ):
            client.framing.write_messages([b"x" * 2048])
            closed = await accepter.wait_closed()
            assert (closed.code, closed.by_peer) == (CloseCode.MESSAGE_TOO_BIG, False)
            assert accepter.link.failure is None
            seen = await dialer.wait_closed()
            assert (seen.code, seen.by_peer) == (CloseCode.MESSAGE_TOO_BIG, True)


async def test_a_text_message_is_a_protocol_failure_seen_by_both_sides(framing: str) -> None:
    with anyio.fail_after(10):
        async with (
            socket_pair(framing) as (client, server),
            running(client.link(Side.DIALER), server.link(Side.ACCEPTER)) as (dialer, accepter),
        ):
            client.framing.write_messages(["not binary"])
            closed = await accepter.wait_closed()
            assert accepter.link.failure is not None
            assert (closed.code, closed.by_peer) == (accepter.link.failure.code, False)
            seen = await dialer.wait_closed()
            assert (seen.code, seen.by_peer) == (closed.code, True)


async def test_a_peer_that_vanishes_is_an_abnormal_closure(framing: str) -> None:
    with anyio.fail_after(10):
        async with (
            socket_pair(framing) as (client, server),
            running(client.link(Side.DIALER), server.link(Side.ACCEPTER)) as (_, accepter),
        ):
            await anyio.wait_all_tasks_blocked()
            client.framing.abort()
            closed = await accepter.wait_closed()
            assert (closed.code, closed.by_peer) == (CloseCode.ABNORMAL_CLOSURE, True)


async def test_cancelling_run_tells_the_peer_we_are_going_away(framing: str) -> None:
    with anyio.fail_after(10):
        async with socket_pair(framing) as (client, server):
            accepter = Running(server.link(Side.ACCEPTER))
            dialer = Running(client.link(Side.DIALER))
            async with anyio.create_task_group() as tg:
                tg.start_soon(dialer.run)
                async with anyio.create_task_group() as inner:
                    inner.start_soon(accepter.run)
                    await anyio.wait_all_tasks_blocked()
                    inner.cancel_scope.cancel()
                seen = await dialer.wait_closed()
                assert (seen.code, seen.by_peer) == (CloseCode.GOING_AWAY, True)


async def test_keepalive_keeps_a_reading_peer_and_closes_a_silent_one_with_1011(
    framing: str,
) -> None:
    with anyio.fail_after(10):
        async with (
            socket_pair(framing, ping_interval=0.05, ping_timeout=0.2) as (client, server),
            running(client.link(Side.DIALER), server.link(Side.ACCEPTER)) as (dialer, accepter),
        ):
            await hellos(dialer, accepter)
            # Several pings answered: the link stays open.
            await anyio.sleep(0.4)
            assert accepter.closed is None
            assert server.framing.is_open
            client.pause_reading()  # pings are no longer read, so never answered
            closed = await accepter.wait_closed()
            assert (closed.code, closed.by_peer) == (CloseCode.INTERNAL_ERROR, False)


async def test_a_peer_that_stops_reading_is_cut_off_and_our_buffer_stays_bounded(
    framing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The close frame cannot get through either: keep the wait before dropping the socket short.
    monkeypatch.setattr(core, "CLOSE_GRACE", 0.2)
    with anyio.fail_after(15):
        async with socket_pair(framing) as (client, server):
            accepter = Running(server.link(Side.ACCEPTER, send_timeout=0.3))
            dialer = Running(client.link(Side.DIALER))
            async with anyio.create_task_group() as tg:
                tg.start_soon(accepter.run)
                tg.start_soon(dialer.run)
                await hellos(dialer, accepter)
                channel = accepter.mux.open_channel("s", {})
                await dialer.mux.accept()
                client.shrink_socket_buffers()
                server.shrink_socket_buffers()
                client.pause_reading()
                largest = 0
                # Far more than the window and the kernel's buffers: only the window and the
                # socket's backpressure keep it out of our memory.
                with anyio.move_on_after(5), contextlib.suppress(ChannelClosedError):
                    for _ in range(2000):
                        await channel.send(b"x" * 16 * 1024)
                        largest = max(largest, server.write_buffer_size())
                closed = await accepter.wait_closed()
                assert (closed.code, closed.by_peer) == (CloseCode.SLOW_CONSUMER, False)
                assert largest <= core.WRITE_BATCH_BYTES + 2 * 64 * 1024
                client.framing.abort()
