"""An Agent Client Protocol agent as the shared session (`--agent acp:COMMAND ARGS...`).

The agent runs as a subprocess speaking ACP (JSON-RPC over stdio) through the
`agent-client-protocol` package, over our own transport (`.acp_transport`) so the session sees
each message first. We send initialize, authenticate (when the agent needs a login),
session/resume or session/load (to resume the conversation's earlier ACP session when the agent
can; what a load replays is not recorded again), session/fork (a forked conversation's first
start, of the source's session: tunnel.agents.acp_origin) or session/new (cwd = the workspace),
session/prompt, session/cancel, session/set_mode, session/set_config_option, the unstable
session/set_model, and session/list when the host console asks for the agent's past sessions.
We serve session/update, session/request_permission, the fs methods (inside the workspace only)
and the terminal methods (commands run in the workspace). An agent
that exits or crashes is recorded (an `error` item and a `session_event`); the next prompt starts
it again, resuming its session when it can, while the log keeps the whole conversation.
docs/agents.md has the table of every method and update and how each is served and shown.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import logging
import math
import os
import signal
import time
import typing
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.abc
from acp import (
    PROTOCOL_VERSION,
    RequestError,
    connect_to_agent,
    embedded_text_resource,
    image_block,
    resource_block,
    schema,
    text_block,
)
from acp.client.connection import ClientSideConnection
from acp.interfaces import Client
from pydantic import ValidationError

from tunnel import __version__
from tunnel.log import Item, Log
from tunnel.process.groups import unwrapped

from .acp_context import attach, complete, mentions, scan_limiter
from .acp_modes import asking_mode, mode_asks, policy_needs_asking
from .acp_origin import (
    BY_SESSION_FORK,
    BY_TRANSCRIPT,
    AskedSession,
    ForkOrigin,
    Origin,
    OriginScan,
    OwnSession,
)
from .acp_refusals import readable as readable_refusal
from .acp_settings import Change, Settings, choices_of
from .acp_terminals import Terminal, TerminalError, Terminals
from .acp_transport import StdioTransport, incoming_request
from .acp_updates import (
    apply_update,
    call_fields,
    clip_text,
    merge_known_call,
    permission_details,
    result_text,
    tool_content,
)
from .base import AgentInfo
from .chat import ChatSession, Prompt
from .elicitation import BadForm, ElicitationBroker, form_fields
from .errors import SessionError, check_by
from .permissions import PermissionOption
from .transcript import Transcript, render
from .workspace import OutsideWorkspace, Workspace

logger = logging.getLogger("tunnel.agents.acp")

MAX_TITLE_LENGTH = 200
"""Characters of a session title (`session_info_update`) kept; the rest is cut."""
MAX_KNOWN_CALLS = 256
"""Tool calls whose fields a session keeps for the approval policy (a turn rarely has more)."""

READ_BUFFER_BYTES = 16 * 1024 * 1024
"""The agent's stdout reader buffer. A longer JSON-RPC line is joined from several reads
(tunnel.agents.acp_transport), so the agent (the host's own program) is trusted not to send
endless lines."""

START_TIMEOUT = 60.0
"""Default seconds the agent has to answer initialize, authenticate and session/new (or
session/load). A program that is not an ACP agent often just stays silent."""

CANCEL_GRACE = 10.0
"""Seconds an agent has to end its turn after session/cancel before the turn is abandoned."""

CHANGE_TIMEOUT = 30.0
"""Seconds an agent has to answer a mode, model or config change."""

STOP_GRACE = 2.0
"""Seconds between closing the agent's stdin, SIGTERM and SIGKILL when stopping it."""

STDERR_TAIL_LINES = 20
"""Lines of the agent's stderr kept to explain a crash in the host's log."""

LATE_FLUSH_DELAY = 0.3
"""Text the agent streams after its turn ended is stored once it has been quiet this long."""

MAX_TERMINAL_EVENT_CHARS = 64 * 1024
"""Terminal output streamed to teammates in one event, at most (a longer chunk is cut)."""

MAX_TERMINAL_ITEM_CHARS = 64 * 1024
"""The end of a terminal's output stored in its `tool_terminal` item when the command ends."""

AUTH_REQUIRED = -32000
"""The JSON-RPC error code of ACP's auth_required."""

REPLAY_QUIET = 0.5
"""After a session/load, the first prompt waits until the agent has sent nothing for this long:
a replay it sends after answering the load (Gemini CLI does) ends before the turn begins."""

REPLAY_WAIT = 5.0
"""Longest the first prompt after a session/load waits for the agent's replay to end."""

EXIT_POLL = 0.2
"""Seconds between looks at whether the agent's own process has exited (`_wait_exit`)."""

LIST_TIMEOUT = 10.0
"""Seconds the agent has to answer `session/list`."""

MAX_PAST_SESSIONS = 50
"""Past sessions of the agent's that `list_agent_sessions` returns at most (its first page)."""

MINUTE_SESSION_FILES = frozenset({"gemini-cli"})
"""Agents (by `agentInfo.name`) that name a session's file after the minute it is opened in: a
session/load in the minute the session was created overwrites its history (Gemini CLI 0.61), so
the host waits for the next minute first. docs/agents.md, "Resuming"."""

TRANSCRIPT_ITEMS = 2000
"""The newest items of a forked conversation's copied part read to make its transcript, at
most (tunnel.agents.transcript keeps what fits its budget)."""

TRANSCRIPT_TYPES = ("message", "tool_call", "tool_result", "permission_decision", "error")
"""The item types a transcript shows."""

TURN_TYPES = ("message", "reasoning", "tool_call", "tool_result", "permission_request")
"""Item types an agent session's turn stores: one of them in the source after the fork point
means the source's agent session holds more than the fork copied."""

KNOWN_UPDATES: frozenset[str] = frozenset(
    kind
    for model in typing.get_args(schema.SessionNotification.model_fields["update"].annotation)
    for kind in typing.get_args(model.model_fields["session_update"].annotation)
)
"""The `sessionUpdate` kinds the acp package knows; any other is taken before it sees it."""

_STATE_UPDATES = (
    schema.CurrentModeUpdate,
    schema.ConfigOptionUpdate,
    schema.AvailableCommandsUpdate,
)


class _StartModeError(Exception):
    """`--agent-mode` names a mode the agent does not offer (the host user's to fix)."""


class _ResumeRefused(Exception):
    """The agent did not resume the past session the host user asked for (`/resume`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PastSession:
    """One of the agent's own sessions as its `session/list` describes it; every field is the
    agent's, to be printed escaped."""

    session_id: str
    title: str | None
    updated_at: str | None


class _AuthNeeded(Exception):
    """The agent needs a login the host cannot choose by itself (the user's to fix)."""


@dataclass(slots=True, kw_only=True)
class _Live:
    """A running agent process and its ACP session."""

    conn: ClientSideConnection
    transport: StdioTransport
    process: asyncio.subprocess.Process
    session_id: str
    screen: _Screen
    exited: anyio.Event = field(default_factory=anyio.Event)


class _Client:
    """The client side of ACP: what the agent may ask of us."""

    def __init__(self, session: AcpSession, terminals: Terminals) -> None:
        self._session = session
        self._terminals = terminals

    def on_connect(self, conn: Any) -> None:
        pass

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        await self._session._on_update(update)

    async def request_permission(
        self,
        session_id: str,
        tool_call: schema.ToolCallUpdate,
        options: list[schema.PermissionOption],
        **kwargs: Any,
    ) -> schema.RequestPermissionResponse:
        return await self._session._on_permission(tool_call, options)

    async def create_elicitation(self, message: str, mode: Any, **kwargs: Any) -> dict[str, Any]:
        return await self._session._on_elicitation(message)

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        pass  # for URL mode, which the host does not offer: an unknown id is ignored

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> schema.ReadTextFileResponse:
        read = functools.partial(
            self._session._workspace.read_text,
            path,
            line=line,
            limit=limit,
            refuse=self._session._hidden.hides_fd,
        )
        try:
            text = await self._session._fs("read", path, read)
        except FileNotFoundError:
            # As an editor does (Zed opens a missing path as an empty new buffer): agents read
            # a file before they create it. See docs/agents.md, "Files".
            text = ""
        return schema.ReadTextFileResponse(content=text)

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> schema.WriteTextFileResponse:
        write = functools.partial(self._session._workspace.write_text, path, content)
        await self._session._fs("write", path, write)
        return schema.WriteTextFileResponse()

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[schema.EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> schema.CreateTerminalResponse:
        terminal = await self._session._create_terminal(
            self._terminals,
            command,
            args or [],
            {variable.name: variable.value for variable in env or ()},
            cwd,
            output_byte_limit,
        )
        return schema.CreateTerminalResponse(terminal_id=terminal.terminal_id)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> schema.TerminalOutputResponse:
        terminal = _terminal(self._terminals, terminal_id)
        status = None
        if terminal.exited.is_set():
            status = schema.TerminalExitStatus(exit_code=terminal.exit_code, signal=terminal.signal)
        return schema.TerminalOutputResponse(
            output=terminal.text(), truncated=terminal.truncated, exit_status=status
        )

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> schema.WaitForTerminalExitResponse:
        terminal = _terminal(self._terminals, terminal_id)
        await terminal.exited.wait()
        return schema.WaitForTerminalExitResponse(
            exit_code=terminal.exit_code, signal=terminal.signal
        )

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> schema.KillTerminalResponse:
        _terminal(self._terminals, terminal_id)
        self._terminals.kill(terminal_id)
        return schema.KillTerminalResponse()

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> schema.ReleaseTerminalResponse:
        _terminal(self._terminals, terminal_id)
        self._terminals.release(terminal_id)
        return schema.ReleaseTerminalResponse()


def _terminal(terminals: Terminals, terminal_id: str) -> Terminal:
    try:
        return terminals.get(terminal_id)
    except TerminalError as exc:
        details = {"terminalId": terminal_id, "details": str(exc)}
        raise RequestError.invalid_params(details) from None


class AcpSession(ChatSession):
    """A shared session with any ACP agent run as a subprocess."""

    def __init__(
        self,
        *,
        argv: Sequence[str],
        log: Log,
        workspace: Path,
        conversation_id: str,
        start_timeout: float = START_TIMEOUT,
        auth_method: str | None = None,
        start_mode: str | None = None,
    ) -> None:
        if not argv:
            raise ValueError("an acp agent needs a command")
        super().__init__(
            info=AgentInfo(name=os.path.basename(argv[0]), kind="chat"),
            log=log,
            conversation_id=conversation_id,
        )
        self._argv = list(argv)
        self._log = log
        self._workspace = Workspace(workspace)
        self._start_timeout = start_timeout
        self._auth_method = auth_method
        # The login methods the agent offered in its latest initialize (id, name, description),
        # and one login at a time (docs/agents.md, "Logging in").
        self._auth_methods: list[dict[str, str]] = []
        self._login_lock = anyio.Lock()
        # The mode the host's first start of the agent sets (`--agent-mode`); later starts
        # restore what the conversation last chose (_restore_choices).
        self._start_mode = start_mode
        self._live: _Live | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._start_lock = anyio.Lock()
        # FIFO (anyio's Lock queues waiters in order): the acp package handles each incoming
        # message in its own task, created in arrival order, so taking this lock first thing
        # keeps updates in the order the agent sent them.
        self._update_lock = anyio.Lock()
        # What each tool call has said of itself so far, for the approval policy to judge a
        # permission request by (an agent may ask with empty fields); the newest
        # MAX_KNOWN_CALLS only, under the update lock.
        self._known_calls: dict[str, dict[str, Any]] = {}
        self._change_lock = anyio.Lock()
        self._turn = 0
        self._watchdog_armed = False
        self._settings = Settings()
        self._recorded_settings: dict[str, Any] | None = None
        self._recorded_commands: list[dict[str, Any]] | None = None
        self._changing = False
        self._start_problem: str | None = None
        self._started_once = False
        self._late_deadline: float | None = None
        self._elicitations = ElicitationBroker(self._recorder)
        self._recorded_usage: dict[str, Any] | None = None
        self._recorded_title: str | None = None
        self._embeds = False  # whether the agent takes embedded context in a prompt
        self._lists_sessions = False  # whether it offers session/list
        self._images_ok = False  # and images
        # A forked conversation's transcript, for the first prompt of a session that did not
        # fork the source's (docs/agents.md, "Forks").
        self._owed_transcript: Transcript | None = None
        # What to do when the agent withdraws one of its requests ($/cancel_request), by the
        # request's JSON-RPC id: its permission requests and questions, while open.
        self._withdraw: dict[Any, Callable[[], Any]] = {}

    @property
    def agent_pid(self) -> int | None:
        """The process id of the running agent, None when it is not running."""
        live = self._live
        return live.process.pid if live is not None else None

    def settings(self) -> dict[str, Any]:
        return self._settings.snapshot() if self._settings.known else {}

    def commands(self) -> list[dict[str, Any]]:
        return list(self._settings.commands)

    # -- ChatSession hooks ---------------------------------------------------------------------

    async def _start(self, task_group: anyio.abc.TaskGroup) -> None:
        self._task_group = task_group
        await self._ensure_agent()
        problem, self._start_problem = self._start_problem, None
        if problem is not None:
            # The host's own option named a mode the agent does not have, or the host user
            # asked for a past session the agent did not resume: their mistake, in one line.
            raise ValueError(problem)

    async def _begin_turn(self, prompt: Prompt) -> None:
        # Text the agent sent after its previous turn ended belongs to that turn: store it first.
        async with self._update_lock:
            await self._recorder.flush()
            await super()._begin_turn(prompt)

    async def _run_turn(self, prompt: Prompt) -> None:
        self._turn += 1
        live = await self._ensure_agent()
        if live is None:
            return
        await live.screen.end_replay()
        try:
            response = await live.conn.prompt(
                session_id=live.session_id, prompt=await self._prompt_blocks(prompt)
            )
        except RequestError as exc:
            async with self._update_lock:
                await self._recorder.error(f"the agent failed the prompt: {_error_text(exc)}")
                if exc.code == AUTH_REQUIRED:
                    await self._auth_required("it needs a login to answer")
            return
        except ConnectionError:
            # The agent went away mid-turn; its exit is recorded by _agent_lifetime.
            return
        async with self._update_lock:
            await self._recorder.flush()
            if response.stop_reason != "end_turn":
                await self._recorder.session_event(
                    "turn_ended",
                    by="agent",
                    stop_reason=response.stop_reason,
                    turn=self._recorder.turn,
                )
            if response.usage is not None:
                await self._recorder.usage(
                    {"update": "prompt_usage", **response.usage.model_dump(mode="json")}
                )

    async def _cancel_turn(self, *, by: str) -> None:
        live = self._live
        if live is None:
            # Still starting the agent: nothing to tell it, just stop waiting.
            await super()._cancel_turn(by=by)
            return
        with contextlib.suppress(ConnectionError, RequestError):
            await live.conn.cancel(session_id=live.session_id)
        await self._permissions.cancel_all(by=by)
        await self._elicitations.cancel_all(by=by)
        if not self._watchdog_armed and self._task_group is not None:
            self._watchdog_armed = True
            self._task_group.start_soon(self._cancel_watchdog, self._turn)

    # -- logging in ----------------------------------------------------------------------------

    async def _auth_required(self, reason: str) -> None:
        """Tell every surface the agent needs a login, and which methods it offers."""
        await self._recorder.session_event(
            "auth_required", by="agent", reason=reason, methods=self._auth_methods
        )

    async def authenticate(self, method_id: str, *, by: str) -> None:
        check_by(by)
        if method_id not in [m["id"] for m in self._auth_methods]:
            raise SessionError("unknown_request", f"the agent offers no login method {method_id!r}")
        # A login nobody could see recorded is not made.
        self._recorder.writer.check_writable()
        async with self._login_lock:
            live = self._live
            if live is not None and not live.exited.is_set():
                failed = await self._login_live(live, method_id)
            else:
                # Not running: its start needed this login. Start it with the method.
                previous, self._auth_method = self._auth_method, method_id
                failed = None
                if await self._ensure_agent() is None:
                    self._auth_method = previous
                    failed = "the agent did not start with it (see the error above)"
            if failed is None:
                await self._recorder.session_event("authenticated", by=by, method_id=method_id)
            else:
                await self._recorder.session_event(
                    "auth_failed", by=by, method_id=method_id, reason=failed
                )

    async def _login_live(self, live: _Live, method_id: str) -> str | None:
        """`authenticate` on the running agent; why it failed, or None."""
        try:
            with anyio.fail_after(self._start_timeout):
                await live.conn.authenticate(method_id=method_id)
        except RequestError as exc:
            return f"the agent refused: {_error_text(exc)}"
        except TimeoutError:
            return f"no answer within {self._start_timeout:g} s"
        except ConnectionError:
            return "the agent exited"
        return None

    # -- modes, models, config options ---------------------------------------------------------

    async def set_mode(self, mode_id: str, *, by: str) -> None:
        await self._change(by, lambda: self._settings.mode_change(mode_id))

    async def set_model(self, model_id: str, *, by: str) -> None:
        await self._change(by, lambda: self._settings.model_change(model_id))

    async def set_config(self, config_id: str, value: str | bool, *, by: str) -> None:
        await self._change(by, lambda: self._settings.config_change(config_id, value))

    async def _change(self, by: str, plan: Callable[[], Change]) -> None:
        """Ask the agent for a change and record it, with who asked, once it agreed."""
        check_by(by)
        live = self._live
        if live is None or live.exited.is_set():
            raise SessionError(
                "agent_unavailable", "the agent is not running; a prompt starts it again"
            )
        # A change nobody could see recorded is not made.
        self._recorder.writer.check_writable()
        async with self._change_lock:
            change = plan()
            if change.about == "mode":
                self._check_asks(str(change.value or change.target))
            # What the agent reports while it changes is recorded once, with who asked.
            self._changing = True
            try:
                await self._send_change(live, change)
            finally:
                self._changing = False
            async with self._update_lock:
                await self._record_settings(by=by, change=change.record())
        # A change of model or option may have moved the agent out of a mode that asks.
        self._hold_to_asking()

    def _check_asks(self, mode_id: str) -> None:
        """SessionError `forbidden` when the approval policy needs requests asked and `mode_id`
        does not ask (tunnel.agents.acp_modes)."""
        policy = self._permissions.policy
        if policy is not None and policy_needs_asking(policy) and not mode_asks(mode_id):
            raise SessionError(
                "forbidden",
                f"the mode {mode_id} does not ask before edits and commands, and the approval"
                f" policy {policy.source} needs them asked",
            )

    async def _send_change(self, live: _Live, change: Change) -> None:
        """Ask the agent for `change` and take it into the settings once it agreed;
        SessionError if it refused or did not answer."""
        options: list[Any] | None = None
        try:
            with anyio.fail_after(CHANGE_TIMEOUT):
                if change.method == "set_mode":
                    await live.conn.set_session_mode(
                        session_id=live.session_id, mode_id=change.target
                    )
                elif change.method == "set_config":
                    response = await live.conn.set_config_option(
                        config_id=change.target, session_id=live.session_id, value=change.value
                    )
                    options = list(response.config_options)
                else:
                    await live.transport.request(
                        "session/set_model",
                        {"sessionId": live.session_id, "modelId": change.target},
                    )
        except RequestError as exc:
            raise SessionError("not_supported", f"the agent refused: {_error_text(exc)}") from None
        except (ConnectionError, ValidationError):
            raise SessionError("agent_unavailable", "the agent did not answer") from None
        except TimeoutError:
            raise SessionError(
                "agent_unavailable", f"the agent did not answer within {CHANGE_TIMEOUT:g} s"
            ) from None
        async with self._update_lock:
            if change.method == "set_mode":
                self._settings.set_mode(change.target)
            elif change.method == "set_model":
                self._settings.set_model(change.target)
            else:
                self._settings.set_config_options(options)

    async def _restore_choices(self, live: _Live, first: bool, agent_id: Any) -> None:
        """Bring a started agent to what the conversation last chose (its latest `settings`
        event: mode, model, config options), or to `--agent-mode` on the host's first start;
        under an approval policy that needs requests asked, to a mode that asks. What cannot
        be restored is said in an `error` item."""
        wanted = choices_of(await self._last_settings(agent_id) or {})
        if first and self._start_mode is not None:
            wanted["mode"] = self._start_mode
        current = self._settings.choices()
        policy = self._permissions.policy
        mode = wanted["mode"] or current["mode"]
        asked = policy is not None and policy_needs_asking(policy)
        if policy is not None and asked and mode is not None and not mode_asks(mode):
            modes = self._settings.snapshot()["modes"] or {}
            wanted["mode"] = asking_mode(m["id"] for m in modes.get("available", ()))
            if wanted["mode"] is None:
                await self._recorder.error(
                    "the agent offers no mode that asks before edits and commands; it may make"
                    f" them without asking the approval policy {policy.source}"
                )
        steps: list[tuple[str, Callable[[], Change]]] = [
            (
                f"the option {key} = {value}",
                functools.partial(self._settings.config_change, key, value),
            )
            for key, value in wanted["config"].items()
            if current["config"].get(key, value) != value
        ]
        if wanted["model"] is not None and wanted["model"] != current["model"]:
            steps.append(
                (
                    f"the model {wanted['model']}",
                    functools.partial(self._settings.model_change, wanted["model"]),
                )
            )
        # The mode last: a model switch may move the agent out of a mode the model lacks.
        if wanted["mode"] is not None and wanted["mode"] != current["mode"]:
            steps.append(
                (
                    f"the mode {wanted['mode']}",
                    functools.partial(self._settings.mode_change, wanted["mode"]),
                )
            )
        self._changing = True
        try:
            for what, plan in steps:
                try:
                    await self._send_change(live, plan())
                except SessionError as exc:
                    await self._recorder.error(f"could not set {what}: {exc.message}")
        finally:
            self._changing = False

    def _check_start_mode(self, mode_id: str) -> None:
        """_StartModeError when the agent offers no mode `mode_id` (`--agent-mode`)."""
        try:
            self._settings.mode_change(mode_id)
        except SessionError as exc:
            raise _StartModeError(f"--agent-mode: {exc.message}{self._modes_text()}") from None

    def _modes_text(self) -> str:
        modes = self._settings.snapshot()["modes"] or {}
        ids = [m["id"] for m in modes.get("available", ())]
        return f" (it offers {', '.join(ids)})" if ids else ""

    async def _last_settings(self, agent_id: Any) -> dict[str, Any] | None:
        """The data of the conversation's latest `settings` event, if the agent that reported
        it was this one (the `agent_id` of the `agent_started` before it): another agent's mode
        and model ids mean nothing to this one."""
        found: dict[str, Any] | None = None
        starts = 0
        before = None
        while True:
            page = await self._log.query(
                self.conversation_id,
                before=before,
                limit=100,
                order="desc",
                types="session_event",
            )
            for item in page:
                what = item.data.get("what")
                if what == "settings" and found is None:
                    found = dict(item.data)
                elif what == "agent_started":
                    starts += 1  # the first is this start's own
                    if starts > 1 and found is not None:
                        return found if item.data.get("agent_id") == agent_id else None
            if len(page) < 100:
                return found
            before = page[-1].seq

    async def _record_settings(self, *, by: str, change: dict[str, Any] | None = None) -> None:
        """Store the `settings` session event; the agent's own reports only when they changed."""
        if not self._settings.known:
            return
        snapshot = self._settings.snapshot()
        if by == "agent" and snapshot == self._recorded_settings:
            return
        # No flush: a stream the agent is sending goes on; its message is stored when it ends.
        details = {**snapshot, "change": change} if change is not None else snapshot
        # A person's change is made already: its record never keeps them waiting.
        await self._recorder.session_event("settings", by=by, hold=change is not None, **details)
        self._recorded_settings = snapshot

    def takes_images(self) -> bool:
        return self._images_ok

    async def list_paths(self, prefix: str) -> tuple[list[str], bool]:
        return await anyio.to_thread.run_sync(
            complete, self._workspace, prefix, limiter=scan_limiter()
        )

    async def _prompt_blocks(self, prompt: Prompt) -> list[Any]:
        """The prompt's text, its images, then each file it names with `@path`
        (tunnel.agents.acp_context); what was attached is recorded as a `context_attached`
        session event of the turn. The first prompt of a forked conversation's session that
        could not fork the source's carries the conversation's transcript last."""
        blocks: list[Any] = [text_block(prompt.text)]
        for image in prompt.images:
            blocks.append(image_block(base64.b64encode(image.data).decode(), image.mime_type))
        attached = []
        for name in mentions(prompt.text):
            found = await anyio.to_thread.run_sync(
                functools.partial(
                    attach, self._workspace, name, embed=self._embeds, hidden=self._hidden
                )
            )
            if found is not None:
                blocks.append(found.block)
                attached.append(
                    {"path": found.path, "embedded": found.embedded, "size": found.size}
                )
        if attached:
            async with self._update_lock:
                await self._recorder.session_event(
                    "context_attached", files=attached, turn=self._recorder.turn
                )
        owed, self._owed_transcript = self._owed_transcript, None
        if owed is not None:
            # A forked conversation's first prompt: what the agent was not there for.
            blocks.append(self._transcript_block(owed))
        return blocks

    async def _record_usage(self, update: schema.UsageUpdate) -> None:
        """The agent's context use and cost (`usage_update`) as a `usage` session event, when it
        changed: the latest one is state a joiner is given (tunnel.host.session)."""
        usage: dict[str, Any] = {"used": update.used, "size": update.size, "cost": None}
        if update.cost is not None and math.isfinite(update.cost.amount):
            usage["cost"] = {"amount": update.cost.amount, "currency": update.cost.currency[:16]}
        if usage == self._recorded_usage:
            return
        await self._recorder.session_event("usage", by="agent", **usage)
        self._recorded_usage = usage

    async def _record_title(self, update: schema.SessionInfoUpdate) -> None:
        """The session's title (`session_info_update`) as a `title` session event when it
        changed: the latest is state a joiner is given (tunnel.host.session); the page shows it
        in its header, attach in a line."""
        title = update.title
        if not isinstance(title, str) or not title.strip():
            return
        title = title.strip()[:MAX_TITLE_LENGTH]
        if title == self._recorded_title:
            return
        await self._recorder.session_event("title", by="agent", title=title)
        self._recorded_title = title

    async def _record_commands(self) -> None:
        commands = self._settings.commands
        if commands == self._recorded_commands:
            return
        await self._recorder.session_event("commands", by="agent", commands=commands)
        self._recorded_commands = list(commands)

    # -- agent process -------------------------------------------------------------------------

    async def _ensure_agent(self) -> _Live | None:
        """The running agent, starting it if needed; None (and an error item) if it won't start."""
        async with self._start_lock:
            live = self._live
            if live is not None and not live.exited.is_set():
                return live
            assert self._task_group is not None, "run() starts the agent"
            try:
                started: _Live = await self._task_group.start(self._agent_lifetime)
            except Exception as exc:
                problem = unwrapped(exc)
                if isinstance(problem, _StartModeError | _ResumeRefused):
                    # Not recorded: the host stops (or the conversation that asked for that
                    # session closes), and the next run would show it again.
                    self._start_problem = str(problem)
                    return None
                logger.warning("could not start %s: %s", self.info.name, exc)
                reason = _describe(exc, self._start_timeout)
                await self._recorder.error(f"could not start the agent {self.info.name}: {reason}")
                return None
            return started

    async def _agent_lifetime(self, *, task_status: anyio.abc.TaskStatus[_Live]) -> None:
        argv, env = self._argv, cast("dict[str, str] | None", None)  # None: the host's own
        if self.sandbox is not None:  # bwrap runs it (tunnel/agents/sandbox.py)
            argv, env = self.sandbox.wrap(self._argv, os.environ)
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=self._workspace.root,
            env=env,
            limit=READ_BUFFER_BYTES,
            # Its own process group, so stopping it also stops whatever it spawned.
            start_new_session=True,
        )
        assert process.stdin is not None
        assert process.stdout is not None
        tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        live: _Live | None = None
        screen = _Screen(self)
        transport = StdioTransport(
            process.stdout,
            process.stdin,
            on_notification=screen,
            keep_results_of=("session/new", "session/load", "session/resume", "session/fork"),
        )
        screen.transport = transport
        conn: ClientSideConnection | None = None
        try:
            async with anyio.create_task_group() as tg:
                screen.task_group = tg
                terminals = Terminals(
                    tg, on_output=self._terminal_output, on_exit=self._terminal_exited
                )
                terminals.sandbox = self.sandbox  # the agent's commands run in its sandbox too
                # The package still files elicitation among its unstable methods; the schema it
                # was built from has it stable.
                conn = connect_to_agent(
                    cast(Client, _Client(self, terminals)), transport, use_unstable_protocol=True
                )
                tg.start_soon(_drain_stderr, process, tail)
                with anyio.fail_after(self._start_timeout) as deadline:
                    session_id, details = await self._open_session(conn, screen, deadline)
                if not self._started_once and self._start_mode is not None:
                    self._check_start_mode(self._start_mode)
                live = self._live = _Live(
                    conn=conn,
                    transport=transport,
                    process=process,
                    session_id=session_id,
                    screen=screen,
                )
                await self._recorder.session_event("agent_started", **details)
                await self._restore_choices(
                    live, first=not self._started_once, agent_id=details.get("agent_id")
                )
                self._started_once = True
                async with self._update_lock:
                    await self._record_settings(by="agent")
                    if self._settings.commands:
                        await self._record_commands()
                task_status.started(live)
                code = await _wait_exit(process)
                # What it started may live on, holding its pipes (npm's wrapper of codex-acp
                # runs the real agent as its child): stop them now, as after a crash.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGTERM)
                terminals.release_all()
                tg.cancel_scope.cancel()
            assert live is not None
            try:
                await self._record_exit(live, code, tail)
            except Exception:
                # The session outlives a log that failed to record the exit.
                logger.exception("could not record the exit of %s", self.info.name)
        finally:
            if live is not None:
                live.exited.set()
                if self._live is live:
                    self._live = None
            with anyio.move_on_after(STOP_GRACE * 3, shield=True):
                if conn is not None:
                    await conn.close()
                await _stop_process(process)

    async def _open_session(
        self, conn: ClientSideConnection, screen: _Screen, deadline: anyio.CancelScope
    ) -> tuple[str, dict[str, Any]]:
        """initialize, authenticate if need be, then session/resume, session/load or session/new.

        Returns the ACP session id and the details of the `agent_started` event. A wait for
        the next minute (`MINUTE_SESSION_FILES`) moves `deadline` on by as much.
        """
        assert screen.transport is not None
        transport = screen.transport
        init = await conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=schema.ClientCapabilities(
                fs=schema.FileSystemCapabilities(read_text_file=True, write_text_file=True),
                terminal=True,
                elicitation=schema.ElicitationCapabilities(
                    form=schema.ElicitationFormCapabilities()
                ),
            ),
            client_info=schema.Implementation(name="agent-tunnel", version=__version__),
        )
        details: dict[str, Any] = {"agent": self.info.name}
        agent_id = None
        if init.agent_info is not None:
            name = init.agent_info.title or init.agent_info.name
            agent_id = init.agent_info.name
            # Surfaces that attach from now on show the agent's own name.
            self.info = AgentInfo(name=name[:64] or self.info.name, kind="chat")
            details.update(agent=name, agent_id=agent_id, version=init.agent_info.version)
        methods = list(init.auth_methods or ())
        self._auth_methods = [_method_data(m) for m in methods]
        if self._auth_method is not None:
            await self._authenticate(conn, methods, self._auth_method)
            details["auth_method"] = self._auth_method
        self._settings = Settings()
        caps = init.agent_capabilities
        prompts = caps.prompt_capabilities if caps else None
        self._embeds = bool(prompts and prompts.embedded_context)
        self._images_ok = bool(prompts and prompts.image)
        # session/resume does not replay the history (the log has it): preferred when offered.
        resume = bool(caps and caps.session_capabilities and caps.session_capabilities.resume)
        can_load = bool(caps and caps.load_session)
        self._lists_sessions = bool(
            caps and caps.session_capabilities and caps.session_capabilities.list
        )
        self._owed_transcript = None
        origin = await self._origin(agent_id)
        if isinstance(origin, AskedSession):
            return await self._open_asked(
                conn, screen, details, origin.session_id, resume, can_load
            )
        if isinstance(origin, ForkOrigin):
            can_fork = bool(caps and caps.session_capabilities and caps.session_capabilities.fork)
            return await self._open_fork(conn, transport, methods, details, origin, can_fork)
        if isinstance(origin, OwnSession) and await self._transcript_owed(origin):
            # A fork given the transcript whose agent was stopped before its first prompt.
            assert origin.boundary is not None
            self._owed_transcript = await self._transcript(origin.boundary)
            details["transcript"] = self._owed_transcript.summary()
        previous = origin if resume or can_load else None
        if previous is not None:
            session_id, created_at = previous.session_id, previous.created
            method = "session/resume" if resume else "session/load"
            if not resume and agent_id in MINUTE_SESSION_FILES:
                wait = _next_minute_wait(created_at, time.time())
                if wait > 0:
                    logger.info(
                        "waiting %.1f s for the next minute before %s loads its session",
                        wait,
                        self.info.name,
                    )
                    deadline.deadline += wait
                    await anyio.sleep(wait)
            try:
                await self._reopen(conn, screen, method, session_id)
            except RequestError as exc:
                # The agent forgot it (or never kept it): a new session it is, and everyone
                # is told the agent does not remember the earlier turns.
                details["load_failed"] = _error_text(exc)
            else:
                return session_id, {
                    **details,
                    "session_id": session_id,
                    "resumed": True,
                    "resumed_with": method,
                }
        if self._owed_transcript is not None:
            # A new session given the transcript, as the fork's first was: a later start that
            # finds it unprompted gives the transcript again.
            details["forked"] = BY_TRANSCRIPT
        return await self._new_session(conn, transport, methods, details)

    async def _reopen(
        self, conn: ClientSideConnection, screen: _Screen, method: str, session_id: str
    ) -> None:
        """session/resume or session/load of `session_id`, taking in the settings it reports;
        what a load replays is held back, never recorded. RequestError when the agent refuses."""
        assert screen.transport is not None
        try:
            if method == "session/resume":
                loaded: Any = await conn.resume_session(
                    cwd=self._workspace.root, session_id=session_id, mcp_servers=[]
                )
            else:
                # Set before the answer is read: a replay may follow it at once.
                screen.hold_replay()
                loaded = await conn.load_session(
                    cwd=self._workspace.root, session_id=session_id, mcp_servers=[]
                )
        except RequestError:
            screen.drop_replay()
            raise
        if method == "session/load":
            screen.hold_replay()  # the quiet is counted from the answer on
        self._settings.start(
            loaded.modes if loaded else None,
            loaded.config_options if loaded else None,
            screen.transport.results.get(method),
        )

    async def _open_asked(
        self,
        conn: ClientSideConnection,
        screen: _Screen,
        details: dict[str, Any],
        session_id: str,
        resume: bool,
        can_load: bool,
    ) -> tuple[str, dict[str, Any]]:
        """The agent's past session the host user started this conversation to resume
        (`/resume`), resumed or loaded as after a restart. No new session in its place when the
        agent refuses: the start fails with the agent's words (_ResumeRefused)."""
        if not (resume or can_load):
            raise _ResumeRefused(f"{self.info.name} offers neither session/resume nor session/load")
        method = "session/resume" if resume else "session/load"
        try:
            await self._reopen(conn, screen, method, session_id)
        except RequestError as exc:
            raise _ResumeRefused(
                f"it did not resume session {session_id}: {_error_text(exc)}"
            ) from None
        return session_id, {
            **details,
            "session_id": session_id,
            "resumed": True,
            "resumed_with": method,
        }

    async def list_agent_sessions(self) -> list[PastSession]:
        """The agent's own past sessions in the workspace (`session/list` with it as `cwd`): the
        first page, at most MAX_PAST_SESSIONS. For the host user alone (the host console): they
        may be sessions never shared. SessionError when the agent is not running or does not
        list its sessions, or refuses."""
        live = self._live
        if live is None or live.exited.is_set():
            raise SessionError(
                "agent_unavailable", f"{self.info.name} is not running; a prompt starts it again"
            )
        if not self._lists_sessions:
            raise SessionError(
                "not_supported", f"{self.info.name} does not list its sessions (no session/list)"
            )
        try:
            with anyio.fail_after(LIST_TIMEOUT):
                answer = await live.conn.list_sessions(cwd=str(self._workspace.root))
        except TimeoutError:
            raise SessionError(
                "agent_unavailable",
                f"{self.info.name} did not answer session/list in {LIST_TIMEOUT:.0f} s",
            ) from None
        except RequestError as exc:
            raise SessionError(
                "agent_unavailable", f"{self.info.name} refused session/list: {_error_text(exc)}"
            ) from None
        return [
            PastSession(session_id=s.session_id, title=s.title, updated_at=s.updated_at)
            for s in answer.sessions[:MAX_PAST_SESSIONS]
        ]

    async def _new_session(
        self,
        conn: ClientSideConnection,
        transport: StdioTransport,
        methods: list[Any],
        details: dict[str, Any],
    ) -> tuple[str, dict[str, Any]]:
        """session/new, with the one login that needs nobody if the agent asks for one."""
        try:
            new = await conn.new_session(cwd=self._workspace.root, mcp_servers=[])
        except RequestError as exc:
            if exc.code != AUTH_REQUIRED or self._auth_method is not None:
                raise
            try:
                method = _automatic_method(methods)
            except _AuthNeeded:
                # A driver (or the host console) chooses: `authenticate` starts it again.
                await self._auth_required("it needs a login to start a session")
                raise
            await self._authenticate(conn, methods, method)
            details["auth_method"] = method
            new = await conn.new_session(cwd=self._workspace.root, mcp_servers=[])
        self._settings.start(new.modes, new.config_options, transport.results.get("session/new"))
        return new.session_id, {**details, "session_id": new.session_id, "resumed": False}

    async def _authenticate(
        self, conn: ClientSideConnection, methods: list[Any], method_id: str
    ) -> None:
        if method_id not in [m.id for m in methods]:
            raise _AuthNeeded(f"it offers no login method {method_id!r}; {_methods_text(methods)}")
        await conn.authenticate(method_id=method_id)

    # -- forks ---------------------------------------------------------------------------------

    async def _origin(self, agent_id: str | None) -> Origin:
        """Which session this start continues (tunnel.agents.acp_origin): the conversation's
        session events read newest first until that is known."""
        scan = OriginScan(agent_id)
        before = None
        while True:
            page = await self._log.query(
                self.conversation_id,
                before=before,
                limit=100,
                order="desc",
                types="session_event",
            )
            for item in page:
                if scan.feed(item):
                    return scan.result()
            if len(page) < 100:
                return scan.result()
            before = page[-1].seq

    async def _open_fork(
        self,
        conn: ClientSideConnection,
        transport: StdioTransport,
        methods: list[Any],
        details: dict[str, Any],
        origin: ForkOrigin,
        can_fork: bool,
    ) -> tuple[str, dict[str, Any]]:
        """The first session of a forked conversation: the agent's own fork of the source's
        session when it offers session/fork and that session holds exactly what was copied;
        otherwise a new session, given the copied conversation with its first prompt."""
        details = {**details, "forked_from": origin.source, "forked_upto": origin.upto}
        fallback: str | None
        if not can_fork:
            fallback = "the agent offers no session/fork"
        elif origin.session_id is None:
            fallback = "the conversation forked ran no session of this agent"
        else:
            fallback = await self._fork_inexact(origin)
        if fallback is None:
            assert origin.session_id is not None
            try:
                forked = await conn.fork_session(
                    cwd=self._workspace.root, session_id=origin.session_id, mcp_servers=[]
                )
            except RequestError as exc:
                fallback = f"the agent refused session/fork: {_error_text(exc)}"
            else:
                self._settings.start(
                    forked.modes, forked.config_options, transport.results.get("session/fork")
                )
                return forked.session_id, {
                    **details,
                    "session_id": forked.session_id,
                    "resumed": False,
                    "forked": BY_SESSION_FORK,
                    "forked_session": origin.session_id,
                }
        session_id, details = await self._new_session(conn, transport, methods, details)
        self._owed_transcript = await self._transcript(origin.boundary)
        details.update(
            forked=BY_TRANSCRIPT,
            fork_fallback=fallback,
            transcript=self._owed_transcript.summary(),
        )
        return session_id, details

    async def _fork_inexact(self, origin: ForkOrigin) -> str | None:
        """Why the source's agent session holds more than the fork copied, or None: the source
        went on after the fork point, or the fork point is a prompt not answered yet (its turn
        may be running in the source)."""
        later = await self._log.query(origin.source, after=origin.upto, limit=1, types=TURN_TYPES)
        if later:
            return "the conversation forked went on after the fork point"
        last = await self._log.query(
            self.conversation_id,
            before=origin.boundary,
            limit=1,
            order="desc",
            types=TRANSCRIPT_TYPES,
        )
        if last and last[0].type == "message" and last[0].data.get("role") == "user":
            return "the fork point is a prompt the agent had not answered"
        return None

    async def _transcript_owed(self, own: OwnSession) -> bool:
        """Whether a fork's session made with a transcript has not had its first prompt yet."""
        if own.forked != BY_TRANSCRIPT or own.boundary is None:
            return False
        since = await self._log.query(
            self.conversation_id, after=own.started_seq, limit=16, types="message"
        )
        return not any(item.data.get("role") == "user" for item in since)

    async def _transcript(self, boundary: int) -> Transcript:
        """The conversation before `boundary` (the copied part of a fork) as a transcript."""
        items = await self._log.query(
            self.conversation_id,
            before=boundary,
            limit=TRANSCRIPT_ITEMS,
            order="desc",
            types=TRANSCRIPT_TYPES,
        )
        items.reverse()
        header = (
            "This session continues a conversation that was forked from another one; you did"
            " not see it happen in this session. Here is what was said and done in it, oldest"
            " first, clipped: the context of the message it comes with and of those after it."
        )
        return render(items, header=header, earlier=len(items) == TRANSCRIPT_ITEMS)

    def _transcript_block(self, transcript: Transcript) -> Any:
        """The transcript as a prompt's content: embedded context when the agent takes it."""
        if not self._embeds:
            return text_block(transcript.text)
        uri = f"agent-tunnel:conversation/{self.conversation_id}/transcript"
        return resource_block(embedded_text_resource(uri, transcript.text, mime_type="text/plain"))

    async def _record_exit(self, live: _Live, code: int, tail: deque[str]) -> None:
        live.exited.set()
        self._live = None
        if tail:
            logger.warning(
                "%s exited with %s; last stderr lines:\n%s", self.info.name, code, "\n".join(tail)
            )
        # Let the updates the agent sent before exiting be recorded first.
        stdout = live.process.stdout
        for _ in range(100):  # at most a second
            if stdout is None or stdout.at_eof():
                break
            await anyio.sleep(0.01)
        async with self._update_lock:
            await self._recorder.flush()
        await self._permissions.cancel_all(by="host")
        await self._elicitations.cancel_all(by="host")
        await self._recorder.error(
            f"the agent {self.info.name} exited ({_exit_text(code)}); "
            "the next prompt starts it again"
        )
        await self._recorder.session_event("agent_exited", code=code)

    async def _cancel_watchdog(self, turn: int) -> None:
        try:
            await anyio.sleep(CANCEL_GRACE)
            if self._turn == turn and self._turn_scope is not None:
                await self._recorder.error(
                    f"the agent did not stop within {CANCEL_GRACE:g} s of the cancel; "
                    "the turn was abandoned"
                )
                self._turn_scope.cancel()
        finally:
            self._watchdog_armed = False

    # -- requests from the agent ---------------------------------------------------------------

    async def _on_update(self, update: Any) -> None:
        # Each update is its own task waiting for the lock: while the log cannot be written,
        # the writer bounds how many may wait (past that the turn is cancelled).
        with self._recorder.writer.admitting() as admitted:
            if admitted:
                await self._record_update(update)

    async def _record_update(self, update: Any) -> None:
        async with self._update_lock:
            try:
                if isinstance(update, schema.UsageUpdate):
                    await self._record_usage(update)
                elif isinstance(update, schema.SessionInfoUpdate):
                    await self._record_title(update)
                elif isinstance(update, _STATE_UPDATES):
                    await self._on_state_update(update)
                else:
                    if isinstance(update, schema.ToolCallStart | schema.ToolCallProgress):
                        self._know_call(update.tool_call_id, call_fields(update))
                    await apply_update(self._recorder, update)
                    if isinstance(update, schema.ToolCallProgress) and update.status == "failed":
                        await self._explain_refusal(update)
            except ValueError as exc:
                # E.g. text with a lone surrogate: the log refuses it; say so, go on.
                logger.warning("cannot store an update from %s: %s", self.info.name, exc)
                await self._recorder.error(f"an update from the agent could not be stored: {exc}")
            if not self._busy and self._recorder.streaming:
                self._flush_later()

    async def _on_state_update(self, update: Any) -> None:
        self._settings_from(update)
        if isinstance(update, schema.AvailableCommandsUpdate):
            await self._record_commands()
        elif not self._changing:
            await self._record_settings(by="agent")
            self._hold_to_asking()

    def _hold_to_asking(self) -> None:
        """Under an approval policy that needs requests asked, switch the agent back from a mode
        it moved to by itself that does not ask (a person's pick among Claude's plan options).
        In a task: the agent may be waiting for this update to be taken."""
        policy = self._permissions.policy
        current = (self._settings.snapshot()["modes"] or {}).get("current")
        if policy is None or not isinstance(current, str) or mode_asks(current):
            return
        if policy_needs_asking(policy) and self._task_group is not None:
            self._task_group.start_soon(self._back_to_asking, current, policy.source)

    async def _back_to_asking(self, left: str, source: str) -> None:
        try:
            async with self._change_lock:
                live = self._live
                modes = self._settings.snapshot()["modes"] or {}
                if live is None or live.exited.is_set() or modes.get("current") != left:
                    return
                target = asking_mode(m["id"] for m in modes.get("available", ()))
                said = (
                    f"the agent switched itself to the mode {left}, which does not ask before"
                    f" edits and commands, and the approval policy {source} needs them asked"
                )
                if target is None:
                    await self._recorder.error(f"{said}; it offers no mode that asks")
                    return
                self._changing = True
                try:
                    await self._send_change(live, self._settings.mode_change(target))
                except SessionError as exc:
                    await self._recorder.error(f"{said}; switching back failed: {exc.message}")
                    return
                finally:
                    self._changing = False
                await self._recorder.error(f"{said}: the host switched it back to {target}")
                async with self._update_lock:
                    await self._record_settings(by="host", change={"mode": target})
        except Exception:
            # The session outlives a failed switch; the settings event shows the mode as it is.
            logger.exception("could not switch %s back to a mode that asks", self.info.name)

    def _settings_from(self, update: Any) -> None:
        if isinstance(update, schema.CurrentModeUpdate):
            self._settings.set_mode(update.current_mode_id)
        elif isinstance(update, schema.ConfigOptionUpdate):
            self._settings.set_config_options(update.config_options)
        elif isinstance(update, schema.AvailableCommandsUpdate):
            self._settings.set_commands(update.available_commands)

    def _flush_later(self) -> None:
        """Store a stream the agent sends outside any turn once it has been quiet a moment."""
        watching = self._late_deadline is not None
        self._late_deadline = anyio.current_time() + LATE_FLUSH_DELAY
        if not watching and self._task_group is not None:
            self._task_group.start_soon(self._flush_when_quiet)

    async def _flush_when_quiet(self) -> None:
        try:
            while self._late_deadline is not None:
                wait = self._late_deadline - anyio.current_time()
                if wait <= 0:
                    break
                await anyio.sleep(wait)
            async with self._update_lock:
                if not self._busy:
                    await self._recorder.flush()
        finally:
            self._late_deadline = None

    async def _record_unsupported(self, kind: str) -> None:
        with self._recorder.writer.admitting() as admitted:
            if not admitted:
                return
            async with self._update_lock:
                await self._recorder.session_event("unsupported_update", by="agent", kind=kind)

    def _know_call(self, tool_call_id: str, fields: dict[str, Any]) -> dict[str, Any]:
        """Add `fields` to what is known of the call; the newest MAX_KNOWN_CALLS are kept."""
        known = merge_known_call(self._known_calls.pop(tool_call_id, {}), fields)
        self._known_calls[tool_call_id] = known
        while len(self._known_calls) > MAX_KNOWN_CALLS:
            del self._known_calls[next(iter(self._known_calls))]
        return known

    async def _on_permission(
        self, tool_call: schema.ToolCallUpdate, options: list[schema.PermissionOption]
    ) -> schema.RequestPermissionResponse:
        pending = None
        with self._recorder.writer.admitting() as admitted:
            if admitted:
                async with self._update_lock:
                    # The policy judges the call as far as it is known: a request that repeats
                    # it with empty fields must not slip past a rule on its command or paths.
                    known = self._know_call(tool_call.tool_call_id, call_fields(tool_call))
                    pending = await self._permissions.open(
                        judged={"tool_call": known},
                        title=tool_call.title or "The agent asks for permission",
                        tool_call_id=tool_call.tool_call_id,
                        options=[
                            PermissionOption(option_id=o.option_id, name=o.name, kind=o.kind)
                            for o in options
                        ],
                        details=permission_details(tool_call),
                    )
        request = incoming_request.get()
        if pending is not None and request is not None:
            entry = pending
            self._withdraw[request["id"]] = lambda: self._permissions.cancel(entry, by="agent")
        try:
            decision = await self._permissions.wait(pending) if pending is not None else None
        finally:
            if request is not None:
                self._withdraw.pop(request["id"], None)
        if decision is None or decision.option is None:
            return schema.RequestPermissionResponse(
                outcome=schema.DeniedOutcome(outcome="cancelled")
            )
        return schema.RequestPermissionResponse(
            outcome=schema.AllowedOutcome(outcome="selected", option_id=decision.option.option_id)
        )

    async def _on_elicitation(self, message: str) -> dict[str, Any]:
        """A question of the agent's (form mode only: the host offers no URL mode), read from
        the request as sent: the package's own model would quietly mend a schema it cannot read."""
        request = incoming_request.get()
        params = request.get("params") if request is not None else None
        params = params if isinstance(params, dict) else {}
        try:
            fields = form_fields(params.get("requestedSchema"))
        except BadForm as exc:
            await self._refused("elicitation_refused", reason=str(exc))
            raise RequestError.invalid_params({"details": str(exc)}) from None
        tool_call_id = params.get("toolCallId")
        pending = None
        with self._recorder.writer.admitting() as admitted:
            if admitted:
                async with self._update_lock:
                    pending = await self._elicitations.open(
                        message=message,
                        fields=fields,
                        tool_call_id=tool_call_id if isinstance(tool_call_id, str) else None,
                    )
        if pending is None:
            return {"action": "cancel"}
        if request is not None:
            entry = pending
            self._withdraw[request["id"]] = lambda: self._elicitations.cancel(
                entry.request_id, by="agent"
            )
        try:
            action, content = await self._elicitations.wait(pending)
        finally:
            if request is not None:
                self._withdraw.pop(request["id"], None)
        if action == "accept":
            return {"action": "accept", "content": content or {}}
        return {"action": action}

    def _withdrawn(self, request_id: Any) -> None:
        """The agent cancelled a request of its own (`$/cancel_request`): if it is one of its
        open permission requests or questions, it is closed as cancelled for everyone, and the
        agent gets the cancelled answer."""
        withdraw = self._withdraw.pop(request_id, None) if _hashable(request_id) else None
        if withdraw is not None and self._task_group is not None:
            self._task_group.start_soon(withdraw)

    async def answer_elicitation(
        self, request_id: str, action: str, content: dict[str, Any] | None, *, by: str
    ) -> None:
        check_by(by)
        self._recorder.writer.check_writable()
        await self._elicitations.answer(request_id, action, content, by=by)

    def pending_elicitations(self) -> list[Item]:
        return self._elicitations.pending()

    async def _fs(self, op: str, path: str, call: functools.partial[Any]) -> Any:
        """Run a workspace file operation for the agent; refusals become JSON-RPC errors.

        FileNotFoundError is left to the caller (a read answers it with empty content)."""
        try:
            return await anyio.to_thread.run_sync(call)
        except OutsideWorkspace as exc:
            await self._refused("fs_refused", op=op, path=path)
            raise RequestError(-32602, f"{exc}: access refused", {"path": path}) from None
        except FileNotFoundError:
            if op == "read":
                raise
            raise RequestError.resource_not_found(path) from None
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise RequestError(-32603, f"cannot {op} {path}: {reason}", {"path": path}) from None

    async def _explain_refusal(self, update: schema.ToolCallProgress) -> None:
        """A tool call the agent failed with a refusal it is known for, after someone chose an
        option it would not honour: one `error` line saying whose choice and what to do."""
        text = result_text(tool_content(update.content), update.raw_output)
        known = readable_refusal(text)
        if known is None:
            return
        chose = ""
        decision = await self._decision_on(update.tool_call_id)
        if decision is not None:
            chose = f'{decision.created_by} chose "{decision.data.get("option_name")}", which '
        await self._recorder.error(f"{chose}{self.info.name} refused: {known}")

    async def _decision_on(self, tool_call_id: str) -> Item | None:
        """The latest `permission_decision` on a request about this tool call, among the last
        few requests (a refusal follows its decision at once)."""
        requests = await self._log.query(
            self.conversation_id, limit=16, order="desc", types="permission_request"
        )
        asked = {
            r.data.get("request_id")
            for r in requests
            if (r.data.get("tool_call") or {}).get("tool_call_id") == tool_call_id
        }
        decisions = await self._log.query(
            self.conversation_id, limit=16, order="desc", types="permission_decision"
        )
        return next((d for d in decisions if d.data.get("request_id") in asked), None)

    async def _refused(self, what: str, **details: Any) -> None:
        logger.warning("refused the agent's request (%s): %s", what, details)
        # After the updates the agent sent before this request, as the agent sees it.
        async with self._update_lock:
            await self._recorder.session_event(what, **details)

    # -- terminals -----------------------------------------------------------------------------

    async def _create_terminal(
        self,
        terminals: Terminals,
        command: str,
        args: list[str],
        env: dict[str, str],
        cwd: str | None,
        output_byte_limit: int | None,
    ) -> Terminal:
        where = cwd if cwd is not None else self._workspace.root
        try:
            # The directory itself, not its name: the command starts in what was checked.
            cwd_fd = await anyio.to_thread.run_sync(self._workspace.open_dir, where)
        except OutsideWorkspace as exc:
            await self._refused("terminal_refused", command=command, cwd=where)
            message = f"{exc}: a terminal runs in the workspace"
            raise RequestError(-32602, message, {"cwd": where}) from None
        except OSError:
            reason = f"{where} is not a directory"
            raise RequestError(-32603, reason, {"command": command}) from None
        try:
            shown = self._workspace.relative(where)
            name = (
                self._workspace.root if shown == "." else os.path.join(self._workspace.root, shown)
            )
            terminal = await terminals.create(
                command,
                args,
                cwd=name,
                cwd_fd=cwd_fd,
                env=env,
                output_byte_limit=output_byte_limit,
            )
        except TerminalError as exc:
            raise RequestError(-32603, str(exc), {"command": command}) from None
        finally:
            os.close(cwd_fd)
        await self._recorder.publish(
            "tool_terminal",
            {"terminal_id": terminal.terminal_id, "command": terminal.argv, "text": ""},
        )
        return terminal

    async def _terminal_output(self, terminal: Terminal, text: str) -> None:
        await self._recorder.publish(
            "tool_terminal",
            {
                "terminal_id": terminal.terminal_id,
                "text": clip_text(text, MAX_TERMINAL_EVENT_CHARS),
            },
        )

    async def _terminal_exited(self, terminal: Terminal) -> None:
        output = terminal.text()
        cut = len(output) > MAX_TERMINAL_ITEM_CHARS
        data = {
            "terminal_id": terminal.terminal_id,
            "command": [clip_text(arg, 4096) for arg in terminal.argv[:256]],
            "cwd": self._workspace.relative(terminal.cwd),
            "output": output[-MAX_TERMINAL_ITEM_CHARS:] if cut else output,
            "truncated": terminal.truncated or cut,
            "exit_code": terminal.exit_code,
            "signal": terminal.signal,
            "released": terminal.released,
        }
        try:
            async with self._update_lock:
                await self._recorder.tool_terminal(data)
        except Exception:
            logger.exception("could not record the end of terminal %s", terminal.terminal_id)


