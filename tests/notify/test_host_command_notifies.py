"""`tunnel host` as a real process: the notification options reach the host, and the push key
and subscriptions outlive a restart (kept beside the host key)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from tests.host.conftest import wait_online
from tests.host.host_process import HostProcess
from tests.host.teammate import attached
from tests.notify.hook_server import hook_server
from tests.notify.pages import page, request_waits
from tests.notify.push_service import push_service
from tests.support import RelayProcess
from tunnel.app.requests import PermissionAnswer
from tunnel.notify.vapid import b64url_decode

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


async def test_a_host_process_pushes_and_posts_and_keeps_its_subscriptions_over_a_restart(
    relay: RelayProcess, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "README.md").write_text("one\n")
    async with push_service() as service, hook_server() as hooks:
        host = HostProcess(
            relay.url, tmp_path, workspace=workspace, log_db=tmp_path / "log.db", interactive=False
        )
        host.command += [
            "--push-service",
            service.origin,
            "--notify",
            hooks.url("/hook"),
            "--notify-reminder",
            "0",
        ]
        endpoint, keys = service.subscribe()
        await anyio.to_thread.run_sync(host.start)
        try:
            await wait_online(host.view_link)
            async with page(host.view_link, "vera") as vera:
                push_key = vera.ready["push_key"]
                service.vapid_key = b64url_decode(push_key)
                assert (await vera.push_on(endpoint, keys))["on"] is True
        finally:
            await anyio.to_thread.run_sync(host.stop)
        for name in ("host_key.vapid", "host_key.push"):
            assert (tmp_path / name).stat().st_mode & 0o077 == 0
        saved = json.loads((tmp_path / "host_key.push").read_text())
        assert [s["endpoint"] for s in saved] == [endpoint]

        # The same key file: the same push key, and the subscription still there.
        await anyio.to_thread.run_sync(host.start)
        try:
            await wait_online(host.view_link)
            async with (
                page(host.view_link, "vera") as vera,
                attached(host.drive_link, "dan") as dan,
            ):
                assert vera.ready["push_key"] == push_key
                await dan.wait_for(lambda t: t.snapshot_done)
                request_id = await request_waits(dan, 1)
                await service.wait_for(lambda s: len(s.to(endpoint)) == 1)
                assert service.to(endpoint)[0].message["request_id"] == request_id
                await dan.send(PermissionAnswer(request_id=request_id, option_id="allow_once"))
                await hooks.wait_for(lambda h: len(h.to("/hook")) == 3)
                assert [json.loads(p.body)["event"] for p in hooks.to("/hook")] == [
                    "waiting",
                    "decided",
                    "turn_ended",
                ]
                await service.wait_for(lambda s: len(s.to(endpoint)) == 2)
        finally:
            await anyio.to_thread.run_sync(host.stop)
        assert service.errors == []
        assert "Traceback" not in host.output(), host.output()
