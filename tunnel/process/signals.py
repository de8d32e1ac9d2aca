"""Stopping a command cleanly on SIGINT or SIGTERM."""

from __future__ import annotations

import logging
import signal

import anyio

logger = logging.getLogger("tunnel.signals")


async def cancel_on_signal(scope: anyio.CancelScope) -> None:
    """Cancel `scope` at the first SIGINT or SIGTERM.

    Started first in a command's task group, so a command still starting up (a host trying to
    reach its relay, say) stops too.
    """
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            logger.info("%s: shutting down", signal.Signals(signum).name)
            scope.cancel()
            return