_STATE_KINDS = frozenset(
    {"current_mode_update", "config_option_update", "available_commands_update"}
)


_PACKAGE_NOTIFICATIONS = frozenset({"elicitation/complete"})
"""Notifications other than session/update that the acp package routes to the client."""


class _Screen:
    """Sees every notification from the agent before the acp package does (in arrival order).

    It takes for the session what the package would drop with a traceback (update kinds it does
    not know) and what must not be recorded again: the history an agent replays for session/load,
    while the load runs and, since some agents replay after answering it (Gemini CLI), from the
    answer until the first prompt of the loaded session is sent (`hold_replay`, `end_replay`).
    Updates of the session's state (mode, config options, commands) still update it.
    """

    def __init__(self, session: AcpSession) -> None:
        self._session = session
        self.transport: StdioTransport | None = None
        self.task_group: anyio.abc.TaskGroup | None = None
        self._unsupported: set[str] = set()
        self._ignored: set[str] = set()
        self._replaying = False
        self._last_replayed = 0.0

    def hold_replay(self) -> None:
        """session/load is sent or answered: hold its replay back until `end_replay`."""
        self._replaying = True
        self._last_replayed = anyio.current_time()

    def drop_replay(self) -> None:
        """session/load failed: there is no replay to hold back."""
        self._replaying = False

    async def end_replay(self) -> None:
        """Before the first prompt after a load: wait until the agent has been quiet for
        REPLAY_QUIET (at most REPLAY_WAIT), then let its updates be recorded again."""
        if not self._replaying:
            return
        give_up = anyio.current_time() + REPLAY_WAIT
        while (now := anyio.current_time()) < give_up:
            quiet_at = self._last_replayed + REPLAY_QUIET
            if now >= quiet_at:
                break
            await anyio.sleep(min(quiet_at, give_up) - now)
        self._replaying = False

    def __call__(self, message: dict[str, Any]) -> bool:
        if message.get("method") == "$/cancel_request":
            params = message.get("params")
            if isinstance(params, dict):
                self._session._withdrawn(params.get("requestId"))
            return True
        method = message.get("method")
        if method != "session/update":
            if method in _PACKAGE_NOTIFICATIONS or (isinstance(method, str) and method[:1] == "_"):
                return False
            # A vendor's own notification (Qwen Code's prompt suggestions): nothing here reads
            # it, and the package would log a traceback for each. Said once per method.
            if isinstance(method, str) and method not in self._ignored and len(self._ignored) < 64:
                self._ignored.add(method)
                logger.info("ignoring the agent's %r notifications", method[:80])
            return True
        params = message.get("params")
        update = params.get("update") if isinstance(params, dict) else None
        kind = update.get("sessionUpdate") if isinstance(update, dict) else None
        if self.transport is not None and self.transport.waiting_for(
            "session/load", "session/resume", "session/fork"
        ):
            if kind in _STATE_KINDS:
                with contextlib.suppress(ValidationError):
                    notification = schema.SessionNotification.model_validate(params)
                    self._session._settings_from(notification.update)
            return True
        if self._replaying and kind not in _STATE_KINDS:
            self._last_replayed = anyio.current_time()
            return True
        if isinstance(kind, str) and kind not in KNOWN_UPDATES:
            if kind not in self._unsupported and len(self._unsupported) < 64:
                self._unsupported.add(kind)
                logger.info("the agent sent an update kind this host does not know: %s", kind)
                if self.task_group is not None:
                    self.task_group.start_soon(self._session._record_unsupported, kind[:256])
            return True
        return False


