"""End-to-end crypto: share links, role secrets, the keys derived from them, and channel AEAD.

Implements docs/security.md: from a role secret S the relay sees only a token derived from S,
while host and teammate derive per-channel AES-256-GCM keys the relay never learns. Run
`python -m tunnel.e2e.vectors --vectors` to print the reference test vectors. How a channel's keys
come about is `tunnel.e2e.opening`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from tunnel.e2e.identity import (
    KeyFileError,
    default_key_path,
    is_host_id,
    read_private_file,
    write_private_file,
)
from tunnel.errors import TunnelError
from tunnel.link.urls import check_origin, normalize_relay_url
from tunnel.proto.codes import CloseCode

ROLES: Final = ("view", "drive")
"""The roles a share link can grant; `drive` may also prompt, answer and type."""

SECRET_SIZE: Final = 32
"""Bytes in a role secret (the part of a share link after the role)."""

SALT_SIZE: Final = 16
"""Bytes in the salt a teammate picks for each channel (`open` meta `salt`)."""

KEY_SIZE: Final = 32
"""Bytes of every HKDF output: tokens, roots and AES-256 keys."""

NONCE_SIZE: Final = 12
"""AES-GCM nonce: the per-direction message counter, big-endian."""

TAG_SIZE: Final = 16
"""AES-GCM appends a 16-byte tag; a ciphertext is len(plaintext) + 16 bytes."""

MAX_MESSAGES: Final = 1 << (8 * NONCE_SIZE)
"""Messages one direction of one channel can carry before its counter would wrap."""

RELAY_TOKEN_INFO: Final = b"agent-tunnel/v1 relay-token"
E2E_INFO: Final = b"agent-tunnel/v1 e2e"

_B64URL_RE = re.compile(r"[A-Za-z0-9_-]*")

logger = logging.getLogger("tunnel.crypto")


class DecryptionError(TunnelError):
    """A channel message did not authenticate: tampered, replayed, reordered, dropped before it,
    or sealed with another key (e.g. a role secret the sender does not hold). Close the channel
    with `code`; the cipher that raised it refuses every later call.
    """

    def __init__(self, message: str) -> None:
        super().__init__(
            message, code=CloseCode.DECRYPTION_FAILED, reason="decryption failed", by_peer=True
        )


class CounterExhaustedError(TunnelError):
    """A channel direction has sent MAX_MESSAGES messages; reusing a nonce would break AES-GCM.

    Open a new channel (new salt, new keys).
    """

    def __init__(self, message: str) -> None:
        super().__init__(
            message, code=CloseCode.LIMIT_REACHED, reason="channel used up", by_peer=False
        )


# --- encodings -------------------------------------------------------------------------------


def new_secret() -> bytes:
    """Return a fresh random role secret (32 bytes from the OS CSPRNG)."""
    return os.urandom(SECRET_SIZE)


def new_salt() -> bytes:
    """Return a fresh random channel salt (16 bytes), as a teammate puts in its `open` meta.

    The host's nonce (its first message on a channel) is made the same way.
    """
    return os.urandom(SALT_SIZE)


def b64url_encode(b: bytes) -> str:
    """Encode bytes as base64url without padding (RFC 4648 section 5)."""
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode("ascii")


def b64url_decode(s: str) -> bytes:
    """Decode unpadded base64url strictly: ValueError on padding, other alphabets, stray
    characters, impossible lengths, or non-zero trailing bits (so each value has one encoding).
    """
    if not isinstance(s, str) or _B64URL_RE.fullmatch(s) is None:
        raise ValueError("not unpadded base64url (allowed: A-Z a-z 0-9 - _)")
    if len(s) % 4 == 1:
        raise ValueError("base64url text has an impossible length")
    try:
        decoded = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    except (binascii.Error, ValueError):
        raise ValueError("not valid base64url") from None
    if b64url_encode(decoded) != s:
        raise ValueError("base64url text is not canonical (non-zero trailing bits)")
    return decoded


# --- key derivation --------------------------------------------------------------------------


def hkdf(key: bytes, salt: bytes, info: bytes) -> bytes:
    """HKDF-SHA256 (RFC 5869) of `key`, KEY_SIZE bytes out."""
    return HKDF(algorithm=hashes.SHA256(), length=KEY_SIZE, salt=salt, info=info).derive(key)


def _check_secret(secret: bytes) -> None:
    if len(secret) != SECRET_SIZE:
        raise ValueError(f"a role secret is {SECRET_SIZE} bytes, got {len(secret)}")


def _host_id_bytes(host_id: str) -> bytes:
    if not is_host_id(host_id):
        raise ValueError("not a host id (26 characters of lowercase base32)")
    return host_id.encode("ascii")


def relay_token(secret: bytes, host_id: str) -> bytes:
    """Return the token a teammate shows the relay: HKDF-SHA256(S, host_id, "…relay-token")."""
    _check_secret(secret)
    return hkdf(secret, _host_id_bytes(host_id), RELAY_TOKEN_INFO)


def token_verifier(token: bytes) -> bytes:
    """Return sha256(token): what the host registers with the relay for each role."""
    return hashlib.sha256(token).digest()


def e2e_root(secret: bytes, host_id: str) -> bytes:
    """Return the end-to-end root key: HKDF-SHA256(S, host_id, "agent-tunnel/v1 e2e").

    It never leaves host or teammate; the relay's token is an independent HKDF output.
    """
    _check_secret(secret)
    return hkdf(secret, _host_id_bytes(host_id), E2E_INFO)


# --- share links -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareLink:
    """A link that lets a teammate attach: `{relay_url}/h/{host_id}#{role}.{secret}`.

    Everything after '#' stays in the browser: the relay never receives the secret.
    """

    relay_url: str
    """The relay's origin in normal form (`normalize_relay_url`): "scheme://host[:port]"."""

    host_id: str
    """The host this link attaches to."""

    role: str
    """One of ROLES."""

    secret: bytes = field(repr=False)
    """The 32-byte role secret. Kept out of repr so a logged link does not leak it."""

    def __post_init__(self) -> None:
        if normalize_relay_url(self.relay_url) != self.relay_url:
            raise ValueError(
                "relay_url must be lowercase scheme://host[:port], without the default port"
                " and with no trailing slash"
            )
        if not is_host_id(self.host_id):
            raise ValueError("not a host id (26 characters of lowercase base32)")
        if self.role not in ROLES:
            raise ValueError(f"unknown role {self.role!r}; expected one of {', '.join(ROLES)}")
        _check_secret(self.secret)

    def __str__(self) -> str:
        return f"{self.relay_url}/h/{self.host_id}#{self.role}.{b64url_encode(self.secret)}"

    @classmethod
    def parse(cls, link: str) -> ShareLink:
        """Parse a share link; ValueError saying what is wrong with anything else."""
        if not isinstance(link, str):
            raise ValueError("a share link is a string")
        link = link.strip()
        head, hash_sign, fragment = link.partition("#")
        if not hash_sign or not fragment:
            raise ValueError("the share link has no '#role.secret' part (was it cut off?)")
        parts = urlsplit(head)
        if parts.scheme not in ("http", "https"):
            raise ValueError("a share link starts with https:// (or http:// for local tests)")
        check_origin(parts)
        if parts.query:
            raise ValueError("a share link has no query string")
        segments = parts.path.split("/")
        if len(segments) != 3 or segments[:2] != ["", "h"] or not is_host_id(segments[2]):
            raise ValueError("a share link's path is /h/<host id> (26 lowercase base32 chars)")
        role, dot, encoded = fragment.partition(".")
        if not dot:
            raise ValueError("the part after '#' must be '<role>.<secret>'")
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r} in the share link; expected view or drive")
        try:
            secret = b64url_decode(encoded)
        except ValueError as exc:
            raise ValueError(f"the share link's secret is not valid: {exc}") from None
        if len(secret) != SECRET_SIZE:
            raise ValueError(
                f"the share link's secret is {len(secret)} bytes; it must be {SECRET_SIZE}"
            )
        return cls(
            relay_url=normalize_relay_url(f"{parts.scheme}://{parts.netloc}"),
            host_id=segments[2],
            role=role,
            secret=secret,
        )

    @property
    def token(self) -> bytes:
        """The relay token this link's holder presents in its hello."""
        return relay_token(self.secret, self.host_id)


