"""`dial()`: how a host or a teammate reaches the relay, the one way both do it.

Open the WebSocket, wait for the relay's hello, adopt the limits it advertises, send our hello,
and run the link in a task of its own while the caller uses its channels (docs/relay.md, "Hello
and admission"). The WebSocket is python-websockets', or picows' when the settings ask for it
(tunnel/link/framing_picows.py): through the same proxy, with the same errors and close codes
either way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidHandshake, InvalidProxy, InvalidURI
from websockets.proxy import get_proxy
from websockets.uri import parse_uri

from tunnel.handshake import HelloError, RelayHello, agreed_limits, parse_relay_hello
from tunnel.link.core import Link
from tunnel.link.errors import LinkClosedError
from tunnel.link.framing import Framing
from tunnel.link.framings import FramingName, check_framing
from tunnel.link.mux import ChannelMux
from tunnel.link.urls import websocket_url
from tunnel.proto import DEFAULT_LIMITS, Connection, Limits, Side
from tunnel.proto.codes import CloseCode

__all__ = ["CLOSE_GRACE", "DialSettings", "RelayUnreachableError", "dial"]

CLOSE_GRACE = 2.0
"""Seconds to close the link cleanly when the caller is done with it."""

HelloBuilder = Callable[[RelayHello], dict[str, Any]]
"""Builds our hello payload from the relay's (a host signs the relay's challenge)."""


class RelayUnreachableError(OSError):
    """The relay could not be reached or refused the WebSocket handshake (HTTP error)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DialSettings:
    """How to reach the relay. Every timeout is a named field; `None` turns keepalive off."""

    open_timeout: float = 10.0
    """Seconds for the TCP, TLS and WebSocket handshakes."""

    hello_timeout: float = 10.0
    """Seconds to wait for the relay's hello."""

    ping_interval: float | None = 20.0
    """Seconds between keepalive pings; a dead link is noticed within interval + timeout."""

    ping_timeout: float | None = 20.0
    """Seconds to wait for a pong before the link is considered dead."""

    limits: Limits = DEFAULT_LIMITS
    """Link protocol limits enforced on what the relay sends (narrowed by what it advertises)."""


@asynccontextmanager
async def dial(
    relay_url: str,
    path: str,
    hello: HelloBuilder,
    settings: DialSettings,
    *,
    backlog: int,
    framing: str = FramingName.websockets,
) -> AsyncIterator[ChannelMux]:
    """Reach the relay at `relay_url` + `path`, say hello, and yield the running link's mux.

    The link is closed (1000) when the block ends. Raises RelayUnreachableError (an OSError) when
    the relay cannot be reached, HelloError when its hello is not one we understand, and
    LinkClosedError when it closed the link before or during the hellos (a refused host key or
    token is refused only after our hello: it arrives as the link's close). An exception raised
    by the block leaves as itself, never inside an ExceptionGroup.

    `framing` is the WebSocket library to dial with: "websockets", or "picows" (the `fast`
    extra; ValueError if it is not installed), which spends less CPU per message received
    (docs/performance.md, "The relay on picows and on uvloop").
    """
    check_framing(framing, "framing")
    link = await _open(websocket_url(relay_url, path), settings, framing)
    mux = ChannelMux(link, backlog=backlog)
    failure: BaseException | None = None
    async with anyio.create_task_group() as tg:

        async def run_link() -> None:
            mux.link_closed(await link.run(mux.on_event))

        tg.start_soon(run_link)
        try:
            with anyio.fail_after(settings.hello_timeout):
                relay = parse_relay_hello(await mux.wait_hello())
            link.connection.adopt_limits(agreed_limits(settings.limits, relay))
            link.connection.send_hello(hello(relay))
            link.flush()
        except TimeoutError:
            failure = LinkClosedError(CloseCode.PROTOCOL_ERROR, "no relay hello", by_peer=False)
        except (LinkClosedError, HelloError) as exc:
            failure = exc
        if failure is not None:
            link.close_soon(CloseCode.PROTOCOL_ERROR, "hello failed")
        else:
            try:
                yield mux
            except Exception as exc:
                # Re-raised below, outside the task group, so callers get it unwrapped.
                failure = exc
        with anyio.move_on_after(CLOSE_GRACE, shield=True):
            await link.aclose(CloseCode.NORMAL, "")
        tg.cancel_scope.cancel()
    if failure is not None:
        raise failure


async def _open(url: str, settings: DialSettings, framing: str) -> Link:
    """The link over a WebSocket opened to `url` with `framing`, not started yet."""
    connection = Connection(Side.DIALER, limits=settings.limits)
    try:
        # The proxy websockets' connect() would choose from the environment (https_proxy,
        # no_proxy...: docs/relay.md), by its own rule, so that either framing takes it.
        proxy = get_proxy(parse_uri(url))
        if framing == FramingName.picows:
            picows = await _open_picows(url, proxy, settings)
            return Link(None, connection, label="relay", framing=picows)
        websocket = await connect(
            url,
            proxy=proxy,
            open_timeout=settings.open_timeout,
            ping_interval=settings.ping_interval,
            ping_timeout=settings.ping_timeout,
            max_size=settings.limits.max_message_size,
            compression=None,
            close_timeout=CLOSE_GRACE,
        )
    except (InvalidHandshake, InvalidURI) as exc:
        # A refused upgrade, a broken answer, a proxy that refused the tunnel.
        raise RelayUnreachableError(f"the relay refused the connection: {exc}") from None
    except InvalidProxy as exc:
        # Not the proxy's URL itself: it may hold a password.
        raise RelayUnreachableError(f"the environment's proxy cannot be used: {exc.msg}") from None
    return Link(websocket, connection, label="relay")


async def _open_picows(url: str, proxy: str | None, settings: DialSettings) -> Framing:
    """picows' WebSocket to `url` through `proxy`, with websockets' errors: an OSError (a
    TimeoutError for the open timeout) when the relay or the proxy cannot be reached,
    RelayUnreachableError when either refuses."""
    # Installed: dial() checked it, and picows depends on python-socks.
    from picows import WSError
    from python_socks import ProxyError

    from tunnel.link.framing_picows import connect as picows_connect

    try:
        return await picows_connect(
            url,
            max_size=settings.limits.max_message_size,
            ping_interval=settings.ping_interval,
            ping_timeout=settings.ping_timeout,
            open_timeout=settings.open_timeout,
            close_timeout=CLOSE_GRACE,
            proxy=proxy,
        )
    except (WSError, ProxyError, ValueError) as exc:
        # A refused upgrade (an HTTP error), a broken answer, a URL picows cannot dial, or an
        # HTTP proxy that refused the tunnel or answered nonsense.
        raise RelayUnreachableError(f"the relay refused the connection: {exc}") from None
