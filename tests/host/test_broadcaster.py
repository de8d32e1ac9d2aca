"""`Broadcaster` in process: what its `broadcast` message holds, and that it always fits."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import anyio
import pytest

from tunnel.app.follower import cast_messages
from tunnel.app.host_messages import BroadcastStart, PresenceDelta, parse
from tunnel.e2e.broadcast import CastOpener
from tunnel.e2e.crypto import TAG_SIZE
from tunnel.e2e.identity import HostIdentity
from tunnel.handshake import MAX_NAME_LENGTH
from tunnel.host import broadcast
from tunnel.host.broadcast import (
    BURST_PAUSE,
    CAST_INTERVAL,
    Broadcaster,
)
from tunnel.host.presence import LISTED_MEMBERS, Member, Presence
from tunnel.log import Log, MemoryStore, NewItem
from tunnel.proto import DEFAULT_LIMITS


def broadcaster(presence: Presence, identity: HostIdentity | None = None) -> Broadcaster:
    return Broadcaster(
        identity=identity or HostIdentity.generate(),
        log=Log(MemoryStore()),
        conversation_id="main",
        presence=presence,
        link=lambda: None,
    )


def test_the_broadcast_message_lists_the_first_members_counts_all_and_fits_one_message() -> None:
    presence = Presence()
    widest = "\U0001f600" * MAX_NAME_LENGTH  # four UTF-8 bytes each
    for _ in range(LISTED_MEMBERS + 950):
        presence.join(Member(name=widest, role="drive"))
    message = broadcaster(presence).start_message(you=LISTED_MEMBERS + 10)
    # What a channel's `send_built` accepts: one `data` frame minus the AEAD tag.
    assert len(message) <= DEFAULT_LIMITS.largest_data - TAG_SIZE
    start = parse(message)
    assert isinstance(start, BroadcastStart)
    assert [m.id for m in start.members] == list(range(LISTED_MEMBERS))
    assert start.count == LISTED_MEMBERS + 950
    assert start.you == LISTED_MEMBERS + 10


def test_the_broadcast_message_says_the_next_cast_and_the_host_key() -> None:
    presence = Presence()
    host = presence.join(Member(name="host", role="host"))
    identity = HostIdentity.generate()
    cast = broadcaster(presence, identity)
    start = parse(cast.start_message(you=host))
    assert isinstance(start, BroadcastStart)
    assert start.counter == 0
    assert start.public_key == identity.public_key
    assert [(m.id, m.name, m.role) for m in start.members] == [(host, "host", "host")]
    assert start.count == 1
    cast.new_epoch()
    again = parse(cast.start_message(you=host))
    assert isinstance(again, BroadcastStart)
    assert (again.epoch, again.key) != (start.epoch, start.key)


class FakeLink:
    """What the broadcaster uses of the host's link: it keeps the casts it is given."""

    def __init__(self) -> None:
        self.casts: list[bytes] = []
        self.closing = False
        self.connection = self

    def cast(self, data: bytes, *, group: int = 0) -> None:
        self.casts.append(data)

    def flush(self) -> None:
        pass

    async def wait_writable(self) -> None:
        pass


def casting_to(
    link: FakeLink, log: Log, presence: Presence, identity: HostIdentity | None = None
) -> Broadcaster:
    """A broadcaster of conversation `main` whose casts go to `link`."""
    return Broadcaster(
        identity=identity or HostIdentity.generate(),
        log=log,
        conversation_id="main",
        presence=presence,
        link=lambda: link,  # type: ignore[arg-type,return-value]
    )


async def cast_deltas(
    presence: Presence,
    change: Callable[[], Awaitable[None]],
    casts: int,
    before_run: Callable[[], object] = lambda: None,
) -> list[PresenceDelta]:
    """The presence deltas cast while `change` changes `presence` at once, once `casts` casts
    were made (each checked to fit one frame), opened as a teammate that joined before
    (`before_run` is called once it joined, before the broadcaster runs)."""
    identity = HostIdentity.generate()
    link = FakeLink()
    async with Log(MemoryStore()) as log:
        cast = casting_to(link, log, presence, identity)
        start = parse(cast.start_message(you=0))
        assert isinstance(start, BroadcastStart)
        cast.joined(object())
        before_run()
        async with anyio.create_task_group() as tg:
            await tg.start(cast.run)
            await change()
            with anyio.fail_after(10):
                while len(link.casts) < casts:
                    await anyio.sleep(0.01)
            await anyio.sleep(0.05)  # and no more come
            tg.cancel_scope.cancel()
    assert all(len(each) <= DEFAULT_LIMITS.largest_data for each in link.casts)
    opener = CastOpener(
        host_id=identity.host_id,
        public_key=identity.public_key,
        epoch=start.epoch,
        key=start.key,
        counter=start.counter,
    )
    deltas = []
    for each in link.casts:
        for message in cast_messages(opener.open(each)):
            delta = parse(message)
            assert isinstance(delta, PresenceDelta)
            deltas.append(delta)
    return deltas


