"""The host's broadcast end to end: a relay subprocess, a sharing host, Python teammates.

Every teammate ends with exactly the host's items, once each and in order, whether it got them
as casts, caught up on its channel after a hostile relay or a colluding teammate broke a cast, or
was cut for falling behind (docs/application.md, "The broadcast").
"""

from __future__ import annotations

import contextlib
import logging
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import msgpack
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tests.support import RelayProcess, attach_proxy, via
from tunnel.app.follower import FollowerEvent
from tunnel.app.host_messages import BroadcastStart, parse_map
from tunnel.app.requests import PermissionAnswer, Prompt
from tunnel.e2e.broadcast import COUNTER_SIZE, EPOCH_SIZE, SIGN_LABEL, SIGNATURE_SIZE
from tunnel.e2e.crypto import ShareLink
from tunnel.host.presence import LISTED_MEMBERS
from tunnel.host.share import Shared
from tunnel.proto import Cast, Cut, decode_frame, encode_frame
from tunnel.proto.frames import encode_cast
from tunnel.teammate.client import RevokedError, TeammateSession, connect_teammate

from .conftest import sharing, wait_online
from .teammate import Teammate, attached

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

CROWD = 300


def relay_metric(relay: RelayProcess, name: str) -> float:
    """One sample of the relay's /metrics (loopback)."""
    with urllib.request.urlopen(f"{relay.url}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


@pytest.fixture
def crowd_relay(tmp_path: Path) -> Iterator[RelayProcess]:
    process = RelayProcess(
        tmp_path,
        "--max-teammates-per-host",
        str(CROWD + 10),
        "--max-connections-per-ip",
        "0",
        "--max-channels-per-link",
        "0",
    ).start()
    try:
        yield process
    finally:
        process.stop()


async def run_turn(driver: Teammate, text: str) -> None:
    """Prompt the demo agent, allow its tool, and wait until the agent is idle again."""
    answered = {
        item["data"]["request_id"] for item in driver.items if item["type"] == "permission_request"
    }
    await driver.send(Prompt(text=text))

    def request(t: Teammate) -> dict[str, Any] | None:
        for item in t.items:
            if item["type"] == "permission_request" and item["data"]["request_id"] not in answered:
                return item
        return None

    await driver.wait_for(lambda t: request(t) is not None, within=60)
    asked = request(driver)
    assert asked is not None
    seen = len(driver.events)
    await driver.send(
        PermissionAnswer(request_id=asked["data"]["request_id"], option_id="allow_once")
    )

    def idle(t: Teammate) -> bool:
        return any(
            event["kind"] == "status" and event["data"]["state"] == "idle"
            for event in t.events[seen:]
        )

    await driver.wait_for(idle, within=60)


async def head_of(shared: Shared) -> int:
    info = await shared.log.get_conversation("main")
    assert info is not None
    return info.last_seq


ATTACHING = 32
"""Teammates attaching at once."""


@contextlib.asynccontextmanager
async def crowd_of(shared: Shared, prefix: str, n: int) -> AsyncIterator[list[Teammate]]:
    """`n` viewers, attaching at most ATTACHING at a time (the host accepts a bounded backlog of
    new channels), each joined to the broadcast; they stay until the block ends."""
    crowd: list[Teammate] = []
    stop = anyio.Event()
    limiter = anyio.CapacityLimiter(ATTACHING)

    async def viewer(name: str) -> None:
        async with contextlib.AsyncExitStack() as stack:
            async with limiter:
                teammate = await stack.enter_async_context(
                    attached(str(shared.host.view_link), name)
                )
                await teammate.wait_for(joined, within=120)
            crowd.append(teammate)
            await stop.wait()

    async with anyio.create_task_group() as tg:
        for k in range(n):
            tg.start_soon(viewer, f"{prefix}{k:03}")
        with anyio.fail_after(180):
            while len(crowd) < n:
                await anyio.sleep(0.1)
        yield crowd
        stop.set()


def told(teammate: Teammate) -> int:
    """Messages the teammate got that a cast can carry: items, events, presence."""
    return len(teammate.items) + len(teammate.events) + len(teammate.presence)


def joined(teammate: Teammate) -> bool:
    """The teammate got its `broadcast` message (the client hands it on as the member list)."""
    return teammate.session.you is not None


async def test_three_hundred_teammates_each_get_every_item_exactly_once(
    crowd_relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    async with (
        sharing(crowd_relay.url, tmp_path, agent="demo", workspace=workspace) as shared,
        attached(str(shared.host.drive_link), "driver") as driver,
    ):
        async with crowd_of(shared, "v", CROWD) as crowd:
            await driver.wait_for(joined)
            casts_before = relay_metric(crowd_relay, "relay_casts_total")
            told_before = told(driver)
            for turn in range(2):
                await run_turn(driver, f"turn {turn}")
            head = await head_of(shared)
            everything = list(range(head + 1))
            for teammate in [driver, *crowd]:
                await teammate.wait_for(lambda t: t.seqs()[-1:] == [head], within=60)

        for teammate in [driver, *crowd]:
            assert teammate.seqs() == everything  # every item, once, in order
        casts = relay_metric(crowd_relay, "relay_casts_total") - casts_before
        # Sealed once for everyone: the host sent at most one cast per message a teammate got
        # (items, events; fewer when they come together), not one per message per teammate.
        assert 1 <= casts <= told(driver) - told_before
        assert relay_metric(crowd_relay, "relay_cast_cuts_total") == 0


async def test_presence_for_n_joins_is_linear_in_n(
    crowd_relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    joins = 120
    async with (
        sharing(crowd_relay.url, tmp_path, agent="demo", workspace=workspace) as shared,
        attached(str(shared.host.view_link), "first") as first,
    ):
        await first.wait_for(joined)
        casts_before = relay_metric(crowd_relay, "relay_casts_total")
        frames_before = relay_metric(crowd_relay, 'relay_forwarded_frames_total{direction="down"}')
        async with crowd_of(shared, "p", joins) as crowd:
            await first.wait_for(lambda t: t.session.member_count == joins + 2, within=120)
            for teammate in crowd:
                await teammate.wait_for(lambda t: t.session.member_count == joins + 2)
                assert len(teammate.session.members) == LISTED_MEMBERS
        await first.wait_for(lambda t: t.session.member_count == 2, within=60)
        assert len(first.session.members) == 2

        casts = relay_metric(crowd_relay, "relay_casts_total") - casts_before
        frames = relay_metric(crowd_relay, 'relay_forwarded_frames_total{direction="down"}')
        # The host casts at most one delta per change (N joins and N leaves), coalesced when
        # they come together; the first teammate got no more presence messages than that.
        assert casts <= 2 * joins
        assert len(first.presence) <= 2 * joins + 1
        # Each join costs every attached channel at most one cast: O(N) per join.
        assert frames - frames_before <= 2 * joins * (joins + 2) + 20 * joins


# -- a hostile relay ------------------------------------------------------------------------


def mischief(kind: str) -> Callable[[bytes], bytes | list[bytes]]:
    """What a relay between one teammate and the host does to the second cast it carries."""
    casts = 0
    held: list[bytes] = []

    def rewrite(message: bytes) -> bytes | list[bytes]:
        nonlocal casts
        frame = decode_frame(message)
        if not isinstance(frame, Cast):
            return message
        casts += 1
        if kind == "cut storm":
            # Every third cast dropped for a cut, and cuts around every other: a cut is not
            # authenticated, so it may only ever lead to a catch-up on the channel.
            assert frame.channel is not None
            cut = encode_frame(Cut(channel=frame.channel))
            if casts % 3 == 0:
                return [cut]
            return [cut, message, cut, cut] if casts % 3 == 1 else message
        if held:  # reorder: the held one after this one
            return [message, held.pop()]
        if casts != 2:
            return message
        if kind == "tamper":
            data = bytearray(frame.data)
            data[EPOCH_SIZE + COUNTER_SIZE + 2] ^= 1  # in the ciphertext
            assert frame.channel is not None
            return encode_cast(frame.channel, bytes(data))
        if kind == "replay":
            return [message, message]
        if kind == "reorder":
            held.append(message)
            return []
        assert kind == "drop"
        return []

    return rewrite


@contextlib.asynccontextmanager
async def through(
    relay_url: str, link: ShareLink, name: str, rewrite: Any
) -> AsyncIterator[Teammate]:
    async with (
        attach_proxy(relay_url, down=rewrite) as proxy_url,
        attached(via(link, proxy_url), name) as teammate,
    ):
        yield teammate


@pytest.mark.parametrize("kind", ["tamper", "replay", "reorder", "drop", "cut storm"])
async def test_a_cast_broken_by_the_relay_is_refused_and_the_teammate_catches_up(
    relay: RelayProcess,
    tmp_path: Path,
    workspace: Path,
    kind: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="tunnel.teammate")
    async with (
        sharing(relay.url, tmp_path, agent="demo", workspace=workspace) as shared,
        attached(str(shared.host.drive_link), "driver") as driver,
        through(relay.url, shared.host.view_link, "victim", mischief(kind)) as victim,
    ):
        await victim.wait_for(joined)
        for turn in range(3):
            await run_turn(driver, f"turn {turn}")
        head = await head_of(shared)
        await victim.wait_for(lambda t: t.seqs()[-1:] == [head], within=60)
        assert victim.seqs() == list(range(head + 1))
        assert driver.seqs() == victim.seqs()
        assert victim.items == driver.items
    assert "catching up on the channel" in caplog.text


async def test_a_teammate_that_knows_the_key_cannot_forge_a_cast_for_another(
    relay: RelayProcess, tmp_path: Path, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tunnel.teammate")
    starts: list[BroadcastStart] = []

    def forge(message: bytes) -> bytes | list[bytes]:
        """The colluding relay replaces the victim's next cast with one sealed with the key the
        colluder holds, at the right counter, but signed with a key that is not the host's."""
        frame = decode_frame(message)
        if not isinstance(frame, Cast) or not starts or forged:
            return message
        assert frame.channel is not None
        forged.append(frame.data)
        start = starts[0]
        head = frame.data[: EPOCH_SIZE + COUNTER_SIZE]
        text = {"op": "item", "item": {"seq": 10**6, "type": "user_message", "data": {}}}
        plaintext = msgpack.packb([encode_item(text)], use_bin_type=True)
        counter = head[EPOCH_SIZE:]
        aad = start_host_id[0].encode() + start.epoch + counter
        sealed = AESGCM(start.key).encrypt(bytes(4) + counter, plaintext, aad)
        signed = SIGN_LABEL + start_host_id[0].encode() + head + sealed
        signature = Ed25519PrivateKey.generate().sign(signed)
        assert len(signature) == SIGNATURE_SIZE
        return encode_cast(frame.channel, head + sealed + signature)

    forged: list[bytes] = []
    start_host_id: list[str] = []

    async with (
        sharing(relay.url, tmp_path, agent="demo", workspace=workspace) as shared,
        attached(str(shared.host.drive_link), "driver") as driver,
        attached(str(shared.host.view_link), "colluder") as colluder,
        through(relay.url, shared.host.view_link, "victim", forge) as victim,
    ):
        start_host_id.append(shared.host.host_id)
        await colluder.wait_for(joined)
        await victim.wait_for(joined)
        # The colluder holds the epoch key like every teammate: here, read from its channel.
        starts.append(await colluder_start(colluder))
        for turn in range(2):
            await run_turn(driver, f"turn {turn}")
        head = await head_of(shared)
        await victim.wait_for(lambda t: t.seqs()[-1:] == [head], within=60)
        assert forged
        assert victim.seqs() == list(range(head + 1))
        assert victim.items == driver.items
    assert "a cast that the host did not sign" in caplog.text


def encode_item(message: dict[str, Any]) -> bytes:
    packed: bytes = msgpack.packb(message, use_bin_type=True)
    return packed


async def colluder_start(colluder: Teammate) -> BroadcastStart:
    """The `broadcast` message the colluder's channel got, asked for again: a resubscribe of a
    joined channel ends with a new `broadcast` message for the same epoch."""
    got = keep_broadcast_starts(colluder.session)
    await colluder.session.subscribe(colluder.session.follower.cursor)
    with anyio.fail_after(30):
        while not got:
            await anyio.sleep(0.05)
    return got[0]


def keep_broadcast_starts(session: TeammateSession) -> list[BroadcastStart]:
    """From now on, every `broadcast` message `session` takes in, in a list."""
    got: list[BroadcastStart] = []
    original = session.follower.receive_message

    def keep(message: Mapping[str, Any]) -> list[FollowerEvent]:
        if message.get("op") == "broadcast":
            start = parse_map(message)
            assert isinstance(start, BroadcastStart)
            got.append(start)
        return original(message)

    session.follower.receive_message = keep  # type: ignore[method-assign]
    return got


# -- a teammate that falls behind -----------------------------------------------------------


@pytest.fixture
def tight_relay(tmp_path: Path) -> Iterator[RelayProcess]:
    process = RelayProcess(tmp_path, "--max-cast-backlog", "1").start()
    try:
        yield process
    finally:
        process.stop()


async def test_a_teammate_cut_for_falling_behind_catches_up_exactly_once(
    tight_relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    async with (
        sharing(tight_relay.url, tmp_path, agent="demo", workspace=workspace) as shared,
        attached(str(shared.host.drive_link), "driver") as driver,
        connect_teammate(shared.host.view_link, name="slow") as session,
        anyio.create_task_group() as tg,
    ):
        slow = Teammate(session=session)
        await session.subscribe()
        reading = anyio.CancelScope()
        tg.start_soon(pump_until, slow, reading)
        await slow.wait_for(joined)
        reading.cancel()
        # It stops reading: the relay fills the channel's window (1 MiB), then cuts it.
        big = "x" * 60_000
        cuts = 0.0
        for turn in range(60):
            await run_turn(driver, f"{turn} {big}")
            cuts = relay_metric(tight_relay, "relay_cast_cuts_total")
            if cuts:
                break
        assert cuts == 1
        # Not before the channel's window (1 MiB) was full: about 17 turns of 60 KB prompts.
        assert turn >= 10
        head = await head_of(shared)
        tg.start_soon(slow.pump)
        await slow.wait_for(lambda t: t.seqs()[-1:] == [head], within=60)
        assert slow.seqs() == list(range(head + 1))
        assert slow.items == driver.items
        tg.cancel_scope.cancel()


async def pump_until(teammate: Teammate, scope: anyio.CancelScope) -> None:
    with scope:
        await teammate.pump()


async def test_revoke_starts_a_new_epoch_that_the_revoked_never_get(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    async with sharing(relay.url, tmp_path, agent="demo", workspace=workspace) as shared:
        async with connect_teammate(shared.host.view_link, name="old") as old:
            before = await broadcast_start(old)
            assert shared.console.revoke is not None
            await shared.console.revoke()
            with pytest.raises(RevokedError), anyio.fail_after(30):
                await read_until_closed(old)
        await wait_online(shared.host.view_link)
        async with connect_teammate(shared.host.view_link, name="new") as new:
            after = await broadcast_start(new)
        assert after.epoch != before.epoch
        assert after.key != before.key
        assert after.public_key == before.public_key == shared.host.identity.public_key


async def broadcast_start(session: TeammateSession) -> BroadcastStart:
    """Subscribe, and return the `broadcast` message the channel gets after its snapshot."""
    got = keep_broadcast_starts(session)
    await session.subscribe()
    with anyio.fail_after(30):
        while not got:
            await session.receive()
    return got[0]


async def read_until_closed(session: TeammateSession) -> None:
    while True:
        await session.receive()
