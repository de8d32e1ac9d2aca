"""Broadcast groups across nodes (docs/protocol.md, "Broadcast groups"): a host on node 1 with
teammates entered at nodes 1, 2 and 3; each cast reaches exactly the channels joined to its group,
forwarded ones included, in order with their data.

The owner node decides every copy: a forwarded teammate's casts cross the hop as any relay's
copies do, carrying no group, so the node link needs nothing of groups (docs/cluster.md), and a
cast costs the link one message for all the teammates there that take it
(`relay_cluster_hop_messages`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from tests.relay.cluster.support import Node, RelayCluster, wait_says
from tunnel.e2e.crypto import SECRET_SIZE, ShareSecrets
from tunnel.e2e.identity import HostIdentity
from tunnel.handshake import (
    ADMISSION_PATH,
    INSTANCE_SIZE,
    RelayHello,
    host_hello,
    teammate_hello,
)
from tunnel.link import Casted, ChannelClosedError, ChannelMux, LinkChannel
from tunnel.link.dial import DialSettings, dial

pytestmark = [pytest.mark.anyio, pytest.mark.cluster, pytest.mark.timeout(120)]

IDENTITY = HostIdentity.from_seed(bytes(range(7, 39)))
SECRETS = ShareSecrets(view=bytes([3]) * SECRET_SIZE, drive=bytes([4]) * SECRET_SIZE)
SETTINGS = DialSettings(ping_interval=None)


@contextlib.asynccontextmanager
async def raw_host(public_url: str) -> AsyncIterator[ChannelMux]:
    """A host link to the balancer (so to node 1), admitted: its record is in Redis."""

    def hello(relay: RelayHello) -> dict[str, object]:
        assert relay.cast_groups
        return host_hello(
            IDENTITY,
            relay,
            relay_url=public_url,
            capabilities=("session",),
            verifiers=SECRETS.verifiers(IDENTITY.host_id),
            instance=bytes(INSTANCE_SIZE),
        )

    async with dial(public_url, "/v1/host", hello, SETTINGS, backlog=16) as mux:
        # The relay answers this open with a close once the host's record is written.
        probe = mux.open_channel(ADMISSION_PATH, {})
        with pytest.raises(ChannelClosedError):
            await probe.receive()
        yield mux


@contextlib.asynccontextmanager
async def raw_teammate(node_url: str, public_url: str, name: str) -> AsyncIterator[ChannelMux]:
    token = SECRETS.link("view", public_url, IDENTITY.host_id).token

    def hello(relay: RelayHello) -> dict[str, object]:
        return teammate_hello(host_id=IDENTITY.host_id, token=token, name=name)

    async with dial(node_url, "/v1/attach", hello, SETTINGS, backlog=1) as mux:
        yield mux


async def until_end(channel: LinkChannel) -> list[bytes | Casted]:
    """What the channel gets up to the host's `end` data message."""
    received: list[bytes | Casted] = []
    while (message := await channel.receive_any()) != b"end":
        received.append(message)
    return received


async def test_each_cast_reaches_exactly_its_groups_channels_on_every_node(
    tmp_path: Path, cluster: RelayCluster
) -> None:
    node1, node2, node3 = cluster.nodes
    public = cluster.balancer.url
    with anyio.fail_after(60):
        async with (
            raw_host(public) as host,
            raw_teammate(node1.url, public, "at-1") as at_1,
            raw_teammate(node2.url, public, "at-2") as at_2,
            raw_teammate(node3.url, public, "at-3") as at_3,
        ):
            # Two of them are carried to node 1 over a hop each.
            for node in (node2, node3):
                await wait_says(node.metrics, "relay_cluster_forwarded_connections 1.0")
            teammates = {"at-1": at_1, "at-2": at_2, "at-3a": at_3, "at-3b": at_3}
            ends: dict[str, tuple[LinkChannel, LinkChannel]] = {}
            for name, mux in teammates.items():
                ours = mux.open_channel("session", {})
                theirs = await host.accept()
                ends[name] = (ours, theirs)
            groups = {"at-1": 1, "at-2": 1, "at-3a": 2, "at-3b": 0}
            for name, group in groups.items():
                ends[name][1].join_broadcast(group)
            connection = host.link.connection
            for group in (0, 1, 2, 3):
                connection.cast(f"cast of {group}".encode(), group=group)
            host.link.flush()
            ends["at-3a"][1].join_broadcast(1)  # moves from group 2 to group 1
            connection.cast(b"second of 1", group=1)
            connection.cast(b"second of 2", group=2)
            host.link.flush()
            for _, theirs in ends.values():
                await theirs.send(b"end")
            received = {name: await until_end(ours) for name, (ours, _) in ends.items()}
    assert received == {
        "at-1": [Casted(b"cast of 1"), Casted(b"second of 1")],
        "at-2": [Casted(b"cast of 1"), Casted(b"second of 1")],
        "at-3a": [Casted(b"cast of 2"), Casted(b"second of 1")],
        "at-3b": [Casted(b"cast of 0")],
    }


def hop_messages(node: Node, direction: str) -> float:
    found = re.search(
        rf'^relay_cluster_hop_messages_total{{direction="{direction}"}} (\S+)$',
        node.metrics(),
        flags=re.MULTILINE,
    )
    return 0.0 if found is None else float(found.group(1))


CASTS = 10


