"""A scripted Python teammate for the sharing tests: records everything the host sends."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio

from tunnel.app.conversation_list import ConversationList, ConversationStarted
from tunnel.app.follower import Event, Item, Presence, SnapshotPage, SnapshotStarted
from tunnel.app.host_messages import Error, Ready, decode_host_message, encode
from tunnel.app.requests import Request, Subscribe, encode_request
from tunnel.e2e.crypto import ShareLink
from tunnel.e2e.opening import EarlySubscribe
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
    listing: ConversationList | None = None
    started: list[str] = field(default_factory=list)

    async def send(self, request: Request) -> None:
        if isinstance(request, Subscribe):
            # Through the follower, which keeps the cursor.
            await self.session.subscribe(request.after, tail=request.tail)
        else:
            await self.session.send(encode_request(request))

    async def pump(self) -> None:
        while True:
            event = await self.session.receive()
            match event:
                case Ready():
                    self.ready = decode_host_message(encode(event))
                case SnapshotStarted():
                    if event.reset:
                        self.resets += 1
                        self.items.clear()
                case SnapshotPage():
                    self.items.extend(event.items)
                    self.snapshot_done = not event.more
                case Item():
                    self.items.append(dict(event.item))
                case Event():
                    self.events.append(dict(event.event))
                case Presence():
                    # The whole list or what changed: the follower holds the list they make.
                    self.presence.append([{"name": m.name, "role": m.role} for m in event.members])
                case Error():
                    self.errors.append(
                        {"op": "error", "code": event.code, "message": event.message}
                    )
            self.changed.set()
            self.changed = anyio.Event()

    def conversations_changed(self, message: ConversationList | ConversationStarted) -> None:
        if isinstance(message, ConversationStarted):
            self.started.append(message.conversation)
        else:
            self.listing = message
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
    link: str | ShareLink,
    name: str,
    *,
    after: int | None = None,
    subscribe: bool = True,
    conversation: str | None = None,
) -> AsyncIterator[Teammate]:
    """Attach, subscribe, and keep recording until the block ends; with `conversation`, the
    open's early subscribe names it (docs/application.md, "Conversations")."""
    early = None if conversation is None else EarlySubscribe(after=after, conversation=conversation)
    async with connect_teammate(link, name=name, subscribe=early) as session:
        teammate = Teammate(session=session)
        session.on_conversations = teammate.conversations_changed
        async with anyio.create_task_group() as tg:
            tg.start_soon(teammate.pump)
            if subscribe and early is None:
                await teammate.send(Subscribe(after=after))
            yield teammate
            tg.cancel_scope.cancel()
