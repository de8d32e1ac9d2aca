"""Web Push messages, sans-I/O: the payload a browser's service worker reads, encrypted to the
subscription's keys (RFC 8291, `aes128gcm` content coding of RFC 8188), and the headers of the
push request (RFC 8030, VAPID of RFC 8292).

Only the browser that made the subscription can read a payload: the push service and the relay
see its size and timing, never its content (docs/notifications.md).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import http_ece
from cryptography.hazmat.primitives.asymmetric import ec

from tunnel.app.requests import PUSH_AUTH_SIZE, PUSH_KEY_SIZE
from tunnel.notify.vapid import VapidKey, b64url

SALT_SIZE = 16
RECORD_SIZE = 4096
"""The one record's size in the header: a push message is one record (RFC 8291 section 4)."""
MAX_PUSH_BODY = 4096
"""What every push service must accept (RFC 8291 section 4)."""
HEADER_SIZE = SALT_SIZE + 4 + 1 + PUSH_KEY_SIZE
"""salt, rs, idlen, keyid: the sender's public key (RFC 8188 section 2.1, RFC 8291 section 4)."""
MAX_PLAINTEXT = MAX_PUSH_BODY - HEADER_SIZE - 16 - 1
"""3993 bytes: what is left once the header, the AEAD tag and the padding delimiter fit."""

PAYLOAD_VERSION = 1
PUSH_TTL = 3600
"""Seconds a push service keeps a push for a browser that is offline (RFC 8030 section 5.2):
a request still waiting an hour later gets no push; the page shows it when opened."""
TOPIC_SIZE = 32
"""A Topic header's longest value (RFC 8030 section 5.4)."""
ELLIPSIS = "…"


def check_p256dh(key: bytes) -> bytes:
    """`key` if it is an uncompressed P-256 point on the curve; ValueError otherwise."""
    if len(key) != PUSH_KEY_SIZE or key[0] != 4:
        raise ValueError("p256dh must be a 65-byte uncompressed P-256 point")
    try:
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), key)
    except ValueError:
        raise ValueError("p256dh is not a point on P-256") from None
    return key


def encrypt(
    plaintext: bytes,
    *,
    p256dh: bytes,
    auth: bytes,
    salt: bytes | None = None,
    sender: ec.EllipticCurvePrivateKey | None = None,
) -> bytes:
    """The push message body for a subscription with keys `p256dh` and `auth` (RFC 8291): an
    `aes128gcm` header naming a fresh sender key, then one record. `salt` and `sender` are
    random unless given (test vectors only). ValueError for keys of the wrong shape, or a
    plaintext over `MAX_PLAINTEXT`."""
    check_p256dh(p256dh)
    if len(auth) != PUSH_AUTH_SIZE:
        raise ValueError(f"auth must be {PUSH_AUTH_SIZE} bytes")
    if len(plaintext) > MAX_PLAINTEXT:
        raise ValueError(f"a push payload holds at most {MAX_PLAINTEXT} bytes")
    salt = salt if salt is not None else os.urandom(SALT_SIZE)
    sender = sender if sender is not None else ec.generate_private_key(ec.SECP256R1())
    # No keyid given: http_ece puts the sender's public key there, as RFC 8291 section 4 asks.
    body: bytes = http_ece.encrypt(
        plaintext,
        salt=salt,
        private_key=sender,
        dh=p256dh,
        auth_secret=auth,
        rs=RECORD_SIZE,
        version="aes128gcm",
    )
    return body


@dataclass(frozen=True, slots=True, kw_only=True)
class Option:
    """One answer a notification offers (a permission request's option)."""

    option_id: str
    name: str
    kind: str


def tag_of(host_id: str, request_id: str) -> str:
    """The notification's tag: a browser shows one notification per tag, so the withdrawal
    and the reminder replace the request's."""
    return f"{host_id}/{request_id}"


def request_payload(
    *,
    host_id: str,
    request_id: str,
    agent: str,
    title: str,
    kind: str,
    command: str | None,
    options: Sequence[Option],
    reminder: bool,
) -> bytes:
    """The `request` payload (docs/application.md, "Notifications"), cut to `MAX_PLAINTEXT`:
    the command first, then the title, then the agent's name, then the options if still needed
    (a page then shows the request, whose answers it has)."""
    message: dict[str, Any] = {
        "v": PAYLOAD_VERSION,
        "type": "request",
        "tag": tag_of(host_id, request_id),
        "host": host_id,
        "request_id": request_id,
        "agent": agent,
        "title": title,
        "kind": kind,
        "command": command,
        "options": [{"option_id": o.option_id, "name": o.name, "kind": o.kind} for o in options],
        "reminder": reminder,
    }
    for field in ("command", "title", "agent"):
        packed = _pack(message)
        if len(packed) <= MAX_PLAINTEXT:
            return packed
        text = message[field]
        if isinstance(text, str):
            message[field] = _cut(text, len(packed) - MAX_PLAINTEXT)
    packed = _pack(message)
    if len(packed) > MAX_PLAINTEXT:
        message["options"] = []
        packed = _pack(message)
    if len(packed) > MAX_PLAINTEXT:
        # Only ids longer than any agent sends are left: nothing of the request fits.
        raise ValueError("a request's ids do not fit a push payload")
    return packed


def withdraw_payload(*, host_id: str, request_id: str) -> bytes:
    """The `withdraw` payload: the request was answered or cancelled; close its notification."""
    return _pack(
        {
            "v": PAYLOAD_VERSION,
            "type": "withdraw",
            "tag": tag_of(host_id, request_id),
            "host": host_id,
            "request_id": request_id,
        }
    )


def _pack(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _cut(text: str, excess: int) -> str:
    """`text` shorter by at least `excess` bytes of JSON, ending in an ellipsis, or empty: each
    character left out takes at least one byte with it."""
    keep = len(text) - excess - len(ELLIPSIS.encode())
    return text[:keep] + ELLIPSIS if keep > 0 else ""


def topic_of(tag: str) -> str:
    """The Topic header for `tag` (RFC 8030 section 5.4): a push service keeps only the latest
    undelivered push of one topic, so a withdrawal replaces a request push still queued."""
    return b64url(hashlib.sha256(tag.encode("utf-8")).digest())[:TOPIC_SIZE]


def push_headers(
    vapid: VapidKey,
    endpoint: str,
    *,
    contact: str,
    now: float,
    topic: str,
    ttl: int = PUSH_TTL,
) -> dict[str, str]:
    """The headers of one push request (RFC 8030 section 5, RFC 8291, RFC 8292)."""
    return {
        "TTL": str(ttl),
        "Urgency": "high",
        "Topic": topic,
        "Content-Encoding": "aes128gcm",
        "Content-Type": "application/octet-stream",
        "Authorization": vapid.authorization(endpoint, contact=contact, now=now),
    }
