"""The cluster the cluster tests share: three nodes, Redis and haproxy, started for each test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.relay.cluster.support import RedisServer, RelayCluster, relay_cluster


@pytest.fixture
async def cluster(
    tmp_path: Path, redis_server: RedisServer, haproxy: str
) -> AsyncIterator[RelayCluster]:
    """Three relay nodes sharing `redis_server` behind haproxy, which sends new connections to
    node 1 until a test routes them elsewhere; stopped after the test."""
    async with relay_cluster(tmp_path, redis_server, haproxy) as started:
        yield started
