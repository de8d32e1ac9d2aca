"""The entry node's end of a node link: the teammates this node carries to one other node, over
one WebSocket (docs/cluster.md, "The node link").

`EntryLinks.carry(teammate, hello, ...)` carries one teammate until either side closes: the first
teammate for a node opens the link (signed as every node-to-node connection is), the last one
to leave closes it. Down the link come each teammate's messages and the host's casts, once for
every teammate here that takes them; this end writes each teammate its own frames, in order, at
that teammate's pace: a teammate that stops reading is closed with 4007 after `send_timeout`,
and holds up no other.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.connection import Connection as WebSocket
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from tunnel.link.core import clip_reason
from tunnel.link.framing import WebsocketsFraming, queued_frames
from tunnel.link.urls import websocket_url
from tunnel.proto import Outgoing, ProtocolError, decode_frame
from tunnel.proto.codes import CloseCode
from tunnel.proto.frames import Hello, cast_head
from tunnel.relay.node_forward import ForwardResult, close_of, close_websocket, sign_headers
from tunnel.relay.node_link import (
    ATTACH,
    CAST,
    CLOSE,
    EnvelopeError,
    pack_attach,
    pack_close,
    pack_message,
    unpack,
)

__all__ = ["NODE_LINK_PATH", "EntryLinks"]

logger = logging.getLogger("relay.cluster")

NODE_LINK_PATH = "/v1/node/link"
"""Where an entry node opens its node link to another node; the route exists on cluster nodes
only, and only requests signed with the cluster secret get through (`verified_client`)."""

WRITE_BATCH = 16
"""Messages written to a teammate at most in one socket write."""

_SENDABLE = frozenset({1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011})
"""Close codes a WebSocket may carry on the wire; 1005, 1006 and 1015 are only ever reported."""

LINK_CLIENT = "0.0.0.0"
"""The client address a node link's signature names: it carries many clients, each named in its
slot's attach."""


@dataclass(eq=False)
class _Slot:
    """One teammate carried: what is to be written to it, and how it ended."""

    teammate: WebSocket
    # Bounded by the owner's windows toward the teammate (one per channel), which the owner
    # never exceeds: the owner's `Connection` accounts every frame it sends, casts included.
    queue: deque[Outgoing | str] = field(default_factory=deque)
    ready: anyio.Event = field(default_factory=anyio.Event)
    hello_checked: bool = False
    ended: tuple[int, str] | None = None
    """The close the owner asked for, the one the link's end gave, or the teammate's own."""
    settled: bool = False
    """The other node knows the slot ended: it said so, we told it, or the link is gone."""
    stalled: bool = False

    def push(self, message: Outgoing | str) -> None:
        self.queue.append(message)
        self.ready.set()

    def end(self, code: int, reason: str) -> None:
        if self.ended is None:
            self.ended = (code, reason)
        self.ready.set()


class _Link:
    """One node link to the node at `url`, and the slots it carries."""

    def __init__(self, url: str, run: str) -> None:
        self.url = url
        self.run = run
        self.websocket: ClientConnection | None = None
        self.slots: dict[int, _Slot] = {}
        self.opened = anyio.Event()
        self.failed = False
        self.closing = False


