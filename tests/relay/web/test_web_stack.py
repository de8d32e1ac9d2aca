"""The page against the real stack: `tunnel relay` and `tunnel host` as subprocesses."""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.sync_api import Page, expect

from .stack import Host, Relay, running_relay

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

MARKUP_AGENT = Path(__file__).resolve().parent / "markup_acp_agent.py"
# The ACP agent of the agent tests: modes, models, commands, permissions, terminals on demand.
FAKE_ACP_AGENT = Path(__file__).resolve().parents[2] / "agents" / "fake_acp_agent.py"


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[Relay]:
    with running_relay(tmp_path / "relay") as relay:
        yield relay


def start_host(tmp_path: Path, relay: Relay, agent: str = "demo") -> Host:
    home = tmp_path / "host"
    home.mkdir(exist_ok=True)
    return Host.start(home, relay.url, agent=agent)


@pytest.fixture
def host(tmp_path: Path, relay: Relay) -> Iterator[Host]:
    host = start_host(tmp_path, relay)
    try:
        yield host
    finally:
        host.process.stop()


def named(link: str, name: str) -> str:
    base, fragment = link.split("#", 1)
    return f"{base}?name={name}#{fragment}"


def seqs(page: Page) -> list[int]:
    values = page.locator("[data-testid=conversation] [data-seq]").evaluate_all(
        "els => els.map(e => Number(e.dataset.seq))"
    )
    return [int(v) for v in values]


def log_entries(text: str) -> list[tuple[str, str, str]]:
    """(created_by, type, first body line) of each item `tunnel log show` printed."""
    entries = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if match := re.match(r"#\d+\s+\S+\s+(\S+)\s+(\S+)", line):
            body = lines[index + 1].strip() if index + 1 < len(lines) else ""
            entries.append((match.group(1), match.group(2), body))
    return entries


def connected(page: Page) -> None:
    expect(page.get_by_test_id("connection-status")).to_have_attribute(
        "data-state", "connected", timeout=30_000
    )
    expect(page.get_by_test_id("conversation")).to_have_attribute("data-loaded", "true")


def prompt(page: Page, text: str) -> None:
    box = page.get_by_test_id("composer-input")
    box.fill(text)
    box.press("Enter")
    expect(box).to_have_value("")


def test_driver_prompt_is_answered_and_approval_is_logged_with_the_name(
    page: Page, host: Host
) -> None:
    page.goto(named(host.drive_link, "alice"))
    connected(page)
    prompt(page, "Count the lines, please")
    user = page.locator("[data-testid=message][data-role=user]", has_text="Count the lines")
    expect(user).to_contain_text("alice")
    pending = page.locator("[data-testid=permission-request][data-state=pending]").first
    expect(pending).to_be_visible(timeout=30_000)
    request_id = pending.get_attribute("data-request-id")
    request = page.locator(f"[data-testid=permission-request][data-request-id='{request_id}']")
    request.locator("[data-testid=permission-option][data-kind=allow_once]").click()
    expect(request).to_have_attribute("data-state", "answered")
    expect(request.get_by_test_id("permission-outcome")).to_contain_text("alice answered")
    expect(page.get_by_test_id("tool-result").first).to_be_visible(timeout=30_000)
    expect(page.locator("[data-testid=message][data-role=agent]").last).to_be_visible()
    shown = seqs(page)
    assert len(shown) == len(set(shown))

    conversation = page.evaluate("window.__tunnel.session.conversationId")
    entries = log_entries(host.log_show(conversation))
    assert ("alice", "message", "Count the lines, please") in entries
    decisions = [e for e in entries if e[1] == "permission_decision"]
    assert len(decisions) == 1
    assert decisions[0][0] == "alice"
    assert request_id is not None
    assert request_id in decisions[0][2]


