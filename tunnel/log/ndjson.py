"""Export and import conversations as NDJSON: one `Item.to_wire()` JSON object per line, with
the audit chain's `prev` and `hash` (hex), and the host's signed chain heads as records of their
own (`{"kind": "head_signature", ...}`), each after the item it signs (docs/log.md, "NDJSON
export and import").

Import is all or nothing. The whole file is checked first (every line parses, each conversation's
seqs run on without a gap, and continue exactly where the database stops); only then is it
written, in one transaction that checks the same again, so nothing is half-imported even if the
file or the database changed in between. A line nested deeper than `MAX_LINE_DEPTH` is refused
before it is parsed, so no file can exhaust the parser's stack.

Export writes an item that cannot be read as its placeholder (`CorruptItem`), so the file keeps
every seq and imports again. Import keeps the signatures; an item's `prev` and `hash` are not
stored, they follow from the items (`tunnel.log.chain`), and a line without them (a file exported
before the chain existed) imports as well.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any, BinaryIO, Final, Protocol, runtime_checkable

import anyio

from tunnel.log.chain import HASH_SIZE, SIGNATURE_KIND, Chain, SignedHead
from tunnel.log.errors import LogError
from tunnel.log.item import MAX_DEPTH, CorruptItem, Item
from tunnel.log.store import Store

__all__ = [
    "MAX_LINE_DEPTH",
    "ExportSummary",
    "ImportProblem",
    "ImportRejectedError",
    "ImportSummary",
    "Record",
    "SignatureStore",
    "check_import",
    "export_conversation",
    "import_ndjson",
    "item_line",
    "parse_record",
    "read_items",
    "read_signatures",
]

MAX_PROBLEMS = 20
"""An import check stops listing problems after this many."""

MAX_LINE_DEPTH: Final = MAX_DEPTH + 1
"""How deeply one line's JSON may nest: the item map, then its `data` as deep as items allow.
A deeper line is refused before it is parsed (the parser would recurse once per level)."""

# A JSON string: what the depth count skips, since brackets inside strings do not nest.
_JSON_STRING: Final = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET: Final = re.compile(rb"[^\[\]{}]+")


@runtime_checkable
class SignatureStore(Protocol):
    """A store that keeps the host's signed chain heads (`SQLiteStore`)."""

    async def add_signatures(self, signatures: list[SignedHead]) -> None: ...

    async def signatures(self, conversation_id: str) -> list[SignedHead]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """One item line of an export, with the chain fields it carried."""

    item: Item
    """The item."""
    chained: bool
    """True if the line had `prev` and `hash` (an export made since the chain exists)."""
    prev: bytes | None = None
    """The line's `prev`: the previous item's hash as the exporter had it (None at seq 0)."""
    hash: bytes | None = None
    """The line's `hash`: this item's hash as the exporter had it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportProblem:
    """One reason a file cannot be imported."""

    line: int | None
    """1-based line number in the file, None when the problem is not one line's."""
    message: str
    """What is wrong, naming the item id when the line had one."""

    def __str__(self) -> str:
        return self.message if self.line is None else f"line {self.line}: {self.message}"


class ImportRejectedError(LogError, ValueError):
    """The file cannot be imported; nothing was written."""

    def __init__(self, problems: list[ImportProblem]) -> None:
        self.problems = problems
        """The problems found, in file order (at most `MAX_PROBLEMS`)."""
        super().__init__("; ".join(str(p) for p in problems))


@dataclass(slots=True, kw_only=True)
class _Run:
    """The items of one conversation seen so far in the file."""

    first_seq: int
    first_line: int
    last_seq: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportSummary:
    """What an import holds (after `check_import`) or wrote (after `import_ndjson`)."""

    items: int
    """Item lines in the file."""
    conversations: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per conversation, the first and last seq in the file."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExportSummary:
    """What `export_conversation` wrote."""

    items: int
    """Lines written, one per item."""
    corrupt: int
    """Of those, placeholders for items that could not be read (type `corrupt`)."""
    signatures: int = 0
    """Signature records written."""


def item_line(item: Item, *, prev: bytes | None = None, hash: bytes | None = None) -> bytes:
    """One NDJSON line (UTF-8, newline-terminated) for `item`, with the chain's `prev` and
    `hash` when `hash` is given."""
    wire: dict[str, Any] = item.to_wire()
    if hash is not None:
        wire["prev"] = None if prev is None else prev.hex()
        wire["hash"] = hash.hex()
    return _line(wire)


