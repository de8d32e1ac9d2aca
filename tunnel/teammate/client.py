"""The Python teammate client: attach to a host through the relay with a share link.

`connect_teammate(link, name=...)` says hello to the relay with the link's token, opens one
`session` channel with a fresh salt and the link's role, and yields a `TeammateSession` that
sends and receives end-to-end encrypted application messages (docs/security.md). Every way the
session can end is a `TeammateError` carrying the close code (docs/protocol.md, "Close codes").
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, ClassVar

import anyio
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidHandshake, InvalidURI

from tunnel import PROTOCOL_VERSION
from tunnel.e2e.crypto import (
    SALT_SIZE,
    TAG_SIZE,
    ChannelCrypto,
    DecryptionError,
    ShareLink,
    new_salt,
)
from tunnel.host.channel import MAX_NAME_LENGTH
from tunnel.link import (
    ChannelClosedError,
    ChannelMux,
    Link,
    LinkChannel,
    LinkClosedError,
    code_name,
    websocket_url,
)
from tunnel.proto import Connection, Limits, Side
from tunnel.proto.codes import CloseCode

CLOSE_GRACE = 2.0
"""Seconds to close the link cleanly when the session ends."""


class TeammateError(Exception):
    """The session ended or could not start; `code` says why (a close code)."""

    default_message: ClassVar[str] = "the session ended"

    def __init__(self, code: int, reason: str = "") -> None:
        super().__init__(
            f"{self.default_message} ({code_name(code)}{': ' + reason if reason else ''})"
        )
        self.code = code
        """The close code from the relay or the host."""
        self.reason = reason
        """The reason that came with it (set by the peer; informative only)."""


class RefusedError(TeammateError):
    """4001: the host declined this channel (unknown path, not approved, malformed open)."""

    default_message = "the host refused the session"


class UnauthorizedError(TeammateError):
    """4002: the relay does not accept this link's token (wrong, or for another host)."""

    default_message = "the relay does not accept this link"


class DecryptionFailedError(TeammateError):
    """4003: a message did not authenticate (tampered, or the link's secret is wrong)."""

    default_message = "end-to-end decryption failed"


class HostGoneError(TeammateError):
    """4005: the host is offline or its link to the relay dropped."""

    default_message = "the host is offline"


class LimitReachedError(TeammateError):
    """4006: a relay or host limit was reached (connections, teammates, channels, sizes)."""

    default_message = "a limit was reached"


class RevokedError(TeammateError):
    """4008: the host revoked the share links; ask for a new one."""

    default_message = "the share link was revoked"


class RelayUnreachableError(OSError):
    """The relay could not be reached or refused the WebSocket handshake (HTTP error)."""


_ERRORS: dict[int, type[TeammateError]] = {
    CloseCode.REFUSED: RefusedError,
    CloseCode.UNAUTHORIZED: UnauthorizedError,
    CloseCode.DECRYPTION_FAILED: DecryptionFailedError,
    CloseCode.HOST_GONE: HostGoneError,
    CloseCode.LIMIT_REACHED: LimitReachedError,
    CloseCode.REVOKED: RevokedError,
}


def error_for(code: int, reason: str = "") -> TeammateError:
    """Return the TeammateError (subclass) for a close code."""
    return _ERRORS.get(code, TeammateError)(code, reason)


