"""A page that joins with the end of a long conversation still shows the session's state: the
settings bar, the agent's slash commands, the plan, an open permission request, from the first
snapshot page's `context`; "Load earlier" then shows those items once, never twice. And presence
deltas become the list the page shows, "you" marked by the host's member id.

The scripted tests run session.js and view.js in chromium with a scripted link; the last one runs
`tunnel relay` and `tunnel host` as subprocesses, the host's log filled beforehand."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tunnel.app.requests import DEFAULT_HISTORY_ITEMS
from tunnel.log import NewItem

from .conftest import BLANK_PATH
from .fake_relay import wire_item
from .stack import Host, earlier_answers, running_host, running_relay

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

# Runs in the page: a driver's session and view over a scripted link. `steps` are the host's
# messages, or "load" (a click on "Load earlier"); after each, what the page shows of the state.
SCRIPTED = """
async (steps) => {
  const s = await import("/static/session.js");
  const { View } = await import("/static/view.js");
  const root = document.createElement("main");
  document.body.replaceChildren(root);
  const view = new View(root, { role: "drive", name: "ana", onPrompt: () => true,
    onCancel() {}, onPermission: () => true, onSetting: () => true, onRetry() {},
    onRename() {}, onTerminal() {} });
  let link;
  const sent = [];
  const linkFactory = (options) => {
    link = options;
    return { ended: false, start: async () => {}, close() {},
      send(m) { sent.push(m); return true; } };
  };
  const session = new s.Session({ location, hostId: "a".repeat(26), role: "drive",
    secret: new Uint8Array(32), name: "ana", view, linkFactory });
  session.start();
  const all = (selector) => [...root.querySelectorAll(selector)];
  const shown = [];
  for (const step of steps) {
    if (step === "load") {
      root.querySelector("[data-testid=load-earlier]").click();
      continue;
    }
    link.onMessage(step);
    const mode = root.querySelector("[data-setting=mode] [data-testid=setting-select]");
    shown.push({
      seqs: all("[data-testid=conversation] [data-seq]").map((e) => Number(e.dataset.seq)),
      mode: mode ? mode.value : null,
      settingsShown: !root.querySelector("[data-testid=agent-settings]").hidden,
      commands: view.completion.commands.map((c) => c.name),
      plan: all("[data-testid=live-plan] .plan-entry").map((e) => e.textContent),
      settingsNotes: all("[data-testid=settings-note]").length,
      commandsNotes: all("[data-testid=commands-note]").length,
      requests: all("[data-testid=permission-request]").map((e) => [e.dataset.requestId,
        e.dataset.state, e.closest("[data-testid=tool-call]")?.dataset.toolCallId ?? null]),
      status: root.querySelector("[data-testid=agent-status]").dataset.state,
      presence: all("[data-testid=presence-member]").map((e) => [e.dataset.name,
        e.dataset.you === "true"]),
      gone: all("[data-testid=presence-gone]").map((e) => e.dataset.name),
    });
  }
  return { shown, sent: sent.filter((m) => m.op === "history").map((m) => m.before) };
}
"""

READY = {
    "op": "ready",
    "conversation_id": "main",
    "role": "drive",
    "name": "ana",
    "agent": {"name": "acp", "kind": "chat"},
}
HEAD = 399
FIRST = HEAD + 1 - DEFAULT_HISTORY_ITEMS


def settings(seq: int, mode: str) -> dict[str, Any]:
    available = [{"id": m, "name": m.title(), "description": ""} for m in ("default", "plan")]
    data = {
        "what": "settings",
        "modes": {"current": mode, "available": available},
        "models": None,
        "config_options": None,
    }
    return wire_item(seq, "session_event", data)


def conversation() -> dict[int, dict[str, Any]]:
    """400 items; the state is in the first 50."""
    items = {
        n: wire_item(n, "message", {"role": "agent", "text": f"answer {n}"}) for n in range(400)
    }
    items[5] = settings(5, "default")
    items[10] = settings(10, "plan")
    items[20] = wire_item(
        20,
        "session_event",
        {"what": "commands", "commands": [{"name": "review", "description": "Review a change"}]},
    )
    items[30] = wire_item(
        30, "plan", {"turn": 25, "entries": [{"content": "read", "status": "pending"}]}
    )
    items[25] = wire_item(25, "message", {"role": "user", "text": "go"}, created_by="ana")
    items[40] = wire_item(
        40,
        "tool_call",
        {"turn": 25, "tool_call_id": "call_1", "title": "edit", "status": "pending"},
    )
    items[41] = wire_item(
        41,
        "permission_request",
        {
            "turn": 25,
            "request_id": "perm_1",
            "title": "Edit notes.txt?",
            "tool_call_id": "call_1",
            "options": [{"option_id": "yes", "name": "Yes", "kind": "allow_once"}],
            "tool_call": {"tool_call_id": "call_1", "title": "edit"},
        },
        status="action_required",
    )
    return items


def run(page: Page, static_server: str, steps: list[Any]) -> dict[str, Any]:
    page.goto(static_server + BLANK_PATH)
    result: dict[str, Any] = page.evaluate(SCRIPTED, steps)
    return result


def test_the_first_pages_context_is_state_and_load_earlier_shows_it_once(
    page: Page, static_server: str
) -> None:
    items = conversation()
    context = [items[seq] for seq in (10, 20, 30, 40, 41)]
    steps = [
        READY,
        {
            "op": "snapshot",
            "items": [items[n] for n in range(FIRST, HEAD + 1)],
            "last_seq": HEAD,
            "more": False,
            "reset": False,
            "first_seq": FIRST,
            "earlier": True,
            "context": context,
        },
        "load",
        {
            "op": "history",
            "items": [items[n] for n in range(100, FIRST)],
            "before": FIRST,
            "more": True,
        },
        "load",
        {"op": "history", "items": [items[n] for n in range(100)], "before": 100, "more": False},
    ]
    result = run(page, static_server, steps)
    joined, later, everything = result["shown"][1], result["shown"][2], result["shown"][3]
    assert result["sent"] == [FIRST, 100]

    # Joined: the settings, the commands and the plan apply without a line; the open request
    # shows in its tool call's card, to be answered.
    assert joined["settingsShown"] is True
    assert joined["mode"] == "plan"
    assert joined["commands"] == ["review"]
    assert joined["plan"] == ["read"]
    assert (joined["settingsNotes"], joined["commandsNotes"]) == (0, 0)
    assert joined["requests"] == [["perm_1", "pending", "call_1"]]
    assert joined["status"] == "waiting"
    assert joined["seqs"] == [40, 41, *range(FIRST, HEAD + 1)]

    # A history page that does not reach them: the view is rebuilt, and the state stays.
    assert later["seqs"] == [40, 41, *range(100, HEAD + 1)]
    assert (later["mode"], later["commands"], later["plan"]) == ("plan", ["review"], ["read"])
    assert later["requests"] == [["perm_1", "pending", "call_1"]]

    # The page that reaches them: each shown once, as the item it is, at its place.
    assert everything["seqs"] == list(range(HEAD + 1))
    assert (everything["settingsNotes"], everything["commandsNotes"]) == (2, 1)
    assert everything["mode"] == "plan"
    assert everything["commands"] == ["review"]
    assert everything["requests"] == [["perm_1", "pending", "call_1"]]


def test_a_context_item_the_snapshot_holds_is_not_applied_twice(
    page: Page, static_server: str
) -> None:
    # A context from a confused host that overlaps the snapshot: what the snapshot holds wins.
    items = conversation()
    steps = [
        READY,
        {
            "op": "snapshot",
            "items": [items[n] for n in range(40, 50)],
            "last_seq": 49,
            "more": False,
            "first_seq": 40,
            "earlier": True,
            "context": [items[41], items[10], items[10], items[20], "junk", {"seq": "x"}],
        },
    ]
    shown = run(page, static_server, steps)["shown"][1]
    assert shown["seqs"] == list(range(40, 50))
    assert shown["requests"] == [["perm_1", "pending", "call_1"]]
    assert (shown["mode"], shown["commands"]) == ("plan", ["review"])


def test_presence_deltas_make_the_list_and_the_hosts_id_marks_you(
    page: Page, static_server: str
) -> None:
    steps = [
        READY,
        {
            "op": "presence",
            "members": [
                {"id": 0, "name": "hana", "role": "host"},
                {"id": 1, "name": "ana", "role": "drive"},
                {"id": 3, "name": "ana", "role": "drive"},
            ],
            "count": 3,
            "you": 3,
        },
        {
            "op": "presence",
            "joined": [{"id": 4, "name": "bob", "role": "view"}],
            "left": [0],
            "count": 3,
        },
        {"op": "presence", "joined": [], "left": [1, 99], "count": 2},
        # This page attached beyond those the host lists: another "ana" is not this one.
        {
            "op": "presence",
            "members": [{"id": 1, "name": "ana", "role": "drive"}],
            "count": 60,
            "you": 70,
        },
    ]
    first, second, third, unlisted = run(page, static_server, steps)["shown"][1:]
    # Two tabs under one name: the host's id says which is this one.
    assert first["presence"] == [["hana", False], ["ana", False], ["ana", True]]
    assert second["presence"] == [["ana", False], ["ana", True], ["bob", False]]
    assert second["gone"] == ["hana"]
    assert third["presence"] == [["ana", True], ["bob", False]]
    assert unlisted["presence"] == [["ana", False]]


# ---- end to end -------------------------------------------------------------------------------

FILLER = 500


def _log() -> list[NewItem]:
    settings_data = settings(0, "plan")["data"]
    commands_data = {
        "what": "commands",
        "commands": [{"name": "review", "description": "Review a change", "hint": "what"}],
    }
    return [
        NewItem(type="session_event", data=settings_data, created_by="agent"),
        NewItem(type="session_event", data=commands_data, created_by="agent"),
        *earlier_answers(FILLER),
    ]


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    with (
        running_relay(tmp_path / "relay") as relay,
        running_host(tmp_path / "host", relay.url, log=_log()) as host,
    ):
        yield host


def test_a_page_joining_a_long_log_has_the_settings_bar_and_the_commands(
    page: Page, host: Host
) -> None:
    base, fragment = host.drive_link.split("#", 1)
    page.goto(f"{base}?name=ana#{fragment}")
    expect(page.get_by_test_id("connection-status")).to_have_attribute(
        "data-state", "connected", timeout=30_000
    )
    conversation_box = page.get_by_test_id("conversation")
    expect(conversation_box).to_have_attribute("data-loaded", "true")
    # The settings and the commands are 500 items before the end shown: not in the
    # conversation, yet the settings bar and the completion have them.
    expect(page.locator("[data-setting=mode] [data-testid=setting-select]")).to_have_value("plan")
    expect(conversation_box.get_by_test_id("settings-note")).to_have_count(0)
    box = page.get_by_test_id("composer-input")
    box.press_sequentially("/re")
    expect(page.get_by_test_id("command-option")).to_contain_text("Review a change")
    box.press("Escape")
    box.fill("")

    # Loading everything shows each of them once, at the start.
    button = page.get_by_test_id("load-earlier")
    while button.is_visible():
        oldest = page.locator("[data-testid=conversation] [data-seq]").first
        before = oldest.get_attribute("data-seq")
        button.click()
        expect(oldest).not_to_have_attribute("data-seq", before or "", timeout=30_000)
    expect(conversation_box.get_by_test_id("settings-note")).to_have_count(1)
    expect(conversation_box.get_by_test_id("commands-note")).to_have_count(1)
    seqs = page.locator("[data-testid=conversation] [data-seq]").evaluate_all(
        "els => els.map(e => Number(e.dataset.seq))"
    )
    assert seqs == list(range(len(seqs)))
    expect(page.locator("[data-setting=mode] [data-testid=setting-select]")).to_have_value("plan")
