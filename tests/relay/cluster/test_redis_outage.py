"""Without Redis, each node keeps serving what it holds; attaching across nodes is refused with
4010 until Redis is back, and then everything works again."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.relay.cluster.support import (
    RelayCluster,
    echo_host_and_teammates,
    stopped,
    via,
    wait_member,
    wait_says,
)
from tests.support import echo_roundtrip
from tunnel.proto.codes import CloseCode
from tunnel.teammate.client import TeammateError, connect_teammate

pytestmark = [pytest.mark.anyio, pytest.mark.cluster, pytest.mark.timeout(120)]


async def test_without_redis_local_service_goes_on_and_cross_node_attach_gets_4010(
    tmp_path: Path, cluster: RelayCluster
) -> None:
    node1, node2, node3 = cluster.nodes
    async with echo_host_and_teammates(cluster, tmp_path, node1, node2) as (host, (local, across)):
        assert await echo_roundtrip(local, b"before") == b"before"
        assert await echo_roundtrip(across, b"before") == b"before"
        with stopped(cluster.redis):
            for node in cluster.nodes:
                await wait_says(node.health, "cluster: unavailable")
            # What each node holds keeps working: the host's own node, and a connection
            # already carried from node 2 to node 1.
            assert await echo_roundtrip(local, b"during") == b"during"
            assert await echo_roundtrip(across, b"during") == b"during"
            async with connect_teammate(via(host.view_link, node1), name="new") as new:
                assert await echo_roundtrip(new, b"new, local") == b"new, local"
            # A new attach at a node without the host cannot find it, and says so.
            with pytest.raises(TeammateError) as refused, anyio.fail_after(10):
                async with connect_teammate(via(host.view_link, node3), name="x") as other:
                    await echo_roundtrip(other, b"never")
            assert refused.value.code == CloseCode.CLUSTER_UNAVAILABLE
            assert refused.value.reason == "cluster unavailable, retry"
            assert 'relay_rejected_total{reason="cluster_unavailable"} 1.0' in node3.metrics()
            assert "relay_cluster_member 0.0" in node3.metrics()
        # Redis is back, empty: the nodes rejoin and node 1 writes its record again.
        for node in cluster.nodes:
            await wait_member(node)
        async with connect_teammate(via(host.view_link, node3), name="later") as later:
            assert await echo_roundtrip(later, b"after") == b"after"
        assert await echo_roundtrip(across, b"after") == b"after"
        assert "relay_cluster_member 1.0" in node3.metrics()