class TeammateSession:
    """One attached session: plaintext messages in and out over an encrypted channel.

    The channel keys need the host's nonce, its first message on the channel (docs/security.md):
    the first send or receive waits for it.
    """

    def __init__(
        self, channel: LinkChannel, *, link: ShareLink, salt: bytes, name: str, limits: Limits
    ) -> None:
        self._channel = channel
        self._salt = salt
        self._name = name
        self._crypto: ChannelCrypto | None = None
        self._keys_lock = anyio.Lock()
        self._send_lock = anyio.Lock()
        self.link = link
        """The share link this session was opened with."""
        self.max_message_size = limits.largest_data - TAG_SIZE
        """Largest plaintext one message can carry."""

    @property
    def role(self) -> str:
        """The role of the link: "view" or "drive"."""
        return self.link.role

    @property
    def host_id(self) -> str:
        """The host this session is attached to."""
        return self.link.host_id

    async def _keys(self) -> ChannelCrypto:
        """The channel's keys, once the host's nonce has arrived. Raises TeammateError."""
        async with self._keys_lock:
            if self._crypto is None:
                try:
                    host_nonce = await self._channel.receive()
                except ChannelClosedError as exc:
                    raise error_for(exc.code, exc.reason) from None
                if len(host_nonce) != SALT_SIZE:
                    self._channel.close_soon(CloseCode.PROTOCOL_ERROR, "bad host nonce")
                    raise TeammateError(CloseCode.PROTOCOL_ERROR, "the host sent a bad nonce")
                self._crypto = ChannelCrypto.for_teammate(
                    self.link.secret,
                    self.link.host_id,
                    salt=self._salt,
                    host_nonce=host_nonce,
                    name=self._name,
                )
            return self._crypto

    async def send(self, plaintext: bytes) -> None:
        """Encrypt and send one message, waiting for window. Raises TeammateError once closed."""
        if len(plaintext) > self.max_message_size:
            raise ValueError(f"message of {len(plaintext)} bytes; at most {self.max_message_size}")
        crypto = await self._keys()
        async with self._send_lock:
            # Sealed only once the window has room: the nonce is a counter, so a message sealed
            # but never sent (a cancelled send) would break every later one.
            try:
                if self._channel.closed is not None:
                    raise self._channel.closed
                await self._channel.send_sealed(
                    len(plaintext) + TAG_SIZE, lambda: crypto.send.encrypt(plaintext)
                )
            except ChannelClosedError as exc:
                raise error_for(exc.code, exc.reason) from None

    async def receive(self) -> bytes:
        """Return the next decrypted message. Raises TeammateError once the session ended."""
        crypto = await self._keys()
        try:
            ciphertext = await self._channel.receive()
        except ChannelClosedError as exc:
            raise error_for(exc.code, exc.reason) from None
        try:
            return crypto.receive.decrypt(ciphertext)
        except DecryptionError:
            self._channel.close_soon(CloseCode.DECRYPTION_FAILED, "decryption failed")
            raise DecryptionFailedError(CloseCode.DECRYPTION_FAILED, "from the host") from None

    async def aclose(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Close the channel (the context manager also does it on exit)."""
        await self._channel.aclose(code, reason)


def _check_relay_hello(hello: dict[str, Any]) -> None:
    if hello.get("role") != "relay" or hello.get("version") != PROTOCOL_VERSION:
        raise TeammateError(CloseCode.PROTOCOL_ERROR, "the relay speaks another protocol version")


@asynccontextmanager
async def connect_teammate(
    link: str | ShareLink,
    *,
    name: str = "teammate",
    path: str = "session",
    open_timeout: float = 10.0,
    hello_timeout: float = 10.0,
    ping_interval: float | None = 20.0,
    ping_timeout: float | None = 20.0,
    limits: Limits | None = None,
) -> AsyncIterator[TeammateSession]:
    """Attach to the host of `link` and yield the session; close it on exit.

    Raises ValueError for a malformed link, RelayUnreachableError (an OSError) when the relay
    cannot be reached, and TeammateError (with the close code) when the relay or host refuses.
    Admission is not confirmed by the relay: a refused token surfaces as UnauthorizedError from
    the first `receive()`.
    """
    share = ShareLink.parse(link) if isinstance(link, str) else link
    if not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise ValueError(f"a display name is 1 to {MAX_NAME_LENGTH} characters")
    limits = limits if limits is not None else Limits()
    try:
        websocket = await connect(
            websocket_url(share.relay_url, "/v1/attach"),
            open_timeout=open_timeout,
            ping_interval=ping_interval,
            ping_timeout=ping_timeout,
            max_size=limits.max_message_size,
            compression=None,
            close_timeout=CLOSE_GRACE,
        )
    except (InvalidHandshake, InvalidURI) as exc:
        raise RelayUnreachableError(f"the relay refused the connection: {exc}") from None
    transport = Link(websocket, Connection(Side.DIALER, limits=limits), label="relay")
    mux = ChannelMux(transport, backlog=1)
    failure: BaseException | None = None
    async with anyio.create_task_group() as tg:

        async def run_link() -> None:
            mux.link_closed(await transport.run(mux.on_event))

        tg.start_soon(run_link)
        session: TeammateSession | None = None
        try:
            with anyio.fail_after(hello_timeout):
                hello = await mux.wait_hello()
            _check_relay_hello(hello)
            transport.connection.send_hello(
                {
                    "role": "teammate",
                    "version": PROTOCOL_VERSION,
                    "host_id": share.host_id,
                    "token": share.token,
                    "name": name,
                }
            )
            salt = new_salt()
            channel = mux.open_channel(path, {"role": share.role, "salt": salt, "name": name})
            session = TeammateSession(channel, link=share, salt=salt, name=name, limits=limits)
        except LinkClosedError as exc:
            failure = error_for(exc.code, exc.reason)
        except TimeoutError:
            failure = TeammateError(CloseCode.PROTOCOL_ERROR, "no hello from the relay")
        except TeammateError as exc:
            failure = exc
        if session is not None:
            try:
                yield session
            except Exception as exc:
                # Re-raised below, outside the task group, so callers get it unwrapped.
                failure = exc
            finally:
                session._channel.close_soon(CloseCode.NORMAL, "")
        with anyio.move_on_after(CLOSE_GRACE, shield=True):
            await transport.aclose(CloseCode.NORMAL, "")
        tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
