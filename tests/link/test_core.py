"""Link: events in order, queued frames flushed, and why `run` says the link closed."""

from __future__ import annotations

import asyncio

import anyio
import pytest
from websockets.exceptions import ConnectionClosed

from tests.link.memory_websocket import Endpoint, linked, running, websocket_pair
from tunnel.link import core
from tunnel.proto import (
    ChannelClosed,
    ChannelOpened,
    CloseCode,
    DataReceived,
    Hello,
    HelloReceived,
    Open,
    RemoteProtocolError,
    Side,
    encode_frame,
)

pytestmark = pytest.mark.anyio


async def test_events_reach_on_event_in_the_order_the_peer_queued_them() -> None:
    with anyio.fail_after(10):
        async with linked() as (dialer, accepter):
            connection = dialer.link.connection
            channels = [connection.open_channel(f"path{i}", {"i": i}) for i in range(3)]
            for round_ in range(5):
                for channel in channels:
                    assert connection.send_data(channel, f"{channel}:{round_}".encode())
            connection.close_channel(channels[0], CloseCode.REFUSED, "enough")
            dialer.link.flush()

            await accepter.log.wait_for(lambda events: isinstance(events[-1], ChannelClosed))
            assert accepter.log.events == [
                HelloReceived(payload={"role": "dialer"}),
                *(
                    ChannelOpened(channel=channel, path=f"path{i}", meta={"i": i})
                    for i, channel in enumerate(channels)
                ),
                *(
                    DataReceived(channel=channel, data=f"{channel}:{round_}".encode())
                    for round_ in range(5)
                    for channel in channels
                ),
                ChannelClosed(channel=channels[0], code=CloseCode.REFUSED, reason="enough"),
            ]


async def test_close_soon_sends_what_was_queued_before_closing() -> None:
    with anyio.fail_after(10):
        async with linked() as (dialer, accepter):
            connection = dialer.link.connection
            channel = connection.open_channel("s", {})
            assert connection.send_data(channel, b"last words")
            # No flush() in between: the close itself must send what is queued first.
            dialer.link.close_soon(CloseCode.GOING_AWAY, "bye")

            closed = await accepter.wait_stopped()
            assert (closed.code, closed.reason, closed.by_peer) == (
                CloseCode.GOING_AWAY,
                "bye",
                True,
            )
            assert accepter.log.events[-1] == DataReceived(channel=channel, data=b"last words")


@pytest.mark.parametrize("closer", ["dialer", "accepter"])
async def test_a_close_is_local_on_the_closing_side_and_by_peer_on_the_other(closer: str) -> None:
    with anyio.fail_after(10):
        async with linked() as (dialer, accepter):
            closing, other = (dialer, accepter) if closer == "dialer" else (accepter, dialer)
            closed = await closing.link.aclose(CloseCode.REVOKED, "links revoked")

            assert (closed.code, closed.reason, closed.by_peer) == (
                CloseCode.REVOKED,
                "links revoked",
                False,
            )
            assert await closing.wait_stopped() is closed
            seen = await other.wait_stopped()
            assert (seen.code, seen.reason, seen.by_peer) == (
                CloseCode.REVOKED,
                "links revoked",
                True,
            )
            assert other.link.closed is seen
            assert dialer.link.failure is None
            assert accepter.link.failure is None


async def test_the_first_close_request_wins() -> None:
    with anyio.fail_after(10):
        async with linked() as (dialer, accepter):
            dialer.link.close_soon(CloseCode.REFUSED, "first")
            dialer.link.close_soon(CloseCode.REVOKED, "second")

            assert dialer.link.closing
            closed = await dialer.wait_stopped()
            assert (closed.code, closed.reason, closed.by_peer) == (
                CloseCode.REFUSED,
                "first",
                False,
            )
            seen = await accepter.wait_stopped()
            assert (seen.code, seen.reason) == (CloseCode.REFUSED, "first")


async def test_a_long_close_reason_is_clipped_on_a_character_boundary() -> None:
    with anyio.fail_after(10):
        async with linked() as (dialer, accepter):
            closed = await dialer.link.aclose(CloseCode.NORMAL, "é" * 100)

            # 200 bytes of UTF-8 do not fit a close frame: 61 characters (122 bytes) do.
            assert closed.reason == "é" * 61
            assert (await accepter.wait_stopped()).reason == "é" * 61


@pytest.mark.parametrize(
    "message",
    [b"\xc1", "a text message", encode_frame(Open(channel=2, path="s", meta={}))],
    ids=["not-msgpack", "text", "frame-before-hello"],
)
async def test_a_message_that_breaks_the_protocol_closes_the_link_with_4000(
    message: bytes | str,
) -> None:
    with anyio.fail_after(10):
        client, server = websocket_pair()
        endpoint = Endpoint(client, Side.DIALER)
        async with running(endpoint):
            await server.send(message)
            # Whatever follows the violation is ignored, even a valid hello.
            await server.send(encode_frame(Hello(payload={})))

            closed = await endpoint.wait_stopped()
            assert (closed.code, closed.by_peer) == (CloseCode.PROTOCOL_ERROR, False)
            failure = endpoint.link.failure
            assert isinstance(failure, RemoteProtocolError)
            assert failure.code == CloseCode.PROTOCOL_ERROR
            assert closed.reason == str(failure)
            assert endpoint.log.events == []
            with pytest.raises(ConnectionClosed) as info:
                await server.recv()
            assert info.value.rcvd is not None
            assert info.value.rcvd.code == CloseCode.PROTOCOL_ERROR


