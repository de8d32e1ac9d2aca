"""What a host stopped mid-turn left open, found and closed by the next host that starts.

A host killed (or stopped) in the middle of a turn leaves the end of its conversation open: a
permission request nobody can answer any more, a tool call that never finishes, prompts that
were queued and never ran, a stream stored only in part. When a chat session starts it reads the
end of its conversation (at most `SCAN_LIMIT` items, and never past the record of the previous
such restart) and closes what it finds, as the host (`created_by: "host"`):

- each open `permission_request` gets a `permission_decision` with `outcome: "cancelled"` and
  `reason: "interrupted by a host restart"`; each open question of the agent's
  (`elicitation_request`) an `elicitation_response` with `action: "cancel"` and the same reason;
- each tool call still `pending` or `in_progress` gets a `tool_call_update` with
  `status: "failed"` and the same reason;
- then one `session_event` (`what: "host_restarted"`) says what was closed: the turn that was
  cut short (`interrupted_turn`), the prompts that were never run (`dropped_prompts`, their seqs:
  they are not run now, the agent may have moved on), and whether the turn's streamed text was
  stored only in part (`partial_text`).

A fork's first start (its newest item is the `session_fork` that ends the copied items) closes
what the copy holds open the same way, with `reason: "left open where the conversation was
forked"`: the source's turn goes on in the source.

How a prompt is known to have run: every item a turn produces carries `turn` (the prompt's seq),
and a turn that produced none ends with a `turn_ended` session event that does
(`tunnel.agents.chat`). Turns run in the order their prompts were stored, so the prompts after
the newest turn seen never ran. `find_interrupted` and `closing_items` do no I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tunnel.log import Item, Log, NewItem

from .recorder import Recorder

__all__ = [
    "FORKED",
    "INTERRUPTED",
    "RESTART_EVENT",
    "SCAN_LIMIT",
    "Interrupted",
    "close_interrupted",
    "closing_items",
    "find_interrupted",
]

logger = logging.getLogger("tunnel.agents.recovery")

SCAN_LIMIT = 2000
"""Items read back from the end of the conversation at start; anything older stays as it is."""

RESTART_EVENT = "host_restarted"
"""The `what` of the session event that records what a restart closed."""

INTERRUPTED = "interrupted by a host restart"
"""The `reason` of every item that closes something a stopped host left open."""

FORKED = "left open where the conversation was forked"
"""The `reason` instead when what is open came with a fork's copy (docs/log.md, "Several
conversations, and forks"): the source's turn goes on there, not here."""
FORK_EVENT = "session_fork"

_OPEN_TOOL = ("pending", "in_progress")
_PAGE = 200


@dataclass(frozen=True, slots=True, kw_only=True)
class Interrupted:
    """What the end of a conversation leaves open (all empty: nothing)."""

    permissions: tuple[Item, ...] = ()
    """The open `permission_request` items, oldest first."""
    questions: tuple[Item, ...] = ()
    """The open `elicitation_request` items, oldest first."""
    tool_calls: tuple[Item, ...] = ()
    """The newest item of each tool call still pending or in progress, oldest first."""
    turn: int | None = None
    """The turn (its prompt's seq) that was cut short, if anything shows it was."""
    dropped: tuple[int, ...] = ()
    """The seqs of the prompts that never ran, oldest first."""
    partial: bool = False
    """Whether the stream of the turn cut short was stored only in part."""
    forked: bool = False
    """Whether what is open came with a fork's copy: the conversation's newest item is the
    `session_fork` that ends the copy, so nothing of its own ran yet."""

    def __bool__(self) -> bool:
        return bool(
            self.permissions
            or self.questions
            or self.tool_calls
            or self.dropped
            or self.turn is not None
        )


def _turn(item: Item) -> int | None:
    turn = item.data.get("turn")
    return turn if type(turn) is int else None


