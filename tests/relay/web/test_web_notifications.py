"""The installable page and its notifications: the manifest and icons, the service worker, the
toggle's requests to the host, and what a pushed request shows and a tap on it does."""

from __future__ import annotations

import http.server
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from playwright.sync_api import Browser, BrowserContext, CDPSession, Page, Worker, expect

from tests.notify.push_keys import BrowserKeys, b64e
from tunnel.e2e.crypto import b64url_encode
from tunnel.relay.web import ICONS, MANIFEST_CONTENT_TYPE

from .conftest import PageLog
from .fake_relay import HOST_ID, FakeRelay, Scenario, fake_relay, wire_item
from .stack import Host, isolated_env, running_relay

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

PUSH_KEY = b64url_encode(
    ec.generate_private_key(ec.SECP256R1())
    .public_key()
    .public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
)
ENDPOINT = "https://push.example/send/abc123"
# How long a wait on the browser (the page's requests, its worker's handling of a push, the
# notifications it shows) or on the host's pushes may take before the test fails: generous,
# since a loaded machine runs them late, and spent only when what is waited for never comes.
WAIT = 30.0
OPTIONS = [
    {"option_id": "allow", "name": "Allow once", "kind": "allow_once"},
    {"option_id": "reject", "name": "Reject", "kind": "reject_once"},
]
# PushManager.subscribe as a browser with a reachable push service answers it: the page's
# requests are checked, not the push service (headless chromium reaches none).
STUB_SUBSCRIBE = """
window.__subscribed = [];
window.__unsubscribed = 0;
PushManager.prototype.subscribe = async function (options) {
  const key = new Uint8Array(options.applicationServerKey);
  window.__subscribed.push({ userVisibleOnly: options.userVisibleOnly, key: Array.from(key) });
  const { endpoint, p256dh, auth } = window.__subscription;
  window.__current = {
    endpoint,
    options: { applicationServerKey: key.buffer, userVisibleOnly: true },
    toJSON() { return { endpoint, keys: { p256dh, auth } }; },
    unsubscribe: async () => {
      window.__unsubscribed += 1;
      window.__current = null;
      return true;
    },
  };
  return window.__current;
};
PushManager.prototype.getSubscription = async () => window.__current ?? null;
"""
KEPT_LINK = """(host) => new Promise((resolve) => {
  const open = indexedDB.open("agent-tunnel");
  open.onsuccess = () => {
    const get = open.result.transaction("links").objectStore("links").get(host);
    get.onsuccess = () => resolve(get.result ?? null);
  };
})"""


def request_item(seq: int, request_id: str) -> dict[str, Any]:
    return wire_item(
        seq,
        "permission_request",
        {
            "request_id": request_id,
            "title": "Run make deploy",
            "tool_call": {"kind": "execute", "input": {"command": "make deploy"}},
            "tool_call_id": None,
            "options": OPTIONS,
        },
        status="action_required",
    )


def request_push(request_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "v": 1,
        "type": "request",
        "tag": f"{HOST_ID}/{request_id}",
        "host": HOST_ID,
        "request_id": request_id,
        "agent": "claude",
        "title": "Run make deploy",
        "kind": "execute",
        "command": "make deploy",
        "options": OPTIONS,
        "reminder": False,
        **extra,
    }


def wait_for_ops(relay: FakeRelay, op: str, count: int) -> list[dict[str, Any]]:
    """The page's requests `op` once there are `count` of them (failing after WAIT seconds)."""
    deadline = time.monotonic() + WAIT
    while len(relay.ops(op)) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    found = relay.ops(op)
    assert len(found) == count, found
    return found


def stub_subscribe(endpoint: str = ENDPOINT, p256dh: str = "BPk", auth: str = "au") -> str:
    """The init script of STUB_SUBSCRIBE, whose subscription has these endpoint and keys."""
    subscription = {"endpoint": endpoint, "p256dh": p256dh, "auth": auth}
    return f"window.__subscription = {json.dumps(subscription)};{STUB_SUBSCRIBE}"