async def test_a_message_over_max_size_is_reported_as_our_1009_not_a_protocol_failure() -> None:
    with anyio.fail_after(10):
        client, server = websocket_pair(max_size=1024)
        endpoint = Endpoint(client, Side.DIALER)
        async with running(endpoint):
            await server.send(b"x" * 2048)

            closed = await endpoint.wait_stopped()
            assert (closed.code, closed.by_peer) == (CloseCode.MESSAGE_TOO_BIG, False)
            assert endpoint.link.failure is None


async def test_a_peer_that_vanishes_without_a_close_frame_is_an_abnormal_closure() -> None:
    with anyio.fail_after(10):
        async with linked() as (dialer, accepter):
            accepter.link.websocket.transport.abort()

            closed = await dialer.wait_stopped()
            assert (closed.code, closed.reason, closed.by_peer) == (
                CloseCode.ABNORMAL_CLOSURE,
                "",
                True,
            )


async def test_cancelling_run_tells_the_peer_we_are_going_away() -> None:
    with anyio.fail_after(10):
        client, server = websocket_pair()
        dialer = Endpoint(client, Side.DIALER)
        accepter = Endpoint(server, Side.ACCEPTER)
        async with running(accepter):
            async with anyio.create_task_group() as tg:
                tg.start_soon(dialer.run)
                dialer.send_hello({})
                await accepter.mux.wait_hello()
                tg.cancel_scope.cancel()

            seen = await accepter.wait_stopped()
            assert (seen.code, seen.by_peer) == (CloseCode.GOING_AWAY, True)
            assert dialer.link.closed is not None
            assert (dialer.link.closed.code, dialer.link.closed.by_peer) == (
                CloseCode.GOING_AWAY,
                False,
            )


async def test_a_peer_that_stops_reading_is_cut_off_as_a_slow_consumer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The close frame cannot get through either: keep the wait before dropping the socket short.
    monkeypatch.setattr(core, "CLOSE_GRACE", 0.2)
    with anyio.fail_after(10):
        # max_queue=1: the peer's WebSocket stops reading its socket after one unread message.
        client, server = websocket_pair(max_queue=1)
        endpoint = Endpoint(server, Side.ACCEPTER, send_timeout=0.2)
        async with running(endpoint):
            await client.send(encode_frame(Hello(payload={})))
            endpoint.send_hello({})
            await endpoint.mux.wait_hello()
            channel = endpoint.mux.open_channel("s", {})
            # Sixteen 16 KiB messages fit the window but not the peer's socket buffers.
            for _ in range(16):
                await channel.send(b"x" * 16 * 1024)

            closed = await endpoint.wait_stopped()
            assert (closed.code, closed.by_peer) == (CloseCode.SLOW_CONSUMER, False)
            assert endpoint.link.failure is None


async def test_a_close_behind_a_write_the_peer_never_reads_drops_the_socket_in_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(core, "CLOSE_GRACE", 0.2)
    with anyio.fail_after(10):
        # No send timeout: only the close deadline can end a write the peer never drains.
        client, server = websocket_pair(max_queue=1)
        endpoint = Endpoint(server, Side.ACCEPTER)
        async with running(endpoint):
            await client.send(encode_frame(Hello(payload={})))
            endpoint.send_hello({})
            await endpoint.mux.wait_hello()
            channel = endpoint.mux.open_channel("s", {})
            for _ in range(16):
                await channel.send(b"x" * 16 * 1024)
            await anyio.wait_all_tasks_blocked()
            endpoint.link.close_soon(CloseCode.GOING_AWAY, "bye")

            closed = await endpoint.wait_stopped()
            assert (closed.code, closed.by_peer) == (CloseCode.GOING_AWAY, False)


async def test_aclose_on_a_closed_link_returns_how_it_closed() -> None:
    with anyio.fail_after(10):
        async with linked() as (dialer, accepter):
            closed = await accepter.link.aclose(CloseCode.HOST_GONE, "gone")
            seen = await dialer.wait_stopped()

            assert await dialer.link.aclose(CloseCode.NORMAL) is seen
            assert await accepter.link.aclose(CloseCode.NORMAL) is closed


# -- batching ---------------------------------------------------------------------------------


def count_socket_writes(endpoint: Endpoint) -> list[int]:
    """Patch `endpoint`'s transport to record the size of every write it is handed."""
    transport = endpoint.link.websocket.transport
    sizes: list[int] = []
    write = transport.write

    def counting_write(data: bytes | bytearray | memoryview) -> None:
        sizes.append(len(data))
        write(data)

    transport.write = counting_write  # type: ignore[method-assign]
    return sizes


