"""What is worth a notification, read off the conversation log, sans-I/O.

`Notable` takes each item and event the log publishes, in order, and returns the notification
events they make: a permission request or a question of the agent's (`elicitation_request`) that
starts waiting for a human (`Waiting`), one that ends (`Decided`: answered, or cancelled), and
the agent's turn ending (`TurnEnded`). The senders
(Web Push, webhooks, local commands) only react to these; nothing here knows about them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tunnel.log import Event, Item

ANSWERERS = ("host", "drivers")
"""Who may answer a request no approval rule names anyone for (tunnel/policy/rules.py)."""

QUESTION = "question"
"""The `kind` of a waiting question of the agent's: it has no tool call, no command and no
options (a question is answered in the page, `/answer` or an editor)."""

QUESTION_OUTCOMES = {"accept": "accepted", "decline": "declined", "cancel": "cancelled"}
"""A question's `Decided.outcome` for each answer's action."""

MAX_TEXT = 1024
"""Longest title or command a notification event keeps; the senders cut further."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestOption:
    """One answer a request offers."""

    option_id: str
    name: str
    kind: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Waiting:
    """A permission request, or a question of the agent's, waits for a human."""

    request_id: str
    title: str
    """The request's title, or the question's message."""
    kind: str
    """The tool call's kind (read, edit, execute, ...), "other" when the agent did not say;
    `QUESTION` for a question."""
    command: str | None
    """The command line an execute request would run, when it names one."""
    options: tuple[RequestOption, ...]
    answer: tuple[str, ...]
    """Who may answer: `host`, `drivers` and invited names (the approval rule's `answer`)."""

    def may_answer(self, *, role: str, person: str | None) -> bool:
        """Whether a teammate in `role`, the invited `person` or a role link's holder (None),
        may answer this request."""
        if role != "drive":
            return False
        return "drivers" in self.answer or (person is not None and person in self.answer)


@dataclass(frozen=True, slots=True, kw_only=True)
class Decided:
    """A waiting request ended: answered (`outcome` "selected") or cancelled; a question:
    "accepted", "declined" or "cancelled" (`QUESTION_OUTCOMES`)."""

    request_id: str
    outcome: str
    option_kind: str
    by: str
    kind: str = ""
    """`QUESTION` when the request was a question of the agent's."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEnded:
    """The agent finished its turn (it is idle now)."""


NotifyEvent = Waiting | Decided | TurnEnded


class Notable:
    """Turns the log's entries into notification events; feed every entry in order."""

    def __init__(self) -> None:
        self._waiting: dict[str, Waiting] = {}
        self._running = False

    def waiting(self, request_id: str) -> Waiting | None:
        """The request if it still waits."""
        return self._waiting.get(request_id)

    def receive(self, entry: Item | Event) -> list[NotifyEvent]:
        """The notification events `entry` makes (most make none)."""
        if isinstance(entry, Event):
            if entry.kind != "status":
                return []
            running = entry.data.get("state") == "running"
            ended = self._running and not running
            self._running = running
            return [TurnEnded()] if ended else []
        data = entry.data
        if entry.type == "permission_request":
            waiting = _waiting(data)
            if waiting is None or waiting.request_id in self._waiting:
                return []
            self._waiting[waiting.request_id] = waiting
            return [waiting]
        if entry.type == "elicitation_request":
            waiting = _question(data)
            if waiting is None or waiting.request_id in self._waiting:
                return []
            self._waiting[waiting.request_id] = waiting
            return [waiting]
        if entry.type == "elicitation_response":
            request_id = data.get("request_id")
            if not isinstance(request_id, str) or self._waiting.pop(request_id, None) is None:
                return []
            action = _text(data.get("action"))
            return [
                Decided(
                    request_id=request_id,
                    outcome=QUESTION_OUTCOMES.get(action, "cancelled"),
                    option_kind="",
                    by=entry.created_by or "",
                    kind=QUESTION,
                )
            ]
        if entry.type == "permission_decision":
            request_id = data.get("request_id")
            if not isinstance(request_id, str) or self._waiting.pop(request_id, None) is None:
                return []
            return [
                Decided(
                    request_id=request_id,
                    outcome=_text(data.get("outcome")) or "cancelled",
                    option_kind=_text(data.get("option_kind")),
                    by=entry.created_by or "",
                )
            ]
        return []


def _waiting(data: Mapping[str, Any]) -> Waiting | None:
    """A `permission_request` that waits for a human: not one the approval policy or a
    remembered answer decided as it was recorded (its decision follows at once)."""
    request_id = data.get("request_id")
    if not isinstance(request_id, str) or "policy" in data or "remembered" in data:
        return None
    call = data.get("tool_call")
    call = call if isinstance(call, Mapping) else {}
    approval = data.get("approval")
    answer: Sequence[Any] = ANSWERERS
    if isinstance(approval, Mapping) and isinstance(approval.get("answer"), list):
        answer = approval["answer"]
    options = []
    for option in data.get("options") or []:
        if isinstance(option, Mapping):
            fields = [_text(option.get(k)) for k in ("option_id", "name", "kind")]
            if fields[0]:
                options.append(RequestOption(option_id=fields[0], name=fields[1], kind=fields[2]))
    return Waiting(
        request_id=request_id,
        title=_text(data.get("title")) or _text(call.get("title")) or "Permission requested",
        kind=_text(call.get("kind")) or "other",
        command=_command(call.get("input")),
        options=tuple(options),
        answer=tuple(a for a in answer if isinstance(a, str)),
    )


def _question(data: Mapping[str, Any]) -> Waiting | None:
    """An `elicitation_request`: any driver (or the host) answers it; no approval rule names
    anyone for a question."""
    request_id = data.get("request_id")
    if not isinstance(request_id, str):
        return None
    return Waiting(
        request_id=request_id,
        title=_text(data.get("message")) or "The agent asks a question",
        kind=QUESTION,
        command=None,
        options=(),
        answer=ANSWERERS,
    )


def _text(value: Any) -> str:
    return value[:MAX_TEXT] if isinstance(value, str) else ""


def _command(raw: Any) -> str | None:
    """The command line of an execute tool call's input (`command` or `cmd`, a string or an
    argv, and `args`), when it has one."""
    if not isinstance(raw, Mapping):
        return None
    command = raw.get("command", raw.get("cmd"))
    if isinstance(command, list) and all(isinstance(part, str) for part in command):
        command = " ".join(command)
    if not isinstance(command, str):
        return None
    args = raw.get("args")
    if isinstance(args, list) and all(isinstance(part, str) for part in args):
        command = " ".join([command, *args])
    return command[:MAX_TEXT]
