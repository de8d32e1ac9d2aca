"""Web Push end to end: a sharing host (in process) behind a real relay, teammates' pages as
Python channels, and a push service on loopback that checks every push as a browser and a
real service would (tests/notify/push_service.py)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from rich.console import Console

from tests.host.conftest import wait_online
from tests.host.teammate import attached
from tests.notify.pages import page, request_waits
from tests.notify.push_service import PushService, push_service
from tests.support import RelayProcess, host_settings
from tunnel.app.requests import ElicitationAnswer, PermissionAnswer, Prompt, PushOff
from tunnel.host.share import Shared, ShareSettings, run_share
from tunnel.notify.service import Notifier
from tunnel.notify.settings import NotifySettings
from tunnel.notify.vapid import b64url_decode
from tunnel.policy import Policy, load_policy

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

FAKE_ACP_AGENT = Path(__file__).resolve().parents[1] / "agents" / "fake_acp_agent.py"


@contextlib.asynccontextmanager
async def notifying_share(
    relay: RelayProcess,
    tmp_path: Path,
    service: PushService,
    policy: Policy | None = None,
    agent: str = "demo",
    **notify: Any,
) -> AsyncIterator[Shared]:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "README.md").write_text("one\ntwo\n")
    settings = ShareSettings(
        host=host_settings(relay.url, tmp_path),
        agent=agent,
        workspace=workspace,
        log_db=tmp_path / "log.db",
        interactive=False,
        demo_delay=0,
        policy=policy,
        notify=NotifySettings(
            push_services=frozenset({service.origin}), **{"reminder": 0.0, **notify}
        ),
    )
    async with anyio.create_task_group() as tg:

        async def share(*, task_status: anyio.abc.TaskStatus[Shared]) -> None:
            with open(os.devnull, "w") as sink:
                await run_share(settings, console=Console(file=sink), task_status=task_status)

        shared: Shared = await tg.start(share)
        await wait_online(shared.host.view_link)
        assert shared.notifier is not None
        assert shared.notifier.push_key is not None
        service.vapid_key = b64url_decode(shared.notifier.push_key)
        try:
            yield shared
        finally:
            tg.cancel_scope.cancel()


def notifier(shared: Shared) -> Notifier:
    assert shared.notifier is not None
    return shared.notifier


def kinds(service: PushService, endpoint: str) -> list[str]:
    return [push.message["type"] for push in service.to(endpoint)]


async def test_a_waiting_request_is_pushed_to_whoever_is_away_and_withdrawn_when_answered(
    relay: RelayProcess, tmp_path: Path
) -> None:
    async with push_service() as service, notifying_share(relay, tmp_path, service) as shared:
        assert shared.console.people is not None
        alice_link = await shared.console.people.invite("alice", "drive")
        alice_endpoint, alice_keys = service.subscribe()
        viewer_endpoint, viewer_keys = service.subscribe()
        async with (
            page(alice_link, "alice") as alice,
            page(shared.host.view_link, "vera") as vera,
            attached(shared.host.drive_link, "dan") as dan,
        ):
            assert alice.ready["push_key"] == notifier(shared).push_key
            on = await alice.push_on(alice_endpoint, alice_keys)
            assert on == {"op": "push", "on": True, "endpoint": alice_endpoint}
            assert (await vera.push_on(viewer_endpoint, viewer_keys))["on"] is True
            await dan.wait_for(lambda t: t.snapshot_done)

            request_id = await request_waits(dan, 1)
            await service.wait_for(
                lambda s: len(s.to(alice_endpoint)) == 1 and len(s.to(viewer_endpoint)) == 1
            )
            pushed = service.to(alice_endpoint)[0].message
            host_id = shared.host.host_id
            assert pushed["type"] == "request"
            assert pushed["v"] == 1
            assert pushed["tag"] == f"{host_id}/{request_id}"
            assert pushed["host"] == host_id
            assert pushed["request_id"] == request_id
            assert pushed["agent"] == "demo"
            assert "README.md" in pushed["title"]
            assert pushed["reminder"] is False
            assert [o["option_id"] for o in pushed["options"]] == ["allow_once", "reject_once"]
            # A viewer is told, and offered nothing to answer.
            assert service.to(viewer_endpoint)[0].message["options"] == []

            await dan.send(PermissionAnswer(request_id=request_id, option_id="allow_once"))
            await service.wait_for(
                lambda s: (
                    kinds(s, alice_endpoint) == ["request", "withdraw"]
                    and kinds(s, viewer_endpoint) == ["request", "withdraw"]
                )
            )
            withdrawn = service.to(alice_endpoint)[1].message
            assert withdrawn == {
                "v": 1,
                "type": "withdraw",
                "tag": f"{host_id}/{request_id}",
                "host": host_id,
                "request_id": request_id,
            }
            # Both keep the same Topic, so a queued request push is replaced by its withdrawal.
            topics = {push.headers["topic"] for push in service.to(alice_endpoint)}
            assert len(topics) == 1

            # Alice has the page in front of her: the next request is pushed to the viewer only.
            await alice.focus(True)
            await dan.wait_for(lambda t: t.item_of("permission_decision") is not None)
            second = await request_waits(dan, 2)
            await service.wait_for(lambda s: len(s.to(viewer_endpoint)) == 3)
            await dan.send(PermissionAnswer(request_id=second, option_id="reject_once"))
            await service.wait_for(lambda s: len(s.to(viewer_endpoint)) == 4)
            assert kinds(service, alice_endpoint) == ["request", "withdraw"]
            assert service.errors == []

            # /revoke alice: her subscription goes with her link, the viewer's stays.
            await shared.console.people.revoke("alice")
            held = [s.endpoint for s in notifier(shared).subscriptions.all()]
            assert held == [viewer_endpoint]
            saved = json.loads(shared.host.settings.resolved_subscriptions_file.read_text())
            assert [s["endpoint"] for s in saved] == [viewer_endpoint]
        # /revoke: the role links' subscriptions go with the links (once their holders have
        # left: the revocation cuts them off, which is not what this test is about).
        assert shared.console.revoke is not None
        await shared.console.revoke()
        assert notifier(shared).subscriptions.all() == []


async def test_a_gone_subscription_is_dropped_and_a_hanging_service_delays_nothing(
    relay: RelayProcess, tmp_path: Path
) -> None:
    # The hanging push would be given up only after a minute: the answer cannot wait for that.
    async with (
        push_service() as service,
        notifying_share(relay, tmp_path, service, send_timeout=60.0) as shared,
    ):
        gone_endpoint, gone_keys = service.subscribe("gone")
        hang_endpoint, hang_keys = service.subscribe("hang")
        async with (
            page(shared.host.view_link, "gone") as gone,
            page(shared.host.view_link, "hang") as hang,
            attached(shared.host.drive_link, "dan") as dan,
        ):
            assert (await gone.push_on(gone_endpoint, gone_keys))["on"] is True
            assert (await hang.push_on(hang_endpoint, hang_keys))["on"] is True
            await dan.wait_for(lambda t: t.snapshot_done)
            request_id = await request_waits(dan, 1)
            await service.wait_for(lambda s: s.hanging == 1 and len(s.to(gone_endpoint)) == 1)

            await dan.send(PermissionAnswer(request_id=request_id, option_id="allow_once"))
            await dan.wait_for(lambda t: t.item_of("tool_result") is not None)
            # The turn went on while the push service still held the push.
            assert service.hanging >= 1
            held = notifier(shared).subscriptions
            await service.wait_for(lambda s: held.get(gone_endpoint) is None)
            assert held.get(hang_endpoint) is not None
            assert service.errors == []


async def test_an_endpoint_outside_the_push_services_and_malformed_subscriptions_are_refused(
    relay: RelayProcess, tmp_path: Path
) -> None:
    async with push_service() as service, notifying_share(relay, tmp_path, service) as shared:
        endpoint, keys = service.subscribe()
        async with page(shared.host.drive_link, "mallory") as mallory:
            good = {
                "op": "push_on",
                "endpoint": endpoint,
                "p256dh": base64.urlsafe_b64encode(keys.public).decode().rstrip("="),
                "auth": base64.urlsafe_b64encode(keys.auth).decode().rstrip("="),
                "browser": mallory.browser,
            }
            # Where the host would POST for an attacker: its own network, loopback, a lookalike.
            for target in (
                "http://127.0.0.1:1/push/x",
                f"http://localhost:{service.port}/push/x",
                "https://169.254.169.254/latest/meta-data/",
                "https://fcm.googleapis.com.evil.example/fcm/send/x",
            ):
                answer = await mallory.ask({**good, "endpoint": target})
                assert answer["op"] == "error", target
                assert answer["code"] == "forbidden"
                assert "push endpoint" in answer["message"]
            for bad in (
                {"endpoint": "https://fcm.googleapis.com/" + "x" * 5000},
                {"p256dh": good["auth"]},
                {"auth": "A" * 100_000},
                {"browser": "../../etc"},
                {"extra": True},
            ):
                answer = await mallory.ask({**good, **bad})
                assert answer["op"] == "error"
                assert answer["code"] == "bad_request"
            # The channel survives all of it, and the host posted nowhere.
            assert (await mallory.ask(good)) == {"op": "push", "on": True, "endpoint": endpoint}
            assert service.pushes == []
            assert [s.endpoint for s in notifier(shared).subscriptions.all()] == [endpoint]

            # push_off: a personal link's subscription is its person's alone.
            assert shared.console.people is not None
            alice_link = await shared.console.people.invite("alice", "drive")
            alice_endpoint, alice_keys = service.subscribe()
            async with page(alice_link, "alice") as alice:
                assert (await alice.push_on(alice_endpoint, alice_keys))["on"] is True
                # The same endpoint again, claimed through the role link: refused.
                taken = await mallory.push_on(alice_endpoint, alice_keys)
                assert taken["code"] == "forbidden"
                assert "someone else" in taken["message"]
                off = PushOff(endpoint=alice_endpoint)
                assert (await mallory.ask(off))["on"] is True
                assert (await alice.ask(off)) == {
                    "op": "push",
                    "on": False,
                    "endpoint": alice_endpoint,
                }
            assert (await mallory.ask(PushOff(endpoint=endpoint)))["on"] is False
            assert notifier(shared).subscriptions.all() == []


async def test_one_reminder_while_a_request_still_waits_and_never_more(
    relay: RelayProcess, tmp_path: Path
) -> None:
    async with (
        push_service() as service,
        notifying_share(relay, tmp_path, service, reminder=0.2) as shared,
    ):
        endpoint, keys = service.subscribe()
        async with (
            page(shared.host.view_link, "vera") as vera,
            attached(shared.host.drive_link, "dan") as dan,
        ):
            assert (await vera.push_on(endpoint, keys))["on"] is True
            await dan.wait_for(lambda t: t.snapshot_done)
            request_id = await request_waits(dan, 1)
            await service.wait_for(lambda s: len(s.to(endpoint)) == 2)
            first, reminder = (push.message for push in service.to(endpoint))
            assert (first["reminder"], reminder["reminder"]) == (False, True)
            assert reminder["tag"] == first["tag"]
            await dan.send(PermissionAnswer(request_id=request_id, option_id="allow_once"))
            await service.wait_for(lambda s: len(s.to(endpoint)) == 3)
            assert kinds(service, endpoint) == ["request", "request", "withdraw"]
            # The next request's reminder comes a reminder's delay after it: by then the first
            # would have reminded again, had it not been answered, or reminded only once.
            await dan.wait_for(lambda t: t.item_of("permission_decision") is not None)
            second = await request_waits(dan, 2)
            await service.wait_for(lambda s: len(s.to(endpoint)) == 5)
            mine = [
                p.message for p in service.to(endpoint) if p.message["request_id"] == request_id
            ]
            assert [m["type"] for m in mine] == ["request", "request", "withdraw"]
            assert service.to(endpoint)[4].message["request_id"] == second
            assert service.to(endpoint)[4].message["reminder"] is True


async def test_only_those_the_approval_rule_names_are_offered_answers(
    relay: RelayProcess, tmp_path: Path
) -> None:
    rules = tmp_path / "team.toml"
    rules.write_text('[[rule]]\nverdict = "ask"\nkind = "read"\nanswer = ["alice"]\n')
    async with (
        push_service() as service,
        notifying_share(relay, tmp_path, service, policy=load_policy(rules)) as shared,
    ):
        assert shared.console.people is not None
        alice_link = await shared.console.people.invite("alice", "drive")
        alice_endpoint, alice_keys = service.subscribe()
        dan_endpoint, dan_keys = service.subscribe()
        async with (
            page(alice_link, "alice") as alice,
            page(shared.host.drive_link, "dan") as dan_page,
            attached(shared.host.drive_link, "dan") as dan,
        ):
            assert (await alice.push_on(alice_endpoint, alice_keys))["on"] is True
            assert (await dan_page.push_on(dan_endpoint, dan_keys))["on"] is True
            await dan.wait_for(lambda t: t.snapshot_done)
            await request_waits(dan, 1)
            await service.wait_for(
                lambda s: len(s.to(alice_endpoint)) == 1 and len(s.to(dan_endpoint)) == 1
            )
            assert service.to(alice_endpoint)[0].message["options"] != []
            # A driver on the role link: told, but the rule gives the answer to alice alone.
            assert service.to(dan_endpoint)[0].message["options"] == []


async def test_a_question_of_the_agents_is_pushed_reminded_once_and_withdrawn_when_answered(
    relay: RelayProcess, tmp_path: Path
) -> None:
    agent = f"acp:{sys.executable} {FAKE_ACP_AGENT}"
    async with (
        push_service() as service,
        notifying_share(relay, tmp_path, service, agent=agent, reminder=0.2) as shared,
    ):
        drive_endpoint, drive_keys = service.subscribe()
        view_endpoint, view_keys = service.subscribe()
        async with (
            page(shared.host.drive_link, "dan") as dan_page,
            page(shared.host.view_link, "vera") as vera,
            attached(shared.host.drive_link, "dan") as dan,
        ):
            assert (await dan_page.push_on(drive_endpoint, drive_keys))["on"] is True
            assert (await vera.push_on(view_endpoint, view_keys))["on"] is True
            await dan.wait_for(lambda t: t.snapshot_done)
            await dan.send(Prompt(text="elicit"))
            await dan.wait_for(lambda t: t.item_of("elicitation_request") is not None)
            asked = dan.item_of("elicitation_request")
            assert asked is not None
            request_id = asked["data"]["request_id"]
            await service.wait_for(
                lambda s: len(s.to(drive_endpoint)) == 2 and len(s.to(view_endpoint)) == 2
            )
            first, reminder = (push.message for push in service.to(drive_endpoint))
            assert first["type"] == "request"
            assert first["request_id"] == request_id
            assert (first["kind"], first["title"], first["command"]) == ("question", "Pick", None)
            # Answered in the page, not from the notification: no options, even to a driver.
            assert first["options"] == []
            assert (first["reminder"], reminder["reminder"]) == (False, True)
            assert service.to(view_endpoint)[0].message["kind"] == "question"

            answer = {"name": "ann", "color": "r"}
            await dan.send(
                ElicitationAnswer(request_id=request_id, action="accept", content=answer)
            )
            await service.wait_for(
                lambda s: len(s.to(drive_endpoint)) == 3 and len(s.to(view_endpoint)) == 3
            )
            assert kinds(service, drive_endpoint) == ["request", "request", "withdraw"]
            assert service.to(view_endpoint)[2].message["request_id"] == request_id
            assert service.errors == []
