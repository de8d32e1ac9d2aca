"""The audit chain: each item's canonical bytes, the hash chain over a conversation, and the
host's signed chain head (docs/log.md, "The audit chain"). Pure values and functions, no I/O.

An item's canonical bytes are the canonical JSON (`canonical_json`) of its stored fields plus
`prev`, the hex SHA-256 of the previous item's canonical bytes (None for seq 0). The chain head of
a conversation at seq N is the SHA-256 of item N's canonical bytes: it commits to every item up to
N. The host signs (conversation, seq, head) with its identity key; the signed message starts with
`HEAD_SIGN_LABEL` (docs/security.md, "The audit chain").
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tunnel.log.item import Item, format_time, parse_time

__all__ = [
    "HASH_SIZE",
    "HEAD_SIGN_LABEL",
    "SIGNATURE_KIND",
    "Chain",
    "SignedHead",
    "canonical_bytes",
    "canonical_json",
    "head_message",
    "host_id_of",
    "item_hash",
]

HEAD_SIGN_LABEL: Final = b"agent-tunnel/v1 log chain signed"
"""The first 32 bytes of every signed chain head: no other signature of the host starts so."""

SIGNATURE_KIND: Final = "head_signature"
"""The `kind` of a signature record in an NDJSON export (items have no `kind`)."""

HASH_SIZE: Final = 32
"""SHA-256."""

_PUBLIC_KEY_SIZE: Final = 32
_SIGNATURE_SIZE: Final = 64
_HOST_ID_LENGTH: Final = 26
_MAX_SEQ: Final = 2**63 - 1
_SIGNATURE_KEYS: Final = frozenset(
    {"kind", "conversation_id", "seq", "hash", "host_id", "public_key", "signature", "signed_at"}
)


def canonical_json(value: object) -> str:
    """The one JSON text of `value` (RFC 8785's rules, with exact integers).

    Object keys sorted by their UTF-16 code units, no whitespace, strings as `JSON.stringify`
    writes them (only `"`, `\\` and control characters escaped, everything else literal), integers
    in exact decimal, other numbers as ECMAScript writes them (`1.0` is `1`, `1e21` is `1e+21`).
    A browser computes the same text with `JSON.stringify` and a key sort, so the page checks
    the chain too (tests/vectors/chain.json).
    """
    if value is None or value is True or value is False:
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, Mapping):
        keys = sorted(value, key=lambda k: str(k).encode("utf-16-be"))
        members = (f"{canonical_json(str(k))}:{canonical_json(value[k])}" for k in keys)
        return "{" + ",".join(members) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(canonical_json(v) for v in value) + "]"
    raise ValueError(f"{type(value).__name__} has no canonical JSON")


def _number(value: float) -> str:
    """ECMAScript's Number::toString for a finite double (RFC 8785, 3.2.2.3)."""
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{value} has no canonical JSON")
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    # repr() is the shortest text that reads back the same double, as ECMAScript's digits are.
    _, digits_tuple, exponent = Decimal(repr(abs(value))).normalize().as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digits_tuple))
    k = len(digits)
    n = exponent + k  # the decimal point sits after n digits
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = f"{digits[:n]}.{digits[n:]}"
    elif -6 < n <= 0:
        text = "0." + "0" * -n + digits
    else:
        e = n - 1
        mantissa = digits if k == 1 else f"{digits[0]}.{digits[1:]}"
        text = f"{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"
    return sign + text


def canonical_bytes(item: Item, prev: bytes | None) -> bytes:
    """Item's canonical bytes: the canonical JSON of its stored fields and `prev` (hex), UTF-8.

    The fields are `conversation_id`, `seq`, `type`, `status`, `response_id`, `created_at` (as on
    the wire: ISO 8601 in UTC with microseconds and `Z`), `created_by`, `data` and `prev`.
    """
    fields: dict[str, Any] = {
        "conversation_id": item.conversation_id,
        "seq": item.seq,
        "type": item.type,
        "status": item.status,
        "response_id": item.response_id,
        "created_at": format_time(item.created_at),
        "created_by": item.created_by,
        "data": item.data,
        "prev": None if prev is None else prev.hex(),
    }
    return canonical_json(fields).encode("utf-8")


def item_hash(item: Item, prev: bytes | None) -> bytes:
    """SHA-256 of the item's canonical bytes: the chain head once `item` is the newest."""
    return hashlib.sha256(canonical_bytes(item, prev)).digest()


