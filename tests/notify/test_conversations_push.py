"""Notifications on a host of several conversations: a page that follows any of them is offered
the host's push key, subscribes, and says when it is in front (docs/notifications.md)."""

from __future__ import annotations

import base64
import contextlib
import os
from pathlib import Path
from typing import Any

import anyio
import msgpack
import pytest
from rich.console import Console

from tests.host.conftest import wait_online
from tests.host.teammate import attached
from tests.notify.pages import request_waits
from tests.notify.push_service import push_service
from tests.support import RelayProcess, host_settings
from tunnel.app.host_messages import decode_host_message
from tunnel.app.requests import (
    Focus,
    NewConversation,
    PermissionAnswer,
    PushOn,
    encode_request,
)
from tunnel.e2e.opening import EarlySubscribe
from tunnel.host.share import Shared, ShareSettings, run_share
from tunnel.notify.settings import NotifySettings
from tunnel.notify.vapid import b64url_decode
from tunnel.teammate.client import TeammateSession, connect_teammate

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


async def _answer(session: TeammateSession, ops: tuple[str, ...]) -> dict[str, Any]:
    """The next host message of one of `ops`, past the snapshot and the rest."""
    with anyio.fail_after(20):
        while True:
            message = decode_host_message(await session.receive_plaintext())
            if message["op"] in ops:
                return message


async def test_a_page_following_another_conversation_subscribes_and_its_focus_counts(
    relay: RelayProcess, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "README.md").write_text("one\ntwo\n")
    async with push_service() as service:
        settings = ShareSettings(
            host=host_settings(relay.url, tmp_path),
            agents=(("demo", "demo"), ("other", "demo")),
            workspace=workspace,
            log_db=tmp_path / "log.db",
            interactive=False,
            demo_delay=0,
            notify=NotifySettings(push_services=frozenset({service.origin}), reminder=0.0),
        )
        async with anyio.create_task_group() as tg:

            async def share(*, task_status: anyio.abc.TaskStatus[Shared]) -> None:
                with open(os.devnull, "w") as sink:
                    await run_share(settings, console=Console(file=sink), task_status=task_status)

            shared: Shared = await tg.start(share)
            await wait_online(shared.host.view_link)
            assert shared.notifier is not None
            push_key = shared.notifier.push_key
            assert push_key is not None
            service.vapid_key = b64url_decode(push_key)
            async with attached(shared.host.drive_link, "dan", conversation="main") as dan:
                await dan.wait_for(lambda t: t.listing is not None)
                await dan.send(NewConversation(agent="other"))
                await dan.wait_for(lambda t: len(t.started) == 1)
                second = dan.started[0]
                endpoint, keys = service.subscribe()
                browser = base64.urlsafe_b64encode(os.urandom(18)).decode()
                early = EarlySubscribe(conversation=second)
                async with contextlib.AsyncExitStack() as stack:
                    session = await stack.enter_async_context(
                        connect_teammate(shared.host.drive_link, name="ada", subscribe=early)
                    )
                    ready = await _answer(session, ("ready",))
                    assert ready["conversation_id"] == second
                    assert ready["push_key"] == push_key
                    on = PushOn(
                        endpoint=endpoint, p256dh=keys.public, auth=keys.auth, browser=browser
                    )
                    await session.send(encode_request(on))
                    assert await _answer(session, ("push", "error")) == {
                        "op": "push",
                        "on": True,
                        "endpoint": endpoint,
                    }
                    # Ada has the page in front of her, showing the second conversation: a
                    # request of the first is not pushed to her.
                    await session.send(encode_request(Focus(focused=True, browser=browser)))
                    await session.send(msgpack.packb({"op": "conversations"}))
                    await _answer(session, ("conversations",))
                    await request_waits(dan, 1)
                    await anyio.sleep(0.5)
                    assert service.to(endpoint) == []
                    # Away from it, the next one is.
                    await session.send(encode_request(Focus(focused=False, browser=browser)))
                    await session.send(msgpack.packb({"op": "conversations"}))
                    await _answer(session, ("conversations",))
                    first = await request_waits(dan, 1)
                    await dan.send(PermissionAnswer(request_id=first, option_id="allow_once"))
                    second_request = await request_waits(dan, 2)
                    await service.wait_for(lambda s: len(s.to(endpoint)) == 1)
                    assert service.to(endpoint)[0].message["request_id"] == second_request
            tg.cancel_scope.cancel()
