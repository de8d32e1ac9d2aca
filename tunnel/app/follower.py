"""The teammate's side of the session channel as a sans-I/O state machine: the cursor, the
snapshot, the host's broadcast, gaps, cuts, catch-up and presence (docs/application.md).

Feed it what arrives, one at a time: `receive_message(map)` for a decoded channel message,
`receive_cast(bytes)` for a cast of the host's broadcast, `receive_cast(None)` for the relay's
`cut`. Each returns the typed events to act on, in order; after each, send what
`requests_to_send()` returns (a catch-up's `Subscribe`) on the channel. `subscribe()` is the
caller's own subscribe: it returns the request to send. It never does I/O; the Python teammate
(`tunnel.teammate.client`) is a thin layer over it, and the page's follower.js is tested against
the vectors it generates (`python -m tunnel.app.follower_vectors`).

Every transition is in `TRANSITIONS`. A `RemoteProtocolError` says the host broke the protocol:
close the channel with its `code` and `reason`; the follower is then `CLOSED`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import msgpack

from tunnel.app.errors import BadRequest
from tunnel.app.host_messages import (
    BroadcastStart,
    Error,
    EventMessage,
    HistoryPage,
    ItemMessage,
    Member,
    PresenceDelta,
    PresenceMessage,
    Ready,
    Snapshot,
    decode_host_message,
    parse_map,
)
from tunnel.app.requests import Subscribe
from tunnel.app.roster import Roster
from tunnel.e2e.broadcast import CastError, CastOpener
from tunnel.proto.codes import CloseCode

__all__ = [
    "TRANSITIONS",
    "CatchingUp",
    "Event",
    "Follower",
    "FollowerError",
    "FollowerEvent",
    "FollowerStatistics",
    "Following",
    "Input",
    "Item",
    "LocalProtocolError",
    "Presence",
    "Refuse",
    "RemoteProtocolError",
    "Skipped",
    "SnapshotPage",
    "SnapshotStarted",
    "State",
    "cast_messages",
]


# -- events ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotStarted:
    """The first page of a snapshot the caller asked for (or a `reset`) arrived; its
    `SnapshotPage` follows at once."""

    reset: bool
    """The host's log does not reach the caller's cursor (a new log under the same
    conversation id): drop everything held, the snapshot is that of a fresh join."""
    fresh: bool
    """The caller held nothing before it (a subscribe with no `after`, or a reset): the view
    starts at `first_seq`."""
    first_seq: int | None
    """The seq the snapshot starts at; None from a host too old to say."""
    earlier: bool
    """Whether the log holds items before `first_seq` (ask with `history`)."""
    context: Sequence[Mapping[str, Any]]
    """Items from before `first_seq` whose state still holds, in seq order: apply, do not list
    (docs/application.md, "The state from before a fresh join")."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotPage:
    """One page of a snapshot the caller asked for."""

    items: Sequence[Mapping[str, Any]]
    """The page's items not held already, in seq order: each seq is in exactly one `Item` or
    `SnapshotPage` per follower."""
    last_seq: int
    """The last seq this page covers; once the snapshot ended (`more` False), the cursor."""
    more: bool
    """Whether more pages follow; False ends the snapshot, the live tail comes next."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Item:
    """An item to show after the snapshot: the live tail, or what a catch-up brought. Each seq
    exactly once, in increasing order."""

    item: Mapping[str, Any]
    """The item's wire map (`Item.to_wire()`); its `seq` is an integer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """A live event: never stored, no seq (docs/application.md, "Events")."""

    event: Mapping[str, Any]
    """The event's map: `conversation_id`, `kind`, `data`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Presence:
    """Who is attached changed (or was said whole): the one roster, already updated."""

    members: Sequence[Member]
    """The members listed now (the first to have attached), in the order they joined."""
    count: int
    """Everyone attached now, listed or not: never fewer than `members`."""
    whole: bool
    """The host said the whole listing (the first on a channel, or in `broadcast`), not a
    delta."""
    you: int | None
    """The member id of this channel, once the host said it."""
    joined: Sequence[Member]
    """Who this message added."""
    left: Sequence[Member]
    """Who this message removed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Following:
    """A `broadcast` message arrived: the live tail now comes as casts of this epoch."""

    epoch: bytes
    """The epoch's id."""
    counter: int
    """The counter of the next cast."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CatchingUp:
    """The broadcast broke for this channel; a `Subscribe(after=...)` is queued in
    `requests_to_send()`, and its snapshot comes as `Item`s."""

    reason: str
    """Why: the relay's cut, a cast that did not open, or a gap in the items."""
    after: int
    """The cursor the catch-up resumes after (-1 when nothing was held)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Skipped:
    """A message the follower could not use, dropped; worth a log line, nothing else."""

    op: str | None
    """Its op, when it had one."""
    reason: str
    """Why, in a few words that never echo what came."""


FollowerEvent = (
    Ready
    | SnapshotStarted
    | SnapshotPage
    | Item
    | Event
    | Presence
    | HistoryPage
    | Error
    | Following
    | CatchingUp
    | Skipped
)
"""What `Follower.receive_message` and `receive_cast` return: `Ready`, `HistoryPage` and
`Error` are the host's messages as `tunnel.app.host_messages` parses them."""