class Chain:
    """The running chain of one conversation: feed it the items in seq order from seq 0."""

    def __init__(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        self.seq = -1
        """The seq of the last item fed, -1 before any."""
        self.head: bytes | None = None
        """The hash of the last item fed; None before any."""

    def add(self, item: Item) -> bytes:
        """Extend the chain by `item` (the next seq of this conversation); returns its hash.

        Raises `ValueError` for an item of another conversation or out of order.
        """
        if item.conversation_id != self.conversation_id or item.seq != self.seq + 1:
            raise ValueError(
                f"the chain of {self.conversation_id} continues at seq {self.seq + 1}, "
                f"not with {item.id}"
            )
        self.head = item_hash(item, self.head)
        self.seq = item.seq
        return self.head


def head_message(host_id: str, conversation_id: str, seq: int, head: bytes) -> bytes:
    """What the host signs for a chain head: label ‖ host id ‖ seq (8 bytes) ‖ head ‖ conversation.

    The 32-byte label comes first, as in a cast's signed message (another label), then the host
    id (26 base32 characters), so no signature of the host stands for another
    (docs/security.md, "The audit chain").
    """
    if len(head) != HASH_SIZE:
        raise ValueError(f"a chain head is {HASH_SIZE} bytes, got {len(head)}")
    if not 0 <= seq <= _MAX_SEQ:
        raise ValueError(f"seq {seq} is out of range")
    return (
        HEAD_SIGN_LABEL
        + host_id.encode("ascii")
        + seq.to_bytes(8, "big")
        + head
        + conversation_id.encode("utf-8")
    )


def host_id_of(public_key: bytes) -> str:
    """The host id of a raw Ed25519 public key (as `tunnel.e2e.identity.derive_host_id`, which
    the log cannot import: lowercase base32 of its SHA-256, 26 characters)."""
    digest = hashlib.sha256(public_key).digest()
    return base64.b32encode(digest).decode("ascii").lower()[:_HOST_ID_LENGTH]


@dataclass(frozen=True, slots=True, kw_only=True)
class SignedHead:
    """The host's signature over a conversation's chain head, as stored and exported."""

    conversation_id: str
    """The conversation whose chain it signs."""
    seq: int
    """The seq of the newest item it covers."""
    hash: bytes
    """The chain head at `seq` (32 bytes)."""
    host_id: str
    """The signing host's id."""
    public_key: bytes
    """The host's raw Ed25519 public key (32 bytes); its host id must be `host_id`."""
    signature: bytes
    """Ed25519 over `head_message(host_id, conversation_id, seq, hash)` (64 bytes)."""
    signed_at: datetime
    """When the host signed (not signed itself: for people reading the audit)."""

    def message(self) -> bytes:
        """The signed bytes."""
        return head_message(self.host_id, self.conversation_id, self.seq, self.hash)

    def valid(self) -> bool:
        """True if the signature is good and the public key is the host id's. Never raises."""
        if host_id_of(self.public_key) != self.host_id:
            return False
        try:
            key = Ed25519PublicKey.from_public_bytes(self.public_key)
            key.verify(self.signature, self.message())
        except (InvalidSignature, ValueError, TypeError):
            return False
        return True

    def to_wire(self) -> dict[str, Any]:
        """The NDJSON record: bytes as base64url without padding (`hash` in hex)."""
        return {
            "kind": SIGNATURE_KIND,
            "conversation_id": self.conversation_id,
            "seq": self.seq,
            "hash": self.hash.hex(),
            "host_id": self.host_id,
            "public_key": _b64(self.public_key),
            "signature": _b64(self.signature),
            "signed_at": format_time(self.signed_at),
        }

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> SignedHead:
        """Parse a record made by `to_wire()`; `ValueError` names the first wrong field."""
        if not isinstance(wire, Mapping):
            raise ValueError("a signature record must be a map")
        if wire.keys() != _SIGNATURE_KEYS:
            raise ValueError(
                f"a signature record has exactly the fields {', '.join(sorted(_SIGNATURE_KEYS))}"
            )
        if wire["kind"] != SIGNATURE_KIND:
            raise ValueError(f"a signature record's kind is {SIGNATURE_KIND!r}")
        cid, seq = wire["conversation_id"], wire["seq"]
        if not isinstance(cid, str) or not cid:
            raise ValueError("signature conversation_id must be a non-empty string")
        if type(seq) is not int or not 0 <= seq <= _MAX_SEQ:
            raise ValueError("signature seq must be an integer >= 0")
        host_id, signed_at = wire["host_id"], wire["signed_at"]
        if not isinstance(host_id, str) or len(host_id) != _HOST_ID_LENGTH:
            raise ValueError("signature host_id must be a host id")
        if not isinstance(signed_at, str):
            raise ValueError("signature signed_at must be an ISO 8601 string")
        return cls(
            conversation_id=cid,
            seq=seq,
            hash=_hex(wire["hash"], HASH_SIZE, "hash"),
            host_id=host_id,
            public_key=_unb64(wire["public_key"], _PUBLIC_KEY_SIZE, "public_key"),
            signature=_unb64(wire["signature"], _SIGNATURE_SIZE, "signature"),
            signed_at=parse_time(signed_at),
        )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(value: object, size: int, field: str) -> bytes:
    if not isinstance(value, str) or not value.isascii():
        raise ValueError(f"signature {field} must be base64url text")
    try:
        data = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except ValueError:
        raise ValueError(f"signature {field} is not base64url") from None
    if len(data) != size:
        raise ValueError(f"signature {field} must be {size} bytes")
    return data


def _hex(value: object, size: int, field: str) -> bytes:
    if not isinstance(value, str) or len(value) != 2 * size or not value.isascii():
        raise ValueError(f"signature {field} must be {2 * size} hex digits")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise ValueError(f"signature {field} must be {2 * size} hex digits") from None
