"""The conversations one host serves at once: each with its own agent, log, presence and
broadcast, started and closed by drivers (docs/application.md, "Conversations").

`Conversations` is the registry: which agents drivers may start (`--agent NAME=SPEC`), which
conversations run, and the list every channel is sent. A conversation's parts (its agent session,
broadcast, head signer) are built by the host (`tunnel.host.share`) through a `Builder`; here they
are started, stopped and listed. What a host starts and closes it records in the conversation's
own log (`session_event`s `conversation_started` and `conversation_closed`), so a host that
restarts resumes the conversations that were open, with their agents.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import anyio
from anyio.abc import TaskGroup, TaskStatus

from tunnel.agents import AgentSession
from tunnel.app.errors import AppError
from tunnel.app.requests import MAX_AGENT_NAME_LENGTH
from tunnel.host.limits import DEFAULT_MAX_CONVERSATIONS
from tunnel.host.presence import Presence
from tunnel.log import Item, Log, NewItem, StoreError
from tunnel.process.groups import unwrapped
from tunnel.proto import MAX_CAST_GROUPS

logger = logging.getLogger("tunnel.conversations")

AGENT_NAME: Final = re.compile(rf"[a-z0-9][a-z0-9_-]{{0,{MAX_AGENT_NAME_LENGTH - 1}}}")
"""What an agent name is: lowercase letters, digits, `-` and `_`, starting with a letter or a
digit; short enough to type in `/new NAME`."""
MAX_CONVERSATIONS: Final = MAX_CAST_GROUPS
"""The most `--max-conversations` may be: each open conversation casts to a group of its own on
the host's link (docs/protocol.md, "Broadcast")."""
MAX_LISTED_CLOSED: Final = 16
"""Closed conversations the list names at most, the most recently closed first."""
LAST_ACTIVITY_STEP: Final = 30.0
"""Seconds a conversation's last activity may run ahead of what the list last said before
the list is sent again for it alone: within a turn its state says it is busy."""
RESUME_SCAN: Final = 200
"""Session events read back from a conversation's end, at most, to find whether it was closed
when a host restarts: a conversation records one per start, close, settings change or login."""
STARTED: Final = "conversation_started"
CLOSED: Final = "conversation_closed"
FORKED: Final = "session_fork"
"""The `what` of the event a fork records in both conversations: in the new one (after the
copied items) `from`, `upto` and `agent`; in the one forked, `to` and `upto`."""
CLOSE_CAST_WAIT: Final = 2.0
"""Seconds a close waits for its `conversation_closed` to be cast before the agent and the
broadcast stop, at most."""
FORK_PAGE: Final = 200
"""Items copied per append when a conversation is forked."""


def check_agent_name(name: str) -> str:
    """`name` if it is an agent name, else ValueError saying what one is."""
    if not AGENT_NAME.fullmatch(name):
        raise ValueError(
            f"agent name {name!r}: 1 to {MAX_AGENT_NAME_LENGTH} of a-z 0-9 - _,"
            " starting with a letter or a digit"
        )
    return name


def split_agent(value: str) -> tuple[str | None, str]:
    """`--agent` as (name, spec): `NAME=SPEC` names it, a bare SPEC does not. A spec's own `=`
    (`pty:env A=B sh`) comes after its kind, so it never reads as a name."""
    name, sep, spec = value.partition("=")
    if sep and ":" not in name and " " not in name:
        return check_agent_name(name), spec
    return None, value


def agent_label(spec: str) -> str:
    """The name an unnamed `--agent SPEC` is offered under: `demo`, or its program's name
    (`acp:npx gemini` is `gemini`: the first word that is not a runner), as an agent name."""
    words = spec.strip().partition(":")[2].split() if ":" in spec else [spec.strip()]
    runners = {"npx", "node", "env", "uvx", "python", "python3", "bunx", "pnpm", "exec"}
    for word in words:
        base = word.rsplit("/", 1)[-1].lower()
        if base in runners or base.startswith("-") or "=" in base:
            continue
        name = re.sub(r"[^a-z0-9_-]", "-", base).strip("-_")[:MAX_AGENT_NAME_LENGTH]
        if AGENT_NAME.fullmatch(name):
            return name
    return "agent"


