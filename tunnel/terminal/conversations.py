"""The host's conversations as a terminal shows them: `/list` in words, and the requests that wait
in conversations other than the one shown (their count before the prompt, a bell when it rises).

Shared by `tunnel attach` (the list the host sends) and the host console (the same list, from
the registry); no I/O. Every field of the list came from the wire or from a teammate: each passes
`printable()` and is cut short before it is shown (tunnel/terminal/sanitize.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from tunnel.app.conversation_list import ConversationEntry, ConversationList
from tunnel.terminal.sanitize import printable

__all__ = ["OtherWaiting", "ago", "listing_lines", "short"]

MAX_ID_SHOWN = 24
"""Characters of a conversation id shown in the prompt (ours are 2 to 10: `main`, `c-1a2b3c4d`)."""

MAX_FIELD_SHOWN = 64
"""Characters of any one field of the list shown (an id, an agent, who started it)."""

MAX_WHERE_SHOWN = 2
"""Conversations named before the prompt where requests wait; more are counted, not named."""


def short(text: str, limit: int = MAX_ID_SHOWN) -> str:
    """`text` safe to print on one line and at most about `limit` characters: cut with `…`
    when longer. Its line breaks and tabs are escaped too: a name cannot add a line to `/list`."""
    shown = printable(text).replace("\n", "\\n").replace("\t", "\\t")
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def ago(seconds: float) -> str:
    """How long ago, in words a person reads at a glance: `just now`, `12 s ago`, `5 min ago`."""
    if seconds < 2:
        return "just now"
    if seconds < 60:
        return f"{seconds:.0f} s ago"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min ago"
    if seconds < 86400:
        return f"{seconds // 3600:.0f} h ago"
    return f"{seconds // 86400:.0f} d ago"


def _entry_line(number: int, entry: ConversationEntry, *, current: bool, now: float) -> str:
    pending = f", {entry.pending} waiting" if entry.pending else ""
    here = "  (shown here)" if current else ""
    return (
        f"{number}. {short(entry.id, MAX_FIELD_SHOWN)}: {short(entry.agent, MAX_FIELD_SHOWN)},"
        f" started by {short(entry.by, MAX_FIELD_SHOWN)}, {entry.state}{pending},"
        f" last active {ago(max(0.0, now - entry.last))}{here}"
    )


def listing_lines(listing: ConversationList, *, current: str | None, now: float) -> list[str]:
    """`/list`: a line on what may be started, then one per conversation, numbered as
    `/switch N` counts them; `current` is the one shown, `now` Unix seconds."""
    agents = ", ".join(short(a, MAX_FIELD_SHOWN) for a in listing.agents) or "none"
    opened = sum(1 for c in listing.conversations if c.state != "closed")
    lines = [
        f"{opened} conversations open (at most {listing.max}); /new NAME starts one with: {agents}"
    ]
    for number, entry in enumerate(listing.conversations, 1):
        lines.append(_entry_line(number, entry, current=entry.id == current, now=now))
    return lines


class OtherWaiting:
    """The requests that wait in the conversations not shown, from the host's list: how many,
    where, and how many more than the list said before (each rings the bell once)."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}
        self.count = 0
        """Requests waiting in the other conversations now."""
        self._where: list[str] = []

    def update(self, listing: ConversationList, current: str | None) -> int:
        """Take a new list; return how many requests more than before wait elsewhere. A
        conversation's count the first time it is listed counts as new, as a request already
        waiting does on a fresh attach; a conversation that was shown until now counts what it
        showed (`seen`), so leaving it rings nothing."""
        new = sum(
            max(0, entry.pending - self._seen.get(entry.id, 0))
            for entry in listing.conversations
            if entry.id != current
        )
        self.recount(listing, current)
        # Bounded by the list (at most MAX_LISTED entries): what left it is forgotten.
        self._seen = {entry.id: entry.pending for entry in listing.conversations}
        return new

    def recount(self, listing: ConversationList, current: str | None) -> None:
        """Count again from `listing` with `current` shown, without taking its counts as told:
        a list from before a switch may be older than what the user was told since."""
        self.count = 0
        self._where = []
        for entry in listing.conversations:
            if entry.id != current and entry.pending:
                self.count += entry.pending
                self._where.append(entry.id)

    def seen(self, conversation: str) -> int:
        """Requests already told of as waiting in `conversation` (when it was not shown)."""
        return self._seen.get(conversation, 0)

    def leave(self, conversation: str, waiting: int) -> None:
        """The conversation shown until now, with `waiting` requests the user was told of."""
        self._seen[conversation] = max(self._seen.get(conversation, 0), waiting)

    def line(self) -> str:
        """Where no prompt line shows the count (lines only): the same words as a line."""
        return f"[{self.count} waiting in {_names(self._where)}] (/switch ID shows one)"

    def prompt(self, base: str) -> str:
        """`base` with `[2 waiting in c-1a2b] ` before it while requests wait elsewhere."""
        if not self.count:
            return base
        return f"[{self.count} waiting in {_names(self._where)}] {base}"


def _names(ids: Iterable[str]) -> str:
    listed = list(ids)
    named = ", ".join(short(i) for i in listed[:MAX_WHERE_SHOWN])
    more = len(listed) - MAX_WHERE_SHOWN
    return named + (f" and {more} more" if more > 0 else "")
