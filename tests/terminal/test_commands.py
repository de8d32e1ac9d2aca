"""Typed lines mean the same at the host console and in `tunnel attach`."""

from __future__ import annotations

from typing import Any

import pytest

from tunnel.app.requests import Cancel, PermissionAnswer, Prompt, SetMode, SetModel
from tunnel.terminal.commands import (
    HELP,
    LOCAL_COMMANDS,
    Close,
    ForkAt,
    Listing,
    New,
    Quit,
    Resume,
    Revoke,
    Say,
    Sessions,
    Switch,
    parse_host_line,
    parse_line,
)
from tunnel.terminal.view import ConversationView

SIMPLE = [
    {"option_id": "yes", "name": "Allow", "kind": "allow_once"},
    {"option_id": "no", "name": "Reject", "kind": "reject_once"},
]

# What Claude Code offers for an edit, and when it leaves plan mode with bypass available.
CLAUDE_EDIT = [
    {"option_id": "allow_always", "name": "Always Allow", "kind": "allow_always"},
    {"option_id": "allow", "name": "Allow", "kind": "allow_once"},
    {"option_id": "reject", "name": "Reject", "kind": "reject_once"},
]
CLAUDE_EXIT_PLAN = [
    {
        "option_id": "bypassPermissions",
        "name": "Yes, and bypass permissions",
        "kind": "allow_always",
    },
    {"option_id": "acceptEdits", "name": "Yes, and auto-accept edits", "kind": "allow_always"},
    {"option_id": "default", "name": "Yes, and manually approve edits", "kind": "allow_once"},
    {"option_id": "plan", "name": "No, keep planning", "kind": "reject_once"},
]
# Gemini CLI in a folder it trusts: "Allow for this session" comes before "Allow once".
GEMINI = [
    {"option_id": "proceed_always", "name": "Allow for this session", "kind": "allow_always"},
    {"option_id": "proceed_once", "name": "Allow once", "kind": "allow_once"},
    {"option_id": "cancel", "name": "Reject", "kind": "reject_once"},
]


def _view(options: list[dict[str, str]], *request_ids: str) -> ConversationView:
    view = ConversationView()
    for seq, request_id in enumerate(request_ids or ("r1",)):
        view.accept(
            {
                "seq": seq,
                "type": "permission_request",
                "data": {"request_id": request_id, "title": "run tool", "options": options},
            }
        )
    return view


def _answer(line: str, view: ConversationView) -> tuple[str, str] | str:
    command = parse_line(line, view)
    if isinstance(command, PermissionAnswer):
        return command.request_id, command.option_id
    assert isinstance(command, Say), command
    return command.text


def test_plain_text_is_a_prompt_and_blank_is_nothing() -> None:
    view = ConversationView()
    assert parse_line("  fix the bug ", view) == Prompt(text="fix the bug")
    assert parse_line("   ", view) is None


@pytest.mark.parametrize(
    ("options", "allow"),
    [
        (SIMPLE, "yes"),
        (CLAUDE_EDIT, "allow"),
        (CLAUDE_EXIT_PLAN, "default"),
        (GEMINI, "proceed_once"),
    ],
)
def test_allow_picks_the_allow_once_option_never_an_always_one(
    options: list[dict[str, str]], allow: str
) -> None:
    assert _answer("/allow", _view(options)) == ("r1", allow)


def test_allow_always_needs_exactly_one_always_option_and_never_picks_bypass() -> None:
    assert _answer("/allow always", _view(CLAUDE_EDIT)) == ("r1", "allow_always")
    assert _answer("/allow always", _view(GEMINI)) == ("r1", "proceed_always")
    # Leaving plan mode: bypass is not an "always" a keyword may pick, so only acceptEdits counts.
    assert _answer("/allow always", _view(CLAUDE_EXIT_PLAN)) == ("r1", "acceptEdits")
    assert "no allow_always" in str(_answer("/allow always", _view(SIMPLE)))


