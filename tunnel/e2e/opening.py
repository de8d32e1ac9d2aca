"""The channel opening: an ephemeral X25519 key exchange, signed by the host, in one round trip.

docs/security.md, "Opening a channel", is the specification; this module is its sans-I/O core,
the same at both ends. The teammate's `open` carries its ephemeral key and a proof that it holds
the role secret; the host answers, first on the channel and in clear, with its public key, its
own ephemeral key and its Ed25519 signature over the transcript of both. The design follows
TLS 1.3's PSK-with-(EC)DHE handshake (RFC 8446, sections 2.2 and 7.1: a pre-shared key mixed
with a fresh Diffie-Hellman secret, the keys bound to a transcript hash, a binder proving the
PSK) and SIGMA's rule that each signer signs both ephemeral keys (Krawczyk, CRYPTO 2003), so:

- only the two ends read the channel: its keys need the DH secret of two ephemeral keys, which
  neither the relay nor another holder of the same role ever sees (they are never stored, so
  recorded channels stay closed when a role secret leaks later: forward secrecy);
- the teammate knows it talks to the host of its link: the signature is by the key whose hash is
  the link's host id, over a transcript that holds the teammate's own ephemeral key, so it is
  fresh and cannot be replayed into another channel;
- the host knows the teammate holds the role secret: the proof is a MAC keyed from the role
  root over the teammate's half of the transcript, and every later message is sealed with keys
  that need the root as well (TLS 1.3's binder, then its key confirmation).
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from dataclasses import dataclass, field
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from tunnel.e2e.broadcast import SIGNATURE_SIZE
from tunnel.e2e.crypto import (
    KEY_SIZE,
    ROLES,
    SALT_SIZE,
    ChannelCipher,
    ChannelCrypto,
    hkdf,
    new_salt,
)
from tunnel.e2e.identity import PUBLIC_KEY_SIZE, HostIdentity, derive_host_id
from tunnel.errors import TunnelError
from tunnel.proto.codes import CloseCode

EPHEMERAL_KEY_SIZE: Final = 32
"""Bytes of an X25519 public key (RFC 7748): the `open` meta `kx`, and in the host's answer."""

PROOF_SIZE: Final = 32
"""Bytes of the teammate's proof (HMAC-SHA256): the `open` meta `proof`."""

ANSWER_SIZE: Final = PUBLIC_KEY_SIZE + EPHEMERAL_KEY_SIZE + SIGNATURE_SIZE
"""The host's answer, its first message on a channel: public key, ephemeral key, signature."""

TRANSCRIPT_LABEL: Final = b"agent-tunnel/v2 channel"
"""The first field of every transcript."""

PROOF_INFO: Final = b"agent-tunnel/v2 open proof"
"""HKDF info of the key the teammate's proof is made with."""

UP_INFO: Final = b"agent-tunnel/v2 up"
DOWN_INFO: Final = b"agent-tunnel/v2 down"
"""HKDF infos of the channel keys, each followed by the whole transcript's hash."""

ANSWER_SIGN_LABEL: Final = b"agent-tunnel/v2 channel answered"
"""What the host's answer signature starts with: 32 bytes, like the relay's hello challenge and
the broadcast's label, and unlike either (docs/security.md says why no signature of the host
can stand for another)."""

assert len(ANSWER_SIGN_LABEL) == 32

MAX_CONVERSATION_LENGTH: Final = 256
"""Characters of the conversation id an early subscribe or a request may name."""

CONFIRMATION: Final = b""
"""The plaintext of the teammate's first sealed message, sent as soon as the host's answer
checks: the key confirmation (TLS 1.3's client Finished) that lets the host show the teammate
to others (docs/security.md, "Opening a channel")."""

CONFIRMATION_TIMEOUT: Final = 30.0
"""Seconds the host waits for the key confirmation (or any first message) before it ends the
channel: a replayed open, which can never confirm, holds its broadcast seat no longer."""

_LENGTH: Final = struct.Struct(">H")


class OpeningError(TunnelError):
    """A channel opening that must not go on; close the channel with `code`.

    The message is short, safe to log and never echoes what was received.
    """

    def __init__(self, code: CloseCode, message: str) -> None:
        super().__init__(message, code=code, reason=message, by_peer=True)


def _field(value: bytes) -> bytes:
    """One transcript field: its length (2 bytes, big-endian), then its bytes."""
    return _LENGTH.pack(len(value)) + value


