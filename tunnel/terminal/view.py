"""A local view of the conversation: the last seq seen, the open permission requests, and the
agent's latest commands and settings (modes, models, config options).

`tunnel attach` keeps one, fed with every item it receives, to de-duplicate across reconnects (it
resubscribes with the last seq it holds) and to know what /allow, /deny, /mode, /model and /help
refer to. When it joins with only the end of the conversation, it feeds the view earlier items
too (`absorb_earlier`), newest first, for the state they hold. The host console builds one from
the session's own state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tunnel.terminal.questions import PendingQuestion

MAX_CLOSED_REMEMBERED = 4096
"""Permission requests remembered as answered, so an earlier item cannot reopen one; older ones
are forgotten (a request that old is long answered)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Option:
    """One choice of a permission request, as the agent offered it."""

    option_id: str
    name: str
    kind: str
    """allow_once, allow_always, reject_once or reject_always."""

    @property
    def bypass(self) -> bool:
        """Whether choosing it turns permission checks off (Claude Code's "bypass permissions").

        Such an option is never picked by a keyword (/allow always): only by its number or id.
        """
        return "bypass" in self.option_id.lower() or "bypass" in self.name.lower()


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingPermission:
    """An open permission request and its options, in the agent's order."""

    request_id: str
    title: str
    options: tuple[Option, ...]

    @classmethod
    def from_data(cls, request_id: str, data: Mapping[str, Any]) -> PendingPermission:
        """The request described by a `permission_request` item's data."""
        options = data.get("options")
        return cls(
            request_id=request_id,
            title=str(data.get("title", "")),
            options=tuple(
                Option(
                    option_id=str(o.get("option_id")),
                    name=str(o.get("name")),
                    kind=str(o.get("kind", "")),
                )
                for o in (options if isinstance(options, list) else [])
                if isinstance(o, Mapping)
            ),
        )

    def of_kind(self, kind: str) -> list[Option]:
        """The options of exactly this kind, bypass options left out."""
        return [o for o in self.options if o.kind == kind and not o.bypass]

    def option(self, option_id: str) -> Option | None:
        return next((o for o in self.options if o.option_id == option_id), None)

    def listing(self) -> str:
        """The options numbered as /allow N counts them: `1. Allow once (allow_once, id yes)`."""
        return "; ".join(
            f"{n}. {o.name} ({o.kind}, id {o.option_id})" for n, o in enumerate(self.options, 1)
        )


@dataclass(slots=True)
class ConversationView:
    """What the typed commands refer to: open permissions, the agent's commands and settings."""

    last_seq: int | None = None
    pending: dict[str, PendingPermission] = field(default_factory=dict)
    commands: Sequence[Mapping[str, Any]] = field(default_factory=list)
    """The agent's latest advertised commands (`name`, `description`, `hint`)."""
    settings: Mapping[str, Any] = field(default_factory=dict)
    """The latest `settings` session event's data: `modes`, `models`, `config_options`."""
    known: set[str] = field(default_factory=set)
    """Which of `commands` and `settings` an item set (an earlier one never overrides it)."""
    closed: dict[str, None] = field(default_factory=dict)
    """Permission requests and questions seen answered, oldest first (bounded:
    MAX_CLOSED_REMEMBERED)."""
    questions: dict[str, PendingQuestion] = field(default_factory=dict)
    """The agent's open questions (`elicitation_request`), oldest first."""

    def accept(self, item: Mapping[str, Any]) -> bool:
        """Take one item; False if it was already seen (a duplicate to drop)."""
        seq = item.get("seq")
        if not isinstance(seq, int) or (self.last_seq is not None and seq <= self.last_seq):
            return False
        self.last_seq = seq
        self._take(item, newest=True)
        return True

    def absorb_earlier(self, item: Mapping[str, Any]) -> None:
        """Take an item from before those accepted, newest first: what it says counts only where
        nothing later said otherwise."""
        self._take(item, newest=False)

    @property
    def complete(self) -> bool:
        """Whether the agent's commands and settings are known (earlier items can add nothing
        but old permission requests)."""
        return {"commands", "settings"} <= self.known

    def _take(self, item: Mapping[str, Any], *, newest: bool) -> None:
        data = item.get("data")
        data = data if isinstance(data, Mapping) else {}
        kind = item.get("type")
        if kind == "session_event":
            what = data.get("what")
            if what not in ("commands", "settings") or (not newest and what in self.known):
                return
            if what == "commands" and isinstance(data.get("commands"), list):
                self.commands = [c for c in data["commands"] if isinstance(c, Mapping)]
                self.known.add("commands")
            elif what == "settings":
                self.settings = data
                self.known.add("settings")
            return
        request_id = data.get("request_id")
        if not isinstance(request_id, str):
            return
        if (
            kind == "permission_request"
            and request_id not in self.closed
            # Decided by the approval policy, or by an answer remembered, before anyone saw it:
            # never open (its decision follows it).
            and "policy" not in data
            and "remembered" not in data
        ):
            request = PendingPermission.from_data(request_id, data)
            if newest:
                self.pending[request_id] = request
            elif request_id not in self.pending:
                # Older than every request held: first in line, so /allow still answers the
                # latest one.
                self.pending = {request_id: request, **self.pending}
        elif kind == "elicitation_request" and request_id not in self.closed:
            question = PendingQuestion.from_data(request_id, data)
            if newest:
                self.questions[request_id] = question
            elif request_id not in self.questions:
                self.questions = {request_id: question, **self.questions}
        elif kind in ("permission_decision", "elicitation_response"):
            self.pending.pop(request_id, None)
            self.questions.pop(request_id, None)
            self.closed[request_id] = None
            while len(self.closed) > MAX_CLOSED_REMEMBERED:
                del self.closed[next(iter(self.closed))]
