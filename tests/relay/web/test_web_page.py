"""The page against a scripted relay and host: rendering, driving, safety, reconnects, screens."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from playwright.sync_api import Page, expect

from tunnel.e2e.identity import PUBLIC_KEY_SIZE
from tunnel.e2e.opening import ANSWER_SIZE
from tunnel.proto.codes import FINAL_CODES, CloseCode

from .conftest import INSECURE_HOST, PageLog
from .fake_relay import CONVERSATION, HOST_ID, FakeRelay, Scenario, fake_relay, wire_item

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

# Records every CSP violation the page reports, before any of its scripts run.
CSP_RECORDER = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`);
});
"""

XSS_TEXT = "\n".join(
    [
        "Here is **bold** and a [good link](https://example.com/docs).",
        "",
        '<img src=x onerror="window.__pwned = 1">',
        "",
        "[click me](javascript:window.__pwned=2)",
        "",
        "<script>window.__pwned = 3</script>",
        '<a href="javascript:window.__pwned=4">raw link</a>',
        '<a href="JaVaScRiPt&colon;window.__pwned=5">encoded link</a>',
        '<iframe src="javascript:window.__pwned=6"></iframe>',
        '<svg onload="window.__pwned=7"><circle r="5"/></svg>',
        "<style>body { display: none }</style>",
        '<div style="position:fixed;inset:0" onclick="window.__pwned=8">overlay</div>',
        '<form action="https://evil.example"><input name=x><button>go</button></form>',
        "[data link](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    ]
)


def conversation_items(agent_text: str = XSS_TEXT) -> list[dict[str, Any]]:
    diff = {
        "type": "diff",
        "path": "src/app.py",
        "old_text": "a = 1\nb = 2\nc = 3\n",
        "new_text": "a = 1\nb = 20\nc = 3\nd = 4\n",
    }
    return [
        wire_item(
            0, "message", {"role": "user", "text": "Please *count* lines"}, created_by="alice"
        ),
        wire_item(1, "reasoning", {"text": "I should look at the files."}, response_id="r1"),
        wire_item(
            2,
            "tool_call",
            {
                "tool_call_id": "t1",
                "title": "Edit src/app.py",
                "kind": "edit",
                "status": "in_progress",
                "input": {"path": "src/app.py"},
                "content": [diff],
            },
            status="in_progress",
        ),
        wire_item(3, "tool_call_update", {"tool_call_id": "t1", "status": "completed"}),
        wire_item(4, "tool_result", {"tool_call_id": "t1", "ok": True, "output": "4 lines"}),
        wire_item(
            5,
            "plan",
            {"entries": [{"content": "Read", "status": "completed", "priority": "high"}]},
        ),
        wire_item(6, "message", {"role": "agent", "text": agent_text}, response_id="r1"),
        wire_item(
            7,
            "permission_request",
            {
                "request_id": "p1",
                "title": "Run `wc -l`?",
                "tool_call_id": None,
                "options": [
                    {"option_id": "allow", "name": "Allow once", "kind": "allow_once"},
                    {"option_id": "reject", "name": "Reject", "kind": "reject_once"},
                ],
            },
            status="action_required",
        ),
        wire_item(8, "error", {"message": "something <b>broke</b>"}),
        wire_item(9, "session_event", {"what": "agent_started"}),
        wire_item(10, "compaction", {"summary": "older turns were summarized"}),
    ]


@pytest.fixture
def relay() -> Iterator[FakeRelay]:
    with fake_relay(Scenario(items=conversation_items())) as relay:
        yield relay


def csp_violations(page: Page) -> list[str]:
    """CSP violations other than the sanitizer's parse of untrusted markup.

    DOMPurify parses markup with DOMParser, and Chromium reports (and blocks) each inline event
    handler it meets there, although that document never runs script. Those reports are the CSP
    doing its job; anything else means the page itself broke its own policy.
    """
    reports: list[str] = page.evaluate("window.__csp")
    return [
        r
        for r in reports
        if not re.match(r"(script-src-attr|style-src-elem) inline \S*/purify\.es\.mjs:", r)
    ]


def open_page(page: Page, url: str) -> None:
    page.add_init_script(CSP_RECORDER)
    page.goto(url)


def named(url: str, name: str) -> str:
    base, fragment = url.split("#", 1)
    return f"{base}?name={name}#{fragment}"


def wait_for(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def seqs(page: Page) -> list[int]:
    values = page.locator("[data-testid=conversation] [data-seq]").evaluate_all(
        "els => els.map(e => Number(e.dataset.seq))"
    )
    return [int(v) for v in values]


def test_every_item_type_renders(page: Page, page_log: PageLog) -> None:
    with fake_relay(Scenario(items=conversation_items("Done: **4** lines."))) as relay:
        check_every_item_type(page, relay, page_log)


def check_every_item_type(page: Page, relay: FakeRelay, page_log: PageLog) -> None:
    open_page(page, named(relay.page_url("drive"), "alice"))
    expect(page.get_by_test_id("connection-status")).to_have_attribute("data-state", "connected")
    expect(page.get_by_test_id("conversation")).to_have_attribute("data-loaded", "true")
    # tool_call_update and tool_result fold into the tool call's card.
    assert seqs(page) == [0, 1, 2, 5, 6, 7, 8, 9, 10]
    user = page.locator("[data-testid=message][data-role=user]")
    expect(user).to_contain_text("alice")
    expect(user.locator("em")).to_have_text("count")
    reasoning = page.get_by_test_id("reasoning")
    expect(reasoning).not_to_have_attribute("open", "")
    tool = page.get_by_test_id("tool-call")
    expect(tool).to_have_attribute("data-status", "completed")
    expect(tool.get_by_test_id("tool-result")).to_contain_text("4 lines")
    diff = tool.get_by_test_id("diff")
    expect(diff.locator(".diff-del")).to_have_text(["- b = 2"])
    expect(diff.locator(".diff-add")).to_have_text(["+ b = 20", "+ d = 4"])
    expect(page.get_by_test_id("plan")).to_contain_text("Read")
    expect(page.get_by_test_id("error-item")).to_contain_text("something <b>broke</b>")
    expect(page.get_by_test_id("note")).to_contain_text("The agent started.")
    expect(page.get_by_test_id("item-generic")).to_contain_text("older turns were summarized")
    expect(page.get_by_test_id("agent-name")).to_have_text("scripted")
    expect(page.get_by_test_id("role-badge")).to_have_text("driver")
    # The page sent exactly one subscribe, from the start, with the name from the link.
    assert [m["after"] for m in relay.ops("subscribe")] == [None]
    assert relay.opens[0]["meta"]["name"] == "alice"
    assert relay.hellos[0]["name"] == "alice"
    assert csp_violations(page) == []
    assert relay.errors == []
    assert page_log.errors == []


def test_markup_in_agent_output_is_inert(page: Page, relay: FakeRelay) -> None:
    open_page(page, relay.page_url("view"))
    message = page.locator("[data-testid=message][data-seq='6']")
    expect(message).to_contain_text("overlay")
    page.wait_for_timeout(300)
    assert page.evaluate("window.__pwned") is None
    inert = message.evaluate(
        """m => ({
          handlers: [...m.querySelectorAll("*")].flatMap(e =>
            [...e.attributes].filter(a => a.name.startsWith("on")).map(a => a.name)),
          styles: m.querySelectorAll("[style]").length,
          forbidden: m.querySelectorAll("script, iframe, svg, style, form, input, button").length,
          hrefs: [...m.querySelectorAll("a")].map(a => a.getAttribute("href")),
          rels: [...m.querySelectorAll("a[href]")].map(a => a.rel),
          images: [...m.querySelectorAll("img")].map(i => i.getAttribute("src")),
        })"""
    )
    assert inert["handlers"] == []
    assert inert["styles"] == 0
    assert inert["forbidden"] == 0
    assert "https://example.com/docs" in inert["hrefs"]
    assert [h for h in inert["hrefs"] if h and not h.startswith("https://")] == []
    assert all("noopener" in rel and "noreferrer" in rel for rel in inert["rels"])
    assert inert["images"] == ["x"]
    assert csp_violations(page) == []
    page.locator("[data-testid=message][data-seq='6'] a", has_text="click me").click()
    page.wait_for_timeout(200)
    assert page.evaluate("window.__pwned") is None


def test_driver_prompts_answers_and_cancels(page: Page, relay: FakeRelay) -> None:
    open_page(page, named(relay.page_url("drive"), "alice"))
    expect(page.get_by_test_id("conversation")).to_have_attribute("data-loaded", "true")
    box = page.get_by_test_id("composer-input")
    box.fill("first line")
    box.press("Shift+Enter")
    box.type("second line")
    box.press("Enter")
    wait_for(lambda: relay.ops("prompt"))
    assert relay.ops("prompt")[0]["text"] == "first line\nsecond line"
    expect(box).to_have_value("")

    cancel = page.get_by_test_id("cancel-button")
    expect(cancel).to_be_disabled()
    relay.send_event(
        {"conversation_id": "conv-1", "kind": "status", "data": {"state": "running", "queued": 1}}
    )
    # The scripted conversation has a request open: the agent waits for its answer.
    expect(page.get_by_test_id("agent-status")).to_have_attribute("data-state", "waiting")
    expect(page.get_by_test_id("agent-status")).to_have_text("waiting for approval")
    cancel.click()
    wait_for(lambda: relay.ops("cancel"))

    request = page.locator("[data-testid=permission-request][data-request-id=p1]")
    request.locator("[data-option-id=allow]").click()
    wait_for(lambda: relay.ops("permission"))
    answer = relay.ops("permission")[0]
    assert (answer["request_id"], answer["option_id"], answer["_name"]) == ("p1", "allow", "alice")
    relay.push(
        wire_item(
            11,
            "permission_decision",
            {"request_id": "p1", "option_id": "allow", "option_name": "Allow once"},
            created_by="bob",
        )
    )
    expect(request).to_have_attribute("data-state", "answered")
    expect(request.get_by_test_id("permission-outcome")).to_contain_text("bob answered: Allow once")
    for button in request.get_by_test_id("permission-option").all():
        expect(button).to_be_disabled()
    expect(page.get_by_test_id("agent-status")).to_have_attribute("data-state", "running")
    assert relay.errors == []


def test_answered_permission_is_disabled_on_load(page: Page) -> None:
    items = conversation_items()
    items.append(
        wire_item(
            11,
            "permission_decision",
            {"request_id": "p1", "option_id": "reject", "option_name": "Reject"},
            created_by="carol",
        )
    )
    with fake_relay(Scenario(items=items)) as relay:
        open_page(page, relay.page_url("drive"))
        request = page.locator("[data-testid=permission-request][data-request-id=p1]")
        expect(request).to_have_attribute("data-state", "answered")
        expect(request.locator("button[data-option-id=reject]")).to_be_disabled()
        expect(request.get_by_test_id("permission-outcome")).to_contain_text(
            "carol answered: Reject"
        )


def test_viewer_is_read_only_and_a_forged_prompt_is_refused(page: Page, relay: FakeRelay) -> None:
    open_page(page, relay.page_url("view"))
    expect(page.get_by_test_id("connection-status")).to_have_attribute("data-state", "connected")
    expect(page.get_by_test_id("viewer-notice")).to_be_visible()
    expect(page.get_by_test_id("composer")).to_have_count(0)
    expect(page.get_by_test_id("role-badge")).to_have_text("viewer")
    request = page.locator("[data-testid=permission-request][data-request-id=p1]")
    expect(request).to_contain_text("Allow once")
    expect(request.locator("button")).to_have_count(0)
    sent = page.evaluate("window.__tunnel.session.link.send({op: 'prompt', text: 'forged'})")
    assert sent is True
    toast = page.get_by_test_id("op-error")
    expect(toast).to_be_visible()
    expect(toast).to_have_attribute("data-code", "forbidden")
    forged = relay.ops("prompt")
    assert [(m["text"], m["_role"]) for m in forged] == [("forged", "view")]


def test_streamed_deltas_are_replaced_by_the_final_message(page: Page, relay: FakeRelay) -> None:
    open_page(page, relay.page_url("view"))
    expect(page.get_by_test_id("conversation")).to_have_attribute("data-loaded", "true")
    for chunk in ("Hel", "lo **wor", "ld**"):
        relay.send_event(
            {
                "conversation_id": "conv-1",
                "kind": "delta",
                "data": {"response_id": "r9", "channel": "message", "text": chunk},
            }
        )
    stream = page.locator("[data-testid=stream][data-channel=message]")
    expect(stream.locator("strong")).to_have_text("world")
    relay.push(
        wire_item(11, "message", {"role": "agent", "text": "Hello **world**"}, response_id="r9")
    )
    expect(stream).to_have_count(0)
    expect(page.locator("[data-testid=message][data-seq='11'] strong")).to_have_text("world")


def test_reconnect_resubscribes_after_the_last_seq_without_duplicates(
    page: Page, relay: FakeRelay
) -> None:
    open_page(page, relay.page_url("drive"))
    expect(page.get_by_test_id("conversation")).to_have_attribute("data-loaded", "true")
    relay.push(wire_item(11, "message", {"role": "agent", "text": "before the cut"}))
    expect(page.locator("[data-seq='11']")).to_have_count(1)
    relay.drop_all()
    expect(page.get_by_test_id("connection-status")).to_have_attribute(
        "data-state", re.compile("reconnecting|connected")
    )
    wait_for(lambda: len(relay.ops("subscribe")) == 2, timeout=15)
    assert [m["after"] for m in relay.ops("subscribe")] == [None, 11]
    # Both went in the opens, the resume with the conversation its cursor counts in.
    assert [o["meta"]["sub"] for o in relay.opens] == [
        {},
        {"after": 11, "conversation": CONVERSATION},
    ]
    assert all(m["_early"] for m in relay.ops("subscribe"))
    expect(page.get_by_test_id("connection-status")).to_have_attribute("data-state", "connected")
    relay.push(wire_item(12, "message", {"role": "agent", "text": "after the cut"}))
    expect(page.locator("[data-seq='12']")).to_have_count(1)
    # A host that resent an old item would not show it twice.
    relay.push(wire_item(11, "message", {"role": "agent", "text": "before the cut"}))
    page.wait_for_timeout(200)
    shown = seqs(page)
    assert len(shown) == len(set(shown))
    assert shown[-2:] == [11, 12]
    assert page.evaluate("window.__tunnel.session.stats.duplicates") == 1


def test_a_host_whose_log_starts_over_resets_the_view(page: Page, relay: FakeRelay) -> None:
    open_page(page, relay.page_url("drive"))
    expect(page.get_by_test_id("conversation")).to_have_attribute("data-loaded", "true")
    before = seqs(page)
    assert len(before) > 2
    # The host comes back with a new, shorter log under the same conversation id.
    relay.scenario.items = [wire_item(0, "message", {"role": "agent", "text": "a new log"})]
    relay.drop_all()
    wait_for(lambda: len(relay.ops("subscribe")) == 2, timeout=15)
    assert relay.ops("subscribe")[1]["after"] == before[-1]
    expect(page.locator("[data-seq='0']")).to_contain_text("a new log")
    assert seqs(page) == [0]


def test_page_sends_nothing_on_the_channel_before_the_host_answer(page: Page) -> None:
    with fake_relay(Scenario(items=conversation_items(), hold_answer=True)) as relay:
        open_page(page, relay.page_url("drive"))
        wait_for(lambda: relay.opens)
        # Queued before the answer: it must wait for the keys, then go right after the key
        # confirmation (counter 0); the open carried the subscribe, served with the answer.
        queued = page.evaluate("window.__tunnel.session.link.send({op: 'prompt', text: 'early'})")
        assert queued is True
        page.wait_for_timeout(500)
        assert relay.data_before_answer == 0
        assert relay.received == []
        expect(page.get_by_test_id("connection-status")).to_have_attribute(
            "data-state", "connecting"
        )
        relay.release_answer()
        expect(page.get_by_test_id("connection-status")).to_have_attribute(
            "data-state", "connected"
        )
        expect(page.get_by_test_id("conversation")).to_have_attribute("data-loaded", "true")
        # (A diff on screen reads its file for context: `read_file`, not counted here.)
        sent = [m["op"] for m in relay.received if m["op"] != "read_file"]
        assert sent == ["subscribe", "prompt"]
        assert relay.received[1]["text"] == "early"
        assert relay.data_before_answer == 0
        assert relay.errors == []


def test_a_large_message_after_a_small_one_gets_its_window(page: Page, page_log: PageLog) -> None:
    # 100 KB leaves the host less window than the next 200 KB message needs: the page must
    # grant what it consumed although that is less than half the window, and never more.
    with fake_relay(Scenario()) as relay:
        open_page(page, relay.page_url("view"))
        expect(page.get_by_test_id("conversation")).to_have_attribute("data-loaded", "true")
        relay.push(wire_item(0, "message", {"role": "agent", "text": "a" * 100_000}))
        expect(page.locator("[data-seq='0']")).to_have_count(1)
        relay.push(wire_item(1, "message", {"role": "agent", "text": "b" * 200_000}))
        expect(page.locator("[data-seq='1']")).to_have_count(1)
        for seq in range(2, 12):
            relay.push(wire_item(seq, "message", {"role": "agent", "text": "c" * 60_000}))
        expect(page.locator("[data-seq='11']")).to_have_count(1)
        assert relay.errors == []
        assert page_log.errors == []
        expect(page.get_by_test_id("connection-status")).to_have_attribute(
            "data-state", "connected"
        )


def test_a_long_name_is_cut_to_64_characters_and_bound_into_the_keys(page: Page) -> None:
    name = "Zoë 😀" * 20
    with fake_relay(Scenario(items=conversation_items())) as relay:
        base, fragment = relay.page_url("drive").split("#", 1)
        open_page(page, f"{base}?name={quote(name)}#{fragment}")
        expect(page.get_by_test_id("conversation")).to_have_attribute("data-loaded", "true")
        sent = relay.opens[0]["meta"]["name"]
        assert sent == name[:64].strip()
        assert relay.hellos[0]["name"] == sent
        page.get_by_test_id("composer-input").fill("hi")
        page.get_by_test_id("composer-input").press("Enter")
        wait_for(lambda: relay.ops("prompt"))
        assert relay.ops("prompt")[0]["_name"] == sent
        assert relay.errors == []


def test_presence_lists_who_is_here(page: Page, relay: FakeRelay) -> None:
    open_page(page, relay.page_url("view"))
    expect(page.get_by_test_id("connection-status")).to_have_attribute("data-state", "connected")
    relay.send_presence(
        [{"name": "alice", "role": "drive"}, {"name": "<b>eve</b>", "role": "view"}]
    )
    members = page.get_by_test_id("presence-member")
    expect(members).to_have_count(2)
    expect(members.nth(0)).to_contain_text("alice")
    expect(members.nth(0)).to_contain_text("driver")
    expect(members.nth(1)).to_contain_text("<b>eve</b>")
    expect(page.get_by_test_id("presence-more")).to_have_count(0)
    expect(page.get_by_test_id("drawer-toggle")).to_have_text("People · 2")


def test_presence_counts_the_members_the_host_does_not_list(page: Page, relay: FakeRelay) -> None:
    open_page(page, relay.page_url("view"))
    expect(page.get_by_test_id("connection-status")).to_have_attribute("data-state", "connected")
    relay.send_presence(
        [{"name": "alice", "role": "drive"}, {"name": "bob", "role": "view"}], count=952
    )
    members = page.get_by_test_id("presence-member")
    expect(members).to_have_count(2)
    rows = page.get_by_test_id("presence").locator("li")
    expect(rows).to_have_count(3)
    expect(rows.last).to_have_attribute("data-testid", "presence-more")
    expect(page.get_by_test_id("presence-more")).to_have_text("and 950 more")
    expect(page.get_by_test_id("drawer-toggle")).to_contain_text("952")
    # Who left stays listed after the count, greyed.
    relay.send_presence([{"name": "alice", "role": "drive"}], count=951)
    expect(page.get_by_test_id("drawer-toggle")).to_contain_text("951")
    testids = [row.get_attribute("data-testid") for row in rows.all()]
    assert testids == ["presence-member", "presence-more", "presence-gone"]
    expect(page.get_by_test_id("presence-more")).to_have_text("and 950 more")


def test_terminal_session_shows_output_and_sends_keys(page: Page, page_log: PageLog) -> None:
    items = [wire_item(0, "terminal", {"text": "$ echo hi\r\nhi\r\n\x1b[31mred text\x1b[0m\r\n$ "})]
    scenario = Scenario(items=items, agent={"name": "bash", "kind": "terminal"})
    with fake_relay(scenario) as relay:
        open_page(page, relay.page_url("drive"))
        terminal = page.get_by_test_id("terminal")
        expect(terminal).to_be_visible()
        expect(terminal.locator(".xterm-rows")).to_contain_text("red text")
        expect(page.get_by_test_id("composer")).to_be_hidden()
        wait_for(lambda: relay.ops("resize"))
        size = relay.ops("resize")[0]
        assert size["cols"] > 20
        assert size["rows"] > 5
        terminal.click()
        page.keyboard.type("ls")
        page.keyboard.press("Enter")
        wait_for(lambda: b"".join(m["data"] for m in relay.ops("input")) == b"ls\r")
        # A paste larger than the host takes in one input message arrives in pieces, whole.
        page.evaluate("window.__tunnel.view.terminal.term.paste('x'.repeat(20000))")
        wait_for(lambda: sum(len(m["data"]) for m in relay.ops("input")) >= 20003)
        pieces = [len(m["data"]) for m in relay.ops("input")]
        assert max(pieces) <= 8192
        assert b"".join(m["data"] for m in relay.ops("input")).count(b"x") == 20000
        relay.push(wire_item(1, "terminal", {"text": "file.txt\r\n"}))
        expect(terminal.locator(".xterm-rows")).to_contain_text("file.txt")
        assert csp_violations(page) == []
        assert relay.errors == []
        assert page_log.errors == []


def test_viewer_terminal_takes_no_keys(page: Page) -> None:
    items = [wire_item(0, "terminal", {"text": "read only\r\n"})]
    with fake_relay(Scenario(items=items, agent={"name": "bash", "kind": "terminal"})) as relay:
        open_page(page, relay.page_url("view"))
        terminal = page.get_by_test_id("terminal")
        expect(terminal.locator(".xterm-rows")).to_contain_text("read only")
        terminal.click()
        page.keyboard.type("rm -rf /")
        page.wait_for_timeout(300)
        assert relay.ops("input") == []
        assert relay.ops("resize") == []


# ---- screens ----


def test_malformed_fragment_shows_the_bad_link_screen_and_never_connects(page: Page) -> None:
    with fake_relay() as relay:
        open_page(page, f"{relay.base_url}/h/{HOST_ID}#drive.not-a-secret")
        expect(page.get_by_test_id("screen-bad-link")).to_be_visible()
        page.wait_for_timeout(300)
        assert relay.hellos == []


def test_missing_fragment_shows_the_bad_link_screen(page: Page) -> None:
    with fake_relay() as relay:
        open_page(page, f"{relay.base_url}/h/{HOST_ID}")
        expect(page.get_by_test_id("screen-bad-link")).to_be_visible()


def test_wrong_secret_is_refused_by_the_relay_and_shows_the_bad_link_screen(page: Page) -> None:
    with fake_relay() as relay:
        open_page(page, f"{relay.base_url}/h/{HOST_ID}#drive.{'A' * 42}A")
        expect(page.get_by_test_id("screen-bad-link")).to_be_visible()
        expect(page.get_by_test_id("screen-bad-link")).to_contain_text("4002")
        page.wait_for_timeout(1500)
        # Final: the page does not keep knocking with a bad token.
        assert len(relay.hellos) == 1


@pytest.mark.parametrize(
    ("scenario", "screen"),
    [
        (Scenario(close_channel_with=4008), "screen-revoked"),
        (Scenario(end_with=4008), "screen-revoked"),
        (Scenario(garbage=True), "screen-decrypt-failed"),
        (Scenario(end_with=4001), "screen-refused"),
    ],
    ids=["revoked-channel", "revoked-link", "decryption-failed", "refused"],
)
def test_final_endings_show_their_screen(page: Page, scenario: Scenario, screen: str) -> None:
    with fake_relay(scenario) as relay:
        open_page(page, relay.page_url("drive"))
        expect(page.get_by_test_id(screen)).to_be_visible()
        expect(page.get_by_test_id("connection-status")).to_have_attribute("data-state", "closed")
        page.wait_for_timeout(1500)
        assert len(relay.hellos) == 1
        if scenario.garbage:
            # The page tells the host why it closed the channel.
            wait_for(lambda: (4003, "decryption failed") in relay.closes)


@pytest.mark.parametrize(
    "first",
    [bytes(16), bytes(ANSWER_SIZE - 1), bytes(ANSWER_SIZE + 1), bytes(40)],
    ids=["old-host-nonce", "127", "129", "40"],
)
def test_a_first_frame_that_is_not_an_answer_ends_with_the_protocol_error_screen(
    page: Page, first: bytes
) -> None:
    with fake_relay(Scenario(first_data=first, items=conversation_items())) as relay:
        open_page(page, relay.page_url("drive"))
        expect(page.get_by_test_id("screen-protocol-error")).to_be_visible()
        expect(page.get_by_test_id("screen-protocol-error")).to_contain_text("4000")
        expect(page.get_by_test_id("connection-status")).to_have_attribute("data-state", "closed")
        # The page closed the channel with 4000 and said why; it sent nothing else on it.
        wait_for(lambda: (4000, "the host's answer is malformed") in relay.closes)
        assert relay.received == []
        assert relay.data_before_answer == 0
        page.wait_for_timeout(1500)
        assert len(relay.hellos) == 1


@pytest.mark.parametrize(
    ("at", "reason"),
    [
        (0, "the answer is not from the host"),
        (PUBLIC_KEY_SIZE, "the answer is not signed by the host"),
        (ANSWER_SIZE - 1, "the answer is not signed by the host"),
    ],
    ids=["public-key", "ephemeral-key", "signature"],
)
def test_an_answer_that_is_not_the_hosts_ends_with_the_decryption_screen(
    page: Page, at: int, reason: str
) -> None:
    with fake_relay(Scenario(tamper_answer=at, items=conversation_items())) as relay:
        open_page(page, relay.page_url("drive"))
        expect(page.get_by_test_id("screen-decrypt-failed")).to_be_visible()
        expect(page.get_by_test_id("connection-status")).to_have_attribute("data-state", "closed")
        # The page closed the channel with 4003 and said why; it sent nothing else on it.
        wait_for(lambda: (4003, reason) in relay.closes)
        assert [m for m in relay.received if "_early" not in m] == []
        assert relay.data_before_answer == 0
        page.wait_for_timeout(1500)
        assert len(relay.hellos) == 1


@pytest.mark.parametrize("code", sorted(FINAL_CODES), ids=lambda code: code.name)
def test_every_final_code_stops_the_page_on_a_screen(page: Page, code: CloseCode) -> None:
    with fake_relay(Scenario(end_with=int(code))) as relay:
        open_page(page, relay.page_url("drive"))
        expect(page.get_by_test_id("connection-status")).to_have_attribute("data-state", "closed")
        screen = page.locator("[data-testid^=screen-]")
        expect(screen).to_have_count(1)
        expect(screen).to_contain_text(f"close code {int(code)}")
        page.wait_for_timeout(1500)
        assert len(relay.hellos) == 1


@pytest.mark.parametrize(
    "code",
    [
        CloseCode.NORMAL,
        CloseCode.GOING_AWAY,
        CloseCode.INTERNAL_ERROR,
        CloseCode.FLOW_CONTROL,
        CloseCode.LIMIT_REACHED,
        CloseCode.SLOW_CONSUMER,
    ],
    ids=lambda code: code.name,
)
def test_codes_that_are_not_final_make_the_page_retry(page: Page, code: CloseCode) -> None:
    assert code not in FINAL_CODES
    with fake_relay(Scenario(end_with=int(code))) as relay:
        open_page(page, relay.page_url("drive"))
        wait_for(lambda: len(relay.hellos) >= 3, timeout=10)
        expect(page.get_by_test_id("connection-status")).not_to_have_attribute(
            "data-state", "closed"
        )
        expect(page.locator("[data-testid^=screen-]")).to_have_count(0)


def test_host_offline_keeps_retrying_until_the_host_is_back(page: Page) -> None:
    scenario = Scenario(end_with=4005, items=conversation_items())
    with fake_relay(scenario) as relay:
        open_page(page, relay.page_url("view"))
        expect(page.get_by_test_id("screen-host-offline")).to_be_visible()
        expect(page.get_by_test_id("connection-status")).to_have_attribute(
            "data-state", "host-offline"
        )
        wait_for(lambda: len(relay.hellos) >= 2, timeout=10)
        scenario.end_with = None
        page.get_by_test_id("retry-now").click()
        expect(page.get_by_test_id("connection-status")).to_have_attribute(
            "data-state", "connected"
        )
        expect(page.get_by_test_id("screen-host-offline")).to_have_count(0)
        expect(page.get_by_test_id("conversation")).to_have_attribute("data-loaded", "true")


def test_insecure_origin_shows_the_needs_https_screen(page: Page) -> None:
    with fake_relay() as relay:
        url = relay.page_url("drive").replace("127.0.0.1", INSECURE_HOST)
        open_page(page, url)
        expect(page.get_by_test_id("screen-needs-https")).to_be_visible()
        assert page.evaluate("isSecureContext") is False
        page.wait_for_timeout(300)
        assert relay.hellos == []


def test_presence_is_cleared_while_disconnected_and_sent_again_on_return(
    page: Page, relay: FakeRelay
) -> None:
    open_page(page, relay.page_url("view"))
    status = page.get_by_test_id("connection-status")
    expect(status).to_have_attribute("data-state", "connected")
    relay.send_presence([{"name": "alice", "role": "drive"}])
    members = page.get_by_test_id("presence-member")
    expect(members).to_have_count(1)
    relay.drop_all()
    # A stale list would show people as here while nobody knows: the page shows nobody.
    expect(members).to_have_count(0)
    expect(status).to_have_attribute("data-state", "connected")
    relay.send_presence([{"name": "bob", "role": "view"}])
    expect(members).to_have_count(1)
    expect(members.nth(0)).to_contain_text("bob")


def test_the_agent_status_says_when_the_hosts_log_cannot_be_written(
    page: Page, relay: FakeRelay
) -> None:
    open_page(page, relay.page_url("view"))
    expect(page.get_by_test_id("connection-status")).to_have_attribute("data-state", "connected")
    relay.send_event(
        {
            "conversation_id": "c",
            "kind": "storage",
            "data": {"state": "failing", "reason": "<b>disk</b>"},
        }
    )
    status = page.get_by_test_id("agent-status")
    expect(status).to_have_attribute("data-state", "paused")
    expect(status).to_contain_text("paused: the host's log cannot be written (<b>disk</b>)")
    relay.send_event({"conversation_id": "c", "kind": "storage", "data": {"state": "ok"}})
    # Back to what the session is doing: its scripted conversation has a request open.
    expect(status).to_have_attribute("data-state", "waiting")
