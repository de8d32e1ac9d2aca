"""The page's header says how far the agent reaches on the host (the ready message's `sandbox`),
so a teammate knows the boundary before driving."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from .conftest import PageLog
from .fake_relay import Scenario, fake_relay

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]


def test_a_sandboxed_agent_shows_what_it_may_write_and_its_network(
    page: Page, page_log: PageLog
) -> None:
    sandbox = {
        "enabled": True,
        "writable": ["/home/ann/proj", "/home/ann/.claude"],
        "network": True,
    }
    with fake_relay(Scenario(sandbox=sandbox)) as relay:
        page.goto(relay.page_url("view"))
        badge = page.get_by_test_id("sandbox")
        expect(badge).to_be_visible()
        expect(badge).to_have_attribute("data-enabled", "true")
        expect(badge).to_have_text(
            "sandboxed · writes /home/ann/proj, /home/ann/.claude · network on"
        )
        expect(badge).to_have_attribute(
            "title",
            "The agent runs in a sandbox on the host: it can "
            "write only in /home/ann/proj, /home/ann/.claude, sees the system read-only and none "
            "of the host user's files but those the host allowed; it can reach the network.",
        )
        assert page_log.errors == []


def test_a_sandbox_without_network_says_so(page: Page) -> None:
    sandbox = {"enabled": True, "writable": ["/srv/proj"], "network": False}
    with fake_relay(Scenario(sandbox=sandbox)) as relay:
        page.goto(relay.page_url("drive"))
        badge = page.get_by_test_id("sandbox")
        expect(badge).to_have_text("sandboxed · writes /srv/proj · no network")
        expect(badge).to_have_attribute("data-network", "false")


def test_an_unconfined_agent_is_shown_as_not_sandboxed(page: Page) -> None:
    with fake_relay(Scenario(sandbox={"enabled": False, "writable": [], "network": True})) as relay:
        page.goto(relay.page_url("drive"))
        badge = page.get_by_test_id("sandbox")
        expect(badge).to_have_text("not sandboxed")
        expect(badge).to_have_attribute("data-enabled", "false")
        expect(badge).to_have_attribute(
            "title",
            "The agent runs with the host user's rights: a "
            "driver can make it read, change or send anything that user can.",
        )


def test_markup_in_a_writable_path_stays_text(page: Page) -> None:
    path = '/tmp/<img src=x onerror="window.__pwned = 1">'
    with fake_relay(
        Scenario(sandbox={"enabled": True, "writable": [path], "network": True})
    ) as relay:
        page.goto(relay.page_url("view"))
        expect(page.get_by_test_id("sandbox")).to_contain_text(path)
        assert page.evaluate("window.__pwned") is None
        assert page.locator("header img").count() == 0


def test_a_host_that_does_not_say_shows_no_badge(page: Page) -> None:
    with fake_relay(Scenario()) as relay:
        page.goto(relay.page_url("drive"))
        expect(page.get_by_test_id("connection-status")).to_have_attribute(
            "data-state", "connected"
        )
        expect(page.get_by_test_id("sandbox")).to_be_hidden()