@dataclass
class Pushed:
    """A page with notifications allowed, its relay, and the DevTools session that pushes."""

    page: Page
    relay: FakeRelay | None
    cdp: CDPSession
    registrations: dict[str, str]
    completed: list[tuple[str, str]] = field(default_factory=list)
    """(registration id, status) of each push event the browser says its worker finished."""

    @property
    def fake(self) -> FakeRelay:
        assert self.relay is not None
        return self.relay

    @classmethod
    def start(cls, page: Page, relay: FakeRelay | None = None) -> Pushed:
        cdp = page.context.new_cdp_session(page)
        registrations: dict[str, str] = {}
        cdp.on(
            "ServiceWorker.workerRegistrationUpdated",
            lambda event: registrations.update(
                {r["scopeURL"]: r["registrationId"] for r in event["registrations"]}
            ),
        )
        cdp.send("ServiceWorker.enable")
        pushed = cls(page=page, relay=relay, cdp=cdp, registrations=registrations)
        # ServiceWorker.deliverPushMessage answers before the worker has the push (it may have
        # to start first); the push messaging log says when the worker's handling of it (its
        # waitUntil promise, showNotification's included) has settled, and how.
        cdp.on("BackgroundService.backgroundServiceEventReceived", pushed._on_background_event)
        cdp.send("BackgroundService.startObserving", {"service": "pushMessaging"})
        cdp.send(
            "BackgroundService.setRecording", {"shouldRecord": True, "service": "pushMessaging"}
        )
        return pushed

    def _on_background_event(self, event: dict[str, Any]) -> None:
        logged = event["backgroundServiceEvent"]
        if logged["eventName"] == "Push event completed":
            status = {m["key"]: m["value"] for m in logged["eventMetadata"]}.get("Status", "")
            self.completed.append((logged["serviceWorkerRegistrationId"], status))

    @property
    def origin(self) -> str:
        url = self.page.url
        return url[: url.index("/", len("http://"))]

    def worker(self) -> Worker:
        context = self.page.context
        for worker in context.service_workers:
            if worker.url.endswith("/sw.js"):
                return worker
        return context.wait_for_event("serviceworker")

    def deliver(self, payload: dict[str, Any] | str) -> None:
        """Push `payload` to the page's worker, returning once the worker has handled it."""
        scope = self.page.url.split("?")[0].split("#")[0]
        self.page.evaluate("navigator.serviceWorker.ready.then(() => true)")
        self.wait_for_browser(lambda: scope in self.registrations)
        assert scope in self.registrations, self.registrations
        registration = self.registrations[scope]
        data = payload if isinstance(payload, str) else json.dumps(payload)
        before = len(self.completed)
        self.cdp.send(
            "ServiceWorker.deliverPushMessage",
            {"origin": self.origin, "registrationId": registration, "data": data},
        )
        self.wait_for_browser(lambda: len(self.completed) > before)
        finished = self.completed[before:]
        assert finished == [(registration, "Success")], f"the push events finished: {finished}"

    def wait_for_browser(self, condition: Callable[[], bool]) -> None:
        """Until `condition` holds or WAIT seconds pass, DevTools events arriving meanwhile."""
        deadline = time.monotonic() + WAIT
        while not condition() and time.monotonic() < deadline:
            self.page.wait_for_timeout(20)  # DevTools events arrive while Playwright waits

    def shown(
        self, count: int, check: Callable[[list[dict[str, Any]]], bool] = lambda _: True
    ) -> list[dict[str, Any]]:
        """The notifications shown, once there are `count` of them and `check` holds."""
        # A push handled has shown its notification, but one closed may still be listed a moment:
        # Notification.close() does not wait for the browser to forget it.
        deadline = time.monotonic() + WAIT
        while True:
            found = self.notifications()
            if (len(found) == count and check(found)) or time.monotonic() > deadline:
                break
            self.page.wait_for_timeout(20)
        assert len(found) == count, found
        assert check(found), found
        return found

    def notifications(self) -> list[dict[str, Any]]:
        return self.page.evaluate(
            """async () => {
              const registration = await navigator.serviceWorker.ready;
              return (await registration.getNotifications()).map((n) => ({
                title: n.title, body: n.body, tag: n.tag, renotify: n.renotify, data: n.data,
                actions: n.actions.map((a) => ({ action: a.action, title: a.title })),
              }));
            }"""
        )


