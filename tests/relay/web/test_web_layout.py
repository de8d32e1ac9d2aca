"""The page at a desktop and a phone size: layout, following, the order of the story, and what
the page says when there is little to show.

Most tests run `tunnel relay` and `tunnel host` as subprocesses (`stack.py`) with the demo agent,
whose every turn plans, streams, opens a tool call and asks permission for it before it runs; the
last few need exact input and use the scripted relay-and-host (`fake_relay.py`).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from tunnel.app.requests import MAX_PROMPT_LENGTH

from .conftest import PageLog
from .fake_relay import Scenario, fake_relay, wire_item
from .stack import Host, Relay, running_host, running_relay

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

WAIT = 30_000
"""Milliseconds a step of the demo agent may take on a busy machine."""


@dataclass(frozen=True)
class Screen:
    name: str
    width: int
    height: int
    phone: bool


DESKTOP = Screen("desktop", 1280, 800, phone=False)
PHONE = Screen("phone", 390, 844, phone=True)
SCREENS = [pytest.param(DESKTOP, id="desktop"), pytest.param(PHONE, id="phone")]

# The band of the viewport between the sticky header and the sticky footer: what the reader
# actually sees of the conversation.
VISIBLE_BAND = """() => ({
  top: document.querySelector("header.top").getBoundingClientRect().bottom,
  bottom: document.querySelector("footer.bottom").getBoundingClientRect().top,
})"""


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[Relay]:
    with running_relay(tmp_path / "relay") as relay:
        yield relay


@pytest.fixture
def host(tmp_path: Path, relay: Relay) -> Iterator[Host]:
    with running_host(tmp_path / "host", relay.url) as host:
        yield host


def open_page(browser: Browser, screen: Screen, link: str, name: str, log: PageLog) -> Page:
    context = browser.new_context(
        viewport={"width": screen.width, "height": screen.height},
        is_mobile=screen.phone,
        has_touch=screen.phone,
    )
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.on("console", log.on_console)
    page.on("pageerror", log.on_page_error)
    base, fragment = link.split("#", 1)
    page.goto(f"{base}?name={name}#{fragment}")
    expect(page.get_by_test_id("connection-status")).to_have_attribute(
        "data-state", "connected", timeout=WAIT
    )
    expect(page.get_by_test_id("conversation")).to_have_attribute("data-loaded", "true")
    return page


def send(page: Page, text: str) -> None:
    box = page.get_by_test_id("composer-input")
    box.fill(text)
    box.press("Enter")
    expect(box).to_have_value("")


def pending_request(page: Page) -> Locator:
    """The one open permission request, found by its id so it stays found once answered."""
    pending = page.locator("[data-testid=permission-request][data-state=pending]")
    expect(pending).to_have_count(1, timeout=WAIT)
    request_id = pending.get_attribute("data-request-id")
    return page.locator(f"[data-testid=permission-request][data-request-id='{request_id}']")


def allow(page: Page, request: Locator) -> None:
    request.locator("[data-testid=permission-option][data-kind=allow_once]").click()
    expect(request).to_have_attribute("data-state", "answered", timeout=WAIT)


def one_turn(page: Page, text: str) -> None:
    """Prompt, allow the tool, and wait until the agent is idle again."""
    send(page, text)
    allow(page, pending_request(page))
    idle(page)


def idle(page: Page) -> None:
    status = page.get_by_test_id("agent-status")
    expect(status).to_have_attribute("data-state", "idle", timeout=WAIT)


def in_band(page: Page, locator: Locator) -> bool:
    """Whether the element lies whole between the sticky header and footer."""
    band = page.evaluate(VISIBLE_BAND)
    box = locator.evaluate(
        "e => ({top: e.getBoundingClientRect().top, bottom: e.getBoundingClientRect().bottom})"
    )
    return bool(box["top"] >= band["top"] - 1 and box["bottom"] <= band["bottom"] + 1)


def end_in_band(page: Page, locator: Locator) -> bool:
    """Whether the element's end (where a card's answers and latest lines are) is seen."""
    band = page.evaluate(VISIBLE_BAND)
    bottom = locator.evaluate("e => e.getBoundingClientRect().bottom")
    return bool(band["top"] < bottom <= band["bottom"] + 1)


def last_item(page: Page) -> Locator:
    return page.locator("[data-testid=conversation] > [data-seq]").last


def wait_until(page: Page, condition: Any, what: str) -> None:
    for _ in range(100):
        if condition():
            return
        page.wait_for_timeout(100)
    raise AssertionError(f"not in time: {what}")


def check_layout(page: Page) -> None:
    """No sideways scrolling, the connection badge on screen."""
    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], f"the page is {width[0]} px wide in a {width[1]} px viewport"
    badge = page.get_by_test_id("connection-status")
    expect(badge).to_be_visible()
    box = badge.bounding_box()
    assert box is not None
    height = page.evaluate("window.innerHeight")
    assert box["x"] >= 0
    assert box["x"] + box["width"] <= width[1]
    assert box["y"] >= 0
    assert box["y"] + box["height"] <= height


@pytest.mark.parametrize("screen", SCREENS)
def test_the_page_fits_the_screen_and_a_permission_request_arrives_in_view(
    browser: Browser, host: Host, screen: Screen
) -> None:
    log = PageLog()
    page = open_page(browser, screen, host.drive_link, "alice", log)
    check_layout(page)
    # A conversation longer than the screen, then a request at its end.
    one_turn(page, "How long is the README?")
    send(page, "And once more?")
    request = pending_request(page)
    check_layout(page)
    options = request.get_by_test_id("permission-option")
    expect(options).to_have_count(2)
    for option in options.all():
        assert in_band(page, option), "an answer to the request is off screen"
    expect(page.get_by_test_id("agent-status")).to_have_text("waiting for approval")
    if screen.phone:
        # Touch: every control the reader may press is at least 40 px high.
        small = page.evaluate(
            """() => [...document.querySelectorAll("button, input, select, textarea")]
              .filter(e => e.offsetParent !== null)
              .map(e => [e.dataset.testid || e.className, e.getBoundingClientRect().height])
              .filter(([, h]) => h < 40)"""
        )
        assert small == []
        # People, plan and name are in a drawer the header opens.
        side = page.get_by_test_id("side-panel")
        expect(side).to_be_hidden()
        page.get_by_test_id("drawer-toggle").click()
        expect(side).to_be_visible()
        expect(side.get_by_test_id("name-input")).to_be_visible()
        expect(side.get_by_test_id("presence-member").filter(has_text="alice")).to_have_count(1)
        check_layout(page)
    assert log.errors == []


@pytest.mark.parametrize("screen", SCREENS)
def test_the_page_follows_new_items_unless_the_reader_scrolled_up(
    browser: Browser, host: Host, screen: Screen
) -> None:
    log = PageLog()
    page = open_page(browser, screen, host.drive_link, "alice", log)
    one_turn(page, "first")
    one_turn(page, "second")
    # At the end, each new item comes into view as it arrives.
    send(page, "third")
    pending_request(page)
    wait_until(page, lambda: end_in_band(page, last_item(page)), "the last item in view")
    pill = page.get_by_test_id("new-activity")
    expect(pill).to_be_hidden()

    # Scrolled up, the reader stays where they are and is offered a way down, while a
    # teammate answers the request.
    page.mouse.move(screen.width / 2, screen.height / 2)
    for _ in range(20):
        if page.evaluate("scrollY") < 50:
            break
        page.mouse.wheel(0, -1000)
        page.wait_for_timeout(100)
    wait_until(page, lambda: page.evaluate("scrollY") < 50, "scrolled to the top")
    bob = open_page(browser, DESKTOP, host.drive_link, "bob", log)
    allow(bob, pending_request(bob))
    idle(page)
    expect(pill).to_be_visible()
    assert page.evaluate("scrollY") < 50
    assert not end_in_band(page, last_item(page))
    pill.click()
    wait_until(page, lambda: end_in_band(page, last_item(page)), "the last item in view")
    expect(pill).to_be_hidden()
    # And following again: the next item comes into view by itself.
    send(page, "fourth")
    pending_request(page)
    wait_until(page, lambda: end_in_band(page, last_item(page)), "the last item in view")
    expect(pill).to_be_hidden()
    assert log.errors == []


def item_order(page: Page) -> list[dict[str, Any]]:
    """The conversation's items in reading order, with what the checks need of each."""
    result: list[dict[str, Any]] = page.evaluate(
        """() => [...document.querySelectorAll(
              "[data-testid=conversation] [data-seq], [data-testid=queued-prompts] [data-seq]")]
            .map(e => ({seq: Number(e.dataset.seq), type: e.dataset.type,
                        text: e.textContent, queued: e.dataset.queued === "true",
                        top: e.getBoundingClientRect().top + scrollY}))"""
    )
    return result


