"""The relay's broadcast (docs/protocol.md, "Broadcast"): the Switch copies a host's casts to the
channels the host joined, in order with their data, and cuts a channel that falls too far behind.

An in-process relay without a network: one `Switch`, whose links run as tunnel/relay/server.py
runs them, over in-memory WebSockets (tests/link/memory_websocket.py) to hosts and teammates that
are plain `Link` + `ChannelMux` endpoints. Every frame goes through real sans-I/O Connections on
both ends, and a window as small as a few casts makes a teammate fall behind at once.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable
from functools import partial

import anyio
import msgpack
import pytest

from tests.link.memory_websocket import Endpoint, websocket_pair
from tunnel.e2e.crypto import SECRET_SIZE, ShareSecrets
from tunnel.e2e.identity import CHALLENGE_SIZE, HostIdentity
from tunnel.handshake import (
    INSTANCE_SIZE,
    host_hello,
    parse_relay_hello,
    relay_hello,
    teammate_hello,
)
from tunnel.link import Casted, ChannelClosedError, Link, LinkChannel
from tunnel.proto import (
    MAX_CAST_GROUPS,
    CastCut,
    ChannelClosed,
    CloseCode,
    Connection,
    Event,
    Limits,
    Side,
)
from tunnel.relay.metrics import RelayMetrics
from tunnel.relay.switch import Kind, Peer, Switch, SwitchLimits

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

PUBLIC_URL = "http://127.0.0.1:1"
LIMITS = Limits(initial_window=1000, max_data_size=1000)
"""Every link's limits: a window of ten casts."""
CAST = 100
"""Bytes of every cast here."""
BACKLOG = 3 * CAST
"""The relay's max_cast_backlog: three casts beyond a channel's window."""

IDENTITY = HostIdentity.from_seed(bytes(range(32)))
SECRETS = ShareSecrets(view=bytes([1]) * SECRET_SIZE, drive=bytes([2]) * SECRET_SIZE)
INSTANCE = bytes(range(INSTANCE_SIZE))


def cast_bytes(n: int) -> bytes:
    return f"cast {n}:".encode().ljust(CAST, b".")