@pytest.fixture
def allowed(browser: Browser) -> Iterator[BrowserContext]:
    context = browser.new_context(viewport={"width": 1200, "height": 860})
    context.grant_permissions(["notifications"])
    yield context
    context.close()


def open_page(context: BrowserContext, url: str, log: PageLog, *, stub: str | None) -> Page:
    if stub is not None:
        context.add_init_script(stub)
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.on("console", log.on_console)
    page.on("pageerror", log.on_page_error)
    page.goto(url)
    expect(page.get_by_test_id("connection-status")).to_have_attribute("data-state", "connected")
    return page


@pytest.fixture
def pushed(allowed: BrowserContext, page_log: PageLog) -> Iterator[Pushed]:
    items = [request_item(0, "p1")]
    with fake_relay(Scenario(items=items, push_key=PUSH_KEY)) as relay:
        page = open_page(allowed, relay.page_url("drive"), page_log, stub=stub_subscribe())
        yield Pushed.start(page, relay)


def test_the_page_installs_with_its_manifest_and_registers_its_worker(
    allowed: BrowserContext, page_log: PageLog
) -> None:
    with fake_relay(Scenario(push_key=PUSH_KEY)) as relay:
        page = open_page(allowed, relay.page_url("drive"), page_log, stub=None)
        scope = page.evaluate("navigator.serviceWorker.ready.then((r) => r.scope)")
        assert scope == f"{relay.base_url}/h/{HOST_ID}"
        found = page.evaluate(
            """async () => {
              const href = document.querySelector("link[rel=manifest]").href;
              const response = await fetch(href);
              const manifest = await response.json();
              const icons = [];
              for (const icon of manifest.icons) {
                const image = new Image();
                image.src = new URL(icon.src, href).href;
                await image.decode();
                const got = await fetch(image.src);
                icons.push({ ...icon, width: image.naturalWidth, height: image.naturalHeight,
                  type: got.headers.get("content-type") });
              }
              const worker = await fetch((await navigator.serviceWorker.ready).active.scriptURL);
              return { href, type: response.headers.get("content-type"), manifest, icons,
                worker: worker.headers.get("service-worker-allowed"),
                theme: document.querySelector("meta[name=theme-color]").content,
                touch: document.querySelector("link[rel=apple-touch-icon]").href };
            }"""
        )
        page_url = f"/h/{HOST_ID}"
        assert found["href"] == f"{relay.base_url}{page_url}/manifest.webmanifest"
        assert found["type"] == MANIFEST_CONTENT_TYPE
        manifest = found["manifest"]
        assert manifest["start_url"] == page_url
        assert manifest["scope"] == page_url
        assert manifest["display"] == "standalone"
        assert manifest["name"]
        assert manifest["short_name"]
        assert manifest["theme_color"] == found["theme"]
        assert manifest["background_color"].startswith("#")
        assert "#" not in json.dumps(manifest).replace(manifest["theme_color"], "").replace(
            manifest["background_color"], ""
        ), "nothing of a link's fragment is in the manifest"
        assert found["worker"] == "/h/"
        shown = {
            (i["sizes"], i["purpose"], i["width"], i["height"], i["type"]) for i in found["icons"]
        }
        assert shown == {
            (f"{size}x{size}", purpose, size, size, "image/png") for _, size, purpose in ICONS
        }
        assert {size for _, size, purpose in ICONS if purpose == "any"} >= {192, 512}
        assert any(purpose == "maskable" for _, _, purpose in ICONS)
        assert found["touch"].endswith("/icon-192.png")
        cdp = allowed.new_cdp_session(page)
        app = cdp.send("Page.getAppManifest")
        assert app["errors"] == []
        assert app["url"] == found["href"]
        # Installable: chromium finds nothing against it but the test's own incognito context.
        errors = cdp.send("Page.getInstallabilityErrors")["installabilityErrors"]
        assert [e["errorId"] for e in errors if e["errorId"] != "in-incognito"] == []
        assert cdp.send("Page.getAppId")["appId"] == f"{relay.base_url}{page_url}"
        assert page_log.errors == []