@dataclass(frozen=True, slots=True, kw_only=True)
class EarlySubscribe:
    """The `subscribe` an `open` carries (its meta `sub`), so the host's first answer holds the
    snapshot: docs/protocol.md, "Application messages". In clear, bound into the transcript."""

    after: int | None = None
    """Resume after this seq (-1: the whole log); None is a fresh join."""
    tail: int | None = None
    """A fresh join's last items; None is the host's default."""
    conversation: str | None = None
    """The conversation `after` counts in: a host with another one sends a fresh join's
    snapshot marked `reset` instead of what follows a cursor of another log."""

    def meta(self) -> dict[str, Any]:
        """The `open` meta's `sub` map: only the fields that are set."""
        sub: dict[str, Any] = {}
        if self.after is not None:
            sub["after"] = self.after
        if self.tail is not None:
            sub["tail"] = self.tail
        if self.conversation is not None:
            sub["conversation"] = self.conversation
        return sub

    def transcript_field(self) -> bytes:
        """What the transcript holds of it: `after=N`, `tail=N` or `fresh`, then
        `;conversation=ID` when it names one (ASCII digits, the id as UTF-8)."""
        if self.after is not None:
            text = f"after={self.after}"
        elif self.tail is not None:
            text = f"tail={self.tail}"
        else:
            text = "fresh"
        if self.conversation is not None:
            text += f";conversation={self.conversation}"
        return text.encode("utf-8")


@dataclass(frozen=True, slots=True, kw_only=True)
class Offer:
    """The teammate's half of the transcript: everything its `open` says, and where it goes."""

    host_id: str
    """The host of the link, 26 characters of base32."""
    role: str
    """The role the teammate claims, one of ROLES."""
    name: str
    """The display name the teammate chose."""
    salt: bytes
    """16 random bytes of the teammate's."""
    teammate_key: bytes
    """The teammate's ephemeral X25519 public key."""
    subscribe: EarlySubscribe | None = None
    """The subscribe the open carries, if any."""

    def transcript_hash(self) -> bytes:
        """TH1 = SHA-256 of the label and every field of the offer, each length-prefixed; the
        last is the early subscribe's `transcript_field()`, empty when the open carries none."""
        digest = hashlib.sha256(_field(TRANSCRIPT_LABEL))
        for value in (
            self.host_id.encode("ascii"),
            self.role.encode("ascii"),
            self.name.encode("utf-8"),
            self.salt,
            self.teammate_key,
            b"" if self.subscribe is None else self.subscribe.transcript_field(),
        ):
            digest.update(_field(value))
        return digest.digest()


def proof_key(root: bytes) -> bytes:
    """The key the teammate's proof is made with: HKDF(root, salt = empty, info = PROOF_INFO)."""
    return hkdf(root, b"", PROOF_INFO)


def make_proof(root: bytes, offer: Offer) -> bytes:
    """The teammate's proof that it holds the role root: HMAC-SHA256(proof key, TH1)."""
    return hmac.digest(proof_key(root), offer.transcript_hash(), "sha256")


def full_transcript_hash(
    offer: Offer, proof: bytes, host_public_key: bytes, host_key: bytes
) -> bytes:
    """TH2 = SHA-256(TH1 ‖ proof ‖ host public key ‖ host ephemeral key), fields length-prefixed:
    what the host signs and what the channel keys are bound to."""
    digest = hashlib.sha256(offer.transcript_hash())
    for value in (proof, host_public_key, host_key):
        digest.update(_field(value))
    return digest.digest()


def answer_signed_message(transcript_hash: bytes) -> bytes:
    """What the host signs: ANSWER_SIGN_LABEL ‖ TH2."""
    return ANSWER_SIGN_LABEL + transcript_hash


def channel_keys(root: bytes, shared: bytes, transcript_hash: bytes) -> tuple[bytes, bytes]:
    """(k_up, k_down): HKDF over the X25519 secret with the role root as salt (TLS 1.3's
    extract of the DH secret under the PSK's secret), info = direction ‖ TH2."""
    if len(root) != KEY_SIZE or len(shared) != KEY_SIZE:
        raise ValueError(f"a root and a shared secret are {KEY_SIZE} bytes each")
    return (
        hkdf(shared, root, UP_INFO + transcript_hash),
        hkdf(shared, root, DOWN_INFO + transcript_hash),
    )


def _raw_public(private: X25519PrivateKey) -> bytes:
    return private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )


def _exchange(private: X25519PrivateKey, public: bytes) -> bytes:
    """The X25519 shared secret; OpeningError for a key of the wrong size or a low-order point
    (an all-zero secret, which `cryptography` refuses), never a raw exception."""
    try:
        return private.exchange(X25519PublicKey.from_public_bytes(public))
    except ValueError:
        raise OpeningError(CloseCode.DECRYPTION_FAILED, "unusable ephemeral key") from None


# --- the teammate's end ----------------------------------------------------------------------


