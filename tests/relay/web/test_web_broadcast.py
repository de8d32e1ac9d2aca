"""The page takes the host's broadcast through a hostile relay: against the real stack
(`stack.py`, the demo agent), a viewer's WebSocket runs through a route that breaks one cast on
the way (tampered, dropped, replayed, reordered). The page refuses it, catches up by cursor, and
ends showing exactly what a driver's page shows, each item once (docs/application.md, "The
broadcast")."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, WebSocketRoute, expect

from tunnel.e2e.broadcast import COUNTER_SIZE, EPOCH_SIZE
from tunnel.proto import Cast, decode_frame
from tunnel.proto.frames import encode_cast

from .conftest import PageLog
from .stack import Host, Relay, running_host, running_relay
from .test_web_layout import DESKTOP, WAIT, allow, open_page, pending_request, send

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

TURNS = 3

# The seqs of the items a page shows, in document order.
SHOWN_SEQS = (
    """() => [...document.querySelectorAll("[data-seq]")].map((e) => Number(e.dataset.seq))"""
)


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[Relay]:
    with running_relay(tmp_path / "relay") as relay:
        yield relay


@pytest.fixture
def host(tmp_path: Path, relay: Relay) -> Iterator[Host]:
    with running_host(tmp_path / "host", relay.url) as host:
        yield host


def break_second_cast(kind: str) -> object:
    """A route for the page's WebSocket that does `kind` to the second cast from the relay."""
    casts = 0
    held: list[bytes] = []

    def route(ws: WebSocketRoute) -> None:
        server = ws.connect_to_server()

        def from_relay(message: str | bytes) -> None:
            nonlocal casts
            if isinstance(message, str):
                ws.send(message)
                return
            frame = decode_frame(message)
            if not isinstance(frame, Cast) or frame.channel is None:
                ws.send(message)
                return
            casts += 1
            if held:
                ws.send(message)
                ws.send(held.pop())
            elif casts != 2:
                ws.send(message)
            elif kind == "tamper":
                data = bytearray(frame.data)
                data[EPOCH_SIZE + COUNTER_SIZE + 1] ^= 1
                ws.send(encode_cast(frame.channel, bytes(data)))
            elif kind == "replay":
                ws.send(message)
                ws.send(message)
            elif kind == "reorder":
                held.append(message)
            # "drop": nothing goes to the page

        server.on_message(from_relay)
        ws.on_message(server.send)

    return route


def open_broken_page(browser: Browser, host: Host, kind: str, log: PageLog) -> Page:
    """The viewer's page, its WebSocket through the hostile route."""
    context = browser.new_context(viewport={"width": DESKTOP.width, "height": DESKTOP.height})
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.on("console", log.on_console)
    page.on("pageerror", log.on_page_error)
    page.route_web_socket(re.compile(r".*/v1/attach$"), break_second_cast(kind))
    base, fragment = host.view_link.split("#", 1)
    page.goto(f"{base}?name=victim#{fragment}")
    expect(page.get_by_test_id("connection-status")).to_have_attribute(
        "data-state", "connected", timeout=WAIT
    )
    return page


@pytest.mark.parametrize("kind", ["tamper", "drop", "replay", "reorder"])
def test_a_page_refuses_a_broken_cast_and_catches_up_by_cursor(
    browser: Browser, host: Host, kind: str
) -> None:
    log = PageLog()
    victim = open_broken_page(browser, host, kind, log)
    driver = open_page(browser, DESKTOP, host.drive_link, "alice", log)
    for turn in range(TURNS):
        send(driver, f"question {turn}")
        allow(driver, pending_request(driver))
        expect(driver.get_by_test_id("agent-status")).to_have_attribute(
            "data-state", "idle", timeout=WAIT
        )
    shown = driver.evaluate(SHOWN_SEQS)
    assert shown
    assert len(shown) == len(set(shown))
    expect(victim.locator("[data-seq]")).to_have_count(len(shown), timeout=WAIT)
    assert victim.evaluate(SHOWN_SEQS) == shown
    assert victim.evaluate("window.__tunnel.session.stats.breaks") >= 1
    assert driver.evaluate("window.__tunnel.session.stats.breaks") == 0
