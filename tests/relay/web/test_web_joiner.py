"""A page that joins a session already under way: it shows what only events tell, as the host
says it right after the snapshot (docs/application.md, "Events").

Against the real stack (`stack.py`) with the demo agent, whose turn holds at its permission
request: a page joining then says the agent waits for approval, and a prompt stored behind the
turn is shown queued below it. Scripted (`fake_relay.py`): the status's `turn` marks the stored
prompts after it queued; a terminal agent's screen has the host's size, from `ready` and from
each `terminal_size` event, whatever the page's own size. And with a real `pty:` agent, a
viewer's screen has the columns a driver's page gave the host.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from .conftest import PageLog
from .fake_relay import Scenario, fake_relay, wire_item
from .stack import Host, Relay, running_host, running_relay
from .test_web_layout import DESKTOP, WAIT, open_page, pending_request, send

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[Relay]:
    with running_relay(tmp_path / "relay") as relay:
        yield relay


@pytest.fixture
def host(tmp_path: Path, relay: Relay) -> Iterator[Host]:
    with running_host(tmp_path / "host", relay.url) as host:
        yield host


def test_a_page_joining_mid_turn_shows_it_waits_and_the_prompt_queued_behind_it(
    browser: Browser, host: Host
) -> None:
    log = PageLog()
    driver = open_page(browser, DESKTOP, host.drive_link, "alice", log)
    send(driver, "first question")
    pending_request(driver)
    send(driver, "second question")
    queued_there = driver.locator("[data-testid=message][data-role=user]", has_text="second")
    expect(queued_there).to_have_attribute("data-queued", "true")

    viewer = open_page(browser, DESKTOP, host.view_link, "bob", log)
    status = viewer.get_by_test_id("agent-status")
    expect(status).to_have_text("waiting for approval", timeout=WAIT)
    expect(status).to_have_attribute("data-state", "waiting")
    second = viewer.get_by_test_id("queued-prompts").locator(
        "[data-testid=message][data-role=user]"
    )
    expect(second).to_have_count(1)
    expect(second).to_contain_text("second question")
    expect(second).to_have_attribute("data-queued", "true")
    expect(second.get_by_test_id("queued-label")).to_be_visible()
    # The prompt the turn answers is not queued: it is the turn.
    first = viewer.locator("[data-testid=message][data-role=user]", has_text="first question")
    expect(first).not_to_have_attribute("data-queued", "true")
    assert log.errors == []


def test_the_status_turn_queues_the_stored_prompts_after_it(page: Page, page_log: PageLog) -> None:
    items = [
        wire_item(0, "message", {"role": "user", "text": "one"}, created_by="ann"),
        wire_item(1, "message", {"role": "user", "text": "two"}, created_by="ann"),
        wire_item(2, "message", {"role": "user", "text": "three"}, created_by="ann"),
    ]
    with fake_relay(Scenario(items=items)) as relay:
        page.goto(relay.page_url("view"))
        expect(page.get_by_test_id("conversation")).to_have_attribute("data-loaded", "true")
        prompts = page.locator("[data-testid=message][data-role=user]")
        expect(prompts).to_have_count(3)
        relay.send_event(
            {
                "conversation_id": "c",
                "kind": "status",
                "data": {"state": "running", "queued": 2, "turn": 0},
            }
        )
        queue = page.get_by_test_id("queued-prompts").locator("[data-testid=message]")
        expect(queue).to_have_count(2)
        assert queue.evaluate_all("es => es.map(e => e.dataset.seq)") == ["1", "2"]
        expect(page.get_by_test_id("agent-status")).to_have_text("working (2 queued)")
        # The next turn starts: its prompt joins the conversation, the other still waits.
        relay.send_event(
            {
                "conversation_id": "c",
                "kind": "status",
                "data": {"state": "running", "queued": 1, "turn": 1},
            }
        )
        expect(queue).to_have_count(1)
        expect(queue).to_have_attribute("data-seq", "2")
    assert page_log.errors == []


def test_a_terminal_agents_screen_has_the_hosts_size(page: Page, page_log: PageLog) -> None:
    items = [wire_item(0, "terminal", {"text": "$ "})]
    scenario = Scenario(
        items=items,
        agent={"name": "bash", "kind": "terminal"},
        terminal={"cols": 30, "rows": 13},
    )
    size = "() => { const t = window.__tunnel.view.terminal.term; return [t.cols, t.rows]; }"
    with fake_relay(scenario) as relay:
        page.goto(relay.page_url("view"))
        terminal = page.get_by_test_id("terminal")
        expect(terminal.locator(".xterm-rows")).to_contain_text("$")
        # The box is far wider than 30 columns: the screen keeps the host's size in it.
        assert page.evaluate(size) == [30, 13]
        expect(terminal).to_have_attribute("data-host-cols", "30")
        box = terminal.bounding_box()
        screen = terminal.locator(".xterm-screen").bounding_box()
        assert box is not None
        assert screen is not None
        assert screen["width"] < box["width"] / 2

        # A driver resized the host's terminal: every page follows, even past its box.
        relay.send_event(
            {"conversation_id": "c", "kind": "terminal_size", "data": {"cols": 300, "rows": 50}}
        )
        expect(terminal).to_have_attribute("data-host-cols", "300")
        assert page.evaluate(size) == [300, 50]
        scroll = terminal.evaluate("e => [e.scrollWidth, e.clientWidth]")
        assert scroll[0] > scroll[1], "a screen wider than its box scrolls inside it"
        # What no host could send changes nothing.
        relay.send_event(
            {"conversation_id": "c", "kind": "terminal_size", "data": {"cols": 0, "rows": 5}}
        )
        relay.send_event(
            {"conversation_id": "c", "kind": "terminal_size", "data": {"cols": 80, "rows": 24}}
        )
        expect(terminal).to_have_attribute("data-host-cols", "80")
        assert page.evaluate(size) == [80, 24]
    assert page_log.errors == []


def test_a_viewers_terminal_has_the_columns_a_drivers_page_gave_the_host(
    browser: Browser, tmp_path: Path, relay: Relay
) -> None:
    home = tmp_path / "pty-host"
    home.mkdir()
    host = Host.start(home, relay.url, agent="pty:" + shlex.join([sys.executable, "-i", "-q"]))
    log = PageLog()
    try:
        driver = browser.new_context(viewport={"width": 900, "height": 700}).new_page()
        driver.on("pageerror", log.on_page_error)
        base, fragment = host.drive_link.split("#", 1)
        driver.goto(f"{base}?name=alice#{fragment}")
        expect(driver.get_by_test_id("terminal").locator(".xterm-rows")).to_contain_text(
            ">>>", timeout=WAIT
        )
        # The driver's page asks for what fits its box; the host takes it and says so.
        wanted = driver.evaluate("() => window.__tunnel.view.terminal.size")
        assert wanted["cols"] != 80
        expect(driver.get_by_test_id("terminal")).to_have_attribute(
            "data-host-cols", str(wanted["cols"]), timeout=WAIT
        )

        viewer = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
        viewer.on("pageerror", log.on_page_error)
        base, fragment = host.view_link.split("#", 1)
        viewer.goto(f"{base}?name=bob#{fragment}")
        terminal = viewer.get_by_test_id("terminal")
        expect(terminal.locator(".xterm-rows")).to_contain_text(">>>", timeout=WAIT)
        expect(terminal).to_have_attribute("data-host-cols", str(wanted["cols"]))
        size = viewer.evaluate("() => window.__tunnel.view.terminal.term.cols")
        assert size == wanted["cols"]
        assert viewer.evaluate("() => window.__tunnel.view.terminal.size.cols") > size
    finally:
        host.process.stop()
    assert log.errors == []