class FollowerStatistics(NamedTuple):
    """What a follower saw so far."""

    items: int
    """Items handed on (in `Item` and `SnapshotPage`)."""
    duplicates: int
    """Items dropped as held already."""
    breaks: int
    """How often the broadcast broke and the follower caught up."""


# -- errors ---------------------------------------------------------------------------------


class FollowerError(Exception):
    """The follower refused; `code` is the close code to send, `reason` the close reason."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class RemoteProtocolError(FollowerError):
    """The host broke the session protocol: close the channel with `code` and `reason`."""


class LocalProtocolError(FollowerError):
    """The follower was fed after it refused the channel (a bug of the caller)."""


# -- the state table ------------------------------------------------------------------------


class State(enum.Enum):
    """Where the follower stands."""

    CHANNEL = "channel"
    """The live tail, if any, comes on the channel (also before any subscribe)."""
    SUBSCRIBED = "subscribed"
    """The caller subscribed; the first page of its snapshot has not come yet."""
    SNAPSHOT = "snapshot"
    """The pages of a snapshot the caller asked for are coming."""
    BROADCAST = "broadcast"
    """Following the host's broadcast: items come only as casts."""
    CATCHING_UP = "catching_up"
    """The broadcast broke; the snapshot of our own subscribe comes, handed on as items."""
    CLOSED = "closed"
    """The follower refused the channel; nothing more may be fed."""


class Input(enum.Enum):
    """What can happen to a follower: the caller's subscribe, a channel message by kind, a
    cast by outcome, a cut."""

    SUBSCRIBE = "subscribe"
    READY = "ready"
    SNAPSHOT_PAGE = "snapshot page"
    """A `snapshot` with `more: true`."""
    SNAPSHOT_END = "snapshot end"
    """A `snapshot` with `more: false`."""
    RESET_PAGE = "reset page"
    """A `snapshot` with `reset: true` and `more: true`."""
    RESET_END = "reset end"
    """A `snapshot` with `reset: true` and `more: false`."""
    ITEM = "item"
    """A channel `item` with a seq after the cursor."""
    HELD_ITEM = "held item"
    """A channel `item` with a seq at or before the cursor."""
    EVENT = "event"
    PRESENCE = "presence"
    HISTORY = "history"
    ERROR = "error"
    OTHER = "other"
    """An unknown op, or a message that does not parse."""
    BROADCAST = "broadcast"
    """A `broadcast` message whose public key is the host's."""
    BAD_BROADCAST = "bad broadcast"
    """A `broadcast` message whose public key is not the host's, or malformed."""
    CAST = "cast"
    """A cast that opened and brought no gap (or any cast when not following: ignored)."""
    BROKEN_CAST = "broken cast"
    """A cast that did not open (tampered, forged, replayed, another epoch, not a list)."""
    GAP = "gap"
    """A cast that opened but holds an item past the next one expected."""
    CUT = "cut"
    """The relay cut the channel from the broadcast."""
    MALFORMED_CAST = "malformed cast"
    """A cast that opened but holds a message that is not a host message (not a msgpack map
    with an op): signed by the host, which broke the protocol."""


