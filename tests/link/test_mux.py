"""ChannelMux and LinkChannel: order, flow control, cancellation, closes and the accept backlog."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import pytest

from tests.link.memory_websocket import Endpoint, linked, running, websocket_pair
from tunnel.link import ChannelClosedError, LinkChannel, LinkClosedError
from tunnel.proto import (
    DEFAULT_LIMITS,
    ChannelClosed,
    CloseCode,
    DataReceived,
    Event,
    Limits,
    LocalProtocolError,
    Side,
    WindowUpdated,
)

pytestmark = pytest.mark.anyio

WINDOW = 100
SMALL_WINDOW = Limits(initial_window=WINDOW)

E = TypeVar("E", bound=Exception)


class Outcome:
    """What one call run in the background returned or raised."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.returned = False
        self.result: Any = None
        self.error: Exception | None = None

    async def capture(self, call: Callable[[], Awaitable[Any]]) -> None:
        try:
            self.result = await call()
            self.returned = True
        except Exception as exc:
            self.error = exc
        finally:
            self.done.set()

    async def error_of(self, kind: type[E]) -> E:
        """Wait for the call to end; it must have raised `kind`, which is returned."""
        await self.done.wait()
        assert isinstance(self.error, kind), f"expected {kind.__name__}, got {self.error!r}"
        return self.error


async def open_pair(
    dialer: Endpoint, accepter: Endpoint, path: str = "s"
) -> tuple[LinkChannel, LinkChannel]:
    """Open a channel from the dialer; return (dialer's end, accepter's end)."""
    ours = dialer.mux.open_channel(path, {"for": path})
    theirs = await accepter.mux.accept()
    assert (theirs.id, theirs.path, theirs.meta) == (ours.id, path, {"for": path})
    return ours, theirs


async def round_trip(sender: LinkChannel, receiver: LinkChannel) -> None:
    """Return once `receiver`'s link has handled every frame `sender`'s link queued before.

    Frames of one link arrive in order, so a marker sent now arrives after them; then every
    task they woke has run.
    """
    await sender.send(b"marker")
    assert await receiver.receive() == b"marker"
    await anyio.wait_all_tasks_blocked()


def data_on(channel: int, count: int) -> Callable[[list[Event]], bool]:
    """A predicate for `EventLog.wait_for`: `count` messages arrived on `channel`."""

    def arrived(events: list[Event]) -> bool:
        found = [e for e in events if isinstance(e, DataReceived) and e.channel == channel]
        return len(found) >= count

    return arrived


def closed_on(channel: int) -> Callable[[list[Event]], bool]:
    """A predicate for `EventLog.wait_for`: the peer's close of `channel` arrived."""

    def arrived(events: list[Event]) -> bool:
        return any(isinstance(e, ChannelClosed) and e.channel == channel for e in events)

    return arrived


def message(index: int, size: int) -> bytes:
    return f"{index}:".encode().ljust(size, b".")


# -- order ----------------------------------------------------------------------------------------


async def test_messages_arrive_in_send_order_on_every_channel_in_both_directions() -> None:
    rng = random.Random(1)
    sent: dict[tuple[int, str], list[bytes]] = {}
    received: dict[tuple[int, str], list[bytes]] = {}

    async def send_all(channel: LinkChannel, messages: list[bytes]) -> None:
        for data in messages:
            await channel.send(data)

    async def receive_all(channel: LinkChannel, count: int, into: list[bytes]) -> None:
        for _ in range(count):
            into.append(await channel.receive())

    with anyio.fail_after(10):
        # A window of a few messages: senders stall and resume many times, interleaved.
        async with linked(limits=Limits(initial_window=512)) as (dialer, accepter):
            pairs = [await open_pair(dialer, accepter, f"c{i}") for i in range(3)]
            async with anyio.create_task_group() as tg:
                for i, (ours, theirs) in enumerate(pairs):
                    for direction, sender, receiver in (
                        ("out", ours, theirs),
                        ("in", theirs, ours),
                    ):
                        key = (i, direction)
                        sent[key] = [
                            f"{i}{direction}{n}:".encode() + b"x" * rng.randrange(200)
                            for n in range(60)
                        ]
                        received[key] = []
                        tg.start_soon(send_all, sender, sent[key])
                        tg.start_soon(receive_all, receiver, len(sent[key]), received[key])

    assert received == sent


