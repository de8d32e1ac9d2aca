"""A cluster runs on a Redis user that has only the rules docs/cluster.md recommends ("What Redis
is trusted with"): the nodes need no other key, channel or command."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from tests.relay.cluster.support import (
    RedisServer,
    echo_host_and_teammates,
    relay_cluster,
    via,
    wait_says,
)
from tests.support import attach_and_echo, echo_roundtrip
from tunnel.relay.cluster import KEY_PREFIX

pytestmark = [pytest.mark.anyio, pytest.mark.cluster, pytest.mark.timeout(120)]

DOC = Path(__file__).resolve().parents[3] / "docs" / "cluster.md"
USER = "agent-tunnel"
PLACEHOLDER = ">A-LONG-RANDOM-PASSWORD"


def documented_rules(doc: Path = DOC) -> list[str]:
    """The ACL rules of the nodes' user, as docs/cluster.md writes them in its redis.conf."""
    for line in doc.read_text().splitlines():
        if line.startswith(f"user {USER} "):
            return line.split()[2:]
    raise AssertionError(f"docs/cluster.md has no `user {USER}` line")


class RedisUser(RedisServer):
    """The same Redis, dialed as another user: what the nodes get as their `--cluster` URL."""

    def __init__(self, server: RedisServer, password: str) -> None:
        super().__init__(server.workdir, server.port)
        self.password = password

    @property
    def url(self) -> str:
        return f"redis://{USER}:{self.password}@127.0.0.1:{self.port}/0"


async def test_a_cluster_needs_no_more_of_redis_than_the_documented_user_rules(
    tmp_path: Path, redis_server: RedisServer, haproxy: str
) -> None:
    rules = documented_rules()
    assert PLACEHOLDER in rules
    password = secrets.token_urlsafe(24)
    admin = Redis.from_url(redis_server.url)
    try:
        await admin.execute_command(
            "ACL",
            "SETUSER",
            USER,
            *[f">{password}" if rule == PLACEHOLDER else rule for rule in rules],
        )
        restricted = RedisUser(redis_server, password)
        async with relay_cluster(tmp_path, restricted, haproxy, 2) as cluster:
            node1, node2 = cluster.nodes
            async with echo_host_and_teammates(cluster, tmp_path, node1, node2) as (
                host,
                teammates,
            ):
                key = KEY_PREFIX + host.host_id
                # Claimed (MULTI, SET, PUBLISH) and looked up (GET) by node 2 for its teammate.
                for teammate in teammates:
                    assert await echo_roundtrip(teammate, b"hello") == b"hello"
                # Refreshed (the script, loaded and run): the record is sealed afresh.
                first = await admin.get(key)
                assert first is not None
                await _eventually(lambda value: value not in (first, None), admin, key)
                # Taken over by node 2, announced, and let go by node 1 (SUBSCRIBE).
                await cluster.balancer.route_to(node2.port)
                await host.revoke()
                await wait_says(node2.metrics, "relay_cluster_owned_hosts 1.0")
                await wait_says(node1.metrics, "relay_cluster_owned_hosts 0.0")
                assert await attach_and_echo(via(host.drive_link, node1), b"moved") == b"moved"
            # The host left: node 2 released its record (the release script).
            await _eventually(lambda value: value is None, admin, key)
            for node in (node1, node2):
                assert "relay_cluster_redis_errors_total 0.0" in node.metrics()
        denied = await admin.execute_command("ACL", "LOG")
        objects = [_field(entry, "object") for entry in denied]
        # redis-py tries CLIENT SETINFO on every connection, and goes on without.
        assert [o for o in objects if o != "client|setinfo"] == []
    finally:
        await admin.aclose()


async def _eventually(
    holds: Callable[[bytes | None], bool], admin: Redis, key: str, attempts: int = 400
) -> None:
    """Wait (bounded) until the value at `key` satisfies `holds`."""
    for _ in range(attempts):
        if holds(await admin.get(key)):
            return
        await anyio.sleep(0.05)
    raise AssertionError(f"{key} never changed as expected")


def _field(entry: object, name: str) -> str:
    """A field of one ACL LOG entry (a map in RESP3, a flat list in RESP2)."""
    if isinstance(entry, dict):
        value = entry.get(name.encode(), entry.get(name))
    else:
        assert isinstance(entry, list)
        fields = dict(zip(entry[::2], entry[1::2], strict=True))
        value = fields.get(name.encode(), fields.get(name))
    return value.decode() if isinstance(value, bytes) else str(value)
