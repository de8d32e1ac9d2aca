"""A conversation closed while a request of its waits: the pushes it made are withdrawn, and the
notifier keeps nothing of it (tunnel/notify/service.py, `unfollow`)."""

from __future__ import annotations

import anyio
import pytest

from tests.notify.push_service import push_service
from tunnel.log import Log, MemoryStore, NewItem
from tunnel.notify.service import Notifier
from tunnel.notify.settings import NotifySettings
from tunnel.notify.subscriptions import Owner, Subscription, Subscriptions
from tunnel.notify.vapid import VapidKey, b64url_decode

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


def _request(request_id: str) -> NewItem:
    return NewItem(
        type="permission_request",
        data={
            "request_id": request_id,
            "title": "Run it?",
            "options": [{"option_id": "allow_once", "name": "Allow", "kind": "allow_once"}],
        },
        created_by="agent",
        status="action_required",
    )


async def test_closing_a_conversation_withdraws_the_pushes_of_its_waiting_requests() -> None:
    async with (
        push_service() as service,
        Log(MemoryStore()) as log,
        anyio.create_task_group() as tg,
    ):
        vapid = VapidKey.generate()
        service.vapid_key = b64url_decode(vapid.application_server_key)
        endpoint, keys = service.subscribe()
        subscriptions = Subscriptions()
        notifier = Notifier(
            NotifySettings(push_services=frozenset({service.origin}), reminder=0.0),
            host_id="h" * 26,
            vapid=vapid,
            contact="mailto:ops@example.org",
            subscriptions=subscriptions,
            agent_name=lambda _conversation: "demo",
        )
        notifier.subscribe(
            Subscription(
                owner=Owner(kind="browser", id="b" * 22),
                endpoint=endpoint,
                p256dh=keys.public,
                auth=keys.auth,
                role="drive",
                browser="b" * 22,
            )
        )
        await tg.start(notifier.run, log, "main")
        await notifier.follow("c-1")
        await log.append("c-1", [_request("ask_1")])
        await log.append("main", [_request("ask_2")])
        await service.wait_for(lambda s: len(s.to(endpoint)) == 2)

        notifier.unfollow("c-1")
        await service.wait_for(lambda s: len(s.to(endpoint)) == 3)
        withdrawn = service.to(endpoint)[2].message
        assert withdrawn["type"] == "withdraw"
        assert withdrawn["request_id"] == "ask_1"
        # The other conversation's request still waits, and is withdrawn only when decided.
        await anyio.sleep(0.2)
        assert len(service.to(endpoint)) == 3
        assert service.errors == []
        tg.cancel_scope.cancel()
