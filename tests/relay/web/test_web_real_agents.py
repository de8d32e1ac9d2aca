"""The page with the real agents: Claude Code (claude-agent-acp) and Gemini CLI shared by
`tunnel host` through a real `tunnel relay`, driven from chromium.

Each agent runs as in tests/agents/real/ (docs/agents.md, "Tested with"): pinned from npm, with a
HOME of its own and a fake model on loopback (tests/agents/real/model_server.py) that answers
each prompt from a script picked by a keyword. What these tests add is the page: the permission
card shows the agent's own options and diff and each button does exactly its option, the
settings bar switches the agent's mode for a driver and is read-only for a viewer, and `/` lists
the agent's commands (docs/web.md, "What the page shows").
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from tests.agents.real.conftest import (
    CLAUDE,
    GEMINI,
    Agent,
    agents_bin,
    base_environment,
)
from tests.agents.real.model_server import ModelServer, Text, ToolCall, reply

from .conftest import PageLog
from .stack import Host, Relay
from .test_web_stack import connected, named, prompt

pytestmark = [pytest.mark.browser, pytest.mark.agents_real, pytest.mark.timeout(180)]

AGENT_WAIT = 60_000
"""Milliseconds the page may wait for a real agent: its start, a turn of model rounds."""
HOST_WAIT = 15_000
"""Milliseconds a page may wait for the host alone: a change recorded, a refusal, a broadcast."""

NOTES = "remember the milk\n"


# -- the agents, as the page meets them -------------------------------------------------------


def claude_edit(model: ModelServer, key: str, path: Path, old: str, new: str) -> None:
    """A turn that reads `path`, then edits it (Claude Code edits only files it has read)."""
    model.script(
        key,
        reply(ToolCall("Read", {"file_path": str(path)})),
        reply(ToolCall("Edit", {"file_path": str(path), "old_string": old, "new_string": new})),
        reply(Text(f"{key} done.")),
    )


def gemini_edit(model: ModelServer, key: str, path: Path, old: str, new: str) -> None:
    """A turn that edits `path` with Gemini CLI's `replace` tool."""
    args = {"file_path": str(path), "instruction": key, "old_string": old, "new_string": new}
    model.script(key, reply(ToolCall("replace", args)), reply(Text(f"{key} done.")))


@dataclass(frozen=True)
class RealAgent:
    """One real agent and what it offers for an edit of notes.txt (milk to bread)."""

    agent: Agent
    options: tuple[tuple[str, str], ...]
    """Its permission options for an edit, (option_id, kind), in its order."""
    edit: Callable[[ModelServer, str, Path, str, str], None]
    """Script a turn `key` that edits a file: (model, key, path, old, new)."""
    diff: tuple[str, str]
    """The lines the page shows removed and added for milk to bread."""

    def __str__(self) -> str:
        return self.agent.name


CLAUDE_AGENT = RealAgent(
    agent=CLAUDE,
    options=(
        ("allow-once", "allow_once"),
        ("allow-with-updates", "allow_always"),
        ("reject", "reject_once"),
    ),
    edit=claude_edit,
    # Claude's diff is of the replaced string.
    diff=("- milk", "+ bread"),
)
GEMINI_AGENT = RealAgent(
    agent=GEMINI,
    options=(
        ("proceed_always", "allow_always"),
        ("proceed_once", "allow_once"),
        ("cancel", "reject_once"),
    ),
    edit=gemini_edit,
    # Gemini's diff is of the whole file, which it reads through the host.
    diff=("- remember the milk", "+ remember the bread"),
)
AGENTS = [CLAUDE_AGENT, GEMINI_AGENT]
OPTION_CASES = [(a, kind) for a in AGENTS for _, kind in a.options]


# -- the stack ---------------------------------------------------------------------------------


@pytest.fixture
def model() -> Iterator[ModelServer]:
    server = ModelServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    (path / "notes.txt").write_text(NOTES)
    return path


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[Relay]:
    relay = Relay.start(tmp_path / "relay")
    try:
        yield relay
    finally:
        relay.process.stop()


