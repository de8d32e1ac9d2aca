"""Many teammates in one process, each a real WebSocket connection: ours or bare websockets.

Run by the benches as `python bench/swarm.py [--uvloop]` (`--uvloop`: on uvloop's event loop, for
the bare baseline that runs on it); it prints `{"ready": true}`, then answers one
JSON line for each JSON command line on stdin, and exits when stdin closes.

Commands:
- `attach(kind, target, n, concurrency, mode, conversations)`: start `n` teammates, at most
  `concurrency` connecting at once, and answer once every one is ready (or failed). `kind`
  "ours": `connect_teammate(target)`, then in `mode` "session" (the `open` carrying the
  `subscribe`, naming the conversation when `conversations` lists them: teammate i follows
  the (i mod len)th) the `ready` message and ready once the snapshot ended; in `mode` "echo"
  (bench/peers.py `host`) one echoed message.
  `kind` "bare": a websockets connection to `target`/attach, ready once the bare relay's greeting
  arrived. Every message after that counts as an item.
- `settle(quiet, limit)`: wait until no presence message arrived for `quiet` seconds; answer the
  presence messages and bytes received so far: the size of each decrypted message or opened
  cast a presence came in (the joiner's list comes in its `broadcast` message; during an
  attach, casts carry only presence).
- `mark()`: count items from now on: `expect` counts those received since.
- `expect(items, conversations)`: wait until every teammate (of those `conversations`, if
  given) has received `items` items in all (since `mark`);
  answer when the last, the median and the first of them got its last one (time.monotonic, the
  same clock in every process).
- `tally()`: what went wrong for a teammate that follows a conversation: items of another
  conversation (an item's text starts with its conversation's id and `|`: bench/peers.py
  `share-host`) and casts of another epoch (another conversation's broadcast), the other
  breaks of the broadcast (a cast that did not open, an item missing) and the relay's cuts;
  and the `conversations` messages received.
- `detach()`: close every teammate.
"""

from __future__ import annotations

import functools
import gc
import logging
import statistics
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
from harness import raise_fd_limit
from peers import control, say, until_stdin_closes
from websockets.asyncio.client import connect

from tunnel.app.conversation_list import ConversationList, ConversationStarted
from tunnel.app.follower import CatchingUp, FollowerEvent, Item, Presence, SnapshotPage
from tunnel.e2e.broadcast import CAST_OVERHEAD
from tunnel.e2e.opening import EarlySubscribe
from tunnel.link import Casted
from tunnel.teammate.client import TeammateSession, connect_teammate

RELAY_CUT = "the relay cut"
ANOTHER_EPOCH = "a cast of another epoch"
"""How a `CatchingUp` says the relay cut the channel, and that a cast was of another broadcast
(tunnel/app/follower.py, tunnel/e2e/broadcast.py)."""

SWARM_GC_THRESHOLDS = (100_000, 50, 1_000)
"""The swarm's garbage collector thresholds (CPython's default: 700, 10, 10)."""

POLL = 0.01
"""Seconds between looks at the teammates' counters while waiting. Polled, not signalled, so
that a teammate's message costs a counter update and nothing more; the times reported are the
teammates' own, not the poll's."""


@dataclass(slots=True)
class Teammate:
    """What one teammate has seen."""

    ready: bool = False
    failed: str | None = None
    items: int = 0
    last_item: float = 0.0
    presence: int = 0
    presence_bytes: int = 0
    received_bytes: int = 0
    """The size of the last decrypted message or opened cast, until a presence counts it."""
    messages: int = 0
    conversation: str | None = None
    """The conversation it follows, when the bench names one."""
    base: int = 0
    """Its `items` at the last `mark`."""
    foreign: int = 0
    breaks: int = 0
    cuts: int = 0
    lists: int = 0


