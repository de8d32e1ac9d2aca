"""The prompt line completes the local commands and the agent's own, as the page's composer
does, and never offers a name it could not show as it is."""

from __future__ import annotations

from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from tests.terminal.hostile import WIRE
from tunnel.app.conversation_list import ConversationList, parse_conversation_message
from tunnel.terminal.completion import CommandCompleter, PathCache
from tunnel.terminal.view import ConversationView


def _view() -> ConversationView:
    return ConversationView(
        commands=[
            {"name": "review", "description": "Review a change", "hint": "what"},
            {"name": "compact", "description": WIRE},
            {"name": "re\x1b[2Jset", "description": "hidden"},
        ],
        settings={"modes": {"current": "default", "available": [{"id": "plan", "name": "Plan"}]}},
    )


def _complete(text: str, **options: object) -> list[tuple[str, str]]:
    completer = CommandCompleter(_view, **options)  # type: ignore[arg-type]
    found = completer.get_completions(Document(text), CompleteEvent(completion_requested=True))
    return [(c.text, c.display_meta_text) for c in found]


def test_a_slash_offers_the_local_commands_then_the_agents() -> None:
    names = [text for text, _ in _complete("/")]
    assert names[:2] == ["/allow", "/deny"]
    assert "/review " in names  # it takes input: a space follows
    assert "/compact" in names


def test_a_prefix_narrows_and_descriptions_are_shown_escaped() -> None:
    assert _complete("/re") == [
        ("/revoke", "replace both links and disconnect everyone (host)"),
        ("/resume", "start a conversation that resumes one of them (host)"),
        ("/review ", "Review a change"),
    ]
    ((_, description),) = _complete("/comp")
    assert "\x1b" not in description
    assert "\\x1b[2J" in description


def test_a_name_that_is_not_printable_as_it_is_is_left_out() -> None:
    assert all("set" not in text for text, _ in _complete("/re"))


def test_mode_ids_complete_after_mode_and_nothing_completes_a_prompt() -> None:
    assert _complete("/mode p") == [("plan", "Plan")]
    assert _complete("hello /re") == []
    assert _complete("//re") == []


def test_the_local_commands_can_be_narrowed_to_those_of_a_surface() -> None:
    assert "/revoke" not in [text for text, _ in _complete("/", local=["/allow", "/quit"])]


def test_at_paths_come_from_the_host_once_and_only_printable_ones() -> None:
    asked: list[str] = []
    cache = PathCache()
    cache.ask = asked.append
    completer = CommandCompleter(ConversationView, paths=lambda: cache)

    def offered(text: str) -> list[str]:
        document = Document(text, len(text))
        return [c.text for c in completer.get_completions(document, CompleteEvent())]

    assert offered("look at @no") == []
    assert offered("look at @no") == []
    assert asked == ["no"]  # asked once while the answer is awaited
    cache.received({"op": "paths", "prefix": "no", "paths": ["notes.txt", "no\x1b]2;x\x07"]})
    assert offered("look at @no") == ["notes.txt"]
    assert offered("mail me@no") == []  # not an @ word


def _listing() -> ConversationList:
    entry = {"agent": "demo", "by": "ann", "state": "idle", "pending": 0, "last": 0, "started": 0}
    parsed = parse_conversation_message(
        {
            "op": "conversations",
            "agents": ["demo", "other", "ba\x1b[2Jd"],
            "max": 8,
            "list": [
                {**entry, "id": "main"},
                {**entry, "id": "c-1a2b3c4d", "agent": "other", "state": "waiting"},
                {**entry, "id": "c-\x1b]2;pwned\x07"},
            ],
        }
    )
    assert isinstance(parsed, ConversationList)
    return parsed


def test_new_completes_the_agents_and_switch_and_close_the_conversations() -> None:
    options = {"conversations": _listing}
    assert [text for text, _ in _complete("/new ", **options)] == ["demo", "other"]
    assert _complete("/new o", **options) == [("other", "")]
    assert _complete("/sessions o", **options) == [("other", "")]
    assert [text for text, _ in _complete("/resume ", **options)] == ["demo", "other"]
    assert [text for text, _ in _complete("/switch ", **options)] == ["main", "c-1a2b3c4d"]
    assert _complete("/close c-", **options) == [("c-1a2b3c4d", "other, waiting")]
    # Nothing without a list, and nothing after the one word the command takes.
    assert _complete("/switch ") == []
    assert _complete("/switch main ", **options) == []
    assert [text for text, _ in _complete("/l")] == ["/list"]
