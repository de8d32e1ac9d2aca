"""An Agent Client Protocol agent as the shared session (`--agent acp:COMMAND ARGS...`).

The agent runs as a subprocess speaking ACP (JSON-RPC over stdio) through the
`agent-client-protocol` package: we send initialize, session/new (cwd = the workspace),
session/prompt and session/cancel; we serve session/update, session/request_permission and
fs/read_text_file, fs/write_text_file (inside the workspace only). An agent that exits or crashes
is recorded (an `error` item and a `session_event`); the next prompt starts a fresh process with a
new ACP session, while the log keeps the whole conversation.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.abc
from acp import PROTOCOL_VERSION, RequestError, connect_to_agent, schema, text_block
from acp.client.connection import ClientSideConnection
from acp.interfaces import Client

from tunnel import __version__
from tunnel.log import Log
from tunnel.process.groups import unwrapped

from .acp_updates import apply_update
from .base import AgentInfo
from .chat import ChatSession, Prompt
from .permissions import PermissionOption
from .workspace import OutsideWorkspace, Workspace

logger = logging.getLogger("tunnel.agents.acp")

READ_BUFFER_BYTES = 16 * 1024 * 1024
"""The agent's stdout reader buffer. The acp package joins a longer JSON-RPC line from several
reads, so the agent (the host's own program) is trusted not to send endless lines."""

START_TIMEOUT = 60.0
"""Default seconds the agent has to answer initialize and session/new. A program that is not
an ACP agent often just stays silent (the acp package skips lines that are not JSON)."""

CANCEL_GRACE = 10.0
"""Seconds an agent has to end its turn after session/cancel before the turn is abandoned."""

STOP_GRACE = 2.0
"""Seconds between closing the agent's stdin, SIGTERM and SIGKILL when stopping it."""

STDERR_TAIL_LINES = 20
"""Lines of the agent's stderr kept to explain a crash in the host's log."""


@dataclass(slots=True, kw_only=True)
class _Live:
    """A running agent process and its ACP session."""

    conn: ClientSideConnection
    process: asyncio.subprocess.Process
    session_id: str
    exited: anyio.Event = field(default_factory=anyio.Event)


class _Client:
    """The client side of ACP: what the agent may ask of us."""

    def __init__(self, session: AcpSession) -> None:
        self._session = session

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

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> schema.ReadTextFileResponse:
        read = functools.partial(self._session._workspace.read_text, path, line=line, limit=limit)
        text = await self._session._fs("read", path, read)
        return schema.ReadTextFileResponse(content=text)

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> schema.WriteTextFileResponse:
        write = functools.partial(self._session._workspace.write_text, path, content)
        await self._session._fs("write", path, write)
        return schema.WriteTextFileResponse()


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
    ) -> None:
        if not argv:
            raise ValueError("an acp agent needs a command")
        super().__init__(
            info=AgentInfo(name=os.path.basename(argv[0]), kind="chat"),
            log=log,
            conversation_id=conversation_id,
        )
        self._argv = list(argv)
        self._workspace = Workspace(workspace)
        self._start_timeout = start_timeout
        self._live: _Live | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._start_lock = anyio.Lock()
        # FIFO (anyio's Lock queues waiters in order): the acp package handles each incoming
        # message in its own task, created in arrival order, so taking this lock first thing
        # keeps updates in the order the agent sent them.
        self._update_lock = anyio.Lock()
        self._turn = 0
        self._watchdog_armed = False

    @property
    def agent_pid(self) -> int | None:
        """The process id of the running agent, None when it is not running."""
        live = self._live
        return live.process.pid if live is not None else None

    # -- ChatSession hooks ---------------------------------------------------------------------

    async def _start(self, task_group: anyio.abc.TaskGroup) -> None:
        self._task_group = task_group
        await self._ensure_agent()

    async def _run_turn(self, prompt: Prompt) -> None:
        self._turn += 1
        live = await self._ensure_agent()
        if live is None:
            return
        try:
            response = await live.conn.prompt(
                session_id=live.session_id, prompt=[text_block(prompt.text)]
            )
        except RequestError as exc:
            async with self._update_lock:
                await self._recorder.error(f"the agent failed the prompt: {exc}")
            return
        except ConnectionError:
            # The agent went away mid-turn; its exit is recorded by _agent_lifetime.
            return
        async with self._update_lock:
            await self._recorder.flush()
            if response.stop_reason != "end_turn":
                await self._recorder.session_event(
                    "turn_ended", by="agent", stop_reason=response.stop_reason
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
        if not self._watchdog_armed and self._task_group is not None:
            self._watchdog_armed = True
            self._task_group.start_soon(self._cancel_watchdog, self._turn)

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
                logger.warning("could not start %s: %s", self.info.name, exc)
                reason = _describe(exc, self._start_timeout)
                await self._recorder.error(f"could not start the agent {self.info.name}: {reason}")
                return None
            return started

    async def _agent_lifetime(self, *, task_status: anyio.abc.TaskStatus[_Live]) -> None:
        process = await asyncio.create_subprocess_exec(
            *self._argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=self._workspace.root,
            limit=READ_BUFFER_BYTES,
            # Its own process group, so stopping it also stops whatever it spawned.
            start_new_session=True,
        )
        assert process.stdin is not None
        assert process.stdout is not None
        conn = connect_to_agent(cast(Client, _Client(self)), process.stdin, process.stdout)
        tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        live: _Live | None = None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_drain_stderr, process, tail)
                with anyio.fail_after(self._start_timeout):
                    init = await conn.initialize(
                        protocol_version=PROTOCOL_VERSION,
                        client_capabilities=schema.ClientCapabilities(
                            fs=schema.FileSystemCapabilities(
                                read_text_file=True, write_text_file=True
                            ),
                            terminal=False,
                        ),
                        client_info=schema.Implementation(name="agent-tunnel", version=__version__),
                    )
                    new = await conn.new_session(cwd=self._workspace.root, mcp_servers=[])
                live = self._live = _Live(conn=conn, process=process, session_id=new.session_id)
                details: dict[str, Any] = {"agent": self.info.name}
                if init.agent_info is not None:
                    name = init.agent_info.title or init.agent_info.name
                    # Surfaces that attach from now on show the agent's own name.
                    self.info = AgentInfo(name=name[:64] or self.info.name, kind="chat")
                    details["agent"] = name
                    details["version"] = init.agent_info.version
                await self._recorder.session_event("agent_started", **details)
                task_status.started(live)
                code = await process.wait()
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
                await conn.close()
                await _stop_process(process)

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
        async with self._update_lock:
            try:
                await apply_update(self._recorder, update)
            except ValueError as exc:
                # E.g. text with a lone surrogate: the log refuses it; say so, go on.
                logger.warning("cannot store an update from %s: %s", self.info.name, exc)
                await self._recorder.error(f"an update from the agent could not be stored: {exc}")

    async def _on_permission(
        self, tool_call: schema.ToolCallUpdate, options: list[schema.PermissionOption]
    ) -> schema.RequestPermissionResponse:
        async with self._update_lock:
            pending = await self._permissions.open(
                title=tool_call.title or "The agent asks for permission",
                tool_call_id=tool_call.tool_call_id,
                options=[
                    PermissionOption(option_id=o.option_id, name=o.name, kind=o.kind)
                    for o in options
                ],
            )
        decision = await self._permissions.wait(pending) if pending is not None else None
        if decision is None or decision.option is None:
            return schema.RequestPermissionResponse(
                outcome=schema.DeniedOutcome(outcome="cancelled")
            )
        return schema.RequestPermissionResponse(
            outcome=schema.AllowedOutcome(outcome="selected", option_id=decision.option.option_id)
        )

    async def _fs(self, op: str, path: str, call: functools.partial[Any]) -> Any:
        """Run a workspace file operation for the agent; refusals become JSON-RPC errors."""
        try:
            return await anyio.to_thread.run_sync(call)
        except OutsideWorkspace as exc:
            logger.warning("refused the agent's %s of %r: outside the workspace", op, path)
            # After the updates the agent sent before this request, as the agent sees it.
            async with self._update_lock:
                await self._recorder.session_event("fs_refused", op=op, path=path)
            raise RequestError(-32602, f"{exc}: access refused", {"path": path}) from None
        except FileNotFoundError:
            raise RequestError.resource_not_found(path) from None
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise RequestError(-32603, f"cannot {op} {path}: {reason}", {"path": path}) from None


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
    if isinstance(exc, RequestError):
        return f"it refused the handshake: {exc}"
    return type(exc).__name__