def _hashable(value: Any) -> bool:
    return isinstance(value, int | str) and not isinstance(value, bool)


def _method_data(method: Any) -> dict[str, str]:
    """A login method as a session event shows it: its id, name and description."""
    data = {"id": str(method.id), "name": str(getattr(method, "name", "") or method.id)}
    description = getattr(method, "description", None)
    if description:
        data["description"] = clip_text(str(description), 500)
    return data


def _automatic_method(methods: list[Any]) -> str:
    """The one login method that needs nobody: an env_var method whose variables are all set."""
    ready = [
        m
        for m in methods
        if isinstance(m, schema.EnvVarAuthMethod)
        and all(v.optional or v.name in os.environ for v in m.vars)
    ]
    if len(ready) == 1:
        return str(ready[0].id)
    raise _AuthNeeded(f"it needs a login; {_methods_text(methods)}")


def _methods_text(methods: list[Any]) -> str:
    if not methods:
        return "it offers no login method"
    listed = "; ".join(
        f"{m.id} ({m.name}{': ' + m.description if m.description else ''})" for m in methods
    )
    return f"choose one with tunnel host --agent-auth METHOD_ID: {listed}"


def _error_text(exc: RequestError) -> str:
    """An agent's JSON-RPC error as one line: its message, code and data; or a refusal the
    agent is known for, in words a teammate can act on (tunnel.agents.acp_refusals)."""
    text = f"{exc} (code {exc.code})"
    if exc.data is not None:
        try:
            data = json.dumps(exc.data, ensure_ascii=False, default=str)
        except ValueError:
            data = repr(exc.data)
        text += f": {clip_text(data, 1000)}"
    known = readable_refusal(text)
    if known is not None:
        logger.info("the agent refused: %s", text)
        return known
    return text


