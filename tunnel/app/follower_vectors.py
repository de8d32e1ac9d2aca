"""tests/vectors/session.json: named scenarios fed to `tunnel.app.follower.Follower`, with the
events and requests it returns, so the page's follower.js is checked against the same facts.

    python -m tunnel.app.follower_vectors > tests/vectors/session.json

Every input is what a follower is fed: the caller's `subscribe`, a channel `message` (msgpack,
hex), a `cast` (hex; sealed and signed with a fixed host key, epoch and key) or a `cut`. Every
expectation is the events and requests that input gave, or the refusal (close code, reason)
and the state after it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import msgpack

from tunnel.app.follower import (
    TRANSITIONS,
    CatchingUp,
    Event,
    Follower,
    FollowerError,
    FollowerEvent,
    Following,
    Item,
    Presence,
    Skipped,
    SnapshotPage,
    SnapshotStarted,
    State,
)
from tunnel.app.host_messages import Error, HistoryPage, Member, Ready, decode_host_message, pack
from tunnel.app.requests import Subscribe
from tunnel.e2e.broadcast import BroadcastKey, CastSealer
from tunnel.e2e.identity import HostIdentity

HOST = HostIdentity.from_seed(bytes(range(0x20, 0x40)))
"""The host of every scenario: the key of the crypto vectors."""
OTHER = HostIdentity.from_seed(bytes(range(0x40, 0x60)))
"""Another host, whose signature and public key are not the link's."""
EPOCH = BroadcastKey(epoch=bytes(range(0x80, 0x90)), key=bytes(range(0x90, 0xB0)))
SECOND_EPOCH = BroadcastKey(epoch=bytes(range(0xB0, 0xC0)), key=bytes(range(0xC0, 0xE0)))
COUNTER = 5
"""The counter of the first cast a channel follows."""
ME = {"id": 3, "name": "ann", "role": "view"}
BOB = {"id": 1, "name": "bob", "role": "drive"}
CAROL = {"id": 4, "name": "carol", "role": "view"}


def item(seq: int, text: str = "") -> dict[str, Any]:
    """A `message` item with a fixed time, as `Item.to_wire()` gives it."""
    return {
        "id": f"c:{seq}",
        "conversation_id": "c",
        "seq": seq,
        "type": "message",
        "status": "completed",
        "response_id": None,
        "created_at": "2025-01-01T00:00:00Z",
        "created_by": "bob",
        "data": {"role": "user", "text": text or f"item {seq}"},
    }


def snapshot(
    seqs: Sequence[int],
    *,
    last_seq: int,
    more: bool = False,
    first_seq: int = 0,
    reset: bool = False,
    earlier: bool = False,
) -> dict[str, Any]:
    return {
        "op": "snapshot",
        "items": [item(seq) for seq in seqs],
        "last_seq": last_seq,
        "more": more,
        "reset": reset,
        "first_seq": first_seq,
        "earlier": earlier,
    }


def broadcast(
    key: BroadcastKey = EPOCH,
    *,
    counter: int = COUNTER,
    identity: HostIdentity = HOST,
    members: Sequence[Mapping[str, Any]] = (BOB, ME),
    count: int | None = None,
) -> dict[str, Any]:
    return {
        "op": "broadcast",
        "epoch": key.epoch,
        "key": key.key,
        "public_key": identity.public_key,
        "counter": counter,
        "members": list(members),
        "count": len(members) if count is None else count,
        "you": ME["id"],
    }


class Caster:
    """The host's side of one epoch: seals each cast of messages under the next counter."""

    def __init__(self, key: BroadcastKey = EPOCH, identity: HostIdentity = HOST) -> None:
        self.sealer = CastSealer(identity, key, counter=COUNTER)

    def cast(self, *messages: Mapping[str, Any]) -> bytes:
        return self.sealer.seal(msgpack.packb([pack(m) for m in messages], use_bin_type=True))


def cast_item(seq: int) -> dict[str, Any]:
    return {"op": "item", "item": item(seq)}


# -- a scenario, as it is written -------------------------------------------------------------

Step = tuple[str, Any]
"""("subscribe", (after, tail)) | ("message", map) | ("cast", bytes) | ("cut", None)."""


