"""The page's chain.js computes the bytes of tunnel/log/chain.py (tests/vectors/chain.json): each
item's canonical bytes and hash, the signed head's message, and its signature checks with
WebCrypto Ed25519; `ChainCheck` verifies the items a page holds from an anchor, and says so when
one was changed, the signature is not the host's, or an item was cut for size."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page

from .conftest import PageLog
from .test_web_crypto import open_blank

pytestmark = [pytest.mark.browser, pytest.mark.timeout(90)]

VECTORS = Path(__file__).resolve().parents[2] / "vectors" / "chain.json"

COMPUTE = """
async (v) => {
  const chain = await import("/static/chain.js");
  const c = await import("/static/crypto.js");
  const decoder = new TextDecoder();
  const items = [];
  for (const entry of v.items) {
    items.push({
      canonical: decoder.decode(chain.canonicalBytes(entry.wire, entry.prev)),
      hash: await chain.itemHash(entry.wire, entry.prev),
    });
  }
  const record = v.head.record;
  const hash = c.fromHex(record.hash);
  const message = c.toHex(chain.headMessage(record.host_id, record.conversation_id, record.seq,
    hash));
  const good = await chain.verifyHead(record, record.host_id);
  const otherSeq = await chain.verifyHead({ ...record, seq: record.seq - 1 }, record.host_id);
  const otherHost = await chain.verifyHead(record, "a".repeat(26));
  const garbage = await chain.verifyHead({ ...record, signature: "!!" }, record.host_id);
  return { items, message, good, otherSeq, otherHost, garbage };
}
"""

CHECK = """
async ({ v, change, anchor, cut, head, wide }) => {
  const chain = await import("/static/chain.js");
  const record = { ...v.head.record, ...head };
  const check = new chain.ChainCheck(v.head.record.host_id);
  const first = anchor ? 2 : 0;
  v.items.forEach((entry, seq) => {
    if (seq < first) return;
    const wire = structuredClone(entry.wire);
    if (seq === change) wire.data.extra = 1;
    if (seq === cut) wire.data = { truncated: true, note: "item too large to send" };
    if (seq === wide) wire.data.big = 18446744073709551615;
    check.item(wire);
  });
  const data = { ...record };
  if (anchor) data.anchor = { seq: 1, hash: v.items[1].hash };
  check.setHead(data);
  return await check.check();
}
"""


def load_vectors() -> dict[str, Any]:
    vectors: dict[str, Any] = json.loads(VECTORS.read_text(encoding="utf-8"))
    return vectors


def test_the_page_computes_the_chain_vectors(
    page: Page, static_server: str, page_log: PageLog
) -> None:
    vectors = load_vectors()
    open_blank(page, static_server)
    got = page.evaluate(COMPUTE, vectors)
    for index, (mine, expected) in enumerate(zip(got["items"], vectors["items"], strict=True)):
        assert mine["canonical"] == expected["canonical"], index
        assert mine["hash"] == expected["hash"], index
    assert got["message"] == vectors["head"]["message"]
    assert got["good"] is True
    assert got["otherSeq"] is False
    assert got["otherHost"] is False
    assert got["garbage"] is False
    assert not page_log.errors


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ({}, {"state": "verified", "from": 0, "to": 4}),
        ({"anchor": True}, {"state": "verified", "from": 2, "to": 4}),
        ({"change": 3}, {"state": "failed"}),
        ({"anchor": True, "change": 2}, {"state": "failed"}),
        ({"head": {"seq": 3}}, {"state": "failed"}),
        ({"cut": 1}, {"state": "unchecked"}),
        # As msgpack gives the page a 64-bit integer: rounded, so not checked, not failed.
        ({"wide": 2}, {"state": "unchecked"}),
    ],
)
def test_chain_check_verifies_the_items_held_up_to_the_signed_head(
    page: Page, static_server: str, case: dict[str, Any], expected: dict[str, Any]
) -> None:
    vectors = load_vectors()
    open_blank(page, static_server)
    args = {"v": vectors, "change": None, "anchor": False, "cut": None, "head": {}, "wide": None}
    args.update(case)
    result = page.evaluate(CHECK, args)
    assert {k: result[k] for k in expected} == expected, result