class Relay:
    """A Switch serving links in a task group, as tunnel/relay/server.py serves WebSockets."""

    def __init__(self, tg: anyio.abc.TaskGroup, *, max_cast_backlog: int) -> None:
        self.metrics = RelayMetrics()
        self.switch = Switch(
            public_url=PUBLIC_URL,
            limits=SwitchLimits(max_cast_backlog=max_cast_backlog),
            link_limits=LIMITS,
            metrics=self.metrics,
        )
        self.endpoints: list[Endpoint] = []
        self._tg = tg

    def sample(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    async def _serve(self, peer: Peer) -> None:
        try:
            await peer.link.run(partial(self.switch.on_event, peer))
        finally:
            self.switch.disconnect(peer)

    async def _connect(self, kind: Kind) -> Endpoint:
        client, server = websocket_pair()
        link = Link(server, Connection(Side.ACCEPTER, limits=LIMITS), label=kind.value)
        peer = Peer(link=link, kind=kind, ip="127.0.0.1", challenge=os.urandom(CHALLENGE_SIZE))
        assert self.switch.connect(peer)
        link.connection.send_hello(relay_hello(peer.challenge, LIMITS))
        self._tg.start_soon(self._serve, peer)
        end = Endpoint(client, Side.DIALER, limits=LIMITS)
        self.endpoints.append(end)
        self._tg.start_soon(end.run)
        return end

    async def host(self, identity: HostIdentity = IDENTITY) -> Endpoint:
        """A host online with `identity` (a later one with the same instance replaces it)."""
        end = await self._connect(Kind.HOST)
        relay = parse_relay_hello(await end.mux.wait_hello())
        assert relay.cast_groups
        end.send_hello(
            host_hello(
                identity,
                relay,
                relay_url=PUBLIC_URL,
                capabilities=("session",),
                verifiers=SECRETS.verifiers(identity.host_id),
                instance=INSTANCE,
            )
        )
        # The relay says nothing when it admits a host: an admission channel's close does.
        probe = end.mux.open_channel("admission", {})
        with pytest.raises(ChannelClosedError):
            await probe.receive()
        return end

    async def teammate(self, identity: HostIdentity = IDENTITY) -> Endpoint:
        end = await self._connect(Kind.TEAMMATE)
        await end.mux.wait_hello()
        token = SECRETS.link("view", PUBLIC_URL, identity.host_id).token
        end.send_hello(teammate_hello(host_id=identity.host_id, token=token, name="mate"))
        return end


@contextlib.asynccontextmanager
async def in_process_relay(*, max_cast_backlog: int = BACKLOG) -> AsyncIterator[Relay]:
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            relay = Relay(tg, max_cast_backlog=max_cast_backlog)
            yield relay
            for end in relay.endpoints:
                await end.link.aclose()
            tg.cancel_scope.cancel()


async def attach(host: Endpoint, teammate: Endpoint) -> tuple[LinkChannel, LinkChannel]:
    """Open a channel from the teammate; return (the teammate's end, the host's end)."""
    ours = teammate.mux.open_channel("session", {})
    theirs = await host.mux.accept()
    return ours, theirs


def cast(host: Endpoint, data: bytes, group: int = 0) -> None:
    host.link.connection.cast(data, group=group)
    host.link.flush()


async def read(channel: LinkChannel, count: int) -> list[bytes | Casted]:
    return [await channel.receive_any() for _ in range(count)]


def has(kind: type[Event], channel: int) -> Callable[[list[Event]], bool]:
    def found(events: list[Event]) -> bool:
        return any(isinstance(e, kind) and getattr(e, "channel", None) == channel for e in events)

    return found


# -- copying ---------------------------------------------------------------------------------------


async def test_a_cast_reaches_every_joined_channel_once_and_no_other_channel() -> None:
    async with in_process_relay() as relay:
        host = await relay.host()
        ann, bob, cid = await relay.teammate(), await relay.teammate(), await relay.teammate()
        ann_1, host_ann_1 = await attach(host, ann)
        ann_2, host_ann_2 = await attach(host, ann)  # a second channel on the same link
        bob_1, host_bob_1 = await attach(host, bob)
        cid_1, host_cid_1 = await attach(host, cid)  # never joined
        for channel in (host_ann_1, host_ann_2, host_bob_1):
            channel.join_broadcast()
        cast(host, b"one")
        host_ann_2.part_broadcast()
        cast(host, b"two")
        # Data after the casts, on the same host link: whatever came before it has arrived.
        for channel in (host_ann_1, host_ann_2, host_bob_1, host_cid_1):
            await channel.send(b"end")
        assert await read(ann_1, 3) == [Casted(b"one"), Casted(b"two"), b"end"]
        assert await read(ann_2, 2) == [Casted(b"one"), b"end"]
        assert await read(bob_1, 3) == [Casted(b"one"), Casted(b"two"), b"end"]
        assert await read(cid_1, 1) == [b"end"]
        assert relay.sample("relay_casts_total") == 2
        assert relay.sample("relay_cast_cuts_total") == 0


async def test_a_cast_nobody_joined_goes_nowhere() -> None:
    async with in_process_relay() as relay:
        host = await relay.host()
        ann = await relay.teammate()
        ann_1, host_ann_1 = await attach(host, ann)
        down = relay.sample("relay_forwarded_frames_total", direction="down")
        cast(host, b"lost")
        await host_ann_1.send(b"end")
        assert await read(ann_1, 1) == [b"end"]
        assert relay.sample("relay_casts_total") == 1
        assert relay.sample("relay_forwarded_frames_total", direction="down") == down + 1


async def test_casts_wait_with_data_for_the_teammates_window_in_the_hosts_order() -> None:
    async with in_process_relay() as relay:
        host = await relay.host()
        slow, quick = await relay.teammate(), await relay.teammate()
        slow_1, host_slow_1 = await attach(host, slow)
        quick_1, host_quick_1 = await attach(host, quick)
        host_slow_1.join_broadcast()
        host_quick_1.join_broadcast()
        # The slow teammate reads nothing yet: one whole window of data fills its channel.
        await host_slow_1.send(b"d" * 1000)
        cast(host, cast_bytes(1))
        await host_slow_1.send(b"data 2")
        cast(host, cast_bytes(2))
        # The other teammate is not held up by it.
        assert await read(quick_1, 2) == [Casted(cast_bytes(1)), Casted(cast_bytes(2))]
        assert not has(CastCut, slow_1.id)(slow.log.events)
        assert await read(slow_1, 4) == [
            b"d" * 1000,
            Casted(cast_bytes(1)),
            b"data 2",
            Casted(cast_bytes(2)),
        ]
        cast(host, cast_bytes(3))
        assert await read(slow_1, 1) == [Casted(cast_bytes(3))]
        assert relay.sample("relay_cast_cuts_total") == 0


# -- broadcast groups ------------------------------------------------------------------------------


async def test_each_cast_reaches_exactly_the_channels_joined_to_its_group() -> None:
    async with in_process_relay() as relay:
        host = await relay.host()
        ann, bob, cid = await relay.teammate(), await relay.teammate(), await relay.teammate()
        ann_1, host_ann_1 = await attach(host, ann)
        ann_2, host_ann_2 = await attach(host, ann)  # the same teammate in the other group
        bob_1, host_bob_1 = await attach(host, bob)
        cid_1, host_cid_1 = await attach(host, cid)
        host_ann_1.join_broadcast()
        host_ann_2.join_broadcast(group=5)
        host_bob_1.join_broadcast(group=5)
        host_cid_1.join_broadcast(group=MAX_CAST_GROUPS - 1)
        down = relay.sample("relay_forwarded_frames_total", direction="down")
        cast(host, b"zero")
        cast(host, b"five", group=5)
        cast(host, b"last", group=MAX_CAST_GROUPS - 1)
        cast(host, b"nobody", group=6)
        for channel in (host_ann_1, host_ann_2, host_bob_1, host_cid_1):
            await channel.send(b"end")
        assert await read(ann_1, 2) == [Casted(b"zero"), b"end"]
        assert await read(ann_2, 2) == [Casted(b"five"), b"end"]
        assert await read(bob_1, 2) == [Casted(b"five"), b"end"]
        assert await read(cid_1, 2) == [Casted(b"last"), b"end"]
        assert relay.sample("relay_casts_total") == 4
        # One copy per joined channel of the cast's group, and the four data frames.
        assert relay.sample("relay_forwarded_frames_total", direction="down") == down + 4 + 4


async def test_a_join_to_another_group_moves_the_channel_and_part_leaves_any_group() -> None:
    async with in_process_relay() as relay:
        host = await relay.host()
        ann = await relay.teammate()
        ann_1, host_ann_1 = await attach(host, ann)
        host_ann_1.join_broadcast(group=1)
        cast(host, b"one in 1", group=1)
        cast(host, b"one in 2", group=2)
        host_ann_1.join_broadcast(group=2)  # moves: a channel is in one group at most
        cast(host, b"two in 1", group=1)
        cast(host, b"two in 2", group=2)
        host_ann_1.join_broadcast(group=2)  # joining its own group again changes nothing
        cast(host, b"three in 2", group=2)
        host_ann_1.part_broadcast()  # leaves group 2 without naming it
        cast(host, b"four in 1", group=1)
        cast(host, b"four in 2", group=2)
        cast(host, b"four in 0")
        await host_ann_1.send(b"end")
        assert await read(ann_1, 4) == [
            Casted(b"one in 1"),
            Casted(b"two in 2"),
            Casted(b"three in 2"),
            b"end",
        ]


async def test_a_channel_cut_in_one_group_leaves_the_others_groups_going() -> None:
    async with in_process_relay() as relay:
        host = await relay.host()
        slow, quick = await relay.teammate(), await relay.teammate()
        slow_1, host_slow_1 = await attach(host, slow)
        quick_1, host_quick_1 = await attach(host, quick)
        host_slow_1.join_broadcast(group=3)
        host_quick_1.join_broadcast(group=4)
        for n in range(14):  # the slow channel's window and backlog, and one too many
            cast(host, cast_bytes(n), group=3)
            cast(host, cast_bytes(n), group=4)
            assert await quick_1.receive_any() == Casted(cast_bytes(n))
        assert relay.sample("relay_cast_cuts_total") == 1
        received = await read(slow_1, 11)
        assert received == [*(Casted(cast_bytes(n)) for n in range(10)), Casted(None)]
        # Cut means out of its group: a cast of group 3 reaches it only after a new join.
        cast(host, b"missed", group=3)
        host_slow_1.join_broadcast(group=3)
        cast(host, b"again", group=3)
        await host_slow_1.send(b"end")
        assert await read(slow_1, 2) == [Casted(b"again"), b"end"]


@pytest.mark.parametrize(
    ("kind", "g"),
    [
        ("cast", MAX_CAST_GROUPS),
        ("cast", -1),
        ("cast", True),
        ("cast", "1"),
        ("join", MAX_CAST_GROUPS),
        ("join", 1.0),
        ("join", None),
    ],
)
async def test_a_bad_group_closes_the_hosts_link_with_4000_and_harms_nobody_else(
    kind: str, g: object
) -> None:
    other_identity = HostIdentity.from_seed(bytes(range(1, 33)))
    async with in_process_relay() as relay:
        host = await relay.host()
        ann = await relay.teammate()
        ann_1, host_ann_1 = await attach(host, ann)
        other = await relay.host(other_identity)
        bob = await relay.teammate(other_identity)
        bob_1, other_bob_1 = await attach(other, bob)
        other_bob_1.join_broadcast(group=1)
        # What an encoder that checked nothing would send.
        payload = {"d": b"x", "g": g} if kind == "cast" else {"g": g}
        channel = None if kind == "cast" else host_ann_1.id
        raw = msgpack.packb({"c": channel, "k": kind, "p": payload}, use_bin_type=True)
        host.link.connection._outgoing.append(raw)
        host.link.flush()
        closed = await host.wait_stopped()
        assert closed.code == CloseCode.PROTOCOL_ERROR
        assert closed.by_peer
        with pytest.raises(ChannelClosedError) as gone:
            await ann_1.receive()
        assert gone.value.code == CloseCode.HOST_GONE
        # The other host and its teammate go on, groups and all.
        cast(other, b"still on", group=1)
        assert await read(bob_1, 1) == [Casted(b"still on")]
        assert other.link.closed is None
        assert bob.link.closed is None


# -- falling behind --------------------------------------------------------------------------------


async def test_a_channel_too_far_behind_is_cut_after_its_queued_data_and_others_go_on() -> None:
    async with in_process_relay() as relay:
        host = await relay.host()
        slow, quick = await relay.teammate(), await relay.teammate()
        slow_1, host_slow_1 = await attach(host, slow)
        quick_1, host_quick_1 = await attach(host, quick)
        host_slow_1.join_broadcast()
        host_quick_1.join_broadcast()

        async def cast_and_read(n: int) -> None:
            # The quick teammate reads each cast as it comes, so its window never runs dry.
            cast(host, cast_bytes(n))
            assert await quick_1.receive_any() == Casted(cast_bytes(n))

        for n in range(10):  # the slow channel's whole window
            await cast_and_read(n)
        await host_slow_1.send(b"queued data")
        for n in range(10, 13):  # exactly max_cast_backlog queued behind it
            await cast_and_read(n)
        await cast_and_read(13)  # one too many: the slow channel is cut
        await cast_and_read(14)
        assert relay.sample("relay_cast_cuts_total") == 1
        # The slow teammate gets its window's casts, its data, the cut, and no cast after it.
        expected: list[bytes | Casted] = [Casted(cast_bytes(n)) for n in range(10)]
        assert await read(slow_1, 12) == [*expected, b"queued data", Casted(None)]
        await host_slow_1.send(b"end")
        assert await read(slow_1, 1) == [b"end"]
        assert host.link.closed is None
        assert host.link.connection.failure is None


async def test_a_cut_with_nothing_but_casts_queued_is_sent_at_once() -> None:
    async with in_process_relay() as relay:
        host = await relay.host()
        slow = await relay.teammate()
        slow_1, host_slow_1 = await attach(host, slow)
        host_slow_1.join_broadcast()
        for n in range(14):
            cast(host, cast_bytes(n))
        # A `cut` costs no window: it arrives while the channel's window is still used up.
        await slow.log.wait_for(has(CastCut, slow_1.id))
        assert slow.link.connection.send_window(slow_1.id) == 1000
        received = await read(slow_1, 11)
        assert received == [*(Casted(cast_bytes(n)) for n in range(10)), Casted(None)]
        assert relay.sample("relay_cast_cuts_total") == 1


async def test_a_cut_channel_gets_casts_again_once_the_host_joins_it_again() -> None:
    async with in_process_relay() as relay:
        host = await relay.host()
        slow = await relay.teammate()
        slow_1, host_slow_1 = await attach(host, slow)
        host_slow_1.join_broadcast()
        for n in range(14):
            cast(host, cast_bytes(n))
        assert (await read(slow_1, 11))[-1] == Casted(None)
        cast(host, b"missed")
        host_slow_1.join_broadcast()
        cast(host, b"again")
        await host_slow_1.send(b"end")
        assert await read(slow_1, 2) == [Casted(b"again"), b"end"]


# -- who may cast ----------------------------------------------------------------------------------


@pytest.mark.parametrize("frame", ["cast", "join", "part", "cast-to-group", "join-to-group"])
async def test_a_teammate_that_sends_a_broadcast_frame_is_closed_with_4000(frame: str) -> None:
    async with in_process_relay() as relay:
        host = await relay.host()
        rogue, good = await relay.teammate(), await relay.teammate()
        rogue_1, _ = await attach(host, rogue)
        good_1, host_good_1 = await attach(host, good)
        host_good_1.join_broadcast()
        connection = rogue.link.connection
        if frame == "cast":
            connection.cast(b"forged")
        elif frame == "cast-to-group":
            connection.cast(b"forged", group=1)
        elif frame == "join":
            connection.join(rogue_1.id)
        elif frame == "join-to-group":
            connection.join(rogue_1.id, group=1)
        else:
            connection.part(rogue_1.id)
        rogue.link.flush()
        closed = await rogue.wait_stopped()
        assert closed.code == CloseCode.PROTOCOL_ERROR
        assert closed.by_peer
        assert relay.sample("relay_rejected_total", reason="teammate_cast") == 1
        # Nobody else noticed.
        cast(host, b"still on")
        assert await read(good_1, 1) == [Casted(b"still on")]
        assert host.link.closed is None
        assert good.link.closed is None


# -- forgetting joins ------------------------------------------------------------------------------


async def test_a_hosts_join_crossing_the_close_of_its_channel_is_harmless() -> None:
    async with in_process_relay() as relay:
        host = await relay.host()
        ann = await relay.teammate()
        ann_1, host_ann_1 = await attach(host, ann)
        # The host reads nothing for a moment: the relay's close of its channel waits unread.
        host.link.websocket.transport.pause_reading()
        await ann_1.aclose()
        # The relay answered the teammate's close: it has closed the host's channel too.
        await ann.log.wait_for(has(ChannelClosed, ann_1.id))
        host_ann_1.join_broadcast()  # the host still thinks the channel is open
        cast(host, b"to nobody")
        host.link.websocket.transport.resume_reading()
        with pytest.raises(ChannelClosedError):
            await host_ann_1.receive()
        # The host's link goes on, and the broadcast with it.
        ann_2, host_ann_2 = await attach(host, ann)
        host_ann_2.join_broadcast()
        cast(host, b"to ann")
        assert await read(ann_2, 1) == [Casted(b"to ann")]
        assert host.link.connection.failure is None
        assert relay.sample("relay_cast_cuts_total") == 0


@pytest.mark.parametrize("closer", ["teammate", "host"])
async def test_a_reused_channel_id_gets_no_casts_without_a_new_join(closer: str) -> None:
    async with in_process_relay() as relay:
        host = await relay.host()
        ann = await relay.teammate()
        ann_1, host_ann_1 = await attach(host, ann)
        host_ann_1.join_broadcast()
        cast(host, b"first")
        assert await read(ann_1, 1) == [Casted(b"first")]
        if closer == "teammate":
            await ann_1.aclose()
            with pytest.raises(ChannelClosedError):
                await host_ann_1.receive()
        else:
            await host_ann_1.aclose()
            with pytest.raises(ChannelClosedError):
                await ann_1.receive()
        await ann.log.wait_for(lambda _: ann.link.connection.open_channels == 0)
        # A teammate picks its ids: the next open may reuse the one just closed.
        ann.link.connection._next_id = ann_1.id
        again, host_again = await attach(host, ann)
        assert again.id == ann_1.id
        cast(host, b"not joined")
        await host_again.send(b"end")
        assert await read(again, 1) == [b"end"]
        host_again.join_broadcast()
        cast(host, b"joined")
        assert await read(again, 1) == [Casted(b"joined")]


async def test_the_joins_go_with_a_teammate_link_that_goes_away() -> None:
    async with in_process_relay() as relay:
        host = await relay.host()
        gone, stays = await relay.teammate(), await relay.teammate()
        _, host_gone_1 = await attach(host, gone)
        stays_1, host_stays_1 = await attach(host, stays)
        host_gone_1.join_broadcast()
        host_stays_1.join_broadcast()
        await gone.link.aclose()
        with pytest.raises(ChannelClosedError):
            await host_gone_1.receive()
        down = relay.sample("relay_forwarded_frames_total", direction="down")
        cast(host, b"after")
        assert await read(stays_1, 1) == [Casted(b"after")]
        # One copy, to the teammate still there.
        assert relay.sample("relay_forwarded_frames_total", direction="down") == down + 1


async def test_the_joins_go_with_a_host_link_that_is_replaced() -> None:
    async with in_process_relay() as relay:
        old = await relay.host()
        ann = await relay.teammate()
        ann_1, old_ann_1 = await attach(old, ann)
        old_ann_1.join_broadcast()
        # The same host process reconnects: its old link goes, the teammate's channel with it.
        new = await relay.host()
        assert (await old.wait_stopped()).code == CloseCode.GOING_AWAY
        with pytest.raises(ChannelClosedError) as closed:
            await ann_1.receive()
        assert closed.value.code == CloseCode.HOST_GONE
        # The teammate comes back on the same link; on the new host link the relay picks the same
        # channel id the old one had, and nothing is joined there yet.
        ann_2, new_ann_2 = await attach(new, ann)
        assert new_ann_2.id == old_ann_1.id
        cast(new, b"not joined")
        await new_ann_2.send(b"end")
        assert await read(ann_2, 1) == [b"end"]
        new_ann_2.join_broadcast()
        cast(new, b"joined")
        assert await read(ann_2, 1) == [Casted(b"joined")]
