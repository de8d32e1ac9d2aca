"""`DiskThread`: one long-lived thread that runs a store's blocking jobs in order, each awaited
from the event loop at the cost of a queue put and one wake-up of the loop.

`anyio.to_thread.run_sync` costs several passes of the event loop per call (a checkpoint, the
thread limiter, a worker taken from the pool): tens of microseconds, as much again as a commit
in the WAL. The log's writer hands a job to a thread for every append the agent makes, one at a
time (docs/log.md, "Threads"), so it keeps a thread of its own.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import weakref
from collections.abc import Callable
from functools import partial
from typing import Generic, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel

__all__ = ["DiskThread"]

logger = logging.getLogger("tunnel.log")

T = TypeVar("T")

_Job = Callable[[], None]


class _Outcome(Generic[T]):
    """What a job returned or raised, handed from the thread to the waiting task."""

    __slots__ = ("error", "result")

    def __init__(self) -> None:
        self.result: tuple[T] | None = None  # a tuple: the job may return None
        self.error: BaseException | None = None


class DiskThread:
    """A thread of its own that runs jobs one at a time, in the order `run` was called.

    The thread starts at the first `run` and ends at `stop()` once the jobs before it are done,
    or when this object is garbage (a daemon, so a store never closed cannot keep the process
    alive). A `run` after `stop()` starts a new thread.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] | None = None
        self._thread: threading.Thread | None = None

    async def run(self, fn: Callable[[], T], *, finish: bool = False) -> T:
        """Run `fn` in the thread and return its result, or raise its exception.

        Not shielded: a cancelled caller leaves at once and `fn` still runs, its outcome lost.
        With `finish`, the caller has the outcome whatever happens (what a transaction did is
        always answered): it waits for `fn` through anyio's cancellation, as in a shielded scope,
        and through asyncio's own (`Task.cancel()`, which no shield stops: what Ctrl-C does to
        `anyio.run`'s main task), which it then hands back to the task at its next await.
        """
        jobs = self._start()
        done = anyio.Event()
        outcome: _Outcome[T] = _Outcome()
        jobs.put(partial(_run_job, fn, outcome, _caller(done.set)))
        if finish:
            await _wait_out(done)
        else:
            await done.wait()
        if outcome.error is not None:
            raise outcome.error
        assert outcome.result is not None
        return outcome.result[0]

    def stop(self) -> None:
        """End the thread once the jobs queued so far are done; returns at once."""
        if self._jobs is not None:
            self._jobs.put(None)
        self._jobs = self._thread = None

    def _start(self) -> queue.SimpleQueue[_Job | None]:
        if self._jobs is not None and self._thread is not None and self._thread.is_alive():
            return self._jobs
        jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        # The thread holds the queue, never this object, so this object can be collected.
        thread = threading.Thread(target=_serve, args=(jobs,), name=self._name, daemon=True)
        thread.start()
        weakref.finalize(self, jobs.put, None)
        self._jobs, self._thread = jobs, thread
        return jobs


def _serve(jobs: queue.SimpleQueue[_Job | None]) -> None:
    """The thread: run jobs until told to stop."""
    while True:
        job = jobs.get()
        if job is None:
            return
        job()
        # Not kept while waiting for the next: it holds the store, which may be collected.
        del job


def _run_job(fn: Callable[[], T], outcome: _Outcome[T], wake: Callable[[], object]) -> None:
    """In the thread: run one job, keep its outcome, wake the task waiting for it."""
    try:
        outcome.result = (fn(),)
    except BaseException as exc:  # handed to the waiting task, which raises it
        outcome.error = exc
    try:
        wake()
    except RuntimeError:
        # The event loop is closed: nobody is left to wait for the outcome.
        logger.debug("a disk job finished after its event loop closed")


async def _wait_out(done: anyio.Event) -> None:
    """Wait for `done` through every cancellation; one that came from asyncio itself is
    delivered again once it is set."""
    interrupted = False
    with anyio.CancelScope(shield=True):
        while not done.is_set():
            try:
                await done.wait()
            except anyio.get_cancelled_exc_class():
                # Only asyncio's Task.cancel() reaches in here; anyio's is held off.
                interrupted = True
    task = asyncio.current_task() if interrupted else None
    if task is not None:
        # The same one request again (not a second: `asyncio.timeout` counts them).
        task.uncancel()
        task.cancel()


def _caller(fn: Callable[[], object]) -> Callable[[], object]:
    """A function the thread calls to have `fn` run in the current event loop, soon."""
    token = anyio.lowlevel.current_token()
    loop = token.native_token
    if isinstance(loop, asyncio.AbstractEventLoop):
        # Returns at once: the thread goes on to its next job while the loop wakes up.
        return partial(loop.call_soon_threadsafe, fn)
    return partial(anyio.from_thread.run_sync, fn, token=token)
