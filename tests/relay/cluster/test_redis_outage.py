"""Without Redis, each node keeps serving what it holds; attaching across nodes is refused with
4010 until Redis is back, and then everything works again."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.relay.cluster.support import (
    Node,
    RedisServer,
    relay_cluster,
    stopped,
    via,
    wait_member,
)
from tests.support import echo_roundtrip, host_settings, running_host
from tunnel.proto.codes import CloseCode
from tunnel.teammate.client import TeammateError, connect_teammate

pytestmark = [pytest.mark.anyio, pytest.mark.cluster, pytest.mark.timeout(120)]


async def test_without_redis_local_service_goes_on_and_cross_node_attach_gets_4010(
    tmp_path: Path, redis_server: RedisServer, haproxy: str
) -> None:
    async with relay_cluster(tmp_path, redis_server, haproxy) as cluster:
        node1, node2, node3 = cluster.nodes
        async with (
            running_host(host_settings(cluster.balancer.url, tmp_path)) as host,
            connect_teammate(via(host.drive_link, node1), name="local") as local,
            connect_teammate(via(host.drive_link, node2), name="across") as across,
        ):
            assert await echo_roundtrip(local, b"before") == b"before"
            assert await echo_roundtrip(across, b"before") == b"before"
            with stopped(redis_server):
                for node in cluster.nodes:
                    await _wait_out(node)
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


async def _wait_out(node: Node, attempts: int = 200) -> None:
    for _ in range(attempts):
        if "cluster: unavailable" in await anyio.to_thread.run_sync(node.health):
            return
        await anyio.sleep(0.05)
    raise AssertionError(f"node {node.url} did not notice that Redis is gone")
