"""The host's broadcast: messages sealed once for every teammate, signed by the host's key.

A cast is what the relay copies to every teammate that joined the host's broadcast
(docs/security.md, "The broadcast"). Its layout, fixed offsets so every reader slices it the
same way:

    epoch (16) || counter (8, big-endian) || AES-256-GCM(K, plaintext) (len + 16) || signature (64)

- K and the epoch id are random per epoch; each teammate receives them inside its own end-to-end
  channel, with the host's public key and the counter of the next cast.
- The AES-GCM nonce is 4 zero bytes and the counter; the associated data is host id, epoch and
  counter. The counter starts at 0 in each epoch and goes up by one per cast.
- The signature is the host's Ed25519 signature over `SIGN_LABEL || host id || epoch || counter ||
  ciphertext`. K lets any teammate seal, so K alone would let one teammate (with the relay's help)
  feed another messages the host never wrote; only the host's private key makes the signature, and
  the teammate checks the public key against the host id in its link (the host id is a hash of
  it). The relay holds neither.

A teammate accepts casts of its epoch in counter order without a gap: a replayed, reordered,
dropped, forged or tampered cast fails `CastOpener.open`, after which the opener refuses every
cast, and the teammate catches up by cursor on its channel (docs/application.md).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import Final

from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tunnel.e2e.crypto import KEY_SIZE, TAG_SIZE
from tunnel.e2e.identity import PUBLIC_KEY_SIZE, HostIdentity, derive_host_id

EPOCH_SIZE: Final = 16
"""Bytes of a broadcast epoch id."""

COUNTER_SIZE: Final = 8
"""Bytes of a cast's counter (big-endian)."""

SIGNATURE_SIZE: Final = 64
"""Bytes of an Ed25519 signature."""

CAST_OVERHEAD: Final = EPOCH_SIZE + COUNTER_SIZE + TAG_SIZE + SIGNATURE_SIZE
"""What a cast adds to its plaintext."""

SIGN_LABEL: Final = b"agent-tunnel/v1 broadcast signed"
"""What every signed cast message starts with: 32 bytes, as long as the relay's hello challenge,
so a hello signature (challenge || relay URL) can never read as a cast signature: there, the
host id would have to be the start of a URL ("https://" is not base32)."""

MAX_COUNTER: Final = (1 << (8 * COUNTER_SIZE)) - 1
"""The last counter of an epoch; the host starts a new epoch long before."""

_NONCE_PAD: Final = bytes(4)
_COUNTER = struct.Struct(">Q")

assert len(SIGN_LABEL) == 32


class CastError(Exception):
    """A cast was refused; the message is short and never echoes what was received."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BroadcastKey:
    """One epoch of a host's broadcast: its id and its AES-256 key."""

    epoch: bytes
    key: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.epoch) != EPOCH_SIZE or len(self.key) != KEY_SIZE:
            raise ValueError(f"an epoch is {EPOCH_SIZE} bytes and its key {KEY_SIZE}")

    @classmethod
    def generate(cls) -> BroadcastKey:
        """A fresh epoch: random id and key from the OS CSPRNG."""
        return cls(epoch=os.urandom(EPOCH_SIZE), key=os.urandom(KEY_SIZE))


def _associated_data(host_id: bytes, epoch: bytes, counter: bytes) -> bytes:
    return host_id + epoch + counter


def signed_message(host_id: str, epoch: bytes, counter: int, ciphertext: bytes) -> bytes:
    """What the host signs for one cast."""
    return SIGN_LABEL + host_id.encode("ascii") + epoch + _COUNTER.pack(counter) + ciphertext