class EntryLinks:
    """This node's node links, one per other node (its URL and run) it carries teammates to."""

    def __init__(
        self,
        *,
        secret: bytes,
        relay_limits: Mapping[str, Any],
        max_message_size: int | None,
        open_timeout: float,
        send_timeout: float | None,
        ping_interval: float | None,
        ping_timeout: float | None,
        count_down: Callable[[int], object] | None = None,
        count_up: Callable[[int], object] | None = None,
    ) -> None:
        self._secret = secret
        self._relay_limits = dict(relay_limits)
        self._max_message_size = max_message_size
        self._open_timeout = open_timeout
        self._send_timeout = send_timeout
        self._ping_interval = ping_interval
        self._ping_timeout = ping_timeout
        self._count_down = count_down
        self._count_up = count_up
        # Bounded by the nodes of the cluster (a link goes once its last slot leaves).
        self._links: dict[tuple[str, str], _Link] = {}
        self._slot_ids = itertools.count(1)
        self._tasks: anyio.abc.TaskGroup | None = None

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Hold the links' readers until cancelled."""
        async with anyio.create_task_group() as tg:
            self._tasks = tg
            task_status.started()
            await anyio.sleep_forever()

    async def carry(
        self, teammate: WebSocket, hello: bytes, *, owner_url: str, owner_run: str, client: str
    ) -> ForwardResult:
        """Carry `teammate` (which got this node's hello and sent `hello`) to the node at
        `owner_url`, running as `owner_run`, until either side closes."""
        if self._tasks is None:
            # Not running yet (the node is starting): the teammate retries, as after any 4005.
            await close_websocket(teammate, CloseCode.HOST_GONE, "host is offline")
            return ForwardResult(reached=False, code=CloseCode.HOST_GONE)
        key = (owner_url, owner_run)
        link = self._links.get(key)
        if link is None or link.closing:
            link = self._links[key] = _Link(owner_url, owner_run)
            self._tasks.start_soon(self._open, link)
        slot_id = next(self._slot_ids)
        slot = _Slot(teammate)
        link.slots[slot_id] = slot
        try:
            with anyio.move_on_after(self._open_timeout):
                await link.opened.wait()
            if link.websocket is None or link.failed:
                await close_websocket(teammate, CloseCode.HOST_GONE, "host is offline")
                return ForwardResult(reached=False, code=CloseCode.HOST_GONE)
            await self._send(link, pack_attach(slot_id, client, hello))
            async with anyio.create_task_group() as tg:

                async def down() -> None:
                    await self._write_down(slot)
                    tg.cancel_scope.cancel()

                async def up() -> None:
                    await self._read_up(link, slot_id, slot)
                    tg.cancel_scope.cancel()

                tg.start_soon(down)
                tg.start_soon(up)
            code, reason = self._ending(slot)
            if not slot.settled and not link.closing:
                # The teammate left, or stopped reading: the other node learns it from us.
                slot.settled = True
                with contextlib.suppress(ConnectionClosed):
                    await self._send(link, pack_close(slot_id, code, clip_reason(reason)))
            with anyio.move_on_after(self._open_timeout, shield=True):
                await close_websocket(teammate, code, reason)
            return ForwardResult(reached=True, code=code)
        finally:
            link.slots.pop(slot_id, None)
            if not link.slots and not link.closing:
                link.closing = True
                if self._links.get(key) is link:
                    del self._links[key]
                if link.websocket is not None:
                    with anyio.move_on_after(self._open_timeout, shield=True):
                        await close_websocket(link.websocket, CloseCode.NORMAL, "")

    def _ending(self, slot: _Slot) -> tuple[int, str]:
        if slot.stalled:
            return CloseCode.SLOW_CONSUMER, "stopped reading for too long"
        if slot.ended is not None:
            return slot.ended
        code, reason = close_of(slot.teammate)
        if code == CloseCode.ABNORMAL_CLOSURE:
            return CloseCode.GOING_AWAY, "teammate left"
        return code, reason

    # -- the link ----------------------------------------------------------------------------

    async def _open(self, link: _Link) -> None:
        url = websocket_url(link.url, NODE_LINK_PATH)
        headers = sign_headers(self._secret, target=link.url, run=link.run, client=LINK_CLIENT)
        try:
            with anyio.fail_after(self._open_timeout):
                link.websocket = await connect(
                    url,
                    additional_headers=headers,
                    compression=None,
                    max_size=None,
                    ping_interval=self._ping_interval,
                    ping_timeout=self._ping_timeout,
                    open_timeout=None,
                    user_agent_header=None,
                )
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            if isinstance(exc, InvalidStatus) and exc.response.status_code == 403:
                logger.error(
                    "node %s refused a node link: do the nodes share one cluster secret and"
                    " agree on the time?",
                    link.url,
                )
            else:
                logger.info("cannot reach node %s: %s", link.url, type(exc).__name__)
            link.failed = True
            link.closing = True
            if self._links.get((link.url, link.run)) is link:
                del self._links[(link.url, link.run)]
            link.opened.set()
            return
        link.opened.set()
        try:
            await self._read_down(link)
        finally:
            link.closing = True
            if self._links.get((link.url, link.run)) is link:
                del self._links[(link.url, link.run)]
            # The other node vanished, or closed the link: its host will be back somewhere.
            for slot in link.slots.values():
                slot.settled = True
                slot.end(CloseCode.HOST_GONE, "host went offline")
            link.websocket.transport.abort()

    async def _read_down(self, link: _Link) -> None:
        assert link.websocket is not None
        try:
            async for message in link.websocket:
                if not isinstance(message, bytes):
                    raise EnvelopeError("a text message on a node link")
                if self._count_down is not None:
                    self._count_down(1)
                envelope = unpack(message)
                if envelope.type == CAST:
                    data = envelope.body
                    assert isinstance(data, bytes)
                    for slot_id, channel in envelope.recipients:
                        slot = link.slots.get(slot_id)
                        if slot is not None:
                            slot.push((cast_head(channel, len(data)), data))
                    continue
                slot = link.slots.get(envelope.slot)
                if slot is None:
                    continue  # it left meanwhile
                if envelope.type == CLOSE:
                    assert isinstance(envelope.body, str)
                    code = envelope.code
                    if code not in _SENDABLE and not 3000 <= code <= 4999:
                        code = CloseCode.INTERNAL_ERROR
                    slot.settled = True
                    slot.end(code, envelope.body)
                elif envelope.type == ATTACH:
                    raise EnvelopeError("an attach from the host's node")
                elif not slot.hello_checked:
                    # The owner's relay hello: the teammate has this node's already.
                    slot.hello_checked = True
                    if not _same_limits(envelope.body, self._relay_limits):
                        logger.error(
                            "node %s advertises other link limits than this node", link.url
                        )
                        slot.end(CloseCode.INTERNAL_ERROR, "relay nodes disagree on limits")
                else:
                    assert isinstance(envelope.body, bytes | str)
                    slot.push(envelope.body)
        except EnvelopeError as exc:
            logger.warning("closing the node link to %s: %s", link.url, exc)
        except ConnectionClosed:
            pass

    async def _send(self, link: _Link, *envelopes: bytes) -> None:
        """Write `envelopes` in one socket write (whole frames: the slots' writes never mix),
        then wait while the link's socket is backed up."""
        assert link.websocket is not None
        if self._count_up is not None:
            self._count_up(len(envelopes))
        async with link.websocket.send_context():
            WebsocketsFraming(link.websocket).write_messages(envelopes)

    # -- one teammate ------------------------------------------------------------------------

    async def _read_up(self, link: _Link, slot_id: int, slot: _Slot) -> None:
        """Pass the teammate's messages up until it closes (what had already arrived in one
        write, at most WRITE_BATCH; a lone message at once). Reads on only once the last ones are
        written: a link backed up toward the other node stops its teammates' sockets here."""
        teammate = slot.teammate
        try:
            while slot.ended is None:
                batch = [await teammate.recv()]
                # Where websockets does not say what is queued, each is written alone: slower.
                while len(batch) < WRITE_BATCH and queued_frames(teammate):
                    batch.append(await teammate.recv())
                await self._send(link, *(pack_message(slot_id, m) for m in batch))
        except ConnectionClosed:
            pass

    async def _write_down(self, slot: _Slot) -> None:
        """Write the teammate what comes for it, in order, batched, at its pace; return once
        the owner ended the slot and everything before the end is written."""
        framing = WebsocketsFraming(slot.teammate)
        try:
            with anyio.CancelScope() as scope:
                while True:
                    while not slot.queue:
                        if slot.ended is not None:
                            return
                        slot.ready = anyio.Event()
                        await slot.ready.wait()
                    batch = [slot.queue.popleft() for _ in range(min(WRITE_BATCH, len(slot.queue)))]
                    async with framing.write_guard():
                        framing.write_messages(batch)
                        if self._send_timeout is not None and framing.backed_up():
                            scope.deadline = anyio.current_time() + self._send_timeout
                    scope.deadline = math.inf
            if scope.cancelled_caught:
                slot.stalled = True
        except ConnectionClosed:
            pass


def _same_limits(message: Any, relay_limits: Mapping[str, Any]) -> bool:
    if not isinstance(message, bytes):
        return False
    try:
        frame = decode_frame(message)
    except ProtocolError:
        return False
    if not isinstance(frame, Hello) or frame.payload.get("role") != "relay":
        return False
    return frame.payload.get("limits") == dict(relay_limits)
