"""Notifications against hostile parties: a link holder's endpoints and subscriptions, a push
service or webhook that answers badly, an agent's text, and a revoked person's pushes
(docs/security.md, "Notifications")."""

from __future__ import annotations

import contextlib
import io
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.abc
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from tests.notify.push_keys import BrowserKeys, verify_vapid
from tests.notify.push_service import push_service
from tunnel.host.share import HostPeople
from tunnel.notify import subscriptions as subscriptions_module
from tunnel.notify.command import command_environment
from tunnel.notify.endpoints import EndpointRefused, check_endpoint
from tunnel.notify.events import Waiting
from tunnel.notify.push import PushJob, PushSender
from tunnel.notify.service import Notifier
from tunnel.notify.settings import NotifySettings
from tunnel.notify.subscriptions import (
    MAX_PER_ROLE_LINK,
    MAX_SUBSCRIPTIONS,
    Owner,
    Refused,
    Subscription,
    Subscriptions,
    role_links_mark,
)
from tunnel.notify.vapid import JWT_LIFETIME, VapidKey
from tunnel.notify.webhook import WebhookSender, event_fields
from tunnel.notify.webpush import SALT_SIZE, encrypt
from tunnel.terminal.notify import TerminalSignals, WaitingRequests

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

KEYS = BrowserKeys()


def subscription(endpoint: str, owner: Owner, role: str = "drive") -> Subscription:
    return Subscription(
        owner=owner,
        endpoint=endpoint,
        p256dh=KEYS.public,
        auth=KEYS.auth,
        role=role,
        browser="b" * 22,
    )


def person(name: str) -> Owner:
    return Owner(kind="person", id=name)


def browser(number: int) -> Owner:
    return Owner(kind="browser", id=f"{number:022d}")


def notifier(subscriptions: Subscriptions | None = None) -> Notifier:
    return Notifier(
        NotifySettings(),
        host_id="h" * 26,
        vapid=VapidKey.generate(),
        contact="mailto:ops@example.org",
        subscriptions=Subscriptions() if subscriptions is None else subscriptions,
        agent_name=lambda _conversation: "demo",
    )


# -- a link holder's endpoint: the SSRF guard --------------------------------------------------


@pytest.mark.parametrize(
    "endpoint",
    [
        "https://evil.example;.push.apple.com/x",  # a name no resolver should be handed
        "https://evil.example\\.push.apple.com/x",
        "https://127.0.0.1%2f.push.apple.com/x",
        "https://evil%2eexample.push.apple.com/x",
        "https://127.0.0.1%40.push.apple.com/x",
        "https://fcm.googleapis.com./x",  # a trailing dot: another origin for the JWT
        "https://\u212a.push.apple.com/x",  # the Kelvin sign lower-cases to "k"
        "https://127\u30020\u30020\u30021.push.apple.com/x",  # IDNA maps these to dots
        "https://\uff46cm.googleapis.com/x",  # fullwidth
        "https://[::ffff:127.0.0.1]/x",
        "https://[::1]:443/x",
        "https://fcm.googleapis.com:443@127.0.0.1/x",
        "https://fcm.googleapis.com\\@127.0.0.1/x",
        "https://127.0.0.1#@fcm.googleapis.com/x",
        "https://2130706433/x",  # 127.0.0.1 as one number
    ],
)
def test_an_endpoint_a_resolver_or_client_could_read_elsewhere_is_refused(endpoint: str) -> None:
    with pytest.raises(EndpointRefused):
        check_endpoint(endpoint)


def test_an_endpoint_on_the_default_port_or_in_capitals_is_taken_with_its_origin_as_audience() -> (
    None
):
    vapid = VapidKey.generate()
    for endpoint in ("https://fcm.googleapis.com:443/fcm/send/x", "https://FCM.googleapis.com/x"):
        assert check_endpoint(endpoint) == endpoint
        claims = verify_vapid(
            vapid.authorization(endpoint, contact="mailto:ops@example.org", now=time.time()),
            audience="https://fcm.googleapis.com",
            now=time.time(),
        )
        assert 0 < claims["exp"] - time.time() <= min(JWT_LIFETIME, 24 * 3600)


# -- a link holder and others' subscriptions ---------------------------------------------------


def test_nobody_takes_over_or_turns_off_another_persons_subscription() -> None:
    notes = notifier()
    alice = "https://fcm.googleapis.com/fcm/send/alice"
    notes.subscribe(subscription(alice, person("alice")))
    for thief in (person("mallory"), browser(1)):
        with pytest.raises(Refused):
            notes.subscribe(subscription(alice, thief, role="view"))
    assert not notes.unsubscribe(alice, person="mallory")
    assert not notes.unsubscribe(alice, person=None)  # a role link's holder
    assert notes.subscriptions.get(alice) == subscription(alice, person("alice"))


