"""`PushSender` against the loopback push service: a failing service is said once, a gone
subscription dropped, an endpoint no longer allowed never posted to."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from urllib.parse import urlsplit

import anyio
import pytest

from tests.notify.push_service import Answer, PushService, push_service
from tunnel.notify.push import PushJob, PushSender
from tunnel.notify.settings import FALLBACK_CONTACT, default_contact
from tunnel.notify.subscriptions import Owner, Subscription, Subscriptions
from tunnel.notify.vapid import VapidKey
from tunnel.process.logs import configure_logging

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


def subscription(service: PushService, answer: Answer) -> Subscription:
    endpoint, keys = service.subscribe(answer)
    return Subscription(
        owner=Owner(kind="browser", id=endpoint[-20:]),
        endpoint=endpoint,
        p256dh=keys.public,
        auth=keys.auth,
        role="view",
        browser="b" * 16,
    )


async def test_failures_are_said_once_per_endpoint_and_a_gone_one_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    vapid = VapidKey.generate()
    async with push_service() as service:
        service.vapid_key = vapid.public_key
        held = Subscriptions()
        failing, gone = subscription(service, "error"), subscription(service, "gone")
        held.add(failing)
        held.add(gone)
        sender = PushSender(
            vapid=vapid,
            subscriptions=held,
            contact="mailto:ops@example.org",
            extra_origins=frozenset({service.origin}),
            timeout=10,
            concurrency=1,
            queue_size=8,
        )
        with caplog.at_level(logging.INFO, logger="tunnel.notify"):
            async with anyio.create_task_group() as tg:
                await tg.start(sender.run)
                for _ in range(3):
                    assert sender.send_nowait(
                        PushJob(subscription=failing, payload=b"{}", topic="t")
                    )
                assert sender.send_nowait(PushJob(subscription=gone, payload=b"{}", topic="t"))
                await service.wait_for(lambda s: len(s.pushes) == 4)
                with anyio.fail_after(10):
                    while held.get(gone.endpoint) is not None:
                        await anyio.sleep(0.01)
                tg.cancel_scope.cancel()
    assert service.errors == []
    failed = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert failed == [f"a push to {service.origin} failed (HTTP 500)"]
    # The capability URL itself never reaches the log.
    assert not any(failing.endpoint in r.getMessage() for r in caplog.records)
    assert held.get(failing.endpoint) is not None


@pytest.fixture
def logging_at_info() -> Iterator[None]:
    """The host's own logging setup at `--log-level info`, undone after the test."""
    names = ("websockets", "httpx", "httpcore")
    levels = [logging.getLogger(name).level for name in names]
    configure_logging("info")
    yield
    for name, level in zip(names, levels, strict=True):
        logging.getLogger(name).setLevel(level)


@pytest.mark.usefixtures("logging_at_info")
async def test_a_push_endpoint_never_reaches_the_log_at_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    vapid = VapidKey.generate()
    async with push_service() as service:
        service.vapid_key = vapid.public_key
        held = Subscriptions()
        sub = subscription(service, "created")
        held.add(sub)
        sent = anyio.Event()
        sender = PushSender(
            vapid=vapid,
            subscriptions=held,
            contact="mailto:ops@example.org",
            extra_origins=frozenset({service.origin}),
            timeout=10,
            concurrency=1,
            queue_size=8,
            on_sent=lambda job, status: sent.set(),
        )
        with caplog.at_level(logging.INFO):
            async with anyio.create_task_group() as tg:
                await tg.start(sender.run)
                assert sender.send_nowait(PushJob(subscription=sub, payload=b"{}", topic="t"))
                with anyio.fail_after(10):
                    await sent.wait()
                tg.cancel_scope.cancel()
    assert len(service.pushes) == 1
    assert service.errors == []
    path = urlsplit(sub.endpoint).path
    assert not any(path in r.getMessage() for r in caplog.records)


def test_the_default_contact_is_the_relays_https_host() -> None:
    assert default_contact("https://relay.example/") == "https://relay.example"
    assert default_contact("http://127.0.0.1:8765") == FALLBACK_CONTACT
    # A port or path would make every JWT unsignable: the contact is the host alone.
    contact = default_contact("https://relay.example.com:8443/tunnel/")
    assert contact == "https://relay.example.com"
    VapidKey.generate().authorization("https://push.example/x", contact=contact, now=0)
    assert default_contact("https://[::1]:8443") == FALLBACK_CONTACT
