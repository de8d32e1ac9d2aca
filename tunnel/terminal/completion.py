"""Completion of typed commands: the local ones (tunnel/terminal/commands.py) and the agent's own
slash commands (its latest `commands` session event), as the page's composer completes them;
after `/mode ` and `/model `, the ids the agent offers; after `/new ` (and the host console's
`/sessions ` and `/resume `) the agents the host offers,
after `/switch ` and `/close ` its conversations' ids (its `conversations` list).

The agent chose its command names and descriptions: a name that is not printable as it is
(tunnel/terminal/sanitize.py) is left out, since typing it could not be shown faithfully, and a
description is shown escaped.
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

from tunnel.app.conversation_list import ConversationList
from tunnel.terminal.sanitize import printable
from tunnel.terminal.view import ConversationView

__all__ = ["LOCAL_DESCRIPTIONS", "CommandCompleter", "PathCache"]

PATHS_KEPT = 64
"""Prefixes whose listed paths are kept at once."""

PATHS_FRESH = 10.0
"""Seconds a listing is used before the host is asked again (files come and go)."""

_AT_WORD = re.compile(r"(?:^|\s)@([^\s@]*)$")

LOCAL_DESCRIPTIONS = {
    "/allow": "answer the latest permission request: allow once (always, N, OPTION_ID)",
    "/deny": "reject the latest permission request (always)",
    "/cancel": "stop the running turn",
    "/mode": "show or switch the agent's mode",
    "/model": "show or switch the agent's model",
    "/help": "list the commands",
    "/quit": "leave",
    "/revoke": "replace both links and disconnect everyone (host)",
    "/new": "start a conversation with an agent of the host's, and show it",
    "/list": "list the host's conversations",
    "/switch": "show another conversation",
    "/close": "stop a conversation's agent (its log stays)",
    "/fork": "start a conversation from this one up to an item",
    "/sessions": "list an ACP agent's own past sessions (host)",
    "/resume": "start a conversation that resumes one of them (host)",
}
"""Each local command with what it does, as the completion menu shows it."""


def _choices(settings: Mapping[str, Any], what: str) -> Iterator[tuple[str, str]]:
    state = settings.get(f"{what}s")
    available = state.get("available") if isinstance(state, Mapping) else None
    for entry in available if isinstance(available, list) else ():
        if isinstance(entry, Mapping) and isinstance(entry.get("id"), str):
            yield entry["id"], str(entry.get("name") or "")


class PathCache:
    """The workspace paths the host listed (`paths`) for each `@path` being typed: asked once
    per prefix, kept `PATHS_FRESH` seconds. `ask` sends the request (None while not attached);
    `on_answer` is told when a listing arrives, to complete again."""

    def __init__(self) -> None:
        self.ask: Callable[[str], None] | None = None
        self.on_answer: Callable[[], None] | None = None
        self._known: OrderedDict[str, tuple[float, list[str]]] = OrderedDict()
        self._asked: set[str] = set()

    def get(self, prefix: str) -> list[str] | None:
        """The paths that complete `prefix`, if listed lately; else asks for them."""
        known = self._known.get(prefix)
        if known is not None and time.monotonic() - known[0] < PATHS_FRESH:
            return known[1]
        if prefix not in self._asked and self.ask is not None:
            self._asked.add(prefix)
            self.ask(prefix)
        return None

    def received(self, message: Mapping[str, Any]) -> None:
        """A `paths` message from the host. Paths that are not printable as they are left out:
        typed, they could not be shown faithfully."""
        prefix, paths = message.get("prefix"), message.get("paths")
        if not isinstance(prefix, str) or not isinstance(paths, list):
            return
        self._asked.discard(prefix)
        listed = [p for p in paths if isinstance(p, str) and p and printable(p) == p]
        self._known[prefix] = (time.monotonic(), listed)
        self._known.move_to_end(prefix)
        while len(self._known) > PATHS_KEPT:
            self._known.popitem(last=False)
        if self.on_answer is not None:
            self.on_answer()


class CommandCompleter(Completer):
    """Completes `/word` at the start of a line; `view()` gives the agent's latest commands.
    With `paths`, an `@path` word anywhere from the host's workspace."""

    def __init__(
        self,
        view: Callable[[], ConversationView],
        *,
        local: Iterable[str] | None = None,
        paths: Callable[[], PathCache] | None = None,
        conversations: Callable[[], ConversationList | None] | None = None,
    ) -> None:
        self._view = view
        self._local = tuple(local if local is not None else LOCAL_DESCRIPTIONS)
        self._paths = paths
        self._conversations = conversations

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterator[Completion]:
        text = document.text_before_cursor
        at = _AT_WORD.search(text)
        if at is not None and self._paths is not None:
            prefix = at.group(1)
            for path in self._paths().get(prefix) or ():
                yield Completion(path, start_position=-len(prefix), display="@" + path)
            return
        if not text.startswith("/") or text.startswith("//"):
            return
        view = self._view()
        word, space, rest = text.partition(" ")
        if space:
            if word in ("/new", "/switch", "/close", "/sessions", "/resume") and " " not in rest:
                yield from self._conversation_words(word, rest)
                return
            if word in ("/mode", "/model") and " " not in rest:
                for choice, name in _choices(view.settings, word[1:]):
                    if choice.startswith(rest) and printable(choice) == choice:
                        yield Completion(
                            choice, start_position=-len(rest), display_meta=printable(name)
                        )
            return
        typed = text[1:].lower()
        seen: set[str] = set()
        for name in self._local:
            if name[1:].startswith(typed):
                seen.add(name)
                yield Completion(
                    name, start_position=-len(text), display_meta=LOCAL_DESCRIPTIONS.get(name, "")
                )
        for command in view.commands:
            found = command.get("name")
            if not isinstance(found, str) or not found or printable(found) != found:
                continue
            if " " in found:
                continue
            full = "/" + found
            if full in seen or not found.lower().startswith(typed):
                continue
            seen.add(full)
            hint = command.get("hint")
            description = str(command.get("description") or "")
            yield Completion(
                # A command that takes input gets a space, as the page's composer gives it.
                full + (" " if hint else ""),
                start_position=-len(text),
                display=full,
                display_meta=printable(description),
            )

    def _conversation_words(self, word: str, typed: str) -> Iterator[Completion]:
        """The agents after `/new `, the conversations' ids after `/switch ` and `/close `; a
        name that is not printable as it is, or holds a space, is left out."""
        listing = self._conversations() if self._conversations is not None else None
        if listing is None:
            return
        if word in ("/new", "/sessions", "/resume"):
            choices = [(agent, "") for agent in listing.agents]
        else:
            choices = [
                (c.id, printable(f"{c.agent}, {c.state}")[:64]) for c in listing.conversations
            ]
        for choice, meta in choices:
            if choice.startswith(typed) and printable(choice) == choice and " " not in choice:
                yield Completion(choice, start_position=-len(typed), display_meta=meta)
