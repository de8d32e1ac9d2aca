"""The host's handler for one `session` channel: streams the log, takes a driver's requests.

One task per channel (docs/application.md). The conversation log is the only source of what the
teammate sees: a snapshot in pages, then the live tail, every item exactly once; requests from a
driver go to the shared agent session, requests from a viewer are refused and change nothing.

Replays share the host: every channel's snapshot pages are read and encoded under one
`ReplayBudget`, a few pages at a time host-wide, and a joiner holds nothing of the log while it
waits for its turn; live tails never wait for it. So ten late joiners replaying a long log take
turns instead of starving the teammates who follow the conversation live, and the memory they
use is that of the budget's pages, not of ten replays at once.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple, Protocol

import anyio

from tunnel.agents import AgentSession
from tunnel.agents.writer import STORAGE_EVENT
from tunnel.app import host_messages as out
from tunnel.app.errors import AppError, BadRequest
from tunnel.app.requests import (
    DRIVING_REQUESTS,
    Cancel,
    Input,
    PermissionAnswer,
    Prompt,
    Request,
    Resize,
    SetConfig,
    SetMode,
    SetModel,
    Subscribe,
    decode_request,
)
from tunnel.host.presence import Member, Presence
from tunnel.log import Event, Item, Log, StoreError
from tunnel.process.groups import unwrap_group

logger = logging.getLogger("tunnel.session")

# A snapshot page is one encrypted `d`, at most 256 KiB on the wire; keep well under it so the
# page, its msgpack framing and the AEAD tag always fit.
SNAPSHOT_PAGE_BYTES = 192 * 1024
SNAPSHOT_PAGE_ITEMS = 200
# An item larger than a page (a huge diff) is sent with its data cut down to a note, so the
# sequence still has no gap.
MAX_ITEM_BYTES = SNAPSHOT_PAGE_BYTES

REPLAY_PAGES = 2
"""Snapshot pages the whole host reads and encodes at once, whatever the number of joiners."""

# What an item is guessed to weigh before a replay has seen any: each page asks the store for
# about as many items as fit, so a page of large items does not read (and drop) 200 of them.
FIRST_ITEM_ESTIMATE = 1024


class ReplayStatistics(NamedTuple):
    """The state of a host's `ReplayBudget`."""

    pages: int
    """Snapshot pages being read and encoded now (at most the budget's size)."""
    waiting: int
    """Replays waiting for a page of the budget."""


class ReplayBudget:
    """What every channel's history replay shares, so that replays take turns.

    A replay reads and encodes one snapshot page at a time inside `page()`; at most `pages`
    pages are in progress host-wide, the others wait their turn in order (FIFO). Sending a page
    happens outside it, so a joiner that reads slowly holds up nobody's replay but its own.
    """

    def __init__(self, pages: int = REPLAY_PAGES) -> None:
        if type(pages) is not int or pages < 1:
            raise ValueError("a replay budget needs at least one page")
        self._limiter = anyio.CapacityLimiter(pages)

    def page(self) -> anyio.CapacityLimiter:
        """`async with budget.page():` around reading and encoding one page."""
        return self._limiter

    def statistics(self) -> ReplayStatistics:
        stats = self._limiter.statistics()
        return ReplayStatistics(pages=stats.borrowed_tokens, waiting=stats.tasks_waiting)


class SessionChannel(Protocol):
    """What the handler needs from a host channel (tunnel.host provides it)."""

    @property
    def role(self) -> str: ...

    @property
    def name(self) -> str: ...

    async def receive(self) -> bytes: ...

    async def send(self, plaintext: bytes) -> None: ...