async def test_a_cast_crosses_the_node_link_once_for_every_channel_there_that_takes_it(
    tmp_path: Path, cluster: RelayCluster
) -> None:
    _, _, node3 = cluster.nodes
    public = cluster.balancer.url
    with anyio.fail_after(60):
        async with (
            raw_host(public) as host,
            raw_teammate(node3.url, public, "ann") as ann,
            raw_teammate(node3.url, public, "bob") as bob,
        ):
            await wait_says(node3.metrics, "relay_cluster_forwarded_connections 2.0")
            ends: list[tuple[LinkChannel, LinkChannel]] = []
            for mux in (ann, ann, bob):  # two channels on ann's link, one on bob's
                ours = mux.open_channel("session", {})
                ends.append((ours, await host.accept()))
                ends[-1][1].join_broadcast(1)
            # Whatever the opens cost the hop is counted by now: the host has every channel.
            down = await anyio.to_thread.run_sync(hop_messages, node3, "down")
            connection = host.link.connection
            for n in range(CASTS):
                connection.cast(f"cast {n}".encode(), group=1)
                connection.cast(f"elsewhere {n}".encode(), group=2)
            host.link.flush()
            for _, theirs in ends:
                await theirs.send(b"end")
            for ours, _ in ends:
                expected = [Casted(f"cast {n}".encode()) for n in range(CASTS)]
                assert await until_end(ours) == expected
            carried = await anyio.to_thread.run_sync(hop_messages, node3, "down")
    # One message per cast for the node, whatever the teammates there that take it, and the
    # three data messages.
    assert carried - down == CASTS + len(ends)


async def test_casts_cross_once_per_node_that_has_teammates_taking_them(
    tmp_path: Path, cluster: RelayCluster
) -> None:
    node1, node2, node3 = cluster.nodes
    public = cluster.balancer.url
    where = {"at-1": node1, "at-2a": node2, "at-2b": node2, "at-3a": node3, "at-3b": node3}
    groups = {"at-1": 1, "at-2a": 1, "at-2b": 1, "at-3a": 1, "at-3b": 2}
    with anyio.fail_after(60):
        async with contextlib.AsyncExitStack() as stack:
            host = await stack.enter_async_context(raw_host(public))
            muxes = {
                name: await stack.enter_async_context(raw_teammate(node.url, public, name))
                for name, node in where.items()
            }
            await wait_says(node2.metrics, "relay_cluster_forwarded_connections 2.0")
            await wait_says(node3.metrics, "relay_cluster_forwarded_connections 2.0")
            ends: dict[str, tuple[LinkChannel, LinkChannel]] = {}
            for name, mux in muxes.items():
                ours = mux.open_channel("session", {})
                ends[name] = (ours, await host.accept())
                ends[name][1].join_broadcast(groups[name])
            before = {
                node.port: await anyio.to_thread.run_sync(hop_messages, node, "down")
                for node in (node2, node3)
            }
            connection = host.link.connection
            for n in range(CASTS):
                connection.cast(f"one {n}".encode(), group=1)
                connection.cast(f"two {n}".encode(), group=2)
                host.link.flush()
                await anyio.sleep(0)
            for _, theirs in ends.values():
                await theirs.send(b"end")
            received = {name: await until_end(ours) for name, (ours, _) in ends.items()}
            after = {
                node.port: await anyio.to_thread.run_sync(hop_messages, node, "down")
                for node in (node2, node3)
            }
    for name, group in groups.items():
        word = "one" if group == 1 else "two"
        assert received[name] == [Casted(f"{word} {n}".encode()) for n in range(CASTS)], name
    # Node 2 takes group 1's casts once for its two teammates; node 3 each group's once; and
    # each node the data message of each of its channels.
    assert after[node2.port] - before[node2.port] == CASTS + 2
    assert after[node3.port] - before[node3.port] == 2 * CASTS + 2


BIG = 64 * 1024
"""Bytes of a cast in the slow teammate's test: the default window takes 16."""


async def test_a_stalled_teammate_is_cut_alone_and_its_neighbour_on_the_node_gets_every_cast(
    tmp_path: Path, cluster: RelayCluster
) -> None:
    _, node2, _ = cluster.nodes
    public = cluster.balancer.url
    count = 40  # its window (16) and the backlog (16) and more
    with anyio.fail_after(60):
        async with (
            raw_host(public) as host,
            raw_teammate(node2.url, public, "slow") as slow,
            raw_teammate(node2.url, public, "quick") as quick,
        ):
            slow_1 = slow.open_channel("session", {})
            host_slow = await host.accept()
            quick_1 = quick.open_channel("session", {})
            host_quick = await host.accept()
            host_slow.join_broadcast()
            host_quick.join_broadcast()
            casts = [bytes([n]) * BIG for n in range(count)]
            got: list[bytes | Casted] = []
            async with anyio.create_task_group() as tg:

                async def read_quick() -> None:
                    for _ in range(count):
                        got.append(await quick_1.receive_any())

                tg.start_soon(read_quick)
                for n, data in enumerate(casts):
                    # The host casts at the pace of the teammate that reads, within half its
                    # window: that one is never behind, the other one soon is.
                    while len(got) < n - 8:
                        await anyio.sleep(0.005)
                    host.link.connection.cast(data)
                    host.link.flush()
            assert got == [Casted(data) for data in casts]
            # The slow one reads now: its window's casts, then the cut, and nothing after.
            first = [await slow_1.receive_any() for _ in range(17)]
            assert first == [*(Casted(data) for data in casts[:16]), Casted(None)]
            # Joined again (as after a catch-up), it gets the casts from then on.
            host_slow.join_broadcast()
            host.link.connection.cast(b"again")
            host.link.flush()
            await host_slow.send(b"end")
            assert await until_end(slow_1) == [Casted(b"again")]
