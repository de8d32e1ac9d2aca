"""A holder of the page's own link who also controls the relay, against the real stack
(`stack.py`: `tunnel relay`, `tunnel host` with the demo agent) and the page in chromium. The
attacker stands in the page's WebSocket (a Playwright route) and holds the same view secret:

- it swaps the page's ephemeral key for its own, with a proof it can make: the page refuses the
  host's answer (4003) and shows nothing;
- it injects on the channel what it can seal, and a storm of `cut`s with dropped casts: the page
  refuses the one (4003) and ends the other showing exactly what an honest driver's page shows,
  each item once (docs/security.md, "Opening a channel"; docs/application.md, "The broadcast").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
from playwright.sync_api import Browser, Page, WebSocketRoute, expect

from tunnel.e2e.crypto import ChannelCipher, ShareLink, e2e_root
from tunnel.e2e.opening import ANSWER_SIZE, EarlySubscribe, TeammateOpening
from tunnel.proto import Cast, Cut, Data, Open, decode_frame, encode_frame
from tunnel.proto.frames import encode_cast

from .conftest import PageLog
from .stack import Host
from .test_web_broadcast import SHOWN_SEQS
from .test_web_broadcast import host as host
from .test_web_broadcast import relay as relay
from .test_web_layout import DESKTOP, WAIT, allow, open_page, pending_request, send

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

Hostile = Callable[[WebSocketRoute], None]


def hostile_route(
    *, up: Callable[[bytes], list[bytes]] | None = None, down: Callable[[bytes], list[bytes]]
) -> Hostile:
    """A route in the page's WebSocket: `up` rewrites what the page sends, `down` what it gets."""

    def route(ws: WebSocketRoute) -> None:
        server = ws.connect_to_server()

        def from_relay(message: str | bytes) -> None:
            for each in down(message) if isinstance(message, bytes) else [message]:
                ws.send(each)

        def from_page(message: str | bytes) -> None:
            sent = up(message) if up is not None and isinstance(message, bytes) else [message]
            for each in sent:
                server.send(each)

        server.on_message(from_relay)
        ws.on_message(from_page)

    return route


def open_attacked_page(browser: Browser, link: str, route: Hostile, log: PageLog) -> Page:
    context = browser.new_context(viewport={"width": DESKTOP.width, "height": DESKTOP.height})
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.on("console", log.on_console)
    page.on("pageerror", log.on_page_error)
    page.route_web_socket(re.compile(r".*/v1/attach$"), route)
    base, fragment = link.split("#", 1)
    page.goto(f"{base}?name=victim#{fragment}")
    return page


def run_turns(driver: Page, turns: int) -> list[int]:
    for turn in range(turns):
        send(driver, f"question {turn}")
        allow(driver, pending_request(driver))
        expect(driver.get_by_test_id("agent-status")).to_have_attribute(
            "data-state", "idle", timeout=WAIT
        )
    shown: list[int] = driver.evaluate(SHOWN_SEQS)
    assert shown
    assert len(shown) == len(set(shown))
    return shown


def test_a_swapped_ephemeral_key_leaves_the_page_on_the_decryption_screen(
    browser: Browser, host: Host
) -> None:
    link = ShareLink.parse(host.view_link)
    root = e2e_root(link.secret, link.host_id)
    data_to_page: list[bytes] = []

    def swap_key(message: bytes) -> list[bytes]:
        frame = decode_frame(message)
        if not isinstance(frame, Open):
            return [message]
        # The attacker's own opening for the same link, name and early subscribe: a proof it
        # can make.
        sub = frame.meta.get("sub")
        mine = TeammateOpening(
            root=root,
            host_id=link.host_id,
            role=link.role,
            name=frame.meta["name"],
            subscribe=None if sub is None else EarlySubscribe(**sub),
        ).meta()
        meta = {**frame.meta, "kx": mine["kx"], "proof": mine["proof"], "salt": mine["salt"]}
        return [encode_frame(Open(channel=frame.channel, path=frame.path, meta=meta))]

    def watch(message: bytes) -> list[bytes]:
        frame = decode_frame(message)
        if isinstance(frame, Data):
            data_to_page.append(frame.data)
        return [message]

    log = PageLog()
    page = open_attacked_page(browser, host.view_link, hostile_route(up=swap_key, down=watch), log)
    expect(page.get_by_test_id("screen-decrypt-failed")).to_be_visible(timeout=WAIT)
    expect(page.get_by_test_id("connection-status")).to_have_attribute("data-state", "closed")
    # The host did answer (the attacker's transcript); the page refused it and showed nothing.
    assert [len(data) for data in data_to_page][:1] == [ANSWER_SIZE]
    assert page.locator("[data-seq]").count() == 0


def test_what_a_same_role_attacker_seals_on_the_channel_is_refused(
    browser: Browser, host: Host
) -> None:
    # After the genuine answer, the attacker sends the page an `item` sealed with every key it
    # can make from the role secret it holds (here: the role root itself as the key).
    link = ShareLink.parse(host.view_link)
    forged_item = msgpack.packb(
        {
            "op": "item",
            "item": {"seq": 0, "type": "agent_message", "data": {"text": "host chose Reject"}},
        }
    )
    answers = 0

    def inject(message: bytes) -> list[bytes]:
        nonlocal answers
        frame = decode_frame(message)
        if isinstance(frame, Data) and len(frame.data) == ANSWER_SIZE and answers == 0:
            answers += 1
            forged = ChannelCipher(e2e_root(link.secret, link.host_id), link.host_id).encrypt(
                forged_item
            )
            return [message, encode_frame(Data(channel=frame.channel, data=forged))]
        return [message]

    log = PageLog()
    page = open_attacked_page(browser, host.view_link, hostile_route(down=inject), log)
    expect(page.get_by_test_id("screen-decrypt-failed")).to_be_visible(timeout=WAIT)
    assert answers == 1
    expect(page.get_by_text("host chose Reject")).to_have_count(0)


def test_a_cut_storm_and_dropped_casts_only_lead_to_a_correct_catch_up(
    browser: Browser, host: Host
) -> None:
    casts = 0

    def storm(message: bytes) -> list[bytes]:
        nonlocal casts
        frame = decode_frame(message)
        if not isinstance(frame, Cast) or frame.channel is None:
            return [message]
        casts += 1
        if casts % 3 == 0:
            return [encode_frame(Cut(channel=frame.channel))]  # dropped, and a cut for it
        if casts % 3 == 1:
            # A cut before the cast and three more after: the page must not trust any of it
            # beyond asking the host again.
            cut = encode_frame(Cut(channel=frame.channel))
            return [cut, encode_cast(frame.channel, frame.data), cut, cut, cut]
        return [message]

    log = PageLog()
    victim = open_attacked_page(browser, host.view_link, hostile_route(down=storm), log)
    expect(victim.get_by_test_id("connection-status")).to_have_attribute(
        "data-state", "connected", timeout=WAIT
    )
    driver = open_page(browser, DESKTOP, host.drive_link, "alice", log)
    shown = run_turns(driver, 3)
    expect(victim.locator("[data-seq]")).to_have_count(len(shown), timeout=WAIT)
    assert victim.evaluate(SHOWN_SEQS) == shown
    assert casts >= 3
    stats: dict[str, Any] = victim.evaluate("window.__tunnel.session.stats")
    assert stats["breaks"] >= 1
