"""A link runs over any `Framing`: here one of plain message queues, with no WebSocket library."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import cast

import anyio
import pytest
from websockets.asyncio.connection import Connection as WebSocket

from tunnel.link import ChannelMux, Link, LinkChannel
from tunnel.link.framing import Framing
from tunnel.proto import Connection, DataReceived, Event, Outgoing, Side

pytestmark = pytest.mark.anyio

MAX_QUEUED = 256
"""Messages one end may have in flight to the other: far more than a test sends."""


class QueueClosed(Exception):
    """What a write to a closed `QueueFraming` raises."""


class QueueFraming:
    """One end of a pair of message queues, as a `Framing`: each message arrives whole."""

    closed_errors: tuple[type[BaseException], ...] = (QueueClosed,)

    def __init__(self) -> None:
        self.peer: QueueFraming | None = None
        self.inbox: asyncio.Queue[bytes | str | None] = asyncio.Queue(MAX_QUEUED)
        self.written: list[int] = []
        """How many messages each write carried."""
        self.reason: tuple[int, str, bool] | None = None
        self._closed = asyncio.Event()

    @property
    def is_open(self) -> bool:
        return self.reason is None

    @property
    def is_closed(self) -> bool:
        return self._closed.is_set()

    async def messages(self) -> AsyncIterator[bytes | str]:
        while (message := await self.inbox.get()) is not None:
            yield message

    def receive_with(self, on_message: Callable[[bytes | str], None]) -> bool:
        return False

    def write_messages(self, messages: Iterable[Outgoing | str]) -> None:
        assert self.peer is not None
        batch = [m if isinstance(m, bytes | str) else m[0] + bytes(m[1]) for m in messages]
        self.written.append(len(batch))
        for message in batch:
            self.peer.inbox.put_nowait(message)

    def backed_up(self) -> bool:
        return False

    def write_guard(self) -> AbstractAsyncContextManager[None]:
        @asynccontextmanager
        async def guard() -> AsyncIterator[None]:
            if not self.is_open:
                raise QueueClosed
            yield

        return guard()

    async def close(self, code: int, reason: str) -> None:
        assert self.peer is not None
        for end, by_peer in ((self, False), (self.peer, True)):
            if end.reason is None:
                end.reason = (code, reason, by_peer)
                end.inbox.put_nowait(None)
                end._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    def abort(self) -> None:
        assert self.peer is not None
        for end in (self, self.peer):
            if end.reason is None:
                end.reason = (1006, "", True)
                end.inbox.put_nowait(None)
                end._closed.set()

    def close_reason(self) -> tuple[int, str, bool]:
        assert self.reason is not None
        return self.reason


def link_over(framing: Framing, side: Side) -> tuple[Link, ChannelMux]:
    # No WebSocket object at all: the link reaches its connection only through `framing`.
    link = Link(cast(WebSocket, None), Connection(side), label=side.value, framing=framing)
    return link, ChannelMux(link)


@dataclass
class Joined:
    """A dialer and an accepter joined by queues, with one channel the dialer opened."""

    dialer: Link
    dialer_framing: QueueFraming
    channel: LinkChannel
    accepter: Link
    incoming: LinkChannel


async def joined(
    tg: anyio.abc.TaskGroup, on_event: Callable[[ChannelMux, Event], None] | None = None
) -> Joined:
    """Two links running in `tg`, hellos exchanged, one channel open; `on_event(mux, event)`,
    when given, is the accepter's handler (it passes each event on to the mux itself)."""
    left, right = QueueFraming(), QueueFraming()
    left.peer, right.peer = right, left
    dialer, dialer_mux = link_over(left, Side.DIALER)
    accepter, accepter_mux = link_over(right, Side.ACCEPTER)
    tg.start_soon(dialer.run, dialer_mux.on_event)
    if on_event is None:
        tg.start_soon(accepter.run, accepter_mux.on_event)
    else:
        tg.start_soon(accepter.run, partial(on_event, accepter_mux))
    for link in (dialer, accepter):
        link.connection.send_hello({})
        link.flush()
    await dialer_mux.wait_hello()
    await accepter_mux.wait_hello()
    channel = dialer_mux.open_channel("echo", {})
    incoming = await accepter_mux.accept()
    return Joined(dialer, left, channel, accepter, incoming)