class Swarm:
    def __init__(self) -> None:
        self.teammates: list[Teammate] = []
        self._scope: anyio.CancelScope | None = None
        self._done: anyio.Event | None = None
        self.last_presence = 0.0

    # -- one teammate ---------------------------------------------------------------------------

    async def _ours(
        self, state: Teammate, link: str, name: str, mode: str, gate: anyio.Semaphore
    ) -> None:
        await gate.acquire()
        released = False
        try:
            # A session's open carries its subscribe: attached one round trip after the hellos.
            early = None if mode == "echo" else EarlySubscribe(conversation=state.conversation)
            async with connect_teammate(link, name=name, subscribe=early) as session:
                session.on_conversations = functools.partial(_count_list, state)
                _measure_messages(session, state)
                if mode == "echo":
                    await session.send(control("echo", n=1))
                    await session.send(b"x")
                    await session.receive_plaintext()
                    state.ready = True
                    gate.release()
                    released = True
                    await anyio.sleep_forever()
                while True:
                    message = await session.receive()
                    self._count(state, message)
                    if state.ready and not released:
                        gate.release()
                        released = True
        finally:
            if not released:
                gate.release()

    def _count(self, state: Teammate, event: FollowerEvent) -> None:
        state.messages += 1
        if isinstance(event, Item):
            # Counted as a bare client counts its message: no work beyond the counters. The
            # bytes on the wire are the relay's to count (`ss`), not the swarm's.
            state.items += 1
            state.last_item = time.monotonic()
            _check_item(state, event.item)
        elif isinstance(event, Presence):
            # The size of what the host said (only presence, whose bytes per join the attach
            # bench reports): the message it came in, counted once however many it held.
            state.presence += 1
            state.presence_bytes += state.received_bytes
            state.received_bytes = 0
            self.last_presence = time.monotonic()
        elif isinstance(event, SnapshotPage):
            state.items += len(event.items)
            for item in event.items:
                _check_item(state, item)
            if not event.more:
                state.ready = True
        elif isinstance(event, CatchingUp):
            if event.reason.startswith(RELAY_CUT):
                state.cuts += 1
            elif event.reason == ANOTHER_EPOCH:
                state.foreign += 1
            else:
                state.breaks += 1

    async def _bare(self, state: Teammate, url: str, gate: anyio.Semaphore) -> None:
        async with gate:
            websocket = await connect(f"{url}/attach", compression=None, max_size=None)
        async with websocket:
            await websocket.recv()  # the greeting
            state.ready = True
            async for _message in websocket:
                state.messages += 1
                state.items += 1
                state.last_item = time.monotonic()

    async def _run_one(self, state: Teammate, kind: str, target: str, **options: Any) -> None:
        try:
            if kind == "ours":
                await self._ours(state, target, **options)
            else:
                await self._bare(state, target, options["gate"])
        except Exception as exc:
            state.failed = f"{type(exc).__name__}: {exc}"

    # -- commands -------------------------------------------------------------------------------

    async def attach(
        self,
        kind: str,
        target: str,
        n: int,
        concurrency: int = 50,
        mode: str = "session",
        conversations: list[str] | None = None,
    ) -> dict[str, Any]:
        if self._scope is not None:
            raise RuntimeError("detach first")
        self.teammates = [
            Teammate(conversation=conversations[i % len(conversations)] if conversations else None)
            for i in range(n)
        ]
        gate = anyio.Semaphore(concurrency)
        started = anyio.Event()
        self._done = anyio.Event()
        start = time.monotonic()

        async def run_all() -> None:
            assert self._done is not None
            try:
                with anyio.CancelScope() as self._scope:
                    started.set()
                    async with anyio.create_task_group() as tg:
                        for index, state in enumerate(self.teammates):
                            if kind == "ours":
                                options = {"name": f"t{index}", "mode": mode, "gate": gate}
                            else:
                                options = {"gate": gate}
                            one = functools.partial(self._run_one, **options)
                            tg.start_soon(one, state, kind, target)
                            await anyio.lowlevel.checkpoint()
            finally:
                self._done.set()

        self._group.start_soon(run_all)
        await started.wait()
        with anyio.fail_after(600):
            while not all(t.ready or t.failed for t in self.teammates):  # noqa: ASYNC110
                await anyio.sleep(POLL)
        done = time.monotonic()
        failures = [t.failed for t in self.teammates if t.failed]
        return {
            "t0": start,
            "t_done": done,
            "ready": sum(t.ready for t in self.teammates),
            "failed": len(failures),
            "first_failure": failures[0] if failures else None,
        }

    async def settle(self, quiet: float = 0.5, limit: float = 60.0) -> dict[str, Any]:
        with anyio.move_on_after(limit):
            while time.monotonic() - self.last_presence < quiet:  # noqa: ASYNC110
                await anyio.sleep(POLL)
        return {
            "presence": sum(t.presence for t in self.teammates),
            "presence_bytes": sum(t.presence_bytes for t in self.teammates),
            "messages": sum(t.messages for t in self.teammates),
        }

    async def mark(self) -> dict[str, Any]:
        for teammate in self.teammates:
            teammate.base = teammate.items
        return {"marked": len(self.teammates)}

    async def expect(
        self, items: int, limit: float = 300.0, conversations: list[str] | None = None
    ) -> dict[str, Any]:
        followed = [
            t for t in self.teammates if conversations is None or t.conversation in conversations
        ]
        live = [t for t in followed if t.ready and not t.failed]
        with anyio.move_on_after(limit):
            while not all(t.items - t.base >= items or t.failed for t in live):  # noqa: ASYNC110
                await anyio.sleep(POLL)
        complete = [t for t in live if t.items - t.base >= items]
        times = [t.last_item for t in complete]
        return {
            "complete": len(complete),
            "of": len(live),
            "t_last": max(times, default=0.0),
            "t_median": statistics.median(times) if times else 0.0,
            "t_first": min(times, default=0.0),
        }

    async def tally(self) -> dict[str, Any]:
        return {
            "foreign": sum(t.foreign for t in self.teammates),
            "breaks": sum(t.breaks for t in self.teammates),
            "cuts": sum(t.cuts for t in self.teammates),
            "lists": sum(t.lists for t in self.teammates),
        }

    async def detach(self) -> dict[str, Any]:
        if self._scope is not None and self._done is not None:
            self._scope.cancel()
            await self._done.wait()
        self._scope = None
        return {"detached": len(self.teammates)}

    async def run(self) -> None:
        async def main(tg: anyio.abc.TaskGroup) -> None:
            self._group = tg
            say(ready=True)

        commands = {
            "attach": self.attach,
            "settle": self.settle,
            "mark": self.mark,
            "expect": self.expect,
            "tally": self.tally,
            "detach": self.detach,
        }
        await until_stdin_closes(main, commands)


