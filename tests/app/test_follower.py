"""The session follower, fed messages and casts by hand: no sockets (tunnel/app/follower.py)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunnel.app import follower_vectors as vectors
from tunnel.app.errors import BadRequest
from tunnel.app.follower import (
    ITEM_WHILE_FOLLOWING,
    TRANSITIONS,
    CatchingUp,
    Event,
    Follower,
    FollowerEvent,
    Following,
    Input,
    Item,
    LocalProtocolError,
    Presence,
    Refuse,
    RemoteProtocolError,
    Skipped,
    SnapshotPage,
    SnapshotStarted,
    State,
)
from tunnel.app.host_messages import (
    EventMessage,
    ItemMessage,
    PresenceDelta,
    PresenceMessage,
    decode_host_message,
    pack,
    parse_map,
)
from tunnel.app.requests import Subscribe
from tunnel.app.roster import Roster
from tunnel.proto.codes import CloseCode

SESSION_JSON = Path(__file__).parent.parent / "vectors" / "session.json"


def feed(follower: Follower, message: dict[str, Any]) -> list[FollowerEvent]:
    return follower.receive_message(decode_host_message(pack(message)))


def following(last_seq: int = 2) -> tuple[Follower, vectors.Caster]:
    """A follower that holds 0..last_seq and follows the broadcast."""
    follower = Follower(host_id=vectors.HOST.host_id)
    follower.subscribe()
    feed(follower, vectors.snapshot(range(last_seq + 1), last_seq=last_seq))
    feed(follower, vectors.broadcast())
    assert follower.state is State.BROADCAST
    return follower, vectors.Caster()


def test_the_vectors_file_is_what_the_generator_writes() -> None:
    assert SESSION_JSON.read_text() == vectors.render(), (
        "run `python -m tunnel.app.follower_vectors > tests/vectors/session.json`"
    )


def test_the_vectors_cover_the_scenarios_the_page_must_follow() -> None:
    names = set(vectors.scenarios())
    assert {
        "snapshot_then_casts",
        "duplicate_item",
        "late_join",
        "cut",
        "gap",
        "tampered_cast",
        "forged_cast",
        "replayed_cast",
        "resubscribe",
        "channel_item_while_following",
        "second_broadcast",
        "presence_deltas",
    } <= names


def test_every_seq_is_handed_on_once_in_order_across_snapshot_channel_and_casts() -> None:
    follower, caster = following()
    events = follower.receive_cast(caster.cast(vectors.cast_item(2), vectors.cast_item(3)))
    assert [e.item["seq"] for e in events if isinstance(e, Item)] == [3]
    assert follower.statistics().duplicates == 1
    assert follower.cursor == 3


def test_a_channel_item_the_broadcast_is_to_bring_is_refused_with_4000() -> None:
    follower, _ = following()
    assert feed(follower, {"op": "item", "item": vectors.item(1)}) == []  # held: a duplicate
    with pytest.raises(RemoteProtocolError) as refused:
        feed(follower, {"op": "item", "item": vectors.item(3)})
    assert refused.value.code == CloseCode.PROTOCOL_ERROR
    assert refused.value.reason == ITEM_WHILE_FOLLOWING
    assert follower.state is State.CLOSED
    with pytest.raises(LocalProtocolError):
        follower.receive_cast(None)


@pytest.mark.parametrize("breaking", ["cut", "forged", "replayed", "gap"])
def test_a_cut_or_a_cast_that_does_not_fit_only_leads_to_a_subscribe_after_the_cursor(
    breaking: str,
) -> None:
    follower, caster = following()
    good = caster.cast(vectors.cast_item(3))
    assert isinstance(follower.receive_cast(good)[0], Item)
    cast = {
        "cut": None,
        "forged": vectors.Caster(identity=vectors.OTHER).cast(vectors.cast_item(4)),
        "replayed": good,
        "gap": caster.cast(vectors.cast_item(5)),
    }[breaking]
    events = follower.receive_cast(cast)
    assert events == [CatchingUp(reason=events[0].reason, after=3)]  # type: ignore[union-attr]
    assert follower.requests_to_send() == [Subscribe(after=3)]
    assert follower.requests_to_send() == []
    # Nothing else is trusted until the next broadcast message: casts are ignored.
    assert follower.receive_cast(caster.cast(vectors.cast_item(4))) == []
    events = feed(follower, vectors.snapshot([4], last_seq=4, first_seq=4))
    assert [type(e) for e in events] == [Item]
    assert follower.state is State.CHANNEL
    assert follower.statistics().breaks == 1


def test_a_broadcast_whose_key_is_not_the_hosts_is_refused_with_4003() -> None:
    follower = Follower(host_id=vectors.HOST.host_id)
    with pytest.raises(RemoteProtocolError) as refused:
        feed(follower, vectors.broadcast(identity=vectors.OTHER))
    assert refused.value.code == CloseCode.DECRYPTION_FAILED


def test_a_broadcast_message_answering_a_previous_subscribe_is_not_followed() -> None:
    follower, caster = following()
    follower.subscribe(after=2)
    events = feed(follower, vectors.broadcast())
    assert [type(e) for e in events] == [Presence]
    assert follower.receive_cast(caster.cast(vectors.cast_item(3))) == []
    assert follower.state is State.SUBSCRIBED


def test_one_roster_from_the_broadcast_list_and_the_deltas() -> None:
    follower, caster = following()
    delta = {"op": "presence", "joined": [vectors.CAROL], "left": [vectors.BOB["id"]], "count": 70}
    (presence,) = follower.receive_cast(caster.cast(delta))
    assert isinstance(presence, Presence)
    assert not presence.whole
    assert [m.name for m in presence.members] == ["ann", "carol"]
    assert presence.count == 70
    assert [m.name for m in presence.left] == ["bob"]
    assert follower.roster.you == vectors.ME["id"]


def test_a_snapshot_page_says_its_start_once_and_hands_on_only_new_items() -> None:
    follower = Follower(host_id=vectors.HOST.host_id)
    follower.subscribe(tail=2)
    first = feed(follower, vectors.snapshot([5, 6], last_seq=6, more=True, first_seq=5))
    assert isinstance(first[0], SnapshotStarted)
    assert first[0].fresh
    assert isinstance(first[1], SnapshotPage)
    second = feed(follower, vectors.snapshot([6, 7], last_seq=7, first_seq=5))
    assert second == [SnapshotPage(items=(vectors.item(7),), last_seq=7, more=False)]
    assert follower.state is State.CHANNEL


def test_malformed_messages_are_skipped_and_change_nothing() -> None:
    follower = Follower(host_id=vectors.HOST.host_id)
    assert feed(follower, {"op": "item", "item": {"seq": "x"}}) == [
        Skipped(op="item", reason="an item without a seq")
    ]
    assert isinstance(feed(follower, {"op": "snapshot"})[0], Skipped)
    assert follower.receive_message({"nop": 1}) == [
        Skipped(op=None, reason="not an application message")
    ]
    assert follower.state is State.CHANNEL


def test_a_tail_with_an_after_is_a_local_error() -> None:
    with pytest.raises(ValueError, match="tail goes only with after=None"):
        Follower(host_id="h").subscribe(3, tail=2)


# -- every (state, input) pair, walked -------------------------------------------------------


def _reach(state: State) -> tuple[Follower, vectors.Caster]:
    """A follower in `state`, and the caster of its epoch."""
    follower, caster = following()
    if state is State.BROADCAST:
        return follower, caster
    if state is State.CATCHING_UP:
        follower.receive_cast(None)
    elif state is State.SUBSCRIBED:
        follower.subscribe(after=2)
    elif state is State.SNAPSHOT:
        follower.subscribe(after=2)
        feed(follower, vectors.snapshot([3], last_seq=3, more=True, first_seq=3))
    elif state is State.CHANNEL:
        follower.receive_cast(None)
        feed(follower, vectors.snapshot([], last_seq=2, first_seq=3))
    elif state is State.CLOSED:
        with pytest.raises(RemoteProtocolError):
            feed(follower, {"op": "item", "item": vectors.item(9)})
    assert follower.state is state
    return follower, caster


def _apply(follower: Follower, caster: vectors.Caster, what: Input) -> None:
    cursor = follower.cursor if follower.cursor is not None else -1
    messages: dict[Input, dict[str, Any]] = {
        Input.READY: {
            "op": "ready",
            "conversation_id": "c",
            "role": "view",
            "name": "ann",
            "agent": {"name": "demo", "kind": "chat"},
        },
        Input.SNAPSHOT_PAGE: vectors.snapshot([cursor + 1], last_seq=cursor + 1, more=True),
        Input.SNAPSHOT_END: vectors.snapshot([cursor + 1], last_seq=cursor + 1),
        Input.RESET_PAGE: vectors.snapshot([0], last_seq=0, more=True, reset=True),
        Input.RESET_END: vectors.snapshot([0], last_seq=0, reset=True),
        Input.ITEM: {"op": "item", "item": vectors.item(cursor + 1)},
        Input.HELD_ITEM: {"op": "item", "item": vectors.item(0)},
        Input.EVENT: {"op": "event", "event": {"kind": "status", "data": {}}},
        Input.PRESENCE: {"op": "presence", "joined": [], "left": [], "count": 1},
        Input.HISTORY: {"op": "history", "items": [], "before": 0, "more": False},
        Input.ERROR: {"op": "error", "code": "forbidden", "message": "no"},
        Input.OTHER: {"op": "future"},
        Input.BROADCAST: vectors.broadcast(),
        Input.BAD_BROADCAST: vectors.broadcast(identity=vectors.OTHER),
    }
    if what is Input.SUBSCRIBE:
        follower.subscribe(after=cursor)
    elif what in messages:
        feed(follower, messages[what])
    elif what is Input.CAST:
        follower.receive_cast(caster.cast(vectors.cast_item(cursor + 1)))
    elif what is Input.BROKEN_CAST:
        follower.receive_cast(b"not a cast")
    elif what is Input.MALFORMED_CAST:
        follower.receive_cast(caster.sealer.seal(msgpack.packb([b"\x01"])))
    elif what is Input.GAP:
        follower.receive_cast(caster.cast(vectors.cast_item(cursor + 2)))
    else:
        follower.receive_cast(None)


def test_the_table_has_every_pair_but_those_of_closed() -> None:
    pairs = {(state, what) for state in State for what in Input if state is not State.CLOSED}
    assert set(TRANSITIONS) == pairs


@settings(max_examples=300, deadline=None)
@given(
    start=st.sampled_from(list(State)), inputs=st.lists(st.sampled_from(list(Input)), max_size=6)
)
def test_every_state_input_pair_moves_as_the_table_says_or_refuses(
    start: State, inputs: list[Input]
) -> None:
    follower, caster = _reach(start)
    for what in inputs:
        before = follower.state
        if before is State.CLOSED:
            with pytest.raises(LocalProtocolError):
                _apply(follower, caster, what)
            return
        outcome = TRANSITIONS[before, what]
        if isinstance(outcome, Refuse):
            with pytest.raises(RemoteProtocolError) as refused:
                _apply(follower, caster, what)
            assert (refused.value.code, refused.value.reason) == (outcome.code, outcome.reason)
            assert follower.state is State.CLOSED
            continue
        _apply(follower, caster, what)
        assert follower.state is outcome, (before, what)
        if follower.state is State.BROADCAST and what is Input.BROADCAST:
            # Following means the epoch of the last broadcast message: restart the caster.
            caster = vectors.Caster()


def test_following_starts_at_the_broadcast_messages_counter() -> None:
    follower = Follower(host_id=vectors.HOST.host_id)
    events = feed(follower, vectors.broadcast(counter=9))
    assert events[0] == Following(epoch=vectors.EPOCH.epoch, counter=9)


def test_a_casts_messages_that_do_not_fit_are_skipped_each_saying_why_and_the_rest_taken() -> None:
    follower, caster = following()
    status = {"conversation_id": "c", "kind": "status", "data": {}}
    cast = caster.cast(
        {"op": "item", "item": [3]},
        {"op": "item"},
        {"op": "item", "item": {"seq": "x"}},
        {"op": "item", "item": {"seq": -1}},
        {"op": "event", "event": "status"},
        {"op": "presence", "left": [-1], "joined": []},
        {"op": "ready"},
        {"op": "future"},
        {"op": "event", "event": status},
        {"op": "item", "item": vectors.item(1)},
        {"op": "item", "item": vectors.item(3)},
        {"op": "presence", "joined": [], "left": [], "count": 1},
    )
    events = follower.receive_cast(cast)
    assert events[:9] == [
        Skipped(op="item", reason="field 'item' must be dict"),
        Skipped(op="item", reason="field 'item' must be dict"),
        Skipped(op="item", reason="an item without a seq"),
        Skipped(op="item", reason="an item without a seq"),
        Skipped(op="event", reason="field 'event' must be dict"),
        Skipped(op="presence", reason="field 'left' must be a list of member ids"),
        Skipped(op="ready", reason="not a message a cast carries"),
        Skipped(op="future", reason="not a message a cast carries"),
        Event(event=status),
    ]
    assert events[9] == Item(item=vectors.item(3))
    assert isinstance(events[10], Presence)
    assert len(events) == 11
    assert follower.statistics().duplicates == 1
    assert (follower.cursor, follower.state) == (3, State.BROADCAST)


# -- a cast's shortcuts, held to parse_map -----------------------------------------------------


def _read_one_by_one(
    follower: Follower, messages: list[dict[str, Any]]
) -> tuple[list[FollowerEvent], int | None, int, Roster]:
    """What a cast of `messages` must give a following `follower`, each message read by
    `parse_map` as a channel message is: the events, the cursor, the duplicates dropped and the
    roster after it. `receive_cast` takes items and events by a shorter path; this is its oracle."""
    roster = copy.deepcopy(follower.roster)
    cursor, duplicates = follower.cursor, 0
    events: list[FollowerEvent] = []
    for message in messages:
        op = message["op"]
        if op not in ("item", "event", "presence"):
            events.append(Skipped(op=op, reason="not a message a cast carries"))
            continue
        try:
            parsed = parse_map(message)
        except BadRequest as exc:
            events.append(Skipped(op=op, reason=str(exc)))
            continue
        if isinstance(parsed, EventMessage):
            events.append(Event(event=parsed.event))
        elif isinstance(parsed, PresenceMessage | PresenceDelta):
            change = roster.apply(parsed)
            events.append(
                Presence(
                    members=tuple(roster.members),
                    whole=isinstance(parsed, PresenceMessage),
                    you=roster.you,
                    joined=tuple(change.joined),
                    left=tuple(change.left),
                )
            )
        else:
            assert isinstance(parsed, ItemMessage)
            seq = parsed.item.get("seq")
            if type(seq) is not int or seq < 0:
                events.append(Skipped(op="item", reason="an item without a seq"))
            elif cursor is not None and seq <= cursor:
                duplicates += 1
            elif cursor is not None and seq > cursor + 1:
                reason = "an item missing from the broadcast"
                events.append(CatchingUp(reason=reason, after=cursor))
                break
            else:
                cursor = seq
                events.append(Item(item=parsed.item))
    return events, cursor, duplicates, roster


_wrong = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(),
    st.text(max_size=3),
    st.binary(max_size=3),
    st.lists(st.integers(-2, 2), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(-2, 2), max_size=2),
)
_member = st.fixed_dictionaries(
    {
        "name": st.one_of(st.text(max_size=4), st.text(max_size=4), _wrong),
        "role": st.sampled_from(["view", "drive"]),
    },
    optional={
        "id": st.one_of(st.integers(0, 5), _wrong),
        "verified": st.one_of(st.booleans(), _wrong),
    },
)
_cast_message = st.one_of(
    # Mostly the next item, held ones and items one past it; some without a usable seq.
    st.builds(lambda step: ("next", step), st.sampled_from([-1, 0, 0, 0, 0, 1])),
    st.builds(lambda seq: {"op": "item", "item": {"seq": seq}}, _wrong),
    st.builds(lambda item: {"op": "item", "item": item}, _wrong),
    st.just({"op": "item"}),
    st.builds(lambda event: {"op": "event", "event": event}, st.one_of(_wrong, st.just({}))),
    st.just({"op": "event"}),
    st.builds(
        lambda joined, left: {"op": "presence", "joined": joined, "left": left},
        st.one_of(st.lists(_member, max_size=3), _wrong),
        st.one_of(st.lists(st.one_of(st.integers(0, 5), _wrong), max_size=3), _wrong),
    ),
    st.builds(
        lambda members, extra: {"op": "presence", "members": members, **extra},
        st.one_of(st.lists(_member, max_size=4), _wrong),
        st.fixed_dictionaries({}, optional={"you": _wrong, "left": _wrong}),
    ),
    st.builds(lambda op: {"op": op}, st.sampled_from(["snapshot", "ready", "broadcast", "x"])),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(_cast_message, max_size=8), min_size=1, max_size=4))
def test_a_casts_items_and_events_are_taken_as_parse_map_reads_them(
    casts: list[list[Any]],
) -> None:
    follower, caster = following()
    for drawn in casts:
        if follower.state is not State.BROADCAST:
            break  # a gap ended the broadcast for this channel
        messages, upto = [], follower.cursor
        for message in drawn:
            if isinstance(message, tuple):  # ("next", step): an item near the cursor
                upto = max(0, (upto if upto is not None else -1) + 1 + message[1])
                message = vectors.cast_item(upto)
            messages.append(message)
        expected, cursor, duplicates, roster = _read_one_by_one(follower, messages)
        before = follower.statistics().duplicates
        assert follower.receive_cast(caster.cast(*messages)) == expected
        assert follower.cursor == cursor
        assert follower.statistics().duplicates - before == duplicates
        assert (follower.roster.members, follower.roster.you) == (roster.members, roster.you)