def test_the_transcript_tells_the_turn_in_order(browser: Browser, host: Host) -> None:
    log = PageLog()
    page = open_page(browser, DESKTOP, host.drive_link, "alice", log)
    send(page, "first question")
    request = pending_request(page)

    # The request sits inside the tool call it gates, which says it waits for it.
    tool = page.locator("[data-testid=tool-call]", has=request)
    expect(tool).to_have_count(1)
    expect(tool.get_by_test_id("tool-status")).to_have_text("waiting for approval")
    expect(page.get_by_test_id("agent-status")).to_have_text("waiting for approval")
    expect(page.get_by_test_id("agent-status")).to_have_attribute("data-state", "waiting")

    # A prompt sent meanwhile waits below the running turn, marked queued.
    send(page, "second question")
    queued = page.locator("[data-testid=message][data-role=user]", has_text="second question")
    expect(queued).to_have_attribute("data-queued", "true")
    expect(queued.get_by_test_id("queued-label")).to_be_visible()
    order = item_order(page)
    tool_top = tool.evaluate("e => e.getBoundingClientRect().top + scrollY")
    second = next(i for i in order if "second question" in i["text"])
    assert second["top"] > tool_top

    allow(page, request)
    # One line says who answered; nothing else in the conversation repeats it.
    decision = page.get_by_test_id("permission-decision")
    expect(decision).to_have_count(1)
    expect(decision).to_have_text(re.compile(r"^alice answered: Allow once"))
    answered = page.evaluate(
        """() => [...document.querySelector("[data-testid=conversation]").children]
            .filter(e => e.textContent.includes("answered")).length"""
    )
    assert answered == 1
    expect(request.get_by_test_id("permission-decision")).to_have_count(1)
    expect(tool).to_have_attribute("data-status", "completed", timeout=WAIT)
    expect(tool.get_by_test_id("tool-status")).to_have_text("completed")

    # The second turn starts: its prompt joins the story after the first turn's answer.
    second_request = pending_request(page)
    expect(queued).not_to_have_attribute("data-queued", "true")
    order = item_order(page)
    texts = [i["text"] for i in order]
    done = next(n for n, t in enumerate(texts) if t.startswith("demo") and "Done:" in t)
    asked = next(n for n, t in enumerate(texts) if "second question" in t)
    assert done < asked, "the queued prompt shows above the answer of the turn before it"
    assert [i["top"] for i in order] == sorted(i["top"] for i in order)

    # The plan: one card per turn, updated in place through every revision.
    plans = page.get_by_test_id("plan")
    expect(plans).to_have_count(2)
    first_plan = plans.first
    expect(first_plan.get_by_test_id("plan-progress")).to_have_text("3 of 3 done")
    assert int(first_plan.get_attribute("data-revisions") or 0) >= 3
    allow(page, second_request)
    idle(page)
    expect(plans).to_have_count(2)
    expect(plans.last.get_by_test_id("plan-progress")).to_have_text("3 of 3 done")
    expect(page.get_by_test_id("permission-decision")).to_have_count(2)
    assert log.errors == []


