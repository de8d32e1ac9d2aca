"""The Python teammate client: attach to a host through the relay with a share link.

`connect_teammate(link, name=...)` says hello to the relay with the link's token, opens one
`session` channel with a fresh salt and the link's role, and yields a `TeammateSession` that
sends and receives end-to-end encrypted application messages (docs/security.md). Every way the
session can end is a `TeammateError` carrying the close code (docs/protocol.md, "Close codes").
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import ClassVar

from tunnel.e2e.channel import SealedChannel
from tunnel.e2e.crypto import SALT_SIZE, ChannelCrypto, DecryptionError, ShareLink, new_salt
from tunnel.errors import TunnelError, describe_close
from tunnel.handshake import HelloError, check_name, teammate_hello
from tunnel.link import (
    ChannelClosedError,
    DialSettings,
    LinkChannel,
    LinkClosedError,
    RelayUnreachableError,
    dial,
)
from tunnel.proto import Limits
from tunnel.proto.codes import CloseCode

__all__ = [
    "DecryptionFailedError",
    "HostGoneError",
    "LimitReachedError",
    "RefusedError",
    "RelayUnreachableError",
    "RevokedError",
    "TeammateError",
    "TeammateSession",
    "UnauthorizedError",
    "connect_teammate",
    "error_for",
]


class TeammateError(TunnelError):
    """The session ended or could not start; `code` says why (a close code)."""

    default_message: ClassVar[str] = "the session ended"

    def __init__(self, code: int, reason: str = "", *, by_peer: bool = True) -> None:
        super().__init__(
            f"{self.default_message} ({describe_close(code, reason)})",
            code=code,
            reason=reason,
            by_peer=by_peer,
        )


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


_ERRORS: dict[int, type[TeammateError]] = {
    CloseCode.REFUSED: RefusedError,
    CloseCode.UNAUTHORIZED: UnauthorizedError,
    CloseCode.DECRYPTION_FAILED: DecryptionFailedError,
    CloseCode.HOST_GONE: HostGoneError,
    CloseCode.LIMIT_REACHED: LimitReachedError,
    CloseCode.REVOKED: RevokedError,
}


def error_for(code: int, reason: str = "", *, by_peer: bool = True) -> TeammateError:
    """Return the TeammateError (subclass) for a close code."""
    return _ERRORS.get(code, TeammateError)(code, reason, by_peer=by_peer)


def closed_error(closed: TunnelError) -> TeammateError:
    """Return the TeammateError for a closed link or channel."""
    return error_for(closed.code, closed.reason, by_peer=closed.by_peer)


class TeammateSession(SealedChannel):
    """One attached session: plaintext messages in and out over an encrypted channel.

    The channel keys need the host's nonce, its first message on the channel (docs/security.md):
    the first send or receive waits for it. Every way the session ends is a TeammateError.
    """

    def __init__(self, channel: LinkChannel, *, link: ShareLink, salt: bytes, name: str) -> None:
        async def receive_nonce() -> ChannelCrypto:
            try:
                host_nonce = await channel.receive()
            except ChannelClosedError as exc:
                raise closed_error(exc) from None
            if len(host_nonce) != SALT_SIZE:
                channel.close_soon(CloseCode.PROTOCOL_ERROR, "bad host nonce")
                raise TeammateError(CloseCode.PROTOCOL_ERROR, "the host sent a bad nonce")
            return ChannelCrypto.for_teammate(
                link.secret, link.host_id, salt=salt, host_nonce=host_nonce, name=name
            )

        super().__init__(channel, receive_nonce)
        self.link = link
        """The share link this session was opened with."""

    @property
    def role(self) -> str:
        """The role of the link: "view" or "drive"."""
        return self.link.role

    @property
    def host_id(self) -> str:
        """The host this session is attached to."""
        return self.link.host_id

    async def send(self, plaintext: bytes) -> None:
        """Encrypt and send one message, waiting for window. Raises TeammateError once closed."""
        try:
            await super().send(plaintext)
        except ChannelClosedError as exc:
            raise closed_error(exc) from None

    async def receive(self) -> bytes:
        """Return the next decrypted message. Raises TeammateError once the session ended."""
        try:
            return await super().receive()
        except ChannelClosedError as exc:
            raise closed_error(exc) from None
        except DecryptionError:
            raise DecryptionFailedError(CloseCode.DECRYPTION_FAILED, "from the host") from None


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

    Raises ValueError for a malformed link or name, RelayUnreachableError (an OSError) when the
    relay cannot be reached, and TeammateError (with the close code) when the relay or host
    refuses. Admission is not confirmed by the relay: a refused token surfaces as
    UnauthorizedError from the first `receive()`.
    """
    share = ShareLink.parse(link) if isinstance(link, str) else link
    check_name(name)
    settings = DialSettings(
        open_timeout=open_timeout,
        hello_timeout=hello_timeout,
        ping_interval=ping_interval,
        ping_timeout=ping_timeout,
        **({} if limits is None else {"limits": limits}),
    )

    def hello(_relay: object) -> dict[str, object]:
        return teammate_hello(host_id=share.host_id, token=share.token, name=name)

    try:
        async with dial(share.relay_url, "/v1/attach", hello, settings, backlog=1) as mux:
            salt = new_salt()
            channel = mux.open_channel(path, {"role": share.role, "salt": salt, "name": name})
            try:
                yield TeammateSession(channel, link=share, salt=salt, name=name)
            finally:
                channel.close_soon(CloseCode.NORMAL, "")
    except LinkClosedError as exc:
        raise closed_error(exc) from None
    except HelloError as exc:
        raise TeammateError(exc.code, str(exc)) from None
