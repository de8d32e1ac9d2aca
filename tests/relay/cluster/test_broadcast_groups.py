"""Broadcast groups across nodes (docs/protocol.md, "Broadcast groups"): a host on node 1 with
teammates entered at nodes 1, 2 and 3; each cast reaches exactly the channels joined to its group,
forwarded ones included, in order with their data.

The owner node decides every copy: a forwarded teammate's casts cross the hop as any relay's
copies do, carrying no group, so the hop needs nothing of groups (docs/cluster.md), and a cast
costs the hop one message per forwarded channel of its group (`relay_cluster_hop_messages`).
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


async def test_a_cast_crosses_the_hop_once_per_forwarded_channel_of_its_group(
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
    # One copy per forwarded channel joined to the group, and the three data messages.
    assert carried - down == CASTS * len(ends) + len(ends)