def test_a_long_unicode_name_is_cut_like_the_host_counts_and_bound_into_the_keys(
    page: Page, host: Host
) -> None:
    # 80 code points, 120 UTF-16 units, 180 UTF-8 bytes: only a cut at 64 code points is accepted,
    # and only the same UTF-8 bytes on both ends give the same keys.
    name = "Zoë\U0001f600" * 20
    page.goto(named(host.drive_link, quote(name)))
    connected(page)
    prompt(page, "who am I?")
    user = page.locator("[data-testid=message][data-role=user]", has_text="who am I?")
    expect(user).to_contain_text(name[:64])
    expect(user).not_to_contain_text(name[:65])


def test_viewer_page_is_read_only_and_its_forged_prompt_is_refused(page: Page, host: Host) -> None:
    page.goto(named(host.view_link, "victor"))
    connected(page)
    expect(page.get_by_test_id("viewer-notice")).to_be_visible()
    expect(page.get_by_test_id("composer")).to_have_count(0)
    page.evaluate("window.__tunnel.session.link.send({op: 'prompt', text: 'forged by viewer'})")
    toast = page.get_by_test_id("op-error")
    expect(toast).to_have_attribute("data-code", "forbidden")
    page.wait_for_timeout(500)
    expect(page.get_by_text("forged by viewer")).to_have_count(0)
    conversation = page.evaluate("window.__tunnel.session.conversationId")
    assert "forged by viewer" not in host.log_show(conversation, missing_ok=True)


def test_page_reconnects_by_itself_after_a_relay_restart(
    page: Page, tmp_path: Path, relay: Relay, host: Host
) -> None:
    page.goto(named(host.drive_link, "alice"))
    connected(page)
    prompt(page, "first question")
    expect(page.locator("[data-testid=permission-request]").first).to_be_visible(timeout=30_000)
    before = seqs(page)

    relay.process.kill()
    expect(page.get_by_test_id("connection-status")).not_to_have_attribute(
        "data-state", "connected", timeout=15_000
    )
    restarted = Relay.start(tmp_path / "relay", port=relay.port)
    try:
        connected(page)
        assert seqs(page) == before
        prompt(page, "second question")
        second = page.locator("[data-testid=message][data-role=user]", has_text="second question")
        expect(second).to_have_count(1, timeout=30_000)
        shown = seqs(page)
        assert len(shown) == len(set(shown))
        assert shown[: len(before)] == before
        assert shown == sorted(shown)
    finally:
        restarted.process.stop()


def test_agent_markup_renders_inert(page: Page, tmp_path: Path, relay: Relay) -> None:
    agent = "acp:" + shlex.join([sys.executable, str(MARKUP_AGENT)])
    host = start_host(tmp_path, relay, agent=agent)
    try:
        page.goto(named(host.drive_link, "alice"))
        connected(page)
        prompt(page, "say <img src=y onerror=window.__pwned=9> [x](javascript:window.__pwned=10)")
        reply = page.locator("[data-testid=message][data-role=agent]", has_text="END").last
        expect(reply).to_be_visible(timeout=30_000)
        page.wait_for_timeout(300)
        assert page.evaluate("window.__pwned") is None
        found = page.get_by_test_id("conversation").evaluate(
            """c => ({
              handlers: [...c.querySelectorAll("*")].flatMap(e =>
                [...e.attributes].filter(a => a.name.startsWith("on")).map(a => a.name)),
              scripts: c.querySelectorAll("script").length,
              hrefs: [...c.querySelectorAll("a")].map(a => a.getAttribute("href")),
            })"""
        )
        assert found["handlers"] == []
        assert found["scripts"] == 0
        assert not [h for h in found["hrefs"] if h and re.match(r"\s*javascript:", h, re.I)]
        reply.locator("a", has_text="click me").click()
        page.wait_for_timeout(200)
        assert page.evaluate("window.__pwned") is None
    finally:
        host.process.stop()


