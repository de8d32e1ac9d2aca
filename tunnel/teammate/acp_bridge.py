"""`run_acp`, the body of `tunnel acp LINK`: an ACP agent over stdio that is a teammate of a
shared session, so that an editor (Zed, or any ACP client) shows and drives it with the link's
rights (docs/agents.md, "Editors as teammates").

The editor talks ACP on stdin and stdout through the acp package's JSON-RPC connection; the
shared session comes through `connect_teammate` (tunnel/teammate/client.py), reconnecting as
`tunnel attach` does. `tunnel.teammate.acp_mirror` turns what the host sends into ACP updates;
this module only moves them: one sender writes every update and request to the editor in
order (the agent's permission requests, and its questions to an editor that answers them), and
each request or answer the editor makes becomes a teammate request, answered once the log shows
it happened (or the host refused it).
"""

from __future__ import annotations

import logging
import os
import sys
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import anyio
from acp import RequestError
from acp.agent.router import build_agent_router
from acp.connection import Connection, StreamDirection, StreamEvent
from acp.router import Route
from acp.stdio import stdio_streams
from anyio.abc import TaskGroup

from tunnel import __version__
from tunnel.app.errors import ERROR_CODES, ErrorCode
from tunnel.app.follower import (
    Event,
    FollowerEvent,
    Item,
    SnapshotPage,
    SnapshotStarted,
)
from tunnel.app.host_messages import Error, Ready
from tunnel.app.requests import (
    DEFAULT_HISTORY_ITEMS,
    MAX_PROMPT_LENGTH,
    Cancel,
    ElicitationAnswer,
    PermissionAnswer,
    Prompt,
    Request,
    SetConfig,
    SetMode,
    SetModel,
    encode_request,
)
from tunnel.e2e.crypto import ShareLink
from tunnel.e2e.opening import EarlySubscribe
from tunnel.process.backoff import TEAMMATE_MAX_BACKOFF, Backoff
from tunnel.process.exit_codes import EXIT_OK, EXIT_REFUSED, EXIT_UNREACHABLE
from tunnel.process.groups import unwrap_group
from tunnel.process.signals import exit_code_after, run_until_signal
from tunnel.proto.codes import FINAL_CODES
from tunnel.teammate.acp_mirror import (
    PROMPT_CAPABILITIES,
    Mirror,
    MirrorOutput,
    PermissionClosed,
    PermissionOpened,
    PromptStored,
    QuestionClosed,
    QuestionOpened,
    SettingsStored,
    TurnEnded,
    TurnStarted,
    Update,
    replay,
)
from tunnel.teammate.client import TeammateError, TeammateSession, connect_teammate
from tunnel.terminal.sanitize import printable

__all__ = ["AcpSettings", "run_acp"]

logger = logging.getLogger("tunnel.teammate.acp")

ACP_PROTOCOL_VERSION: Final = 1
FORBIDDEN: Final = -32600
"""JSON-RPC "invalid request": what an observer's driving request gets."""
INVALID_PARAMS: Final = -32602
NOT_FOUND: Final = -32002
"""ACP's "resource not found": a session id that is not the shared conversation's."""
INTERNAL: Final = -32603
MAX_OUTBOX = 1024
"""Updates waiting for the editor before the channel is read no further (backpressure)."""
MAX_ERROR_TEXT = 500
INITIALIZE_WAIT = 5.0
"""Seconds `initialize` waits for the host's `ready`, for the agent's name."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AcpSettings:
    """What `tunnel acp` runs with."""

    link: ShareLink
    name: str = "editor"
    """The name the others see."""
    history: int | None = None
    """Items a `session/load` replays: the last N of the conversation. None: the host's
    default for a joiner (at most `DEFAULT_HISTORY_ITEMS`, one page)."""
    reconnect: bool = True
    """Reconnect when the link drops; False ends at the first drop (exit code 4)."""
    give_up_after: float | None = None
    """End after this many seconds without being attached; None keeps trying."""
    max_backoff: float = TEAMMATE_MAX_BACKOFF
    answer_timeout: float = 30.0
    """How long the host has to show that a request happened (a prompt stored, a mode set)."""
    attach_timeout: float = 30.0
    """How long `session/new` and `session/load` wait to be attached to the host."""


@dataclass(eq=False)
class _Turn:
    """A prompt the editor sent, waiting for its turn to end."""

    done: anyio.Event = field(default_factory=anyio.Event)
    stop_reason: str = "end_turn"
    error: str | None = None


@dataclass(eq=False)
class _Outcome:
    """A driving request waiting for the log to show it happened, or for the host's error."""

    kind: Literal["prompt", "settings", "permission", "question"]
    """What shows it happened: the prompt's item, a `settings` event, the request's decision
    or approval, the question's response; each from this channel's name."""
    request_id: str | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    error: Error | None = None
    turn: _Turn | None = None