@pytest.fixture
def share(
    model: ModelServer, relay: Relay, workspace: Path, tmp_path: Path
) -> Iterator[Callable[..., Host]]:
    """`share(agent, *options)` starts `tunnel host --agent acp:<bin>/... *options` on the
    workspace with nothing of the user's environment (tests/agents/real/conftest.py); it is
    stopped after the test, and what it logged and what the model was asked is printed (shown
    when the test fails)."""
    bin_dir = agents_bin()
    hosts: list[Host] = []

    def start(real: RealAgent, *options: str) -> Host:
        agent_home = tmp_path / "home"
        agent_home.mkdir()
        env = base_environment(model.url, agent_home)
        env.update(real.agent.environment(model.url, agent_home, workspace))
        host_dir = tmp_path / "host"
        host_dir.mkdir()
        host = Host.start(
            host_dir,
            relay.url,
            agent=real.agent.spec(bin_dir),
            env=env,
            workspace=workspace,
            timeout=AGENT_WAIT / 1000,
            options=options,
        )
        hosts.append(host)
        return host

    try:
        yield start
    finally:
        for host in hosts:
            host.process.stop()
            print("host stderr (last lines):", *host.process.stderr[-60:], sep="\n")
        print("model requests:", [(r.key, r.round, r.path) for r in model.requests])
    # SIGTERM is an orderly stop: the host ends its agent and exits with 0.
    assert [host.process.popen.returncode for host in hosts] == [0] * len(hosts)


@contextlib.contextmanager
def other_page(browser: Browser, page_log: PageLog) -> Iterator[Page]:
    """A second person's page, in a browser context of its own."""
    context = browser.new_context(viewport={"width": 1200, "height": 860})
    try:
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.on("console", page_log.on_console)
        page.on("pageerror", page_log.on_page_error)
        yield page
    finally:
        context.close()


# -- reading the page and the log -------------------------------------------------------------


def conversation_of(page: Page) -> str:
    return str(page.evaluate("window.__tunnel.session.conversationId"))


def stored(host: Host, page: Page, kind: str) -> list[dict[str, Any]]:
    """The items of type `kind` the host stored for the page's conversation."""
    return [i for i in host.log_items(conversation_of(page)) if i["type"] == kind]


def settings_changes(host: Host, page: Page) -> list[tuple[dict[str, Any], str]]:
    """(change, created_by) of each stored `settings` event that records a change."""
    return [
        (i["data"]["change"], i["created_by"])
        for i in stored(host, page, "session_event")
        if i["data"].get("what") == "settings" and i["data"].get("change")
    ]


def agent_said(page: Page, text: str) -> None:
    """Wait until an agent message containing `text` is shown."""
    said = page.locator("[data-testid=message][data-role=agent]", has_text=text)
    expect(said.first).to_be_visible(timeout=AGENT_WAIT)


def pending_card(page: Page, count: int) -> Locator:
    """Wait for the `count`th permission card, pending; return it."""
    cards = page.get_by_test_id("permission-request")
    expect(cards).to_have_count(count, timeout=AGENT_WAIT)
    card = cards.nth(count - 1)
    expect(card).to_have_attribute("data-state", "pending")
    return card


def assert_nobody_answered(page: Page, host: Host, card: Locator) -> None:
    """No option of `card` is chosen, sent, focused or recorded: only a click may answer."""
    request_id = card.get_attribute("data-request-id")
    expect(card).to_have_attribute("data-state", "pending")
    expect(card.locator(".option.chosen, .option.sent")).to_have_count(0)
    for button in card.get_by_test_id("permission-option").all():
        expect(button).to_be_enabled()
    focused = page.evaluate("document.activeElement?.dataset?.testid ?? null")
    assert focused != "permission-option"
    decision = page.locator(f"[data-testid=permission-decision][data-request-id='{request_id}']")
    expect(decision).to_have_count(0)
    answered = [d["data"]["request_id"] for d in stored(host, page, "permission_decision")]
    assert request_id not in answered


def choose(page: Page, card: Locator, option_id: str, kind: str) -> None:
    """Click the option `option_id` and wait until the host records it as alice's."""
    request_id = card.get_attribute("data-request-id")
    card.locator(f"[data-testid=permission-option][data-option-id='{option_id}']").click()
    line = page.locator(f"[data-testid=permission-decision][data-request-id='{request_id}']")
    expect(line).to_have_attribute("data-option-id", option_id, timeout=AGENT_WAIT)
    expect(line).to_have_attribute("data-option-kind", kind)
    expect(line).to_have_attribute("data-by", "alice")
    expect(card).to_have_attribute("data-state", "answered", timeout=HOST_WAIT)
    expect(card.locator(".option.chosen")).to_have_attribute("data-option-id", option_id)


