"""Host -> teammate messages (docs/application.md, "Host to teammate"): typed, encoded, decoded.

The host builds them as dataclasses and `encode`s them; a Python teammate `parse`s what arrives
into the same dataclasses. Items and events travel as the log's wire maps (`Item.to_wire()`),
which the receiver reads field by field: the item type set is open.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from tunnel.app.errors import ERROR_CODES, BadRequest, ErrorCode
from tunnel.app.requests import MAX_TERMINAL_SIDE

__all__ = [
    "BroadcastStart",
    "Error",
    "EventMessage",
    "HistoryPage",
    "HostMessage",
    "ItemMessage",
    "Member",
    "PresenceDelta",
    "PresenceMessage",
    "PushState",
    "Ready",
    "ReplayInfo",
    "SandboxInfo",
    "Snapshot",
    "TerminalSize",
    "decode_host_message",
    "encode",
    "pack",
    "parse",
    "parse_map",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxInfo:
    """Where the agent's process may reach, so a teammate knows the boundary before driving."""

    enabled: bool
    """Whether the agent runs in the host's sandbox (`tunnel host --sandbox`); if not, it can
    do whatever the host's user can."""
    writable: Sequence[str] = ()
    """Sandboxed: the host paths where the agent's writes are kept (the workspace first)."""
    network: bool = True
    """Sandboxed: whether the agent has a network (False: `--sandbox-net none`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayInfo:
    """What a replay link's channel shows (docs/application.md, `ready.replay`): one
    conversation's items 0..`upto`, then nothing more; the teammate shows a replay, not a live
    session, and sends no request but subscribe, history and read_file."""

    conversation: str
    upto: int
    """The last seq the channel sends (-1: none)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TerminalSize:
    """A terminal agent's terminal: what its program draws for, so a teammate shows its screen
    at that size (docs/application.md, "The terminal's size")."""

    cols: int
    rows: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Ready:
    """The host's first message on a channel, once the keys work."""

    conversation_id: str
    role: str
    """The teammate's role: "view" or "drive"."""
    name: str
    """The teammate's name: the invited name for a personal link, else the display name it
    sent, as the host bound it into the keys."""
    agent_name: str
    agent_kind: str
    """"chat" or "terminal": whether to show a conversation or a terminal."""
    sandbox: SandboxInfo | None = None
    """None only from a host too old to say."""
    terminal: TerminalSize | None = None
    """A terminal agent's size now; None for a chat agent, or from a host too old to say."""
    verified: bool = False
    """Whether `name` is the host's (a personal link's invited name), not the one sent."""
    push_key: str | None = None
    """The host's VAPID public key (base64url, 65 bytes decoded): a browser subscribes to Web
    Push with it (docs/application.md, "Notifications"); None when the host sends no pushes."""
    replay: ReplayInfo | None = None
    """For a replay link's channel, what it shows; None for every live channel."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """One page of stored items after the subscriber's `after`; `more=False` ends the snapshot."""

    items: Sequence[Mapping[str, Any]]
    last_seq: int
    more: bool
    reset: bool = False
    """First page only: the log does not reach the subscriber's `after`; start over."""
    first_seq: int | None = None
    """The seq the snapshot starts at (every page says the same); None from a host too old to
    say. After a fresh subscribe, a client holds nothing before it."""
    earlier: bool = False
    """Whether the log holds items before `first_seq`: ask with `history(before=first_seq)`."""
    context: Sequence[Mapping[str, Any]] = ()
    """First page of a fresh join only: items from before `first_seq` whose state still holds
    (the latest `settings` and `commands` session events and `plan`, the open permission
    requests and the tool calls they gate), in seq order. Apply them as a replay from seq 0
    would leave the state; they are not part of the conversation shown, and a `history` page
    that reaches them later brings them as items."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryPage:
    """The answer to a `history` request: stored items before `before`, in seq order."""

    items: Sequence[Mapping[str, Any]]
    before: int
    """The request's cursor, so a client can tell an answer it still wants from a stale one."""
    more: bool
    """Whether the log holds items before the first of `items` (or before `before`, if none)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemMessage:
    """One newly appended item (the live tail), in seq order."""

    item: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class EventMessage:
    """An ephemeral event: never stored, no seq."""

    event: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    """One attached person."""

    name: str
    role: str
    id: int | None = None
    """The member's id, the same in every message of the host's run; None from a host too old
    to send one (its presence messages are all full lists)."""
    verified: bool = False
    """Whether `name` is bound by the host (a personal link's invited name); sent only when
    true: a role link's holder typed their name."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PresenceMessage:
    """Who is attached: the first presence message on a channel (later ones are
    `PresenceDelta`s; a host from before them sends a full list at every change)."""

    members: Sequence[Member]
    """The first members to have attached (the host lists at most 50, `LISTED_MEMBERS`)."""
    count: int
    """Everyone attached, listed or not."""
    you: int | None = None
    """The id of the member that is the receiving channel itself; None if the host did not say."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PresenceDelta:
    """Who came and went since the channel's previous presence message, all changes in one.

    Apply to the list held: add `joined`, remove the ids in `left`. A member who came and went
    in between is in neither.
    """

    joined: Sequence[Member]
    left: Sequence[int]
    count: int
    """Everyone attached now, listed or not."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BroadcastStart:
    """From here on the live tail comes as casts of the host's broadcast (docs/application.md,
    "The broadcast"): its epoch and key, the host's public key, the counter of the next cast, and
    who is attached as of that cast."""

    epoch: bytes
    key: bytes
    public_key: bytes
    counter: int
    members: Sequence[Member]
    count: int
    you: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PushState:
    """The answer to `push_on` and `push_off`: whether the host now pushes to `endpoint`.
    Only the page follows it; a Python teammate skips it as an unknown op."""

    on: bool
    endpoint: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Error:
    """A request was refused; nothing happened."""

    code: ErrorCode
    message: str


HostMessage = (
    Ready
    | Snapshot
    | HistoryPage
    | ItemMessage
    | EventMessage
    | PresenceMessage
    | PresenceDelta
    | BroadcastStart
    | Error
)


def pack(message: Mapping[str, Any]) -> bytes:
    """Encode one application message map."""
    packed: bytes = msgpack.packb(message, use_bin_type=True)
    return packed


def encode(message: HostMessage | PushState) -> bytes:
    """Return the plaintext of `message`."""
    wire: dict[str, Any]
    match message:
        case Ready():
            wire = {
                "op": "ready",
                "conversation_id": message.conversation_id,
                "role": message.role,
                "name": message.name,
                "agent": {"name": message.agent_name, "kind": message.agent_kind},
            }
            if message.sandbox is not None:
                wire["sandbox"] = {
                    "enabled": message.sandbox.enabled,
                    "writable": list(message.sandbox.writable),
                    "network": message.sandbox.network,
                }
            if message.terminal is not None:
                wire["terminal"] = {"cols": message.terminal.cols, "rows": message.terminal.rows}
            if message.verified:
                wire["verified"] = True
            if message.push_key is not None:
                wire["push_key"] = message.push_key
            if message.replay is not None:
                wire["replay"] = {
                    "conversation": message.replay.conversation,
                    "upto": message.replay.upto,
                }
        case Snapshot():
            wire = {
                "op": "snapshot",
                "items": list(message.items),
                "last_seq": message.last_seq,
                "more": message.more,
                "reset": message.reset,
            }
            if message.first_seq is not None:
                wire["first_seq"] = message.first_seq
                wire["earlier"] = message.earlier
            if message.context:
                wire["context"] = list(message.context)
        case HistoryPage():
            wire = {
                "op": "history",
                "items": list(message.items),
                "before": message.before,
                "more": message.more,
            }
        case ItemMessage():
            wire = {"op": "item", "item": message.item}
        case EventMessage():
            wire = {"op": "event", "event": message.event}
        case PresenceMessage():
            wire = {
                "op": "presence",
                "members": [_member(m) for m in message.members],
                "count": message.count,
            }
            if message.you is not None:
                wire["you"] = message.you
        case PresenceDelta():
            wire = {
                "op": "presence",
                "joined": [_member(m) for m in message.joined],
                "left": list(message.left),
                "count": message.count,
            }
        case BroadcastStart():
            return encode_broadcast_start(
                epoch=message.epoch,
                key=message.key,
                public_key=message.public_key,
                counter=message.counter,
                members=pack_members(message.members),
                count=message.count,
                you=message.you,
            )
        case Error():
            wire = {"op": "error", "code": message.code, "message": message.message}
        case PushState():
            wire = {"op": "push", "on": message.on, "endpoint": message.endpoint}
    return pack(wire)


def pack_members(members: Sequence[Member]) -> bytes:
    """The `members` list of a `broadcast` message, packed: a host packs it once and lists it
    for every channel that joins until presence changes, instead of once per join."""
    packed: bytes = msgpack.packb([_member(m) for m in members], use_bin_type=True)
    return packed


def encode_broadcast_start(
    *,
    epoch: bytes,
    key: bytes,
    public_key: bytes,
    counter: int,
    members: bytes,
    count: int,
    you: int,
) -> bytes:
    """The `broadcast` message with its member list packed by `pack_members`: the map packed
    field by field, so the list is copied, not packed again (the same bytes as the map packed
    whole: tests/app/test_host_messages.py)."""
    packer = msgpack.Packer(use_bin_type=True)
    fields: dict[str, object] = {
        "op": "broadcast",
        "epoch": epoch,
        "key": key,
        "public_key": public_key,
        "counter": counter,
    }
    pieces = [packer.pack_map_header(len(fields) + 3)]
    for name, value in fields.items():
        pieces += (packer.pack(name), packer.pack(value))
    pieces += (packer.pack("members"), members)
    for name, value in (("count", count), ("you", you)):
        pieces += (packer.pack(name), packer.pack(value))
    return b"".join(pieces)


def _member(member: Member) -> dict[str, Any]:
    wire: dict[str, Any] = {"name": member.name, "role": member.role}
    if member.id is not None:
        wire["id"] = member.id
    if member.verified:
        wire["verified"] = True
    return wire


def decode_host_message(plaintext: bytes) -> dict[str, Any]:
    """Decode a host message into its map; `BadRequest` if it is not a map with an `op`."""
    try:
        message = msgpack.unpackb(plaintext, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises many types
        raise BadRequest("not a msgpack map") from exc
    if not isinstance(message, dict) or not isinstance(message.get("op"), str):
        raise BadRequest("not an application message")
    return message


def parse(plaintext: bytes) -> HostMessage:
    """Decode a host message into its dataclass; `BadRequest` (only) if it is not one.

    Fields a newer host adds are ignored; an unknown op is a `BadRequest` the caller may skip.
    """
    return parse_map(decode_host_message(plaintext))


def parse_map(message: Mapping[str, Any]) -> HostMessage:
    """`parse` for a message already decoded by `decode_host_message`."""
    op = message["op"]
    if op == "ready":
        agent = _get(message, "agent", dict)
        return Ready(
            conversation_id=_get(message, "conversation_id", str),
            role=_get(message, "role", str),
            name=_get(message, "name", str),
            agent_name=_get(agent, "name", str),
            agent_kind=_get(agent, "kind", str),
            sandbox=_sandbox(message.get("sandbox")),
            terminal=_terminal(message.get("terminal")),
            verified=message.get("verified") is True,
            push_key=_optional(message, "push_key", str),
            replay=_replay(message.get("replay")),
        )
    if op == "snapshot":
        return Snapshot(
            items=[item for item in _get(message, "items", list) if isinstance(item, dict)],
            last_seq=_get(message, "last_seq", int),
            more=_get(message, "more", bool),
            reset=message.get("reset") is True,
            first_seq=_optional(message, "first_seq", int),
            earlier=message.get("earlier") is True,
            context=_context(message.get("context")),
        )
    if op == "history":
        return HistoryPage(
            items=[item for item in _get(message, "items", list) if isinstance(item, dict)],
            before=_get(message, "before", int),
            more=_get(message, "more", bool),
        )
    if op == "item":
        return ItemMessage(item=_get(message, "item", dict))
    if op == "event":
        return EventMessage(event=_get(message, "event", dict))
    if op == "presence":
        return _presence(message)
    if op == "broadcast":
        return BroadcastStart(
            epoch=_get(message, "epoch", bytes),
            key=_get(message, "key", bytes),
            public_key=_get(message, "public_key", bytes),
            counter=_seq(message, "counter"),
            members=_presence_members(message, "members", id_required=True),
            count=_seq(message, "count"),
            you=_seq(message, "you"),
        )
    if op == "error":
        code = _get(message, "code", str)
        if code not in ERROR_CODES:
            raise BadRequest("unknown error code")
        return Error(code=code, message=_get(message, "message", str))
    raise BadRequest("unknown op")


def _replay(value: Any) -> ReplayInfo | None:
    """`ready.replay`: absent, or the conversation and the last seq a replay shows."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest("field 'replay' must be map")
    upto = _get(value, "upto", int)
    if upto < -1:
        raise BadRequest("field 'upto' must be a seq or -1")
    return ReplayInfo(conversation=_get(value, "conversation", str), upto=upto)


def _context(value: Any) -> Sequence[dict[str, Any]]:
    """A snapshot's `context`: absent, or a list of item maps each with an integer seq."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise BadRequest("field 'context' must be list")
    for item in value:
        if not isinstance(item, dict):
            raise BadRequest("field 'context' must be a list of items")
        _seq(item, "seq")
    return value


def _presence(message: Mapping[str, Any]) -> PresenceMessage | PresenceDelta:
    """A full list (`members`, `count`, `you`) or a delta (`joined`, `left`, `count`), never
    both: a delta applied as a list, or the reverse, would show the wrong people."""
    if "members" in message:
        _expect_absent(message, ("joined", "left"))
        members = _presence_members(message, "members", id_required=False)
        you = None if message.get("you") is None else _seq(message, "you")
        return PresenceMessage(members=members, count=_seq(message, "count"), you=you)
    joined = _presence_members(message, "joined", id_required=True)
    left = _get(message, "left", list)
    if not all(type(member_id) is int and member_id >= 0 for member_id in left):
        raise BadRequest("field 'left' must be a list of member ids")
    _expect_absent(message, ("you",))
    return PresenceDelta(joined=joined, left=left, count=_seq(message, "count"))


def _presence_members(message: Mapping[str, Any], field: str, *, id_required: bool) -> list[Member]:
    """The member list in `field`, each member checked as `_get` and `_seq` check a field."""
    members = []
    for value in _get(message, field, list):
        if not isinstance(value, dict):
            raise BadRequest("a presence member must be a map")
        name, role, member_id = value.get("name"), value.get("role"), value.get("id")
        if type(name) is not str or type(role) is not str:
            raise BadRequest("a presence member's name and role must be str")
        if (member_id is not None or id_required) and (type(member_id) is not int or member_id < 0):
            raise BadRequest("field 'id' must be a non-negative integer")
        verified = value.get("verified") is True
        members.append(Member(name=name, role=role, id=member_id, verified=verified))
    return members


def _expect_absent(message: Mapping[str, Any], names: Sequence[str]) -> None:
    for name in names:
        if name in message:
            raise BadRequest(f"field {name!r} does not go with this presence message")


def _seq(message: Mapping[str, Any], name: str) -> int:
    """A non-negative integer field: a seq, a member id."""
    value = message.get(name)
    if type(value) is not int or value < 0:
        raise BadRequest(f"field {name!r} must be a non-negative integer")
    return value


def _sandbox(value: Any) -> SandboxInfo | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest("field 'sandbox' must be dict")
    writable = _get(value, "writable", list)
    if not all(isinstance(path, str) for path in writable):
        raise BadRequest("field 'writable' must be a list of str")
    return SandboxInfo(
        enabled=_get(value, "enabled", bool),
        writable=writable,
        network=_get(value, "network", bool),
    )


def _terminal(value: Any) -> TerminalSize | None:
    """`ready`'s `terminal`: absent, or exactly `cols` and `rows`, each a side the host would
    take in a `resize`."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"cols", "rows"}:
        raise BadRequest("field 'terminal' must be a map of cols and rows")
    return TerminalSize(cols=_side(value, "cols"), rows=_side(value, "rows"))


def _side(message: Mapping[str, Any], name: str) -> int:
    value = message.get(name)
    if type(value) is not int or not 1 <= value <= MAX_TERMINAL_SIDE:
        raise BadRequest(f"field {name!r} must be an integer from 1 to {MAX_TERMINAL_SIDE}")
    return value


def _optional(message: Mapping[str, Any], name: str, kind: type) -> Any:
    """The field, or None when a host too old to send it left it out."""
    return None if message.get(name) is None else _get(message, name, kind)


def _get(message: Mapping[str, Any], name: str, kind: type) -> Any:
    value = message.get(name)
    # bool is an int subclass; a boolean where a number belongs is a bug, not a number.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadRequest(f"field {name!r} must be {kind.__name__}")
    return value