# --- channel AEAD ----------------------------------------------------------------------------


class ChannelCipher:
    """One direction of one channel: AES-256-GCM with a message counter as nonce.

    Sender and receiver each count from 0 and never send the nonce, so a message that was
    replayed, reordered, or follows a dropped one fails to decrypt. Use one object per direction.
    """

    __slots__ = ("_aad", "_aead", "_counter", "_dead")

    def __init__(self, key: bytes, host_id: str) -> None:
        if len(key) != KEY_SIZE:
            raise ValueError(f"a channel key is {KEY_SIZE} bytes, got {len(key)}")
        self._aead = AESGCM(key)
        self._aad = _host_id_bytes(host_id)
        self._counter = 0
        self._dead = False

    @property
    def counter(self) -> int:
        """How many messages went through; the next nonce."""
        return self._counter

    def _next_nonce(self) -> bytes:
        if self._counter >= MAX_MESSAGES:
            raise CounterExhaustedError("this channel direction used up its nonces")
        nonce = self._counter.to_bytes(NONCE_SIZE, "big")
        self._counter += 1
        return nonce

    def encrypt(self, plaintext: bytes) -> bytes:
        """Seal the next message; returns ciphertext || tag (no nonce: the receiver counts)."""
        if self._dead:
            raise DecryptionError("this channel's cipher failed earlier and is closed")
        return self._aead.encrypt(self._next_nonce(), plaintext, self._aad)

    def decrypt(self, ciphertext: bytes) -> bytes:
        """Open the next message in order; DecryptionError (close 4003) on any failure, after
        which this cipher refuses every call, because the peers' counters no longer agree.
        """
        if self._dead:
            raise DecryptionError("this channel's cipher failed earlier and is closed")
        try:
            return self._aead.decrypt(self._next_nonce(), ciphertext, self._aad)
        except (InvalidTag, CounterExhaustedError, ValueError, TypeError, OverflowError):
            self._dead = True
            # No details: the reason (tag, length, type) would only help an attacker.
            raise DecryptionError("a channel message did not authenticate") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelCrypto:
    """Both directions of one channel, as seen from one side."""

    send: ChannelCipher
    """Encrypts what this side sends."""

    receive: ChannelCipher
    """Decrypts what this side receives."""


