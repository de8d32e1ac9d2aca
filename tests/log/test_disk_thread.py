"""`DiskThread`: a store's blocking jobs run in one thread of their own, in order, and the
thread ends when told to or when its owner is gone."""

from __future__ import annotations

import gc
import threading
import time

import anyio
import pytest

from tunnel.log.disk_thread import DiskThread

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


def named(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


async def wait_gone(name: str) -> None:
    with anyio.fail_after(10):
        while named(name):
            await anyio.sleep(0.01)


async def test_jobs_run_in_one_thread_beside_the_loop_in_the_order_they_were_given() -> None:
    worker = DiskThread("test disk thread")
    ran: list[tuple[int, int]] = []

    def job(n: int) -> int:
        time.sleep(0.001 * (5 - n % 5))  # the first given would finish last if run together
        ran.append((n, threading.get_ident()))
        return n * 10

    results: dict[int, int] = {}

    async def run(n: int) -> None:
        results[n] = await worker.run(lambda: job(n))

    try:
        async with anyio.create_task_group() as tg:
            for n in range(20):
                tg.start_soon(run, n)
                await anyio.sleep(0)  # each has queued its job before the next starts
    finally:
        worker.stop()
    assert [n for n, _ in ran] == list(range(20))
    threads = {ident for _, ident in ran}
    assert len(threads) == 1
    assert threading.get_ident() not in threads
    assert results == {n: n * 10 for n in range(20)}


async def test_a_job_that_raises_raises_in_its_caller_and_the_next_job_runs() -> None:
    worker = DiskThread("test disk thread")

    def fail() -> None:
        raise OSError(5, "Input/output error")

    try:
        with pytest.raises(OSError, match="Input/output error"):
            await worker.run(fail)
        assert await worker.run(lambda: "next") == "next"
    finally:
        worker.stop()


async def test_a_cancelled_caller_leaves_and_its_job_still_runs() -> None:
    worker = DiskThread("test disk thread")
    release = threading.Event()
    finished = threading.Event()

    def slow() -> None:
        release.wait(10)
        finished.set()

    try:
        with anyio.move_on_after(0.05) as scope:
            await worker.run(slow)
        assert scope.cancelled_caught
        assert not finished.is_set()
        release.set()
        await worker.run(lambda: None)  # queued behind it: it is done by now
        assert finished.is_set()
    finally:
        release.set()
        worker.stop()


async def test_stop_ends_the_thread_after_its_jobs_and_a_later_run_starts_another() -> None:
    worker = DiskThread("test stopped thread")
    assert named("test stopped thread") == []  # none until the first job
    first = await worker.run(threading.current_thread)
    worker.stop()
    await wait_gone("test stopped thread")
    second = await worker.run(threading.current_thread)
    assert second is not first
    assert not first.is_alive()
    worker.stop()
    await wait_gone("test stopped thread")


class Owner:
    """Stands for a store: it owns the thread, and its jobs hold it."""

    def __init__(self) -> None:
        self.thread = DiskThread("test collected thread")

    def job(self) -> None:
        pass


async def test_the_thread_ends_when_its_owner_is_collected() -> None:
    owner = Owner()
    await owner.thread.run(owner.job)
    assert len(named("test collected thread")) == 1
    del owner
    gc.collect()
    await wait_gone("test collected thread")