@dataclass(frozen=True, slots=True)
class Refuse:
    """A transition that refuses the channel: `RemoteProtocolError(code, reason)`."""

    code: int
    reason: str


ITEM_WHILE_FOLLOWING: Final = "an item on the channel while following the broadcast"
SNAPSHOT_WHILE_FOLLOWING: Final = "a snapshot on the channel while following the broadcast"
NOT_A_HOST_MESSAGE: Final = "a cast holds a message that is not a host message"
NOT_THE_HOSTS_BROADCAST: Final = "the broadcast is not the host's"


def _table() -> dict[tuple[State, Input], State | Refuse]:
    table: dict[tuple[State, Input], State | Refuse] = {}
    listening = (State.CHANNEL, State.SUBSCRIBED, State.SNAPSHOT, State.CATCHING_UP)
    for state in (*listening, State.BROADCAST):
        # Inputs that never move the follower: they are handed on, or ignored.
        for stay in (Input.READY, Input.EVENT, Input.PRESENCE, Input.HISTORY, Input.ERROR):
            table[state, stay] = state
        table[state, Input.OTHER] = state
        table[state, Input.HELD_ITEM] = state
        table[state, Input.SUBSCRIBE] = State.SUBSCRIBED
        table[state, Input.BROADCAST] = State.BROADCAST
        table[state, Input.BAD_BROADCAST] = Refuse(
            CloseCode.DECRYPTION_FAILED, NOT_THE_HOSTS_BROADCAST
        )
    for state in listening:
        # Not following: casts and cuts are not for this channel.
        for cast in (Input.CAST, Input.BROKEN_CAST, Input.GAP, Input.CUT, Input.MALFORMED_CAST):
            table[state, cast] = state
        table[state, Input.ITEM] = state
        table[state, Input.SNAPSHOT_PAGE] = State.SNAPSHOT
        table[state, Input.SNAPSHOT_END] = State.CHANNEL
        table[state, Input.RESET_PAGE] = State.SNAPSHOT
        table[state, Input.RESET_END] = State.CHANNEL
    # The snapshot of our catch-up: items for the live tail, until its last page.
    table[State.CATCHING_UP, Input.SNAPSHOT_PAGE] = State.CATCHING_UP
    # A broadcast message answering a subscribe still in flight belongs to the previous
    # subscription: the host parts the channel for ours and sends a new one after its snapshot.
    table[State.SUBSCRIBED, Input.BROADCAST] = State.SUBSCRIBED
    follow = State.BROADCAST
    table[follow, Input.CAST] = follow
    for broken in (Input.BROKEN_CAST, Input.GAP, Input.CUT):
        table[follow, broken] = State.CATCHING_UP
    table[follow, Input.MALFORMED_CAST] = Refuse(CloseCode.PROTOCOL_ERROR, NOT_A_HOST_MESSAGE)
    # Defence in depth: while following, items come only as signed casts.
    table[follow, Input.ITEM] = Refuse(CloseCode.PROTOCOL_ERROR, ITEM_WHILE_FOLLOWING)
    for snapshot in (
        Input.SNAPSHOT_PAGE,
        Input.SNAPSHOT_END,
        Input.RESET_PAGE,
        Input.RESET_END,
    ):
        table[follow, snapshot] = Refuse(CloseCode.PROTOCOL_ERROR, SNAPSHOT_WHILE_FOLLOWING)
    return table


