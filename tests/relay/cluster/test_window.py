"""`tunnel relay --window` in a cluster: the window is end to end between a teammate and its
host's node, so a teammate carried over a node link gets it when every node has it, and is
closed when its node and the host's disagree."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.relay.cluster.support import (
    RedisServer,
    relay_cluster,
    via,
    wait_member,
    wait_says,
)
from tests.relay.held_reader import BURST, WINDOW, HeldReader
from tests.support import host_settings, running_host
from tunnel.teammate.client import TeammateError, connect_teammate

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


async def test_a_teammate_on_another_node_sends_a_wider_window_unread(
    tmp_path: Path, redis_server: RedisServer, haproxy: str
) -> None:
    # The host (on node 1) reads one message, then nothing until the teammate (on node 2, so
    # carried over the node link) has sent BURST: with the default window the teammate's sends
    # would wait for grants that never come.
    reader = HeldReader()
    async with (
        relay_cluster(tmp_path, redis_server, haproxy, 2, "--window", str(WINDOW)) as cluster,
        running_host(host_settings(cluster.balancer.url, tmp_path), reader.handler) as host,
        connect_teammate(via(host.view_link, cluster.nodes[1])) as session,
    ):
        # Carried: node 2 forwards this teammate's connection to node 1, the host's.
        await wait_says(cluster.nodes[1].metrics, "relay_cluster_forwarded_connections 1.0")
        await reader.send_burst(session)
    assert sum(reader.received) >= BURST


async def test_nodes_that_disagree_on_the_window_close_the_carried_teammate(
    tmp_path: Path, redis_server: RedisServer, haproxy: str
) -> None:
    async with relay_cluster(tmp_path, redis_server, haproxy, 1) as cluster:
        wider = cluster.start_node(tmp_path, None, "--window", str(WINDOW))
        cluster.nodes.append(wider)  # stopped with the others
        await wait_member(wider)
        async with running_host(host_settings(cluster.balancer.url, tmp_path)) as host:
            with anyio.fail_after(30), pytest.raises(TeammateError) as closed:
                async with connect_teammate(via(host.view_link, wider)) as session:
                    await session.receive()
            assert str(closed.value) == (
                "the session ended (INTERNAL_ERROR: relay nodes disagree on limits)"
            )
        assert "advertises other link limits than this node" in wider.process.stderr()
