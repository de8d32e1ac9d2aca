"""Presence as deltas: `Presence` lists the first members and counts all, and each session
channel gets that listing once, then only what changed in it, coalesced. In memory, with the
channels faked: counts and bytes, no timing."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from tunnel.agents import DemoSession
from tunnel.app.host_messages import decode_host_message
from tunnel.app.requests import Subscribe, encode_request
from tunnel.host.presence import LISTED_MEMBERS, Listing, Member, Presence
from tunnel.host.session import SessionChannelHandler
from tunnel.log import Log, MemoryStore

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

ANA = Member(name="ana", role="drive")
BOB = Member(name="bob", role="view")
CARL = Member(name="carl", role="view")
DORA = Member(name="dora", role="drive")


# ---- Presence ---------------------------------------------------------------------------------


def test_a_listing_names_the_first_members_and_counts_everyone() -> None:
    presence = Presence()
    keys = [presence.join(Member(name=f"t{n}", role="view")) for n in range(LISTED_MEMBERS + 7)]
    listing = presence.listing()
    assert list(listing.members) == keys[:LISTED_MEMBERS]
    assert listing.count == LISTED_MEMBERS + 7
    presence.leave(keys[0])
    assert list(presence.listing().members) == keys[1 : LISTED_MEMBERS + 1]


def test_changes_between_listings_coalesce_and_a_member_who_came_and_went_is_in_neither() -> None:
    presence = Presence()
    ana = presence.join(ANA)
    before = presence.listing()
    bob = presence.join(BOB)
    carl = presence.join(CARL)
    presence.leave(ana)
    presence.leave(carl)
    joined, left = presence.listing().changes_since(before)
    assert (joined, left) == ({bob: BOB}, [ana])
    assert presence.listing().changes_since(presence.listing()) == ({}, [])
    assert Listing(members={}, count=0).changes_since(before) == ({}, [ana])


def test_leaving_twice_is_one_change() -> None:
    presence = Presence()
    key = presence.join(ANA)
    presence.leave(key)
    version = presence.version
    presence.leave(key)
    assert presence.version == version
    assert presence.members() == []


# ---- through the session handler --------------------------------------------------------------


async def until(predicate: Callable[[], bool]) -> None:
    """Let the other tasks run until `predicate` holds."""
    with anyio.fail_after(20):
        while not predicate():
            await anyio.sleep(0)


class PresenceChannel:
    """A teammate's channel that subscribes and records every presence message the host sends,
    and its size; `gate` closed holds every send after the first presence message."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.role = "view"
        self.presence: list[dict[str, Any]] = []
        self.presence_bytes = 0
        self.gate: anyio.Event | None = None
        self._requests, self._next = anyio.create_memory_object_stream[bytes](1)
        self._requests.send_nowait(encode_request(Subscribe(after=None, tail=0)))

    async def receive(self) -> bytes:
        return await self._next.receive()

    async def send(self, plaintext: bytes) -> None:
        message = decode_host_message(plaintext)
        if message["op"] != "presence":
            return
        if self.gate is not None and self.presence:
            await self.gate.wait()
        self.presence.append(message)
        self.presence_bytes += len(plaintext)

    def count(self) -> int:
        """The count of the last presence message."""
        return int(self.presence[-1]["count"])

    def members(self) -> dict[int, tuple[str, str]]:
        """The list the messages make, as a client keeps it: id -> (name, role)."""
        held: dict[int, tuple[str, str]] = {}
        for message in self.presence:
            if "members" in message:
                held = {m["id"]: (m["name"], m["role"]) for m in message["members"]}
                continue
            for member_id in message["left"]:
                del held[member_id]  # a delta never names an id the list lacks
            for m in message["joined"]:
                assert m["id"] not in held
                held[m["id"]] = (m["name"], m["role"])
        return held

    def you(self) -> int:
        return int(self.presence[0]["you"])


class Room:
    """One presence, one log, and a handler per channel, all in one task group."""

    def __init__(self, tg: anyio.abc.TaskGroup, log: Log, workspace: Path, presence: Presence):
        self.tg = tg
        self.presence = presence
        self.session = DemoSession(log=log, workspace=workspace, conversation_id="c1", delay=0)
        self.log = log
        self.scopes: dict[str, anyio.CancelScope] = {}

    def attach(self, channel: PresenceChannel) -> None:
        handler = SessionChannelHandler(
            channel, session=self.session, log=self.log, presence=self.presence
        )
        scope = anyio.CancelScope()
        self.scopes[channel.name] = scope

        async def run() -> None:
            with scope:
                await handler.run()

        self.tg.start_soon(run)

    def detach(self, channel: PresenceChannel) -> None:
        self.scopes.pop(channel.name).cancel()


@contextlib.asynccontextmanager
async def room(workspace: Path, presence: Presence | None = None) -> AsyncIterator[Room]:
    log = Log(MemoryStore())
    try:
        async with anyio.create_task_group() as tg:
            yield Room(tg, log, workspace, presence or Presence())
            tg.cancel_scope.cancel()
    finally:
        await log.aclose()