def _fit(wire: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The item's wire map, with its data replaced by a note if it could never fit a message,
    and its packed size."""
    size = len(out.pack(wire))
    if size <= MAX_ITEM_BYTES:
        return wire, size
    wire = {**wire, "data": {"truncated": True, "note": "item too large to send"}}
    return wire, len(out.pack(wire))


def _sandbox_info(session: AgentSession) -> out.SandboxInfo:
    """What the `ready` message says of the agent's sandbox (docs/application.md)."""
    sandbox = session.sandbox
    if sandbox is None:
        return out.SandboxInfo(enabled=False)
    return out.SandboxInfo(enabled=True, writable=sandbox.writable, network=sandbox.network)


class SessionChannelHandler:
    """Serves one teammate on one channel; `run` returns when the channel ends."""

    def __init__(
        self,
        channel: SessionChannel,
        *,
        session: AgentSession,
        log: Log,
        presence: Presence,
        replay: ReplayBudget | None = None,
    ) -> None:
        """`replay` is the host's budget shared by every channel; None gives this channel one
        of its own."""
        self._channel = channel
        self._session = session
        self._log = log
        self._presence = presence
        self._replay = replay if replay is not None else ReplayBudget()
        # Sends come from the request loop, the stream and the presence pump; one at a time
        # keeps each message whole and in order per sender.
        self._send_lock = anyio.Lock()
        self._stream_scope: anyio.CancelScope | None = None

    async def run(self) -> None:
        member = Member(name=self._channel.name, role=self._channel.role)
        await self._send(
            out.Ready(
                conversation_id=self._session.conversation_id,
                role=member.role,
                name=member.name,
                agent_name=self._session.info.name,
                agent_kind=self._session.info.kind,
                sandbox=_sandbox_info(self._session),
            )
        )
        # Only a message that decrypted proves the keys, and with them the role and the name:
        # until then the teammate is not shown to anyone.
        first = await self._channel.receive()
        key = self._presence.join(member)
        try:
            async with unwrap_group(), anyio.create_task_group() as tg:
                tg.start_soon(self._pump_presence)
                await self._serve_requests(tg, first)
                tg.cancel_scope.cancel()
        finally:
            self._presence.leave(key)

    async def _send(self, message: out.HostMessage) -> None:
        await self._send_plaintext(out.encode(message))

    async def _send_plaintext(self, plaintext: bytes) -> None:
        async with self._send_lock:
            await self._channel.send(plaintext)

    async def _serve_requests(self, tg: anyio.abc.TaskGroup, first: bytes) -> None:
        plaintext = first
        while True:
            await self._serve_one(tg, plaintext)
            plaintext = await self._channel.receive()

    async def _serve_one(self, tg: anyio.abc.TaskGroup, plaintext: bytes) -> None:
        try:
            request = decode_request(plaintext)
        except BadRequest as exc:
            logger.info("bad request from %s: %s", self._channel.name, exc)
            await self._send(out.Error(code=exc.code, message=exc.message))
            return
        if isinstance(request, Subscribe):
            await self._restart_stream(tg, request.after)
        elif isinstance(request, DRIVING_REQUESTS) and self._channel.role != "drive":
            await self._send(out.Error(code="forbidden", message="this link can only view"))
        else:
            try:
                await self._drive(request)
            except AppError as exc:
                await self._send(out.Error(code=exc.code, message=exc.message))
            except StoreError:
                # The session says this itself (agent_unavailable); should anything else get
                # through, the teammate is told, and the channel stays.
                logger.warning("a request of %s failed on the log", self._channel.name)
                await self._send(
                    out.Error(code="agent_unavailable", message="the log cannot be written")
                )

    async def _drive(self, request: Request) -> None:
        by = self._channel.name
        match request:
            case Prompt(text=text):
                await self._session.prompt(text, by=by)
            case PermissionAnswer(request_id=request_id, option_id=option_id):
                await self._session.answer_permission(request_id, option_id, by=by)
            case Cancel():
                await self._session.cancel(by=by)
            case SetMode(mode_id=mode_id):
                await self._session.set_mode(mode_id, by=by)
            case SetModel(model_id=model_id):
                await self._session.set_model(model_id, by=by)
            case SetConfig(config_id=config_id, value=value):
                await self._session.set_config(config_id, value, by=by)
            case Input(data=data):
                await self._session.input(data, by=by)
            case Resize(cols=cols, rows=rows):
                await self._session.resize(cols, rows, by=by)
            case Subscribe():  # handled by the caller; here for exhaustiveness
                pass

    async def _restart_stream(self, tg: anyio.abc.TaskGroup, after: int | None) -> None:
        # A new subscribe replaces the old stream: the client starts over from `after`.
        if self._stream_scope is not None:
            self._stream_scope.cancel()
        self._stream_scope = anyio.CancelScope()
        tg.start_soon(self._stream, self._stream_scope, after)

    async def _stream(self, scope: anyio.CancelScope, after: int | None) -> None:
        with scope:
            conversation = self._session.conversation_id
            info = await self._log.get_conversation(conversation)
            head = -1 if info is None else info.last_seq
            # A cursor past the end means the teammate saw a log this host does not have (a new
            # log file under the same conversation id): tell it to start over, from the start.
            reset = after is not None and after > head
            start = -1 if reset or after is None else after
            last = await self._send_snapshot(conversation, start, head, reset)
            # Subscribed only now, after exactly the items the snapshot sent: what was appended
            # meanwhile comes from the store, then the live tail; a joiner waiting for its
            # replay holds no live buffer.
            async with self._log.subscribe(conversation, after=last) as sub:
                storage = self._session.storage()
                if storage is not None:
                    # Said when it began, before this teammate came: say it again.
                    await self._send_entry(
                        Event(conversation_id=conversation, kind=STORAGE_EVENT, data=storage)
                    )
                while True:  # the live tail
                    for entry in await sub.receive_batch(SNAPSHOT_PAGE_ITEMS):
                        await self._send_entry(entry)

    async def _send_snapshot(self, conversation: str, last: int, head: int, reset: bool) -> int:
        """Every stored item after `last`, in pages that each fit a message, up to the head
        (read again at the end, so a long replay also sends what came meanwhile); returns the
        last seq the snapshot covers. Each page is read and encoded with a page of the host's
        replay budget, and sent after it is given back."""
        estimate = FIRST_ITEM_ESTIMATE
        while True:
            async with self._replay.page():
                page: list[dict[str, Any]] = []
                page_bytes = 0
                if last < head:
                    # About as many as fit: what does not fit is read again for the next page.
                    limit = min(SNAPSHOT_PAGE_ITEMS, SNAPSHOT_PAGE_BYTES // estimate + 1)
                    items = await self._log.query(
                        conversation, after=last, before=head + 1, limit=limit
                    )
                    if not items:
                        raise StoreError(
                            f"conversation {conversation}: items {last + 1} to {head} are "
                            "missing from the store"
                        )
                    for item in items:
                        wire, size = _fit(item.to_wire())
                        if page and page_bytes + size > SNAPSHOT_PAGE_BYTES:
                            break
                        page.append(wire)
                        page_bytes += size
                        last = item.seq
                    estimate = max(1, page_bytes // len(page))
                if last >= head:
                    info = await self._log.get_conversation(conversation)
                    head = max(head, -1 if info is None else info.last_seq)
                more = last < head
                plaintext = out.encode(
                    out.Snapshot(items=page, last_seq=last, more=more, reset=reset)
                )
                del page  # only the encoded page waits for the channel's window
            await self._send_plaintext(plaintext)
            reset = False  # said once, on the first page
            if not more:
                return last

    async def _send_entry(self, entry: Item | Event) -> None:
        if isinstance(entry, Item):
            await self._send(out.ItemMessage(item=_fit(entry.to_wire())[0]))
            return
        plaintext = out.encode(out.EventMessage(event=entry.to_wire()))
        # An event is ephemeral and its content arrives again in the item that follows it: one
        # too large for a message (a huge streamed chunk) is skipped, never allowed to end the
        # channel.
        if len(plaintext) <= MAX_ITEM_BYTES:
            await self._send_plaintext(plaintext)

    async def _pump_presence(self) -> None:
        seen = -1
        while True:
            if seen != self._presence.version:
                seen = self._presence.version
                members = [out.Member(name=m.name, role=m.role) for m in self._presence.members()]
                await self._send(out.PresenceMessage(members=members))
            await self._presence.wait_changed(seen)
