"""The page with what real ACP agents send, against a scripted relay and host: whole permission
requests and their answers, modes, models and config options, the agent's slash commands, tool
calls whose ids repeat across turns, unsupported updates and the terminals of tool calls; and
hostile markup in every one of those fields, which must stay text."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from .conftest import PageLog
from .fake_relay import CONVERSATION, FakeRelay, Scenario, fake_relay, wire_item
from .test_web_page import csp_violations, named, open_page, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

OPTIONS = [
    {
        "option_id": "bypassPermissions",
        "name": "Yes, and bypass permissions",
        "kind": "allow_always",
    },
    {"option_id": "default", "name": "Yes, and manually approve edits", "kind": "allow_once"},
    {"option_id": "plan", "name": "No, keep planning", "kind": "reject_once"},
    {"option_id": "never", "name": "No, and never ask again", "kind": "reject_always"},
]

DIFF = {
    "type": "diff",
    "path": "/work/notes.txt",
    "old_text": "milk\neggs\n",
    "new_text": "bread\neggs\n",
}

TOOL_CALL = {
    "tool_call_id": "call_ask",
    "title": "Edit notes.txt",
    "kind": "edit",
    "status": "pending",
    "locations": [{"path": "/work/notes.txt", "line": 1}],
    "input": {"file_path": "/work/notes.txt", "old_string": "milk", "new_string": "bread"},
    "content": [DIFF, {"type": "text", "text": "Replace milk with bread"}],
    "truncated": True,
}

SETTINGS = {
    "what": "settings",
    "modes": {
        "current": "default",
        "available": [
            {"id": "default", "name": "Default", "description": "asks before edits"},
            {"id": "plan", "name": "Plan", "description": "plans only"},
        ],
    },
    "models": {
        "current": "fast",
        "available": [{"id": "fast", "name": "Fast model"}, {"id": "smart", "name": "Smart model"}],
    },
    "config_options": [
        {"id": "thinking", "name": "Thinking", "type": "boolean", "current_value": False},
        {
            "id": "effort",
            "name": "Effort",
            "type": "select",
            "current_value": "low",
            "options": [
                {"id": "low", "name": "Low", "group": "Fast"},
                {"id": "high", "name": "High", "group": "Thorough"},
            ],
        },
        # Offered as `models` already: not shown a second time.
        {
            "id": "model",
            "name": "Model option",
            "category": "model",
            "type": "select",
            "current_value": "fast",
            "options": [{"id": "fast", "name": "Fast model"}, {"id": "smart", "name": "Smart"}],
        },
    ],
}

COMMANDS = {
    "what": "commands",
    "commands": [
        {"name": "compact", "description": "Compact the context"},
        {"name": "review", "description": "Review a change", "hint": "what to review"},
        {"name": "init", "description": "Write the project notes"},
    ],
}


def permission_item(seq: int, *, options: list[dict[str, Any]] = OPTIONS) -> dict[str, Any]:
    return wire_item(
        seq,
        "permission_request",
        {
            "request_id": "perm_1",
            "title": "Edit notes.txt",
            "tool_call_id": "call_ask",
            "options": options,
            "tool_call": TOOL_CALL,
            "turn": 0,
        },
        status="action_required",
    )


def agent_items() -> list[dict[str, Any]]:
    return [
        wire_item(0, "message", {"role": "user", "text": "ask"}, created_by="alice"),
        wire_item(1, "session_event", SETTINGS, created_by="agent"),
        wire_item(2, "session_event", COMMANDS, created_by="agent"),
        permission_item(3),
    ]


def event(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"conversation_id": CONVERSATION, "kind": kind, "data": data}


def loaded(page: Page, relay: FakeRelay, role: str, name: str = "alice") -> None:
    open_page(page, named(relay.page_url(role), name))
    expect(page.get_by_test_id("connection-status")).to_have_attribute("data-state", "connected")
    expect(page.get_by_test_id("conversation")).to_have_attribute("data-loaded", "true")


# ---- permission requests ----


def test_permission_card_shows_the_whole_tool_call_and_every_option(
    page: Page, page_log: PageLog
) -> None:
    with fake_relay(Scenario(items=agent_items())) as relay:
        loaded(page, relay, "drive")
        card = page.locator("[data-testid=permission-request][data-request-id=perm_1]")
        expect(card).to_have_attribute("data-state", "pending")
        expect(card).to_have_attribute("data-tool-kind", "edit")
        expect(card.get_by_test_id("permission-title")).to_contain_text("Edit notes.txt")
        expect(card.get_by_test_id("tool-kind")).to_have_text("edit")
        expect(card.get_by_test_id("tool-locations")).to_have_text("/work/notes.txt:1")
        raw = card.get_by_test_id("tool-input")
        expect(raw).to_have_attribute("open", "")
        # The raw input, indented as JSON.
        expect(raw.locator("pre")).to_contain_text('"old_string": "milk"')
        assert '\n  "file_path"' in raw.locator("pre").inner_text()
        diff = card.get_by_test_id("diff")
        expect(diff.locator("figcaption")).to_have_text("/work/notes.txt")
        expect(diff.locator(".diff-del")).to_have_text(["- milk"])
        expect(diff.locator(".diff-add")).to_have_text(["+ bread"])
        expect(card.get_by_test_id("tool-text")).to_have_text("Replace milk with bread")
        expect(card.get_by_test_id("tool-truncated")).to_be_visible()
        buttons = card.get_by_test_id("permission-option")
        expect(buttons).to_have_text([o["name"] for o in OPTIONS])
        ids = buttons.evaluate_all("bs => bs.map(b => [b.dataset.optionId, b.dataset.kind])")
        assert ids == [[o["option_id"], o["kind"]] for o in OPTIONS]
        for button in buttons.all():
            expect(button).to_be_enabled()
        assert relay.errors == []
        assert page_log.errors == []
        assert csp_violations(page) == []


def test_no_option_is_preselected_and_no_key_answers(page: Page) -> None:
    with fake_relay(Scenario(items=agent_items())) as relay:
        loaded(page, relay, "drive")
        card = page.locator("[data-testid=permission-request][data-request-id=perm_1]")
        expect(card.get_by_test_id("permission-option")).to_have_count(4)
        state = page.evaluate(
            """() => ({
              focused: document.activeElement?.dataset?.testid ?? null,
              autofocus: document.querySelectorAll("[autofocus]").length,
              marked: document.querySelectorAll(".option.chosen, .option.sent").length,
              defaults: [...document.querySelectorAll("[data-testid=permission-option]")]
                .filter(b => b.type !== "button" || b.form !== null).length,
            })"""
        )
        assert state["focused"] != "permission-option"
        assert state["autofocus"] == 0
        assert state["marked"] == 0
        # No option is a submit button or inside a form: Enter in a field never answers.
        assert state["defaults"] == 0
        page.locator("body").press("Enter")
        box = page.get_by_test_id("composer-input")
        box.focus()
        box.press("Enter")
        box.press("Control+Enter")
        page.wait_for_timeout(300)
        assert relay.ops("permission") == []
        expect(card).to_have_attribute("data-state", "pending")


@pytest.mark.parametrize("option", OPTIONS, ids=[o["kind"] for o in OPTIONS])
def test_each_option_sends_exactly_its_own_id(page: Page, option: dict[str, str]) -> None:
    with fake_relay(Scenario(items=agent_items())) as relay:
        loaded(page, relay, "drive", "dana")
        card = page.locator("[data-testid=permission-request][data-request-id=perm_1]")
        card.locator(f"[data-testid=permission-option][data-kind={option['kind']}]").click()
        wait_for(lambda: relay.ops("permission"))
        page.wait_for_timeout(200)
        answers = [(m["request_id"], m["option_id"], m["_name"]) for m in relay.ops("permission")]
        assert answers == [("perm_1", option["option_id"], "dana")]
        # Sent once: every option waits for the host's decision.
        for button in card.get_by_test_id("permission-option").all():
            expect(button).to_be_disabled()
        relay.push(
            wire_item(
                4,
                "permission_decision",
                {
                    "request_id": "perm_1",
                    "outcome": "selected",
                    "option_id": option["option_id"],
                    "option_name": option["name"],
                    "option_kind": option["kind"],
                    "turn": 0,
                },
                created_by="dana",
            )
        )
        line = page.locator("[data-testid=permission-decision][data-request-id=perm_1]")
        expect(line).to_contain_text(f"dana answered: {option['name']}")
        expect(line).to_have_attribute("data-option-kind", option["kind"])
        expect(card).to_have_attribute("data-state", "answered")
        chosen = card.locator(".option.chosen")
        expect(chosen).to_have_attribute("data-option-id", option["option_id"])


def test_an_answer_lost_with_its_attachment_can_be_given_again(page: Page) -> None:
    with fake_relay(Scenario(items=agent_items())) as relay:
        loaded(page, relay, "drive")
        card = page.locator("[data-testid=permission-request][data-request-id=perm_1]")
        option = card.locator("[data-option-id=plan]")
        option.click()
        wait_for(lambda: relay.ops("permission"))
        expect(option).to_be_disabled()
        # The host never recorded it (no decision in the log): after the reconnect, ask again.
        relay.drop_all()
        wait_for(lambda: len(relay.ops("subscribe")) == 2, timeout=15)
        expect(page.get_by_test_id("connection-status")).to_have_attribute(
            "data-state", "connected"
        )
        expect(option).to_be_enabled()
        expect(card).to_have_attribute("data-state", "pending")


def test_the_decision_line_names_who_chose_which_option(page: Page) -> None:
    items = [
        *agent_items(),
        wire_item(
            4,
            "permission_decision",
            {
                "request_id": "perm_1",
                "outcome": "selected",
                "option_id": "bypassPermissions",
                "option_name": "Yes, and bypass permissions",
                "option_kind": "allow_always",
            },
            created_by="bob",
        ),
    ]
    with fake_relay(Scenario(items=items)) as relay:
        loaded(page, relay, "view")
        line = page.get_by_test_id("permission-decision")
        expect(line).to_contain_text("bob answered: Yes, and bypass permissions")
        expect(line).to_have_attribute("data-by", "bob")
        expect(line).to_have_attribute("data-option-id", "bypassPermissions")
        card = page.get_by_test_id("permission-request")
        # One line says it, in the card: no second line repeats the answer.
        expect(card.get_by_test_id("permission-outcome")).to_contain_text(
            "bob answered: Yes, and bypass permissions"
        )
        expect(card.get_by_test_id("permission-decision")).to_have_count(1)
        # A viewer sees every option, as text, and none to press.
        expect(card.get_by_test_id("permission-option")).to_have_count(4)
        expect(card.locator("button")).to_have_count(0)


def test_a_cancelled_request_says_so(page: Page) -> None:
    items = [
        *agent_items(),
        wire_item(
            4,
            "permission_decision",
            {
                "request_id": "perm_1",
                "outcome": "cancelled",
                "option_id": "",
                "option_name": "Cancelled",
                "option_kind": "",
            },
            created_by="carol",
        ),
    ]
    with fake_relay(Scenario(items=items)) as relay:
        loaded(page, relay, "drive")
        card = page.get_by_test_id("permission-request")
        expect(card).to_have_attribute("data-outcome", "cancelled")
        expect(card.get_by_test_id("permission-outcome")).to_contain_text("Cancelled by carol")
        expect(card.locator(".option.chosen")).to_have_count(0)
        expect(page.get_by_test_id("permission-decision")).to_have_count(1)


# ---- modes, models, config options ----


def setting(page: Page, key: str) -> Any:
    return page.locator(f"[data-testid=setting][data-setting='{key}']")


def test_driver_sees_and_switches_mode_model_and_config(page: Page, page_log: PageLog) -> None:
    with fake_relay(Scenario(items=agent_items())) as relay:
        loaded(page, relay, "drive", "alice")
        bar = page.get_by_test_id("agent-settings")
        expect(bar).to_be_visible()
        keys = page.get_by_test_id("setting").evaluate_all("s => s.map(e => e.dataset.setting)")
        assert keys == ["mode", "model", "config:thinking", "config:effort"]
        mode = setting(page, "mode").get_by_test_id("setting-select")
        expect(mode).to_have_value("default")
        expect(mode.locator("option")).to_have_text(["Default", "Plan"])
        expect(setting(page, "model").get_by_test_id("setting-select")).to_have_value("fast")
        effort = setting(page, "config:effort").get_by_test_id("setting-select")
        expect(effort.locator("optgroup")).to_have_count(2)

        mode.select_option("plan")
        wait_for(lambda: relay.ops("set_mode"))
        assert [(m["mode_id"], m["_name"]) for m in relay.ops("set_mode")] == [("plan", "alice")]
        # Until the host records it, the setting takes no second request.
        expect(mode).to_be_disabled()
        setting(page, "model").get_by_test_id("setting-select").select_option("smart")
        wait_for(lambda: relay.ops("set_model"))
        assert [m["model_id"] for m in relay.ops("set_model")] == ["smart"]
        effort.select_option("high")
        setting(page, "config:thinking").get_by_test_id("setting-toggle").check()
        wait_for(lambda: len(relay.ops("set_config")) == 2)
        configs = [(m["config_id"], m["value"]) for m in relay.ops("set_config")]
        assert configs == [("effort", "high"), ("thinking", True)]

        changed = {
            **SETTINGS,
            "modes": {**SETTINGS["modes"], "current": "plan"},
            "change": {"mode": "plan"},
        }
        relay.push(wire_item(4, "session_event", changed, created_by="alice"))
        expect(mode).to_be_enabled()
        expect(mode).to_have_value("plan")
        expect(setting(page, "mode")).to_have_attribute("data-current", "plan")
        note = page.locator("[data-testid=settings-note][data-seq='4']")
        expect(note).to_contain_text("alice switched the mode to Plan")
        expect(note).to_have_attribute("data-changed-by", "alice")
        expect(setting(page, "mode")).to_have_attribute(
            "title", "plans only · last changed by alice"
        )
        assert relay.errors == []
        assert page_log.errors == []


def test_a_refused_change_shows_the_recorded_setting_again(page: Page) -> None:
    with fake_relay(Scenario(items=agent_items())) as relay:
        loaded(page, relay, "drive")
        mode = setting(page, "mode").get_by_test_id("setting-select")
        mode.select_option("plan")
        wait_for(lambda: relay.ops("set_mode"))
        expect(mode).to_be_disabled()
        # What the page does with the host's `error` answer to the change.
        page.evaluate("window.__tunnel.view.opError('not_supported', 'the agent refused')")
        mode = setting(page, "mode").get_by_test_id("setting-select")
        expect(mode).to_be_enabled()
        expect(mode).to_have_value("default")


def test_viewer_sees_settings_read_only(page: Page) -> None:
    with fake_relay(Scenario(items=agent_items())) as relay:
        loaded(page, relay, "view")
        expect(page.get_by_test_id("agent-settings")).to_be_visible()
        expect(setting(page, "mode").get_by_test_id("setting-value")).to_have_text("Default")
        expect(setting(page, "model").get_by_test_id("setting-value")).to_have_text("Fast model")
        expect(setting(page, "config:thinking").get_by_test_id("setting-value")).to_have_text("off")
        expect(page.locator("[data-testid=agent-settings] select")).to_have_count(0)
        expect(page.locator("[data-testid=agent-settings] input")).to_have_count(0)
        # A forged change is refused by the host.
        page.evaluate("window.__tunnel.session.link.send({op: 'set_mode', mode_id: 'plan'})")
        expect(page.get_by_test_id("op-error")).to_have_attribute("data-code", "forbidden")


def test_everyone_is_told_whether_the_mode_asks_before_edits(page: Page) -> None:
    asking = {**SETTINGS, "approval": {"asks": True, "text": "asks before edits and commands"}}
    items = [wire_item(0, "session_event", asking, created_by="agent")]
    with fake_relay(Scenario(items=items)) as relay:
        loaded(page, relay, "view")
        shown = page.get_by_test_id("agent-approval")
        expect(shown).to_have_text("The agent asks before edits and commands")
        expect(shown).to_have_attribute("data-asks", "true")
        unasked = {
            **SETTINGS,
            "modes": {**SETTINGS["modes"], "current": "acceptEdits"},
            "change": {"mode": "acceptEdits"},
            "approval": {"asks": False, "text": "may edit files and run commands without asking"},
        }
        relay.push(wire_item(1, "session_event", unasked, created_by="alice"))
        expect(shown).to_have_attribute("data-asks", "false")
        expect(shown).to_have_text("The agent may edit files and run commands without asking")
        note = page.locator("[data-testid=settings-note][data-seq='1']")
        expect(note).to_contain_text(
            "alice switched the mode to acceptEdits. The agent may edit files and run commands"
            " without asking."
        )


def test_no_settings_bar_without_a_settings_event(page: Page) -> None:
    with fake_relay(Scenario(items=[permission_item(0)])) as relay:
        loaded(page, relay, "drive")
        expect(page.get_by_test_id("agent-settings")).to_be_hidden()


# ---- the agent's commands ----


def test_slash_lists_the_agents_commands_and_fills_the_composer(page: Page) -> None:
    with fake_relay(Scenario(items=agent_items())) as relay:
        loaded(page, relay, "drive", "alice")
        box = page.get_by_test_id("composer-input")
        listing = page.get_by_test_id("command-list")
        expect(listing).to_be_hidden()
        box.press_sequentially("/")
        expect(listing).to_be_visible()
        options = listing.get_by_test_id("command-option")
        expect(options).to_have_count(3)
        expect(options.nth(0)).to_contain_text("/compact")
        expect(options.nth(0)).to_contain_text("Compact the context")
        expect(options.nth(1)).to_contain_text("what to review")
        box.press_sequentially("re")
        expect(options).to_have_count(1)
        box.press("Enter")
        expect(box).to_have_value("/review ")
        expect(listing).to_be_hidden()
        assert relay.ops("prompt") == []
        box.press_sequentially("the diff")
        box.press("Enter")
        wait_for(lambda: relay.ops("prompt"))
        assert relay.ops("prompt")[0]["text"] == "/review the diff"

        # Arrow keys move through the list; a click chooses too.
        box.press_sequentially("/")
        box.press("ArrowDown")
        expect(options.nth(1)).to_have_attribute("aria-selected", "true")
        box.press("Escape")
        expect(listing).to_be_hidden()
        box.fill("")
        box.press_sequentially("/i")
        options.filter(has_text="/init").click()
        expect(box).to_have_value("/init")
        box.press("Enter")
        wait_for(lambda: len(relay.ops("prompt")) == 2)
        assert relay.ops("prompt")[1]["text"] == "/init"
        # `//` is not a command.
        box.press_sequentially("//")
        page.wait_for_timeout(100)
        expect(listing).to_be_hidden()


def test_a_later_commands_event_replaces_the_list(page: Page) -> None:
    with fake_relay(Scenario(items=agent_items())) as relay:
        loaded(page, relay, "drive")
        newer = {"what": "commands", "commands": [{"name": "plan", "description": "Plan first"}]}
        relay.push(wire_item(4, "session_event", newer))
        expect(page.locator("[data-testid=commands-note][data-seq='4']")).to_contain_text("/plan")
        page.get_by_test_id("composer-input").press_sequentially("/")
        options = page.get_by_test_id("command-option")
        expect(options).to_have_count(1)
        expect(options).to_contain_text("Plan first")


# ---- tool calls, unsupported updates, terminals ----


def test_two_turns_reusing_a_tool_call_id_make_two_cards(page: Page) -> None:
    items = [
        wire_item(0, "message", {"role": "user", "text": "tool"}, created_by="alice"),
        wire_item(
            1,
            "tool_call",
            {
                "tool_call_id": "call_1",
                "title": "Same id",
                "kind": "other",
                "status": "completed",
                "input": None,
                "content": [],
                "turn": 0,
            },
        ),
        wire_item(
            2, "tool_result", {"tool_call_id": "call_1", "ok": True, "output": "first", "turn": 0}
        ),
        wire_item(3, "message", {"role": "user", "text": "tool"}, created_by="alice"),
        wire_item(
            4,
            "tool_call",
            {
                "tool_call_id": "call_1",
                "title": "Same id",
                "kind": "other",
                "status": "pending",
                "input": None,
                "content": [],
                "turn": 3,
            },
        ),
    ]
    with fake_relay(Scenario(items=items)) as relay:
        loaded(page, relay, "view")
        cards = page.get_by_test_id("tool-call")
        expect(cards).to_have_count(2)
        expect(cards.nth(0)).to_have_attribute("data-turn", "0")
        expect(cards.nth(1)).to_have_attribute("data-turn", "3")
        relay.push(
            wire_item(
                5, "tool_call_update", {"tool_call_id": "call_1", "status": "failed", "turn": 3}
            )
        )
        relay.push(
            wire_item(
                6,
                "tool_result",
                {"tool_call_id": "call_1", "ok": False, "output": "second", "turn": 3},
            )
        )
        expect(cards.nth(1)).to_have_attribute("data-status", "failed")
        expect(cards.nth(1).get_by_test_id("tool-result")).to_contain_text("second")
        expect(cards.nth(0)).to_have_attribute("data-status", "completed")
        expect(cards.nth(0).get_by_test_id("tool-result")).to_contain_text("first")


def test_an_unsupported_update_shows_its_kind(page: Page) -> None:
    items = [
        wire_item(0, "session_event", {"what": "unsupported_update", "kind": "future_thing"}),
        wire_item(1, "unsupported_update", {"kind": "other_thing"}),
    ]
    with fake_relay(Scenario(items=items)) as relay:
        loaded(page, relay, "view")
        notes = page.get_by_test_id("unsupported-update")
        expect(notes).to_have_count(2)
        expect(notes.nth(0)).to_contain_text("unsupported update: future_thing")
        expect(notes.nth(1)).to_contain_text("unsupported update: other_thing")


def test_tool_terminal_output_appears_in_its_card(page: Page, page_log: PageLog) -> None:
    with fake_relay(Scenario(items=[])) as relay:
        loaded(page, relay, "view")
        # As the host sends them: the terminal is created (its first event names the command),
        # then the tool call that shows it, then output, then the stored item at the end.
        relay.send_event(
            event(
                "tool_terminal",
                {"terminal_id": "term_1", "text": "", "command": ["python", "-c", "print('out')"]},
            )
        )
        relay.send_event(event("tool_terminal", {"terminal_id": "term_1", "text": "early\r\n"}))
        relay.push(
            wire_item(
                0,
                "tool_call",
                {
                    "tool_call_id": "call_term",
                    "title": "Run a script",
                    "kind": "execute",
                    "status": "pending",
                    "input": None,
                    "content": [{"type": "terminal", "terminal_id": "term_1"}],
                    "turn": 0,
                },
            )
        )
        card = page.get_by_test_id("tool-call")
        terminal = card.get_by_test_id("tool-terminal")
        expect(terminal).to_have_attribute("data-state", "running")
        expect(terminal.get_by_test_id("tool-terminal-command")).to_have_text(
            "$ python -c 'print('\\''out'\\'')'"
        )
        relay.send_event(
            event(
                "tool_terminal",
                {
                    "terminal_id": "term_1",
                    "text": "\x1b[31mout\x1b[0m\r\n10%\r50%\r100%\n\x1b]0;title\x07err\n",
                },
            )
        )
        output = terminal.get_by_test_id("tool-terminal-output")
        expect(output).to_have_text("early\nout\n100%\nerr\n")
        relay.push(
            wire_item(
                1,
                "tool_terminal",
                {
                    "terminal_id": "term_1",
                    "command": ["python", "-c", "print('out')"],
                    "cwd": ".",
                    "output": "early\nout\nerr\n",
                    "truncated": False,
                    "exit_code": 3,
                    "signal": None,
                    "released": False,
                    "turn": 0,
                },
            )
        )
        expect(terminal).to_have_attribute("data-state", "exited")
        expect(terminal.get_by_test_id("tool-terminal-state")).to_have_text("exit code 3")
        expect(output).to_have_text("early\nout\nerr\n")
        # Shown in its card: no second copy in the conversation.
        expect(page.get_by_test_id("tool-terminal")).to_have_count(1)
        # A terminal no tool call names is shown on its own once it ends.
        relay.push(
            wire_item(
                2,
                "tool_terminal",
                {
                    "terminal_id": "term_2",
                    "command": ["sleep", "60"],
                    "cwd": ".",
                    "output": "",
                    "truncated": False,
                    "exit_code": None,
                    "signal": "SIGKILL",
                    "released": True,
                    "turn": 0,
                },
            )
        )
        alone = page.get_by_test_id("tool-terminal-item")
        expect(alone.get_by_test_id("tool-terminal-state")).to_have_text("killed by SIGKILL")
        assert page_log.errors == []
        assert relay.errors == []


def test_a_permission_request_shows_its_terminal(page: Page) -> None:
    call = {**TOOL_CALL, "content": [{"type": "terminal", "terminal_id": "term_9"}]}
    item = permission_item(0)
    item["data"]["tool_call"] = call
    with fake_relay(Scenario(items=[item])) as relay:
        loaded(page, relay, "drive")
        relay.send_event(
            event("tool_terminal", {"terminal_id": "term_9", "text": "", "command": ["make"]})
        )
        relay.send_event(event("tool_terminal", {"terminal_id": "term_9", "text": "building\n"}))
        card = page.get_by_test_id("permission-request")
        expect(card.get_by_test_id("tool-terminal-output")).to_have_text("building\n")


# ---- hostile markup ----

HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


def hostile(label: str) -> str:
    return f'{label} {HOSTILE} <b>bold</b> <a href="javascript:window.__pwned=3">a</a>'


def hostile_items() -> list[dict[str, Any]]:
    call = {
        "tool_call_id": hostile("id"),
        "title": hostile("title"),
        "kind": hostile("kind"),
        "status": hostile("status"),
        "locations": [{"path": hostile("path"), "line": 3}],
        "input": {"command": hostile("input"), hostile("key"): 1},
        "content": [
            {
                "type": "diff",
                "path": hostile("diffpath"),
                "old_text": hostile("old"),
                "new_text": hostile("new"),
            },
            {"type": "text", "text": hostile("text")},
            {"type": "terminal", "terminal_id": "term_x"},
            {"type": hostile("type"), "x": hostile("unknown")},
        ],
        "output": hostile("output"),
        "truncated": True,
    }
    options = [
        {"option_id": hostile("option-id"), "name": hostile("option"), "kind": hostile("optkind")},
        {"option_id": "ok", "name": "Fine", "kind": "allow_once"},
    ]
    choice = {
        "id": hostile("choice"),
        "name": hostile("choice-name"),
        "description": hostile("choice-desc"),
    }
    settings = {
        "what": "settings",
        "modes": {"current": hostile("choice"), "available": [choice]},
        "models": {"current": hostile("unlisted"), "available": [choice]},
        "config_options": [
            {
                "id": hostile("config"),
                "name": hostile("config-name"),
                "type": "select",
                "description": hostile("config-desc"),
                "current_value": hostile("choice"),
                "options": [{**choice, "group": hostile("group")}],
            },
        ],
        "change": {"config": {"id": hostile("config"), "value": hostile("choice")}},
    }
    commands = {
        "what": "commands",
        "commands": [
            {"name": hostile("cmd"), "description": hostile("desc"), "hint": hostile("hint")}
        ],
    }
    return [
        wire_item(0, "message", {"role": "user", "text": "go"}, created_by="alice"),
        wire_item(1, "tool_call", {**call, "turn": 0}),
        wire_item(
            2,
            "permission_request",
            {
                "request_id": "perm_h",
                "title": hostile("request"),
                "tool_call_id": None,
                "options": options,
                "tool_call": call,
                "turn": 0,
            },
            status="action_required",
        ),
        wire_item(3, "session_event", settings, created_by=hostile("by")),
        wire_item(4, "session_event", commands),
        wire_item(5, "session_event", {"what": "unsupported_update", "kind": hostile("update")}),
        wire_item(6, "unsupported_update", {"kind": hostile("item-kind")}),
        wire_item(
            7,
            "tool_terminal",
            {
                "terminal_id": "term_x",
                "command": [hostile("argv")],
                "cwd": hostile("cwd"),
                "output": hostile("term-out") + "\x1b]8;;javascript:x\x07link\x1b]8;;\x07",
                "truncated": True,
                "exit_code": 1,
                "signal": None,
                "released": False,
                "turn": 0,
            },
        ),
        wire_item(
            8,
            "permission_decision",
            {
                "request_id": "other",
                "outcome": "selected",
                "option_id": hostile("chosen-id"),
                "option_name": hostile("chosen"),
                "option_kind": hostile("chosen-kind"),
            },
            created_by=hostile("decider"),
        ),
    ]


INERT_CHECK = """() => {
  const app = document.getElementById("app");
  return {
    pwned: window.__pwned ?? null,
    elements: app.querySelectorAll("img, script, iframe, svg, object, embed, a, b, style").length,
    handlers: [...app.querySelectorAll("*")].flatMap(e =>
      [...e.attributes].filter(a => a.name.startsWith("on")).map(a => a.name)),
    styles: [...app.querySelectorAll("[style]")].filter(e => !e.closest(".xterm")).length,
    text: app.textContent,
  };
}"""


@pytest.mark.parametrize("role", ["drive", "view"])
def test_markup_in_every_agent_field_stays_text(page: Page, page_log: PageLog, role: str) -> None:
    with fake_relay(Scenario(items=hostile_items())) as relay:
        loaded(page, relay, role)
        relay.send_event(
            event(
                "tool_terminal",
                {"terminal_id": "term_live", "text": "", "command": [hostile("live-argv")]},
            )
        )
        relay.send_event(
            event("tool_terminal", {"terminal_id": "term_live", "text": hostile("live-out")})
        )
        relay.push(
            wire_item(
                9,
                "tool_call",
                {
                    "tool_call_id": "t2",
                    "title": "live",
                    "kind": "execute",
                    "status": "pending",
                    "input": None,
                    "turn": 0,
                    "content": [{"type": "terminal", "terminal_id": "term_live"}],
                },
            )
        )
        expect(page.get_by_test_id("tool-terminal").last).to_contain_text("live-out")
        if role == "drive":
            box = page.get_by_test_id("composer-input")
            box.press_sequentially("/")
            expect(page.get_by_test_id("command-option")).to_contain_text("desc <img")
            page.get_by_test_id("permission-option").first.click()
            wait_for(lambda: relay.ops("permission"))
            assert relay.ops("permission")[0]["option_id"] == hostile("option-id")
        for details in page.locator("details").all():
            details.evaluate("d => { d.open = true; }")
        page.wait_for_timeout(300)
        found = page.evaluate(INERT_CHECK)
        assert found["pwned"] is None
        assert found["elements"] == 0
        assert found["handlers"] == []
        assert found["styles"] == 0
        text = found["text"]
        labels = [
            "title",
            "kind",
            "path",
            "diffpath",
            "old",
            "new",
            "text",
            "output",
            "option",
            "request",
            "update",
            "item-kind",
            "argv",
            "term-out",
            "chosen",
            "decider",
            "live-argv",
            "live-out",
            "by",
            "config-name",
            "choice-name",
            "unlisted",
        ]
        for label in labels:
            assert f"{label} {HOSTILE}" in text, label
        # Raw input and unknown content are shown as JSON: the markup is in it, quotes escaped.
        as_json = HOSTILE.replace('"', '\\"')
        for label in ("input", "key", "unknown"):
            assert f"{label} {as_json}" in text, label
        # Escape sequences are gone, their text is not markup either.
        assert "javascript:x" not in text
        assert csp_violations(page) == []
        assert page_log.errors == []
        assert relay.errors == []