def test_an_acp_agents_settings_commands_permissions_and_terminals_reach_the_page(
    page: Page, tmp_path: Path, relay: Relay
) -> None:
    agent = "acp:" + shlex.join([sys.executable, str(FAKE_ACP_AGENT)])
    host = start_host(tmp_path, relay, agent=agent)
    try:
        page.goto(named(host.drive_link, "alice"))
        connected(page)
        agent_says = page.locator("[data-testid=message][data-role=agent]")

        # Modes and models: the current ones, switched by a driver, recorded with her name.
        mode = page.locator("[data-setting=mode] [data-testid=setting-select]")
        expect(mode).to_have_value("default", timeout=30_000)
        mode.select_option("plan")
        notes = page.get_by_test_id("settings-note")
        expect(notes.filter(has_text="alice switched the mode to Plan")).to_have_count(1)
        expect(mode).to_have_value("plan")
        model = page.locator("[data-setting=model] [data-testid=setting-select]")
        model.select_option("smart")
        expect(notes.filter(has_text="alice switched the model to Smart model")).to_have_count(1)
        prompt(page, "settings")
        expect(agent_says.filter(has_text="mode plan model smart")).to_have_count(1)

        # The agent's commands complete in the composer, and run as a prompt.
        box = page.get_by_test_id("composer-input")
        box.press_sequentially("/re")
        expect(page.get_by_test_id("command-option")).to_contain_text("Review a change")
        box.press("Enter")
        expect(box).to_have_value("/review ")
        box.press_sequentially("the diff")
        box.press("Enter")
        expect(agent_says.filter(has_text="echo: /review the diff")).to_have_count(1)

        # A permission request arrives whole; the option clicked is the one the agent gets.
        prompt(page, "ask")
        card = page.locator("[data-testid=permission-request][data-state=pending]")
        expect(card).to_be_visible(timeout=30_000)
        expect(card.get_by_test_id("tool-kind")).to_have_text("edit")
        expect(card.get_by_test_id("tool-locations")).to_contain_text("notes.txt:1")
        expect(card.get_by_test_id("tool-input")).to_contain_text('"old_string": "milk"')
        expect(card.get_by_test_id("diff").locator(".diff-add")).to_have_text(["+ bread"])
        options = card.get_by_test_id("permission-option")
        kinds = options.evaluate_all("bs => bs.map(b => b.dataset.kind)")
        assert kinds == ["allow_always", "allow_always", "allow_once", "reject_once"]
        card.locator("[data-option-id=default]").click()
        expect(page.get_by_test_id("permission-decision")).to_contain_text(
            "alice answered: Yes, and manually approve edits"
        )
        expect(agent_says.filter(has_text="chose default")).to_have_count(1)

        # The same tool call id in two turns: two cards.
        prompt(page, "tool")
        calls = page.locator("[data-testid=tool-call][data-tool-call-id=call_1]")
        expect(calls).to_have_count(1, timeout=30_000)
        prompt(page, "tool")
        expect(calls).to_have_count(2, timeout=30_000)

        prompt(page, "weird")
        expect(page.get_by_test_id("unsupported-update")).to_contain_text(
            "unsupported update: future_thing", timeout=30_000
        )

        # A terminal the agent runs through the host shows in its tool call.
        prompt(page, "term")
        terminal = page.locator(
            "[data-testid=tool-call][data-tool-call-id=call_term] [data-testid=tool-terminal]"
        )
        expect(terminal).to_have_attribute("data-state", "exited", timeout=30_000)
        expect(terminal.get_by_test_id("tool-terminal-state")).to_have_text("exit code 3")
        expect(terminal.get_by_test_id("tool-terminal-output")).to_contain_text("out")
        expect(terminal.get_by_test_id("tool-terminal-output")).to_contain_text("err")
        shown = seqs(page)
        assert len(shown) == len(set(shown))
    finally:
        host.process.stop()


def test_terminal_agent_runs_in_the_page(page: Page, tmp_path: Path, relay: Relay) -> None:
    agent = "pty:" + shlex.join([sys.executable, "-i", "-q"])
    host = start_host(tmp_path, relay, agent=agent)
    try:
        page.goto(named(host.drive_link, "alice"))
        connected(page)
        terminal = page.get_by_test_id("terminal")
        expect(terminal.locator(".xterm-rows")).to_contain_text(">>>", timeout=30_000)
        terminal.click()
        page.keyboard.type("print(6 * 7)")
        page.keyboard.press("Enter")
        expect(terminal.locator(".xterm-rows")).to_contain_text("42", timeout=30_000)
    finally:
        host.process.stop()
