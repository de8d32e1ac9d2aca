"""`Link`: drives one sans-I/O `proto.Connection` over one WebSocket, under anyio.

Host, teammate client and relay all use it. A reader task feeds every received message to the
protocol object and hands the resulting events, in order, to a synchronous callback; what the
protocol object queued is sent as described below. Nothing here buffers on its own: the outgoing
buffer is the protocol object's (and, while the socket is full, at most what it held then, taken
out of it in order), which flow control bounds (docs/protocol.md, "Flow control") to the send
windows of the open channels plus a few control frames each.

Writes are batched, because the event loop's per-write cost (a timer, a task switch, a system
call) is what bounds throughput, not encoding. `flush()` schedules one callback for the end of the
current turn of the event loop; it frames everything queued by then and hands it to the socket in
one write, without waking a task. Only when the socket's buffer is full (the peer reads slower
than we write) does the writer task take over: it waits for the socket to drain, and sends
whatever was queued meanwhile as further batches. Either way frames leave in the order they were
queued, no timer runs per write (a watchdog checks the send deadline), and the wake-ups use
asyncio's own Event: websockets' connection runs only on asyncio, and anyio's Event costs several
times more to make and to wait on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import anyio
from websockets.asyncio.connection import Connection as WebSocket
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from tunnel.link.errors import LinkClosedError
from tunnel.proto import Connection, Event, ProtocolError, RemoteProtocolError
from tunnel.proto.codes import CloseCode

logger = logging.getLogger("tunnel.link")

MAX_REASON_BYTES = 123
"""A WebSocket close reason fits in a control frame: 125 bytes minus the 2-byte code."""

CLOSE_GRACE = 5.0
"""Seconds to finish sending and closing after `close_soon`, before the socket is dropped."""

CANCEL_GRACE = 1.0
"""Seconds for the closing handshake when the link's task is cancelled."""

WRITE_BATCH_BYTES = 256 * 1024
"""Bytes of frames the writer hands the socket in one write before it waits for the socket to
drain; what is queued beyond it is already in memory (the protocol object's buffer), so the bound
only keeps one write's joined copy small."""

EventHandler = Callable[[Event], None]


def _batch_end(messages: list[bytes], start: int) -> int:
    """Where the batch from `messages[start]` ends: WRITE_BATCH_BYTES, or one larger message."""
    end, size = start, 0
    while end < len(messages) and (end == start or size < WRITE_BATCH_BYTES):
        size += len(messages[end])
        end += 1
    return end


def clip_reason(reason: str, limit: int = MAX_REASON_BYTES) -> str:
    """Cut `reason` to at most `limit` UTF-8 bytes without splitting a character."""
    data = reason.encode("utf-8")
    if len(data) <= limit:
        return reason
    return data[:limit].decode("utf-8", "ignore")


