"""The page and the host's several conversations (docs/web.md, "Conversations"): a real relay and
a real `tunnel host` with two declared agents; a driver starts, switches, forks and closes them,
a viewer only sees the list; and the list a host sends is read as untrusted data."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tunnel.e2e.opening import MAX_CONVERSATION_LENGTH

from .conftest import BLANK_PATH, PageLog
from .fake_relay import Scenario, fake_relay, link_fragment, wire_item
from .stack import Host, running_relay

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

ENTRY = "[data-testid=conversation-entry]"


def prompt(page: Page, text: str) -> None:
    box = page.get_by_test_id("composer-input")
    box.fill(text)
    box.press("Enter")


def prompts(page: Page) -> Any:
    """The prompts the page shows."""
    return page.locator("[data-testid=message][data-role=user] .md")


def current(page: Page) -> Any:
    return page.locator(f"{ENTRY}[data-current=true]")


def new_page(browser: Browser, url: str, page_log: PageLog, contexts: list[BrowserContext]) -> Page:
    # Short, so one demo turn is taller than the screen and the scroll position means something.
    context = browser.new_context(viewport={"width": 1200, "height": 520})
    contexts.append(context)
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.on("console", page_log.on_console)
    page.on("pageerror", page_log.on_page_error)
    page.goto(url)
    expect(page.get_by_test_id("connection-status")).to_have_attribute("data-state", "connected")
    return page


def test_a_driver_starts_switches_forks_and_closes_conversations_and_a_viewer_only_watches(
    browser: Browser, tmp_path: Path, page_log: PageLog
) -> None:
    home = tmp_path / "host"
    home.mkdir()
    # Closed at the end: a page left open would keep reconnecting for the rest of the suite.
    contexts: list[BrowserContext] = []
    with running_relay(tmp_path / "relay") as relay:
        host = Host.start(home, relay.url, agent="demo=demo", options=("--agent", "other=demo"))
        try:
            page = new_page(browser, host.drive_link, page_log, contexts)
            expect(page.locator(ENTRY)).to_have_count(1)
            expect(current(page)).to_have_attribute("data-id", "main")
            # Every prompt to the demo agent asks for permission: this one waits in main.
            prompt(page, "first in main")
            expect(
                page.locator("[data-testid=permission-request][data-state=pending]")
            ).to_have_count(1)

            # New -> other: the conversation starts and the page shows it.
            page.get_by_test_id("new-conversation").click()
            page.locator("[data-testid=new-conversation-agent][data-agent=other]").click()
            expect(page.locator(ENTRY)).to_have_count(2)
            expect(current(page).get_by_test_id("conversation-agent")).to_have_text("other")
            other = current(page).get_attribute("data-id")
            assert other is not None
            assert other != "main"
            expect(page).to_have_url(re.compile(f"/{re.escape(other)}$"))
            expect(page.get_by_test_id("conversation-closed")).to_be_hidden()
            # Main's waiting request shows from here: on the list's button and in its entry.
            main = page.locator(f"{ENTRY}[data-id=main]")
            expect(main).to_have_attribute("data-state", "waiting")
            expect(main.get_by_test_id("conversation-pending")).to_have_text("1")
            expect(page.get_by_test_id("conversations-badge")).to_have_text("1")
            # Items stay apart: nothing of main's here.
            expect(prompts(page)).to_have_count(0)
            prompt(page, "first in other")
            expect(
                page.locator("[data-testid=permission-request][data-state=pending]")
            ).to_have_count(1)
            expect(page.get_by_test_id("conversations-badge")).to_have_text("1")
            # The reader scrolls up and starts a draft, then goes to main.
            page.get_by_test_id("composer-input").fill("a draft for other")
            page.mouse.move(400, 300)
            page.mouse.wheel(0, -5000)
            page.wait_for_function("() => document.scrollingElement.scrollTop === 0")
            assert page.evaluate(
                "() => document.scrollingElement.scrollHeight > innerHeight + 200"
            ), "the conversation is not taller than the screen"
            main.get_by_test_id("conversation-open").click()
            expect(current(page)).to_have_attribute("data-id", "main")
            expect(prompts(page)).to_have_text(["first in main"])
            expect(page.get_by_test_id("composer-input")).to_have_value("")
            # Now the other's request is the one elsewhere.
            entry = page.locator(f"{ENTRY}[data-id='{other}']")
            expect(entry.get_by_test_id("conversation-pending")).to_have_text("1")
            expect(page.get_by_test_id("conversations-badge")).to_have_text("1")

            # Back to other: its draft and scroll position as left, each item once.
            entry.get_by_test_id("conversation-open").click()
            expect(current(page)).to_have_attribute("data-id", other)
            expect(page.get_by_test_id("composer-input")).to_have_value("a draft for other")
            expect(page.locator("[data-testid=message][data-role=user]")).to_have_count(1)
            expect(prompts(page)).to_have_text(["first in other"])
            page.wait_for_function("() => document.scrollingElement.scrollTop === 0")
            expect(
                page.locator("[data-testid=permission-request][data-state=pending]")
            ).to_have_count(1)

            # Fork from the prompt: a new conversation with that prompt, shown at once.
            page.locator("[data-testid=message][data-role=user]").get_by_test_id(
                "fork-here"
            ).click()
            expect(page.locator(ENTRY)).to_have_count(3)
            expect(current(page)).not_to_have_attribute("data-id", other)
            expect(prompts(page)).to_have_text(["first in other"])

            # A reload returns to the conversation the fragment names.
            forked = current(page).get_attribute("data-id")
            assert forked is not None
            page.reload()
            expect(current(page)).to_have_attribute("data-id", forked)
            expect(prompts(page)).to_have_text(["first in other"])

            # Close other: it shows closed, and a prompt there is refused in words.
            entry.get_by_test_id("conversation-open").click()
            expect(current(page)).to_have_attribute("data-id", other)
            entry.get_by_test_id("conversation-close").click()
            entry.get_by_test_id("conversation-close-confirm").click()
            expect(entry).to_have_attribute("data-state", "closed")
            expect(page.get_by_test_id("conversation-closed")).to_be_visible()
            prompt(page, "still there?")
            expect(page.get_by_test_id("op-error")).to_contain_text("This conversation is closed")

            # A viewer sees the list, and nothing to start, close or fork with.
            viewer = new_page(browser, host.view_link, page_log, contexts)
            expect(viewer.locator(ENTRY)).to_have_count(3)
            expect(viewer.locator(f"{ENTRY}[data-id='{other}']")).to_have_attribute(
                "data-state", "closed"
            )
            expect(viewer.get_by_test_id("new-conversation")).to_have_count(0)
            expect(viewer.get_by_test_id("conversation-close")).to_have_count(0)
            expect(viewer.get_by_test_id("message").first).to_be_visible()
            expect(viewer.get_by_test_id("fork-here")).to_have_count(0)
        finally:
            for context in contexts:
                context.close()
            host.process.stop()
    assert page_log.errors == []


HOSTILE = "<img src=x onerror=window.__owned=1>"


def test_a_hostile_list_stays_text_and_a_malformed_one_is_ignored(
    page: Page, page_log: PageLog
) -> None:
    warnings: list[str] = []
    page.on(
        "console",
        lambda message: warnings.append(message.text) if message.type == "warning" else None,
    )
    with fake_relay(Scenario()) as relay:
        page.goto(relay.page_url("drive"))
        expect(page.get_by_test_id("connection-status")).to_have_attribute(
            "data-state", "connected"
        )
        entry = {
            "agent": "demo",
            "by": HOSTILE,
            "state": "waiting",
            "pending": 2,
            "last": 0.0,
            "started": 0.0,
        }
        relay.send(
            {
                "op": "conversations",
                "agents": ["demo", "x" * 32],
                "max": 4,
                "list": [
                    {**entry, "id": HOSTILE},
                    {**entry, "id": "c-1", "agent": HOSTILE[:32], "state": "idle", "pending": 0},
                ],
            }
        )
        entries = page.locator(ENTRY)
        expect(entries).to_have_count(2)
        # An entry that shows the same stays the same element: a click never lands on a stale one.
        page.evaluate(
            "() => { window.__first = document.querySelector('[data-testid=conversation-entry]'); }"
        )
        expect(entries.first.get_by_test_id("conversation-by")).to_have_text(f"by {HOSTILE}")
        expect(entries.nth(1).get_by_test_id("conversation-agent")).to_have_text(HOSTILE[:32])
        expect(entries.first.get_by_test_id("conversation-pending")).to_have_text("2")
        expect(page.get_by_test_id("conversations-badge")).to_have_text("2")
        assert page.locator("[data-testid=conversations] img").count() == 0
        # Each of these breaks a bound or a type: the whole message is dropped, the list stays.
        for bad in (
            {"agents": ["x" * 33]},
            {"max": 0},
            {"list": [{**entry, "id": "a", "state": "evil"}]},
            {"list": [{**entry, "id": "a", "pending": -1}]},
            {"list": [{**entry, "id": "a", "last": "now"}]},
            {"list": [{**entry, "id": ""}]},
            {"list": [{**entry, "id": 7}]},
            {"list": [{**entry, "id": "a", "by": "b" * 1000}]},
            {"list": [{**entry, "id": f"c-{n}"} for n in range(81)]},
        ):
            relay.send({"op": "conversations", "agents": ["demo"], "max": 4, "list": [], **bad})
        # In order after them on the channel: once it shows, every bad one was read.
        relay.send_presence([{"name": "marker", "role": "drive"}])
        expect(page.locator("[data-testid=presence-member][data-name=marker]")).to_be_visible()
        expect(entries).to_have_count(2)
        expect(entries.first).to_have_attribute("data-id", HOSTILE)
        assert page.evaluate("() => window.__owned") is None
        relay.send(
            {
                "op": "conversations",
                "agents": ["demo", "x" * 32],
                "max": 4,
                "list": [
                    {**entry, "id": HOSTILE, "last": 0.5},
                    {**entry, "id": "c-1", "agent": HOSTILE[:32], "state": "working", "pending": 0},
                    {**entry, "id": "c-1", "agent": "twice", "state": "idle", "pending": 0},
                ],
            }
        )
        expect(entries).to_have_count(3)
        expect(entries.nth(1)).to_have_attribute("data-state", "working")
        assert page.evaluate(
            "() => document.querySelector('[data-testid=conversation-entry]') === window.__first"
        )
        # On a phone the list is in the drawer its header button opens, the badge on the button.
        page.set_viewport_size({"width": 390, "height": 800})
        expect(page.get_by_test_id("conversation-list")).to_be_hidden()
        expect(page.get_by_test_id("conversations-badge")).to_have_text("2")
        page.get_by_test_id("conversations-toggle").click()
        expect(page.get_by_test_id("conversation-list")).to_be_visible()
    # Said once, not once per bad message.
    assert sum("conversations:" in text for text in warnings) == 1, warnings


FRAGMENTS = """async (cases) => {
  const c = await import("/static/conversations.js");
  const now = 1_000_000_000_000;
  return {
    split: cases.map((fragment) => c.splitFragment(fragment)),
    joined: c.fragmentWith("#drive.SECRET/old", "c-1 a/b"),
    bare: c.fragmentWith("#drive.SECRET/old", null),
    ago: [0, 30, 50, 3599, 7200, 3 * 86400, -600].map((s) => c.relativeTime(now / 1000 - s, now)),
  };
}"""


def test_the_fragment_names_a_conversation_only_when_it_could_be_one(
    page: Page, static_server: str
) -> None:
    page.goto(static_server + BLANK_PATH)
    cases = [
        "#drive.SECRET",
        "#drive.SECRET/c-1234",
        "#drive.SECRET/",
        "#drive.SECRET/%E0%A4%A",
        "#drive.SECRET/" + "x" * (MAX_CONVERSATION_LENGTH + 1),
        "#view.S/a%2Fb",
    ]
    got = page.evaluate(FRAGMENTS, cases)
    assert got["split"] == [
        {"link": "#drive.SECRET", "conversation": None},
        {"link": "#drive.SECRET", "conversation": "c-1234"},
        {"link": "#drive.SECRET", "conversation": None},
        {"link": "#drive.SECRET", "conversation": None},
        {"link": "#drive.SECRET", "conversation": None},
        {"link": "#view.S", "conversation": "a/b"},
    ]
    assert got["joined"] == "#drive.SECRET/c-1%20a%2Fb"
    assert got["bare"] == "#drive.SECRET"
    # A clock ahead of the host's says "just now", never a time to come.
    assert got["ago"] == [
        "just now",
        "just now",
        "1 min ago",
        "1 h ago",
        "2 h ago",
        "3 d ago",
        "just now",
    ]


CHATTY_AGENT = Path(__file__).resolve().parent / "chatty_acp_agent.py"
# Records what would show one conversation's items in another's view: an item whose
# conversation is not the one the session follows, and the other conversation's words in the
# conversation or its streaming text, whenever they change.
WATCH_LEAKS = """(tags) => {
  const { session, view } = window.__tunnel;
  window.__leaks = [];
  const item = view.item.bind(view);
  view.item = (shown) => {
    const following = session.conversationId;
    if (shown?.conversation_id !== following) {
      window.__leaks.push(`item ${shown?.conversation_id}:${shown?.seq} in ${following}`);
    }
    return item(shown);
  };
  const check = () => {
    const other = session.conversationId === "main" ? tags.other : tags.main;
    for (const area of [view.conversation, view.streamArea]) {
      if (area.textContent.includes(`${other} s`)) {
        window.__leaks.push(`${other} shown in ${session.conversationId}`);
      }
    }
  };
  const observer = new MutationObserver(check);
  for (const area of [view.conversation, view.streamArea]) {
    observer.observe(area, { subtree: true, childList: true, characterData: true });
  }
}"""
# Over twenty frames while the page follows a streaming conversation to its end: whether New
# and the first entry stay under the pointer, not under the header (the side panel is sticky
# between the header and the composer, however much it holds).
COVERED = """async () => {
  const covered = [];
  for (let frame = 0; frame < 20; frame += 1) {
    await new Promise(requestAnimationFrame);
    const targets = [document.querySelector("[data-testid=new-conversation]"),
      document.querySelector("[data-testid=conversation-open]")];
    for (const target of targets) {
      const box = target.getBoundingClientRect();
      const hit = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
      if (!target.contains(hit)) covered.push(`${target.dataset.testid} under ${hit?.className}`);
    }
  }
  return covered;
}"""
# Forty switches back and forth, 0 to 150 ms apart: before the new channel's `ready`, during
# its snapshot and during its live tail, while the old one's last messages are still coming.
SWITCH_FAST = """async (ids) => {
  const { conversations } = window.__tunnel;
  for (let i = 0; i < 40; i += 1) {
    conversations.onSwitch(ids[i % 2]);
    await new Promise((resolve) => setTimeout(resolve, (i * 37) % 150));
  }
}"""


def test_switching_fast_while_both_conversations_stream_never_mixes_their_items(
    browser: Browser, tmp_path: Path, page_log: PageLog
) -> None:
    home = tmp_path / "host"
    home.mkdir()
    agent = "acp:" + shlex.join([sys.executable, str(CHATTY_AGENT)])
    contexts: list[BrowserContext] = []
    with running_relay(tmp_path / "relay") as relay:
        host = Host.start(home, relay.url, agent=f"a={agent}", options=("--agent", f"b={agent}"))
        try:
            page = new_page(browser, host.drive_link, page_log, contexts)
            expect(current(page)).to_have_attribute("data-id", "main")
            page.evaluate(WATCH_LEAKS, {"main": "alpha", "other": "beta"})
            titles = page.get_by_test_id("tool-title")
            prompt(page, "alpha")
            expect(titles.first).to_contain_text("alpha step", timeout=30_000)
            # A window shorter than the side panel's content.
            page.set_viewport_size({"width": 1200, "height": 440})
            assert page.evaluate(COVERED) == []
            page.get_by_test_id("new-conversation").click()
            page.locator("[data-testid=new-conversation-agent][data-agent=b]").click()
            # Listed once its agent has started and answered `session/new`: a Python process that
            # spends over a second of CPU importing the ACP SDK, longer than expect's default 5 s
            # on a loaded two-core machine (as the first prompt's answer above may be).
            expect(current(page)).not_to_have_attribute("data-id", "main", timeout=30_000)
            other = current(page).get_attribute("data-id")
            assert other is not None
            prompt(page, "beta")
            expect(titles.first).to_contain_text("beta step")

            page.evaluate(SWITCH_FAST, ["main", other])
            # It ends on the other conversation, which goes on streaming there, and only there.
            expect(current(page)).to_have_attribute("data-id", other)
            shown = titles.count()
            expect(titles.nth(shown)).to_contain_text("beta step")
            # Its own click event: while both stream, the list (newest first, times relative) is
            # drawn again as they take turns, and a pointer click in this short window can keep
            # waiting for the entry to hold still; what is tested here is the switch.
            opener = page.locator(f"{ENTRY}[data-id=main]").get_by_test_id("conversation-open")
            opener.dispatch_event("click")
            expect(current(page)).to_have_attribute("data-id", "main")
            shown = titles.count()
            expect(titles.nth(shown)).to_contain_text("alpha step")
            expect(page.get_by_test_id("conversation")).not_to_contain_text("beta s")
            assert page.evaluate("() => window.__leaks") == []
        finally:
            for context in contexts:
                context.close()
            host.process.stop()
    assert page_log.errors == []


def test_the_list_answers_the_keyboard_and_names_each_close_button(page: Page) -> None:
    with fake_relay(Scenario()) as relay:
        page.goto(relay.page_url("drive"))
        expect(page.get_by_test_id("connection-status")).to_have_attribute(
            "data-state", "connected"
        )
        entry = {"state": "idle", "pending": 0, "last": 0.0, "started": 0.0}
        relay.send(
            {
                "op": "conversations",
                "agents": ["demo", "other"],
                "max": 4,
                "list": [
                    {**entry, "id": "conv-1", "agent": "demo", "by": "ann"},
                    {**entry, "id": "c-2", "agent": "other", "by": "bo"},
                ],
            }
        )
        entries = page.locator(ENTRY)
        expect(entries).to_have_count(2)
        # Each Close says which conversation it closes: a screen reader lists them by name.
        for index, (agent, by) in enumerate((("demo", "ann"), ("other", "bo"))):
            expect(entries.nth(index).get_by_test_id("conversation-close")).to_have_accessible_name(
                f"Close the conversation with {agent}, started by {by}"
            )
        # Escape closes the New menu, and gives the focus back to New.
        new = page.get_by_test_id("new-conversation")
        new.click()
        expect(page.get_by_test_id("new-menu")).to_be_visible()
        page.keyboard.press("Escape")
        expect(page.get_by_test_id("new-menu")).to_be_hidden()
        expect(new).to_have_attribute("aria-expanded", "false")
        expect(new).to_be_focused()
        # On a phone the drawer the header button opens closes with Escape too.
        page.set_viewport_size({"width": 390, "height": 800})
        page.get_by_test_id("conversations-toggle").click()
        expect(page.get_by_test_id("conversation-list")).to_be_visible()
        page.keyboard.press("Escape")
        expect(page.get_by_test_id("conversation-list")).to_be_hidden()


@pytest.mark.parametrize(
    "named",
    [
        '"><img src=x onerror=window.__owned=1>',
        "../../../v1/attach?x=1",
        "\u202eevil\u202c\u2066",
        "x" * (MAX_CONVERSATION_LENGTH + 1),
        "%E0%A4%A",
    ],
)
def test_a_hostile_conversation_in_the_fragment_breaks_nothing_and_leaks_no_secret(
    page: Page, page_log: PageLog, named: str
) -> None:
    secret = link_fragment("drive").split(".", 1)[1]
    sent: list[str] = []
    page.on(
        "request",
        lambda request: sent.append(f"{request.url} {request.headers} {request.post_data}"),
    )
    page.on("console", lambda message: sent.append(message.text))
    with fake_relay(Scenario()) as relay:
        encoded = named if named.startswith("%") else quote(named, safe="")
        page.goto(f"{relay.page_url('drive')}/{encoded}")
        expect(page.get_by_test_id("connection-status")).to_have_attribute(
            "data-state", "connected"
        )
        # The host serves the conversation it has, and the fragment follows it.
        expect(page).to_have_url(re.compile(r"#drive\.[A-Za-z0-9_-]+/conv-1$"))
        subscribe = relay.opens[-1]["meta"].get("sub", {})
        fits = len(named) <= MAX_CONVERSATION_LENGTH and not named.startswith("%")
        assert subscribe.get("conversation") == (named if fits else None)
        assert page.evaluate("() => window.__owned") is None
        # The secret stayed in the fragment: in no request, header, console line or open.
        hellos = str(relay.hellos) + str(relay.opens)
    assert not [line for line in sent if secret in line]
    assert secret not in hellos
    assert page_log.errors == []


KEPT = """async () => {
  const s = await import("/static/session.js");
  const links = [];
  const linkFactory = (options) => {
    const link = { options, ended: false, start: async () => {}, send: () => true,
      close() { this.ended = true; } };
    links.push(link);
    return link;
  };
  const view = new Proxy({}, { get: () => () => undefined });
  const session = new s.Session({ location, hostId: "a".repeat(26), role: "view",
    secret: new Uint8Array(32), name: "t", view, linkFactory, conversation: "c0" });
  session.start();
  const item = (id, seq) => ({ conversation_id: id, seq, type: "message", data: {} });
  // Twelve conversations visited in turn, each holding 3 items (cursor 2) when left.
  for (let n = 0; n < 12; n += 1) {
    const id = `c${n}`;
    if (n > 0) session.switchTo(id);
    for (let seq = 0; seq < 3; seq += 1) session.acceptItem(item(id, seq));
    session.lastSeq = 2;
  }
  const kept = [...session.kept.keys()];
  // A late item on a link already left: dropped, in the view shown and in what is kept.
  links[10].options.onMessage({ op: "item", item: item("c10", 3) });
  const late = { shown: session.items.length, kept: session.kept.get("c10").items.length };
  session.switchTo("c5");
  const back = { ...links.at(-1).options.subscribe, items: session.items.length };
  session.switchTo("c0");
  const forgotten = { ...links.at(-1).options.subscribe, items: session.items.length };
  return { most: s.KEPT_CONVERSATIONS, kept, late, back, forgotten };
}"""


def test_the_page_keeps_the_last_eight_conversations_it_left_and_nothing_late(
    page: Page, static_server: str
) -> None:
    page.goto(static_server + BLANK_PATH)
    got = page.evaluate(KEPT)
    assert got["most"] == 8
    assert got["kept"] == [f"c{n}" for n in range(3, 11)]
    assert got["late"] == {"shown": 3, "kept": 3}
    # One kept is shown from memory and asks only for what came after its cursor; one
    # forgotten starts over.
    assert got["back"] == {"after": 2, "tail": None, "conversation": "c5", "items": 3}
    assert got["forgotten"] == {"after": None, "tail": None, "conversation": "c0", "items": 0}


def test_an_entry_the_host_does_not_serve_brings_the_page_back_to_what_it_serves(
    page: Page, page_log: PageLog
) -> None:
    said = [wire_item(seq, "message", {"role": "agent", "text": f"said {seq}"}) for seq in (0, 1)]
    with fake_relay(Scenario(items=said)) as relay:
        page.goto(relay.page_url("drive"))
        expect(page.get_by_test_id("message")).to_have_count(2)
        entry = {"agent": "demo", "by": "ann", "state": "idle", "pending": 0}
        listing = {"op": "conversations", "agents": ["demo"], "max": 4}
        ids = ["conv-1", "ghost"]
        relay.send(
            {**listing, "list": [{**entry, "id": id_, "last": 0.0, "started": 0.0} for id_ in ids]}
        )
        page.locator(f"{ENTRY}[data-id=ghost]").get_by_test_id("conversation-open").click()
        # The open named it; the host served its own, and the page shows that one, each item once.
        expect(page).to_have_url(re.compile(r"/conv-1$"))
        expect(current(page)).to_have_attribute("data-id", "conv-1")
        assert relay.opens[-1]["meta"]["sub"]["conversation"] == "ghost"
        expect(page.get_by_test_id("message")).to_have_count(2)
        expect(page.get_by_test_id("connection-status")).to_have_attribute(
            "data-state", "connected"
        )
    assert page_log.errors == []


def test_the_focus_stays_on_its_entry_when_the_list_changes(page: Page) -> None:
    with fake_relay(Scenario()) as relay:
        page.goto(relay.page_url("drive"))
        expect(page.get_by_test_id("connection-status")).to_have_attribute(
            "data-state", "connected"
        )
        entry = {"agent": "demo", "by": "ann", "pending": 0, "last": 0.0, "started": 0.0}

        def listing(state: str) -> None:
            entries = [
                {**entry, "id": "conv-1", "state": "idle"},
                {**entry, "id": "c-2", "state": state},
            ]
            relay.send({"op": "conversations", "agents": ["demo"], "max": 4, "list": entries})

        listing("idle")
        other = page.locator(f"{ENTRY}[data-id=c-2]")
        other.get_by_test_id("conversation-close").focus()
        # Its agent starts working: the entry is drawn again, the keyboard stays where it was.
        listing("working")
        expect(other).to_have_attribute("data-state", "working")
        expect(other.get_by_test_id("conversation-close")).to_be_focused()
        # Close asks first, with the focus on Keep; Keep goes back to Close.
        page.keyboard.press("Enter")
        expect(other.get_by_test_id("conversation-close-cancel")).to_be_focused()
        page.keyboard.press("Enter")
        expect(other.get_by_test_id("conversation-close")).to_be_focused()
        assert relay.ops("close_conversation") == []