# -- flow control ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "in_flight", "reads_to_resume"),
    [(50, 2, 1), (100, 1, 1), (25, 4, 2), (40, 2, 2)],
    ids=["half-window", "whole-window", "quarter-window", "two-fifths"],
)
async def test_a_sender_waits_for_window_and_resumes_when_the_receiver_has_read_half_of_it(
    size: int, in_flight: int, reads_to_resume: int
) -> None:
    with anyio.fail_after(10):
        async with linked(limits=SMALL_WINDOW) as (dialer, accepter):
            ours, theirs = await open_pair(dialer, accepter)
            for n in range(in_flight):
                await ours.send(message(n, size))  # within the window: returns at once
            assert dialer.link.connection.send_window(ours.id) < size

            async with anyio.create_task_group() as tg:
                blocked = Outcome()
                tg.start_soon(blocked.capture, lambda: ours.send(message(in_flight, size)))
                await accepter.log.wait_for(data_on(theirs.id, in_flight))
                await round_trip(theirs, ours)
                assert not blocked.done.is_set()

                for n in range(reads_to_resume):
                    assert await theirs.receive() == message(n, size)
                    if n + 1 < reads_to_resume:
                        # Less than half the window read: no grant yet, the sender still waits.
                        await round_trip(theirs, ours)
                        assert not blocked.done.is_set()
                await blocked.done.wait()
                assert blocked.error is None

            for n in range(reads_to_resume, in_flight + 1):
                assert await theirs.receive() == message(n, size)


async def test_bytes_in_flight_never_exceed_the_window() -> None:
    rng = random.Random(2)
    window, largest = 1000, 100
    messages = [message(n, rng.randint(10, largest)) for n in range(300)]
    total = sum(map(len, messages))
    counts = {"sent": 0, "read": 0, "most_in_flight": 0}

    with anyio.fail_after(10):
        async with linked(limits=Limits(initial_window=window)) as (dialer, accepter):
            ours, theirs = await open_pair(dialer, accepter)

            async def sender() -> None:
                for data in messages:
                    await ours.send(data)
                    counts["sent"] += len(data)
                    # Window comes back only for bytes the receiver has read.
                    in_flight = counts["sent"] - counts["read"]
                    assert in_flight <= window
                    counts["most_in_flight"] = max(counts["most_in_flight"], in_flight)

            def arrived(events: list[Event]) -> int:
                return sum(
                    len(e.data)
                    for e in events
                    if isinstance(e, DataReceived) and e.channel == theirs.id
                )

            # Read only once the sender must be waiting (grants lag reads by under half a
            # window), so the window is really used up again and again.
            threshold = window // 2 - largest
            async with anyio.create_task_group() as tg:
                tg.start_soon(sender)
                for expected in messages:
                    await accepter.log.wait_for(
                        lambda events: (
                            arrived(events) - counts["read"] >= threshold
                            or arrived(events) == total
                        )
                    )
                    assert await theirs.receive() == expected
                    counts["read"] += len(expected)

    assert counts["most_in_flight"] >= threshold


async def test_a_send_cancelled_while_waiting_for_window_sends_nothing_and_never_seals() -> None:
    sealed: list[bytes] = []

    def seal(data: bytes) -> Callable[[], bytes]:
        def sealer() -> bytes:
            sealed.append(data)
            return data

        return sealer

    with anyio.fail_after(10):
        async with linked(limits=SMALL_WINDOW) as (dialer, accepter):
            ours, theirs = await open_pair(dialer, accepter)
            await ours.send_sealed(WINDOW, seal(message(0, WINDOW)))

            async with anyio.create_task_group() as tg:
                cancelled = Outcome()
                tg.start_soon(cancelled.capture, lambda: ours.send_sealed(50, seal(b"c" * 50)))
                await anyio.wait_all_tasks_blocked()
                assert not cancelled.done.is_set()
                tg.cancel_scope.cancel()
            assert not cancelled.returned
            assert cancelled.error is None
            assert sealed == [message(0, WINDOW)]

            # The channel still works, and the cancelled message never shows up.
            assert await theirs.receive() == message(0, WINDOW)
            await ours.send_sealed(50, seal(message(1, 50)))
            assert await theirs.receive() == message(1, 50)
            assert sealed == [message(0, WINDOW), message(1, 50)]
            await round_trip(ours, theirs)
            assert ours.closed is None
            assert theirs.closed is None