def test_a_role_links_made_up_browsers_leave_room_for_everyone_else() -> None:
    notes = notifier()
    refused: list[str] = []
    for number in range(MAX_SUBSCRIPTIONS + 1):
        endpoint = f"https://fcm.googleapis.com/fcm/send/v{number}"
        try:
            notes.subscribe(subscription(endpoint, browser(number), role="view"))
        except Refused as exc:
            refused.append(str(exc))
    taken = MAX_SUBSCRIPTIONS + 1 - len(refused)
    assert taken == MAX_PER_ROLE_LINK < MAX_SUBSCRIPTIONS // 2
    assert set(refused) == {"the host keeps no more push subscriptions for this link"}
    # Nobody already subscribed was pushed out to make room, and the others still get theirs.
    assert len(notes.subscriptions) == taken
    notes.subscribe(subscription("https://fcm.googleapis.com/fcm/send/alice", person("alice")))
    notes.subscribe(subscription("https://fcm.googleapis.com/fcm/send/dan", browser(10**6)))
    # A browser already held renews its own place.
    notes.subscribe(subscription("https://fcm.googleapis.com/fcm/send/v0", browser(0), "view"))


def test_focus_counts_only_for_its_owner() -> None:
    notes = notifier()
    notes.focus(object(), browser(1), True)
    assert notes.focused(browser(1))
    assert not notes.focused(person("alice"))
    assert not notes.focused(browser(2))


def test_a_viewer_is_offered_no_answer_even_where_the_rule_names_them() -> None:
    waiting = Waiting(
        request_id="p", title="t", kind="execute", command=None, options=(), answer=("alice",)
    )
    assert not waiting.may_answer(role="view", person="alice")
    assert waiting.may_answer(role="drive", person="alice")
    assert not waiting.may_answer(role="drive", person=None)


class _Invitations:
    def __init__(self) -> None:
        self.roles: dict[str, str] = {}

    def get(self, name: str) -> str | None:
        return self.roles.get(name)


class _Host:
    def __init__(self) -> None:
        self.invitations = _Invitations()

    async def invite(self, name: str, role: str) -> str:
        self.invitations.roles[name] = role
        return f"link of {name}"


async def test_inviting_a_name_again_drops_the_old_links_subscriptions() -> None:
    notes = notifier()
    epochs: list[None] = []
    people = HostPeople(cast(Any, _Host()), lambda: epochs.append(None), notes)
    await people.invite("alice", "drive")
    assert epochs == []  # a first invitation: nobody held a key to retire
    notes.subscribe(subscription("https://fcm.googleapis.com/fcm/send/a", person("alice")))
    notes.subscribe(subscription("https://fcm.googleapis.com/fcm/send/b", person("bob")))
    # Invited again, to view: the drive link's browser would otherwise still be offered answers.
    await people.invite("alice", "view")
    assert [s.owner for s in notes.subscriptions.all()] == [person("bob")]
    assert epochs == [None]  # and every conversation's broadcast key changed


# -- a revoked person ----------------------------------------------------------------------------


async def test_a_push_queued_before_a_revocation_is_not_sent() -> None:
    vapid = VapidKey.generate()
    async with push_service() as service:
        service.vapid_key = vapid.public_key
        held = Subscriptions()
        kept_endpoint, kept_keys = service.subscribe()
        gone_endpoint, gone_keys = service.subscribe()
        kept = Subscription(
            owner=person("bob"),
            endpoint=kept_endpoint,
            p256dh=kept_keys.public,
            auth=kept_keys.auth,
            role="drive",
            browser="b" * 22,
        )
        revoked = Subscription(
            owner=person("alice"),
            endpoint=gone_endpoint,
            p256dh=gone_keys.public,
            auth=gone_keys.auth,
            role="drive",
            browser="a" * 22,
        )
        held.add(revoked)
        held.add(kept)
        sender = PushSender(
            vapid=vapid,
            subscriptions=held,
            contact="mailto:ops@example.org",
            extra_origins=frozenset({service.origin}),
            timeout=10,
            concurrency=1,
            queue_size=8,
        )
        # Queued while the service is slow, then /revoke alice, then the queue drains.
        for job in (revoked, kept):
            assert sender.send_nowait(PushJob(subscription=job, payload=b"{}", topic="t"))
        held.remove_person("alice")
        async with anyio.create_task_group() as tg:
            await tg.start(sender.run)
            await service.wait_for(lambda s: len(s.to(kept_endpoint)) == 1)
            tg.cancel_scope.cancel()
    assert service.to(gone_endpoint) == []
    assert service.errors == []


