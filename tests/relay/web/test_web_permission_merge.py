"""A permission request completes the tool call it gates, through the real stack: an empty
`content` or `rawInput` in the request (Claude's adapter 0.101.0 asking to leave plan mode) never
hides the plan the tool call carried, live and after a late join; and a tool first seen in a
request keeps the request's title and kind when an update of it comes later.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from .stack import scripted_stack

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

PLAN_AGENT = Path(__file__).resolve().parent / "plan_acp_agent.py"


def open_connected(page: Page, link: str) -> None:
    page.goto(link)
    expect(page.get_by_test_id("connection-status")).to_have_attribute(
        "data-state", "connected", timeout=30_000
    )
    expect(page.get_by_test_id("conversation")).to_have_attribute("data-loaded", "true")


def named(link: str, name: str) -> str:
    base, fragment = link.split("#", 1)
    return f"{base}?name={name}#{fragment}"


def assert_plan_asked(page: Page) -> None:
    card = page.locator("[data-testid=tool-call][data-tool-call-id=plan-1]")
    request = card.get_by_test_id("permission-request")
    expect(request).to_have_count(1, timeout=30_000)
    expect(request.get_by_test_id("tool-text")).to_contain_text("Write the summary")
    expect(request.get_by_test_id("tool-input")).to_contain_text("Read the notes")


def test_an_empty_request_keeps_the_plan_and_a_new_tool_keeps_the_requests_title(
    browser: Browser, tmp_path: Path
) -> None:
    with scripted_stack(browser, tmp_path, PLAN_AGENT) as (host, new_page):
        driver = new_page()
        open_connected(driver, named(host.drive_link, "alice"))
        box = driver.get_by_test_id("composer-input")
        box.fill("make a plan")
        box.press("Enter")
        assert_plan_asked(driver)

        # A teammate who joins while the request is open gets it from the snapshot.
        joiner = new_page()
        open_connected(joiner, named(host.view_link, "bob"))
        assert_plan_asked(joiner)

        driver.locator(
            "[data-tool-call-id=plan-1] [data-testid=permission-option][data-option-id=yes]"
        ).click()
        fresh = driver.locator("[data-testid=permission-request]", has_text="Run the fresh tool")
        expect(fresh).to_have_count(1, timeout=30_000)
        fresh.locator("[data-testid=permission-option][data-option-id=yes]").click()

        for page in (driver, joiner):
            card = page.locator("[data-testid=tool-call][data-tool-call-id=fresh-1]")
            expect(card).to_have_attribute("data-status", "completed", timeout=30_000)
            head = card.locator(".tool-head")
            expect(head.get_by_test_id("tool-title")).to_have_text("Run the fresh tool")
            expect(head.get_by_test_id("tool-kind")).to_have_text("execute")