def test_allow_n_and_allow_id_pick_exactly_that_option() -> None:
    view = _view(CLAUDE_EXIT_PLAN)
    assert _answer("/allow 1", view) == ("r1", "bypassPermissions")
    assert _answer("/allow 4", view) == ("r1", "plan")
    assert _answer("/allow acceptEdits", view) == ("r1", "acceptEdits")
    refused = _answer("/allow 5", view)
    assert isinstance(refused, str)
    assert "no option 5" in refused
    # The refusal lists every option, numbered as /allow N counts them.
    assert "1. Yes, and bypass permissions (allow_always, id bypassPermissions)" in refused
    assert "no option 'nope'" in str(_answer("/allow nope", view))


def test_deny_rejects_once_or_always() -> None:
    with_always = [*SIMPLE, {"option_id": "never", "name": "Never", "kind": "reject_always"}]
    assert _answer("/deny", _view(with_always)) == ("r1", "no")
    assert _answer("/deny always", _view(with_always)) == ("r1", "never")
    assert "no reject_always" in str(_answer("/deny always", _view(SIMPLE)))
    assert "/allow N" in str(_answer("/deny 2", _view(SIMPLE)))


def test_without_an_allow_once_option_allow_says_what_to_type() -> None:
    only_always = [{"option_id": "ok", "name": "Always", "kind": "allow_always"}, SIMPLE[1]]
    said = _answer("/allow", _view(only_always))
    assert isinstance(said, str)
    assert "no allow_once" in said
    assert "1. Always" in said


def test_a_request_id_among_the_words_picks_that_request() -> None:
    view = _view(SIMPLE, "r1", "r2")
    assert _answer("/allow", view) == ("r2", "yes")
    assert _answer("/allow r1", view) == ("r1", "yes")
    assert _answer("/deny r1", view) == ("r1", "no")
    assert _answer("/allow 2 r1", view) == ("r1", "no")
    assert _answer("/allow r1 2", view) == ("r1", "no")
    assert "no option 'r9'" in str(_answer("/allow r9", view))


def test_a_decision_closes_the_request_so_allow_has_nothing_to_answer() -> None:
    view = _view(SIMPLE)
    view.accept({"seq": 4, "type": "permission_decision", "data": {"request_id": "r1"}})
    assert parse_line("/allow", view) == Say(text="no permission request is waiting")


def test_duplicate_items_are_dropped_by_seq() -> None:
    view = ConversationView()
    assert view.accept({"seq": 0, "type": "message", "data": {}})
    assert not view.accept({"seq": 0, "type": "message", "data": {}})
    assert view.last_seq == 0


def test_other_commands() -> None:
    view = ConversationView()
    assert parse_line("/cancel", view) == Cancel()
    assert parse_line("/quit", view) == Quit()
    assert parse_line("/revoke", view) == Revoke()


@pytest.mark.parametrize("line", ["/compact", "/init now", "/frobnicate", "/allowx"])
def test_any_other_slash_command_goes_to_the_agent_as_typed(line: str) -> None:
    assert parse_line(line, ConversationView()) == Prompt(text=line)


@pytest.mark.parametrize("word", LOCAL_COMMANDS)
def test_a_double_slash_sends_a_local_command_word_to_the_agent(word: str) -> None:
    assert parse_line(f"/{word} x", ConversationView()) == Prompt(text=f"{word} x")


def _settings_view() -> ConversationView:
    view = ConversationView()
    settings: dict[str, Any] = {
        "what": "settings",
        "modes": {
            "current": "default",
            "available": [{"id": "default", "name": "Default"}, {"id": "plan", "name": "Plan"}],
        },
        "models": None,
        "config_options": None,
        "approval": {"asks": True, "text": "asks before edits and commands"},
    }
    commands = [{"name": "compact", "description": "shrink the context"}]
    view.accept({"seq": 0, "type": "session_event", "data": settings})
    view.accept(
        {"seq": 1, "type": "session_event", "data": {"what": "commands", "commands": commands}}
    )
    return view