# -- permissions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("real", "kind"), OPTION_CASES, ids=[f"{a}-{kind}" for a, kind in OPTION_CASES]
)
def test_each_permission_option_clicked_in_the_page_does_exactly_that_option(
    page: Page,
    page_log: PageLog,
    share: Callable[[RealAgent], Host],
    model: ModelServer,
    workspace: Path,
    real: RealAgent,
    kind: str,
) -> None:
    notes = workspace / "notes.txt"
    real.edit(model, "EDIT-1", notes, "milk", "bread")
    real.edit(model, "EDIT-2", notes, "remember", "forget")
    option_id = next(o for o, k in real.options if k == kind)
    host = share(real)
    page.goto(named(host.drive_link, "alice"))
    connected(page)

    prompt(page, "EDIT-1")
    card = pending_card(page, 1)
    # The agent's own options, in its order, named as it names them, and the diff it asks for.
    request = stored(host, page, "permission_request")[0]["data"]
    buttons = card.get_by_test_id("permission-option")
    expect(buttons).to_have_text([o["name"] for o in request["options"]])
    shown = buttons.evaluate_all("bs => bs.map(b => [b.dataset.optionId, b.dataset.kind])")
    assert [tuple(o) for o in shown] == list(real.options)
    assert [(o["option_id"], o["kind"]) for o in request["options"]] == list(real.options)
    expect(card.get_by_test_id("tool-kind")).to_have_text("edit")
    diff = card.get_by_test_id("diff")
    expect(diff.locator("figcaption")).to_have_text(str(notes))
    expect(diff.locator(".diff-del")).to_have_text([real.diff[0]])
    expect(diff.locator(".diff-add")).to_have_text([real.diff[1]])
    # Nothing answered it but the click below; the agent waits for it.
    assert_nobody_answered(page, host, card)
    assert notes.read_text() == NOTES

    choose(page, card, option_id, kind)
    agent_said(page, "EDIT-1 done.")
    allowed = kind.startswith("allow")
    assert notes.read_text() == ("remember the bread\n" if allowed else NOTES)
    assert model.tool_results("EDIT-1")[-1].is_error is not allowed

    prompt(page, "EDIT-2")
    if kind == "allow_always":
        # Allowed always: the next edit goes through and nobody is asked.
        agent_said(page, "EDIT-2 done.")
        expect(page.get_by_test_id("permission-request")).to_have_count(1)
        assert notes.read_text() == "forget the bread\n"
    else:
        # Once (allowed or rejected): the next edit of the same file asks again.
        second = pending_card(page, 2)
        assert_nobody_answered(page, host, second)
        assert notes.read_text() == ("remember the bread\n" if allowed else NOTES)
        choose(page, second, option_id, kind)
        agent_said(page, "EDIT-2 done.")
        assert notes.read_text() == ("forget the bread\n" if allowed else NOTES)

    # The host recorded each answer once, as alice's, with exactly the option clicked.
    requests = stored(host, page, "permission_request")
    decisions = stored(host, page, "permission_decision")
    assert [(d["data"]["option_id"], d["created_by"]) for d in decisions] == [
        (option_id, "alice")
    ] * len(requests)
    assert [d["data"]["request_id"] for d in decisions] == [
        r["data"]["request_id"] for r in requests
    ]
    assert page_log.errors == []


# -- the mode ----------------------------------------------------------------------------------


