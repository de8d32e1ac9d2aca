"""`CommandRunner`: `tunnel host --notify-command CMD`, a local program run for each
notification event, with the event in its environment.

The command line is split with shlex and run as an argv, never through a shell, so nothing in
a request (a title holding `$(...)`, say) is ever interpreted. A few run at once, each for a
bounded time (then killed); more wait in a bounded queue; failures are logged once until one
succeeds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import subprocess

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from tunnel.notify.events import NotifyEvent
from tunnel.notify.settings import NotifySettings
from tunnel.notify.webhook import event_fields

logger = logging.getLogger("tunnel.notify")

MAX_VALUE = 4096
"""Longest value of one TUNNEL_ variable."""


def parse_command(text: str) -> list[str]:
    """`--notify-command CMD` as an argv; ValueError (one line) if it is empty or unbalanced."""
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"--notify-command: {exc}") from None
    if not argv:
        raise ValueError("--notify-command: the command is empty")
    return argv


def command_environment(fields: dict[str, object]) -> dict[str, str]:
    """The TUNNEL_ variables of an event: TUNNEL_EVENT, TUNNEL_HOST, TUNNEL_CONVERSATION,
    TUNNEL_REQUEST_ID, TUNNEL_KIND, TUNNEL_ANSWER (comma-separated), TUNNEL_TITLE,
    TUNNEL_COMMAND, TUNNEL_OUTCOME, TUNNEL_BY, TUNNEL_OPTION_KIND, those the event has."""
    env: dict[str, str] = {}
    for key, value in fields.items():
        if key in ("v", "time") or value is None:
            continue
        if isinstance(value, list):
            value = ",".join(str(v) for v in value)
        # No NUL can be in an environment variable; the rest is the program's to read.
        env[f"TUNNEL_{key.upper()}"] = str(value).replace("\0", "")[:MAX_VALUE]
    return env


class CommandRunner:
    """Runs the command for each event in the background; `run` it, then `notify_nowait`."""

    def __init__(
        self, command: str, settings: NotifySettings, *, conversation_id: str, host_id: str
    ) -> None:
        self._argv = parse_command(command)
        self._settings = settings
        self._conversation_id = conversation_id
        self._host_id = host_id
        self._send: MemoryObjectSendStream[dict[str, str]]
        self._receive: MemoryObjectReceiveStream[dict[str, str]]
        self._send, self._receive = anyio.create_memory_object_stream[dict[str, str]](
            settings.queue_size
        )
        self._failing = False
        self._full_said = False

    def notify_nowait(self, event: NotifyEvent, *, conversation_id: str | None = None) -> None:
        """Queue `event` of `conversation_id` (None: the one this sender was made for)."""
        # The host's own machine: the title and command go to it whatever --notify-details says.
        fields = event_fields(
            event,
            host_id=self._host_id,
            conversation_id=conversation_id or self._conversation_id,
            details=True,
        )
        try:
            self._send.send_nowait(command_environment(fields))
        except anyio.WouldBlock:
            if not self._full_said:
                self._full_said = True
                logger.warning("--notify-command is behind; events dropped")
            return
        self._full_said = False

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(self._settings.max_sends):
                tg.start_soon(self._work)
            task_status.started()

    async def _work(self) -> None:
        async for env in self._receive:
            why = await self._run_one(env)
            if why is None:
                self._failing = False
            elif not self._failing:
                self._failing = True
                logger.warning("--notify-command failed (%s); said once until it works", why)

    async def _run_one(self, env: dict[str, str]) -> str | None:
        """Run the command once; why it failed, or None."""
        environment = {k: v for k, v in os.environ.items() if not k.startswith("TUNNEL_")}
        environment |= env
        try:
            process = await anyio.open_process(
                self._argv,
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except (OSError, ValueError) as exc:
            return getattr(exc, "strerror", None) or type(exc).__name__
        async with process:
            with anyio.move_on_after(self._settings.send_timeout):
                code = await process.wait()
                return None if code == 0 else f"exit status {code}"
            # The whole session it leads: a shell script's own children die with it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            with anyio.move_on_after(5, shield=True):
                await process.wait()
            return "timed out; killed"
