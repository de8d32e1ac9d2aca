"""The host's node's end of a node link: every teammate an entry node carries there, each served
as a teammate connection of its own over a `SlotFraming` (docs/cluster.md, "The node link").

The owner node runs the same `Link`, `Connection` and `Switch` for a carried teammate as for one
connected directly: admission, routing, windows, casts, cuts and the backlog are its own. Only the
bytes travel differently: what the teammates' links write in one turn of the event loop goes out
as one batch of envelopes (`node_link.merge`), so a cast reaches the entry node once for all its
teammates that take it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
from websockets.asyncio.connection import Connection as WebSocket
from websockets.exceptions import ConnectionClosed

from tunnel.link.core import Link, clip_reason
from tunnel.link.framing import WebsocketsFraming
from tunnel.proto import Outgoing
from tunnel.proto.codes import CloseCode
from tunnel.relay.node_link import (
    ATTACH,
    CAST,
    CLOSE,
    Envelope,
    EnvelopeError,
    Written,
    merge,
    pack_close,
    unpack,
)

__all__ = ["MAX_SLOT_INBOX", "OwnerLink", "SlotClosedError", "SlotFraming"]

logger = logging.getLogger("relay.cluster")

MAX_SLOT_INBOX = 4096
"""Messages of one slot received and not yet read by its link: its link reads each as it comes,
so only a link that stopped reading gets there, and its slot is closed (1011)."""


class SlotClosedError(Exception):
    """The slot is closed: what reading or a write guard of a `SlotFraming` raises."""


class SlotFraming:
    """`Framing` (tunnel/link/framing.py) for one teammate carried by a node link."""

    closed_errors: tuple[type[BaseException], ...] = (SlotClosedError,)

    def __init__(self, owner: OwnerLink, slot: int) -> None:
        self._owner = owner
        self.slot = slot
        # Bounded by MAX_SLOT_INBOX (see there).
        self._inbox: deque[bytes | str] = deque()
        self._readable = asyncio.Event()
        self._open = True
        self._ended: tuple[int, str, bool] | None = None
        self._closed = asyncio.Event()

    @property
    def is_open(self) -> bool:
        return self._open and self._ended is None and self._owner.is_open

    @property
    def is_closed(self) -> bool:
        return self._ended is not None

    async def messages(self) -> AsyncIterator[bytes | str]:
        while True:
            while self._inbox:
                yield self._inbox.popleft()
            if self._ended is not None:
                return
            self._readable.clear()
            await self._readable.wait()

    def receive_with(self, on_message: Callable[[bytes | str], None]) -> bool:
        return False

    def write_messages(self, messages: Iterable[Outgoing | str]) -> None:
        self._owner.written(self.slot, list(messages))

    def backed_up(self) -> bool:
        return self._owner.backed_up()

    def write_guard(self) -> AbstractAsyncContextManager[None]:
        return self._guard()

    @contextlib.asynccontextmanager
    async def _guard(self) -> AsyncIterator[None]:
        if not self.is_open:
            raise SlotClosedError
        yield
        await self._owner.drain()

    async def close(self, code: int, reason: str) -> None:
        if self._ended is None:
            self._open = False
            self._owner.send_close(self.slot, code, reason)
            self.ended(code, reason, by_peer=False)

    async def wait_closed(self) -> None:
        await self._closed.wait()

    def abort(self) -> None:
        if self._ended is None:
            self._owner.send_close(self.slot, CloseCode.INTERNAL_ERROR, "")
            self.ended(CloseCode.ABNORMAL_CLOSURE, "", by_peer=False)

    def close_reason(self) -> tuple[int, str, bool]:
        return self._ended or (CloseCode.ABNORMAL_CLOSURE, "", True)

    # -- called by the owner link ------------------------------------------------------------

    def deliver(self, message: bytes | str) -> None:
        if self._ended is not None:
            return
        if len(self._inbox) >= MAX_SLOT_INBOX:
            self.abort()
            return
        self._inbox.append(message)
        self._readable.set()

    def ended(self, code: int, reason: str, *, by_peer: bool) -> None:
        if self._ended is None:
            self._ended = (code, reason, by_peer)
            self._owner.forget(self.slot)
        self._readable.set()
        self._closed.set()


Serve = Callable[[Link, str], Coroutine[Any, Any, None]]
"""Serves one carried teammate's link from its hello to its close, as the relay serves any
connection (`RelayServer.serve`), with the teammate's own address."""


