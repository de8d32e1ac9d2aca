"""Turn-taking for chat agents: prompts from every driver run one at a time, in order.

A prompt is recorded the moment it is accepted; it then waits in a bounded queue until the turn
before it ends. Every change of state publishes a `status` event (`running`/`idle` and how many
prompts wait), so every surface can show "agent busy, 2 queued".

Faults: while the log cannot be written, prompts are refused and the running turn waits for its
items to be stored (`tunnel.agents.writer`); a session starting after a host that stopped
mid-turn first closes what that host left open (`tunnel.agents.recovery`). Every turn leaves at
least one item carrying its `turn`, so the next start can tell a prompt that ran from one that
never did.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc

from tunnel.app.requests import PromptImage
from tunnel.log import Log, LogClosedError, StoreError

from .base import AgentInfo, AgentSession
from .errors import SessionError, check_by, check_prompt
from .permissions import PermissionBroker
from .recorder import Recorder
from .recovery import close_interrupted
from .writer import reason_of

logger = logging.getLogger("tunnel.agents.chat")

MAX_QUEUED_PROMPTS = 16
"""Prompts that may wait behind the running turn; one more is refused (`agent_unavailable`)."""

STATUS_EVENT = "status"
"""The event that says whether a turn runs and how many prompts wait (docs/application.md)."""

STOP_FLUSH_TIMEOUT = 2.0
"""How long a stopping session may spend storing the text its agent was streaming."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Prompt:
    """A prompt waiting for its turn."""

    text: str
    by: str
    seq: int | None = None
    """The seq of its `message` item: the turn it starts is known by it."""
    images: tuple[PromptImage, ...] = ()


