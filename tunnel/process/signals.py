"""Running a command until SIGINT or SIGTERM, and stopping it cleanly then."""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskGroup

from tunnel.process.groups import unwrap_group

logger = logging.getLogger("tunnel.signals")


async def cancel_on_signal(scope: anyio.CancelScope) -> None:
    """Cancel `scope` at the first SIGINT or SIGTERM."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            logger.info("%s: shutting down", signal.Signals(signum).name)
            scope.cancel()
            return


async def run_until_signal(start: Callable[[TaskGroup], Awaitable[None]]) -> None:
    """Run what `start` starts in a task group until SIGINT or SIGTERM.

    Signals are watched before `start` runs, so a command still starting up (a host trying to
    reach its relay, say) stops too. A task may end the command early by cancelling the group
    (`tg.cancel_scope.cancel()`, as /quit does). Errors leave as themselves (`unwrap_group`).
    """
    async with unwrap_group(), anyio.create_task_group() as tg:
        tg.start_soon(cancel_on_signal, tg.cancel_scope)
        await start(tg)