async def _drain_stderr(process: asyncio.subprocess.Process, tail: deque[str]) -> None:
    """Read the agent's stderr so it never blocks on a full pipe; keep the last lines."""
    stream = process.stderr
    if stream is None:
        return
    pending = b""
    while chunk := await stream.read(65536):
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()[-4096:]
        for line in lines:
            text = line[:4096].decode("utf-8", errors="replace")
            logger.debug("agent stderr: %s", text)
            tail.append(text)


async def _stop_process(process: asyncio.subprocess.Process) -> None:
    """Close stdin, then SIGTERM, then SIGKILL the agent's process group."""
    if process.stdin is not None:
        with contextlib.suppress(Exception):
            process.stdin.close()
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if process.returncode is not None:
            break
        if sig is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
        with anyio.move_on_after(STOP_GRACE):
            await process.wait()
    # Children it left behind in its group go too.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def _wait_exit(process: asyncio.subprocess.Process) -> int:
    """The exit status of the agent's own process, as soon as it exits.

    Not `process.wait()`: asyncio returns from it only once the pipes are closed too, and a
    child the agent started with them (npm's wrapper runs codex-acp's binary so) keeps them
    open, serving on, after the process we started died. The status is there before that,
    with no event to wait on (the child watcher sets it), hence the look every EXIT_POLL.
    """
    while True:
        code = process.returncode
        if code is not None:
            return code
        await anyio.sleep(EXIT_POLL)


def _next_minute_wait(since: float, now: float) -> float:
    """Seconds until the minute after the one of `since` (UTC) begins, 0 if it has begun."""
    if int(now // 60) != int(since // 60):
        return 0.0
    # A little past the turn of the minute, so the agent's clock is past it too.
    return (int(now // 60) + 1) * 60 - now + 0.5


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _describe(exc: BaseException, start_timeout: float) -> str:
    exc = unwrapped(exc)
    if isinstance(exc, FileNotFoundError):
        return "program not found"
    if isinstance(exc, PermissionError):
        return "permission denied"
    if isinstance(exc, TimeoutError):
        return f"no answer to initialize/session/new within {start_timeout:g} s"
    if isinstance(exc, ConnectionError):
        return "it exited during the handshake"
    if isinstance(exc, _AuthNeeded):
        return str(exc)
    if isinstance(exc, RequestError):
        return f"it refused the handshake: {_error_text(exc)}"
    return type(exc).__name__
