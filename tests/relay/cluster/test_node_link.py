"""The node link's door (docs/cluster.md, "The node link"): only a node's signature made for a
node link opens one, and the teammates it carries are counted under their own addresses."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.relay.cluster.support import (
    SECRET,
    RedisServer,
    RelayCluster,
    node_run,
    relay_cluster,
    wait_says,
)
from tests.relay.cluster.test_broadcast_groups import IDENTITY, SECRETS, raw_host, raw_teammate
from tests.support import raw_peer
from tunnel.handshake import teammate_hello
from tunnel.proto import DEFAULT_LIMITS, Hello, encode_frame
from tunnel.proto.codes import CloseCode
from tunnel.relay.node_entry import LINK_CLIENT, NODE_LINK_PATH
from tunnel.relay.node_forward import sign_headers
from tunnel.relay.node_link import CLOSE, MESSAGE, Envelope, pack_attach, unpack

pytestmark = [pytest.mark.anyio, pytest.mark.cluster, pytest.mark.timeout(60)]


async def test_a_node_link_opens_only_with_a_signature_made_for_one(
    tmp_path: Path, redis_server: RedisServer, haproxy: str
) -> None:
    async with relay_cluster(tmp_path, redis_server, haproxy, 1) as cluster:
        (node,) = cluster.nodes
        run = await node_run(node)
        link_url = f"ws://127.0.0.1:{node.port}{NODE_LINK_PATH}"

        def signed(client: str, secret: bytes = SECRET.encode()) -> dict[str, str]:
            return sign_headers(secret, target=node.url, run=run, client=client)

        refused = [
            (link_url, {}),
            (link_url, signed(LINK_CLIENT, b"not the cluster secret!")),
            # A signature names the client it was made for: a node link's is LINK_CLIENT.
            (link_url, signed("203.0.113.7")),
        ]
        for url, headers in refused:
            with pytest.raises(InvalidStatus) as refusal:
                async with connect(url, additional_headers=headers):
                    pass
            assert refusal.value.response.status_code == 403
        async with connect(link_url, additional_headers=signed(LINK_CLIENT)):
            pass
        assert 'relay_rejected_total{reason="node_auth"} 3.0' in node.metrics()


async def test_the_owner_counts_each_carried_teammate_under_its_own_address(
    tmp_path: Path, redis_server: RedisServer, haproxy: str
) -> None:
    async with relay_cluster(
        tmp_path, redis_server, haproxy, 1, "--max-connections-per-ip", "2"
    ) as cluster:
        (node,) = cluster.nodes
        public = cluster.balancer.url
        run = await node_run(node)
        headers = sign_headers(SECRET.encode(), target=node.url, run=run, client=LINK_CLIENT)
        token = SECRETS.link("view", public, IDENTITY.host_id).token
        hello = encode_frame(
            Hello(payload=teammate_hello(host_id=IDENTITY.host_id, token=token, name="mate"))
        )
        with anyio.fail_after(30):
            async with (
                # The host takes one of 127.0.0.1's two connections.
                raw_host(public),
                connect(
                    f"ws://127.0.0.1:{node.port}{NODE_LINK_PATH}", additional_headers=headers
                ) as link,
            ):
                for slot, client in ((1, "203.0.113.7"), (2, "203.0.113.7"), (3, "203.0.113.7")):
                    await link.send(pack_attach(slot, client, hello))
                await link.send(pack_attach(4, "127.0.0.1", hello))
                heard: dict[int, list[Envelope]] = {}
                while len(heard) < 4:
                    message = await link.recv()
                    assert isinstance(message, bytes)
                    envelope = unpack(message)
                    heard.setdefault(envelope.slot, []).append(envelope)
        # Two connections from 203.0.113.7 at most: the third is refused as one would be.
        assert [e.type for e in heard[1]] == [MESSAGE]
        assert [e.type for e in heard[2]] == [MESSAGE]
        assert [(e.type, e.code) for e in heard[3]] == [(CLOSE, CloseCode.LIMIT_REACHED)]
        # 127.0.0.1 has the host's and this one: within the limit, whatever the link's address.
        assert [e.type for e in heard[4]] == [MESSAGE]


async def test_a_teammate_that_leaves_is_gone_at_the_hosts_node_and_the_last_one_ends_the_link(
    tmp_path: Path, cluster: RelayCluster
) -> None:
    node1, node2, _ = cluster.nodes
    public = cluster.balancer.url
    with anyio.fail_after(60):
        async with raw_host(public) as host:
            async with raw_teammate(node2.url, public, "first") as first:
                async with raw_teammate(node2.url, public, "second"):
                    await wait_says(node1.metrics, "relay_teammates_attached 2.0")
                    first.open_channel("session", {})
                    await host.accept()
                # Closed at node 2: node 1 forgets it, and the other one goes on.
                await wait_says(node1.metrics, "relay_teammates_attached 1.0")
                assert "relay_cluster_forwarded_connections 1.0" in node2.metrics()
            await wait_says(node1.metrics, "relay_teammates_attached 0.0")
            await wait_says(node2.metrics, "relay_cluster_forwarded_connections 0.0")
            # The link went with its last teammate; the next one opens a new one.
            async with raw_teammate(node2.url, public, "third") as third:
                ours = third.open_channel("session", {})
                theirs = await host.accept()
                await theirs.send(b"on a new link")
                assert await ours.receive() == b"on a new link"


async def test_a_teammates_largest_message_fits_the_link_and_a_bad_one_ends_only_that_teammate(
    tmp_path: Path, cluster: RelayCluster
) -> None:
    _, node2, _ = cluster.nodes
    public = cluster.balancer.url
    token = SECRETS.link("view", public, IDENTITY.host_id).token
    limit = DEFAULT_LIMITS.max_message_size
    assert limit is not None
    with anyio.fail_after(60):
        async with (
            raw_host(public) as host,
            raw_teammate(node2.url, public, "good") as good,
            raw_peer(node2.url) as rogue,
        ):
            await rogue.receive_frame()  # node 2's hello
            await rogue.send_frame(
                None, "hello", teammate_hello(host_id=IDENTITY.host_id, token=token, name="x")
            )
            await wait_says(node2.metrics, "relay_cluster_forwarded_connections 2.0")
            # As large as a message may be, and not a frame: the host's node refuses it.
            await rogue.websocket.send(b"\xc1" * limit)
            assert await rogue.close_code(within=20) == CloseCode.PROTOCOL_ERROR
            # The link, and the other teammate on it, go on.
            ours = good.open_channel("session", {})
            theirs = await host.accept()
            await theirs.send(b"still here")
            assert await ours.receive() == b"still here"