class TeammateOpening:
    """The teammate's side of one opening: `meta()` for the `open`, then `finish(answer)`.

    Holds its ephemeral private key only until `finish`, which forgets it.
    """

    def __init__(
        self,
        *,
        root: bytes,
        host_id: str,
        role: str,
        name: str,
        private_key: X25519PrivateKey | None = None,
        salt: bytes | None = None,
        subscribe: EarlySubscribe | None = None,
    ) -> None:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}")
        self._root = root
        self._private: X25519PrivateKey | None = private_key or X25519PrivateKey.generate()
        self.offer = Offer(
            host_id=host_id,
            role=role,
            name=name,
            salt=new_salt() if salt is None else salt,
            teammate_key=_raw_public(self._private),
            subscribe=subscribe,
        )
        self.proof = make_proof(root, self.offer)

    def meta(self) -> dict[str, Any]:
        """The `open` meta: role, name, salt, the ephemeral key `kx`, the `proof`, and the
        early subscribe `sub` when there is one."""
        offer = self.offer
        meta: dict[str, Any] = {
            "role": offer.role,
            "name": offer.name,
            "salt": offer.salt,
            "kx": offer.teammate_key,
            "proof": self.proof,
        }
        if offer.subscribe is not None:
            meta["sub"] = offer.subscribe.meta()
        return meta

    def finish(self, answer: bytes) -> ChannelCrypto:
        """Check the host's answer and return the channel's ciphers (send up, receive down).

        Raises OpeningError: 4000 for an answer of the wrong shape (a host of another protocol
        version), 4003 for a public key that is not the link's host or a signature that does not
        verify (someone other than the host answered, or the transcript was changed on the way).
        """
        if self._private is None:
            raise RuntimeError("this opening is finished")
        if not isinstance(answer, bytes) or len(answer) != ANSWER_SIZE:
            raise OpeningError(CloseCode.PROTOCOL_ERROR, "the host's answer is malformed")
        public_key = answer[:PUBLIC_KEY_SIZE]
        host_key = answer[PUBLIC_KEY_SIZE : PUBLIC_KEY_SIZE + EPHEMERAL_KEY_SIZE]
        signature = answer[PUBLIC_KEY_SIZE + EPHEMERAL_KEY_SIZE :]
        if derive_host_id(public_key) != self.offer.host_id:
            raise OpeningError(CloseCode.DECRYPTION_FAILED, "the answer is not from the host")
        transcript = full_transcript_hash(self.offer, self.proof, public_key, host_key)
        try:
            Ed25519PublicKey.from_public_bytes(public_key).verify(
                signature, answer_signed_message(transcript)
            )
        except (InvalidSignature, ValueError):
            raise OpeningError(
                CloseCode.DECRYPTION_FAILED, "the answer is not signed by the host"
            ) from None
        private, self._private = self._private, None  # forward secrecy: forget it now
        k_up, k_down = channel_keys(self._root, _exchange(private, host_key), transcript)
        host_id = self.offer.host_id
        return ChannelCrypto(
            send=ChannelCipher(k_up, host_id), receive=ChannelCipher(k_down, host_id)
        )


# --- the host's end --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class HostAnswer:
    """What the host makes of a checked offer: the answer to send first, and its ciphers."""

    answer: bytes = field(repr=False)
    """The host's first message on the channel, in clear (ANSWER_SIZE bytes)."""
    crypto: ChannelCrypto
    """Send down, receive up."""


def answer_offer(
    identity: HostIdentity,
    *,
    root: bytes,
    offer: Offer,
    proof: bytes,
    private_key: X25519PrivateKey | None = None,
) -> HostAnswer:
    """Check the teammate's proof and answer its offer.

    Raises OpeningError 4003 when the proof does not verify (the teammate does not hold the
    secret of the role it claims, or the relay changed a field it covers).
    """
    if offer.host_id != identity.host_id:
        raise ValueError("an offer for another host")
    if len(proof) != PROOF_SIZE or not hmac.compare_digest(proof, make_proof(root, offer)):
        raise OpeningError(CloseCode.DECRYPTION_FAILED, "the open's proof does not verify")
    private = private_key or X25519PrivateKey.generate()
    host_key = _raw_public(private)
    shared = _exchange(private, offer.teammate_key)
    transcript = full_transcript_hash(offer, proof, identity.public_key, host_key)
    signature = identity.sign(answer_signed_message(transcript))
    k_up, k_down = channel_keys(root, shared, transcript)
    return HostAnswer(
        answer=identity.public_key + host_key + signature,
        crypto=ChannelCrypto(
            send=ChannelCipher(k_down, offer.host_id), receive=ChannelCipher(k_up, offer.host_id)
        ),
    )


