"""`SealedChannel`: one end-to-end encrypted channel, the same object at the host and the teammate.

Every message is one `data` frame holding one AES-GCM ciphertext (docs/security.md). The two
ends differ only in how the channel keys come about, which is the `start` each passes in: the
host derived them when the channel opened and sends its nonce, in clear, before anything else;
the teammate receives that nonce first and derives the keys from it. Whichever comes first, a
send or a receive, runs `start` once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from tunnel.e2e.crypto import TAG_SIZE, ChannelCrypto, DecryptionError
from tunnel.errors import TunnelError
from tunnel.link import Casted, ChannelClosedError, LinkChannel
from tunnel.proto.codes import CloseCode

__all__ = ["MessageTooLargeError", "SealedChannel"]


class MessageTooLargeError(TunnelError, ValueError):
    """A plaintext that cannot fit one `data` frame once encrypted (the caller's mistake)."""

    def __init__(self, size: int, largest: int) -> None:
        super().__init__(
            f"message of {size} bytes; at most {largest} fit",
            code=CloseCode.LIMIT_REACHED,
            reason="message too large",
            by_peer=False,
        )


class SealedChannel:
    """Plaintext in and out of one channel; the relay sees ciphertext only.

    Raises `ChannelClosedError` once the channel is closed, and `DecryptionError` (after closing
    the channel with 4003) when a message does not authenticate.
    """

    def __init__(self, channel: LinkChannel, start: Callable[[], Awaitable[ChannelCrypto]]) -> None:
        self._channel = channel
        self._start = start
        self._crypto: ChannelCrypto | None = None
        self._start_lock = anyio.Lock()
        self.max_message_size = channel.limits.largest_data - TAG_SIZE
        """Largest plaintext `send` accepts: one `data` frame minus the AEAD tag."""

    @property
    def closed(self) -> ChannelClosedError | None:
        """Why the channel closed, or None while open."""
        return self._channel.closed

    async def keys(self) -> ChannelCrypto:
        """Return the channel's keys, running this end's `start` the first time."""
        if self._crypto is None:
            async with self._start_lock:
                if self._crypto is None:
                    self._crypto = await self._start()
        return self._crypto

    async def send(self, plaintext: bytes) -> None:
        """Encrypt and send one message once the window has room for it."""
        if len(plaintext) > self.max_message_size:
            raise MessageTooLargeError(len(plaintext), self.max_message_size)
        # No coroutine per message once the keys are there.
        crypto = self._crypto if self._crypto is not None else await self.keys()
        # Sealed only once the window has room (send_sealed, which also keeps concurrent sends
        # in order): the nonce is a counter, so a ciphertext sealed but never sent would break
        # every later message.
        await self._channel.send_sealed(
            len(plaintext) + TAG_SIZE, lambda: crypto.send.encrypt(plaintext)
        )

    async def send_built(
        self, largest: int, build: Callable[[], bytes], *, then: Callable[[], None]
    ) -> None:
        """Send the plaintext `build()` returns, built once the window has room for `largest`
        bytes of it, and call `then()` right after it is queued: what it says and what `then`
        does hold at one instant, with no other message or frame of this side in between."""
        if largest > self.max_message_size:
            raise MessageTooLargeError(largest, self.max_message_size)
        crypto = self._crypto if self._crypto is not None else await self.keys()

        def seal() -> bytes:
            plaintext = build()
            if len(plaintext) > largest:
                raise MessageTooLargeError(len(plaintext), largest)
            return crypto.send.encrypt(plaintext)

        await self._channel.send_sealed(largest + TAG_SIZE, seal, then=then)

    async def receive(self) -> bytes:
        """Return the next plaintext message (casts are skipped, as `LinkChannel.receive` does)."""
        crypto = self._crypto if self._crypto is not None else await self.keys()
        # The link channel's receive, not our receive_any: a coroutine fewer per message.
        return self._open(crypto, await self._channel.receive())

    async def receive_any(self) -> bytes | Casted:
        """Return the next plaintext message, or the next cast of the host's broadcast (still
        sealed: `tunnel.e2e.broadcast` opens it) or cut, in the order they arrived."""
        crypto = self._crypto if self._crypto is not None else await self.keys()
        message = await self._channel.receive_any()
        if isinstance(message, Casted):
            return message
        return self._open(crypto, message)

    def _open(self, crypto: ChannelCrypto, message: bytes) -> bytes:
        try:
            return crypto.receive.decrypt(message)
        except DecryptionError:
            self.close_soon(CloseCode.DECRYPTION_FAILED, "decryption failed")
            raise

    def close_soon(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Close the channel without waiting."""
        self._channel.close_soon(code, reason)

    async def aclose(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Close the channel."""
        self.close_soon(code, reason)
        await anyio.lowlevel.checkpoint()