async def test_a_send_cancelled_while_queued_behind_another_send_sends_nothing() -> None:
    with anyio.fail_after(10):
        async with linked(limits=SMALL_WINDOW) as (dialer, accepter):
            ours, theirs = await open_pair(dialer, accepter)
            await ours.send(message(0, WINDOW))

            async with anyio.create_task_group() as tg:
                first = Outcome()
                tg.start_soon(first.capture, lambda: ours.send(message(1, WINDOW)))
                await anyio.wait_all_tasks_blocked()
                async with anyio.create_task_group() as queued_group:
                    queued = Outcome()
                    queued_group.start_soon(queued.capture, lambda: ours.send(b"cancelled"))
                    await anyio.wait_all_tasks_blocked()
                    queued_group.cancel_scope.cancel()
                assert queued.done.is_set()
                assert not queued.returned
                assert queued.error is None
                assert await theirs.receive() == message(0, WINDOW)
                await first.done.wait()

            assert await theirs.receive() == message(1, WINDOW)
            await ours.send(b"after")
            assert await theirs.receive() == b"after"


async def test_a_seal_of_the_wrong_size_raises_and_sends_nothing() -> None:
    with anyio.fail_after(10):
        async with linked(limits=SMALL_WINDOW) as (dialer, accepter):
            ours, theirs = await open_pair(dialer, accepter)
            with pytest.raises(RuntimeError):
                await ours.send_sealed(10, lambda: b"eleven byte")

            assert dialer.link.connection.send_window(ours.id) == WINDOW
            await ours.send(b"next")
            assert await theirs.receive() == b"next"


# -- closes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("by_peer", [True, False], ids=["peer-closes", "we-close"])
async def test_a_send_waiting_for_window_raises_when_the_channel_is_closed(by_peer: bool) -> None:
    with anyio.fail_after(10):
        async with linked(limits=SMALL_WINDOW) as (dialer, accepter):
            ours, theirs = await open_pair(dialer, accepter)
            await ours.send(message(0, WINDOW))
            async with anyio.create_task_group() as tg:
                blocked = Outcome()
                tg.start_soon(blocked.capture, lambda: ours.send(b"more"))
                await anyio.wait_all_tasks_blocked()
                assert not blocked.done.is_set()
                (theirs if by_peer else ours).close_soon(CloseCode.REFUSED, "no more")

                error = await blocked.error_of(ChannelClosedError)
            assert (error.code, error.reason, error.by_peer) == (
                CloseCode.REFUSED,
                "no more",
                by_peer,
            )
            with pytest.raises(ChannelClosedError):
                await ours.send(b"again")


@pytest.mark.parametrize("by_peer", [True, False], ids=["peer-closes", "we-close"])
async def test_a_waiting_receive_raises_when_the_channel_is_closed(by_peer: bool) -> None:
    with anyio.fail_after(10):
        async with linked() as (dialer, accepter):
            ours, theirs = await open_pair(dialer, accepter)
            async with anyio.create_task_group() as tg:
                blocked = Outcome()
                tg.start_soon(blocked.capture, ours.receive)
                await anyio.wait_all_tasks_blocked()
                assert not blocked.done.is_set()
                (theirs if by_peer else ours).close_soon(CloseCode.REFUSED, "no more")

                error = await blocked.error_of(ChannelClosedError)
            assert (error.code, error.reason, error.by_peer) == (
                CloseCode.REFUSED,
                "no more",
                by_peer,
            )


@pytest.mark.parametrize(
    "how", ["peer-closes", "we-close", "network-fails", "peer-breaks-protocol"]
)
async def test_waiting_sends_and_receives_raise_with_the_links_code_when_the_link_closes(
    how: str,
) -> None:
    with anyio.fail_after(10):
        async with linked(limits=SMALL_WINDOW) as (dialer, accepter):
            sending, _ = await open_pair(dialer, accepter, "sending")
            receiving, _ = await open_pair(dialer, accepter, "receiving")
            await sending.send(message(0, WINDOW))
            async with anyio.create_task_group() as tg:
                send = Outcome()
                receive = Outcome()
                tg.start_soon(send.capture, lambda: sending.send(b"more"))
                tg.start_soon(receive.capture, receiving.receive)
                await anyio.wait_all_tasks_blocked()
                assert not send.done.is_set()
                assert not receive.done.is_set()
                if how == "peer-closes":
                    await accepter.link.aclose(CloseCode.REVOKED, "revoked")
                    expected = (CloseCode.REVOKED, "revoked", True)
                elif how == "we-close":
                    await dialer.link.aclose(CloseCode.REVOKED, "revoked")
                    expected = (CloseCode.REVOKED, "revoked", False)
                elif how == "network-fails":
                    accepter.link.websocket.transport.abort()
                    expected = (CloseCode.ABNORMAL_CLOSURE, "", True)
                else:
                    # Bytes that are no frame, written past the accepter's Link.
                    await accepter.link.websocket.send(b"\xc1")
                    closed = await dialer.wait_stopped()
                    assert dialer.link.failure is not None
                    expected = (CloseCode.PROTOCOL_ERROR, str(dialer.link.failure), False)
                    assert (closed.code, closed.reason, closed.by_peer) == expected

                for outcome in (send, receive):
                    error = await outcome.error_of(ChannelClosedError)
                    assert (error.code, error.reason, error.by_peer) == expected


