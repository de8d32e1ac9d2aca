"""Hello payloads and who gets in (docs/relay.md, "Hello and admission").

Pure functions: build the relay's hello, check a host's or teammate's hello, match a teammate's
token against the verifiers its host registered. A refusal is a `Refusal` carrying the close
code; its message is safe to log and to send as the close reason (never a token or key).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tunnel import PROTOCOL_VERSION
from tunnel.e2e.identity import (
    CHALLENGE_SIZE,
    PUBLIC_KEY_SIZE,
    derive_host_id,
    is_host_id,
    verify_host_signature,
)
from tunnel.proto import Limits
from tunnel.proto.codes import CloseCode

ROLES = ("view", "drive")
"""The roles a teammate token can match, one verifier each."""

VERIFIER_SIZE = 32
"""A verifier is sha256(token)."""

MAX_NAME_LENGTH = 64
"""Characters of a teammate's display name."""

MAX_CAPABILITIES = 32
"""Entries in a host's capability list."""


class Refusal(Exception):
    """A hello was refused: close the link with `code`; `str(self)` is the (safe) reason."""

    def __init__(self, code: CloseCode, reason: str, *, metric: str) -> None:
        super().__init__(reason)
        self.code = code
        """Close code for the WebSocket."""
        self.metric = metric
        """Label for the rejection counter (a fixed word, never peer data)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HostHello:
    """A host hello that passed every check."""

    public_key: bytes
    """The host's raw Ed25519 public key."""

    host_id: str
    """Derived from the public key: nobody else can claim it."""

    capabilities: tuple[str, ...]
    """What the host says it supports (opaque to the relay)."""

    verifiers: Mapping[str, bytes] = field(repr=False)
    """{"view": sha256(view token), "drive": sha256(drive token)}."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TeammateHello:
    """A teammate hello with the right shape (the token is not checked yet)."""

    host_id: str
    """The host it wants to attach to."""

    token_hash: bytes = field(repr=False)
    """sha256 of the token it presented; the token itself is not kept."""

    name: str
    """Its display name (unverified, shown to the host as a hint only)."""


def relay_hello(challenge: bytes, limits: Limits) -> dict[str, Any]:
    """Return the relay's hello payload: role, version, challenge, and the limits it enforces."""
    advertised = {
        "max_message_size": limits.max_message_size,
        "max_data_size": limits.max_data_size,
        "max_string_length": limits.max_string_length,
        "max_channels": limits.max_channels,
        "initial_window": limits.initial_window,
    }
    return {
        "role": "relay",
        "version": PROTOCOL_VERSION,
        "challenge": challenge,
        "limits": {key: value for key, value in advertised.items() if value is not None},
    }


def _common(payload: Mapping[str, Any], role: str) -> None:
    if payload.get("role") != role:
        raise Refusal(CloseCode.PROTOCOL_ERROR, f"expected a {role} hello", metric="bad_hello")
    version = payload.get("version")
    if type(version) is not int or version != PROTOCOL_VERSION:
        raise Refusal(
            CloseCode.PROTOCOL_ERROR, "unsupported protocol version", metric="bad_version"
        )


def _bytes_field(payload: Mapping[str, Any], key: str, size: int | None) -> bytes:
    value = payload.get(key)
    if not isinstance(value, bytes) or (size is not None and len(value) != size):
        raise Refusal(
            CloseCode.PROTOCOL_ERROR, f"hello field {key!r} is malformed", metric="bad_hello"
        )
    return value


def parse_host_hello(
    payload: Mapping[str, Any],
    *,
    challenge: bytes,
    public_url: str,
    authorized_keys: frozenset[bytes] | None,
) -> HostHello:
    """Check a host hello: shape, signature over (challenge || public_url), authorized keys."""
    _common(payload, "host")
    expected = {"role", "version", "pubkey", "sig", "capabilities", "verifiers"}
    if not set(payload) <= expected:
        raise Refusal(CloseCode.PROTOCOL_ERROR, "unknown host hello field", metric="bad_hello")
    assert len(challenge) == CHALLENGE_SIZE
    public_key = _bytes_field(payload, "pubkey", PUBLIC_KEY_SIZE)
    signature = _bytes_field(payload, "sig", None)
    capabilities = payload.get("capabilities", [])
    if (
        not isinstance(capabilities, list)
        or len(capabilities) > MAX_CAPABILITIES
        or not all(isinstance(c, str) for c in capabilities)
    ):
        raise Refusal(CloseCode.PROTOCOL_ERROR, "malformed capabilities", metric="bad_hello")
    raw_verifiers = payload.get("verifiers")
    if not isinstance(raw_verifiers, dict) or set(raw_verifiers) != set(ROLES):
        raise Refusal(CloseCode.PROTOCOL_ERROR, "malformed verifiers", metric="bad_hello")
    verifiers = {role: _bytes_field(raw_verifiers, role, VERIFIER_SIZE) for role in ROLES}
    if verifiers["view"] == verifiers["drive"]:
        raise Refusal(
            CloseCode.PROTOCOL_ERROR, "view and drive verifiers are equal", metric="bad_hello"
        )
    if not verify_host_signature(public_key, challenge, public_url, signature):
        raise Refusal(CloseCode.UNAUTHORIZED, "bad host signature", metric="bad_signature")
    if authorized_keys is not None and public_key not in authorized_keys:
        raise Refusal(CloseCode.UNAUTHORIZED, "host key not authorized", metric="unauthorized_host")
    return HostHello(
        public_key=public_key,
        host_id=derive_host_id(public_key),
        capabilities=tuple(capabilities),
        verifiers=verifiers,
    )


def parse_teammate_hello(payload: Mapping[str, Any]) -> TeammateHello:
    """Check a teammate hello's shape; its token is matched later against the host's verifiers."""
    _common(payload, "teammate")
    if not set(payload) <= {"role", "version", "host_id", "token", "name"}:
        raise Refusal(CloseCode.PROTOCOL_ERROR, "unknown teammate hello field", metric="bad_hello")
    host_id = payload.get("host_id")
    if not isinstance(host_id, str) or not is_host_id(host_id):
        raise Refusal(CloseCode.PROTOCOL_ERROR, "malformed host id", metric="bad_hello")
    token = _bytes_field(payload, "token", None)
    name = payload.get("name", "")
    if not isinstance(name, str) or len(name) > MAX_NAME_LENGTH:
        raise Refusal(CloseCode.PROTOCOL_ERROR, "malformed name", metric="bad_hello")
    return TeammateHello(host_id=host_id, token_hash=hashlib.sha256(token).digest(), name=name)


def match_role(token_hash: bytes, verifiers: Mapping[str, bytes]) -> str | None:
    """Return the role whose verifier equals `token_hash`, or None. Constant time per verifier."""
    found = None
    for role in ROLES:
        verifier = verifiers.get(role)
        if verifier is not None and hmac.compare_digest(token_hash, verifier):
            found = role
    return found