@pytest.mark.parametrize("count", [100, 200])
async def test_each_join_costs_every_channel_one_small_delta(tmp_path: Path, count: int) -> None:
    channels = [PresenceChannel(f"t{n}") for n in range(count)]
    per_join: list[int] = []
    async with room(tmp_path) as here:
        for n, channel in enumerate(channels):
            before = sum(c.presence_bytes for c in channels)
            here.attach(channel)
            # Every channel told of this join (the joiner its list) before the next one.
            await until(
                lambda n=n: all(
                    len(c.presence) == n + 1 - i for i, c in enumerate(channels[: n + 1])
                )
            )
            per_join.append(sum(c.presence_bytes for c in channels) - before)
        await wait_all_tasks_blocked()
        listed = {c.you(): (c.name, "view") for c in channels[:LISTED_MEMBERS]}
        for channel in channels:
            assert channel.members() == listed
            assert channel.count() == count
            # The listing once, then one delta per later join (a count, past the listed ones).
            assert len(channel.presence) == count - channels.index(channel)
            assert "members" in channel.presence[0]
            assert all("members" not in message for message in channel.presence[1:])
    # The n-th join: a list of up to LISTED_MEMBERS members to the joiner, a delta of one
    # member or a count to each of the others: bytes linear in n (a whole list to everyone
    # would be n * n).
    for n, size in enumerate(per_join, 1):
        assert size <= 100 * n, (n, size)
    assert per_join[-1] >= 30 * count  # every channel was told, at least


async def test_many_joins_at_once_end_with_the_same_list_in_fewer_messages(
    tmp_path: Path,
) -> None:
    count = 200
    channels = [PresenceChannel(f"t{n}") for n in range(count)]
    async with room(tmp_path) as here:
        for channel in channels:
            here.attach(channel)
        await wait_all_tasks_blocked()
        ids = {channel.you() for channel in channels}
        assert len(ids) == count
        listed = {c.you(): (c.name, "view") for c in channels[:LISTED_MEMBERS]}
        for channel in channels:
            assert channel.members() == listed
            assert channel.count() == count
        messages = sum(len(channel.presence) for channel in channels)
        assert messages <= count * (count + 1) // 2
        assert sum(channel.presence_bytes for channel in channels) <= 100 * count * (count + 1) // 2


async def test_a_channel_behind_gets_one_combined_delta(tmp_path: Path) -> None:
    presence = Presence()
    ana = PresenceChannel("ana")
    async with room(tmp_path, presence) as here:
        here.attach(ana)
        await wait_all_tasks_blocked()
        ana.gate = anyio.Event()
        bob = presence.join(BOB)
        await wait_all_tasks_blocked()  # the delta for bob waits at the gate
        carl = presence.join(CARL)
        dora = presence.join(DORA)
        presence.leave(carl)
        presence.leave(bob)
        ana.gate.set()
        await wait_all_tasks_blocked()
        assert len(ana.presence) == 3
        first, held, combined = ana.presence
        assert first["members"] == [{"id": ana.you(), "name": "ana", "role": "view"}]
        assert (held["joined"], held["left"]) == ([{"id": bob, "name": "bob", "role": "view"}], [])
        # Four changes in one: carl came and went, so he is in neither list.
        assert combined["joined"] == [{"id": dora, "name": "dora", "role": "drive"}]
        assert combined["left"] == [bob]
        assert ana.members() == {ana.you(): ("ana", "view"), dora: ("dora", "drive")}


async def test_a_teammate_who_leaves_is_one_id_in_a_delta(tmp_path: Path) -> None:
    ana, bob = PresenceChannel("ana"), PresenceChannel("bob")
    async with room(tmp_path) as here:
        here.attach(ana)
        await wait_all_tasks_blocked()
        here.attach(bob)
        await wait_all_tasks_blocked()
        bob_id = bob.you()
        here.detach(bob)
        # The cancellation reaches bob's handler in a later turn of the loop: wait for its word.
        await until(lambda: len(ana.presence) >= 3)
        await wait_all_tasks_blocked()
        assert len(ana.presence) == 3
        assert ana.presence[-1] == {"op": "presence", "joined": [], "left": [bob_id], "count": 1}
        assert ana.members() == {ana.you(): ("ana", "view")}


async def test_someone_who_came_and_went_before_a_channel_was_told_costs_it_nothing(
    tmp_path: Path,
) -> None:
    presence = Presence()
    ana = PresenceChannel("ana")
    async with room(tmp_path, presence) as here:
        here.attach(ana)
        await wait_all_tasks_blocked()
        presence.leave(presence.join(BOB))
        await wait_all_tasks_blocked()
        assert len(ana.presence) == 1
        carl = presence.join(CARL)
        await wait_all_tasks_blocked()
        assert ana.presence[-1]["joined"] == [{"id": carl, "name": "carl", "role": "view"}]