@pytest.mark.anyio
async def test_a_crowd_joining_is_cast_as_the_first_members_listed_and_the_count_of_all() -> None:
    presence = Presence()
    joiners = 20 * LISTED_MEMBERS

    async def crowd() -> None:  # at once: one change, as far as the casts can tell
        for _ in range(joiners):
            presence.join(Member(name="\U0001f600" * MAX_NAME_LENGTH, role="view"))

    (delta,) = await cast_deltas(presence, crowd, casts=1)
    assert [m.id for m in delta.joined] == list(range(LISTED_MEMBERS))
    assert (delta.left, delta.count) == ([], joiners)


@pytest.mark.anyio
async def test_a_listed_member_who_leaves_makes_room_for_the_next_and_others_are_only_counted() -> (
    None
):
    presence = Presence()
    keys = [presence.join(Member(name=f"t{n}", role="view")) for n in range(LISTED_MEMBERS + 5)]

    async def change() -> None:
        presence.leave(keys[3])  # listed: the first unlisted one takes its place
        presence.leave(keys[-1])  # not listed: only the count says it
        presence.join(Member(name="late", role="drive"))  # not listed either

    (delta,) = await cast_deltas(presence, change, casts=1)
    assert [m.id for m in delta.joined] == [keys[LISTED_MEMBERS]]
    assert delta.left == [keys[3]]
    assert delta.count == LISTED_MEMBERS + 4


@pytest.mark.anyio
async def test_a_change_teammates_cannot_see_is_not_cast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(broadcast, "PRESENCE_QUIET", 0.01)
    presence = Presence()
    keys = [presence.join(Member(name=f"t{n}", role="view")) for n in range(LISTED_MEMBERS + 1)]

    async def changes() -> None:
        # An unlisted member who came and went: the listing and the count are as they were.
        presence.leave(presence.join(Member(name="brief", role="view")))
        await anyio.sleep(0.2)  # long past PRESENCE_QUIET: that change had its chance
        presence.leave(keys[0])

    deltas = await cast_deltas(presence, changes, casts=1)
    assert [(d.left, [m.id for m in d.joined], d.count) for d in deltas] == [
        ([keys[0]], [keys[LISTED_MEMBERS]], LISTED_MEMBERS)
    ]


class CountingLink(FakeLink):
    """A fake link that counts the messages each cast makes: one per joined channel."""

    def __init__(self, readers: Callable[[], int]) -> None:
        super().__init__()
        self.readers = readers
        self.messages = 0

    def cast(self, data: bytes, *, group: int = 0) -> None:
        super().cast(data)
        self.messages += self.readers()


def counted(cast: Broadcaster) -> int:
    """The members a channel joining now is told are attached."""
    start = parse(cast.start_message(you=0))
    assert isinstance(start, BroadcastStart)
    return start.count


