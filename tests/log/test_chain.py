"""The audit chain's pure parts: canonical JSON, the chain over items, the signed head."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tunnel.e2e.identity import HostIdentity, derive_host_id
from tunnel.host.audit import sign_head
from tunnel.log.chain import (
    HEAD_SIGN_LABEL,
    Chain,
    SignedHead,
    canonical_bytes,
    canonical_json,
    head_message,
    host_id_of,
    item_hash,
)
from tunnel.log.chain_vectors import reference_vectors
from tunnel.log.item import Item

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "chain.json"

NOW = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def item(seq: int, text: str = "hi", cid: str = "main") -> Item:
    return Item(
        conversation_id=cid,
        seq=seq,
        type="message",
        status="completed",
        response_id=None,
        created_at=NOW,
        created_by="alice",
        data={"text": text, "role": "user"},
    )


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1"),
        (-0.0, "0"),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (1.5e-7, "1.5e-7"),
        (0.000001, "0.000001"),
        (123.456, "123.456"),
        (2**64 - 1, "18446744073709551615"),
        ({"b": 1, "a": [True, None, "é\n"]}, '{"a":[true,null,"é\\n"],"b":1}'),
        # Sorted by UTF-16 code units: U+FFFF sorts after U+10000's surrogates (D800..).
        ({"\uffff": 1, "\U00010000": 2}, '{"\U00010000":2,"\uffff":1}'),
    ],
)
def test_canonical_json_writes_what_json_stringify_writes(value: object, text: str) -> None:
    assert canonical_json(value) == text


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_canonical_number_reads_back_as_the_same_double(value: float) -> None:
    assert float(json.loads(canonical_json(value))) == value


def test_canonical_bytes_hold_every_stored_field_and_prev() -> None:
    text = canonical_bytes(item(1), b"\x01" * 32).decode()
    assert text == (
        '{"conversation_id":"main","created_at":"2026-01-02T03:04:05.678901Z",'
        '"created_by":"alice","data":{"role":"user","text":"hi"},"prev":"' + "01" * 32 + '",'
        '"response_id":null,"seq":1,"status":"completed","type":"message"}'
    )


def test_the_chain_head_commits_to_every_earlier_item() -> None:
    a, b = Chain("main"), Chain("main")
    for seq in range(3):
        a.add(item(seq))
        b.add(item(seq, "changed" if seq == 0 else "hi"))
    assert a.seq == b.seq == 2
    assert a.head != b.head
    assert a.head == item_hash(item(2), item_hash(item(1), item_hash(item(0), None)))


def test_the_chain_refuses_an_item_out_of_order() -> None:
    chain = Chain("main")
    chain.add(item(0))
    with pytest.raises(ValueError, match="continues at seq 1"):
        chain.add(item(2))
    with pytest.raises(ValueError, match="continues at seq 1"):
        chain.add(item(1, cid="other"))


def test_a_signed_head_verifies_and_round_trips_its_record() -> None:
    identity = HostIdentity.from_seed(bytes(range(32)))
    signed = sign_head(identity, "main", 7, b"\x02" * 32, now=NOW)
    assert signed.valid()
    again = SignedHead.from_wire(json.loads(json.dumps(signed.to_wire())))
    assert again == signed
    assert not SignedHead.from_wire({**signed.to_wire(), "seq": 8}).valid()
    other = HostIdentity.from_seed(bytes(32))
    assert not SignedHead.from_wire({**signed.to_wire(), "host_id": other.host_id}).valid()


def test_the_signed_message_starts_with_its_own_label_then_the_host_id() -> None:
    identity = HostIdentity.from_seed(bytes(range(32)))
    message = head_message(identity.host_id, "main", 1, b"\x00" * 32)
    assert len(HEAD_SIGN_LABEL) == 32
    assert message.startswith(HEAD_SIGN_LABEL + identity.host_id.encode())
    assert host_id_of(identity.public_key) == derive_host_id(identity.public_key)


def test_the_checked_in_vectors_are_what_the_code_computes() -> None:
    """tests/vectors/chain.json is `python -m tunnel.log.chain_vectors`; the page checks it."""
    assert json.loads(VECTORS.read_text(encoding="utf-8")) == reference_vectors()
    head = SignedHead.from_wire(reference_vectors()["head"]["record"])
    assert head.valid()
