"""`HostChannel`: one teammate's channel as the host's handler sees it, decrypted and checked.

The relay's `open` says which role the teammate claims and carries the channel salt; the host
derives the channel keys from its own secret for that role (docs/security.md), so a teammate
holding only the view secret fails at its first message, whatever it claims.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from tunnel.crypto import (
    ROLES,
    SALT_SIZE,
    TAG_SIZE,
    ChannelCrypto,
    DecryptionError,
    SaltGuard,
    SaltGuardFullError,
    SaltReuseError,
)
from tunnel.link import ChannelClosedError, LinkChannel
from tunnel.proto import Limits
from tunnel.proto.codes import CloseCode

INTERNAL_ERROR = 1011
"""WebSocket code for "the server hit an unexpected condition": a handler crashed."""


class ChannelRefusedError(Exception):
    """An `open` the host will not serve; close the channel with `code`."""

    def __init__(self, code: CloseCode, reason: str) -> None:
        super().__init__(reason)
        self.code = code


class MessageTooLargeError(ValueError):
    """A plaintext that cannot fit one `data` frame once encrypted (the caller's mistake)."""

    code = CloseCode.LIMIT_REACHED


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenRequest:
    """What an `open` asks for, checked for shape (not yet for keys)."""

    path: str
    role: str
    """The role the teammate claims; its keys prove it at the first message."""
    salt: bytes
    name: str
    """Display name: the relay's word for it if present, else the teammate's."""
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
    name = meta.get("name")
    if isinstance(peer, dict):
        # The relay matched the token to a role: a claim that contradicts it cannot succeed.
        if peer.get("role") not in (None, role):
            raise ChannelRefusedError(CloseCode.UNAUTHORIZED, "role does not match the token")
        if isinstance(peer.get("name"), str) and peer.get("name"):
            name = peer["name"]
    if not isinstance(name, str) or not name:
        name = "anonymous"
    return OpenRequest(path=path, role=role, salt=salt, name=name[:64], meta=meta)


class HostChannel:
    """One teammate channel on the host: plaintext in and out, one message per `data` frame."""

    def __init__(
        self,
        link_channel: LinkChannel,
        request: OpenRequest,
        crypto: ChannelCrypto,
        *,
        limits: Limits,
        on_close: Callable[[HostChannel], None] | None = None,
    ) -> None:
        self._channel = link_channel
        self._crypto = crypto
        self._request = request
        self._send_lock = anyio.Lock()
        limit = limits.initial_window
        if limits.max_data_size is not None:
            limit = min(limit, limits.max_data_size)
        self.max_message_size = limit - TAG_SIZE
        """Largest plaintext `send` accepts: one `data` frame minus the AEAD tag."""
        self._on_close = on_close

    @property
    def role(self) -> str:
        """The claimed role ("view" or "drive"); proven once a message has decrypted."""
        return self._request.role

    @property
    def name(self) -> str:
        """The teammate's display name (a hint for presence, never an identity)."""
        return self._request.name

    @property
    def path(self) -> str:
        """The channel path ("session")."""
        return self._request.path

    @property
    def meta(self) -> dict[str, Any]:
        """The `open` meta as the relay forwarded it (including the relay's "peer")."""
        return self._request.meta

    @property
    def closed(self) -> ChannelClosedError | None:
        """Why the channel closed, or None while open."""
        return self._channel.closed

    async def receive(self) -> bytes:
        """Return the next plaintext message.

        Raises ChannelClosedError once the channel is closed, and DecryptionError (after closing
        the channel with 4003) if a message does not authenticate.
        """
        ciphertext = await self._channel.receive()
        try:
            return self._crypto.receive.decrypt(ciphertext)
        except DecryptionError:
            self.close_soon(CloseCode.DECRYPTION_FAILED, "decryption failed")
            raise

    async def send(self, plaintext: bytes) -> None:
        """Encrypt and send one message, waiting for window. Raises ChannelClosedError."""
        if len(plaintext) > self.max_message_size:
            raise MessageTooLargeError(
                f"message of {len(plaintext)} bytes; at most {self.max_message_size} fit"
            )
        # Encrypt and enqueue under one lock: the nonce is a counter, so ciphertexts must leave
        # in the order they were sealed.
        async with self._send_lock:
            if self._channel.closed is not None:
                raise self._channel.closed
            await self._channel.send(self._crypto.send.encrypt(plaintext))

    def close_soon(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Close the channel without waiting."""
        self._channel.close_soon(code, reason)
        if self._on_close is not None:
            self._on_close(self)

    async def aclose(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Close the channel."""
        self.close_soon(code, reason)
        await anyio.lowlevel.checkpoint()


def open_host_channel(
    link_channel: LinkChannel,
    *,
    secret_of: Callable[[str], bytes],
    host_id: str,
    paths: frozenset[str],
    guard: SaltGuard | None,
    limits: Limits,
    on_close: Callable[[HostChannel], None] | None = None,
) -> HostChannel:
    """Check an incoming channel and derive its keys; raise ChannelRefusedError if refused."""
    request = parse_open(link_channel.path, link_channel.meta, paths=paths)
    try:
        crypto = ChannelCrypto.for_host(
            secret_of(request.role), host_id, request.salt, guard=guard
        )
    except SaltReuseError:
        raise ChannelRefusedError(CloseCode.DECRYPTION_FAILED, "salt reused") from None
    except SaltGuardFullError:
        raise ChannelRefusedError(CloseCode.LIMIT_REACHED, "too many channels; rotate") from None
    return HostChannel(link_channel, request, crypto, limits=limits, on_close=on_close)


def close_quietly(channel: HostChannel, code: int, reason: str) -> None:
    """Close `channel` unless it is closed already."""
    with contextlib.suppress(ChannelClosedError):
        if channel.closed is None:
            channel.close_soon(code, reason)