def main() -> None:
    # The teammates' own lines (a link closed at exit) would only be noise here.
    logging.basicConfig(level=logging.ERROR)
    raise_fd_limit(20_000)
    # A thousand teammates in one process hold a thousand times the objects one teammate does
    # (each its roster of everyone), and CPython's collector walks them all again and again: a
    # third of the swarm's CPU at N = 1000, a cost no teammate on its own machine has. Ours and
    # the bare clients' swarms alike collect less often.
    gc.set_threshold(*SWARM_GC_THRESHOLDS)
    anyio.run(Swarm().run, backend_options={"use_uvloop": "--uvloop" in sys.argv[1:]})


def _check_item(state: Teammate, item: Mapping[str, Any]) -> None:
    """Count `item` as foreign if its text names another conversation than `state`'s."""
    if state.conversation is None:
        return
    data = item.get("data")
    text = data.get("text") if isinstance(data, Mapping) else None
    if isinstance(text, str) and "|" in text and text.partition("|")[0] != state.conversation:
        state.foreign += 1


def _count_list(state: Teammate, message: ConversationList | ConversationStarted) -> None:
    if isinstance(message, ConversationList):
        state.lists += 1


def _measure_messages(session: TeammateSession, state: Teammate) -> None:
    """Keep in `state.received_bytes` the size of what `session` received last: a decrypted
    message, or a cast less its fixed overhead (its opened size). `receive()` returns every
    event of a message before it receives the next, so an event came in the last one."""
    sealed = session._sealed
    receive_any = sealed.receive_any

    async def measured() -> bytes | Casted:
        message = await receive_any()
        if not isinstance(message, Casted):
            state.received_bytes = len(message)
        elif message.data is not None:
            state.received_bytes = len(message.data) - CAST_OVERHEAD
        return message

    sealed.receive_any = measured  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
