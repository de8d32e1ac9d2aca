"""Running a command until SIGINT or SIGTERM, and stopping it cleanly then."""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskGroup

from tunnel.process.exit_codes import EXIT_INTERRUPTED, EXIT_OK
from tunnel.process.groups import unwrap_group

logger = logging.getLogger("tunnel.signals")


async def cancel_on_signal(
    scope: anyio.CancelScope, received: list[signal.Signals] | None = None
) -> None:
    """Cancel `scope` at the first SIGINT or SIGTERM (appended to `received`, if given).

    SIGINT is ignored from then on: a second Ctrl-C while the command stops (links closing, the
    log flushing, each bounded in time) would raise KeyboardInterrupt in the middle of that.
    """
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            logger.info("%s: shutting down", signal.Signals(signum).name)
            if received is not None:
                received.append(signal.Signals(signum))
            scope.cancel()
            break
    signal.signal(signal.SIGINT, signal.SIG_IGN)


async def run_until_signal(start: Callable[[TaskGroup], Awaitable[None]]) -> signal.Signals | None:
    """Run what `start` starts in a task group until SIGINT or SIGTERM; return that signal.

    Signals are watched before `start` runs, so a command still starting up (a host trying to
    reach its relay, say) stops too. A task may end the command early by cancelling the group
    (`tg.cancel_scope.cancel()`, as /quit does): then the result is None. Errors leave as
    themselves (`unwrap_group`).
    """
    received: list[signal.Signals] = []
    async with unwrap_group(), anyio.create_task_group() as tg:
        tg.start_soon(cancel_on_signal, tg.cancel_scope, received)
        await start(tg)
    return received[0] if received else None


def exit_code_after(stopped_by: signal.Signals | None) -> int:
    """The exit code of a command that `stopped_by` ended: EXIT_INTERRUPTED after SIGINT, as
    every command agrees; EXIT_OK after SIGTERM (a service manager's normal stop) or none."""
    return EXIT_INTERRUPTED if stopped_by == signal.SIGINT else EXIT_OK
