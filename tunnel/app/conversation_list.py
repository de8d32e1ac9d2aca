"""The host's list of its conversations, as a teammate reads it (docs/application.md,
"Conversations"): `conversations` and `conversation_started`, parsed from untrusted bytes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from tunnel.app.errors import BadRequest
from tunnel.app.requests import MAX_AGENT_NAME_LENGTH
from tunnel.e2e.opening import MAX_CONVERSATION_LENGTH

MAX_BY_LENGTH: Final = 64
"""Characters of who started a conversation: a display name (`tunnel.handshake.MAX_NAME_LENGTH`,
which this layer may not import) or the host's."""
CONVERSATION_STATES: Final = ("starting", "idle", "working", "waiting", "closed")
"""What a conversation's `state` may be."""
MAX_LISTED: Final = 64 + 16
"""Entries a list may hold: the most open conversations (MAX_CAST_GROUPS) and the closed ones
it names (MAX_LISTED_CLOSED)."""
CONVERSATION_OPS: Final = ("conversations", "conversation_started")
"""The host messages of this module."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationEntry:
    """One conversation of the host's list."""

    id: str
    agent: str
    """The declared agent name it runs."""
    by: str
    """Who started it: a teammate's name as the host shows it, or the host's."""
    state: str
    """One of CONVERSATION_STATES."""
    pending: int
    """Permission requests and questions that wait for an answer."""
    last: float
    """Unix seconds of its last item or event."""
    started: float
    """Unix seconds it was started (or resumed by the host process)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationList:
    """The `conversations` message: what drivers may start, and every conversation."""

    agents: tuple[str, ...]
    max: int
    conversations: tuple[ConversationEntry, ...]

    def find(self, wanted: str) -> ConversationEntry | None:
        """The conversation `wanted` names: its id, a unique start of its id, or its number
        in the list (1 for the first)."""
        if wanted.isdigit() and 1 <= int(wanted) <= len(self.conversations):
            return self.conversations[int(wanted) - 1]
        exact = [c for c in self.conversations if c.id == wanted]
        if exact:
            return exact[0]
        starts = [c for c in self.conversations if c.id.startswith(wanted)]
        return starts[0] if len(starts) == 1 and wanted else None

    @property
    def pending(self) -> int:
        """Requests waiting in every conversation together."""
        return sum(c.pending for c in self.conversations)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationStarted:
    """The `conversation_started` message: the one this teammate's request started."""

    conversation: str


def parse_conversation_message(
    message: Mapping[str, Any],
) -> ConversationList | ConversationStarted:
    """A decoded host message whose op is one of CONVERSATION_OPS, typed; BadRequest for
    anything malformed (a wrong type, a state not listed, too many entries)."""
    if message.get("op") == "conversation_started":
        return ConversationStarted(
            conversation=_text(message, "conversation", MAX_CONVERSATION_LENGTH)
        )
    if message.get("op") != "conversations":
        raise BadRequest("not a conversations message")
    agents = message.get("agents")
    listed = message.get("list")
    most = message.get("max")
    if (
        not isinstance(agents, list)
        or len(agents) > MAX_LISTED
        or not all(isinstance(a, str) and 0 < len(a) <= MAX_AGENT_NAME_LENGTH for a in agents)
    ):
        raise BadRequest("conversations: agents is a list of names")
    if not isinstance(listed, list) or len(listed) > MAX_LISTED:
        raise BadRequest("conversations: list is a bounded list")
    if type(most) is not int or most < 1:
        raise BadRequest("conversations: max is a positive integer")
    return ConversationList(
        agents=tuple(agents),
        max=most,
        conversations=tuple(_entry(entry) for entry in listed),
    )


def _entry(entry: object) -> ConversationEntry:
    if not isinstance(entry, dict):
        raise BadRequest("conversations: an entry is a map")
    state = _text(entry, "state", 16)
    if state not in CONVERSATION_STATES:
        raise BadRequest("conversations: unknown state")
    pending = entry.get("pending")
    if type(pending) is not int or pending < 0:
        raise BadRequest("conversations: pending is a count")
    return ConversationEntry(
        id=_text(entry, "id", MAX_CONVERSATION_LENGTH),
        agent=_text(entry, "agent", MAX_AGENT_NAME_LENGTH),
        by=_text(entry, "by", MAX_BY_LENGTH),
        state=state,
        pending=pending,
        last=_time(entry, "last"),
        started=_time(entry, "started"),
    )


def _text(message: Mapping[str, Any], name: str, longest: int) -> str:
    value = message.get(name)
    if not isinstance(value, str) or not 0 < len(value) <= longest:
        raise BadRequest(f"conversations: {name} is a string of 1 to {longest} characters")
    return value


def _time(message: Mapping[str, Any], name: str) -> float:
    value = message.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"conversations: {name} is a time")
    return float(value)
