"""Channel objects for the ends of a link (host and teammate): `ChannelMux` and `LinkChannel`.

The relay forwards protocol events itself; the endpoints want one object per channel with an
awaitable `send` that waits for window and a `receive` that acknowledges what it hands out, which
is what grants the peer more window (docs/protocol.md, "Flow control").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio

from tunnel.handshake import CAST_GROUPS
from tunnel.link.core import Link
from tunnel.link.errors import ChannelClosedError, LinkClosedError
from tunnel.proto import (
    CastCut,
    CastReceived,
    ChannelClosed,
    ChannelNotOpenError,
    ChannelOpened,
    ChannelState,
    DataReceived,
    Event,
    HelloReceived,
    Limits,
    LocalProtocolError,
    WindowUpdated,
)
from tunnel.proto.codes import CloseCode
from tunnel.proto.frames import check_group


class _Signal:
    """Wakes every task waiting right now; later waiters wait for the next notify().

    Each waiter awaits a future of its own, made when it starts to wait, so that a waiter
    cancelled meanwhile cancels only its own; there is none while nobody waits, so notifying
    nobody (the steady state: a reader that keeps up finds its message already there) costs
    nothing. A bare future rather than an asyncio Event: the same wake-up without making an
    Event, and with no coroutine of its own, for every message a waiting reader gets.
    """

    __slots__ = ("_waiters",)

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] | None = None

    def notify(self) -> bool:
        """Wake the tasks waiting; whether a wait was under way (a task cancelled while it
        waited still counts, until this notify)."""
        waiters = self._waiters
        if waiters is None:
            return False
        self._waiters = None
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        return True

    def wait(self) -> asyncio.Future[None]:
        """What to await until the next notify(): a future, so no coroutine runs in between."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = [waiter]
        else:
            self._waiters.append(waiter)
        return waiter


@dataclass(frozen=True, slots=True)
class Casted:
    """What the relay sent a teammate's channel of the host's broadcast, in the channel's order
    among its data: a cast (`data`), or with `data` None the relay's `cut`."""

    data: bytes | None