def _joined(last_seq: int = 2) -> list[Step]:
    """A fresh join that holds 0..last_seq and follows the broadcast from COUNTER."""
    return [
        ("subscribe", (None, None)),
        ("message", snapshot(range(last_seq + 1), last_seq=last_seq)),
        ("message", broadcast()),
    ]


def scenarios() -> dict[str, tuple[str, list[Step]]]:
    """Name -> (what it shows, its steps)."""
    out: dict[str, tuple[str, list[Step]]] = {}

    caster = Caster()
    out["snapshot_then_casts"] = (
        "A fresh join: a snapshot in two pages, the state event, the broadcast, then casts of"
        " items, an event and a presence delta.",
        [
            ("subscribe", (None, None)),
            ("message", snapshot([0, 1], last_seq=1, more=True)),
            ("message", snapshot([2], last_seq=2)),
            (
                "message",
                {"op": "event", "event": {"conversation_id": "c", "kind": "status", "data": {}}},
            ),
            ("message", broadcast()),
            ("cast", caster.cast(cast_item(3))),
            (
                "cast",
                caster.cast(
                    cast_item(4),
                    {"op": "event", "event": {"conversation_id": "c", "kind": "plan", "data": {}}},
                ),
            ),
        ],
    )

    caster = Caster()
    out["duplicate_item"] = (
        "A cast repeats an item the channel sent while it caught up: it is skipped; the next is"
        " taken.",
        [*_joined(), ("cast", caster.cast(cast_item(2), cast_item(3))), ("cast", caster.cast())],
    )

    caster = Caster()
    out["late_join"] = (
        "A joiner of a long conversation: the end of it, with its context, then the live tail"
        " on the channel before the broadcast.",
        [
            ("subscribe", (None, 2)),
            (
                "message",
                {
                    **snapshot([40, 41], last_seq=41, first_seq=40, earlier=True),
                    "context": [item(7, "settings")],
                },
            ),
            ("message", {"op": "item", "item": item(42)}),
            ("message", broadcast()),
            ("cast", caster.cast(cast_item(42), cast_item(43))),
        ],
    )

    caster = Caster()
    out["cut"] = (
        "The relay cuts the channel: the follower catches up by subscribe after its cursor,"
        " ignores casts until the next broadcast message, and takes the catch-up's snapshot as"
        " items.",
        [
            *_joined(),
            ("cast", caster.cast(cast_item(3))),
            ("cut", None),
            ("cast", caster.cast(cast_item(4))),
            ("message", snapshot([4, 5], last_seq=5, first_seq=4, earlier=True)),
            ("message", broadcast(counter=COUNTER + 2)),
            ("cast", caster.cast(cast_item(6))),
        ],
    )

    caster = Caster()
    caster.cast(cast_item(3))  # the relay dropped it
    out["gap"] = (
        "A cast is missing: the next one's counter is not the one expected, which opens no"
        " cast; catch up.",
        [*_joined(), ("cast", caster.cast(cast_item(4)))],
    )

    caster = Caster()
    out["item_gap"] = (
        "A cast that opens but holds an item past the next one: the items before the gap are"
        " taken, then a catch-up.",
        [*_joined(), ("cast", caster.cast(cast_item(3), cast_item(5)))],
    )

    caster = Caster()
    tampered = bytearray(caster.cast(cast_item(3)))
    tampered[30] ^= 1
    out["tampered_cast"] = (
        "A cast with one byte of its ciphertext flipped: it does not open; catch up.",
        [*_joined(), ("cast", bytes(tampered))],
    )

    forger = Caster(identity=OTHER)
    out["forged_cast"] = (
        "A cast sealed with the epoch's key but signed by another key (what a teammate holding"
        " K could make): it does not open; catch up.",
        [*_joined(), ("cast", forger.cast(cast_item(3)))],
    )

    caster = Caster()
    first = caster.cast(cast_item(3))
    out["replayed_cast"] = (
        "The relay sends a cast again: its counter is past; catch up, then casts are ignored"
        " until the next broadcast message.",
        [*_joined(), ("cast", first), ("cast", first), ("cast", caster.cast(cast_item(4)))],
    )

    caster = Caster()
    catch_up = Caster(SECOND_EPOCH)
    out["resubscribe"] = (
        "A catch-up after a cut: its snapshot (two pages, one repeating what is held) comes as"
        " items, items on the channel until the new broadcast message, then casts of the new"
        " epoch; the old epoch's casts are ignored.",
        [
            *_joined(),
            ("cut", None),
            ("message", snapshot([2, 3], last_seq=3, more=True, first_seq=3)),
            ("message", snapshot([4], last_seq=4, first_seq=3)),
            ("message", {"op": "item", "item": item(5)}),
            ("cast", caster.cast(cast_item(5))),
            ("message", broadcast(SECOND_EPOCH)),
            ("cast", catch_up.cast(cast_item(5), cast_item(6))),
        ],
    )

    out["channel_item_while_following"] = (
        "While following the broadcast, a channel item the broadcast is to bring is refused:"
        " the channel closes with 4000 (a held one is only a duplicate).",
        [
            *_joined(),
            ("message", {"op": "item", "item": item(2)}),
            ("message", {"op": "item", "item": item(3)}),
        ],
    )

    out["snapshot_while_following"] = (
        "While following, a snapshot nobody asked for is refused with 4000.",
        [*_joined(), ("message", snapshot([3], last_seq=3, first_seq=3))],
    )

    caster = Caster()
    second = Caster(SECOND_EPOCH)
    out["second_broadcast"] = (
        "A second broadcast message while following replaces the first: its epoch and counter"
        " from then on, the old epoch's casts do not open.",
        [
            *_joined(),
            ("cast", caster.cast(cast_item(3))),
            ("message", broadcast(SECOND_EPOCH, members=(BOB, ME, CAROL))),
            ("cast", second.cast(cast_item(4))),
            ("cast", caster.cast(cast_item(5))),
        ],
    )

    out["bad_broadcast_key"] = (
        "A broadcast message whose public key is not the host id's: refused with 4003.",
        [
            ("subscribe", (None, None)),
            ("message", snapshot([0], last_seq=0)),
            ("message", broadcast(identity=OTHER)),
        ],
    )

    caster = Caster()
    out["unknown_cast_content"] = (
        "A well-signed cast of an op a cast does not carry, and of an unknown op: each skipped,"
        " the broadcast goes on.",
        [
            *_joined(),
            ("cast", caster.cast({"op": "snapshot"}, {"op": "future"}, cast_item(3))),
            ("cast", caster.cast(cast_item(4))),
        ],
    )

    caster = Caster()
    not_a_message = caster.sealer.seal(msgpack.packb([b"\x01"], use_bin_type=True))
    out["malformed_cast_message"] = (
        "A well-signed cast holding bytes that are not a host message: the host broke the"
        " protocol, the channel closes with 4000.",
        [*_joined(), ("cast", not_a_message)],
    )

    caster = Caster()
    out["presence_deltas"] = (
        "The list in the broadcast message, then deltas in casts, merged into one roster; a"
        " delta that changes only the count (members attached beyond those listed).",
        [
            *_joined(),
            ("cast", caster.cast({"op": "presence", "joined": [CAROL], "left": [], "count": 3})),
            (
                "cast",
                caster.cast({"op": "presence", "joined": [], "left": [BOB["id"]], "count": 2}),
            ),
            ("cast", caster.cast({"op": "presence", "joined": [], "left": [], "count": 75})),
        ],
    )

    out["channel_only"] = (
        "A host without a broadcast: the live tail, presence and errors on the channel; a"
        " duplicate dropped; casts and cuts ignored.",
        [
            ("subscribe", (-1, None)),
            ("message", snapshot([], last_seq=-1)),
            ("message", {"op": "presence", "members": [BOB, ME], "count": 9, "you": ME["id"]}),
            ("message", {"op": "item", "item": item(0)}),
            ("message", {"op": "item", "item": item(0)}),
            ("cut", None),
            # A count below the members listed is taken as their number.
            ("message", {"op": "presence", "joined": [CAROL], "left": [BOB["id"]], "count": 1}),
            ("message", {"op": "error", "code": "forbidden", "message": "viewers cannot"}),
            ("message", {"op": "history", "items": [], "before": 0, "more": False}),
            ("message", {"op": "future"}),
        ],
    )

    out["reset"] = (
        "A resume whose cursor the host's log does not reach: a reset snapshot, as a fresh"
        " join; the cursor starts over.",
        [
            ("subscribe", (9, None)),
            ("message", snapshot([0, 1], last_seq=1, reset=True)),
            ("message", {"op": "item", "item": item(2)}),
        ],
    )
    return out


