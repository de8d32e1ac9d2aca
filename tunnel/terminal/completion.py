"""Completion of typed commands: the local ones (tunnel/terminal/commands.py) and the agent's own
slash commands (its latest `commands` session event), as the page's composer completes them;
after `/mode ` and `/model `, the ids the agent offers.

The agent chose its command names and descriptions: a name that is not printable as it is
(tunnel/terminal/sanitize.py) is left out, since typing it could not be shown faithfully, and a
description is shown escaped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

from tunnel.terminal.sanitize import printable
from tunnel.terminal.view import ConversationView

__all__ = ["LOCAL_DESCRIPTIONS", "CommandCompleter"]

LOCAL_DESCRIPTIONS = {
    "/allow": "answer the latest permission request: allow once (always, N, OPTION_ID)",
    "/deny": "reject the latest permission request (always)",
    "/cancel": "stop the running turn",
    "/mode": "show or switch the agent's mode",
    "/model": "show or switch the agent's model",
    "/help": "list the commands",
    "/quit": "leave",
    "/revoke": "replace both links and disconnect everyone (host)",
}
"""Each local command with what it does, as the completion menu shows it."""


def _choices(settings: Mapping[str, Any], what: str) -> Iterator[tuple[str, str]]:
    state = settings.get(f"{what}s")
    available = state.get("available") if isinstance(state, Mapping) else None
    for entry in available if isinstance(available, list) else ():
        if isinstance(entry, Mapping) and isinstance(entry.get("id"), str):
            yield entry["id"], str(entry.get("name") or "")


class CommandCompleter(Completer):
    """Completes `/word` at the start of a line; `view()` gives the agent's latest commands."""

    def __init__(
        self, view: Callable[[], ConversationView], *, local: Iterable[str] | None = None
    ) -> None:
        self._view = view
        self._local = tuple(local if local is not None else LOCAL_DESCRIPTIONS)

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterator[Completion]:
        text = document.text_before_cursor
        if not text.startswith("/") or text.startswith("//"):
            return
        view = self._view()
        word, space, rest = text.partition(" ")
        if space:
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