class LinkChannel:
    """One channel of a link, as seen by an endpoint. Each message is one `data` frame."""

    def __init__(self, mux: ChannelMux, channel: int, path: str, meta: dict[str, Any]) -> None:
        self._mux = mux
        self.id = channel
        """The channel id on this link."""
        self.path = path
        """What the channel is for (the `open` path)."""
        self.meta = meta
        """The `open` meta, as the opener sent it (or as the relay forwarded it)."""
        # Bounded by the receive window: the protocol object fails the link (4004) before a peer
        # can make it hold more than `initial_window` bytes not yet acknowledged.
        self._inbox: deque[bytes | Casted] = deque()
        self._readable = _Signal()
        self._writable = _Signal()
        # Keeps messages in the order their senders called send(), which end-to-end encryption
        # needs (the nonce is a counter). Taken only by a send that has to wait; `_waiting`
        # counts those, and a send that finds none waiting and enough window sends at once.
        self._send_lock = anyio.Lock()
        self._waiting = 0
        self._closed: ChannelClosedError | None = None
        # A link's limits change only before its first channel (Connection.adopt_limits).
        self._largest_data = mux.link.connection.limits.largest_data

    @property
    def closed(self) -> ChannelClosedError | None:
        """Why the channel closed, or None while it is open."""
        return self._closed

    @property
    def limits(self) -> Limits:
        """The limits of the link this channel runs on (as agreed in the hellos)."""
        return self._mux.link.connection.limits

    async def send(self, message: bytes) -> None:
        """Send one message, waiting for send window first. Raises ChannelClosedError."""
        await self.send_sealed(len(message), lambda: message)

    async def send_sealed(
        self, size: int, seal: Callable[[], bytes], *, then: Callable[[], None] | None = None
    ) -> None:
        """Send the message `seal()` returns (at most `size` bytes) once that much window is free,
        and call `then()` right after it is queued, before anything else can be.

        `seal` runs only when the message is sure to be queued, with no await in between: a send
        cancelled while it waits for window never consumes a nonce of the end-to-end encryption,
        whose receiver counts messages. When no earlier send is waiting and the window has room,
        the message is queued at once and this returns without yielding to the event loop: a
        sender that keeps within its window costs no task switch per message. Raises
        ChannelClosedError, and LocalProtocolError (before sealing) for a size no `data` frame of
        this link can carry.
        """
        largest = self._largest_data
        if not 1 <= size <= largest:
            # Checked before waiting: no window ever opens that wide, and sealing a message that
            # can never be sent would use up a nonce.
            raise LocalProtocolError(
                f"a data frame carries 1 to {largest} bytes", code=CloseCode.LIMIT_REACHED
            )
        # No await between the window check and the seal, so a cancelled send never seals.
        if not self._waiting and self._try_send(size, seal, then):
            return
        self._waiting += 1
        try:
            async with self._send_lock:
                while not self._try_send(size, seal, then):
                    await self._writable.wait()
        finally:
            self._waiting -= 1

    def _try_send(
        self, size: int, seal: Callable[[], bytes], then: Callable[[], None] | None
    ) -> bool:
        """Queue the sealed message if the window has room; raise once the channel is closed."""
        while True:
            if self._closed is not None:
                raise self._closed
            link = self._mux.link
            connection = link.connection
            try:
                # The window is 0 unless the channel is OPEN: its state matters only then.
                if connection.send_window(self.id) < size:
                    if connection.channel_state(self.id) is not ChannelState.OPEN:
                        raise ChannelNotOpenError("the channel is closing")
                    return False
                message = seal()
                if len(message) > size or not connection.send_data(self.id, message):
                    raise RuntimeError("a sealed message must be at most `size` bytes")
                if then is not None:
                    then()
                link.flush()
                return True
            except ChannelNotOpenError:
                self._mark_closed(CloseCode.NORMAL, "closed", by_peer=True)
            except LocalProtocolError:
                failure = connection.failure
                if failure is None:
                    raise
                self._mark_closed(failure.code, "link failed", by_peer=False)

    async def receive(self) -> bytes:
        """Return the next message; raise ChannelClosedError once closed and drained.

        Messages that arrived before the close are still returned first. Casts are skipped:
        only a channel that takes the host's broadcast reads them, with `receive_any`.
        """
        while True:
            # receive_any's loop, written out: a coroutine fewer per message.
            while not self._inbox:
                if self._closed is not None:
                    raise self._closed
                await self._readable.wait()
            message = self._take()
            if isinstance(message, bytes):
                return message

    async def receive_any(self) -> bytes | Casted:
        """Return the next message or cast (or cut), in the order they arrived; raise
        ChannelClosedError once closed and drained."""
        while not self._inbox:
            if self._closed is not None:
                raise self._closed
            await self._readable.wait()
        return self._take()

    def _take(self) -> bytes | Casted:
        """The first message of the inbox, its bytes given back to the peer's window."""
        message = self._inbox.popleft()
        size = len(message) if isinstance(message, bytes) else len(message.data or b"")
        if size and self._closed is None:
            try:
                self._mux.link.connection.acknowledge(self.id, size)
            except LocalProtocolError:
                pass  # the link failed meanwhile; the close reaches us through the mux
            else:
                self._mux.link.flush()
        return message

    def join_broadcast(self, group: int = 0) -> None:
        """Ask the relay to copy the host's casts of `group` to this channel from the next one on,
        and no other group's (the host's side; docs/protocol.md, "Broadcast groups"). Raises
        ChannelClosedError once the channel is closed, and LocalProtocolError for a group other
        than 0 when the relay did not advertise `cast-groups` (it would fail the whole link)."""
        check_group(group)
        if group and not self._mux.cast_groups:
            raise LocalProtocolError("the relay does not take broadcast groups")
        self._broadcast_signal(partial(self._mux.link.connection.join, group=group))

    @property
    def cast_groups(self) -> bool:
        """Whether this channel's relay takes broadcast groups other than 0 (`ChannelMux`)."""
        return self._mux.cast_groups

    def part_broadcast(self) -> None:
        """Ask the relay to stop copying the host's casts to this channel (the host's side);
        nothing to do once the channel is closed."""
        with contextlib.suppress(ChannelClosedError):
            self._broadcast_signal(self._mux.link.connection.part)

    def _broadcast_signal(self, signal: Callable[[int], None]) -> None:
        if self._closed is not None:
            raise self._closed
        try:
            signal(self.id)
        except ChannelNotOpenError:
            raise self._mark_closed(CloseCode.NORMAL, "closed", by_peer=True) from None
        except LocalProtocolError:
            failure = self._mux.link.connection.failure
            if failure is None:
                raise
            raise self._mark_closed(failure.code, "link failed", by_peer=False) from None
        self._mux.link.flush()

    def close_soon(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Close the channel now (the `close` frame is sent by the link's writer)."""
        if self._closed is not None:
            return
        # LocalProtocolError: the link failed; the channel is closed either way.
        with contextlib.suppress(LocalProtocolError):
            self._mux.link.connection.close_channel(self.id, code, reason)
        self._mark_closed(code, reason, by_peer=False)
        self._mux.link.flush()

    async def aclose(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Close the channel. Messages already buffered here are dropped."""
        self.close_soon(code, reason)
        self._inbox.clear()
        await anyio.lowlevel.checkpoint()

    # -- called by the mux ------------------------------------------------------------------

    def _deliver(self, data: bytes | Casted) -> None:
        self._inbox.append(data)
        if self._readable.notify():
            self._mux.link.write_after_woken_task()

    def _window(self) -> None:
        self._writable.notify()

    def _mark_closed(self, code: int, reason: str, *, by_peer: bool) -> ChannelClosedError:
        """Close the channel (the first reason stays); returns why it is closed."""
        if self._closed is None:
            self._closed = ChannelClosedError(code, reason, by_peer=by_peer)
            self._mux._forget(self.id)
        self._readable.notify()
        self._writable.notify()
        return self._closed


class ChannelMux:
    """Turns a link's events into `LinkChannel` objects; pass `on_event` to `Link.run`."""

    def __init__(self, link: Link, *, backlog: int = 64) -> None:
        self.link = link
        """The link this mux serves."""
        self.hello: dict[str, Any] | None = None
        """The peer's hello payload, once received."""
        self._hello_received = anyio.Event()
        self._channels: dict[int, LinkChannel] = {}
        # Bounded by `backlog`: an open beyond it is refused with LIMIT_REACHED, not queued.
        self._incoming_send, self._incoming = anyio.create_memory_object_stream[LinkChannel](
            backlog
        )

    def on_event(self, event: Event) -> None:
        """Dispatch one protocol event (the `Link.run` callback)."""
        if isinstance(event, DataReceived):
            found = self._channels.get(event.channel)
            if found is not None:
                data = event.data
                found._deliver(data if isinstance(data, bytes) else bytes(data))
        elif isinstance(event, WindowUpdated):
            found = self._channels.get(event.channel)
            if found is not None:
                found._window()
        elif isinstance(event, CastReceived | CastCut):
            found = None if event.channel is None else self._channels.get(event.channel)
            if found is not None:
                cast = event.data if isinstance(event, CastReceived) else None
                found._deliver(
                    Casted(cast if cast is None or isinstance(cast, bytes) else bytes(cast))
                )
        elif isinstance(event, ChannelOpened):
            self._opened(event)
        elif isinstance(event, ChannelClosed):
            found = self._channels.get(event.channel)
            if found is not None:
                found._mark_closed(event.code, event.reason, by_peer=True)
        elif isinstance(event, HelloReceived):
            self.hello = event.payload
            self._hello_received.set()

    def _opened(self, event: ChannelOpened) -> None:
        channel = LinkChannel(self, event.channel, event.path, event.meta)
        self._channels[event.channel] = channel
        try:
            self._incoming_send.send_nowait(channel)
        except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            channel.close_soon(CloseCode.LIMIT_REACHED, "too many channels waiting")

    def _forget(self, channel: int) -> None:
        self._channels.pop(channel, None)

    @property
    def cast_groups(self) -> bool:
        """Whether the peer's hello (a relay's) advertised broadcast groups (`CAST_GROUPS`):
        only then may a host cast to or join a group other than 0."""
        capabilities = (self.hello or {}).get("capabilities")
        return isinstance(capabilities, list) and CAST_GROUPS in capabilities

    async def wait_hello(self) -> dict[str, Any]:
        """Wait for the peer's hello; raise LinkClosedError if the link closes first."""
        async with anyio.create_task_group() as tg:

            async def watch_close() -> None:
                await self.link.wait_closed()
                tg.cancel_scope.cancel()

            tg.start_soon(watch_close)
            await self._hello_received.wait()
            tg.cancel_scope.cancel()
        if self.hello is None:
            closed = self.link.closed
            assert closed is not None
            raise closed
        return self.hello

    def open_channel(self, path: str, meta: dict[str, Any]) -> LinkChannel:
        """Open a channel to the peer. Raises LinkClosedError if the link is closed."""
        if self.link.closed is not None:
            raise self.link.closed
        try:
            channel_id = self.link.connection.open_channel(path, meta)
        except LocalProtocolError:
            if self.link.connection.failure is not None or self.link.closing:
                raise LinkClosedError(
                    self.link.connection.failure.code
                    if self.link.connection.failure is not None
                    else CloseCode.GOING_AWAY,
                    "link is closing",
                    by_peer=False,
                ) from None
            raise
        channel = LinkChannel(self, channel_id, path, meta)
        self._channels[channel_id] = channel
        self.link.flush()
        return channel

    async def accept(self) -> LinkChannel:
        """Return the next channel the peer opened; raise LinkClosedError once the link closed."""
        try:
            return await self._incoming.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            closed = self.link.closed
            raise (
                closed
                if closed is not None
                else LinkClosedError(CloseCode.GOING_AWAY, "", by_peer=False)
            ) from None

    def link_closed(self, closed: LinkClosedError) -> None:
        """Close every channel with the link's code; call once `Link.run` returned."""
        for channel in list(self._channels.values()):
            channel._mark_closed(closed.code, closed.reason, by_peer=closed.by_peer)
        self._channels.clear()
        self._incoming_send.close()