# -- running a scenario -----------------------------------------------------------------------


def _json(value: Any) -> Any:
    """Maps and lists as JSON: bytes as hex."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, Mapping):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    return value


def _member(member: Member) -> dict[str, Any]:
    return {"id": member.id, "name": member.name, "role": member.role}


def event_json(event: FollowerEvent) -> dict[str, Any]:
    """One event as the vectors write it: `type`, then its fields."""
    match event:
        case Ready():
            return {"type": "ready", "conversation_id": event.conversation_id}
        case SnapshotStarted():
            return {
                "type": "snapshot_started",
                "reset": event.reset,
                "fresh": event.fresh,
                "first_seq": event.first_seq,
                "earlier": event.earlier,
                "context": [c["seq"] for c in event.context],
            }
        case SnapshotPage():
            seqs = [i["seq"] for i in event.items]
            return {
                "type": "snapshot_page",
                "seqs": seqs,
                "last_seq": event.last_seq,
                "more": event.more,
            }
        case Item():
            return {"type": "item", "seq": event.item["seq"]}
        case Event():
            return {"type": "event", "kind": event.event.get("kind")}
        case Presence():
            return {
                "type": "presence",
                "whole": event.whole,
                "members": [_member(m) for m in event.members],
                "count": event.count,
                "you": event.you,
                "joined": [m.id for m in event.joined],
                "left": [m.id for m in event.left],
            }
        case HistoryPage():
            return {"type": "history", "before": event.before, "more": event.more}
        case Error():
            return {"type": "error", "code": event.code}
        case Following():
            return {"type": "following", "epoch": event.epoch.hex(), "counter": event.counter}
        case CatchingUp():
            return {"type": "catching_up", "after": event.after}
        case Skipped():
            return {"type": "skipped", "op": event.op}


def _request_json(request: Subscribe) -> dict[str, Any]:
    return {"op": "subscribe", "after": request.after, "tail": request.tail}


def run(steps: Sequence[Step]) -> list[dict[str, Any]]:
    """Feed `steps` to a new follower; return each step with what it gave, as JSON."""
    follower = Follower(host_id=HOST.host_id)
    out: list[dict[str, Any]] = []
    for kind, value in steps:
        step: dict[str, Any] = {"input": kind}
        if kind == "subscribe":
            step |= {"after": value[0], "tail": value[1]}
        elif kind == "message":
            step |= {"op": value["op"], "message_hex": pack(value).hex()}
        elif value is not None:
            step["cast_hex"] = value.hex()
        try:
            events, requests = _feed(follower, kind, value)
        except FollowerError as exc:
            step["refused"] = {"code": exc.code, "reason": exc.reason}
        else:
            step["events"] = [event_json(e) for e in events]
            step["requests"] = [_request_json(r) for r in requests]
        step["state"] = follower.state.value
        step["cursor"] = follower.cursor
        out.append(step)
    return out


def _feed(follower: Follower, kind: str, value: Any) -> tuple[list[FollowerEvent], list[Subscribe]]:
    if kind == "subscribe":
        return [], [follower.subscribe(value[0], tail=value[1])]
    if kind == "message":
        events = follower.receive_message(decode_host_message(pack(value)))
    else:
        events = follower.receive_cast(value)
    return events, follower.requests_to_send()


def vectors() -> dict[str, Any]:
    """The whole file."""
    return {
        "about": (
            "The session follower's vectors (tunnel/app/follower.py): each scenario's inputs in"
            " order, each with the events and requests it gives, or the refusal. Generated by"
            " `python -m tunnel.app.follower_vectors`; do not edit."
        ),
        "host_id": HOST.host_id,
        "transitions": _transitions(),
        "scenarios": {
            name: {"about": about, "steps": run(steps)}
            for name, (about, steps) in scenarios().items()
        },
    }


def _transitions() -> dict[str, dict[str, Any]]:
    """`TRANSITIONS` by name: the next state, or the refusal's code and reason."""
    table: dict[str, dict[str, Any]] = {}
    for (state, what), outcome in TRANSITIONS.items():
        table.setdefault(state.value, {})[what.value] = (
            outcome.value
            if isinstance(outcome, State)
            else {"code": int(outcome.code), "reason": outcome.reason}
        )
    return table


def render() -> str:
    """The file's text."""
    return json.dumps(_json(vectors()), indent=1, sort_keys=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