class OwnerLink:
    """One node link accepted from an entry node: its slots, and its writes, merged."""

    def __init__(
        self,
        websocket: WebSocket,
        *,
        new_link: Callable[[SlotFraming, str], Link],
        serve: Serve,
        count_down: Callable[[int], object] | None = None,
    ) -> None:
        self._websocket = websocket
        self._framing = WebsocketsFraming(websocket)
        self._new_link = new_link
        self._serve = serve
        self._count_down = count_down
        # Bounded by the slots the entry node attached, each by the relay's own limits.
        self._slots: dict[int, SlotFraming] = {}
        # What the slots' links wrote since the last flush: bounded by what their protocol
        # objects held (their windows), handed over in one turn of the event loop.
        self._pending: list[Written] = []
        self._flush_scheduled = False

    @property
    def is_open(self) -> bool:
        return self._framing.is_open

    async def run(self) -> None:
        """Serve the link until the entry node closes it; then end every slot it carried."""
        try:
            async with anyio.create_task_group() as tg:
                try:
                    async for message in self._websocket:
                        if not isinstance(message, bytes):
                            raise EnvelopeError("a text message on a node link")
                        self._receive(unpack(message), tg)
                except EnvelopeError as exc:
                    logger.warning("closing a node link: %s", exc)
                    await self._websocket.close(CloseCode.PROTOCOL_ERROR, "bad envelope")
                except ConnectionClosed:
                    pass
                # The entry node is gone: so are the teammates it carried.
                for slot in list(self._slots.values()):
                    slot.ended(CloseCode.ABNORMAL_CLOSURE, "", by_peer=True)
        finally:
            for slot in list(self._slots.values()):
                slot.ended(CloseCode.ABNORMAL_CLOSURE, "", by_peer=True)

    def _receive(self, envelope: Envelope, tg: anyio.abc.TaskGroup) -> None:
        if envelope.type == ATTACH:
            if envelope.slot in self._slots:
                raise EnvelopeError("a slot attached twice")
            framing = SlotFraming(self, envelope.slot)
            self._slots[envelope.slot] = framing
            assert isinstance(envelope.body, bytes)
            framing.deliver(envelope.body)
            tg.start_soon(self._serve, self._new_link(framing, envelope.client), envelope.client)
            return
        if envelope.type == CAST:
            raise EnvelopeError("a cast from an entry node")
        slot = self._slots.get(envelope.slot)
        if slot is None:
            return  # closed here meanwhile: its close is on its way to the entry node
        if envelope.type == CLOSE:
            assert isinstance(envelope.body, str)
            slot.ended(envelope.code, envelope.body, by_peer=True)
        else:
            slot.deliver(envelope.body)

    def forget(self, slot: int) -> None:
        self._slots.pop(slot, None)

    # -- writing -----------------------------------------------------------------------------

    def written(self, slot: int, messages: list[Outgoing | str]) -> None:
        """Take what a slot's link wrote; it goes out with every other slot's at the end of this
        turn of the event loop."""
        self._pending.append((slot, messages))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        pending, self._pending = self._pending, []
        if not pending or not self._framing.is_open:
            return
        envelopes: list[Outgoing] = [
            envelope if isinstance(envelope, bytes) else (envelope[0], envelope[1])  # type: ignore[misc]
            for envelope in merge(pending)
        ]
        if self._count_down is not None:
            self._count_down(len(envelopes))
        self._framing.write_messages(envelopes)

    def send_close(self, slot: int, code: int, reason: str) -> None:
        """Close a slot at the entry node, after everything it wrote before."""
        self._flush()
        if self._framing.is_open:
            self._framing.write_messages([pack_close(slot, code, clip_reason(reason))])

    def backed_up(self) -> bool:
        return self._framing.backed_up()

    async def drain(self) -> None:
        """Wait until the socket's buffer drains (at once when it is not backed up)."""
        if self._framing.backed_up():
            with contextlib.suppress(ConnectionClosed):
                async with self._framing.write_guard():
                    pass
