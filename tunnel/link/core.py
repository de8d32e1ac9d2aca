"""`Link`: drives one sans-I/O `proto.Connection` over one WebSocket, under anyio.

Host, teammate client and relay all use it. A reader task feeds every received message to the
protocol object and hands the resulting events, in order, to a synchronous callback; a writer task
sends what the protocol object queued. Nothing here buffers on its own: the only outgoing buffer
is the protocol object's, which flow control bounds (docs/protocol.md, "Flow control") to the
send windows of the open channels plus a few control frames each.
"""

from __future__ import annotations

import contextlib
import logging
import math
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

EventHandler = Callable[[Event], None]


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
        # Capacity 1: a doorbell, not a queue. Rings coalesce; the writer drains everything.
        self._doorbell_send, self._doorbell_receive = anyio.create_memory_object_stream[None](1)
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

    async def wait_closed(self) -> LinkClosedError:
        """Wait until the link is closed and return why."""
        await self._closed_event.wait()
        assert self._closed is not None
        return self._closed

    # -- sending ----------------------------------------------------------------------------

    def flush(self) -> None:
        """Wake the writer: it sends everything the protocol object has queued."""
        # WouldBlock: already rung. Closed: the writer is gone.
        with contextlib.suppress(
            anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError
        ):
            self._doorbell_send.send_nowait(None)

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
            self._doorbell_send.close()
            self._doorbell_receive.close()
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
        async for _ in self._doorbell_receive:
            try:
                await self._send_queued()
            except ConnectionClosed:
                return
            except TimeoutError:
                # The peer stopped reading its socket for send_timeout: cut it off.
                self.close_soon(CloseCode.SLOW_CONSUMER, "stopped reading for too long")
                await self._close_websocket()
                return
            if self._close_request is not None:
                await self._close_websocket()
                return

    async def _close_watchdog(self) -> None:
        # A writer stuck in send() (peer not reading, no send_timeout) must not keep a link we
        # decided to close alive forever.
        await self._close_requested.wait()
        await anyio.sleep(CLOSE_GRACE * 2)
        self._abort()

    async def _send_queued(self) -> None:
        timeout = math.inf if self._send_timeout is None else self._send_timeout
        while True:
            try:
                messages = self.connection.data_to_send()
            except ProtocolError:
                messages = []
            if not messages:
                return
            for message in messages:
                with anyio.fail_after(timeout):
                    await self.websocket.send(message)

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
