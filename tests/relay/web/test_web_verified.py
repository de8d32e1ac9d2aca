"""The verified mark against the real stack (`tunnel relay` and `tunnel host` subprocesses): after
a turn the page checks the host's signed head over the items it holds and shows them verified; a
page that joins later gets the latest head after its snapshot and shows the same mark (a joiner
holding only the end checks from the anchor: test_web_chain.py and
tests/host/test_audit_end_to_end.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from .stack import Host, Relay, running_relay
from .test_web_stack import connected, named, prompt

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[Relay]:
    with running_relay(tmp_path / "relay") as relay:
        yield relay


@pytest.fixture
def host(tmp_path: Path, relay: Relay) -> Iterator[Host]:
    home = tmp_path / "host"
    home.mkdir()
    host = Host.start(home, relay.url)
    try:
        yield host
    finally:
        host.process.stop()


def run_turn(page: Page) -> None:
    prompt(page, "Count the lines, please")
    pending = page.locator("[data-testid=permission-request][data-state=pending]").first
    expect(pending).to_be_visible(timeout=30_000)
    pending.locator("[data-testid=permission-option][data-kind=allow_once]").click()
    expect(page.get_by_test_id("agent-status")).to_have_attribute("data-state", "idle")


def test_the_page_marks_the_items_the_host_signed_as_verified(
    page: Page, browser: Browser, host: Host
) -> None:
    page.goto(named(host.drive_link, "alice"))
    connected(page)
    mark = page.get_by_test_id("verified-mark")
    expect(mark).to_be_hidden()
    run_turn(page)
    expect(mark).to_have_attribute("data-state", "verified", timeout=30_000)
    expect(mark).to_have_attribute("data-from", "0")
    last = page.evaluate("Math.max(...window.__tunnel.session.items.map((i) => i.seq))")
    expect(mark).to_have_attribute("data-to", str(last))
    expect(mark).to_contain_text(f"signed to #{last}")

    # A viewer joining now gets the latest signed head after its snapshot.
    context = browser.new_context()
    try:
        late = context.new_page()
        late.goto(named(host.view_link, "vera"))
        connected(late)
        late_mark = late.get_by_test_id("verified-mark")
        expect(late_mark).to_have_attribute("data-state", "verified", timeout=30_000)
        expect(late_mark).to_have_attribute("data-to", str(last))
    finally:
        context.close()