class Link:
    """One WebSocket carrying one protocol connection.

    Call `run(on_event)` in a task: it returns (with the `LinkClosedError` describing why) once
    the WebSocket is closed. Everything else is synchronous and never blocks: after changing the
    protocol object (open, send, acknowledge, close a channel), call `flush()` so the writer sends
    what was queued.
    """

    def __init__(
        self,
        websocket: WebSocket,
        connection: Connection,
        *,
        send_timeout: float | None = None,
        label: str = "link",
    ) -> None:
        self.websocket = websocket
        """The WebSocket this link runs over."""
        self.connection = connection
        """The protocol object; mutate it only from the event loop thread, then call flush()."""
        self.label = label
        """Short description used in log lines (never a secret)."""
        self._send_timeout = send_timeout
        # Set only while the writer task sleeps: then it holds no frame, and the socket is free
        # for a write from flush()'s callback.
        self._wakeup: asyncio.Event | None = None
        self._write_scheduled = False
        # Frames taken from the protocol object beyond one batch, for the writer task to send
        # first: bounded by what the protocol object held.
        self._unsent: list[bytes] = []
        self._writes = 0
        self._write_started = 0
        self._writing = False
        # A write is in progress, maybe waiting for the socket to drain: the watchdog's cue.
        self._close_request: tuple[int, str] | None = None
        self._closed: LinkClosedError | None = None
        self._closed_event = anyio.Event()
        self._close_requested = anyio.Event()
        self._failure: ProtocolError | None = None

    # -- state ------------------------------------------------------------------------------

    @property
    def closed(self) -> LinkClosedError | None:
        """Why the link closed, or None while it is open."""
        return self._closed

    @property
    def closing(self) -> bool:
        """Whether a close was requested or happened: nothing new should be started on it."""
        return self._close_request is not None or self._closed is not None

    @property
    def failure(self) -> ProtocolError | None:
        """The protocol error that made us close the link, if that is how it ended."""
        return self._failure

    @property
    def writes(self) -> int:
        """How many batches of frames went to the socket, each in one write."""
        return self._writes

    async def wait_closed(self) -> LinkClosedError:
        """Wait until the link is closed and return why."""
        await self._closed_event.wait()
        assert self._closed is not None
        return self._closed

    # -- sending ----------------------------------------------------------------------------

    def flush(self) -> None:
        """Make sure everything the protocol object has queued gets sent.

        Cheap enough to call after every change: the first call in a turn of the event loop
        schedules one write for the end of it, later calls find it scheduled; a busy writer task
        takes the new frames before it sleeps again.
        """
        if self._wakeup is None or self._write_scheduled:
            return
        if self._close_request is not None:
            self._wake_writer()
        elif self.connection.has_data_to_send():
            self._write_scheduled = True
            asyncio.get_running_loop().call_soon(self._write_now)

    def _wake_writer(self) -> None:
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set()

    def _write_now(self) -> None:
        """Send what is queued in one socket write while the writer task sleeps (see the module)."""
        self._write_scheduled = False
        if self._wakeup is None:
            return  # the writer task is awake and takes everything queued
        websocket = self.websocket
        if self._close_request is not None or websocket.protocol.state is not State.OPEN:
            # Closing: the writer task sends what is queued, then the close.
            self._wake_writer()
            return
        try:
            messages = self.connection.data_to_send()
        except ProtocolError:
            return  # the link failed; close_soon() is on its way
        if not messages:
            return
        end = _batch_end(messages, 0)
        self._hand_to_socket(messages[:end])
        if end < len(messages):
            # The writer task sends the rest, one batch per drain of the socket, before anything
            # queued later.
            self._unsent = messages[end:]
            self._wake_writer()
        elif self._backed_up():
            self._wake_writer()  # to wait for the socket to drain, under the send deadline

    def _hand_to_socket(self, messages: list[bytes]) -> None:
        """Frame `messages` and write them to the socket at once; the connection must be open."""
        websocket = self.websocket
        protocol = websocket.protocol
        for message in messages:
            protocol.send_binary(message)
        # Only these frames were added since the protocol's last drain: the connection is open
        # (checked by the caller), and nothing else writes to it without draining at once.
        websocket.transport.writelines(protocol.data_to_send())
        self._writes += 1

    def _backed_up(self) -> bool:
        """The socket's buffer is over its high-water mark: websockets waits for it to drain."""
        transport = self.websocket.transport
        return transport.get_write_buffer_size() > transport.get_write_buffer_limits()[1]

    def close_soon(self, code: int, reason: str = "") -> None:
        """Ask the writer to send what is queued, then close the WebSocket with `code`.

        The first request wins; later ones are ignored.
        """
        if self._close_request is None and self._closed is None:
            self._close_request = (int(code), clip_reason(reason))
            self._close_requested.set()
        self.flush()

    async def aclose(self, code: int = CloseCode.NORMAL, reason: str = "") -> LinkClosedError:
        """Close the link with `code` and wait until it is closed (bounded by CLOSE_GRACE)."""
        self.close_soon(code, reason)
        with anyio.move_on_after(CLOSE_GRACE + 1):
            return await self.wait_closed()
        self._abort()
        return await self.wait_closed()

    # -- running ----------------------------------------------------------------------------

    async def run(self, on_event: EventHandler) -> LinkClosedError:
        """Read and write until the WebSocket closes; return why it closed.

        `on_event` is called synchronously, in order, for every protocol event. It must not
        block; it may change the protocol object and call `flush()` or `close_soon()`.
        """
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._writer)
                tg.start_soon(self._close_watchdog)
                if self._send_timeout is not None:
                    tg.start_soon(self._send_watchdog, self._send_timeout)
                await self._reader(on_event)
                # The reader ended: give the writer a bounded moment to finish a requested close.
                with anyio.move_on_after(CLOSE_GRACE):
                    await self.websocket.wait_closed()
                tg.cancel_scope.cancel()
        finally:
            if self.websocket.state is not State.CLOSED:
                # Cancelled from outside (the owner is stopping): say goodbye, briefly.
                if self._close_request is None:
                    self._close_request = (int(CloseCode.GOING_AWAY), "going away")
                with anyio.move_on_after(CANCEL_GRACE, shield=True):
                    await self._close_websocket()
                self._abort()
            if self._closed is None:
                self._finish()
            self._wakeup = None  # no writer any more: flush() does nothing
        assert self._closed is not None
        return self._closed

    async def _reader(self, on_event: EventHandler) -> None:
        try:
            async for message in self.websocket:
                if self._close_request is not None:
                    # We are closing: whatever the peer still sends is moot.
                    continue
                try:
                    if isinstance(message, str):
                        raise RemoteProtocolError("text message on a binary protocol")
                    self.connection.receive_data(message)
                except RemoteProtocolError as exc:
                    self._failure = exc
                    self.close_soon(exc.code, str(exc))
                    continue
                for event in self.connection.events_received():
                    on_event(event)
                self.flush()
        except ConnectionClosed:
            pass
        self._finish()

    async def _writer(self) -> None:
        while True:
            if (
                self._close_request is None
                and not self._unsent
                and not self.connection.has_data_to_send()
                and not self._backed_up()
            ):
                # Checked and set with no await in between, so no flush() can fall in a gap.
                self._wakeup = wakeup = asyncio.Event()
                await wakeup.wait()
                continue
            try:
                await self._send_queued()
            except ConnectionClosed:
                return
            if self._close_request is not None:
                await self._close_websocket()
                return

    async def _send_watchdog(self, limit: float) -> None:
        """Cut off a peer that has kept one write waiting for more than `limit` seconds.

        A deadline per write would cost a timer per batch; looking every quarter of the limit
        costs four wake-ups per limit per link, and cuts off after the limit to 1.25 times it.
        """
        ticks = 4
        watched, seen = -1, 0
        while True:
            await anyio.sleep(limit / ticks)
            current = self._write_started if self._writing else -1
            if current < 0 or current != watched:
                watched, seen = current, 0
                continue
            seen += 1
            if seen >= ticks:
                # The same write has waited at least `limit`: the peer stopped reading its socket.
                self.close_soon(CloseCode.SLOW_CONSUMER, "stopped reading for too long")
                await self._close_websocket()
                return

    async def _close_watchdog(self) -> None:
        # A writer stuck in send() (peer not reading, no send_timeout) must not keep a link we
        # decided to close alive forever.
        await self._close_requested.wait()
        await anyio.sleep(CLOSE_GRACE * 2)
        self._abort()

    async def _send_queued(self) -> None:
        while True:
            messages, self._unsent = self._unsent, []
            try:
                messages += self.connection.data_to_send()
            except ProtocolError:
                return  # the link failed; close_soon() is on its way
            if not messages:
                if self._backed_up():
                    await self._write(messages)  # a batch of none: wait for the socket to drain
                return
            start = 0
            while start < len(messages):
                end = _batch_end(messages, start)
                await self._write(messages[start:end])
                start = end

    async def _write(self, messages: list[bytes]) -> None:
        """Send `messages` as WebSocket binary messages in one socket write, then drain.

        `websocket.send()` writes to the socket once per message. `send_context()` is the same
        guard `send()` runs in (state check, errors become ConnectionClosed, drain on exit);
        inside it the sans-I/O protocol frames every message and the frames go out together.
        """
        websocket = self.websocket
        self._write_started += 1
        self._writing = True
        try:
            async with websocket.send_context():
                if messages:
                    self._hand_to_socket(messages)  # send_context() checked the connection
        finally:
            self._writing = False

    async def _close_websocket(self) -> None:
        assert self._close_request is not None
        code, reason = self._close_request
        with anyio.move_on_after(CLOSE_GRACE):
            with contextlib.suppress(ConnectionClosed):
                await self.websocket.close(code, reason)
            return
        self._abort()

    def _abort(self) -> None:
        transport = getattr(self.websocket, "transport", None)
        if transport is not None:
            transport.abort()

    def _finish(self) -> None:
        if self._closed is not None:
            return
        if self._close_request is not None:
            code, reason = self._close_request
            self._closed = LinkClosedError(code, reason, by_peer=False)
        else:
            protocol = self.websocket.protocol
            sent, rcvd = protocol.close_sent, protocol.close_rcvd
            if sent is not None and (rcvd is None or not protocol.close_rcvd_then_sent):
                # The WebSocket layer closed on its own: message too big (1009), keepalive
                # timeout (1011), a malformed WebSocket frame (1002).
                self._closed = LinkClosedError(sent.code, sent.reason, by_peer=False)
            else:
                self._closed = LinkClosedError(
                    CloseCode.ABNORMAL_CLOSURE if rcvd is None else rcvd.code,
                    "" if rcvd is None else rcvd.reason,
                    by_peer=True,
                )
        self._closed_event.set()
