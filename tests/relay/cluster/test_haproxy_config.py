"""The cluster tests run the haproxy configuration relay/ ships (relay/haproxy.cfg, which
docs/cluster.md quotes): changed only where a test must (where it listens, where the nodes are),
and valid to haproxy itself."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.relay.cluster.haproxy import BACKEND, Haproxy, loopback_config, shipped_config


def test_the_tests_run_the_shipped_haproxy_lines_but_bind_and_servers() -> None:
    shipped = shipped_config()
    tested = loopback_config(shipped, port=1001, admin_port=1002, node_ports=[2001, 2002])

    def kept(config: str) -> list[str]:
        changed = ("bind ", "server ", "stats socket ", "global")
        lines = [line.strip() for line in config.splitlines()]
        return [line for line in lines if line and not line.startswith(changed)]

    assert kept(tested) == kept(shipped)
    assert "    bind 127.0.0.1:1001" in tested.splitlines()
    assert f"backend {BACKEND}" in shipped.splitlines()
    # Each node gets the shipped servers' options: the health check is what takes a dead
    # node out.
    assert "    server node1 127.0.0.1:2001 check" in tested.splitlines()
    assert "    server node2 127.0.0.1:2002 check" in tested.splitlines()
    assert "    stats socket ipv4@127.0.0.1:1002 level admin" in tested.splitlines()


@pytest.mark.cluster
def test_haproxy_accepts_the_configuration_the_cluster_tests_run(
    tmp_path: Path, haproxy: str
) -> None:
    config = Haproxy(tmp_path, [2001, 2002, 2003], haproxy).write_config()
    check = subprocess.run(
        [haproxy, "-c", "-f", str(config)], capture_output=True, text=True, timeout=30, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
