"""`HostChannel`: one teammate's channel as the host's handler sees it, decrypted and checked.

The `open` says which role the teammate claims, its display name and its channel salt; the host
answers with a fresh nonce of its own (its first message, in clear) and derives the channel keys
from its secret for that role, the salt, the nonce and the name (docs/security.md). So a teammate
holding only the view secret fails at its first message whatever it claims, a relay that rewrites
the name breaks the channel, and a recorded channel replayed later never decrypts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tunnel.e2e.channel import SealedChannel
from tunnel.e2e.crypto import ROLES, SALT_SIZE, ChannelCrypto, new_salt
from tunnel.errors import TunnelError
from tunnel.handshake import MAX_NAME_LENGTH
from tunnel.link import ChannelClosedError, LinkChannel
from tunnel.proto.codes import CloseCode


class ChannelRefusedError(TunnelError):
    """An `open` the host will not serve; close the channel with `code`."""

    def __init__(self, code: CloseCode, reason: str) -> None:
        # The teammate (or the relay) sent the open that failed the check.
        super().__init__(reason, code=code, reason=reason, by_peer=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenRequest:
    """What an `open` asks for, checked for shape (not yet for keys)."""

    path: str
    role: str
    """The role the teammate claims; its keys prove it at the first message."""
    salt: bytes
    name: str
    """Display name the teammate chose; bound into the keys, so the relay cannot alter it."""
    meta: dict[str, Any]


def parse_open(path: str, meta: dict[str, Any], *, paths: frozenset[str]) -> OpenRequest:
    """Check an `open`'s path and meta; raise ChannelRefusedError with the close code if bad."""
    if path not in paths:
        raise ChannelRefusedError(CloseCode.REFUSED, "unknown channel path")
    role = meta.get("role")
    if role not in ROLES:
        raise ChannelRefusedError(CloseCode.REFUSED, "unknown role")
    assert isinstance(role, str)
    salt = meta.get("salt")
    if not isinstance(salt, bytes) or len(salt) != SALT_SIZE:
        raise ChannelRefusedError(CloseCode.PROTOCOL_ERROR, "salt must be 16 bytes")
    peer = meta.get("peer")
    # The relay matched the token to a role: a claim that contradicts it cannot succeed.
    if isinstance(peer, dict) and peer.get("role") not in (None, role):
        raise ChannelRefusedError(CloseCode.UNAUTHORIZED, "role does not match the token")
    name = meta.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise ChannelRefusedError(
            CloseCode.PROTOCOL_ERROR, f"name must be 1 to {MAX_NAME_LENGTH} characters"
        )
    return OpenRequest(path=path, role=role, salt=salt, name=name, meta=meta)


class HostChannel(SealedChannel):
    """One teammate channel on the host: plaintext in and out, one message per `data` frame.

    Its first message, before anything else, is the host nonce in clear (sent by the first
    `send` or `receive`, or by `start`).
    """

    def __init__(
        self,
        link_channel: LinkChannel,
        request: OpenRequest,
        crypto: ChannelCrypto,
        *,
        host_nonce: bytes,
        on_close: Callable[[HostChannel], None] | None = None,
    ) -> None:
        async def send_nonce() -> ChannelCrypto:
            await link_channel.send(host_nonce)
            return crypto

        super().__init__(link_channel, send_nonce)
        self._request = request
        self._on_close = on_close

    @property
    def role(self) -> str:
        """The claimed role ("view" or "drive"); proven once a message has decrypted."""
        return self._request.role

    @property
    def name(self) -> str:
        """The teammate's display name, as it chose it (bound into the keys once a message has
        decrypted); not an identity: anyone holding the link picks any name."""
        return self._request.name

    @property
    def path(self) -> str:
        """The channel path ("session")."""
        return self._request.path

    @property
    def meta(self) -> dict[str, Any]:
        """The `open` meta as the relay forwarded it (including the relay's "peer")."""
        return self._request.meta

    async def hand_over(
        self, largest: int, build: Callable[[], bytes], *, joined: Callable[[], None]
    ) -> None:
        """Send the `broadcast` message `build()` returns and join this channel to the host's
        broadcast in the same instant (docs/application.md, "The broadcast"), then `joined()`."""

        def join() -> None:
            self._channel.join_broadcast()
            joined()

        await self.send_built(largest, build, then=join)

    def leave_broadcast(self) -> None:
        """Take this channel out of the host's broadcast (harmless when it is not in it)."""
        self._channel.part_broadcast()

    async def start(self) -> None:
        """Send the host nonce if not sent yet; every send and receive does this first."""
        await self.keys()

    def close_soon(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Close the channel without waiting."""
        super().close_soon(code, reason)
        if self._on_close is not None:
            self._on_close(self)


def open_host_channel(
    link_channel: LinkChannel,
    *,
    secret_of: Callable[[str], bytes],
    host_id: str,
    paths: frozenset[str],
    on_close: Callable[[HostChannel], None] | None = None,
) -> HostChannel:
    """Check an incoming channel and derive its keys; raise ChannelRefusedError if refused."""
    request = parse_open(link_channel.path, link_channel.meta, paths=paths)
    host_nonce = new_salt()
    crypto = ChannelCrypto.for_host(
        secret_of(request.role),
        host_id,
        salt=request.salt,
        host_nonce=host_nonce,
        name=request.name,
    )
    return HostChannel(link_channel, request, crypto, host_nonce=host_nonce, on_close=on_close)


def close_quietly(channel: HostChannel, code: int, reason: str) -> None:
    """Close `channel` unless it is closed already."""
    with contextlib.suppress(ChannelClosedError):
        if channel.closed is None:
            channel.close_soon(code, reason)
