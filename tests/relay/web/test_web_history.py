"""The page loads the end of a long conversation, and earlier items on demand: `tunnel relay` and
`tunnel host` as subprocesses, the host's log filled beforehand, the page in chromium."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tunnel.app.requests import DEFAULT_HISTORY_ITEMS, MAX_HISTORY_ITEMS

from .stack import Host, earlier_answers, running_host, running_relay

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

ITEMS = 500


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    with (
        running_relay(tmp_path / "relay") as relay,
        running_host(tmp_path / "host", relay.url, log=earlier_answers(ITEMS)) as host,
    ):
        yield host


def named(link: str, name: str) -> str:
    base, fragment = link.split("#", 1)
    return f"{base}?name={name}#{fragment}"


def shown_seqs(page: Page) -> list[int]:
    values = page.locator("[data-testid=conversation] [data-seq]").evaluate_all(
        "els => els.map(e => Number(e.dataset.seq))"
    )
    return [int(v) for v in values]


def top_of(page: Page, seq: int) -> float:
    """Where the item with `seq` is in the viewport, in CSS pixels from its top."""
    box = page.locator(f"[data-testid=conversation] [data-seq='{seq}']").bounding_box()
    assert box is not None
    return box["y"]


def test_load_earlier_prepends_the_earlier_items_in_order_and_keeps_the_place(
    page: Page, host: Host
) -> None:
    page.goto(named(host.view_link, "vera"))
    expect(page.get_by_test_id("connection-status")).to_have_attribute(
        "data-state", "connected", timeout=30_000
    )
    expect(page.get_by_test_id("conversation")).to_have_attribute("data-loaded", "true")
    # A fresh page gets the end of the conversation only.
    shown = shown_seqs(page)
    head = shown[-1]
    assert head >= ITEMS - 1
    assert shown == list(range(head + 1 - DEFAULT_HISTORY_ITEMS, head + 1))
    assert page.get_by_text("earlier answer 0", exact=True).count() == 0

    button = page.get_by_test_id("load-earlier")
    clicks = 0
    while shown[0] > 0:
        expect(button).to_be_visible()
        expect(button).to_be_enabled()
        oldest = shown[0]
        button.scroll_into_view_if_needed()
        where = top_of(page, oldest)
        button.click()
        expect(page.locator(f"[data-testid=conversation] [data-seq='{oldest - 1}']")).to_have_count(
            1, timeout=30_000
        )
        clicks += 1
        shown = shown_seqs(page)
        # Every item once, in seq order, the earlier page in front.
        assert shown == list(range(max(0, oldest - MAX_HISTORY_ITEMS), head + 1))
        # The reader stays where they were: the item that was first has not moved.
        assert abs(top_of(page, oldest) - where) <= 2
    assert clicks == -(-(head + 1 - DEFAULT_HISTORY_ITEMS) // MAX_HISTORY_ITEMS)
    # Nothing before seq 0: the button is gone, the first answer is shown.
    expect(button).to_be_hidden()
    expect(page.get_by_text("earlier answer 0", exact=True)).to_have_count(1)