async def test_messages_received_before_the_peer_closes_the_channel_are_returned_first() -> None:
    with anyio.fail_after(10):
        async with linked() as (dialer, accepter):
            ours, theirs = await open_pair(dialer, accepter)
            await ours.send(b"one")
            await ours.send(b"two")
            ours.close_soon(CloseCode.NORMAL, "done")
            await accepter.log.wait_for(closed_on(theirs.id))

            assert theirs.closed is not None
            assert await theirs.receive() == b"one"
            assert await theirs.receive() == b"two"
            with pytest.raises(ChannelClosedError) as info:
                await theirs.receive()
            assert (info.value.code, info.value.reason, info.value.by_peer) == (
                CloseCode.NORMAL,
                "done",
                True,
            )


async def test_messages_received_before_the_link_closes_are_returned_first() -> None:
    with anyio.fail_after(10):
        async with linked() as (dialer, accepter):
            ours, theirs = await open_pair(dialer, accepter)
            await ours.send(b"one")
            await ours.send(b"two")
            await dialer.link.aclose(CloseCode.GOING_AWAY, "bye")
            await accepter.wait_stopped()

            assert theirs.closed is not None
            assert await theirs.receive() == b"one"
            assert await theirs.receive() == b"two"
            with pytest.raises(ChannelClosedError) as info:
                await theirs.receive()
            assert (info.value.code, info.value.reason, info.value.by_peer) == (
                CloseCode.GOING_AWAY,
                "bye",
                True,
            )


async def test_aclose_drops_the_messages_not_yet_received() -> None:
    with anyio.fail_after(10):
        async with linked() as (dialer, accepter):
            ours, theirs = await open_pair(dialer, accepter)
            await ours.send(b"unread")
            await accepter.log.wait_for(data_on(theirs.id, 1))

            await theirs.aclose(CloseCode.REFUSED, "not interested")
            with pytest.raises(ChannelClosedError) as info:
                await theirs.receive()
            assert (info.value.code, info.value.by_peer) == (CloseCode.REFUSED, False)
            with pytest.raises(ChannelClosedError) as info:
                await ours.receive()
            assert (info.value.code, info.value.by_peer) == (CloseCode.REFUSED, True)


# -- the mux --------------------------------------------------------------------------------------


async def test_opens_beyond_the_accept_backlog_are_refused_with_limit_reached() -> None:
    with anyio.fail_after(10):
        async with linked(backlog=2) as (dialer, accepter):
            opened = [dialer.mux.open_channel(f"p{i}", {"i": i}) for i in range(3)]
            with pytest.raises(ChannelClosedError) as info:
                await opened[2].receive()
            assert (info.value.code, info.value.by_peer) == (CloseCode.LIMIT_REACHED, True)

            accepted = [await accepter.mux.accept() for _ in range(2)]
            assert [(c.id, c.path, c.meta) for c in accepted] == [
                (c.id, c.path, c.meta) for c in opened[:2]
            ]
            # Accepting made room again, and the refused channel never shows up.
            later = dialer.mux.open_channel("later", {})
            assert (await accepter.mux.accept()).id == later.id
            await opened[0].send(b"hello")
            assert await accepted[0].receive() == b"hello"