def test_an_overlong_prompt_stays_in_the_composer_and_says_the_limit(
    browser: Browser, host: Host
) -> None:
    log = PageLog()
    page = open_page(browser, PHONE, host.drive_link, "alice", log)
    box = page.get_by_test_id("composer-input")
    text = "é" * (MAX_PROMPT_LENGTH + 1)
    box.fill(text)
    box.press("Enter")
    error = page.get_by_test_id("composer-error")
    expect(error).to_be_visible()
    expect(error).to_contain_text(f"Prompt too long: {MAX_PROMPT_LENGTH:,} characters at most")
    assert page.evaluate("document.querySelector('[data-testid=composer-input]').value.length") == (
        MAX_PROMPT_LENGTH + 1
    )
    expect(page.get_by_test_id("message")).to_have_count(0)
    # At the limit exactly, the prompt goes out and the composer empties.
    box.fill("é" * MAX_PROMPT_LENGTH)
    expect(error).to_be_hidden()
    box.press("Enter")
    expect(box).to_have_value("", timeout=WAIT)
    expect(page.locator("[data-testid=message][data-role=user]")).to_have_count(1, timeout=WAIT)
    assert log.errors == []


def test_an_empty_conversation_says_what_to_do(page: Page) -> None:
    with fake_relay(Scenario(items=[])) as relay:
        page.goto(relay.page_url("drive"))
        expect(page.get_by_test_id("conversation")).to_have_attribute("data-loaded", "true")
        hint = page.get_by_test_id("empty-conversation")
        expect(hint).to_be_visible()
        expect(hint).to_contain_text("Write to the agent in the box below")
        relay.push(wire_item(0, "message", {"role": "user", "text": "hello"}, created_by="alice"))
        expect(page.get_by_test_id("message")).to_have_count(1)
        expect(hint).to_be_hidden()