class CastSealer:
    """The host's side of one epoch: seals and signs each cast, counting from `counter`."""

    __slots__ = ("_aead", "_counter", "_host_id", "_identity", "key")

    def __init__(self, identity: HostIdentity, key: BroadcastKey, *, counter: int = 0) -> None:
        self._identity = identity
        self._host_id = identity.host_id.encode("ascii")
        self._aead = AESGCM(key.key)
        self._counter = counter
        self.key = key
        """The epoch this sealer seals for."""

    @property
    def counter(self) -> int:
        """The counter the next cast gets."""
        return self._counter

    def seal(self, plaintext: bytes) -> bytes:
        """Return the cast of `plaintext` under the next counter."""
        if self._counter > MAX_COUNTER:
            raise CastError("this epoch used up its counters")
        counter = _COUNTER.pack(self._counter)
        self._counter += 1
        epoch = self.key.epoch
        head = epoch + counter
        sealed = self._aead.encrypt(
            _NONCE_PAD + counter, plaintext, _associated_data(self._host_id, epoch, counter)
        )
        signature = self._identity.sign(SIGN_LABEL + self._host_id + head + sealed)
        return b"".join((head, sealed, signature))


class CastOpener:
    """A teammate's side of one epoch: opens the casts in order, from `counter` on.

    Raises CastError for a public key that is not the host id's, and from `open` for any cast
    that is not the next one, intact and signed by that key; after that every `open` fails.
    """

    __slots__ = ("_aead", "_counter", "_dead", "_epoch", "_host_id", "_public_key")

    def __init__(
        self, *, host_id: str, public_key: bytes, epoch: bytes, key: bytes, counter: int
    ) -> None:
        if len(public_key) != PUBLIC_KEY_SIZE or derive_host_id(public_key) != host_id:
            raise CastError("the broadcast's public key is not this host's")
        if len(epoch) != EPOCH_SIZE or len(key) != KEY_SIZE:
            raise CastError("malformed broadcast key")
        if type(counter) is not int or not 0 <= counter <= MAX_COUNTER:
            raise CastError("malformed broadcast counter")
        self._host_id = host_id.encode("ascii")
        self._public_key = Ed25519PublicKey.from_public_bytes(public_key)
        self._epoch = epoch
        self._aead = AESGCM(key)
        self._counter = counter
        self._dead = False

    @property
    def counter(self) -> int:
        """The counter the next cast must have."""
        return self._counter

    def open(self, cast: bytes) -> bytes:
        """Return the plaintext of the next cast, or raise CastError."""
        if self._dead:
            raise CastError("the broadcast failed earlier")
        self._dead = True  # until this cast proves good
        if len(cast) < CAST_OVERHEAD:
            raise CastError("a cast too short")
        epoch = cast[:EPOCH_SIZE]
        counter = cast[EPOCH_SIZE : EPOCH_SIZE + COUNTER_SIZE]
        if epoch != self._epoch:
            raise CastError("a cast of another epoch")
        if _COUNTER.unpack(counter)[0] != self._counter:
            raise CastError("a cast out of order (replayed, reordered or one missing)")
        sealed = cast[EPOCH_SIZE + COUNTER_SIZE : -SIGNATURE_SIZE]
        signature = cast[-SIGNATURE_SIZE:]
        try:
            self._public_key.verify(
                signature, SIGN_LABEL + self._host_id + epoch + counter + sealed
            )
            plaintext = self._aead.decrypt(
                _NONCE_PAD + counter, sealed, _associated_data(self._host_id, epoch, counter)
            )
        except (InvalidSignature, InvalidTag):
            raise CastError("a cast that the host did not sign") from None
        self._counter += 1
        self._dead = False
        return plaintext


def reference_vectors() -> dict[str, str]:
    """The broadcast's entries of tests/vectors/crypto.json, from fixed inputs: the host key of
    the channel vectors (seed 0x20..0x3f), epoch 0x80..0x8f, key 0x90..0xaf, counter 5."""
    import msgpack

    identity = HostIdentity.from_seed(bytes(range(0x20, 0x40)))
    key = BroadcastKey(epoch=bytes(range(0x80, 0x90)), key=bytes(range(0x90, 0xB0)))
    message = msgpack.packb({"op": "item", "item": {"seq": 7, "type": "user_message"}})
    plaintext = msgpack.packb([message], use_bin_type=True)
    cast = CastSealer(identity, key, counter=5).seal(plaintext)
    return {
        "cast_epoch_hex": key.epoch.hex(),
        "cast_key_hex": key.key.hex(),
        "cast_counter": "5",
        "cast_plaintext_hex": plaintext.hex(),
        "cast_hex": cast.hex(),
    }
