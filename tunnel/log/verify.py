"""What `tunnel log verify` finds in an export: the chain checked item by item, and the host's
signatures over its heads (docs/log.md, "Verify"). Reads bytes only: no store, no network.

The first item that breaks the chain is named and the check of that conversation stops there (every
later hash depends on it). Signatures are checked against the chain up to that point: a
signature over a head the chain does not reach (a truncated file) or with another hash (a changed
item) is a problem; items after the newest good signature are reported as unsigned, which is
not a problem by itself: a log written before the chain existed, or not signed yet, reads so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from tunnel.log.chain import SignedHead, item_hash
from tunnel.log.ndjson import Record, parse_record

__all__ = ["MAX_PROBLEMS", "ConversationReport", "VerifyReport", "verify_lines"]

MAX_PROBLEMS: Final = 20
"""Problems listed at most; the count goes on."""


@dataclass(slots=True, kw_only=True)
class ConversationReport:
    """What verify found for one conversation of the file."""

    conversation_id: str
    first_seq: int = -1
    """The first seq in the file (0 for a whole export)."""
    last_seq: int = -1
    """The last seq in the file."""
    verified_seq: int = -1
    """The chain holds from `first_seq` up to this seq (-1: not even the first item)."""
    signed_seq: int = -1
    """The newest seq a good signature covers (-1: none)."""
    host_ids: set[str] = field(default_factory=set)
    """The hosts whose good signatures the file holds."""
    broken: bool = False
    """True once an item broke the chain (the check of later items stopped)."""
    chain_head: dict[int, bytes] = field(default_factory=dict)
    """The hash the chain computes at each seq up to `verified_seq`."""

    def summary(self) -> str:
        """One line: how far the chain holds and how far it is signed."""
        cid = self.conversation_id
        if self.last_seq < 0:
            return f"{cid}: no items"
        span = f"items {self.first_seq}..{self.last_seq}"
        if self.broken:
            held = (
                f"chain holds up to seq {self.verified_seq}"
                if self.verified_seq >= self.first_seq
                else "chain broken at its first item"
            )
        else:
            held = "chain intact"
        if self.signed_seq < 0:
            signed = f"unsigned up to seq {self.verified_seq}" if self.verified_seq >= 0 else ""
        else:
            hosts = ", ".join(sorted(self.host_ids))
            signed = f"signed by host {hosts} up to seq {self.signed_seq}"
            if self.signed_seq < self.verified_seq:
                signed += f"; unsigned after it (seq {self.signed_seq + 1}..{self.verified_seq})"
        return f"{cid}: {span}, {held}" + (f"; {signed}" if signed else "")


@dataclass(slots=True, kw_only=True)
class VerifyReport:
    """The outcome of `verify_lines`."""

    conversations: dict[str, ConversationReport] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    """What breaks the chain or a signature, in file order (at most `MAX_PROBLEMS`)."""
    problem_count: int = 0

    @property
    def ok(self) -> bool:
        """True if nothing is broken (unsigned items are not a problem)."""
        return self.problem_count == 0 and bool(self.conversations)

    @property
    def all_signed(self) -> bool:
        """True if a good signature covers every item of every conversation."""
        return all(c.signed_seq == c.last_seq for c in self.conversations.values())

    def add(self, problem: str) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(problem)


@dataclass(slots=True)
class _Chain:
    report: ConversationReport
    head: bytes | None = None
    pending: list[tuple[int, SignedHead]] = field(default_factory=list)


def verify_lines(lines: Iterable[bytes], *, host_id: str | None = None) -> VerifyReport:
    """Check an export's lines (`tunnel log export`); `host_id`: the host that must have signed.

    Never raises for any bytes: what is wrong is in the report.
    """
    report = VerifyReport()
    chains: dict[str, _Chain] = {}
    last_item: str | None = None
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = parse_record(raw)
        except ValueError as exc:
            where = _next_item(chains, last_item)
            report.add(f"line {number}: {where}cannot be read: {exc}")
            if last_item is not None:
                _break(chains[last_item])
            continue
        if isinstance(record, SignedHead):
            chain = chains.get(record.conversation_id)
            if chain is None:
                chain = chains[record.conversation_id] = _Chain(
                    ConversationReport(conversation_id=record.conversation_id)
                )
            chain.pending.append((number, record))
            continue
        last_item = record.item.conversation_id
        chain = chains.get(last_item)
        if chain is None:
            chain = chains[last_item] = _Chain(ConversationReport(conversation_id=last_item))
        _add_item(report, chain, number, record)
    for chain in chains.values():
        for number, signed in chain.pending:
            _check_signature(report, chain.report, number, signed, host_id)
        report.conversations[chain.report.conversation_id] = chain.report
    if not chains:
        report.add("the file holds no item")
    return report


def _next_item(chains: dict[str, _Chain], last: str | None) -> str:
    if last is None:
        return ""
    return f"the item after {last}:{chains[last].report.last_seq} "


def _break(chain: _Chain) -> None:
    chain.report.broken = True


def _add_item(report: VerifyReport, chain: _Chain, number: int, record: Record) -> None:
    item, conv = record.item, chain.report
    expected = conv.last_seq + 1 if conv.last_seq >= 0 else 0
    if conv.last_seq >= 0 and item.seq != expected:
        what = "repeats or goes back" if item.seq <= conv.last_seq else "leaves a gap"
        if not conv.broken:
            report.add(
                f"line {number}: item {item.id} {what}: seq {expected} must come next "
                f"(an item was moved or removed)"
            )
        _break(chain)
        conv.last_seq = max(conv.last_seq, item.seq)
        return
    if conv.first_seq < 0:
        conv.first_seq = item.seq
    conv.last_seq = item.seq
    if conv.broken:
        return
    if item.seq != 0 and conv.first_seq == item.seq:
        # The file starts mid-conversation: only an exporter's prev can anchor the chain.
        chain.head = record.prev
    computed = item_hash(item, chain.head)
    if record.chained and record.prev != chain.head:
        report.add(
            f"line {number}: item {item.id}: its prev is not the hash of item "
            f"{item.conversation_id}:{item.seq - 1} (that item or this one's prev was changed)"
        )
        _break(chain)
        return
    if record.chained and record.hash != computed:
        report.add(
            f"line {number}: item {item.id}: its content does not match its hash "
            f"(the item was changed)"
        )
        _break(chain)
        return
    chain.head = computed
    conv.verified_seq = item.seq
    conv.chain_head[item.seq] = computed


def _check_signature(
    report: VerifyReport,
    conv: ConversationReport,
    number: int,
    signed: SignedHead,
    host_id: str | None,
) -> None:
    where = f"line {number}: the signature of {signed.conversation_id}:{signed.seq}"
    if not signed.valid():
        report.add(f"{where} is not valid (not made by host {signed.host_id}'s key)")
        return
    if host_id is not None and signed.host_id != host_id:
        report.add(f"{where} is by host {signed.host_id}, not {host_id}")
        return
    if signed.seq > conv.last_seq:
        report.add(
            f"{where} covers items the file does not hold (it ends at seq {conv.last_seq}: "
            f"truncated)"
        )
        return
    head = conv.chain_head.get(signed.seq)
    if head is None:
        return  # past the break, already reported
    if head != signed.hash:
        report.add(f"{where} does not match the chain: an item up to seq {signed.seq} was changed")
        return
    conv.host_ids.add(signed.host_id)
    conv.signed_seq = max(conv.signed_seq, signed.seq)