def test_presence_marks_you_and_greys_out_who_dropped(page: Page) -> None:
    with fake_relay(Scenario(items=[])) as relay:
        base, fragment = relay.page_url("drive").split("#", 1)
        page.goto(f"{base}?name=alice#{fragment}")
        expect(page.get_by_test_id("connection-status")).to_have_attribute(
            "data-state", "connected"
        )
        relay.send_presence([{"name": "alice", "role": "drive"}, {"name": "bob", "role": "view"}])
        members = page.get_by_test_id("presence-member")
        expect(members).to_have_count(2)
        expect(members.filter(has_text="alice")).to_have_attribute("data-you", "true")
        expect(members.filter(has_text="alice")).to_contain_text("you")
        expect(members.filter(has_text="bob")).not_to_have_attribute("data-you", "true")
        # Bob's connection drops: he stays listed, greyed, until he is back.
        relay.send_presence([{"name": "alice", "role": "drive"}])
        expect(members).to_have_count(1)
        gone = page.get_by_test_id("presence-gone")
        expect(gone).to_have_count(1)
        expect(gone).to_contain_text("bob")
        assert float(gone.evaluate("e => getComputedStyle(e).opacity")) < 1
        relay.send_presence([{"name": "alice", "role": "drive"}, {"name": "bob", "role": "view"}])
        expect(members).to_have_count(2)
        expect(gone).to_have_count(0)


# Counts the light pixels of a PNG (terminal text is light on a dark background).
LIGHT_PIXELS = """async (data) => {
  const image = new Image();
  image.src = "data:image/png;base64," + data;
  await image.decode();
  const canvas = document.createElement("canvas");
  canvas.width = image.width;
  canvas.height = image.height;
  const context = canvas.getContext("2d");
  context.drawImage(image, 0, 0);
  const pixels = context.getImageData(0, 0, canvas.width, canvas.height).data;
  let light = 0;
  for (let i = 0; i < pixels.length; i += 4) {
    if (pixels[i] + pixels[i + 1] + pixels[i + 2] > 300) light++;
  }
  return light;
}"""


def test_a_terminal_agent_draws_underscores_and_has_no_idle_badge(page: Page) -> None:
    # A row of underscores only: at a device pixel ratio of 1 (the fixture's) a row cut to the
    # font's height shows nothing of it.
    items = [wire_item(0, "terminal", {"text": "________________\r\n"})]
    with fake_relay(Scenario(items=items, agent={"name": "bash", "kind": "terminal"})) as relay:
        page.goto(relay.page_url("view"))
        rows = page.get_by_test_id("terminal").locator(".xterm-rows")
        expect(rows).to_contain_text("________________")
        expect(page.get_by_test_id("agent-status")).to_be_hidden()
        shot = rows.locator(":scope > div").first.screenshot()
        light = page.evaluate(LIGHT_PIXELS, base64.b64encode(shot).decode())
        assert light > 0, "the underscores are not drawn"


def test_a_permission_request_in_its_tool_card_shows_the_whole_call_and_every_option(
    page: Page,
) -> None:
    # What an agent often does: the tool call first (with where it acts), then a request that
    # names it and carries only part of it (the command).
    call = {
        "tool_call_id": "run_1",
        "title": "Run the tests",
        "kind": "execute",
        "status": "pending",
        "locations": [{"path": "tests/test_app.py", "line": 3}],
        "turn": 0,
    }
    options = [
        {"option_id": "once", "name": "Run it", "kind": "allow_once"},
        {"option_id": "always", "name": "Always run pytest", "kind": "allow_always"},
        {"option_id": "no", "name": "Do not run it", "kind": "reject_once"},
        {"option_id": "never", "name": "Never run pytest", "kind": "reject_always"},
    ]
    request = {
        "request_id": "perm_run",
        "title": "Run pytest?",
        "tool_call_id": "run_1",
        "turn": 0,
        "options": options,
        "tool_call": {
            "tool_call_id": "run_1",
            "kind": "execute",
            "input": {"command": ["pytest", "-q", "tests/test_app.py"], "cwd": "/work/app"},
        },
    }
    items = [
        wire_item(0, "message", {"role": "user", "text": "test it"}, created_by="alice"),
        wire_item(1, "tool_call", call, status="in_progress"),
        wire_item(2, "permission_request", request, status="action_required"),
    ]
    with fake_relay(Scenario(items=items)) as relay:
        page.goto(relay.page_url("drive"))
        tool = page.locator("[data-testid=tool-call][data-tool-call-id=run_1]")
        card = tool.get_by_test_id("permission-request")
        expect(card).to_have_count(1)
        expect(tool.get_by_test_id("tool-status")).to_have_text("waiting for approval")
        expect(card.get_by_test_id("tool-command")).to_contain_text("$ pytest -q tests/test_app.py")
        expect(card.get_by_test_id("tool-command")).to_contain_text("/work/app")
        expect(card.get_by_test_id("tool-locations")).to_contain_text("tests/test_app.py:3")
        shown = card.get_by_test_id("permission-option")
        expect(shown).to_have_text([option["name"] for option in options])
        for option in shown.all():
            expect(option).to_be_visible()
            expect(option).to_be_enabled()