def new_conversation_id() -> str:
    """A fresh id for a conversation started by a driver: `c-` and 8 hex digits."""
    return "c-" + secrets.token_hex(4)


class ConversationParts(Protocol):
    """What the host builds for one conversation (tunnel/host/share.py)."""

    @property
    def session(self) -> AgentSession: ...

    @property
    def presence(self) -> Presence: ...

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the agent, the broadcast and the head signer until cancelled; started once the
        agent runs."""

    async def cast_through(self, seq: int) -> None:
        """Return once the broadcast has cast the items up to `seq` (or at once when it cannot:
        bounded by the caller)."""


Builder = Callable[[str, str, int], ConversationParts]
"""Builds a conversation's parts from (conversation id, agent name, broadcast group)."""


@dataclass(slots=True, kw_only=True)
class Conversation:
    """One conversation of the host: its id, which declared agent runs it, who started it."""

    id: str
    agent: str
    by: str
    started: float
    """Unix seconds when it was started (or resumed by this process)."""
    group: int
    """The broadcast group its casts go to on the host's link."""
    parts: ConversationParts
    last: float = 0.0
    """Unix seconds of its last item or event."""
    closed: bool = False
    running: bool = False
    """Whether its agent runs (after `start`, until `close`)."""
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    @property
    def session(self) -> AgentSession:
        return self.parts.session

    @property
    def presence(self) -> Presence:
        return self.parts.presence

    def state(self) -> str:
        """`starting`, `idle`, `working`, `waiting` or `closed` (docs/application.md)."""
        if self.closed:
            return "closed"
        if not self.running:
            return "starting"
        if self.pending():
            return "waiting"
        status = self.session.status()
        return "working" if status is not None and status.get("state") == "running" else "idle"

    def pending(self) -> int:
        """Permission requests and questions of the agent that wait for an answer."""
        if self.closed:
            return 0
        return len(self.session.open_permissions()) + len(self.session.pending_elicitations())

    def summary(self) -> dict[str, Any]:
        """This conversation as an entry of the `conversations` message."""
        return {
            "id": self.id,
            "agent": self.agent,
            "by": self.by,
            "state": self.state(),
            "pending": self.pending(),
            "last": round(self.last, 3),
            "started": round(self.started, 3),
        }


