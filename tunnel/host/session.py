"""The host's handler for one `session` channel: streams the log, takes a driver's requests.

One task per channel (docs/application.md). The conversation log is the only source of what the
teammate sees: a snapshot in pages, then the live tail, every item exactly once; requests from a
driver go to the shared agent session, requests from a viewer are refused and change nothing.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import anyio

from tunnel.agents import AgentSession
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
from tunnel.log import Event, Item, Log, Subscription
from tunnel.process.groups import unwrap_group

logger = logging.getLogger("tunnel.session")

# A snapshot page is one encrypted `d`, at most 256 KiB on the wire; keep well under it so the
# page, its msgpack framing and the AEAD tag always fit.
SNAPSHOT_PAGE_BYTES = 192 * 1024
SNAPSHOT_PAGE_ITEMS = 200
# An item larger than a page (a huge diff) is sent with its data cut down to a note, so the
# sequence still has no gap.
MAX_ITEM_BYTES = SNAPSHOT_PAGE_BYTES


class SessionChannel(Protocol):
    """What the handler needs from a host channel (tunnel.host provides it)."""

    @property
    def role(self) -> str: ...

    @property
    def name(self) -> str: ...

    async def receive(self) -> bytes: ...

    async def send(self, plaintext: bytes) -> None: ...


def _fit(wire: dict[str, Any]) -> dict[str, Any]:
    """The item's wire map, with its data replaced by a note if it could never fit a message."""
    if len(out.pack(wire)) <= MAX_ITEM_BYTES:
        return wire
    return {**wire, "data": {"truncated": True, "note": "item too large to send"}}


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
    ) -> None:
        self._channel = channel
        self._session = session
        self._log = log
        self._presence = presence
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
            async with self._log.subscribe(conversation, after=None if reset else after) as sub:
                await self._send_snapshot(sub, -1 if reset or after is None else after, reset)
                while True:  # the live tail
                    for entry in await sub.receive_batch(SNAPSHOT_PAGE_ITEMS):
                        await self._send_entry(entry)

    async def _send_snapshot(self, sub: Subscription, last: int, reset: bool) -> None:
        """Every stored item up to the subscription's head, in pages that each fit a message."""
        head = sub.head_seq
        page: list[dict[str, Any]] = []
        page_bytes = 0
        while last < head:
            for entry in await sub.receive_batch(SNAPSHOT_PAGE_ITEMS):
                if isinstance(entry, Event):
                    continue  # ephemeral; what it said is in the items that follow
                wire = _fit(entry.to_wire())
                size = len(out.pack(wire))
                if page and (
                    page_bytes + size > SNAPSHOT_PAGE_BYTES or len(page) >= SNAPSHOT_PAGE_ITEMS
                ):
                    await self._send(
                        out.Snapshot(items=page, last_seq=last, more=True, reset=reset)
                    )
                    reset = False  # said once, on the first page
                    page, page_bytes = [], 0
                page.append(wire)
                page_bytes += size
                last = entry.seq
        await self._send(
            out.Snapshot(items=page, last_seq=max(last, head), more=False, reset=reset)
        )

    async def _send_entry(self, entry: Item | Event) -> None:
        if isinstance(entry, Item):
            await self._send(out.ItemMessage(item=_fit(entry.to_wire())))
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