async def test_frames_queued_in_one_turn_of_the_event_loop_leave_in_one_socket_write() -> None:
    with anyio.fail_after(10):
        async with linked() as (dialer, accepter):
            await anyio.wait_all_tasks_blocked()
            writes = count_socket_writes(dialer)
            connection = dialer.link.connection
            channel = connection.open_channel("s", {})
            dialer.link.flush()
            for n in range(100):
                assert connection.send_data(channel, b"%d" % n)
                dialer.link.flush()

            await accepter.log.wait_for(lambda events: len(events) >= 1 + 1 + 100)
            assert len(writes) == 1
            assert accepter.log.events[2:] == [
                DataReceived(channel=channel, data=b"%d" % n) for n in range(100)
            ]


async def test_a_flush_with_nothing_queued_writes_nothing() -> None:
    with anyio.fail_after(10):
        async with linked() as (dialer, _):
            await anyio.wait_all_tasks_blocked()
            writes = count_socket_writes(dialer)
            before = dialer.link.writes
            for _ in range(10):
                dialer.link.flush()
            await anyio.wait_all_tasks_blocked()
            assert writes == []
            assert dialer.link.writes == before


async def test_a_bulk_sender_writes_many_frames_per_socket_write() -> None:
    count, size = 1000, 4096
    with anyio.fail_after(20):
        async with linked() as (dialer, accepter):
            await anyio.wait_all_tasks_blocked()
            writes = count_socket_writes(dialer)
            ours = dialer.mux.open_channel("bulk", {})
            theirs = await accepter.mux.accept()
            received = 0

            async def drain() -> None:
                nonlocal received
                for _ in range(count):
                    received += len(await theirs.receive())

            async with anyio.create_task_group() as tg:
                tg.start_soon(drain)
                for _ in range(count):
                    await ours.send(b"b" * size)
            assert received == count * size
            # A sender that finds window free never waits, so what it sends before the loop gets
            # to the writer goes out together; one write per frame would be `count` writes.
            assert len(writes) <= count // 8


async def test_more_than_one_batch_queued_at_once_leaves_in_batches_and_in_order() -> None:
    size = 6 * 1024
    count = 3 * core.WRITE_BATCH_BYTES // size  # three batches' worth, queued in one turn
    with anyio.fail_after(10):
        async with linked() as (dialer, accepter):
            connection = dialer.link.connection
            channel = connection.open_channel("s", {})
            dialer.link.flush()
            await accepter.log.wait_for(lambda events: len(events) == 2)
            writes = count_socket_writes(dialer)
            for n in range(count):
                assert connection.send_data(channel, b"%d" % n + b"." * size)
                dialer.link.flush()

            await accepter.log.wait_for(lambda events: len(events) == 2 + count)
            assert accepter.log.events[2:] == [
                DataReceived(channel=channel, data=b"%d" % n + b"." * size) for n in range(count)
            ]
            # A batch closes with the message that takes it to WRITE_BATCH_BYTES (framing adds a
            # few bytes per message), so the third batch holds what is left.
            assert len(writes) == 3
            assert min(writes[:2]) >= core.WRITE_BATCH_BYTES > writes[2]


# -- tasks ------------------------------------------------------------------------------------


def link_tasks() -> list[str]:
    """Names of the tasks links start besides their reader (each named after its link)."""
    return sorted(
        task.get_name()
        for task in asyncio.all_tasks()
        if task.get_name().endswith((" writer", " closer"))
    )


async def test_an_idle_link_runs_no_task_but_its_reader() -> None:
    with anyio.fail_after(10):
        before = len(asyncio.all_tasks())
        async with linked() as (dialer, accepter):
            ours = dialer.mux.open_channel("s", {})
            theirs = await accepter.mux.accept()
            await ours.send(b"ping")
            assert await theirs.receive() == b"ping"
            await anyio.wait_all_tasks_blocked()

            # One task per end: the one running `Link.run`, which is the reader.
            assert len(asyncio.all_tasks()) - before == 2


async def test_the_writer_task_runs_only_while_the_socket_is_backed_up() -> None:
    count, size = 40, 4096  # 160 KiB: over the socket's 64 KiB high-water mark
    with anyio.fail_after(10):
        async with linked() as (dialer, accepter):
            connection = dialer.link.connection
            channel = connection.open_channel("s", {})
            dialer.link.flush()
            await accepter.log.wait_for(lambda events: len(events) == 2)
            accepter.link.websocket.transport.pause_reading()
            for n in range(count):
                assert connection.send_data(channel, b"%d" % n + b"." * size)
            dialer.link.flush()
            await anyio.wait_all_tasks_blocked()
            assert link_tasks() == ["dialer writer"]

            accepter.link.websocket.transport.resume_reading()
            await accepter.log.wait_for(lambda events: len(events) == 2 + count)
            assert accepter.log.events[2:] == [
                DataReceived(channel=channel, data=b"%d" % n + b"." * size) for n in range(count)
            ]
            await anyio.wait_all_tasks_blocked()
            assert link_tasks() == []