@dataclass(eq=False)
class _Ask:
    """A `session/request_permission` or `elicitation/create` put to the editor."""

    rpc_id: Any = None
    closed: bool = False
    """Decided by someone else first: the editor's answer, if any, is ignored."""


@dataclass(frozen=True, slots=True)
class _CancelAsk:
    """Withdraw the editor's `session/request_permission` (or `elicitation/create`) of this
    JSON-RPC id."""

    rpc_id: Any


_Entry = Update | PermissionOpened | QuestionOpened | _CancelAsk | anyio.Event

ASKS: Final = ("session/request_permission", "elicitation/create")
"""The requests the bridge puts to the editor, each carrying the host's request id in
`_meta.tunnel.requestId`."""


REFUSALS: Final[Mapping[str, frozenset[ErrorCode]]] = {
    "prompt": frozenset({"forbidden", "bad_request", "not_supported", "agent_unavailable"}),
    "settings": frozenset(
        {"forbidden", "bad_request", "unknown_request", "not_supported", "agent_unavailable"}
    ),
    "permission": frozenset(ERROR_CODES),
    "question": frozenset(ERROR_CODES),
}
"""The error codes the host refuses each kind of driving request with: another `error` (one
of a cancel's, say) is not taken for the refusal of the request waiting."""


def _error(code: int, message: str, reason: str | None = None) -> RequestError:
    return RequestError(code, message[:MAX_ERROR_TEXT], {"reason": reason} if reason else None)


def _host_refusal(error: Error) -> RequestError:
    code = {
        "forbidden": FORBIDDEN,
        "bad_request": INVALID_PARAMS,
        "unknown_request": INVALID_PARAMS,
        "not_supported": INVALID_PARAMS,
    }.get(error.code, INTERNAL)
    return _error(code, f"the shared session refused: {error.message}", error.code)


def _prompt_text(blocks: list[Any]) -> str:
    """A prompt's text: its text blocks, and resource links as markdown links."""
    parts = []
    for block in blocks:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource_link":
            parts.append(f"[{block.name}]({block.uri})")
        else:
            raise _error(INVALID_PARAMS, "the shared session takes text prompts only")
    return "\n".join(parts)