async def presence_messages_per_join(joiners: int, pause: float) -> float:
    """Presence messages the joined channels get per join while `joiners` join one after
    another, `pause` seconds apart (a slower machine attaches them further apart)."""
    presence = Presence()
    joined: set[object] = set()
    link = CountingLink(lambda: len(joined))
    async with Log(MemoryStore()) as log:
        cast = casting_to(link, log, presence)
        async with anyio.create_task_group() as tg:
            await tg.start(cast.run)
            for n in range(joiners):
                presence.join(Member(name=f"t{n}", role="view"))
                channel = object()
                cast.joined(channel)
                joined.add(channel)
                await anyio.sleep(pause)
            with anyio.fail_after(10):
                while counted(cast) < joiners:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    return link.messages / joiners


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_a_join_costs_a_few_presence_messages_however_slow_the_joins_come(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The pauses stand for machines of different speeds: the count of presence messages per
    # join must not grow with them (a pacing by time would cast more often per join). The
    # quiet moment that casts the last changes is made long, so that a busy machine stalling
    # this process between two joins does not pass for one.
    monkeypatch.setattr(broadcast, "PRESENCE_QUIET", 1.0)
    per_join = [await presence_messages_per_join(120, pause) for pause in (0.0, 0.004, 0.03)]
    assert all(cost <= 4.0 for cost in per_join), per_join
    assert max(per_join) - min(per_join) <= 1.5, per_join


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_a_steady_trickle_of_joins_into_a_large_room_is_cast_before_it_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each join comes sooner than PRESENCE_QUIET after the last, and they never number half the
    # room: only PRESENCE_LATEST makes them cast while the trickle lasts, not after it.
    monkeypatch.setattr(broadcast, "PRESENCE_QUIET", 1.0)
    monkeypatch.setattr(broadcast, "PRESENCE_LATEST", 0.2)
    room, trickle, pause = 100, 30, 0.04
    presence = Presence()
    link = FakeLink()
    async with Log(MemoryStore()) as log:
        cast = casting_to(link, log, presence)
        for n in range(room):
            presence.join(Member(name=f"t{n}", role="view"))
            cast.joined(object())
        async with anyio.create_task_group() as tg:
            await tg.start(cast.run)
            with anyio.fail_after(10):
                while not link.casts:  # the room as it was when the broadcaster started
                    await anyio.sleep(0.01)
            for n in range(trickle):
                presence.join(Member(name=f"late{n}", role="view"))
                cast.joined(object())
                await anyio.sleep(pause)
            during = len(link.casts) - 1
            tg.cancel_scope.cancel()
    # The trickle lasted six times PRESENCE_LATEST or more (longer on a busy machine): at least
    # one cast came while it went on.
    assert during >= 1, len(link.casts)


async def cast_stream(gaps: list[float], link: FakeLink) -> int:
    """Append one entry after each gap (seconds), return once all are cast: how many gaps a
    busy machine stretched by half a BURST_PAUSE or more (each may cost a cast)."""
    stretched = 0
    async with Log(MemoryStore()) as log:
        cast = casting_to(link, log, Presence())
        cast.joined(object())
        async with anyio.create_task_group() as tg:
            await tg.start(cast.run)
            for n, gap in enumerate(gaps):
                before = anyio.current_time()
                await anyio.sleep(gap)
                stretched += anyio.current_time() - before - gap >= BURST_PAUSE / 2
                await log.append("main", NewItem(type="message", data={"n": n}, created_by="a"))
            with anyio.fail_after(10):
                while cast.last_seq < len(gaps) - 1:
                    await anyio.sleep(0.001)
            tg.cancel_scope.cancel()
    return stretched


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_a_burst_is_cast_in_its_first_entry_one_cast_per_interval_and_its_end() -> None:
    link = FakeLink()
    started = anyio.current_time()
    stretched = await cast_stream([0.001] * 150, link)  # a fast agent's burst
    lasted = anyio.current_time() - started
    # Its first entry at once, then one cast per CAST_INTERVAL while it lasts, and its end (at
    # most two more for the scheduler's jitter); one per entry would be 150.
    bound = 1 + math.ceil(lasted / CAST_INTERVAL) + 1 + 2 + 2 * stretched
    assert len(link.casts) <= bound, (len(link.casts), lasted, stretched)


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_entries_further_apart_than_the_interval_are_each_cast_alone() -> None:
    link = FakeLink()
    await cast_stream([CAST_INTERVAL * 1.5] * 6, link)
    assert len(link.casts) == 6


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_a_stream_that_comes_in_clumps_is_cast_once_per_interval_not_per_clump() -> None:
    # Clumps of two entries BURST_PAUSE * 2.4 apart, as each of ten conversations written at
    # once gets them: a fixed pause of BURST_PAUSE would cast every clump (30).
    link = FakeLink()
    gaps = [BURST_PAUSE * 2.4 if n % 2 else 0.0 for n in range(60)]
    started = anyio.current_time()
    await cast_stream(gaps, link)
    lasted = anyio.current_time() - started
    assert len(link.casts) <= 1 + math.ceil(lasted / CAST_INTERVAL) + 2, (len(link.casts), lasted)


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_a_burst_that_pauses_is_cast_then_without_waiting_for_the_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(broadcast, "CAST_INTERVAL", 60.0)
    link = FakeLink()
    # A burst of 40 entries with no pause: its first at once, the rest once it pauses; were the
    # end cast only at the interval, the minute would fail the test.
    await cast_stream([0.0] * 40, link)
    assert len(link.casts) <= 3


@pytest.mark.anyio
async def test_a_channel_that_joined_before_the_broadcaster_ran_is_told_what_changed_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A conversation's broadcaster may hand channels their `broadcast` message before `run`
    # started: the changes made in between are cast when it starts, not taken as the start.
    monkeypatch.setattr(broadcast, "PRESENCE_QUIET", 0.01)
    presence = Presence()
    presence.join(Member(name="host", role="host"))
    keys: list[int] = []

    async def later() -> None:
        await anyio.sleep(0.2)  # after the first cast, a change of its own
        keys.append(presence.join(Member(name="u", role="view")))

    def join_before_run() -> None:
        keys.append(presence.join(Member(name="t", role="view")))

    deltas = await cast_deltas(presence, later, casts=2, before_run=join_before_run)
    assert [([m.id for m in d.joined], d.left, d.count) for d in deltas] == [
        ([keys[0]], [], 2),
        ([keys[1]], [], 3),
    ]