def test_a_restarted_host_keeps_only_the_subscriptions_of_links_still_valid(
    tmp_path: Path,
) -> None:
    path = tmp_path / "host_key.push"
    held = Subscriptions.load(path, host_id="a" * 26)
    for number, owner in enumerate((person("alice"), person("bob"), browser(1))):
        held.add(subscription(f"https://fcm.googleapis.com/fcm/send/{number}", owner))
    # Alice's link was revoked as the host went down, before her subscriptions were dropped.
    again = Subscriptions.load(path, host_id="a" * 26, people=["bob"])
    assert [s.owner for s in again.all()] == [person("bob"), browser(1)]
    assert len(Subscriptions.load(path, host_id="a" * 26)) == 2
    # The host key was replaced: every link changed, so every subscription goes.
    assert Subscriptions.load(path, host_id="b" * 26, people=["bob"]).all() == []


def test_role_links_replaced_while_the_host_was_down_take_their_subscriptions_along(
    tmp_path: Path,
) -> None:
    path = tmp_path / "host_key.push"
    old, new = role_links_mark("view-1", "drive-1"), role_links_mark("view-2", "drive-2")
    held = Subscriptions.load(path, role_links=old)
    held.add(subscription("https://fcm.googleapis.com/fcm/send/1", person("alice")))
    held.add(subscription("https://fcm.googleapis.com/fcm/send/2", browser(2)))
    # The share secrets were deleted (or rotated) while the host was down: new role links.
    notes = notifier(Subscriptions.load(path, role_links=new))
    assert [s.owner for s in notes.subscriptions.all()] == [person("alice")]
    # /revoke on a running host: those made through the new links are kept under them.
    notes.subscribe(subscription("https://fcm.googleapis.com/fcm/send/3", browser(3)))
    newest = role_links_mark("view-3", "drive-3")
    notes.forget_role_links(newest)
    notes.subscribe(subscription("https://fcm.googleapis.com/fcm/send/4", browser(4)))
    kept = Subscriptions.load(path, role_links=newest).all()
    assert [s.owner for s in kept] == [person("alice"), browser(4)]


def test_a_flood_of_push_on_and_off_writes_the_file_once_a_while_and_a_revocation_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "host_key.push"
    held = Subscriptions.load(path, host_id="a" * 26, save_interval=3600)
    writes: list[bytes] = []
    write = subscriptions_module.write_private_file

    def counted(target: Path, data: bytes, *, overwrite: bool) -> bool:
        writes.append(data)
        return write(target, data, overwrite=overwrite)

    monkeypatch.setattr(subscriptions_module, "write_private_file", counted)
    notes = notifier(held)
    for number in range(200):
        endpoint = f"https://fcm.googleapis.com/fcm/send/{number % 8}"
        notes.subscribe(subscription(endpoint, person("mallory")))
        notes.subscribe(subscription(endpoint, person("mallory")))
        if number % 2:
            notes.unsubscribe(endpoint, person="mallory")
    notes.subscribe(subscription("https://fcm.googleapis.com/fcm/send/alice", person("alice")))
    assert len(writes) == 1
    held.flush()
    assert len(writes) == 2
    assert Subscriptions.load(path, host_id="a" * 26).all() == held.all()
    notes.forget_person("alice")
    assert len(writes) == 3
    assert person("alice") not in [s.owner for s in Subscriptions.load(path).all()]


# -- a hostile push service or webhook ---------------------------------------------------------


@contextlib.asynccontextmanager
async def endless_answer(
    status: bytes, *, endless: bool = True
) -> AsyncIterator[tuple[str, list[bytes]]]:
    """A server on loopback that answers every POST with `status` and a body it says is a
    terabyte long, then sends nothing more (with `endless`; else no body): its origin, and the
    requests it took."""
    requests: list[bytes] = []
    length = b"1099511627776" if endless else b"0"

    async def handle(stream: anyio.abc.ByteStream) -> None:
        async with stream:
            head = await BufferedByteReceiveStream(stream).receive_until(b"\r\n\r\n", 65536)
            requests.append(head)
            await stream.send(
                b"HTTP/1.1 " + status + b"\r\ncontent-length: " + length + b"\r\n\r\n"
            )
            if endless:
                await stream.send(b"x" * 65536)
                await anyio.sleep_forever()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        try:
            yield f"http://127.0.0.1:{port}", requests
        finally:
            tg.cancel_scope.cancel()


