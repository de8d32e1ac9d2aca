"""`read_excerpt`: a conversation's items up to a seq, the host's signatures over them, and what
`tunnel log verify` finds in them, read from a store; what `tunnel log export --html` embeds.

The report is verify's own, over the lines an NDJSON export of the same items would hold, so the
transcript and `tunnel log verify` of an export never disagree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tunnel.log.chain import Chain, SignedHead
from tunnel.log.item import Item
from tunnel.log.ndjson import SignatureStore, item_line
from tunnel.log.store import Store
from tunnel.log.verify import VerifyReport, verify_lines

__all__ = ["Excerpt", "read_excerpt"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Excerpt:
    """What one conversation holds up to a seq."""

    conversation_id: str
    """The conversation."""
    upto: int | None
    """The last seq asked for (None: every item)."""
    items: list[Item]
    """Its items, oldest first (an unreadable one as its placeholder, type `corrupt`)."""
    signatures: list[SignedHead]
    """The host's signatures over heads up to `upto`, oldest first."""
    report: VerifyReport
    """What `verify_lines` finds in the items and signatures."""

    @property
    def summary(self) -> str:
        """Verify's line for the conversation (`CONV: no items` when it holds none)."""
        conversation = self.report.conversations.get(self.conversation_id)
        if conversation is None:
            return f"{self.conversation_id}: no items"
        return conversation.summary()


async def read_excerpt(
    store: Store, conversation_id: str, *, upto: int | None = None, page_size: int = 1000
) -> Excerpt:
    """The items of `conversation_id` up to seq `upto` (all when None), its signatures over
    them, and verify's report; the whole excerpt is held in memory."""
    items: list[Item] = []
    after = -1
    while (upto is None or after < upto) and (
        page := await store.query(conversation_id, after=after, limit=page_size)
    ):
        items += [item for item in page if upto is None or item.seq <= upto]
        after = page[-1].seq
    signatures: list[SignedHead] = []
    if isinstance(store, SignatureStore):
        signatures = [
            signature
            for signature in await store.signatures(conversation_id)
            if upto is None or signature.seq <= upto
        ]
        signatures.sort(key=lambda signature: signature.seq)
    return Excerpt(
        conversation_id=conversation_id,
        upto=upto,
        items=items,
        signatures=signatures,
        report=verify_lines(_lines(conversation_id, items, signatures)),
    )


def _lines(conversation_id: str, items: list[Item], signatures: list[SignedHead]) -> list[bytes]:
    """The lines `export_conversation` writes for these items and signatures."""
    lines: list[bytes] = []
    chain: Chain | None = Chain(conversation_id)
    for item in items:
        if chain is not None and item.seq != chain.seq + 1:
            chain = None  # a missing item: no chain from here on
        if chain is None:
            lines.append(item_line(item))
        else:
            prev = chain.head
            lines.append(item_line(item, prev=prev, hash=chain.add(item)))
    lines += [json.dumps(signature.to_wire()).encode() for signature in signatures]
    return lines