@pytest.mark.parametrize("by_peer", [True, False], ids=["peer-closes", "we-close"])
async def test_wait_hello_raises_link_closed_if_the_link_closes_before_the_hello(
    by_peer: bool,
) -> None:
    with anyio.fail_after(10):
        client, server = websocket_pair()
        dialer = Endpoint(client, Side.DIALER)
        accepter = Endpoint(server, Side.ACCEPTER)
        async with running(dialer, accepter):
            async with anyio.create_task_group() as tg:
                waiting = Outcome()
                tg.start_soon(waiting.capture, dialer.mux.wait_hello)
                await anyio.wait_all_tasks_blocked()
                assert not waiting.done.is_set()
                await (accepter if by_peer else dialer).link.aclose(
                    CloseCode.UNAUTHORIZED, "who are you"
                )

                error = await waiting.error_of(LinkClosedError)
            assert (error.code, error.reason, error.by_peer) == (
                CloseCode.UNAUTHORIZED,
                "who are you",
                by_peer,
            )
            assert dialer.mux.hello is None


async def test_accept_and_open_channel_raise_link_closed_once_the_link_closed() -> None:
    with anyio.fail_after(10):
        async with linked() as (dialer, accepter):
            async with anyio.create_task_group() as tg:
                accepting = Outcome()
                tg.start_soon(accepting.capture, accepter.mux.accept)
                await anyio.wait_all_tasks_blocked()
                await dialer.link.aclose(CloseCode.GOING_AWAY, "bye")

                error = await accepting.error_of(LinkClosedError)
            assert (error.code, error.by_peer) == (CloseCode.GOING_AWAY, True)
            await dialer.wait_stopped()
            with pytest.raises(LinkClosedError) as info:
                dialer.mux.open_channel("s", {})
            assert (info.value.code, info.value.by_peer) == (CloseCode.GOING_AWAY, False)


async def test_a_message_larger_than_the_window_raises_instead_of_waiting_forever() -> None:
    with anyio.fail_after(5):
        async with linked(limits=Limits(initial_window=100)) as (dialer, accepter):
            ours = dialer.mux.open_channel("s", {})
            await accepter.mux.accept()
            with pytest.raises(LocalProtocolError):
                await ours.send(b"x" * 101)


@pytest.mark.parametrize("size", [0, 101])
async def test_a_message_that_can_never_be_sent_is_refused_before_it_is_sealed(size: int) -> None:
    sealed: list[int] = []

    def seal() -> bytes:
        sealed.append(size)
        return b"x" * size

    with anyio.fail_after(5):
        limits = Limits(initial_window=1000, max_data_size=100)
        async with linked(limits=limits) as (dialer, accepter):
            ours = dialer.mux.open_channel("s", {})
            await accepter.mux.accept()
            with pytest.raises(LocalProtocolError):
                await ours.send_sealed(size, seal)
            assert sealed == []


async def test_a_send_that_fits_the_window_still_waits_behind_an_earlier_waiting_send() -> None:
    with anyio.fail_after(10):
        async with linked(limits=SMALL_WINDOW) as (dialer, accepter):
            ours, theirs = await open_pair(dialer, accepter)
            await ours.send(message(0, 60))
            async with anyio.create_task_group() as tg:
                first, second = Outcome(), Outcome()
                tg.start_soon(first.capture, lambda: ours.send(message(1, 50)))
                await anyio.wait_all_tasks_blocked()
                assert not first.done.is_set()  # 40 bytes of window left: it waits
                # 10 bytes would fit now, but the message after a waiting one must not pass it.
                tg.start_soon(second.capture, lambda: ours.send(message(2, 10)))
                await anyio.wait_all_tasks_blocked()
                assert not second.done.is_set()
                assert [await theirs.receive() for _ in range(3)] == [
                    message(0, 60),
                    message(1, 50),
                    message(2, 10),
                ]
            assert first.error is None
            assert second.error is None


async def test_a_receiver_that_keeps_up_grants_window_once_per_half_window() -> None:
    count, size = 1024, 4096  # four windows of the default 1 MiB
    with anyio.fail_after(20):
        async with linked() as (dialer, accepter):
            ours, theirs = await open_pair(dialer, accepter)

            async def drain() -> None:
                for _ in range(count):
                    await theirs.receive()

            async with anyio.create_task_group() as tg:
                tg.start_soon(drain)
                for _ in range(count):
                    await ours.send(b"w" * size)
            await round_trip(ours, theirs)
            await round_trip(theirs, ours)
            grants = [e for e in dialer.log.events if isinstance(e, WindowUpdated)]
            # One `window` frame per 512 KiB read (8 for 4 MiB), not one per message.
            assert len(grants) == count * size // (DEFAULT_LIMITS.initial_window // 2)
