"""An idle attached teammate costs the relay no task beyond the two websockets runs per connection.

Memory per idle connection is mostly its tasks (docs/performance.md, "Memory"): each one brings a
coroutine, cancel scopes and often an Event. The relay runs in a thread of its own, on its own
event loop, so its tasks are counted apart from the host's and the teammates'.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from websockets.asyncio.server import ServerConnection
from websockets.protocol import State

from tests.link.socket_pair import FRAMINGS
from tests.support import echo_roundtrip, host_settings, running_host
from tunnel.relay.server import run as run_relay
from tunnel.relay.settings import RelaySettings
from tunnel.relay.switch import Peer
from tunnel.teammate.client import connect_teammate

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

TEAMMATES = 8

TASKS_PER_CONNECTION = 2
"""websockets' own: the handler task (our reader runs in it) and its keepalive task. The bare
websockets server of bench/memory_bench.py runs the same two."""


@contextlib.contextmanager
def relay_in_thread(framing: str) -> Iterator[tuple[BlockingPortal, int]]:
    """A relay on `framing` in a thread of its own, on its own event loop: its portal and port.
    Objects and tasks found in that loop are the relay's alone."""
    settings = RelaySettings(host="127.0.0.1", port=0, framing=framing)
    with start_blocking_portal() as portal:
        relay, port = portal.start_task(run_relay, settings)
        try:
            yield portal, port
        finally:
            relay.cancel()


async def _relay_tasks() -> list[str]:
    return [_describe(task) for task in asyncio.all_tasks()]


def _describe(task: asyncio.Task[object]) -> str:
    coroutine = task.get_coro()
    return getattr(coroutine, "__qualname__", type(coroutine).__name__)


async def count_relay_tasks(portal: BlockingPortal) -> Counter[str]:
    """The relay loop's tasks, by the function they run."""
    return Counter(await anyio.to_thread.run_sync(portal.call, _relay_tasks))


async def settled_count(portal: BlockingPortal) -> Counter[str]:
    """The relay's tasks once two looks a moment apart agree: connections that just closed or
    opened have finished with their tasks."""
    previous = await count_relay_tasks(portal)
    while True:
        await anyio.sleep(0.3)
        current = await count_relay_tasks(portal)
        if current == previous:
            return current
        previous = current


@pytest.mark.parametrize(
    ("framing", "tasks"),
    [
        ("websockets", TASKS_PER_CONNECTION),
        # Our one task per connection (its reader); picows runs none, keepalive is a timer.
        pytest.param("picows", 1, marks=FRAMINGS[1].marks, id="picows"),
    ],
)
async def test_an_idle_attached_teammate_runs_no_relay_task_beyond_websockets_own(
    tmp_path: Path, framing: str, tasks: int
) -> None:
    with relay_in_thread(framing) as (portal, port):
        url = f"http://127.0.0.1:{port}"
        with anyio.fail_after(40):
            async with running_host(host_settings(url, tmp_path)) as host:
                before = await settled_count(portal)
                async with contextlib.AsyncExitStack() as stack:
                    for index in range(TEAMMATES):
                        session = await stack.enter_async_context(
                            connect_teammate(host.view_link, name=f"idle{index}")
                        )
                        # Attached with a channel open and used once, as the memory bench's.
                        assert await echo_roundtrip(session, b"once") == b"once"
                    after = await settled_count(portal)
    added = after - before
    per_teammate = sum(added.values()) / TEAMMATES
    assert per_teammate <= tasks, dict(added)


def _handshake_headers_kept(port: int) -> list[int]:
    """How many header lines each open WebSocket connection of the relay on `port` still holds
    from its opening handshake, request and response together, on either framing."""
    try:
        from tunnel.link.framing_picows import PicowsFraming
    except ImportError:  # an install without the `fast` extra: no relay on picows to look at
        PicowsFraming = None
    kept = []
    for candidate in gc.get_objects():
        # By its type, not isinstance(): that would ask a dead weak proxy for its class.
        kind = type(candidate)
        if (
            issubclass(kind, ServerConnection)
            and candidate.state is State.OPEN
            and candidate.local_address[1] == port
        ):
            request, response = candidate.request, candidate.response
            kept.append(
                (0 if request is None else len(request.headers))
                + (0 if response is None else len(response.headers))
            )
        elif PicowsFraming is not None and issubclass(kind, PicowsFraming) and candidate.is_open:
            transport = candidate.transport
            assert transport is not None
            if transport.underlying_transport.get_extra_info("sockname")[1] == port:
                kept.append(len(transport.request.headers) + len(transport.response.headers))
    return kept


def _hello_deadlines_kept() -> tuple[int, int]:
    """How many of the relay's admitted peers there are, and how many still hold a hello
    deadline."""
    admitted = [
        candidate
        for candidate in gc.get_objects()
        if issubclass(type(candidate), Peer) and candidate.admitted
    ]
    return len(admitted), sum(peer.hello_deadline is not None for peer in admitted)


@pytest.mark.parametrize("framing", FRAMINGS)
async def test_an_attached_teammate_s_connection_keeps_no_handshake_headers_nor_deadline(
    tmp_path: Path, framing: str
) -> None:
    """The opening handshake's headers are not read after it, and the hello's deadline is over
    once the hello is admitted: an idle connection keeps neither (the headers were a sixth of its
    memory, docs/performance.md "Memory")."""
    with relay_in_thread(framing) as (portal, port):
        url = f"http://127.0.0.1:{port}"
        with anyio.fail_after(40):
            async with (
                running_host(host_settings(url, tmp_path)) as host,
                connect_teammate(host.view_link, name="idle") as session,
            ):
                assert await echo_roundtrip(session, b"once") == b"once"
                kept = await anyio.to_thread.run_sync(portal.call, _handshake_headers_kept, port)
                admitted, deadlines = await anyio.to_thread.run_sync(
                    portal.call, _hello_deadlines_kept
                )
    # The host's links and the teammate's, all open, none holding a header.
    assert len(kept) >= 2
    assert max(kept) == 0, kept
    assert admitted >= 2  # the host and the teammate
    assert deadlines == 0