class _Scan:
    """Reads a conversation newest first, keeping only what may be open: memory is what is
    open, not what was read."""

    def __init__(self) -> None:
        self.decided: set[str] = set()
        self.permissions: list[Item] = []
        self.answered: set[str] = set()
        self.questions: list[Item] = []
        self.tools_seen: set[tuple[int | None, str]] = set()
        self.tools: list[Item] = []
        self.continued: set[str] = set()
        self.parts: list[Item] = []  # stream parts nothing continues
        self.prompts: list[int] = []
        self.newest_turn: int | None = None
        self.newest_agent: int | None = None
        self.first = True
        self.forked = False

    def feed(self, item: Item) -> bool:
        """Take the next older item; False once the previous restart's record is reached
        (everything before it was closed then)."""
        data = item.data
        first, self.first = self.first, False
        if item.type == "session_event" and data.get("what") == RESTART_EVENT:
            return False
        if item.type == "session_event" and data.get("what") == FORK_EVENT and "from" in data:
            self.forked = first
            return True
        if item.type == "message" and data.get("role") == "user":
            self.prompts.append(item.seq)
            return True
        turn = _turn(item)
        if turn is not None and (self.newest_turn is None or turn > self.newest_turn):
            self.newest_turn = turn
        if self.newest_agent is None and item.created_by == "agent":
            self.newest_agent = item.seq
        request_id = data.get("request_id")
        if item.type == "permission_decision" and isinstance(request_id, str):
            self.decided.add(request_id)
        elif item.type == "permission_request" and isinstance(request_id, str):
            if request_id not in self.decided:
                self.permissions.append(item)
        elif item.type == "elicitation_response" and isinstance(request_id, str):
            self.answered.add(request_id)
        elif item.type == "elicitation_request" and isinstance(request_id, str):
            if request_id not in self.answered:
                self.questions.append(item)
        elif item.type in ("tool_call", "tool_call_update"):
            call_id = data.get("tool_call_id")
            status = data.get("status")
            # The newest status a tool call was given is where it stands.
            if isinstance(call_id, str) and isinstance(status, str):
                key = (turn, call_id)
                if key not in self.tools_seen:
                    self.tools_seen.add(key)
                    if status in _OPEN_TOOL:
                        self.tools.append(item)
        elif item.type in ("message", "reasoning"):
            continues = data.get("continues")
            if isinstance(continues, str):
                self.continued.add(continues)
            if data.get("continued") is True and item.response_id not in self.continued:
                self.parts.append(item)
        return True

    def result(self) -> Interrupted:
        newest_turn = self.newest_turn
        cut_short = [*self.permissions, *self.questions, *self.tools, *self.parts]
        running = None
        if newest_turn is not None and any(_turn(item) == newest_turn for item in cut_short):
            running = newest_turn
        after = newest_turn if newest_turn is not None else self.newest_agent
        return Interrupted(
            permissions=tuple(sorted(self.permissions, key=lambda i: i.seq)),
            questions=tuple(sorted(self.questions, key=lambda i: i.seq)),
            tool_calls=tuple(sorted(self.tools, key=lambda i: i.seq)),
            turn=running,
            dropped=tuple(sorted(p for p in self.prompts if after is None or p > after)),
            partial=running is not None and any(_turn(p) == running for p in self.parts),
            forked=self.forked,
        )


def find_interrupted(newest_first: Iterable[Item]) -> Interrupted:
    """What is open at the end of a conversation, from its items newest first; stops at the
    record of the previous restart (everything before it was closed then)."""
    scan = _Scan()
    for item in newest_first:
        if not scan.feed(item):
            break
    return scan.result()


def closing_items(found: Interrupted) -> list[NewItem]:
    """The items that close what `found` holds, in the order they are to be stored."""
    if not found:
        return []
    reason = FORKED if found.forked else INTERRUPTED
    closing: list[NewItem] = []
    for request in found.permissions:
        data: dict[str, Any] = {
            "request_id": request.data["request_id"],
            "option_id": "",
            "option_name": "Cancelled",
            "option_kind": "",
            "outcome": "cancelled",
            "reason": reason,
        }
        _keep_turn(data, request)
        closing.append(
            NewItem(type="permission_decision", data=data, created_by="host", status="completed")
        )
    for question in found.questions:
        data = {"request_id": question.data["request_id"], "action": "cancel"}
        data["reason"] = reason
        closing.append(
            NewItem(type="elicitation_response", data=data, created_by="host", status="completed")
        )
    for call in found.tool_calls:
        data = {"tool_call_id": call.data["tool_call_id"], "status": "failed"}
        _keep_turn(data, call)
        data["reason"] = reason
        closing.append(
            NewItem(type="tool_call_update", data=data, created_by="host", status="completed")
        )
    closing.append(
        NewItem(
            type="session_event",
            data={
                "what": RESTART_EVENT,
                "reason": reason,
                "interrupted_turn": found.turn,
                "dropped_prompts": list(found.dropped),
                "closed_permissions": [i.data["request_id"] for i in found.permissions],
                "closed_questions": [i.data["request_id"] for i in found.questions],
                "closed_tool_calls": [i.data["tool_call_id"] for i in found.tool_calls],
                "partial_text": found.partial,
            },
            created_by="host",
        )
    )
    return closing


def _keep_turn(data: dict[str, Any], item: Item) -> None:
    turn = _turn(item)
    if turn is not None:
        data["turn"] = turn


async def close_interrupted(
    log: Log, recorder: Recorder, *, limit: int = SCAN_LIMIT
) -> Interrupted:
    """Find what the end of the recorder's conversation leaves open and store what closes it
    (held, in order, if the log cannot be written now). Returns what was found.

    Reads a page at a time, newest first, and keeps only what may be open."""
    scan = _Scan()
    before: int | None = None
    read = 0
    while read < limit:
        page = await log.query(
            recorder.conversation_id, before=before, limit=min(_PAGE, limit - read), order="desc"
        )
        if not all(scan.feed(item) for item in page) or len(page) < _PAGE:
            break
        read += len(page)
        before = page[-1].seq
    found = scan.result()
    for new in closing_items(found):
        await recorder.writer.append_or_hold(new)
    if found:
        logger.warning(
            "the previous host stopped mid-turn: closed %d permission requests and %d tool "
            "calls; %d queued prompts were not run",
            len(found.permissions),
            len(found.tool_calls),
            len(found.dropped),
        )
    return found
