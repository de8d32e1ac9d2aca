"""One host process per key across the cluster: a second process on another node is refused with
4009 as on one relay, and one started with `--replace` takes the host over from its node."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from anyio.abc import TaskStatus

from tests.relay.cluster.support import RelayCluster, via
from tests.support import attach_and_echo, host_settings, wait_online
from tunnel.host import Host, HostRefusedError
from tunnel.host.echo import echo_handler
from tunnel.proto.codes import CloseCode

pytestmark = [pytest.mark.anyio, pytest.mark.cluster, pytest.mark.timeout(120)]


async def _refused(host: Host, *, task_status: TaskStatus[None]) -> HostRefusedError:
    """Run `host` until the relay refuses it for good; return why."""
    try:
        await host.run(task_status=task_status)
    except HostRefusedError as exc:
        return exc
    raise AssertionError("the host stopped without being refused")


async def test_a_second_host_process_on_another_node_is_refused_and_replace_takes_over(
    tmp_path: Path, cluster: RelayCluster
) -> None:
    node1, node2, node3 = cluster.nodes
    settings = host_settings(cluster.balancer.url, tmp_path)
    first = Host(settings, echo_handler)
    taken_over: list[HostRefusedError] = []

    async def run_first(*, task_status: TaskStatus[None]) -> None:
        taken_over.append(await _refused(first, task_status=task_status))

    async with anyio.create_task_group() as tg:
        await tg.start(run_first)
        await wait_online(first.view_link)
        # The next hosts reach node 2 through the balancer, while the first stays on node 1.
        await cluster.balancer.route_to(node2.port)
        with pytest.raises(HostRefusedError) as refused, anyio.fail_after(20):
            await Host(settings, echo_handler).run()
        assert refused.value.code == CloseCode.HOST_ID_IN_USE
        assert await attach_and_echo(via(first.drive_link, node3), b"first") == b"first"

        third = Host(host_settings(cluster.balancer.url, tmp_path, replace=True), echo_handler)
        await tg.start(third.run)
        # Node 1 closes the first host's link with 4009, and it stops for good.
        with anyio.fail_after(20):
            while not taken_over:
                await anyio.sleep(0.05)
        assert taken_over[0].code == CloseCode.HOST_ID_IN_USE
        assert "relay_cluster_owned_hosts 1.0" in node2.metrics()
        assert "relay_cluster_owned_hosts 0.0" in node1.metrics()
        assert await attach_and_echo(via(third.drive_link, node1), b"third") == b"third"
        tg.cancel_scope.cancel()
