"""Reading lines from standard input without ever blocking the event loop or its shutdown.

A read parked in anyio's worker-thread pool would keep the process from exiting (the pool is
joined at shutdown, and `readline` on a terminal or pipe never returns by itself), so lines are
read in a daemon thread of their own and handed over through a small bounded stream.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TextIO

import anyio
import anyio.from_thread
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream

# Lines typed ahead of the reader; the thread blocks (and so stops reading) beyond this.
LINE_BUFFER = 16


@asynccontextmanager
async def stdin_lines(stdin: TextIO) -> AsyncIterator[MemoryObjectReceiveStream[str]]:
    """Yield a stream of lines read from `stdin`; it ends at end of input."""
    send, receive = anyio.create_memory_object_stream[str](LINE_BUFFER)
    token = anyio.lowlevel.current_token()

    def pump() -> None:
        try:
            while line := stdin.readline():
                anyio.from_thread.run(send.send, line, token=token)
            anyio.from_thread.run_sync(send.close, token=token)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, RuntimeError, ValueError):
            # The reader went away or the loop stopped: nobody wants more lines.
            return

    threading.Thread(target=pump, name="stdin-lines", daemon=True).start()
    try:
        yield receive
    finally:
        receive.close()
