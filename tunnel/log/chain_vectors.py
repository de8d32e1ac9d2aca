"""The reference vectors of tests/vectors/chain.json: items chained from seq 0, each with its
canonical bytes and hash, and a signed head, computed from fixed inputs.

The page (`chain.js`) must compute the same bytes, hashes and signed message (docs/log.md,
"Canonical bytes"). Print them with `python -m tunnel.log.chain_vectors`.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tunnel.log.chain import Chain, SignedHead, canonical_bytes, head_message, host_id_of
from tunnel.log.item import Item

__all__ = ["SEED", "reference_vectors"]

SEED = bytes(range(0x20, 0x40))
"""The signing host's Ed25519 seed (the host seed of tests/vectors/crypto.json)."""

_DATA: list[tuple[str, str | None, dict[str, Any]]] = [
    ("message", "completed", {"role": "user", "text": "hello"}),
    # Keys JavaScript would reorder (integer-like) and ones sorted by UTF-16 code units.
    ("message", None, {"10": 1, "2": 2, "b": {"z": [], "a": {}}, "\uffff": 0, "\U0001f600": 1}),
    # Control characters, quotes, non-ASCII text.
    ("tool_result", "completed", {"output": 'a"b\\c\n\t\x00\x1f\x7f é 漢 \U0001f600', "ok": True}),
    # Numbers: integral doubles, exponents both ways, the edge of 2**53, negatives, null.
    (
        "usage",
        None,
        {
            "n": [0, -1, 1.0, 1.5, -0.0, 1e21, 1e20, 1.5e-7, 0.000001, 123.456, 2**53 - 1],
            "x": None,
            "f": False,
        },
    ),
    ("permission_request", "action_required", {"title": "rm -rf build", "options": []}),
]


def reference_items() -> list[Item]:
    """The vectors' items, seq 0 onward, in conversation `main`."""
    return [
        Item(
            conversation_id="main",
            seq=seq,
            type=type_,
            status=status,
            response_id="resp_1" if seq == 2 else None,
            created_at=datetime(2026, 1, 2, 3, 4, 5, seq, tzinfo=UTC),
            created_by="alice" if seq % 2 == 0 else "agent",
            data=data,
        )
        for seq, (type_, status, data) in enumerate(_DATA)
    ]


def reference_vectors() -> dict[str, Any]:
    """Every vector, as chain.json holds them."""
    chain = Chain("main")
    items: list[dict[str, Any]] = []
    for item in reference_items():
        prev = chain.head
        head = chain.add(item)
        items.append(
            {
                "wire": item.to_wire(),
                "prev": None if prev is None else prev.hex(),
                "canonical": canonical_bytes(item, prev).decode("utf-8"),
                "hash": head.hex(),
            }
        )
    key = Ed25519PrivateKey.from_private_bytes(SEED)
    public = key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    host_id = host_id_of(public)
    assert chain.head is not None
    message = head_message(host_id, "main", chain.seq, chain.head)
    signed = SignedHead(
        conversation_id="main",
        seq=chain.seq,
        hash=chain.head,
        host_id=host_id,
        public_key=public,
        signature=key.sign(message),
        signed_at=datetime(2026, 1, 2, 3, 4, 6, tzinfo=UTC),
    )
    return {
        "items": items,
        "head": {"message": message.hex(), "record": signed.to_wire()},
    }


def _main(argv: list[str]) -> int:
    if argv:
        print("usage: python -m tunnel.log.chain_vectors", file=sys.stderr)
        return 2
    print(json.dumps(reference_vectors(), ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