class Conversations:
    """The host's conversations: the first runs from the start, drivers start and close more."""

    def __init__(
        self,
        *,
        log: Log,
        agents: dict[str, str],
        build: Builder,
        host_name: str,
        max_open: int = DEFAULT_MAX_CONVERSATIONS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`agents` maps each declared name to its spec, the first one the first
        conversation's."""
        if not agents:
            raise ValueError("a host needs at least one agent")
        if not 1 <= max_open <= MAX_CONVERSATIONS:
            raise ValueError(f"--max-conversations is 1 to {MAX_CONVERSATIONS}")
        for name in agents:
            check_agent_name(name)
        self._log = log
        self._agents = dict(agents)
        self._build = build
        self._host_name = host_name
        self.max_open = max_open
        self._clock = clock
        self._all: dict[str, Conversation] = {}
        self._first: Conversation | None = None
        self._task_group: TaskGroup | None = None
        self._changed = anyio.Event()
        self._forking = 0
        """Forks copying their log now: each holds a place among `max_open` until it opens."""
        self.on_started: Callable[[Conversation], Awaitable[None]] | None = None
        """Told of each conversation started after the first (the host's notifier follows
        it)."""
        self.on_closed: Callable[[Conversation], None] | None = None
        """Told of each conversation closed."""
        self.version = 0
        """Grows by one on every change of the list (`wait_changed`)."""

    # -- what channels use ----------------------------------------------------------------------

    @property
    def agents(self) -> list[str]:
        """The agent names drivers may start, in the order declared."""
        return list(self._agents)

    @property
    def first(self) -> Conversation:
        """The conversation the host started with: an open naming no other follows it."""
        assert self._first is not None, "run() has not started"
        return self._first

    def get(self, conversation_id: str | None) -> Conversation | None:
        """The conversation of that id, open or closed, or None."""
        return None if conversation_id is None else self._all.get(conversation_id)

    def for_channel(self, conversation_id: str | None) -> Conversation:
        """What a channel whose open names `conversation_id` follows: that one, else the
        first."""
        return self.get(conversation_id) or self.first

    def open_conversations(self) -> list[Conversation]:
        """Those whose agent runs or starts, oldest first."""
        return [c for c in self._all.values() if not c.closed]

    def listing(self) -> dict[str, Any]:
        """The `conversations` message (docs/application.md, "Conversations")."""
        open_ones = sorted(self.open_conversations(), key=lambda c: -c.started)
        closed = sorted((c for c in self._all.values() if c.closed), key=lambda c: -c.last)[
            :MAX_LISTED_CLOSED
        ]
        return {
            "op": "conversations",
            "agents": self.agents,
            "max": self.max_open,
            "list": [c.summary() for c in (*open_ones, *closed)],
        }

    async def wait_changed(self, version: int) -> int:
        """Return the version once it differs from `version` (a change since)."""
        while self.version == version:
            await self._changed.wait()
        return self.version

    def touch(self) -> None:
        """Something in a conversation changed (an item, an event): the list may read
        otherwise."""
        self.version += 1
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    def spec(self, agent: str) -> str | None:
        """The spec the declared `agent` runs (`acp:...`), None for a name not declared."""
        return self._agents.get(agent)

    async def start(self, agent: str, *, by: str, resume: str | None = None) -> Conversation:
        """Start a conversation with the declared `agent`, recorded as started by `by`; with
        `resume`, its agent resumes that past ACP session of its own (the host console's
        `/resume`) instead of starting a new one.

        Raises AppError `unknown_request` for an agent not declared, `agent_unavailable` when
        `max_open` conversations are open already or the agent cannot start.
        """
        if agent not in self._agents:
            known = ", ".join(self._agents)
            raise AppError("unknown_request", f"no agent {agent!r} here; this host offers {known}")
        return await self._driver_open(
            new_conversation_id(), agent, by=by, record=True, resume=resume
        )

    async def close(self, conversation_id: str, *, by: str) -> None:
        """Stop the conversation's agent; its log stays and its channels may read it.

        Raises AppError `unknown_request` for no such open conversation.
        """
        conversation = self._all.get(conversation_id)
        if conversation is None or conversation.closed:
            raise AppError("unknown_request", f"no open conversation {conversation_id!r}")
        # Its turn ends first, as a cancel ends it: what waits for an answer is recorded
        # cancelled before the close, so its channels and the notifier see it end.
        if conversation.state() in ("working", "waiting"):
            with anyio.move_on_after(CLOSE_CAST_WAIT):
                try:
                    await conversation.session.cancel(by=by)
                except AppError as exc:  # the close goes on: the agent stops anyway
                    logger.warning(
                        "closing %s, its turn was not cancelled: %s", conversation.id, exc
                    )
        seq = await self._record(conversation.id, CLOSED, by=by)
        # Its channels are told before the broadcast stops with the agent.
        with anyio.move_on_after(CLOSE_CAST_WAIT):
            await conversation.parts.cast_through(seq)
        conversation.closed = True
        conversation.running = False
        conversation.last = self._clock()
        conversation.scope.cancel()
        if self.on_closed is not None:
            self.on_closed(conversation)
        self._forget_closed()
        logger.info("%s closed conversation %s", by, conversation.id)
        self.touch()

    async def fork(self, source_id: str, upto: int, *, by: str) -> Conversation:
        """Start a conversation whose log is `source_id`'s items 0..`upto` and a `session_fork`
        event, with the same agent; the source records the fork too (docs/log.md, "Forks").

        Raises AppError `unknown_request` for a conversation this host does not list,
        `bad_request` for a seq it does not have, `agent_unavailable` as `start` does.
        """
        source = self._all.get(source_id)
        if source is None:
            raise AppError("unknown_request", f"no conversation {source_id!r} here")
        if source.agent not in self._agents:
            raise AppError("unknown_request", f"the agent {source.agent} is no longer offered")
        info = await self._log.get_conversation(source_id)
        if info is None or upto > info.last_seq:
            raise AppError("bad_request", f"{source_id} has no item {upto}")
        if self._is_full():
            raise AppError("agent_unavailable", self._full())
        fork_id = new_conversation_id()
        # Its place is held while the log is copied: a start or another fork meanwhile is
        # refused, not this one after its copy and its `session_fork` records are written.
        self._forking += 1
        try:
            after = -1
            while after < upto:
                page = await self._log.query(
                    source_id, after=after, before=upto + 1, limit=FORK_PAGE
                )
                if not page:
                    raise AppError("bad_request", f"{source_id} has no item {after + 1}")
                await self._log.append(fork_id, [_copy(item) for item in page])
                after = page[-1].seq
            await self._record(
                fork_id, FORKED, by=by, agent=source.agent, **{"from": source_id}, upto=upto
            )
            await self._record(source_id, FORKED, by=by, to=fork_id, upto=upto)
        finally:
            self._forking -= 1
        # No await before `_open` checks the places: the one held is this fork's.
        return await self._driver_open(fork_id, source.agent, by=by, record=False)

    async def _driver_open(
        self, conversation_id: str, agent: str, *, by: str, record: bool, resume: str | None = None
    ) -> Conversation:
        """`_open` for a driver's start or fork: one whose agent could not start is recorded
        closed, so the driver told so does not find it started by the next host."""
        try:
            return await self._open(conversation_id, agent, by=by, record=record, resume=resume)
        except AppError:
            failed = self._all.get(conversation_id)
            if failed is not None and failed.closed:
                with contextlib.suppress(StoreError):
                    await self._record(conversation_id, CLOSED, by=self._host_name)
            raise

    def _is_full(self) -> bool:
        return len(self.open_conversations()) + self._forking >= self.max_open

    def _full(self) -> str:
        return f"{self.max_open} conversations are open, the most this host runs: close one first"

    # -- running --------------------------------------------------------------------------------

    async def run(
        self,
        first_id: str,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run the first conversation and resume the others the log says were open; start
        more on request, until cancelled. Started once the first one's agent runs."""
        first_agent = next(iter(self._agents))
        async with anyio.create_task_group() as tg:
            self._task_group = tg
            self._first = await self._open(first_id, first_agent, by=self._host_name, record=False)
            for conversation_id, agent, by in await self._left_open(first_id):
                try:
                    await self._open(conversation_id, agent, by=by, record=False)
                except AppError as exc:
                    logger.warning("cannot resume conversation %s: %s", conversation_id, exc)
            task_status.started()
            await anyio.sleep_forever()

    async def _open(
        self, conversation_id: str, agent: str, *, by: str, record: bool, resume: str | None = None
    ) -> Conversation:
        if self._is_full():
            raise AppError("agent_unavailable", self._full())
        group = self._free_group()
        parts = self._build(conversation_id, agent, group)
        now = self._clock()
        conversation = Conversation(
            id=conversation_id, agent=agent, by=by, started=now, last=now, group=group, parts=parts
        )
        self._all[conversation_id] = conversation
        if record:
            asked = {} if resume is None else {"resume": resume}
            await self._record(conversation_id, STARTED, by=by, agent=agent, **asked)
        assert self._task_group is not None
        try:
            await self._task_group.start(self._serve, conversation)
        except Exception as exc:
            conversation.closed = True
            self.touch()
            if self._first is None:
                raise  # the host's own start: the command says why, in one line
            logger.warning("conversation %s could not start: %s", conversation_id, unwrapped(exc))
            # Only the host console resumes a past session: its user may read why not.
            why = "" if resume is None else f": {unwrapped(exc)}"
            raise AppError("agent_unavailable", f"the agent {agent} could not start{why}") from None
        logger.info("%s started conversation %s with %s", by, conversation_id, agent)
        if self.on_started is not None:
            await self.on_started(conversation)
        self.touch()
        return conversation

    async def _serve(self, conversation: Conversation, *, task_status: TaskStatus[None]) -> None:
        started = False
        try:
            with conversation.scope:
                async with anyio.create_task_group() as tg:
                    await tg.start(conversation.parts.run)
                    conversation.running = started = True
                    tg.start_soon(self._follow, conversation)
                    task_status.started()
        except Exception:
            if not started:
                raise
            # One conversation's failure ends it alone: the host and the others go on.
            logger.exception("conversation %s failed", conversation.id)
            conversation.closed = True
            conversation.running = False
            self.touch()

    async def _follow(self, conversation: Conversation) -> None:
        """Note each item and event of the conversation: its state and last activity change."""
        info = await self._log.get_conversation(conversation.id)
        after = -1 if info is None else info.last_seq
        told = (conversation.state(), conversation.pending(), conversation.last)
        async with self._log.subscribe(conversation.id, after=after) as sub:
            while True:
                await sub.receive_batch()
                conversation.last = now = self._clock()
                # The list goes to every channel of every conversation: only what a reader
                # sees changed is news (its state, what waits, or a last activity gone stale),
                # not each item of a busy turn.
                state, pending = conversation.state(), conversation.pending()
                if (state, pending) != told[:2] or now - told[2] >= LAST_ACTIVITY_STEP:
                    told = (state, pending, now)
                    self.touch()

    def _forget_closed(self) -> None:
        """Keep the newest MAX_LISTED_CLOSED closed conversations, so starting and closing
        does not grow the host; their logs stay, and their channels hold what they follow."""
        closed = sorted((c for c in self._all.values() if c.closed), key=lambda c: -c.last)
        for old in closed[MAX_LISTED_CLOSED:]:
            if old is not self._first:
                del self._all[old.id]

    def _free_group(self) -> int:
        used = {c.group for c in self.open_conversations()}
        return next(g for g in range(MAX_CAST_GROUPS) if g not in used)

    async def _record(
        self, conversation_id: str, what: str, *, by: str, **details: str | int
    ) -> int:
        """Append a `session_event`; return its seq."""
        item = NewItem(type="session_event", data={"what": what, **details}, created_by=by)
        (stored,) = await self._log.append(conversation_id, [item])
        return stored.seq

    async def _left_open(self, first_id: str) -> list[tuple[str, str, str]]:
        """(id, agent, started by) of each conversation this host started and did not close,
        whose agent is still declared; the newest `max_open - 1`."""
        found: list[tuple[str, str, str]] = []
        for info in await self._log.list_conversations():
            if info.conversation_id == first_id:
                continue
            opened = await self._lifecycle(info.conversation_id)
            if opened is None:
                continue
            agent, by = opened
            if agent not in self._agents:
                logger.warning(
                    "conversation %s ran the agent %s, which this host no longer declares;"
                    " not resumed",
                    info.conversation_id,
                    agent,
                )
                continue
            found.append((info.conversation_id, agent, by))
            if len(found) >= self.max_open - 1:
                break
        return found

    async def _lifecycle(self, conversation_id: str) -> tuple[str, str] | None:
        """(agent, started by) if the conversation's latest start or close is a start."""
        events: Iterable[Item] = await self._log.query(
            conversation_id, types="session_event", order="desc", limit=RESUME_SCAN
        )
        for item in events:
            what = item.data.get("what")
            if what == CLOSED:
                return None
            if what == STARTED or (what == FORKED and "from" in item.data):
                agent = item.data.get("agent")
                return (agent, item.created_by) if isinstance(agent, str) else None
        return None


def _copy(item: Item) -> NewItem:
    """`item` as an append to another conversation: same type, data, author, time."""
    return NewItem(
        type=item.type,
        data=item.data,
        created_by=item.created_by,
        status=item.status,
        response_id=item.response_id,
        created_at=item.created_at,
    )
