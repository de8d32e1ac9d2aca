"""Replay links: a read-only link to one conversation up to a seq, and what its channel may do.

A replay link is a personal link of role `view` (its own secret, verifier and e2e root:
`tunnel.host.invitations`) that also carries a `ReplayLink`, kept only at the host: which
conversation it shows and the last seq it shows. Whatever its open names, its channel is
served that conversation's items 0..`upto` and nothing after them: no live tail, no broadcast,
no presence, and no request but those that only read what it may see (docs/security.md,
"Replay links"). Pure: the session handler asks it; it does no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from tunnel.app.requests import History, ReadFile, Request, Subscribe

__all__ = ["REPLAY_PREFIX", "REPLAY_REQUESTS", "ReplayLink", "replay_name"]

REPLAY_PREFIX: Final = "replay-"
"""How every replay link's name starts; an invited person's name never does."""

REPLAY_REQUESTS: Final = (Subscribe, History, ReadFile)
"""What a replay channel may ask: its snapshot (again), a page before it, a workspace file.
Anything else is answered `forbidden` and changes nothing."""

_UNSAFE = re.compile(r"[^\w.-]")
_CONVERSATION_IN_NAME: Final = 40
"""Characters of the conversation id a replay link's name keeps, so it stays a name."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayLink:
    """What a replay link shows: one conversation, its items 0..`upto`."""

    conversation: str
    """The conversation shown, whatever conversation its channel's open names."""
    upto: int
    """The last seq shown (-1: nothing yet)."""

    def __post_init__(self) -> None:
        if type(self.upto) is not int or self.upto < -1:
            raise ValueError("a replay link's upto is a seq, or -1")
        if not isinstance(self.conversation, str) or not self.conversation:
            raise ValueError("a replay link names a conversation")

    def allows(self, request: Request) -> bool:
        """Whether its channel may ask `request`: only to read what it may see."""
        return isinstance(request, REPLAY_REQUESTS)

    def head(self, head: int) -> int:
        """The last seq to send of a conversation whose last stored one is `head`."""
        return min(head, self.upto)

    def before(self, before: int) -> int:
        """A `history` request's cursor, bounded so that no item after `upto` is read."""
        return min(before, self.upto + 1)

    def wire(self) -> dict[str, str | int]:
        """What `ready` says of it (docs/application.md, `ready.replay`)."""
        return {"conversation": self.conversation, "upto": self.upto}


def replay_name(conversation: str, taken: set[str]) -> str:
    """`replay-<conversation>-<n>`, with the first n from 1 not in `taken`; the conversation
    id made one word of at most 40 characters, so the name is an invited person's kind of
    name. Compared ignoring case, as names are: a conversation `Main` gets a second name,
    never the first one again."""
    word = _UNSAFE.sub("_", conversation)[:_CONVERSATION_IN_NAME]
    folded = {name.casefold() for name in taken}
    n = 1
    while f"{REPLAY_PREFIX}{word}-{n}".casefold() in folded:
        n += 1
    return f"{REPLAY_PREFIX}{word}-{n}"