def check_offer_fields(meta: dict[str, Any]) -> tuple[bytes, bytes, bytes]:
    """The `salt`, `kx` and `proof` of an `open` meta, each checked for size.

    Raises OpeningError 4000 for a meta without them (a client of an older protocol) or with
    a value of the wrong type or size.
    """
    salt, teammate_key, proof = meta.get("salt"), meta.get("kx"), meta.get("proof")
    if teammate_key is None and proof is None:
        raise OpeningError(
            CloseCode.PROTOCOL_ERROR, "the open has no key exchange: update the client"
        )
    if not isinstance(salt, bytes) or len(salt) != SALT_SIZE:
        raise OpeningError(CloseCode.PROTOCOL_ERROR, f"salt must be {SALT_SIZE} bytes")
    if not isinstance(teammate_key, bytes) or len(teammate_key) != EPHEMERAL_KEY_SIZE:
        raise OpeningError(CloseCode.PROTOCOL_ERROR, f"kx must be {EPHEMERAL_KEY_SIZE} bytes")
    if not isinstance(proof, bytes) or len(proof) != PROOF_SIZE:
        raise OpeningError(CloseCode.PROTOCOL_ERROR, f"proof must be {PROOF_SIZE} bytes")
    return salt, teammate_key, proof


def check_early_subscribe(meta: dict[str, Any]) -> EarlySubscribe | None:
    """The `sub` of an `open` meta, checked for shape (its numbers as a `subscribe` request's
    are, by the caller); None when the open carries none.

    Raises OpeningError 4000 for a `sub` that is not a map of `after`, `tail`, `conversation`
    with the right types.
    """
    sub = meta.get("sub")
    if sub is None:
        return None
    if not isinstance(sub, dict) or not set(sub) <= {"after", "tail", "conversation"}:
        raise OpeningError(CloseCode.PROTOCOL_ERROR, "malformed sub")
    after, tail, conversation = sub.get("after"), sub.get("tail"), sub.get("conversation")
    for number in (after, tail):
        if number is not None and type(number) is not int:
            raise OpeningError(CloseCode.PROTOCOL_ERROR, "malformed sub")
    if conversation is not None and (
        not isinstance(conversation, str) or not 1 <= len(conversation) <= MAX_CONVERSATION_LENGTH
    ):
        raise OpeningError(CloseCode.PROTOCOL_ERROR, "malformed sub")
    return EarlySubscribe(after=after, tail=tail, conversation=conversation)


# --- reference test vectors ------------------------------------------------------------------


def _x25519_from_seed(seed: bytes) -> X25519PrivateKey:
    return X25519PrivateKey.from_private_bytes(seed)


REFERENCE_SUBSCRIBE: Final = EarlySubscribe(after=41, conversation="c-0001")
"""The early subscribe of the reference vectors' open."""


def reference_vectors(
    *, identity: HostIdentity, root: bytes, role: str, name: str, salt: bytes
) -> dict[str, str]:
    """The opening's entries of tests/vectors/crypto.json (docs/security.md lists the inputs)."""
    teammate_private = _x25519_from_seed(bytes(range(0xB0, 0xD0)))
    host_private = _x25519_from_seed(bytes(range(0xD0, 0xF0)))
    opening = TeammateOpening(
        root=root,
        host_id=identity.host_id,
        role=role,
        name=name,
        private_key=teammate_private,
        salt=salt,
        subscribe=REFERENCE_SUBSCRIBE,
    )
    answered = answer_offer(
        identity, root=root, offer=opening.offer, proof=opening.proof, private_key=host_private
    )
    host_key = _raw_public(host_private)
    transcript = full_transcript_hash(opening.offer, opening.proof, identity.public_key, host_key)
    shared = teammate_private.exchange(X25519PublicKey.from_public_bytes(host_key))
    k_up, k_down = channel_keys(root, shared, transcript)
    return {
        "kx_teammate_private_hex": bytes(range(0xB0, 0xD0)).hex(),
        "kx_teammate_key_hex": opening.offer.teammate_key.hex(),
        "kx_host_private_hex": bytes(range(0xD0, 0xF0)).hex(),
        "kx_host_key_hex": host_key.hex(),
        "kx_sub_after": str(REFERENCE_SUBSCRIBE.after),
        "kx_sub_conversation": str(REFERENCE_SUBSCRIBE.conversation),
        "kx_sub_field_hex": REFERENCE_SUBSCRIBE.transcript_field().hex(),
        "kx_offer_hash_hex": opening.offer.transcript_hash().hex(),
        "kx_proof_key_hex": proof_key(root).hex(),
        "kx_proof_hex": opening.proof.hex(),
        "kx_transcript_hash_hex": transcript.hex(),
        "kx_shared_hex": shared.hex(),
        "kx_answer_hex": answered.answer.hex(),
        "k_up_hex": k_up.hex(),
        "k_down_hex": k_down.hex(),
    }