async def push_once(origin: str) -> list[int | None]:
    """One push to `origin`'s service: how it ended (its status, None for no answer in time)."""
    statuses: list[int | None] = []
    held = Subscriptions()
    job = subscription(f"{origin}/push/1", browser(1))
    held.add(job)
    sender = PushSender(
        vapid=VapidKey.generate(),
        subscriptions=held,
        contact="mailto:ops@example.org",
        extra_origins=frozenset({origin}),
        timeout=3,
        concurrency=1,
        queue_size=8,
        on_sent=lambda _, status: statuses.append(status),
    )
    async with anyio.create_task_group() as tg:
        await tg.start(sender.run)
        sender.send_nowait(PushJob(subscription=job, payload=b"{}", topic="t"))
        with anyio.fail_after(10):
            while not statuses:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    return statuses


async def test_a_push_services_endless_answer_is_never_read() -> None:
    async with endless_answer(b"201 Created") as (origin, requests):
        # Its status line counted; its body (a terabyte, never finished) was not waited for.
        assert await push_once(origin) == [201]
    assert len(requests) == 1


async def test_a_webhooks_endless_answer_is_never_read(caplog: pytest.LogCaptureFixture) -> None:
    async with endless_answer(b"200 OK") as (origin, requests):
        settings = NotifySettings(send_timeout=3, webhook_attempts=1)
        sender = WebhookSender(f"{origin}/hook", settings, conversation_id="main", host_id="h")
        with caplog.at_level(logging.WARNING, logger="tunnel.notify"):
            async with anyio.create_task_group() as tg:
                await tg.start(sender.run)
                for _ in range(2):
                    sender.notify_nowait(
                        Waiting(
                            request_id="p",
                            title="t",
                            kind="read",
                            command=None,
                            options=(),
                            answer=(),
                        )
                    )
                with anyio.fail_after(10):
                    while len(requests) < 2:
                        await anyio.sleep(0.01)
                tg.cancel_scope.cancel()
    # The second went out after the first's status line: no timeout, nothing failed.
    assert not [r for r in caplog.records if "failed" in r.getMessage()]


async def test_a_redirect_is_not_followed() -> None:
    async with endless_answer(b"200 OK") as (elsewhere, taken):
        redirect = b"307 Temporary Redirect\r\nlocation: " + elsewhere.encode() + b"/admin"
        async with endless_answer(redirect, endless=False) as (origin, requests):
            assert await push_once(origin) == [307]
    assert len(requests) == 1
    assert taken == []


# -- the crypto ----------------------------------------------------------------------------------


def test_every_push_has_a_fresh_salt_and_sender_key() -> None:
    bodies = [encrypt(b"{}", p256dh=KEYS.public, auth=KEYS.auth) for _ in range(8)]
    salts = {body[:SALT_SIZE] for body in bodies}
    senders = {body[SALT_SIZE + 5 : SALT_SIZE + 5 + 65] for body in bodies}
    assert len(salts) == len(senders) == 8
    assert all(KEYS.decrypt(body) == b"{}" for body in bodies)


# -- a hostile agent's text ----------------------------------------------------------------------


def test_an_agents_text_sets_no_variable_of_a_commands_environment() -> None:
    waiting = Waiting(
        request_id="p\0TUNNEL_BY=root",
        title="x\0\nTUNNEL_EVENT=decided\n" + "y" * 10_000,
        kind="execute",
        command="rm -rf /\0",
        options=(),
        answer=("drivers",),
    )
    env = command_environment(event_fields(waiting, host_id="h", conversation_id="c", details=True))
    assert set(env) == {
        "TUNNEL_EVENT",
        "TUNNEL_HOST",
        "TUNNEL_CONVERSATION",
        "TUNNEL_REQUEST_ID",
        "TUNNEL_KIND",
        "TUNNEL_ANSWER",
        "TUNNEL_TITLE",
        "TUNNEL_COMMAND",
    }
    assert env["TUNNEL_EVENT"] == "waiting"
    assert not any("\0" in value for value in env.values())
    assert max(len(value) for value in env.values()) <= 4096


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_terminal_title_holds_only_our_text() -> None:
    out = _Terminal()
    signals = TerminalSignals(out, program="tunnel attach", environ={"TERM": "xterm"})
    waiting = WaitingRequests()
    new = waiting.update(["\x1b]2;owned\x07", "\x07\x1b]0;x\x1b\\"])
    signals.show(waiting, new)
    signals.close()
    assert "owned" not in out.getvalue()
    assert out.getvalue() == (
        "\a\a\x1b[22;0t\x1b]2;[2 waiting] tunnel attach\x07\x1b]2;\x07\x1b[23;0t"
    )