def test_mode_and_model_show_the_choices_or_switch() -> None:
    view = _settings_view()
    shown = parse_line("/mode", view)
    assert isinstance(shown, Say)
    assert "mode: default (Default)" in shown.text
    assert "plan (Plan)" in shown.text
    assert shown.text.endswith("; in it the agent asks before edits and commands")
    assert parse_line("/mode plan", view) == SetMode(mode_id="plan")
    assert parse_line("/model opus", view) == SetModel(model_id="opus")
    assert parse_line("/model", view) == Say(text="the agent offers no model choice")


def test_help_lists_the_agents_own_commands() -> None:
    shown = parse_line("/help", _settings_view())
    assert isinstance(shown, Say)
    assert "/compact (shrink the context)" in shown.text
    assert "//x sends /x" in shown.text


@pytest.mark.parametrize(
    ("line", "command"),
    [
        ("/new other", New(agent="other")),
        ("/list", Listing()),
        ("/switch 2", Switch(target="2")),
        ("/switch c-1a", Switch(target="c-1a")),
        ("/close", Close()),
        ("/close c-1a2b3c4d", Close(target="c-1a2b3c4d")),
        ("/fork", ForkAt()),
        ("/fork 12", ForkAt(upto=12)),
        ("  /fork   0 ", ForkAt(upto=0)),
    ],
)
def test_the_conversation_commands_are_parsed(line: str, command: object) -> None:
    assert parse_line(line, ConversationView()) == command


@pytest.mark.parametrize(
    ("line", "usage"),
    [
        ("/new", "usage: /new NAME"),
        ("/new a b", "usage: /new NAME"),
        ("/list all", "usage: /list"),
        ("/switch", "usage: /switch ID|N"),
        ("/switch a b", "usage: /switch ID|N"),
        ("/close a b", "usage: /close [ID|N]"),
        ("/fork last", "usage: /fork [SEQ]"),
        ("/fork -1", "usage: /fork [SEQ]"),
        ("/fork 1 2", "usage: /fork [SEQ]"),
        ("/fork ١٢", "usage: /fork [SEQ]"),  # digits, but not ASCII ones
        ("/fork 99999999999999999999999", "usage: /fork [SEQ]"),  # beyond any seq
    ],
)
def test_a_conversation_command_used_wrongly_says_its_usage_and_sends_nothing(
    line: str, usage: str
) -> None:
    said = parse_line(line, ConversationView())
    assert isinstance(said, Say)
    assert said.text.startswith(usage)


def test_the_conversation_commands_are_local_and_a_double_slash_sends_them_to_the_agent() -> None:
    for word in ("/new", "/list", "/switch", "/close", "/fork"):
        assert word in LOCAL_COMMANDS
        assert word in HELP
        assert parse_line("/" + word, ConversationView()) == Prompt(text=word)


def test_past_sessions_are_the_host_consoles_alone() -> None:
    view = ConversationView()
    assert parse_host_line("/sessions claude", view) == Sessions(agent="claude")
    assert parse_host_line(" /resume claude s-1 ", view) == Resume(agent="claude", session_id="s-1")
    for line in ("/sessions", "/sessions a b", "/resume claude", "/resume a b c"):
        said = parse_host_line(line, view)
        assert isinstance(said, Say)
        assert said.text.startswith("usage: ")
    # Anything else reads as it does everywhere.
    assert parse_host_line("/list", view) == Listing()
    assert parse_host_line("hello", view) == Prompt(text="hello")
    # Elsewhere (tunnel attach) nothing is sent, not even to the agent: a line says why.
    for line in ("/sessions claude", "/resume claude s-1"):
        said = parse_line(line, view)
        assert isinstance(said, Say)
        assert "only the host" in said.text
    assert parse_line("//sessions", view) == Prompt(text="/sessions")