async def test_a_link_over_another_framing_carries_channels_and_closes_with_its_code() -> None:
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            pair = await joined(tg)
            channel, incoming = pair.channel, pair.incoming
            for n in range(3):
                await channel.send(b"ping %d" % n)
            assert [await incoming.receive() for _ in range(3)] == [b"ping 0", b"ping 1", b"ping 2"]
            await incoming.send(b"pong")
            assert await channel.receive() == b"pong"
            closed = await pair.accepter.aclose(4001, "done")
            assert (closed.code, closed.by_peer) == (4001, False)
            seen = await pair.dialer.wait_closed()
            assert (seen.code, seen.reason, seen.by_peer) == (4001, "done", True)
        # The three sends of one turn of the event loop left in one write.
        assert 3 in pair.dialer_framing.written


async def test_what_many_readers_forward_to_one_link_in_a_turn_leaves_in_one_write() -> None:
    # A relay's fan-in: each teammate's reader forwards to the one host link. What they queue in
    # one turn of the event loop leaves in one socket write, not one write per reader.
    spokes = 20
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            host = await joined(tg)

            def forward(mux: ChannelMux, event: Event) -> None:
                mux.on_event(event)
                if isinstance(event, DataReceived):
                    host.dialer.connection.send_data(host.channel.id, event.data)
                    host.dialer.flush()

            senders = [await joined(tg, forward) for _ in range(spokes)]
            await anyio.wait_all_tasks_blocked()
            before = len(host.dialer_framing.written)
            for sender in senders:  # every spoke sends in this one turn
                sender.dialer.connection.send_data(sender.channel.id, b"m")
                sender.dialer.flush()
            await anyio.wait_all_tasks_blocked()
            assert host.dialer_framing.written[before:] == [spokes]
            tg.cancel_scope.cancel()


async def test_an_answer_to_a_message_leaves_in_the_turn_the_message_woke_its_task() -> None:
    # The message wakes the task that answers it; the write is scheduled right behind that
    # wake-up, so the answer leaves right after the task's step, before anything else scheduled
    # after the wake-up runs (here a probe): without that it would wait for a turn of its own.
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            written_when_probed: list[int] = []
            framing: list[QueueFraming] = []

            def probe_after(mux: ChannelMux, event: Event) -> None:
                mux.on_event(event)
                if isinstance(event, DataReceived):
                    written = framing[0].written
                    asyncio.get_running_loop().call_soon(
                        lambda: written_when_probed.append(len(written))
                    )

            pair = await joined(tg, probe_after)
            assert pair.dialer_framing.peer is not None
            framing.append(pair.dialer_framing.peer)

            async def answer() -> None:
                message = await pair.incoming.receive()
                await pair.incoming.send(b"re: " + message)

            tg.start_soon(answer)
            await anyio.wait_all_tasks_blocked()
            before = len(framing[0].written)
            await pair.channel.send(b"ping")
            assert await pair.channel.receive() == b"re: ping"
            assert written_when_probed == [before + 1]
            tg.cancel_scope.cancel()


class BrokenFraming(QueueFraming):
    """A framing whose writes raise, as a bug in one would."""

    def write_messages(self, messages: Iterable[Outgoing | str]) -> None:
        raise RuntimeError("broken framing")


async def test_a_write_that_raises_ends_its_own_link_and_the_others_due_are_written() -> None:
    # The writes due on a loop go out together: a link whose write fails must not keep the
    # others' frames back, and it ends with the error raised from its run(), as a task's bug.
    with anyio.fail_after(10):
        broken, broken_peer = BrokenFraming(), QueueFraming()
        left, right = QueueFraming(), QueueFraming()
        broken.peer, broken_peer.peer = broken_peer, broken
        left.peer, right.peer = right, left
        broken_link, _ = link_over(broken, Side.DIALER)
        good_link, good_mux = link_over(left, Side.DIALER)
        failure: list[BaseException] = []

        async def run_broken() -> None:
            try:
                await broken_link.run(lambda event: None)
            except RuntimeError as exc:
                failure.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_broken)
            tg.start_soon(good_link.run, good_mux.on_event)
            await anyio.wait_all_tasks_blocked()
            for link in (broken_link, good_link):  # both due in the same turn, broken first
                link.connection.send_hello({})
                link.flush()
            with anyio.fail_after(5):
                while not right.inbox.qsize():
                    await anyio.sleep(0)
                while not failure:
                    await anyio.sleep(0.01)
            assert str(failure[0]) == "broken framing"
            tg.cancel_scope.cancel()