def share_link(relay_url: str, host_id: str, role: str, secret: bytes) -> ShareLink:
    """Return the link holding `secret` for `role` (relay_url is normalized first): a role
    link's or a personal link's, which have the same format."""
    return ShareLink(
        relay_url=normalize_relay_url(relay_url), host_id=host_id, role=role, secret=secret
    )


# --- the host's role secrets -----------------------------------------------------------------

_SECRETS_FORMAT: Final = "agent-tunnel share secrets v1"


def default_secrets_path() -> Path:
    """Return where the share secrets live by default: next to the host key."""
    return default_key_path().with_name("share_secrets")


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareSecrets:
    """The host's secret per role. Persisted (mode 0600) so links survive restarts."""

    view: bytes = field(repr=False)
    """Secret of the view link."""

    drive: bytes = field(repr=False)
    """Secret of the drive link."""

    def __post_init__(self) -> None:
        _check_secret(self.view)
        _check_secret(self.drive)
        if self.view == self.drive:
            raise ValueError("the view and drive secrets must differ")

    @classmethod
    def generate(cls) -> ShareSecrets:
        """Return fresh random secrets for every role."""
        return cls(view=new_secret(), drive=new_secret())

    @classmethod
    def load_or_create(cls, path: Path) -> ShareSecrets:
        """Load the secrets at `path`, or create and save new ones if there are none.

        Raises KeyFileError if the file is readable by group or others, or is corrupt.
        """
        path = Path(path)
        if not path.exists():
            created = cls.generate()
            if write_private_file(path, created._to_json(), overwrite=False):
                return created
        return cls._from_json(path, read_private_file(path))

    def save(self, path: Path) -> None:
        """Write the secrets to `path` (mode 0600, atomically replacing what was there)."""
        write_private_file(Path(path), self._to_json(), overwrite=True)

    def rotate(self) -> ShareSecrets:
        """Return new secrets for every role; every old link stops working once they are used."""
        return ShareSecrets.generate()

    def secret_for(self, role: str) -> bytes:
        """Return the secret of `role`; ValueError for an unknown role."""
        if role == "view":
            return self.view
        if role == "drive":
            return self.drive
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")

    def verifiers(self, host_id: str) -> dict[str, bytes]:
        """Return {role: sha256(relay token)}: what the host hello registers with the relay."""
        return {role: token_verifier(relay_token(self.secret_for(role), host_id)) for role in ROLES}

    def link(self, role: str, relay_url: str, host_id: str) -> ShareLink:
        """Return the share link for `role` (relay_url is normalized first)."""
        return share_link(relay_url, host_id, role, self.secret_for(role))

    def _to_json(self) -> bytes:
        doc = {
            "format": _SECRETS_FORMAT,
            "view": b64url_encode(self.view),
            "drive": b64url_encode(self.drive),
        }
        return (json.dumps(doc, indent=2) + "\n").encode("utf-8")

    @classmethod
    def _from_json(cls, path: Path, data: bytes) -> ShareSecrets:
        try:
            doc = json.loads(data)
            if not isinstance(doc, dict) or doc.get("format") != _SECRETS_FORMAT:
                raise ValueError("unknown format")
            return cls(view=b64url_decode(doc["view"]), drive=b64url_decode(doc["drive"]))
        except (ValueError, KeyError, TypeError):
            raise KeyFileError(
                f"{path} is not a valid share secrets file; delete it to create new links"
            ) from None
