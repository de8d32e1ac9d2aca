"""A scripted Python teammate for the sharing tests: records everything the host sends."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio

from tunnel.app.host_messages import decode_host_message
from tunnel.app.requests import Request, Subscribe, encode_request
from tunnel.e2e.crypto import ShareLink
from tunnel.teammate.client import TeammateSession, connect_teammate


@dataclass
class Teammate:
    """One attached teammate: items by seq, errors, presence, the ready message."""

    session: TeammateSession
    items: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    presence: list[list[dict[str, str]]] = field(default_factory=list)
    ready: dict[str, Any] | None = None
    snapshot_done: bool = False
    resets: int = 0
    changed: anyio.Event = field(default_factory=anyio.Event)

    async def send(self, request: Request) -> None:
        await self.session.send(encode_request(request))

    async def pump(self) -> None:
        while True:
            message = decode_host_message(await self.session.receive())
            op = message["op"]
            if op == "ready":
                self.ready = message
            elif op == "snapshot":
                if message.get("reset"):
                    self.resets += 1
                    self.items.clear()
                self.items.extend(message["items"])
                self.snapshot_done = not message["more"]
            elif op == "item":
                self.items.append(message["item"])
            elif op == "event":
                self.events.append(message["event"])
            elif op == "presence":
                # The whole list or what changed: the session holds the list they make.
                members = self.session.members
                self.presence.append([{"name": m.name, "role": m.role} for m in members])
            elif op == "error":
                self.errors.append(message)
            self.changed.set()
            self.changed = anyio.Event()

    async def wait_for(self, predicate: Any, within: float = 20.0) -> None:
        """Wait until predicate(self) holds; fail after `within` seconds."""
        with anyio.fail_after(within):
            while not predicate(self):
                await self.changed.wait()

    def item_of(self, type_: str, **data: Any) -> dict[str, Any] | None:
        for item in self.items:
            if item["type"] == type_ and all(item["data"].get(k) == v for k, v in data.items()):
                return item
        return None

    def seqs(self) -> list[int]:
        return [item["seq"] for item in self.items]


@contextlib.asynccontextmanager
async def attached(
    link: str | ShareLink, name: str, *, after: int | None = None, subscribe: bool = True
) -> AsyncIterator[Teammate]:
    """Attach, subscribe, and keep recording until the block ends."""
    async with connect_teammate(link, name=name) as session:
        teammate = Teammate(session=session)
        async with anyio.create_task_group() as tg:
            tg.start_soon(teammate.pump)
            if subscribe:
                await teammate.send(Subscribe(after=after))
            yield teammate
            tg.cancel_scope.cancel()
