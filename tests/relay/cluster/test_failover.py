"""A host and its teammates on different nodes: the session works across nodes, and survives the
host's node being killed, with every item delivered once."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.relay.cluster.support import (
    Follower,
    RelayCluster,
    host_items,
    sharing,
    via,
)
from tunnel.app.requests import PermissionAnswer, Prompt, encode_request

pytestmark = [pytest.mark.anyio, pytest.mark.cluster, pytest.mark.timeout(180)]


async def _turn(driver: Follower, text: str, turns_before: int) -> None:
    """Prompt through `driver`, allow the demo agent's tool, wait until the agent is idle again
    (every item of the turn is then in the host's log)."""
    assert driver.session is not None
    idle = driver.idle
    await driver.session.send(encode_request(Prompt(text=text)))
    await driver.wait_for(lambda f: f.has("permission_request") > turns_before)
    request = [i for i in driver.items if i["type"] == "permission_request"][-1]
    answer = PermissionAnswer(request_id=request["data"]["request_id"], option_id="allow_once")
    await driver.session.send(encode_request(answer))
    await driver.wait_for(lambda f: f.has("tool_result") > turns_before and f.idle > idle)


async def test_teammates_on_other_nodes_follow_the_host_through_the_loss_of_its_node(
    tmp_path: Path, cluster: RelayCluster
) -> None:
    node1, node2, node3 = cluster.nodes
    # The host dials the balancer, which sends it to node 1.
    async with (
        sharing(cluster.balancer.url, tmp_path) as shared,
        anyio.create_task_group() as tg,
    ):
        assert "relay_cluster_owned_hosts 1.0" in node1.metrics()
        ann = Follower(via(shared.host.drive_link, node2), "ann")
        vic = Follower(via(shared.host.view_link, node3), "vic")
        tg.start_soon(ann.run)
        tg.start_soon(vic.run)
        await ann.wait_for(lambda f: f.served == 1)
        await vic.wait_for(lambda f: f.served == 1)
        assert "relay_cluster_forwarded_connections 1.0" in node2.metrics()
        assert "relay_cluster_forwarded_connections 1.0" in node3.metrics()

        await _turn(ann, "count the lines", 0)
        # The live stream (ephemeral deltas) reached the viewer on the third node too.
        await vic.wait_for(lambda f: f.has("tool_result") == 1 and f.events > 0)

        # From here on the balancer may send a connection to any node: which one the host
        # reconnects to is haproxy's choice, made with the documented health check.
        await cluster.balancer.route_to(node1.port, node2.port, node3.port)
        node1.process.kill()
        # haproxy takes the dead node out; the host comes back through it on node 2 or 3,
        # and both teammates reattach.
        await cluster.balancer.wait_status(node1.port, "DOWN")
        await ann.wait_for(lambda f: f.served >= 2 and f.session is not None, within=60)
        await vic.wait_for(lambda f: f.served >= 2 and f.session is not None, within=60)
        owners = [n for n in (node2, node3) if "relay_cluster_owned_hosts 1.0" in n.metrics()]
        assert len(owners) == 1

        await _turn(ann, "and once more", 1)
        expected = await host_items(shared)
        await ann.wait_for(lambda f: f.triples() == expected)
        await vic.wait_for(lambda f: f.triples() == expected)
        tg.cancel_scope.cancel()
    assert ann.resets == vic.resets == 0
    # Exactly the host's items, each once, in order, on both nodes.
    assert ann.triples() == vic.triples() == expected
    assert [seq for seq, _, _ in expected] == list(range(len(expected)))