def test_the_toggle_subscribes_with_the_hosts_key_and_tells_the_host(pushed: Pushed) -> None:
    page, relay = pushed.page, pushed.fake
    focus = wait_for_ops(relay, "focus", 1)
    assert focus[0]["focused"] in (True, False)
    browser_id = focus[0]["browser"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", browser_id)
    toggle = page.get_by_test_id("notify-toggle")
    expect(toggle).to_have_attribute("aria-pressed", "false")
    toggle.click()
    expect(page.get_by_test_id("notify-status")).to_have_attribute("data-state", "working")
    page.wait_for_function("() => window.__subscribed.length === 1")
    subscribed = page.evaluate("window.__subscribed[0]")
    assert subscribed["userVisibleOnly"] is True
    assert b64url_encode(bytes(subscribed["key"])) == PUSH_KEY
    (on,) = wait_for_ops(relay, "push_on", 1)
    assert {k: v for k, v in on.items() if not k.startswith("_")} == {
        "op": "push_on",
        "endpoint": ENDPOINT,
        "p256dh": "BPk",
        "auth": "au",
        "browser": browser_id,
    }
    relay.send({"op": "push", "on": True, "endpoint": ENDPOINT})
    expect(toggle).to_have_attribute("aria-pressed", "true")
    expect(page.get_by_test_id("notify-status")).to_have_attribute("data-state", "on")
    # The worker keeps the link, fragment and all, for a tap with no window open.
    assert page.evaluate(KEPT_LINK, HOST_ID) == page.url

    # The installed page starts without the fragment: the kept link opens it.
    launched = page.context.new_page()
    launched.goto(f"{relay.base_url}/h/{HOST_ID}")
    expect(launched).to_have_url(page.url)
    expect(launched.get_by_test_id("connection-status")).to_have_attribute(
        "data-state", "connected"
    )
    launched.close()
    # A tap with no window of the host open opens the kept link at the request.
    base, fragment = page.url.split("#")
    tapped = page.context.new_page()
    tapped.goto(f"{base}?request=p1&option=reject#{fragment}")
    card = tapped.locator("[data-testid=permission-request][data-request-id=p1]")
    expect(card).to_have_attribute("data-wanted", "true")
    expect(card.locator("button[data-option-id=reject]")).to_have_attribute(
        "data-preselected", "true"
    )
    expect(tapped).to_have_url(page.url)
    tapped.close()

    toggle.click()
    expect(toggle).to_have_attribute("aria-pressed", "false")
    page.wait_for_function("() => window.__unsubscribed === 1")
    (off,) = wait_for_ops(relay, "push_off", 1)
    assert off["endpoint"] == ENDPOINT
    assert page.evaluate(KEPT_LINK, HOST_ID) is None
    assert relay.errors == []


def test_a_pushed_request_shows_is_withdrawn_and_a_tap_opens_it_unanswered(
    pushed: Pushed,
) -> None:
    page, relay = pushed.page, pushed.fake
    pushed.deliver(request_push("p1"))
    (shown,) = pushed.shown(1)
    assert shown["title"] == "claude asks: Run make deploy"
    assert shown["body"] == "make deploy"
    assert shown["tag"] == f"{HOST_ID}/p1"
    assert shown["renotify"] is False
    assert shown["actions"][0] == {"action": "open", "title": "Open"}
    max_actions = page.evaluate("Notification.maxActions")
    assert len(shown["actions"]) == min(max_actions, 1 + len(OPTIONS))
    assert shown["actions"][1] == {"action": "option:0", "title": "Allow once"}

    # A reminder replaces it, and sounds again.
    pushed.deliver(request_push("p1", reminder=True, title="Run make deploy (waiting)"))
    (reminder,) = pushed.shown(1, lambda found: found[0]["renotify"] is True)
    assert reminder["title"] == "claude asks: Run make deploy (waiting)"
    pushed.deliver(
        {"v": 1, "type": "withdraw", "tag": f"{HOST_ID}/p1", "host": HOST_ID, "request_id": "p1"}
    )
    pushed.shown(0)

    pushed.deliver(request_push("p1"))
    pushed.shown(1)
    page.evaluate("document.scrollingElement.scrollTop = 0")
    pushed.worker().evaluate(
        """async (tag) => {
          const [notification] = await registration.getNotifications({ tag });
          notification.close();
          await openRequest(notification, "option:0");
        }""",
        f"{HOST_ID}/p1",
    )
    card = page.locator("[data-testid=permission-request][data-request-id=p1]")
    expect(card).to_have_attribute("data-wanted", "true")
    allow = card.locator("button[data-option-id=allow]")
    expect(allow).to_have_attribute("data-preselected", "true")
    expect(card.get_by_test_id("permission-confirm")).to_contain_text("Allow once")
    expect(card.locator("button[data-option-id=reject]")).not_to_have_attribute(
        "data-preselected", "true"
    )
    expect(card).to_be_in_viewport()
    assert relay.ops("permission") == [], "a tap on the notification answers nothing"
    # A tap on the notification itself (or Open) brings the request with no option chosen.
    pushed.worker().evaluate(
        "(data) => openRequest({ data }, '')",
        {"host": HOST_ID, "request_id": "p1", "options": []},
    )
    expect(allow).not_to_have_attribute("data-preselected", "true")
    expect(card.get_by_test_id("permission-confirm")).to_have_count(0)
    expect(card).to_have_attribute("data-wanted", "true")
    allow.click()
    (answer,) = wait_for_ops(relay, "permission", 1)
    assert (answer["request_id"], answer["option_id"]) == ("p1", "allow")
    assert relay.errors == []


def test_a_pushed_question_shows_its_message_and_a_tap_brings_up_its_card(pushed: Pushed) -> None:
    page, relay = pushed.page, pushed.fake
    question = request_push("ask_1", title="Which colour?", kind="question", command=None)
    pushed.deliver({**question, "options": []})
    (shown,) = pushed.shown(1)
    assert shown["title"] == "claude asks: Which colour?"
    assert shown["body"] == "question"
    assert shown["actions"] == [{"action": "open", "title": "Open"}]
    pushed.deliver(
        {
            "v": 1,
            "type": "withdraw",
            "tag": f"{HOST_ID}/ask_1",
            "host": HOST_ID,
            "request_id": "ask_1",
        }
    )
    pushed.shown(0)

    # A tap before the question is on the page: its card is brought up when it arrives.
    page.evaluate("document.scrollingElement.scrollTop = 0")
    pushed.worker().evaluate(
        "(data) => openRequest({ data }, '')",
        {"host": HOST_ID, "request_id": "ask_1", "options": []},
    )
    fields = [{"name": "colour", "kind": "string", "title": "Colour", "required": True}]
    for seq in range(1, 40):  # enough to push the first card out of view
        relay.push(wire_item(seq, "message", {"role": "agent", "text": f"line {seq}"}))
    asked = {"request_id": "ask_1", "message": "Which colour?", "fields": fields}
    relay.push(wire_item(40, "elicitation_request", asked, status="action_required"))
    card = page.locator("[data-testid=question][data-request-id=ask_1]")
    expect(card).to_have_attribute("data-wanted", "true")
    expect(card).to_be_in_viewport()
    assert relay.ops("elicitation") == [], "a tap on the notification answers nothing"


def test_a_push_that_is_not_this_hosts_request_shows_nothing_and_text_is_cut(
    pushed: Pushed,
) -> None:
    for wrong in [
        "not json",
        json.dumps(["a list"]),
        {**request_push("p1"), "v": 2},
        {**request_push("p1"), "host": "a" * 26, "tag": f"{'a' * 26}/p1"},
        {**request_push("p1"), "tag": f"{HOST_ID}/p2"},
        {**request_push("p1"), "type": "answer"},
        {**request_push("p1"), "request_id": 7},
    ]:
        pushed.deliver(wrong)
    pushed.deliver(
        request_push(
            "p9",
            agent="cl\u202eaude\u0007",
            title="x" * 500,
            command=None,
            kind="edit\nnow",
            options=[{"option_id": "ok", "name": "<b>Yes</b>", "kind": "allow_once"}, "junk"],
        )
    )
    (shown,) = pushed.shown(1)
    assert shown["tag"] == f"{HOST_ID}/p9"
    agent, title = shown["title"].split(" asks: ")
    assert agent == "cl aude"
    assert len(title) <= 160
    assert title.endswith("…")
    assert shown["body"] == "edit now"
    assert [a["title"] for a in shown["actions"]] == ["Open", "<b>Yes</b>"]
    assert shown["data"] == {
        "host": HOST_ID,
        "request_id": "p9",
        "options": [{"option_id": "ok", "name": "<b>Yes</b>"}],
    }


def test_a_hostile_push_tap_or_message_shows_keeps_and_opens_nothing_but_this_hosts_page(
    pushed: Pushed,
) -> None:
    page = pushed.page
    # Overrides, isolates, marks and other lines: none reorders or breaks what is shown.
    pushed.deliver(
        request_push(
            "p1",
            agent="\u2067claude\u2069",
            title="Run \u202etests\u202c \u200fnow\u061c\u0085 please\u2028ok",
            command="make\u200e deploy",
        )
    )
    (shown,) = pushed.shown(1)
    assert shown["title"] == "claude asks: Run tests now please ok"
    assert shown["body"] == "make deploy"

    # The worker keeps only this host's page on this origin, with its fragment.
    worker = pushed.worker()
    page_link = f"{pushed.origin}/h/{HOST_ID}#drive.secret"
    candidates = [
        page_link,
        f"https://evil.example/h/{HOST_ID}#drive.secret",
        f"{pushed.origin}/h/{'a' * 26}#drive.secret",
        f"{pushed.origin}/h/{HOST_ID}",
        f"{pushed.origin}/h/{HOST_ID}/x#drive.secret",
        f"javascript:alert(1)//{HOST_ID}#x",
    ]
    kept = worker.evaluate("(values) => values.map(isPageLink)", candidates)
    assert kept == [True] + [False] * (len(candidates) - 1)
    ask = """async (message) => {
      const registration = await navigator.serviceWorker.ready;
      const channel = new MessageChannel();
      const reply = new Promise((resolve) => {
        channel.port1.onmessage = (e) => resolve(e.data);
      });
      registration.active.postMessage(message, [channel.port2]);
      return await reply;
    }"""
    assert page.evaluate(ask, {"type": "keep_link", "url": candidates[1]}) == {"ok": False}
    assert page.evaluate(ask, {"type": "kept_link"}) == {"ok": True, "url": None}

    # A tap whose data is another host's tells the page nothing; an option the notification
    # never had chooses none.
    page.evaluate(
        """() => {
          window.__told = [];
          navigator.serviceWorker.addEventListener("message", (e) => window.__told.push(e.data));
        }"""
    )
    worker.evaluate(
        "(data) => openRequest({ data }, 'option:0')",
        {"host": "a" * 26, "request_id": "p1", "options": OPTIONS},
    )
    worker.evaluate(
        "(data) => openRequest({ data }, 'option:7')",
        {"host": HOST_ID, "request_id": "p1", "options": OPTIONS},
    )
    page.wait_for_function("window.__told.length > 0")
    told = page.evaluate("window.__told")
    assert told == [{"type": "open_request", "request_id": "p1", "option_id": None}]
    card = page.locator("[data-testid=permission-request][data-request-id=p1]")
    expect(card).to_have_attribute("data-wanted", "true")
    expect(card.locator("[data-preselected=true]")).to_have_count(0)
    assert pushed.fake.ops("permission") == []


def test_a_host_without_push_gets_no_toggle_and_no_notification_requests(page: Page) -> None:
    with fake_relay() as relay:
        page.goto(relay.page_url("drive"))
        expect(page.get_by_test_id("connection-status")).to_have_attribute(
            "data-state", "connected"
        )
        page.get_by_test_id("composer-input").fill("hello")
        page.get_by_test_id("send-button").click()
        expect(page.get_by_test_id("notify")).to_be_hidden()
        wait_for_ops(relay, "prompt", 1)
        assert [m["op"] for m in relay.received] == ["subscribe", "prompt"]


def test_refusals_by_the_browser_its_push_service_and_the_host_each_say_so(
    allowed: BrowserContext, page_log: PageLog
) -> None:
    with fake_relay(Scenario(push_key=PUSH_KEY)) as relay:
        page = open_page(allowed, relay.page_url("drive"), page_log, stub=None)
        toggle, status = page.get_by_test_id("notify-toggle"), page.get_by_test_id("notify-status")
        # Headless chromium reaches no push service: the real subscribe fails.
        toggle.click()
        expect(status).to_have_attribute("data-state", "failed")
        expect(status).to_contain_text("could not subscribe to push notifications")
        expect(toggle).to_be_enabled()
        expect(toggle).to_have_attribute("aria-pressed", "false")
        assert relay.ops("push_on") == []

        page.add_init_script(stub_subscribe())
        page.reload()
        expect(page.get_by_test_id("connection-status")).to_have_attribute(
            "data-state", "connected"
        )
        toggle.click()
        page.wait_for_function("() => window.__subscribed.length === 1")
        # An error about something else is no refusal: only the next one is.
        relay.send({"op": "error", "code": "agent_unavailable", "message": "not running"})
        relay.send({"op": "error", "code": "forbidden", "message": "no notifications for you"})
        expect(status).to_have_attribute("data-state", "failed")
        expect(status).to_have_text(
            "The host did not turn notifications on: no notifications for you"
        )
        expect(toggle).to_have_attribute("aria-pressed", "false")
        page.wait_for_function("() => window.__unsubscribed === 1")

        allowed.clear_permissions()
        page.evaluate("() => { Notification.requestPermission = async () => 'denied'; }")
        toggle.click()
        expect(status).to_have_attribute("data-state", "blocked")
        expect(status).to_contain_text("blocks notifications")
        wait_for_ops(relay, "push_on", 1)
    # Chromium says why its own subscribe failed (Playwright's contexts are incognito ones).
    assert [e for e in page_log.errors if "Push API in incognito" not in e] == []


def test_the_page_tells_the_host_whether_it_is_in_view(pushed: Pushed) -> None:
    page, relay = pushed.page, pushed.fake
    (first,) = wait_for_ops(relay, "focus", 1)
    page.evaluate(
        """() => {
          document.hasFocus = () => false;
          window.dispatchEvent(new Event("blur"));
        }"""
    )
    wait_for_ops(relay, "focus", 2)
    page.evaluate(
        """() => {
          document.hasFocus = () => true;
          window.dispatchEvent(new Event("focus"));
          document.dispatchEvent(new Event("visibilitychange"));
        }"""
    )
    sent = [(m["focused"], m["browser"]) for m in wait_for_ops(relay, "focus", 3)]
    assert sent == [(True, first["browser"]), (False, first["browser"]), (True, first["browser"])]


@dataclass
class PushInbox:
    """A push service on loopback that takes every POST (201) and keeps its body."""

    origin: str = ""
    bodies: list[bytes] = field(default_factory=list)

    def wait_for(self, count: int) -> list[bytes]:
        deadline = time.monotonic() + WAIT
        while len(self.bodies) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(self.bodies) >= count, self.bodies
        return self.bodies[:count]


@contextmanager
def push_inbox() -> Iterator[PushInbox]:
    inbox = PushInbox()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            inbox.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(201)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    inbox.origin = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield inbox
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_a_real_hosts_push_becomes_the_pages_notification_and_a_tap_opens_its_request(
    allowed: BrowserContext, page_log: PageLog, tmp_path: Path
) -> None:
    keys = BrowserKeys()
    with push_inbox() as inbox, running_relay(tmp_path / "relay") as relay:
        home = tmp_path / "host"
        home.mkdir()
        env = {**isolated_env(home), "TUNNEL_HOST_PUSH_SERVICE": inbox.origin}
        host = Host.start(home, relay.url, env=env)
        try:
            endpoint = f"{inbox.origin}/push/page"
            stub = stub_subscribe(endpoint, b64e(keys.public), b64e(keys.auth))
            page = open_page(allowed, host.drive_link, page_log, stub=stub)
            pushed = Pushed.start(page)
            # The relay serves the manifest as the page's own tests serve it.
            served = page.evaluate(
                """async () => (await fetch(document.querySelector("link[rel=manifest]").href))
                  .headers.get("content-type")"""
            )
            assert served == MANIFEST_CONTENT_TYPE
            page.get_by_test_id("notify-toggle").click()
            # The host took the subscription (its endpoint on an allowed push service).
            expect(page.get_by_test_id("notify-status")).to_have_attribute("data-state", "on")
            # Away from the page: the host pushes the request it is asked.
            page.evaluate("""() => {
              document.hasFocus = () => false;
              window.dispatchEvent(new Event("blur"));
            }""")
            box = page.get_by_test_id("composer-input")
            box.fill("count the lines")
            box.press("Enter")
            (body,) = inbox.wait_for(1)
            payload = json.loads(keys.decrypt(body))
            assert payload["type"] == "request"
            card = page.locator(
                f"[data-testid=permission-request][data-request-id={payload['request_id']}]"
            )
            expect(card).to_have_attribute("data-state", "pending")

            pushed.deliver(keys.decrypt(body).decode())
            (shown,) = pushed.shown(1)
            assert shown["title"] == f"demo asks: {payload['title']}"
            assert shown["actions"][1]["title"] == payload["options"][0]["name"]
            page.evaluate("document.scrollingElement.scrollTop = 0")
            pushed.worker().evaluate(
                """async (tag) => {
                  const [notification] = await registration.getNotifications({ tag });
                  notification.close();
                  await openRequest(notification, "option:0");
                }""",
                payload["tag"],
            )
            option = card.locator(f"button[data-option-id={payload['options'][0]['option_id']}]")
            expect(option).to_have_attribute("data-preselected", "true")
            expect(card).to_have_attribute("data-state", "pending")
            option.click()
            expect(card).to_have_attribute("data-state", "answered")
            # Answered: the host withdraws it, and the worker closes what it showed.
            withdrawn = json.loads(keys.decrypt(inbox.wait_for(2)[1]))
            assert withdrawn["type"] == "withdraw"
            assert withdrawn["tag"] == payload["tag"]
            pushed.deliver(json.dumps(withdrawn))
            pushed.shown(0)
        finally:
            host.process.stop()
    assert [e for e in page_log.errors if "Push API in incognito" not in e] == []


def test_a_page_attached_again_gives_the_host_its_subscription_again(pushed: Pushed) -> None:
    page, relay = pushed.page, pushed.fake
    page.get_by_test_id("notify-toggle").click()
    wait_for_ops(relay, "push_on", 1)
    relay.send({"op": "push", "on": True, "endpoint": ENDPOINT})
    status = page.get_by_test_id("notify-status")
    expect(status).to_have_attribute("data-state", "on")
    relay.drop_all()
    (_, again) = wait_for_ops(relay, "push_on", 2)
    assert again["endpoint"] == ENDPOINT
    expect(status).to_have_attribute("data-state", "on")
    # A host that no longer takes it: off here too.
    relay.send({"op": "error", "code": "forbidden", "message": "the host keeps no more"})
    expect(status).to_have_attribute("data-state", "failed")
    page.wait_for_function("() => window.__unsubscribed === 1")


def test_a_browser_without_push_says_so_and_offers_no_toggle(
    allowed: BrowserContext, page_log: PageLog
) -> None:
    with fake_relay(Scenario(push_key=PUSH_KEY)) as relay:
        page = open_page(
            allowed, relay.page_url("drive"), page_log, stub="delete window.PushManager;"
        )
        status = page.get_by_test_id("notify-status")
        expect(status).to_have_attribute("data-state", "unsupported")
        expect(status).to_contain_text("Home Screen")
        expect(page.get_by_test_id("notify-toggle")).to_be_disabled()
        # It still says whether it is in view: the host pushes to the person's other browsers.
        wait_for_ops(relay, "focus", 1)