TRANSITIONS: Final[Mapping[tuple[State, Input], State | Refuse]] = _table()
"""Every (state, input) pair but those of `CLOSED`, which raise `LocalProtocolError`: the next
state, or the refusal (the follower is then `CLOSED`)."""

# The ops a cast carries (docs/application.md, "The broadcast").
_CAST_OPS: Final = frozenset({"item", "event", "presence"})


# -- the follower ---------------------------------------------------------------------------


class Follower:
    """One session channel's follower, from the teammate's side.

    `host_id` is the host of the link: a `broadcast` message's public key must be its key.
    """

    def __init__(self, *, host_id: str) -> None:
        self.host_id = host_id
        self.state = State.CHANNEL
        """Where the follower stands (`TRANSITIONS`)."""
        self.cursor: int | None = None
        """The last seq held: every item handed on is after it. None before the first snapshot
        page of a fresh join."""
        self.roster = Roster()
        """Who is attached, as the host said: the listing and count, then what changed."""
        self._opener: CastOpener | None = None
        self._fresh = False
        self._requests: list[Subscribe] = []
        self._items = 0
        self._duplicates = 0
        self._breaks = 0

    # -- what the caller does -------------------------------------------------------------

    def subscribe(self, after: int | None = None, *, tail: int | None = None) -> Subscribe:
        """The caller subscribes: returns the request to send. `after` None is a fresh join
        (the cursor is forgotten); with `after`, everything after it comes, and the cursor is
        `after`. Raises ValueError for a `tail` with an `after`."""
        if tail is not None and after is not None:
            raise ValueError("tail goes only with after=None: a resume gets every item after it")
        self._move(Input.SUBSCRIBE)
        self._opener = None
        self.cursor = after
        self._fresh = after is None
        return Subscribe(after=after, tail=tail)

    def requests_to_send(self) -> list[Subscribe]:
        """The requests the follower needs sent on the channel, in order, once each: call after
        every `receive_*`."""
        requests, self._requests = self._requests, []
        return requests

    def statistics(self) -> FollowerStatistics:
        """Items handed on, duplicates dropped, broadcast breaks."""
        return FollowerStatistics(self._items, self._duplicates, self._breaks)

    # -- what arrives ---------------------------------------------------------------------

    def receive_message(self, message: Mapping[str, Any]) -> list[FollowerEvent]:
        """Take one decoded channel message (`decode_host_message`); return its events.

        Raises RemoteProtocolError when the host broke the protocol (the follower is then
        CLOSED), LocalProtocolError when it was CLOSED already.
        """
        op = message.get("op")
        if not isinstance(op, str):
            self._move(Input.OTHER)
            return [Skipped(op=None, reason="not an application message")]
        try:
            parsed = parse_map(message)
        except BadRequest as exc:
            self._move(Input.BAD_BROADCAST if op == "broadcast" else Input.OTHER)
            return [Skipped(op=op, reason=str(exc))]
        if isinstance(parsed, ItemMessage):
            # Before the match: the live tail on the channel, the most common message by far.
            return self._on_item(parsed.item)
        match parsed:
            case Snapshot():
                return self._on_snapshot(parsed)
            case BroadcastStart():
                return self._on_broadcast(parsed)
            case PresenceMessage() | PresenceDelta():
                self._move(Input.PRESENCE)
                return [self._presence(parsed)]
            case EventMessage():
                self._move(Input.EVENT)
                return [Event(event=parsed.event)]
            case Ready():
                self._move(Input.READY)
                return [parsed]
            case HistoryPage():
                self._move(Input.HISTORY)
                return [parsed]
            case Error():
                self._move(Input.ERROR)
                return [parsed]

    def _on_item(self, item: Mapping[str, Any]) -> list[FollowerEvent]:
        """A channel `item`: new, or held already."""
        seq = _seq(item)
        if seq is None:
            self._move(Input.OTHER)
            return [Skipped(op="item", reason="an item without a seq")]
        if self.cursor is not None and seq <= self.cursor:
            self._move(Input.HELD_ITEM)
            self._duplicates += 1
            return []
        self._move(Input.ITEM)
        return [self._take(item, seq)]

    def receive_cast(self, cast: bytes | None) -> list[FollowerEvent]:
        """Take one cast of the host's broadcast, or None for the relay's `cut`; return the
        events of its messages (or of the catch-up it starts). Outside the broadcast, casts and
        cuts are ignored. Raises LocalProtocolError when the follower was CLOSED."""
        opener = self._opener if self.state is State.BROADCAST else None
        if opener is None:
            self._move(Input.CUT if cast is None else Input.CAST)
            return []
        if cast is None:
            return self._catch_up(Input.CUT, "the relay cut this channel from the broadcast")
        try:
            messages = cast_messages(opener.open(cast))
        except CastError as exc:
            return self._catch_up(Input.BROKEN_CAST, str(exc))
        events: list[FollowerEvent] = []
        for plaintext in messages:
            try:
                message = decode_host_message(plaintext)
            except BadRequest:
                self._move(Input.MALFORMED_CAST)
                raise AssertionError("unreachable: MALFORMED_CAST refuses") from None
            op = message["op"]
            # The live tail's messages, once per item and event of every cast: checked as
            # `parse_map` checks them (the field a map) without building its dataclass. Any
            # other shape takes the general path below, which says what is wrong.
            if op == "item":
                item = message.get("item")
                if isinstance(item, dict):
                    seq = item.get("seq")
                    cursor = self.cursor
                    if type(seq) is not int or seq < 0:
                        events.append(Skipped(op="item", reason="an item without a seq"))
                    elif cursor is not None and seq <= cursor:
                        # The broadcast may still send what the channel sent while it caught up.
                        self._duplicates += 1
                    elif cursor is not None and seq > cursor + 1:
                        return events + self._catch_up(
                            Input.GAP, "an item missing from the broadcast"
                        )
                    else:
                        # `_take`, written out: no call per item.
                        self.cursor = seq
                        self._items += 1
                        events.append(Item(item=item))
                    continue
            elif op == "event":
                event = message.get("event")
                if isinstance(event, dict):
                    events.append(Event(event=event))
                    continue
            try:
                parsed = None if op not in _CAST_OPS else parse_map(message)
            except BadRequest as exc:
                events.append(Skipped(op=op, reason=str(exc)))
                continue
            if parsed is None:
                # Signed by the host, so not an attack: a newer host's op, or one that only
                # comes on the channel. The broadcast goes on.
                events.append(Skipped(op=op, reason="not a message a cast carries"))
                continue
            # Only a presence message is left: an item or event that parses took the path above.
            assert isinstance(parsed, PresenceMessage | PresenceDelta)
            events.append(self._presence(parsed))
        self._move(Input.CAST)
        return events

    # -- the steps ------------------------------------------------------------------------

    def _move(self, what: Input) -> None:
        if self.state is State.CLOSED:
            raise LocalProtocolError(CloseCode.INTERNAL_ERROR, "the follower refused already")
        outcome = TRANSITIONS[self.state, what]
        if isinstance(outcome, Refuse):
            self.state = State.CLOSED
            self._opener = None
            raise RemoteProtocolError(outcome.code, outcome.reason)
        self.state = outcome

    def _take(self, item: Mapping[str, Any], seq: int) -> Item:
        """The one "already held" check passed: hand the item on and move the cursor."""
        self.cursor = seq
        self._items += 1
        return Item(item=item)

    def _fresh_items(self, items: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """Items after the cursor, in order, each moving it; the rest are held already."""
        fresh = []
        for item in items:
            seq = _seq(item)
            if seq is None:
                continue
            if self.cursor is not None and seq <= self.cursor:
                self._duplicates += 1
                continue
            fresh.append(self._take(item, seq).item)
        return fresh

    def _on_snapshot(self, snapshot: Snapshot) -> list[FollowerEvent]:
        before = self.state
        if snapshot.reset:
            self._move(Input.RESET_PAGE if snapshot.more else Input.RESET_END)
        else:
            self._move(Input.SNAPSHOT_PAGE if snapshot.more else Input.SNAPSHOT_END)
        self._opener = None  # the host took the channel out of its broadcast before this
        if before is State.CATCHING_UP and not snapshot.reset:
            # Ours, to catch up: what the reader lacks, as items of the live tail.
            events: list[FollowerEvent] = [
                Item(item=item) for item in self._fresh_items(snapshot.items)
            ]
            self._advance(snapshot)
            return events
        events = []
        if snapshot.reset or before is not State.SNAPSHOT:
            if snapshot.reset:
                self.cursor = None
                self._fresh = True
            events.append(
                SnapshotStarted(
                    reset=snapshot.reset,
                    fresh=self._fresh,
                    first_seq=snapshot.first_seq,
                    earlier=snapshot.earlier,
                    context=tuple(snapshot.context),
                )
            )
            self._fresh = False
        items = self._fresh_items(snapshot.items)
        self._advance(snapshot)
        events.append(
            SnapshotPage(items=tuple(items), last_seq=snapshot.last_seq, more=snapshot.more)
        )
        return events

    def _advance(self, snapshot: Snapshot) -> None:
        # Once the snapshot ended, every item up to its last seq is held, even when its pages
        # brought none (an empty log: -1). Before, only the items of its pages are.
        if not snapshot.more and (self.cursor is None or snapshot.last_seq > self.cursor):
            self.cursor = snapshot.last_seq

    def _on_broadcast(self, start: BroadcastStart) -> list[FollowerEvent]:
        try:
            opener = CastOpener(
                host_id=self.host_id,
                public_key=start.public_key,
                epoch=start.epoch,
                key=start.key,
                counter=start.counter,
            )
        except CastError:
            self._move(Input.BAD_BROADCAST)
            raise AssertionError("unreachable: BAD_BROADCAST refuses") from None
        self._move(Input.BROADCAST)
        presence = self._presence(
            PresenceMessage(members=start.members, count=start.count, you=start.you)
        )
        if self.state is not State.BROADCAST:
            return [presence]  # the previous subscription's: see TRANSITIONS
        self._opener = opener
        return [Following(epoch=start.epoch, counter=start.counter), presence]

    def _catch_up(self, what: Input, reason: str) -> list[FollowerEvent]:
        """Leave the broadcast and ask, on the channel, for every item after the cursor."""
        self._move(what)
        self._opener = None
        self._breaks += 1
        after = -1 if self.cursor is None else self.cursor
        self._requests.append(Subscribe(after=after))
        return [CatchingUp(reason=reason, after=after)]

    def _presence(self, message: PresenceMessage | PresenceDelta) -> Presence:
        change = self.roster.apply(message)
        return Presence(
            members=tuple(self.roster.members),
            count=self.roster.count,
            whole=isinstance(message, PresenceMessage),
            you=self.roster.you,
            joined=tuple(change.joined),
            left=tuple(change.left),
        )


def _seq(item: Any) -> int | None:
    # A dict first: what msgpack gives, and much cheaper to tell than any other Mapping.
    seq = item.get("seq") if isinstance(item, (dict, Mapping)) else None
    return seq if type(seq) is int and seq >= 0 else None


def cast_messages(plaintext: bytes) -> list[bytes]:
    """The host messages in an opened cast: a msgpack array of bin (docs/application.md)."""
    try:
        messages = msgpack.unpackb(plaintext, raw=False)
    except Exception as exc:  # msgpack raises many types
        raise CastError("a cast that is not a list of messages") from exc
    if not isinstance(messages, list) or not all(isinstance(m, bytes) for m in messages):
        raise CastError("a cast that is not a list of messages")
    return messages