def _line(wire: dict[str, Any]) -> bytes:
    return json.dumps(wire, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


async def export_conversation(
    store: Store, conversation_id: str, out: BinaryIO, *, page_size: int = 1000
) -> ExportSummary:
    """Write every item of the conversation to `out`, oldest first, an unreadable one as its
    placeholder, each with its chain fields and followed by the signatures of its seq; returns
    how many of each.

    The chain is computed from the items as read: an export of a conversation whose first items
    are missing has none (the lines carry no `prev` and `hash`).
    """
    signed: dict[int, list[SignedHead]] = {}
    if isinstance(store, SignatureStore):
        for signature in await store.signatures(conversation_id):
            signed.setdefault(signature.seq, []).append(signature)
    count = corrupt = written_signatures = 0
    chain: Chain | None = Chain(conversation_id)
    after = -1
    while page := await store.query(conversation_id, after=after, limit=page_size):
        lines: list[bytes] = []
        for item in page:
            if chain is not None and item.seq != chain.seq + 1:
                chain = None  # a missing item: no chain from here on
            if chain is None:
                lines.append(item_line(item))
            else:
                prev = chain.head
                lines.append(item_line(item, prev=prev, hash=chain.add(item)))
            for signature in signed.pop(item.seq, ()):
                lines.append(_line(signature.to_wire()))
                written_signatures += 1
        await anyio.to_thread.run_sync(out.write, b"".join(lines))
        count += len(page)
        corrupt += sum(isinstance(item, CorruptItem) for item in page)
        after = page[-1].seq
    # Signatures of seqs the log does not hold (it lost them): kept, so verify can say so.
    rest = [_line(s.to_wire()) for seq in sorted(signed) for s in signed[seq]]
    written_signatures += len(rest)
    await anyio.to_thread.run_sync(out.write, b"".join(rest))
    await anyio.to_thread.run_sync(out.flush)
    return ExportSummary(items=count, corrupt=corrupt, signatures=written_signatures)


def read_items(path: Path) -> Iterator[tuple[int, Item]]:
    """(line number, item) for every item line (signatures are skipped); `ValueError` naming the
    first bad line."""
    with path.open("rb") as file:
        for number, raw in enumerate(file, start=1):
            if not raw.strip():
                continue
            try:
                record = parse_record(raw)
            except ValueError as exc:
                raise ValueError(f"line {number}: {exc}") from None
            if isinstance(record, Record):
                yield number, record.item


def read_signatures(path: Path) -> list[SignedHead]:
    """The signature records of a file `check_import` accepted."""
    with path.open("rb") as file:
        return [
            record
            for raw in file
            if raw.strip() and isinstance(record := parse_record(raw), SignedHead)
        ]


def parse_record(raw: bytes) -> Record | SignedHead:
    """One line of an export: an item with its chain fields, or a signature record.

    Raises `ValueError` saying what is wrong (and the item id when the line had one); nothing
    else, whatever the bytes.
    """
    wire = _parse_json(raw)
    if isinstance(wire, dict) and "kind" in wire:
        if wire["kind"] != SIGNATURE_KIND:
            raise ValueError(f"unknown record kind {wire['kind']!r:.60}")
        return SignedHead.from_wire(wire)
    chained = isinstance(wire, dict) and ("prev" in wire or "hash" in wire)
    prev = digest = None
    if chained:
        assert isinstance(wire, dict)
        prev = _chain_field(wire, "prev", optional=True)
        digest = _chain_field(wire, "hash", optional=False)
    item = _parse_item(wire)
    if chained and (prev is None) != (item.seq == 0):
        raise ValueError(f"item {item.id}: prev must be null at seq 0 and only there")
    return Record(item=item, chained=chained, prev=prev, hash=digest)


def _chain_field(wire: dict[str, Any], name: str, *, optional: bool) -> bytes | None:
    value = wire.pop(name, None)
    if value is None and optional:
        return None
    hint = wire.get("id")
    where = f"item {hint}: " if isinstance(hint, str) else ""
    if not isinstance(value, str) or len(value) != 2 * HASH_SIZE or not value.isascii():
        raise ValueError(f"{where}{name} must be {2 * HASH_SIZE} hex digits")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise ValueError(f"{where}{name} must be {2 * HASH_SIZE} hex digits") from None


def _parse_json(raw: bytes) -> Any:
    if _too_deep(raw):
        raise ValueError(f"nested deeper than {MAX_LINE_DEPTH} levels")
    try:
        wire = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    except RecursionError:
        # Not reachable after the depth check; kept so no input can crash an import.
        raise ValueError(f"nested deeper than {MAX_LINE_DEPTH} levels") from None
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    return wire


def _parse_item(wire: Any) -> Item:
    try:
        return Item.from_wire(wire)
    except ValueError as exc:
        hint = wire.get("id") if isinstance(wire, dict) else None
        where = f"item {hint}: " if isinstance(hint, str) else ""
        raise ValueError(f"{where}{exc}") from None


def _too_deep(raw: bytes) -> bool:
    """True if the JSON in `raw` nests deeper than `MAX_LINE_DEPTH` (brackets in strings aside)."""
    # Fast path: a line cannot nest deeper than it has opening brackets.
    if raw.count(b"[") + raw.count(b"{") <= MAX_LINE_DEPTH:
        return False
    brackets = _NOT_BRACKET.sub(b"", _JSON_STRING.sub(b"", raw))
    depths = accumulate(1 if b in b"[{" else -1 for b in brackets)
    return any(depth > MAX_LINE_DEPTH for depth in depths)


def _scan(path: Path) -> tuple[ImportSummary, dict[str, _Run], list[ImportProblem]]:
    """Read the whole file: parse every line and check each conversation's seqs run on."""
    problems: list[ImportProblem] = []
    runs: dict[str, _Run] = {}
    count = 0
    with path.open("rb") as file:
        for number, raw in enumerate(file, start=1):
            if len(problems) >= MAX_PROBLEMS:
                break
            if not raw.strip():
                continue
            try:
                record = parse_record(raw)
            except ValueError as exc:
                problems.append(ImportProblem(line=number, message=str(exc)))
                continue
            if not isinstance(record, Record):
                continue  # a signature: kept as it is, `tunnel log verify` judges it
            item = record.item
            count += 1
            run = runs.get(item.conversation_id)
            if run is None:
                runs[item.conversation_id] = _Run(
                    first_seq=item.seq, first_line=number, last_seq=item.seq
                )
                continue
            if item.seq != run.last_seq + 1:
                what = "repeats or goes back" if item.seq <= run.last_seq else "leaves a gap"
                problems.append(
                    ImportProblem(
                        line=number,
                        message=f"item {item.id} {what}: after seq {run.last_seq} of "
                        f"{item.conversation_id} the file must continue at {run.last_seq + 1}",
                    )
                )
            run.last_seq = max(run.last_seq, item.seq)
    summary = ImportSummary(
        items=count,
        conversations={cid: (run.first_seq, run.last_seq) for cid, run in runs.items()},
    )
    return summary, runs, problems


async def check_import(store: Store, path: Path) -> ImportSummary:
    """Check that `path` can be imported into `store` as it is now.

    Raises `ImportRejectedError` listing the problems (`OSError` if the file cannot be read).
    """
    summary, runs, problems = await anyio.to_thread.run_sync(_scan, path)
    for cid, run in runs.items():
        info = await store.get_conversation(cid)
        head = -1 if info is None else info.last_seq
        if run.first_seq == head + 1:
            continue
        item_id = f"{cid}:{run.first_seq}"
        if run.first_seq <= head:
            message = (
                f"item {item_id} collides with an existing item: the database already holds "
                f"{cid} up to seq {head}"
            )
        else:
            message = (
                f"item {item_id} leaves a gap: the database holds {cid} up to seq {head}, "
                f"so the file must start at seq {head + 1}"
            )
        problems.append(ImportProblem(line=run.first_line, message=message))
    if problems:
        problems.sort(key=lambda p: p.line or 0)
        raise ImportRejectedError(problems[:MAX_PROBLEMS])
    return summary


async def import_ndjson(store: Store, path: Path) -> ImportSummary:
    """Check `path` (see `check_import`), then store every item in one transaction."""
    summary = await check_import(store, path)
    try:
        signatures = await anyio.to_thread.run_sync(read_signatures, path)
    except ValueError as exc:
        raise ImportRejectedError([ImportProblem(line=None, message=str(exc))]) from exc
    if signatures and not isinstance(store, SignatureStore):
        message = "the file holds signatures and this log keeps none"
        raise ImportRejectedError([ImportProblem(line=None, message=message)])
    try:
        written = await store.extend(item for _, item in read_items(path))
    except ValueError as exc:
        # The database (SeqConflictError) or the file changed since the check: the
        # transaction was rolled back, nothing was written.
        raise ImportRejectedError([ImportProblem(line=None, message=str(exc))]) from exc
    if signatures and isinstance(store, SignatureStore):
        await store.add_signatures(signatures)
    if written == summary.items:
        return summary
    # The file changed between the check and the write, consistently enough to be stored.
    return ImportSummary(items=written, conversations=summary.conversations)