def switch_mode_from_the_bar(
    page: Page,
    viewer: Page,
    host: Host,
    mode_id: str,
    mode_name: str,
    default_name: str = "Default",
) -> None:
    """Alice switches the mode in her bar; the host records it as hers, both pages show it, and
    the viewer's bar is text only and her forged switch is refused. The agent starts in its
    mode `default`, which it names `default_name`."""
    select = page.locator("[data-setting=mode] [data-testid=setting-select]")
    expect(select).to_have_value("default", timeout=AGENT_WAIT)
    viewer_mode = viewer.locator("[data-setting=mode] [data-testid=setting-value]")
    expect(viewer_mode).to_have_text(default_name, timeout=AGENT_WAIT)
    expect(viewer.locator("[data-testid=agent-settings] select")).to_have_count(0)
    expect(viewer.locator("[data-testid=agent-settings] input")).to_have_count(0)

    select.select_option(mode_id)
    note = page.get_by_test_id("settings-note").filter(
        has_text=f"alice switched the mode to {mode_name}"
    )
    expect(note).to_have_count(1, timeout=AGENT_WAIT)
    expect(note).to_have_attribute("data-changed-by", "alice")
    expect(select).to_be_enabled(timeout=HOST_WAIT)
    expect(select).to_have_value(mode_id)
    assert settings_changes(host, page) == [({"mode": mode_id}, "alice")]
    expect(viewer_mode).to_have_text(mode_name, timeout=HOST_WAIT)
    expect(viewer.locator("[data-testid=agent-settings] select")).to_have_count(0)

    # A viewer's switch, sent past the read-only bar, is refused and changes nothing.
    viewer.evaluate("window.__tunnel.session.link.send({op: 'set_mode', mode_id: 'default'})")
    refused = viewer.get_by_test_id("op-error")
    expect(refused).to_have_attribute("data-code", "forbidden", timeout=HOST_WAIT)
    expect(viewer_mode).to_have_text(mode_name)
    expect(select).to_have_value(mode_id)
    assert settings_changes(host, page) == [({"mode": mode_id}, "alice")]


def test_claude_plan_mode_switched_in_the_page_reaches_the_model_and_a_viewer_cannot_switch(
    page: Page,
    browser: Browser,
    page_log: PageLog,
    share: Callable[[RealAgent], Host],
    model: ModelServer,
) -> None:
    model.script("BEFORE-PLAN", reply(Text("BEFORE-PLAN done.")))
    model.script("IN-PLAN", reply(Text("IN-PLAN done.")))
    host = share(CLAUDE_AGENT)
    with other_page(browser, page_log) as viewer:
        page.goto(named(host.drive_link, "alice"))
        connected(page)
        viewer.goto(named(host.view_link, "victor"))
        connected(viewer)
        prompt(page, "BEFORE-PLAN")
        agent_said(page, "BEFORE-PLAN done.")
        assert "Plan mode is active" not in json.dumps(model.calls("BEFORE-PLAN")[-1].body)

        switch_mode_from_the_bar(page, viewer, host, "plan", "Plan", default_name="Manual")

        # Claude Code tells the model of plan mode in the next turn's request.
        prompt(page, "IN-PLAN")
        agent_said(page, "IN-PLAN done.")
        assert "Plan mode is active" in json.dumps(model.calls("IN-PLAN")[-1].body)
        assert page_log.errors == []


def test_gemini_auto_edit_switched_in_the_page_applies_the_next_edit_unasked(
    page: Page,
    browser: Browser,
    page_log: PageLog,
    share: Callable[[RealAgent], Host],
    model: ModelServer,
    workspace: Path,
) -> None:
    notes = workspace / "notes.txt"
    gemini_edit(model, "EDIT-AUTO", notes, "milk", "bread")
    host = share(GEMINI_AGENT)
    with other_page(browser, page_log) as viewer:
        page.goto(named(host.drive_link, "alice"))
        connected(page)
        viewer.goto(named(host.view_link, "victor"))
        connected(viewer)

        switch_mode_from_the_bar(page, viewer, host, "autoEdit", "Auto Edit")

        # Auto Edit: Gemini applies the edit without asking anyone.
        prompt(page, "EDIT-AUTO")
        agent_said(page, "EDIT-AUTO done.")
        expect(page.get_by_test_id("permission-request")).to_have_count(0)
        assert stored(host, page, "permission_request") == []
        assert notes.read_text() == "remember the bread\n"
        assert page_log.errors == []