class AcpBridge:
    """The editor's ACP agent, standing for one teammate of the shared session."""

    def __init__(self, settings: AcpSettings) -> None:
        self._settings = settings
        self._mirror = Mirror()
        limit = DEFAULT_HISTORY_ITEMS if settings.history is None else settings.history
        self._history: deque[Mapping[str, Any]] = deque(maxlen=limit)
        self._ready: Ready | None = None
        self._ready_event = anyio.Event()
        self._synced = anyio.Event()
        self._channel: TeammateSession | None = None
        self._cursor: int | None = None
        self._fresh = False
        self._session_id: str | None = None
        self._outbox: deque[_Entry] = deque()
        self._outbox_ready = anyio.Event()
        self._outbox_drained = anyio.Event()
        self._request_lock = anyio.Lock()
        self._outcome: _Outcome | None = None
        self._turns: dict[int, _Turn] = {}
        self._cancel_at: set[int] = set()
        """The editor's prompts it cancelled while queued: cancelled as soon as they run."""
        self._cancel_next = False
        """The editor cancelled a prompt the host has not stored yet."""
        self._asks: dict[str, _Ask] = {}
        self._elicits = False
        """The editor said in `initialize` that it answers form questions (`elicitation`)."""
        self._attach_ids: set[Any] = set()
        self._problem = "not attached yet"
        self._busy = 0
        """Prompts being handled: they get their answer before the bridge ends."""
        self._idle = anyio.Event()
        self._ended: str | None = None
        self.code = EXIT_OK
        self._conn: Connection | None = None
        self._tg: TaskGroup | None = None

    # -- running -----------------------------------------------------------------------------

    async def run(self, conn: Connection) -> int:
        """Serve the editor on `conn` while attached to the host; return the exit code."""
        self._conn = conn
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._send_forever)
            tg.start_soon(self._attach_then_end)
            try:
                await conn.main_loop()  # until the editor closes stdin
            finally:
                tg.cancel_scope.cancel()
        return self.code

    async def _attach_then_end(self) -> None:
        code = await self._attach_forever()
        if code == EXIT_OK:
            return
        self.code = code
        reason = self._problem
        self._ended = reason
        self._fail_waiters(f"the shared session ended: {reason}")
        print(f"tunnel acp: {printable(reason)}", file=sys.stderr, flush=True)
        # The requests waiting get their error answered before the connection goes.
        with anyio.move_on_after(2):
            if self._busy:
                self._idle = anyio.Event()
                await self._idle.wait()
        assert self._tg is not None
        self._tg.cancel_scope.cancel()

    async def _attach_forever(self) -> int:
        settings = self._settings
        backoff = Backoff(maximum=settings.max_backoff)
        waiting_since = anyio.current_time()
        while True:
            attached = False
            # The open carries the subscribe: the snapshot comes with `ready`.
            if self._cursor is None:
                early = EarlySubscribe(tail=settings.history)
            else:
                early = EarlySubscribe(after=self._cursor)
            try:
                async with (
                    unwrap_group(),
                    connect_teammate(settings.link, name=settings.name, subscribe=early) as channel,
                ):
                    await channel.start()  # the host's answer, before anything else
                    self._channel = channel
                    while True:
                        event = await channel.receive()
                        if isinstance(event, Ready):
                            attached = True
                            backoff.reset()
                        await self._take(event)
            except TeammateError as exc:
                self._problem = str(exc)
                if exc.by_peer and exc.code in FINAL_CODES:
                    return EXIT_REFUSED
            except OSError as exc:
                self._problem = f"cannot reach the relay at {settings.link.relay_url}: {exc}"
            finally:
                self._channel = None
            if attached:
                waiting_since = anyio.current_time()
            if self._outcome is not None and self._outcome.error is None:
                # The request may or may not have reached the host: say it did not happen.
                self._outcome.error = Error(code="agent_unavailable", message=self._problem)
                self._outcome.done.set()
            waited = anyio.current_time() - waiting_since
            delay = backoff.next_delay()
            if not settings.reconnect:
                return EXIT_UNREACHABLE
            if settings.give_up_after is not None:
                if waited >= settings.give_up_after:
                    self._problem += f"; gave up after {settings.give_up_after:g} s"
                    return EXIT_UNREACHABLE
                delay = min(delay, settings.give_up_after - waited)
            logger.warning("%s; retrying in %.1f s", self._problem, delay)
            await anyio.sleep(delay)

    # -- what the host sends -----------------------------------------------------------------

    async def _take(self, event: FollowerEvent) -> None:
        match event:
            case Ready():
                self._ready = event
                self._mirror.me = event.name
                self._ready_event.set()
            case SnapshotStarted():
                self._fresh = event.fresh
                if event.fresh:
                    self._history.clear()
                    self._history.extend(event.context)
                    self._mirror.context(event.context)
            case SnapshotPage():
                for item in event.items:
                    self._held(item)
                    if self._fresh:
                        self._history.append(item)
                        self._mirror.item(item, live=False)
                    else:
                        await self._live(item)
                if not event.more:
                    self._cursor = event.last_seq
                    self._synced.set()
            case Item():
                self._held(event.item)
                await self._live(event.item)
            case Event():
                await self._handle(self._mirror.event(event.event))
            case Error():
                outcome = self._outcome
                if (
                    outcome is not None
                    and outcome.error is None
                    and not outcome.done.is_set()
                    and event.code in REFUSALS[outcome.kind]
                ):
                    outcome.error = event
                    outcome.done.set()
                else:
                    logger.info("the host refused a request: %s", event.message)
            case _:
                pass

    def _held(self, item: Mapping[str, Any]) -> None:
        seq = item.get("seq")
        if type(seq) is int:
            self._cursor = seq

    async def _live(self, item: Mapping[str, Any]) -> None:
        self._history.append(item)
        await self._handle(self._mirror.item(item))

    async def _handle(self, outputs: list[MirrorOutput]) -> None:
        for output in outputs:
            match output:
                case Update():
                    if self._session_id is not None:
                        self._queue(output)
                case PermissionOpened():
                    if self._session_id is not None and self._may_answer(output):
                        self._queue(output)
                case PermissionClosed():
                    self._permission_closed(output)
                case QuestionOpened():
                    if self._session_id is not None and self._may_ask():
                        self._queue(output)
                case QuestionClosed():
                    self._question_closed(output)
                case PromptStored():
                    outcome = self._outcome
                    if output.own and outcome is not None and outcome.kind == "prompt":
                        turn = _Turn()
                        self._turns[output.seq] = turn
                        outcome.turn = turn
                        outcome.done.set()
                        if self._cancel_next:
                            self._cancel_next = False
                            self._cancel_at.add(output.seq)
                case TurnStarted():
                    if output.turn in self._cancel_at:
                        self._cancel_at.discard(output.turn)
                        self._send_cancel_soon()
                case SettingsStored():
                    outcome = self._outcome
                    mine = output.by == self._mirror.me
                    if outcome is not None and outcome.kind == "settings" and mine:
                        outcome.done.set()
                case TurnEnded():
                    self._cancel_at.discard(output.turn)
                    ended = self._turns.pop(output.turn, None)
                    if ended is not None:
                        ended.stop_reason = output.stop_reason
                        ended.done.set()
        while len(self._outbox) > MAX_OUTBOX:
            self._outbox_drained = anyio.Event()
            await self._outbox_drained.wait()

    def _permission_closed(self, closed: PermissionClosed) -> None:
        self._confirm("permission", closed.request_id, closed.by)
        if not closed.approval:
            self._withdraw(closed.request_id, closed.by)

    def _question_closed(self, closed: QuestionClosed) -> None:
        self._confirm("question", closed.request_id, closed.by)
        self._withdraw(closed.request_id, closed.by)

    def _confirm(self, kind: Literal["permission", "question"], request_id: str, by: str) -> None:
        """The log shows this channel's answer to `request_id`: its request is done."""
        outcome = self._outcome
        if (
            outcome is not None
            and outcome.kind == kind
            and outcome.request_id == request_id
            and by == self._mirror.me
        ):
            outcome.done.set()

    def _withdraw(self, request_id: str, by: str) -> None:
        """`request_id` ended: if it was put to the editor and someone else answered, the
        editor's is withdrawn. One still being sent is withdrawn once sent (`_observe`); one
        not sent yet never is (`_ask`)."""
        ask = self._asks.get(request_id)
        if ask is not None and not ask.closed and by != self._mirror.me:
            # First answer wins: the editor's question is withdrawn, its answer ignored.
            ask.closed = True
            if ask.rpc_id is not None:
                self._queue(_CancelAsk(ask.rpc_id))

    # -- the editor's side: one sender, in order ---------------------------------------------

    def _queue(self, entry: _Entry) -> None:
        self._outbox.append(entry)
        self._outbox_ready.set()

    async def _send_forever(self) -> None:
        conn = self._conn
        assert conn is not None
        assert self._tg is not None
        while True:
            if not self._outbox:
                self._outbox_drained.set()
                self._outbox_ready = anyio.Event()
                await self._outbox_ready.wait()
                continue
            entry = self._outbox.popleft()
            try:
                await self._send(conn, entry)
            except (TypeError, ValueError) as exc:  # not JSON: the mirror's bug, not the host's
                logger.warning("an update could not be sent: %s", exc)
            except (ConnectionError, OSError):
                # The editor stopped reading: nobody is left to serve.
                self._tg.cancel_scope.cancel()
                return

    async def _send(self, conn: Connection, entry: _Entry) -> None:
        assert self._tg is not None
        match entry:
            case Update():
                params = {"sessionId": self._session_id, "update": dict(entry.update)}
                await conn.send_notification("session/update", params)
            case PermissionOpened():
                self._tg.start_soon(self._ask, entry)
            case QuestionOpened():
                self._tg.start_soon(self._ask_question, entry)
            case _CancelAsk():
                await conn.send_notification("$/cancel_request", {"requestId": entry.rpc_id})
            case anyio.Event():
                entry.set()

    async def _ask(self, opened: PermissionOpened) -> None:
        """Put a permission request to the editor; its answer goes to the host."""
        conn = self._conn
        assert conn is not None
        if opened.request_id in self._asks or not self._mirror.is_open(opened.request_id):
            return  # put to the editor already, or closed while it waited to be
        ask = _Ask()
        self._asks[opened.request_id] = ask
        params = {
            "sessionId": self._session_id,
            "toolCall": dict(opened.tool_call),
            "options": [dict(option) for option in opened.options],
            "_meta": {"tunnel": {"requestId": opened.request_id}},
        }
        try:
            response = await conn.send_request("session/request_permission", params)
        except (RequestError, ConnectionError) as exc:
            logger.info("the editor answered no permission request: %s", exc)
            response = None
        finally:
            if self._asks.get(opened.request_id) is ask:
                del self._asks[opened.request_id]
        outcome = response.get("outcome") if isinstance(response, dict) else None
        if ask.closed or not isinstance(outcome, dict) or outcome.get("outcome") != "selected":
            return
        option_id = outcome.get("optionId")
        if not isinstance(option_id, str):
            return
        answer = PermissionAnswer(request_id=opened.request_id, option_id=option_id)
        try:
            await self._drive(answer, _Outcome("permission", request_id=opened.request_id))
        except RequestError as exc:
            logger.info("the editor's permission answer was not taken: %s", exc)

    async def _ask_question(self, asked: QuestionOpened) -> None:
        """Put a question of the agent's to the editor; its answer goes to the host."""
        conn = self._conn
        assert conn is not None
        if asked.request_id in self._asks or not self._mirror.is_open(asked.request_id):
            return  # put to the editor already, or closed while it waited to be
        ask = _Ask()
        self._asks[asked.request_id] = ask
        params: dict[str, Any] = {
            "sessionId": self._session_id,
            "mode": "form",
            "message": asked.message,
            "requestedSchema": dict(asked.requested_schema),
            "_meta": {"tunnel": {"requestId": asked.request_id}},
        }
        if asked.tool_call_id is not None:
            params["toolCallId"] = asked.tool_call_id
        try:
            response = await conn.send_request("elicitation/create", params)
        except (RequestError, ConnectionError) as exc:
            logger.info("the editor answered no question: %s", exc)
            response = None
        finally:
            if self._asks.get(asked.request_id) is ask:
                del self._asks[asked.request_id]
        if ask.closed or not isinstance(response, dict):
            return
        action, content = response.get("action"), response.get("content")
        if action not in ("accept", "decline"):
            # `cancel`: the editor's dialog closed unanswered; the question stays for the others.
            return
        answer = ElicitationAnswer(
            request_id=asked.request_id,
            action=action,
            content=content if action == "accept" and isinstance(content, dict) else None,
        )
        try:
            await self._drive(answer, _Outcome("question", request_id=asked.request_id))
        except RequestError as exc:
            logger.info("the editor's answer to a question was not taken: %s", exc)

    def _observe(self, event: StreamEvent) -> None:
        """Every JSON-RPC message: the ids the bridge needs to follow up on."""
        message = event.message
        method = message.get("method")
        if event.direction is StreamDirection.INCOMING:
            if method in ("session/new", "session/load") and "id" in message:
                self._attach_ids.add(message["id"])
            return
        if method in ASKS:
            meta = (message.get("params") or {}).get("_meta") or {}
            request_id = (meta.get("tunnel") or {}).get("requestId")
            ask = self._asks.get(request_id) if isinstance(request_id, str) else None
            if ask is not None:
                ask.rpc_id = message.get("id")
                if ask.closed:
                    # Someone answered while it was being sent: withdrawn now that it is out.
                    self._queue(_CancelAsk(ask.rpc_id))
        elif method is None and message.get("id") in self._attach_ids:
            self._attach_ids.discard(message.get("id"))
            if "result" in message:
                # Attached: the requests still open are put to the editor, after the answer.
                for opened in self._mirror.open_permissions():
                    if self._may_answer(opened):
                        self._queue(opened)
                if self._may_ask():
                    for asked in self._mirror.open_questions():
                        self._queue(asked)

    # -- driving -------------------------------------------------------------------------------

    def _driver(self) -> bool:
        role = self._ready.role if self._ready is not None else self._settings.link.role
        return role == "drive"

    def _may_answer(self, opened: PermissionOpened) -> bool:
        """Whether to put the request to the editor: a driver that the policy lets answer."""
        ready = self._ready
        verified = ready is not None and ready.verified
        return self._driver() and opened.answerable_by(self._mirror.me, verified=verified)

    def _may_ask(self) -> bool:
        """Whether to put the agent's questions to the editor: a driver whose editor answers
        form questions."""
        return self._driver() and self._elicits

    def _check_session(self, session_id: str) -> None:
        if self._session_id is None or session_id != self._session_id:
            raise _error(NOT_FOUND, f"no session {session_id!r}: the shared session is another")

    def _check_driver(self) -> None:
        if self._ended is not None:
            raise _error(INTERNAL, f"the shared session ended: {self._ended}")
        if not self._driver():
            raise _error(
                FORBIDDEN,
                "this is a view link: an observer of the shared session cannot drive it",
                "forbidden",
            )

    async def _drive(self, request: Request, outcome: _Outcome) -> _Outcome:
        """Send a driving request; return once the log shows it, or raise the refusal."""
        async with self._request_lock:
            channel = self._channel
            if channel is None:
                raise _error(INTERNAL, f"not attached to the shared session: {self._problem}")
            self._outcome = outcome
            try:
                await channel.send(encode_request(request))
                with anyio.move_on_after(self._settings.answer_timeout):
                    await outcome.done.wait()
            except TeammateError as exc:
                raise _error(INTERNAL, f"the shared session ended: {exc}") from None
            finally:
                self._outcome = None
            if outcome.error is not None:
                raise _host_refusal(outcome.error)
            if not outcome.done.is_set():
                raise _error(INTERNAL, "the shared session did not answer in time")
            return outcome

    def _fail_waiters(self, reason: str) -> None:
        for turn in self._turns.values():
            turn.error = reason
            turn.done.set()
        self._turns.clear()
        outcome = self._outcome
        if outcome is not None and outcome.error is None:
            outcome.error = Error(code="agent_unavailable", message=reason)
            outcome.done.set()

    async def _attached(self) -> None:
        with anyio.move_on_after(self._settings.attach_timeout):
            await self._synced.wait()
        if self._ended is not None:
            raise _error(INTERNAL, f"the shared session ended: {self._ended}")
        if not self._synced.is_set():
            raise _error(INTERNAL, f"cannot reach the shared session: {self._problem}")

    # -- ACP methods ---------------------------------------------------------------------------

    async def initialize(
        self, protocol_version: int, client_capabilities: Any = None, **_: Any
    ) -> dict[str, Any]:
        elicitation = getattr(client_capabilities, "elicitation", None)
        self._elicits = getattr(elicitation, "form", None) is not None
        # The host's `ready` names its agent; a host out of reach is no reason to keep the
        # editor waiting here (session/new waits, and says why).
        with anyio.move_on_after(INITIALIZE_WAIT):
            await self._ready_event.wait()
        title = "Shared session"
        if self._ready is not None:
            title = f"Shared session: {self._ready.agent_name}"
        return {
            "protocolVersion": min(protocol_version, ACP_PROTOCOL_VERSION),
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": dict(PROMPT_CAPABILITIES),
                "sessionCapabilities": {"list": {}},
            },
            "authMethods": [],
            "agentInfo": {"name": "agent-tunnel", "title": title, "version": __version__},
        }

    async def authenticate(self, method_id: str, **_: Any) -> dict[str, Any]:
        return {}

    async def list_sessions(self, cwd: str | None = None, **_: Any) -> dict[str, Any]:
        """The one shared conversation, so that an editor lists it among its sessions."""
        await self._attached()
        assert self._ready is not None
        session: dict[str, Any] = {
            "sessionId": self._ready.conversation_id,
            "cwd": cwd or os.getcwd(),
            "title": f"Shared session: {self._ready.agent_name}",
        }
        last = self._history[-1].get("created_at") if self._history else None
        if isinstance(last, str):
            session["updatedAt"] = last
        return {"sessions": [session]}

    async def new_session(self, cwd: str, **_: Any) -> dict[str, Any]:
        """Attach to the shared conversation: its state, no history (an editor that wants the
        history loads the session)."""
        await self._attached()
        assert self._ready is not None
        marker = anyio.Event()
        self._session_id = self._ready.conversation_id
        for update in self._mirror.state_updates() + self._mirror.streams_in_progress():
            self._queue(update)
        self._queue(marker)
        await marker.wait()
        return {"sessionId": self._ready.conversation_id, **self._mirror.session_setup()}

    async def load_session(self, cwd: str, session_id: str, **_: Any) -> dict[str, Any]:
        """Attach to the shared conversation and replay its end as updates, then its state."""
        await self._attached()
        assert self._ready is not None
        if session_id != self._ready.conversation_id:
            raise _error(NOT_FOUND, f"no session {session_id!r}: the shared session is another")
        # Queued at once, before any live item: the editor sees history, then what follows.
        marker = anyio.Event()
        for update in replay(self._history):
            self._queue(update)
        for update in self._mirror.state_updates() + self._mirror.streams_in_progress():
            self._queue(update)
        self._queue(marker)
        self._session_id = session_id
        await marker.wait()
        return self._mirror.session_setup()

    async def prompt(self, prompt: list[Any], session_id: str, **_: Any) -> dict[str, Any]:
        self._check_session(session_id)
        self._check_driver()
        if self._ready is not None and self._ready.agent_kind != "chat":
            raise _error(
                INVALID_PARAMS,
                "the shared agent is a terminal program: attach with `tunnel attach --raw`",
            )
        text = _prompt_text(prompt)
        if not text.strip() or len(text) > MAX_PROMPT_LENGTH:
            raise _error(INVALID_PARAMS, f"a prompt is 1 to {MAX_PROMPT_LENGTH} characters")
        self._mirror.prompt_sent(text)
        self._busy += 1
        try:
            try:
                outcome = await self._drive(Prompt(text=text), _Outcome("prompt"))
            except RequestError:
                self._mirror.prompt_refused(text)
                # A cancel of this prompt ends with it: the editor's next prompt is not one.
                self._cancel_next = False
                raise
            turn = outcome.turn
            assert turn is not None  # set with done
            await turn.done.wait()
        finally:
            self._busy -= 1
            if not self._busy:
                self._idle.set()
        if turn.error is not None:
            raise _error(INTERNAL, turn.error)
        return {"stopReason": turn.stop_reason}

    async def cancel(self, session_id: str, **_: Any) -> None:
        """Cancel the editor's own prompts: the turn of one that runs now, and each still
        queued as soon as it runs; nothing while another's turn runs (ACP's cancel is about the
        prompt the editor sent). The host's `cancel` names no turn and arrives a relay round
        trip later: should the editor's turn end in the meantime, it stops the next one."""
        if session_id != self._session_id or not self._driver():
            return
        outcome = self._outcome
        if outcome is not None and outcome.kind == "prompt" and not outcome.done.is_set():
            self._cancel_next = True
        running = self._mirror.running
        self._cancel_at.update(turn for turn in self._turns if turn != running)
        if running is not None and running in self._turns:
            await self._send_cancel()

    def _send_cancel_soon(self) -> None:
        assert self._tg is not None
        self._tg.start_soon(self._send_cancel)

    async def _send_cancel(self) -> None:
        channel = self._channel
        if channel is None:
            return
        try:
            await channel.send(encode_request(Cancel()))
        except TeammateError as exc:
            logger.info("the cancel did not reach the host: %s", exc)

    async def set_session_mode(self, mode_id: str, session_id: str, **_: Any) -> dict[str, Any]:
        self._check_session(session_id)
        self._check_driver()
        await self._drive(SetMode(mode_id=mode_id), _Outcome("settings"))
        return {}

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **_: Any
    ) -> dict[str, Any]:
        self._check_session(session_id)
        self._check_driver()
        await self._drive(SetConfig(config_id=config_id, value=value), _Outcome("settings"))
        return {"configOptions": self._mirror.session_setup().get("configOptions", [])}

    async def set_model(self, params: Any) -> dict[str, Any]:
        """ACP's unstable `session/set_model`, which the acp package does not route."""
        params = params if isinstance(params, dict) else {}
        session_id, model_id = params.get("sessionId"), params.get("modelId")
        if not isinstance(session_id, str) or not isinstance(model_id, str):
            raise _error(INVALID_PARAMS, "session/set_model takes a sessionId and a modelId")
        self._check_session(session_id)
        self._check_driver()
        await self._drive(SetModel(model_id=model_id), _Outcome("settings"))
        return {}


async def run_acp(settings: AcpSettings) -> int:
    """Serve ACP on stdin and stdout as a teammate of the link's shared session, until the
    editor closes stdin (0), the link is refused (3), the host stays out of reach past
    `give_up_after` (4), or SIGINT (130) or SIGTERM (0)."""
    reader, writer = await stdio_streams(limit=16 * 1024 * 1024)
    bridge = AcpBridge(settings)
    router = build_agent_router(bridge)  # type: ignore[arg-type]
    router.add_route(Route(method="session/set_model", func=bridge.set_model, kind="request"))
    conn = Connection(router, writer, reader, listening=False, observers=[bridge._observe])
    code = EXIT_OK

    async def main(tg: TaskGroup) -> None:
        nonlocal code
        code = await bridge.run(conn)
        tg.cancel_scope.cancel()

    try:
        stopped_by = await run_until_signal(main)
    finally:
        with anyio.move_on_after(2, shield=True):
            await conn.close()
    return code if stopped_by is None else exit_code_after(stopped_by)
