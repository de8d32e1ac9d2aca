"""Admission and flow control hold across nodes: a revoke ends old teammates on every node, and a
teammate that stops reading on one node does not slow a teammate on another."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.relay.cluster.support import RelayCluster, echo_host_and_teammates, via, wait_says
from tests.support import echo_roundtrip, raw_peer, raw_teammate
from tunnel.proto import DEFAULT_LIMITS
from tunnel.proto.codes import CloseCode
from tunnel.teammate.client import RevokedError, UnauthorizedError, connect_teammate

pytestmark = [pytest.mark.anyio, pytest.mark.cluster, pytest.mark.timeout(120)]


async def test_a_revoke_across_nodes_ends_every_old_teammate_and_its_link_everywhere(
    tmp_path: Path, cluster: RelayCluster
) -> None:
    node1, node2, node3 = cluster.nodes
    async with echo_host_and_teammates(cluster, tmp_path, node3) as (host, (session,)):
        old = host.drive_link
        async with (
            raw_peer(node1.url) as on1,
            raw_peer(node2.url) as on2,
            raw_peer(node3.url) as on3,
        ):
            # Hellos only, no channel: what closes them can only come from the relay.
            for peer in (on1, on2, on3):
                await raw_teammate(peer, old)
            # Every teammate of a host is admitted on the host's node, wherever it entered.
            await wait_says(node1.metrics, "relay_teammates_attached 4.0")
            # The host re-registers through the balancer, which now sends it to node 2: node 2
            # takes the host over with the new verifiers, and node 1 lets its teammates go.
            await cluster.balancer.route_to(node2.port)
            await host.revoke()
            # The host itself closes its channels with 4008, end to end, across the hop.
            with pytest.raises(RevokedError), anyio.fail_after(20):
                await echo_roundtrip(session, b"after the revoke")
            codes = [await peer.close_code(within=20) for peer in (on1, on2, on3)]
        # Node 1 acts on node 2's announcement, which is Redis's word: with a code every client
        # retries (docs/cluster.md). Coming back, the old link is refused on every node.
        assert codes == [CloseCode.HOST_GONE] * 3
        for node in cluster.nodes:
            with pytest.raises(UnauthorizedError), anyio.fail_after(20):
                async with connect_teammate(via(old, node), name="old") as retry:
                    await echo_roundtrip(retry, b"old link")
            async with connect_teammate(via(host.drive_link, node), name="new") as new:
                assert await echo_roundtrip(new, b"new link") == b"new link"
        assert "relay_cluster_owned_hosts 1.0" in node2.metrics()
        assert "relay_cluster_owned_hosts 0.0" in node1.metrics()


MESSAGE = 16 * 1024
WINDOW = DEFAULT_LIMITS.initial_window
ROUND_TRIPS = 12 * WINDOW // MESSAGE


async def test_a_stalled_teammate_on_one_node_does_not_slow_a_teammate_on_another(
    tmp_path: Path, cluster: RelayCluster
) -> None:
    _, node2, node3 = cluster.nodes
    async with (
        echo_host_and_teammates(cluster, tmp_path, node2, node3) as (_, (stalled, normal)),
        anyio.create_task_group() as tg,
    ):
        sent = {"stalled": 0}

        async def flood() -> None:
            # Sends and never reads: the echoes pile up until the windows are spent.
            while True:
                await stalled.send(b"s" * MESSAGE)
                sent["stalled"] += 1

        tg.start_soon(flood)
        payload = b"n" * MESSAGE
        for _ in range(ROUND_TRIPS):
            assert await echo_roundtrip(normal, payload) == payload
        # The normal teammate moved 12 windows each way, while the stalled one sent no more
        # than the windows allow, as on one node: per direction one window at the relay and
        # one at the receiving end (docs/relay.md, "Flow control"), plus the message the
        # host's echo holds. The hop between nodes adds nothing that grows.
        assert ROUND_TRIPS * MESSAGE >= 12 * WINDOW
        assert sent["stalled"] * MESSAGE <= 4 * WINDOW + MESSAGE
        before = sent["stalled"]
        for _ in range(20):
            assert await echo_roundtrip(normal, payload) == payload
        assert sent["stalled"] == before
        tg.cancel_scope.cancel()