def test_claudes_approve_plan_card_shows_the_plan_its_request_leaves_out(
    page: Page,
    page_log: PageLog,
    share: Callable[..., Host],
    model: ModelServer,
    workspace: Path,
) -> None:
    plan = "1. Replace milk with bread in notes.txt\n2. Tell the user it is done"
    model.script(
        "PLAN-CARD",
        reply(ToolCall("ExitPlanMode", {"plan": plan})),
        reply(Text("PLAN-CARD done.")),
    )
    host = share(CLAUDE_AGENT, "--agent-mode", "plan")
    page.goto(named(host.drive_link, "alice"))
    connected(page)
    expect(page.get_by_test_id("agent-approval")).to_have_text(
        "The agent asks before edits and commands", timeout=AGENT_WAIT
    )
    prompt(page, "PLAN-CARD")
    card = pending_card(page, 1)
    # claude-agent-acp 0.101.0 asks with `content: []` and `rawInput: {}`: the plan is the one
    # its tool call carried, and the card keeps it.
    [request] = stored(host, page, "permission_request")
    call_id = request["data"]["tool_call"]["tool_call_id"]
    items = host.log_items(conversation_of(page))
    calls = [i for i in items if i["data"].get("tool_call_id") == call_id]
    assert plan.splitlines()[0] in json.dumps(calls), json.dumps(calls, indent=1)
    expect(card).to_contain_text("Replace milk with bread in notes.txt")
    expect(card).to_contain_text("Tell the user it is done")
    choose(page, card, "exit-plan-default", "allow_once")
    agent_said(page, "PLAN-CARD done.")
    assert (workspace / "notes.txt").read_text() == NOTES
    assert page_log.errors == []


# -- the agent's commands ----------------------------------------------------------------------


def listed_commands(page: Page, host: Host) -> list[str]:
    """Type `/` in the composer: the commands listed are exactly the agent's, in its order."""
    box = page.get_by_test_id("composer-input")
    box.press_sequentially("/")
    options = page.get_by_test_id("command-option")
    expect(options.first).to_be_visible()
    commands = [i for i in stored(host, page, "session_event") if i["data"]["what"] == "commands"]
    names = [c["name"] for c in commands[-1]["data"]["commands"]]
    expect(options).to_have_count(len(names))
    assert options.evaluate_all("os => os.map(o => o.dataset.name)") == names
    return names


def test_slash_lists_claudes_commands_and_its_own_command_runs(
    page: Page,
    page_log: PageLog,
    share: Callable[[RealAgent], Host],
    model: ModelServer,
    workspace: Path,
) -> None:
    commands = workspace / ".claude" / "commands"
    commands.mkdir(parents=True)
    (commands / "shout.md").write_text(
        "---\ndescription: Say it loudly\n---\nSHOUT-MARKER: say this loudly: $ARGUMENTS\n"
    )
    model.script("SHOUT-MARKER", reply(Text("LOUD AND CLEAR.")))
    host = share(CLAUDE_AGENT)
    page.goto(named(host.drive_link, "alice"))
    connected(page)
    expect(page.get_by_test_id("commands-note")).to_be_visible(timeout=AGENT_WAIT)

    assert "shout" in listed_commands(page, host)
    box = page.get_by_test_id("composer-input")
    box.press_sequentially("sho")
    shout = page.locator("[data-testid=command-option][data-name=shout]")
    expect(shout).to_contain_text("Say it loudly")
    shout.click()
    expect(page.get_by_test_id("command-list")).to_be_hidden()
    box.press_sequentially(" hello there")
    box.press("Enter")
    agent_said(page, "LOUD AND CLEAR.")
    # Sent as alice's prompt; Claude Code expanded its own command before asking the model.
    user = page.locator("[data-testid=message][data-role=user]", has_text="/shout hello there")
    expect(user).to_contain_text("alice")
    assert model.saw_text("SHOUT-MARKER: say this loudly: hello there")
    assert page_log.errors == []


def test_slash_lists_geminis_commands_and_its_own_command_runs(
    page: Page,
    page_log: PageLog,
    share: Callable[[RealAgent], Host],
    model: ModelServer,
) -> None:
    host = share(GEMINI_AGENT)
    page.goto(named(host.drive_link, "alice"))
    connected(page)
    expect(page.get_by_test_id("commands-note")).to_be_visible(timeout=AGENT_WAIT)

    assert {"about", "memory", "init"} <= set(listed_commands(page, host))
    box = page.get_by_test_id("composer-input")
    box.press_sequentially("abo")
    about = page.locator("[data-testid=command-option][data-name=about]")
    expect(about).to_have_attribute("aria-selected", "true")
    box.press("Enter")
    expect(box).to_have_value("/about")
    box.press("Enter")
    # Gemini CLI answers /about itself, without the model.
    agent_said(page, "Version: 0.61.0")
    assert not any("GenerateContent" in r.path for r in model.requests)
    assert page_log.errors == []