class ChatSession(AgentSession):
    """Base of chat agents: owns the prompt queue, subclasses run one turn at a time."""

    def __init__(self, *, info: AgentInfo, log: Log, conversation_id: str) -> None:
        recorder = Recorder(log, conversation_id)
        super().__init__(
            info=info,
            conversation_id=conversation_id,
            recorder=recorder,
            permissions=PermissionBroker(recorder),
        )
        self._chat_log = log
        self._session_tasks: anyio.abc.TaskGroup | None = None
        recorder.writer.on_overflow = self._on_storage_overflow
        self._send, self._receive = anyio.create_memory_object_stream[Prompt](MAX_QUEUED_PROMPTS)
        # FIFO: the queue order is the order the prompts were stored in the log.
        self._accept_lock = anyio.Lock()
        self._queued = 0
        self._busy = False
        # The seq of the prompt the running turn answers: prompts stored after it still wait.
        self._running_prompt: int | None = None
        self._serving = False
        self._turn_scope: anyio.CancelScope | None = None

    # -- hooks ---------------------------------------------------------------------------------

    async def _start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Called once before the session reports started; may start tasks in `task_group`."""

    @abc.abstractmethod
    async def _run_turn(self, prompt: Prompt) -> None:
        """Run one prompt to the end of the agent's turn."""

    async def _begin_turn(self, prompt: Prompt) -> None:
        """Called as a turn starts, before its status is published: from here on the agent's
        items belong to this prompt's turn."""
        self._recorder.turn = prompt.seq

    async def _cancel_turn(self, *, by: str) -> None:
        """Stop the running turn; the default cancels it outright."""
        await self._permissions.cancel_all(by=by)
        if self._turn_scope is not None:
            self._turn_scope.cancel()

    # -- the session API -----------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with anyio.create_task_group() as tg:
            self._session_tasks = tg
            await tg.start(self._recorder.writer.run)
            try:
                await close_interrupted(self._chat_log, self._recorder)
            except StoreError as exc:
                # Unreadable: serve anyway; what a stopped host left open stays so.
                logger.warning("could not check what the previous host left open: %s", exc)
            await self._start(tg)
            self._serving = True
            try:
                task_status.started()
                await self._serve()
            finally:
                self._serving = False
                # Stopping mid-stream: keep what the agent said so far.
                with (
                    anyio.move_on_after(STOP_FLUSH_TIMEOUT, shield=True),
                    contextlib.suppress(StoreError, LogClosedError),
                ):
                    await self._recorder.flush()
                tg.cancel_scope.cancel()

    def takes_images(self) -> bool:
        """Whether the agent takes images with a prompt."""
        return False

    async def prompt(self, text: str, *, by: str, images: Sequence[PromptImage] = ()) -> None:
        check_prompt(text, by)
        if images and not self.takes_images():
            raise SessionError("not_supported", f"{self.info.name} takes no images in a prompt")
        if not self._serving:
            raise SessionError("agent_unavailable", "the agent session is not running")
        self._recorder.writer.check_writable()
        if self._queued >= MAX_QUEUED_PROMPTS:
            raise SessionError(
                "agent_unavailable",
                f"{MAX_QUEUED_PROMPTS} prompts are already waiting; try again when one has run",
            )
        # Reserved before the first await, so racing prompts cannot overfill the queue.
        self._queued += 1
        try:
            async with self._accept_lock:
                shown = [{"mime_type": i.mime_type, "size": len(i.data)} for i in images]
                item = await self._recorder.user_message(text, by=by, images=shown)
                self._send.send_nowait(Prompt(text=text, by=by, seq=item.seq, images=tuple(images)))
        except ValueError as exc:
            self._queued -= 1
            raise SessionError("bad_request", f"the prompt cannot be stored: {exc}") from None
        except StoreError as exc:
            self._queued -= 1
            raise SessionError(
                "agent_unavailable",
                f"the prompt was not stored: the log cannot be written ({reason_of(exc)})",
            ) from None
        except BaseException:
            self._queued -= 1
            raise
        if self._busy:
            # When idle, the turn starting now publishes the status instead.
            await self._publish_status()

    async def cancel(self, *, by: str) -> None:
        check_by(by)
        if not self._busy:
            return
        # Held, not waited for, while the log cannot be written: a cancel always works.
        await self._recorder.session_event("cancelled", by=by, hold=True)
        await self._cancel_turn(by=by)

    # -- internals -----------------------------------------------------------------------------

    async def _serve(self) -> None:
        async for prompt in self._receive:
            self._queued -= 1
            self._busy = True
            self._running_prompt = prompt.seq
            await self._begin_turn(prompt)
            await self._publish_status()
            try:
                with anyio.CancelScope() as scope:
                    self._turn_scope = scope
                    await self._run_turn(prompt)
            except Exception:
                logger.exception("a turn of %s failed", self.info.name)
                await self._recorder.error("the turn failed on the host; see the host's log")
            finally:
                self._turn_scope = None
                self._busy = False
                self._running_prompt = None
            await self._recorder.flush()
            if prompt.seq is not None and self._recorder.turn_items == 0:
                # The turn left nothing of its own: say it ended, so a restart never takes
                # this prompt for one that never ran (tunnel.agents.recovery).
                await self._recorder.session_event(
                    "turn_ended", by="host", hold=True, turn=prompt.seq
                )
            await self._publish_status()

    def _on_storage_overflow(self) -> None:
        """Too much waits for a log that cannot be written: cancel the running turn."""
        if self._busy and self._session_tasks is not None:
            self._session_tasks.start_soon(functools.partial(self._cancel_turn, by="host"))

    def status(self) -> dict[str, Any]:
        return status_data(running=self._busy, queued=self._queued, turn=self._running_prompt)

    async def _publish_status(self) -> None:
        await self._recorder.publish(STATUS_EVENT, self.status())


def status_data(*, running: bool, queued: int, turn: int | None) -> dict[str, Any]:
    """A `status` event's data: `turn` only while a turn runs and its prompt's seq is known."""
    data: dict[str, Any] = {"state": "running" if running else "idle", "queued": queued}
    if running and turn is not None:
        data["turn"] = turn
    return data
