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

import anyio

from tunnel.e2e.crypto import (
    ROLES,
    SALT_SIZE,
    TAG_SIZE,
    ChannelCrypto,
    DecryptionError,
    new_salt,
)
from tunnel.link import ChannelClosedError, LinkChannel
from tunnel.proto import Limits
from tunnel.proto.codes import CloseCode

MAX_NAME_LENGTH = 64
"""Characters of a teammate's display name."""

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
        raise ChannelRefusedError(CloseCode.PROTOCOL_ERROR, "name must be 1 to 64 characters")
    return OpenRequest(path=path, role=role, salt=salt, name=name, meta=meta)


class HostChannel:
    """One teammate channel on the host: plaintext in and out, one message per `data` frame."""

    def __init__(
        self,
        link_channel: LinkChannel,
        request: OpenRequest,
        crypto: ChannelCrypto,
        *,
        host_nonce: bytes,
        limits: Limits,
        on_close: Callable[[HostChannel], None] | None = None,
    ) -> None:
        self._channel = link_channel
        self._crypto = crypto
        self._request = request
        self._host_nonce: bytes | None = host_nonce
        """Sent (in clear) before anything else on the channel; None once sent."""
        self._send_lock = anyio.Lock()
        self.max_message_size = limits.largest_data - TAG_SIZE
        """Largest plaintext `send` accepts: one `data` frame minus the AEAD tag."""
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

    @property
    def closed(self) -> ChannelClosedError | None:
        """Why the channel closed, or None while open."""
        return self._channel.closed

    async def start(self) -> None:
        """Send the host nonce if not sent yet; every send and receive does this first."""
        async with self._send_lock:
            await self._send_nonce()

    async def _send_nonce(self) -> None:
        nonce = self._host_nonce
        if nonce is not None:
            if self._channel.closed is not None:
                raise self._channel.closed
            await self._channel.send(nonce)
            self._host_nonce = None

    async def receive(self) -> bytes:
        """Return the next plaintext message.

        Raises ChannelClosedError once the channel is closed, and DecryptionError (after closing
        the channel with 4003) if a message does not authenticate.
        """
        if self._host_nonce is not None:
            await self.start()  # the teammate cannot say anything before it has our nonce
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
        # Sealed only once the window has room (send_sealed): the nonce is a counter, so a
        # ciphertext sealed but never sent would break every later message.
        async with self._send_lock:
            await self._send_nonce()
            if self._channel.closed is not None:
                raise self._channel.closed
            await self._channel.send_sealed(
                len(plaintext) + TAG_SIZE, lambda: self._crypto.send.encrypt(plaintext)
            )

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
    limits: Limits,
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
    return HostChannel(
        link_channel, request, crypto, host_nonce=host_nonce, limits=limits, on_close=on_close
    )


def close_quietly(channel: HostChannel, code: int, reason: str) -> None:
    """Close `channel` unless it is closed already."""
    with contextlib.suppress(ChannelClosedError):
        if channel.closed is None:
            channel.close_soon(code, reason)
