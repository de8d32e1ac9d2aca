"""Which ACP session a conversation's agent continues when it starts: its own latest one (to
resume or load), or, at the first start of a forked conversation, the session of the
conversation it was forked from (to fork it, or to tell a fresh session what happened), or, at
the first start of a conversation the host user started to resume one of the agent's own past
sessions (`/resume NAME SESSION_ID`), that session.

A forked conversation's log begins with the source's items, its `agent_started` events among
them, then a `session_fork` event with `from`: what came before that event is the source's, so
its sessions are never resumed as the fork's own (docs/agents.md, "Forks"). Pure: `OriginScan` is
fed the conversation's `session_event`s newest first and says when it has seen enough.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from tunnel.log import Item

STARTED: Final = "agent_started"
FORKED: Final = "session_fork"
"""The `what` of a fork's event; with `from` it is the boundary in the new conversation."""
CONVERSATION_STARTED: Final = "conversation_started"
"""The `what` of a conversation's start; with `resume` it names the agent's past session the
conversation continues (docs/agents.md, "Several agents")."""
BY_SESSION_FORK: Final = "session_fork"
BY_TRANSCRIPT: Final = "transcript"
"""How a forked conversation's first agent session learnt the source's conversation: the
`forked` of its `agent_started`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OwnSession:
    """The conversation's own latest ACP session of this agent."""

    session_id: str
    created: float
    """Unix time of its `agent_started` that was not a resume (when the agent made it)."""
    started_seq: int
    """The seq of that `agent_started`."""
    forked: str | None
    """That start's `forked`: how the session learnt of the source, in a forked conversation."""
    boundary: int | None
    """The seq of the conversation's `session_fork` event, looked for only when `forked` is
    `transcript` (the transcript may still be owed to the agent)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ForkOrigin:
    """A forked conversation whose agent has not started a session of its own yet."""

    source: str
    """The conversation it was forked from."""
    upto: int
    """The last seq copied from the source."""
    boundary: int
    """The seq of its `session_fork` event: the items before it are the source's."""
    session_id: str | None
    """The source's ACP session of this agent at the fork (its latest `agent_started` before the
    boundary), None if it had none or another agent ran it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AskedSession:
    """A past session of the agent's own that the host user asked the conversation to resume,
    named by its `conversation_started`, before the conversation's agent started any."""

    session_id: str


Origin = OwnSession | ForkOrigin | AskedSession | None


class OriginScan:
    """Fed session events newest first (`feed` until it returns True), then `result()`."""

    def __init__(self, agent_id: str | None) -> None:
        self._agent_id = agent_id
        self._own: str | None = None
        self._created = 0.0
        self._started_seq = -1
        self._forked: str | None = None
        self._boundary: Item | None = None
        self._source_session: str | None = None
        self._result: Origin = None
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, item: Item) -> bool:
        """Take the next older session event; True once the answer is known."""
        if self._done:
            return True
        what = item.data.get("what")
        fork_boundary = what == FORKED and isinstance(item.data.get("from"), str)
        if self._own is not None:
            self._feed_own(item, what, fork_boundary)
        elif self._boundary is not None:
            self._feed_source(item, what, fork_boundary)
        elif fork_boundary:
            self._boundary = item
        elif what == CONVERSATION_STARTED and isinstance(item.data.get("resume"), str):
            # Started to resume that session, and no start of its own since: it is the one.
            return self._finish(AskedSession(session_id=item.data["resume"]))
        elif what == STARTED:
            session_id = item.data.get("session_id")
            if not isinstance(session_id, str) or item.data.get("agent_id") != self._agent_id:
                # Another agent ran it last (or one without sessions): nothing to resume.
                return self._finish(None)
            self._own = session_id
            self._feed_own(item, what, fork_boundary)
        return self._done

    def result(self) -> Origin:
        """The answer, from what was fed so far (all of the log once it ran out)."""
        if self._done:
            return self._result
        if self._own is not None:
            return self._own_session(None)
        if self._boundary is not None:
            return self._fork_origin()
        return None

    def _feed_own(self, item: Item, what: Any, fork_boundary: bool) -> None:
        if fork_boundary:
            self._finish(self._own_session(item.seq))
            return
        if what != STARTED or item.data.get("session_id") != self._own or self._started_seq >= 0:
            return
        self._created = item.created_at.timestamp()
        if item.data.get("resumed"):
            return
        self._started_seq = item.seq
        forked = item.data.get("forked")
        self._forked = forked if isinstance(forked, str) else None
        if self._forked != BY_TRANSCRIPT:
            self._finish(self._own_session(None))

    def _feed_source(self, item: Item, what: Any, fork_boundary: bool) -> None:
        if fork_boundary:
            # An earlier fork: the source never ran this agent after it.
            self._finish(self._fork_origin())
        elif what == STARTED:
            session_id = item.data.get("session_id")
            if isinstance(session_id, str) and item.data.get("agent_id") == self._agent_id:
                self._source_session = session_id
            self._finish(self._fork_origin())

    def _own_session(self, boundary: int | None) -> OwnSession:
        assert self._own is not None
        return OwnSession(
            session_id=self._own,
            created=self._created,
            started_seq=self._started_seq,
            forked=self._forked,
            boundary=boundary if self._forked == BY_TRANSCRIPT else None,
        )

    def _fork_origin(self) -> ForkOrigin:
        assert self._boundary is not None
        data = self._boundary.data
        upto = data.get("upto")
        return ForkOrigin(
            source=str(data.get("from")),
            upto=upto if isinstance(upto, int) else self._boundary.seq - 1,
            boundary=self._boundary.seq,
            session_id=self._source_session,
        )

    def _finish(self, result: Origin) -> bool:
        self._result = result
        self._done = True
        return True
