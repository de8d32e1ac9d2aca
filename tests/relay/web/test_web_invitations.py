"""The page with a personal link, against the real stack: `tunnel relay` and `tunnel host
--invite` as subprocesses. The invited name is the one shown, whatever name the page asks for."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from .stack import Host, Process, Relay, isolated_env, running_relay
from .test_web_stack import connected, log_entries, named, prompt

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

PERSONAL = re.compile(r"(view|drive) link for (\S+): (\S+)")


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[Relay]:
    with running_relay(tmp_path / "relay") as relay:
        yield relay


@pytest.fixture
def invited_host(tmp_path: Path, relay: Relay) -> Iterator[tuple[Process, dict[str, str], Path]]:
    """`tunnel host` sharing the demo agent with alice invited to drive; her link by name."""
    home = tmp_path / "host"
    workspace = home / "workspace"
    workspace.mkdir(parents=True)
    (workspace / "README.md").write_text("# demo\n\nline three\n")
    db = home / "log.sqlite3"
    args = [
        *("host", "--relay", relay.url, "--key-file", str(home / "host_key")),
        *("--name", "hana", "--agent", "demo", "--log-db", str(db)),
        *("--workspace", str(workspace), "--no-interactive", "--invite", "alice:drive"),
    ]
    process = Process.start("host", args, isolated_env(home))
    try:
        process.wait_for(PERSONAL)
        links = {m.group(2): m.group(3) for line in process.seen if (m := PERSONAL.search(line))}
        yield process, links, db
    finally:
        process.stop()


def test_the_page_with_a_personal_link_shows_and_logs_the_invited_name(
    page: Page, invited_host: tuple[Process, dict[str, str], Path]
) -> None:
    _, links, db = invited_host
    page.goto(named(links["alice"], "mallory"))
    connected(page)
    me = page.locator("[data-testid=presence-member][data-you=true]")
    expect(me).to_have_attribute("data-name", "alice")
    expect(me).to_have_attribute("data-verified", "true")
    host = page.locator("[data-testid=presence-member][data-role=host]")
    expect(host).to_have_attribute("data-verified", "false")
    prompt(page, "Count the lines, please")
    user = page.locator("[data-testid=message][data-role=user]", has_text="Count the lines")
    expect(user).to_contain_text("alice")
    expect(user).not_to_contain_text("mallory")
    conversation = page.evaluate("window.__tunnel.session.conversationId")
    shown = Host(process=invited_host[0], view_link="", drive_link="", db=db).log_show(conversation)
    assert ("alice", "message", "Count the lines, please") in log_entries(shown)
