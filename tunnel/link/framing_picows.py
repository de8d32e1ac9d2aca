"""`PicowsFraming`: the link's `Framing` over picows, a WebSocket library that parses frames in
Cython into one read buffer (a relay on it spends about four fifths of its CPU per message on
websockets: docs/performance.md, "The relay on picows and on uvloop"); `create_server` and
`connect` open its connections. An optional dependency: `pip install 'agent-tunnel[fast]'`.

picows reads; writing stays ours. picows sends one frame per call, so a batch of messages is
framed here (`frame_pieces`, as for websockets) and handed to the socket's transport in one
`writelines`, a `data` frame's payload a piece of its own. picows answers pings and parses the
close frames; the closing handshake, keepalive pings, reassembly of fragmented messages and the
bounded queue between picows' callback and the link's reader (used until the link takes messages
as they come, `receive_with`) are here, with websockets' close
codes: 1009 for a message over `max_size`, 1011 for a keepalive ping without an answer, 1002 for
a broken frame, 1007 for text that is not UTF-8.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import NamedTuple

from picows import (
    WSCloseCode,
    WSFrame,
    WSListener,
    WSMsgType,
    WSParsedURL,
    WSTransport,
    WSUpgradeRequest,
    WSUpgradeResponseWithListener,
)
from picows.proxy import WSSocketFactory
from websockets.proxy import Proxy, parse_proxy
from websockets.uri import parse_uri

from tunnel.link.framing import frame_pieces
from tunnel.proto import Outgoing
from tunnel.proto.codes import CloseCode


class _PeerErrors(logging.Filter):
    """Drops picows' line for a peer's broken frame: the link's owner logs the close it makes
    (a relay: once, with the peer's name), as it does on websockets."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("WS parser error")


_PICOWS = logging.getLogger("tunnel.link.picows.connections")
# picows logs every connection made and lost at INFO: a relay holds thousands.
_PICOWS.setLevel(logging.WARNING)
_PICOWS.addFilter(_PeerErrors())
PICOWS_LOGGER = logging.LoggerAdapter(_PICOWS)
"""The logger picows is given: warnings and errors pass. An adapter, not a `Logger`: picows
makes a `Logger` of its own for every connection it is given a `Logger` for, a cost per idle
teammate."""

READ_BUFFER_SIZE = 2048
"""picows' first read buffer per connection, the smallest it takes; it doubles while a read
fills it (a 64 KiB frame grows it within a few reads), and an idle connection keeps 2 KiB
instead of picows' default 16 KiB."""

MAX_QUEUE = 16
"""Received messages the link's reader has not taken yet before the socket stops being read
(websockets' `max_queue`); one read that holds more frames still lands whole, so the queue is
bounded by this plus what one read buffer holds."""

RESUME_QUEUE = 4
"""Queued messages at or below which reading the socket resumes."""

CLOSE_TIMEOUT = 5.0
"""Seconds `close()` waits for the peer's answer to our close frame before dropping the socket
(websockets' `close_timeout`; the relay gives websockets' server the same)."""

NO_STATUS_RCVD = 1005
"""The code a close frame without a code counts as (RFC 6455, section 7.1.5)."""

INVALID_DATA = 1007
"""The close code for a text message that is not UTF-8 (RFC 6455, section 7.4.1)."""


_DATA = frozenset({WSMsgType.BINARY, WSMsgType.TEXT, WSMsgType.CONTINUATION})


class FramingClosedError(Exception):
    """The WebSocket is closed, or closing: what `PicowsFraming` raises to a writer or reader."""


class PicowsFraming(WSListener):
    """`Framing` over one picows connection; also the picows listener that receives its frames.

    Make it with `ping_interval`, `ping_timeout`, `close_timeout` and `max_size` (None turns
    each off, as in websockets) and hand it to picows as the connection's listener
    (`create_server`'s route returns one per WebSocket, `connect` makes one).
    """

    # A relay keeps one per connection: no per-instance dict.
    __slots__ = (
        "_awaiting_pong",
        "_close_received",
        "_close_timeout",
        "_closed_waiter",
        "_disconnected",
        "_drain_waiter",
        "_fragments",
        "_fragments_text",
        "_inbox",
        "_inbox_waiter",
        "_keepalive",
        "_loop",
        "_mask",
        "_max_size",
        "_on_connected",
        "_on_message",
        "_own_close",
        "_ping_interval",
        "_ping_timeout",
        "_reading_paused",
        "_write_paused",
        "_writelines",
        "transport",
    )

    closed_errors: tuple[type[BaseException], ...] = (FramingClosedError,)

    def __init__(
        self,
        *,
        max_size: int | None,
        ping_interval: float | None = None,
        ping_timeout: float | None = None,
        close_timeout: float | None = CLOSE_TIMEOUT,
        on_connected: Callable[[PicowsFraming], None] | None = None,
    ) -> None:
        self._max_size = max_size
        self._close_timeout = close_timeout
        self._ping_interval = ping_interval
        self._ping_timeout = ping_timeout
        self._on_connected = on_connected
        self.transport: WSTransport | None = None
        """picows' transport, once the WebSocket is open."""
        self._loop = asyncio.get_running_loop()
        self._writelines: Callable[[list[bytes | memoryview]], None] | None = None
        self._mask = False
        # Bounded: reading the socket pauses at MAX_QUEUE (see its docstring).
        self._inbox: deque[bytes | str] = deque()
        self._on_message: Callable[[bytes | str], None] | None = None
        self._reading_paused = False
        self._inbox_waiter: asyncio.Future[None] | None = None
        self._fragments: bytearray | None = None
        self._fragments_text = False
        self._close_received = False
        self._disconnected = False
        self._closed_waiter: asyncio.Future[None] | None = None
        self._write_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._keepalive: asyncio.TimerHandle | None = None
        self._awaiting_pong = False
        self._own_close: tuple[int, str] | None = None

    # -- picows' callbacks --------------------------------------------------------------------

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport
        underlying = transport.underlying_transport
        self._writelines = underlying.writelines
        self._mask = transport.is_client_side
        if self._ping_interval is not None:
            self._keepalive = self._loop.call_later(self._ping_interval, self._ping)
        if self._on_connected is not None:
            self._on_connected(self)

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        kind = frame.msg_type
        if kind is WSMsgType.BINARY and frame.fin and self._fragments is None:
            if not transport.is_close_frame_sent:
                self._deliver(frame.get_payload_as_bytes())
            # else: closing, and picows may still parse what followed a broken frame: discarded
        elif kind is WSMsgType.CLOSE:
            self._on_close_frame(transport)
        elif kind is WSMsgType.PONG:
            self._on_pong()
        elif kind in _DATA and not transport.is_close_frame_sent:
            self._on_data_frame(frame)

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        self._disconnected = True
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None
        self._wake_reader()
        self._wake_writer()
        if self._closed_waiter is not None and not self._closed_waiter.done():
            self._closed_waiter.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_writer()

    # -- receiving ----------------------------------------------------------------------------

    def _on_data_frame(self, frame: WSFrame) -> None:
        """A frame of a fragmented message, or a text message: websockets' rules and codes."""
        kind = frame.msg_type
        if kind is WSMsgType.CONTINUATION:
            if self._fragments is None:
                self._fail(CloseCode.PROTOCOL_ERROR, "unexpected continuation frame")
                return
            fragments = self._fragments
        else:
            if self._fragments is not None:
                self._fail(CloseCode.PROTOCOL_ERROR, "expected a continuation frame")
                return
            fragments = self._fragments = bytearray()
            self._fragments_text = kind is WSMsgType.TEXT
        if self._max_size is not None and len(fragments) + frame.payload_size > self._max_size:
            self._fail(CloseCode.MESSAGE_TOO_BIG, f"message over {self._max_size} bytes")
            return
        fragments += frame.get_payload_as_memoryview()
        if not frame.fin:
            return
        self._fragments = None
        if not self._fragments_text:
            self._deliver(bytes(fragments))
            return
        try:
            self._deliver(fragments.decode("utf-8"))
        except UnicodeDecodeError:
            self._fail(INVALID_DATA, "invalid UTF-8")

    def _deliver(self, message: bytes | str) -> None:
        if self._on_message is not None:
            self._on_message(message)
            return
        self._inbox.append(message)
        if (
            len(self._inbox) >= MAX_QUEUE
            and not self._reading_paused
            and self.transport is not None
        ):
            self._reading_paused = True
            self.transport.underlying_transport.pause_reading()
        self._wake_reader()

    def _on_close_frame(self, transport: WSTransport) -> None:
        self._close_received = True
        if not transport.is_close_frame_sent:
            # Echo the peer's code, as websockets does, then end the connection: the server
            # closes TCP first (RFC 6455, section 7.1.1), a client once the server has.
            handshake = transport.close_handshake
            code = WSCloseCode.OK
            received = None if handshake is None else handshake.recv
            if received is not None and received.code is not WSCloseCode.NO_INFO:
                code = received.code
            transport.send_close(code)
        if not transport.is_client_side:
            transport.disconnect()
        else:
            self._loop.call_later(1.0, transport.disconnect)
        self._wake_reader()

    def _fail(self, code: int, reason: str) -> None:
        """Close for a broken message: the close frame, then the socket shortly after."""
        self._own_close = (code, reason)
        self._fragments = None
        transport = self.transport
        if transport is None:
            return
        transport.send_close(WSCloseCode(code), reason.encode())
        self._loop.call_later(0.1, transport.disconnect)
        self._wake_reader()

    def _wake_reader(self) -> None:
        waiter, self._inbox_waiter = self._inbox_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def messages(self) -> AsyncIterator[bytes | str]:
        return self._messages()

    def receive_with(self, on_message: Callable[[bytes | str], None]) -> bool:
        if self._inbox:
            return False
        self._on_message = on_message
        return True

    async def _messages(self) -> AsyncIterator[bytes | str]:
        inbox = self._inbox
        while True:
            while inbox:
                message = inbox.popleft()
                if self._reading_paused and len(inbox) <= RESUME_QUEUE:
                    self._reading_paused = False
                    if self.transport is not None and not self._disconnected:
                        self.transport.underlying_transport.resume_reading()
                yield message
            if self._disconnected or self._close_received:
                return
            self._inbox_waiter = self._loop.create_future()
            await self._inbox_waiter

    # -- keepalive ----------------------------------------------------------------------------

    def _ping(self) -> None:
        """Ping every `ping_interval`; a ping without an answer within `ping_timeout` closes
        with 1011, as websockets' keepalive does."""
        self._keepalive = None
        if self.transport is None or not self.is_open:
            return
        self.transport.send_ping(b"keepalive")
        if self._ping_timeout is None:
            self._keepalive = self._loop.call_later(self._ping_interval or 0.0, self._ping)
            return
        self._awaiting_pong = True
        self._keepalive = self._loop.call_later(self._ping_timeout, self._pong_missing)

    def _on_pong(self) -> None:
        if not self._awaiting_pong:
            return
        self._awaiting_pong = False
        if self._keepalive is not None:
            self._keepalive.cancel()
        assert self._ping_interval is not None
        self._keepalive = self._loop.call_later(self._ping_interval, self._ping)

    def _pong_missing(self) -> None:
        self._keepalive = None
        if self._awaiting_pong and self.is_open:
            self._fail(CloseCode.INTERNAL_ERROR, "keepalive ping timeout")

    # -- the Framing seam ---------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        transport = self.transport
        return (
            transport is not None
            and not self._disconnected
            and not self._close_received
            and not transport.is_close_frame_sent
        )

    @property
    def is_closed(self) -> bool:
        return self._disconnected

    def write_messages(self, messages: Iterable[Outgoing | str]) -> None:
        """Frame `messages` and write them to the socket's transport at once.

        The connection is open (checked by the caller); picows writes each of its own frames
        (pongs, pings, the close) whole within one call on the same event loop, so frames never
        interleave.
        """
        assert self._writelines is not None
        self._writelines(frame_pieces(messages, mask=self._mask))

    def backed_up(self) -> bool:
        if self.transport is None:
            return False
        underlying = self.transport.underlying_transport
        return underlying.get_write_buffer_size() > underlying.get_write_buffer_limits()[1]

    def write_guard(self) -> AbstractAsyncContextManager[None]:
        return self._guard()

    @asynccontextmanager
    async def _guard(self) -> AsyncIterator[None]:
        if not self.is_open:
            raise FramingClosedError
        yield
        while self._write_paused and not self._disconnected:
            self._drain_waiter = self._loop.create_future()
            await self._drain_waiter
        if self._disconnected:
            raise FramingClosedError

    def _wake_writer(self) -> None:
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def close(self, code: int, reason: str) -> None:
        transport = self.transport
        if transport is None or self._disconnected:
            return
        if not transport.is_close_frame_sent:
            if self._own_close is None and not self._close_received:
                self._own_close = (code, reason)
            transport.send_close(WSCloseCode(code), reason.encode())
        if self._close_received:
            transport.disconnect()
        try:
            await asyncio.wait_for(self.wait_closed(), self._close_timeout)
        except TimeoutError:
            # The peer never answered (or never read our close): drop the connection, which
            # picows reports lost on the loop's next turn.
            self.abort()
            await self.wait_closed()

    async def wait_closed(self) -> None:
        if self._disconnected:
            return
        if self._closed_waiter is None:
            self._closed_waiter = self._loop.create_future()
        await asyncio.shield(self._closed_waiter)

    def abort(self) -> None:
        if self.transport is not None and not self._disconnected:
            self.transport.disconnect(graceful=False)

    def close_reason(self) -> tuple[int, str, bool]:
        transport = self.transport
        handshake = None if transport is None else transport.close_handshake
        if handshake is None:
            return CloseCode.ABNORMAL_CLOSURE, "", True
        sent, received = handshake.sent, handshake.recv
        if sent is not None and (received is None or not handshake.recv_then_sent):
            # Closed on this side without the link asking: a message too big (1009), a keepalive
            # ping unanswered (1011), a broken frame (1002).
            if self._own_close is not None:
                return self._own_close[0], self._own_close[1], False
            return _code(sent.code), sent.reason, False
        if received is None:
            return CloseCode.ABNORMAL_CLOSURE, "", True
        return _code(received.code), received.reason, True

    def statistics(self) -> InboxStatistics:
        """How full the queue between picows and the link's reader is."""
        return InboxStatistics(queued=len(self._inbox), reading_paused=self._reading_paused)


class InboxStatistics(NamedTuple):
    """`PicowsFraming.statistics()`."""

    queued: int
    """Messages received that the reader has not taken yet."""
    reading_paused: bool
    """Whether the socket is not being read until the reader catches up."""


def _code(code: WSCloseCode) -> int:
    value = int(code.value)
    return NO_STATUS_RCVD if value == 0 else value


async def connect(
    url: str,
    *,
    max_size: int | None,
    ping_interval: float | None = None,
    ping_timeout: float | None = None,
    open_timeout: float | None = 10.0,
    close_timeout: float | None = CLOSE_TIMEOUT,
    extra_headers: Iterable[tuple[str, str]] = (),
    proxy: str | None = None,
) -> PicowsFraming:
    """Open a WebSocket to `url` (ws:// or wss://) with picows; return it as a `Framing`.

    `proxy` is a proxy URL as websockets' `connect(proxy=...)` takes it: http:// or https://
    (an HTTP CONNECT tunnel), or socks5h://, socks5://, socks4a:// or socks4:// (websockets'
    InvalidProxy for anything else). `open_timeout` bounds the whole opening, as websockets'
    does: TCP, proxy, TLS and upgrade."""
    from picows import ws_connect

    socks: WSSocketFactory | None = None
    if proxy is not None:
        parsed = parse_proxy(proxy)
        if parsed.scheme.startswith("socks"):
            socks, proxy = _socks_dial(url, parsed), None

    framing: PicowsFraming | None = None

    def listener() -> PicowsFraming:
        nonlocal framing
        framing = PicowsFraming(
            max_size=max_size,
            ping_interval=ping_interval,
            ping_timeout=ping_timeout,
            close_timeout=close_timeout,
        )
        return framing

    # picows bounds only the upgrade itself; a proxy that never answers its CONNECT would hang.
    async with asyncio.timeout(open_timeout):
        await ws_connect(
            listener,
            url,
            websocket_handshake_timeout=open_timeout,
            logger_name=PICOWS_LOGGER,
            max_frame_size=max_size if max_size is not None else 2**62,
            extra_headers=list(extra_headers),
            max_redirects=0,
            read_buffer_init_size=READ_BUFFER_SIZE,
            use_aiofastnet=False,
            proxy=proxy,
            socket_factory=socks,
        )
    assert framing is not None
    return framing


def _socks_dial(url: str, proxy: Proxy) -> WSSocketFactory:
    """The socket to `url` through the SOCKS `proxy`, for picows to open its WebSocket over.

    websockets' own SOCKS dial, so that both framings dial alike: picows' takes neither
    socks5h:// nor socks4a://, and for socks5:// has the proxy resolve the relay's name, which
    websockets resolves here (as the scheme says: socks5h:// is the one resolved by the proxy)."""
    from websockets.asyncio.client import connect_socks_proxy

    target = parse_uri(url)

    async def dial(_relay: WSParsedURL) -> socket.socket:
        return await connect_socks_proxy(proxy, target)

    return dial


async def create_server(
    route: Callable[[WSUpgradeRequest], WSListener | WSUpgradeResponseWithListener | None],
    host: str,
    port: int,
    *,
    max_size: int | None,
    open_timeout: float | None = 10.0,
    ssl_context: ssl.SSLContext | None = None,
    start_serving: bool = True,
) -> asyncio.Server:
    """A picows server on `host`:`port`; `route` answers each request: a `PicowsFraming` for a
    WebSocket, a response, or None (404)."""
    from picows import ws_create_server

    return await ws_create_server(
        route,
        host,
        port,
        websocket_handshake_timeout=open_timeout,
        logger_name=PICOWS_LOGGER,
        enable_auto_pong=True,
        max_frame_size=2**62 if max_size is None else max_size,
        read_buffer_init_size=READ_BUFFER_SIZE,
        use_aiofastnet=False,
        ssl=ssl_context,
        start_serving=start_serving,
    )
