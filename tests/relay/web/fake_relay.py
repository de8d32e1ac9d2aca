"""A scripted relay and host in one process, for testing the page against exact, chosen input.

It serves the web client like the relay does and answers `/v1/attach` itself: it checks the page's
hello and token, then plays the host for the session channel with the Python crypto and the
Python link protocol (`tunnel.proto.Connection`), so every frame, window grant and ciphertext the
page sends is also checked by the reference implementation. Like the real host it checks the
open's proof and answers with its signed answer, first on the channel and in clear
(`tunnel.e2e.opening`, with the host key of the test vectors), so the page's opening is checked
by Python's. A scenario picks what it does: serve a scripted conversation, or end the attachment
in one of the ways the page must explain.
"""

from __future__ import annotations

import asyncio
import http
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import msgpack
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from tunnel.e2e.crypto import (
    ChannelCrypto,
    DecryptionError,
    e2e_root,
    relay_token,
    token_verifier,
)
from tunnel.e2e.identity import HostIdentity
from tunnel.e2e.opening import (
    CONFIRMATION,
    EarlySubscribe,
    Offer,
    OpeningError,
    answer_offer,
    check_early_subscribe,
    check_offer_fields,
)
from tunnel.handshake import PROTOCOL_VERSION
from tunnel.proto import (
    ChannelClosed,
    ChannelOpened,
    Connection,
    DataReceived,
    HelloReceived,
    ProtocolError,
    Side,
)
from tunnel.relay.web import static_response

IDENTITY = HostIdentity.from_seed(bytes(range(0x20, 0x40)))
"""The host key of tests/vectors/crypto.json."""
HOST_ID = IDENTITY.host_id
SECRETS = {"view": bytes(range(32, 64)), "drive": bytes(range(64, 96))}
ROOTS = {role: e2e_root(secret, HOST_ID) for role, secret in SECRETS.items()}
CONVERSATION = "conv-1"
WINDOW_WAIT = 5.0
"""Seconds a send waits for the page to grant window before the fake calls it a page bug."""


def link_fragment(role: str) -> str:
    from tunnel.e2e.crypto import b64url_encode

    return f"#{role}.{b64url_encode(SECRETS[role])}"


def wire_item(seq: int, type_: str, data: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """An item as `Item.to_wire()` shapes it (docs/application.md)."""
    item: dict[str, Any] = {
        "id": f"{CONVERSATION}:{seq}",
        "conversation_id": CONVERSATION,
        "seq": seq,
        "type": type_,
        "status": "completed",
        "response_id": None,
        "created_at": "2025-01-01T12:00:00+00:00",
        "created_by": "agent",
        "data": data,
    }
    item.update(extra)
    return item


@dataclass
class Scenario:
    """What the fake does with each attachment.

    `end_with`: close the WebSocket with this code right after the page's hello.
    `close_channel_with`: close the session channel with this code right after the open.
    `garbage`: send one data frame that is not a valid ciphertext right after the answer.
    `first_data`: send these bytes as the channel's first frame instead of the answer.
    `tamper_answer`: flip this byte of the answer (0 to 127: public key, ephemeral key,
    signature), so that it is no longer the host's.
    `hold_answer`: send the answer only when the test calls `FakeRelay.release_answer()`.
    Otherwise it plays a host: `ready`, then the items after the page's `after`, live items
    pushed with `FakeRelay.push`, and `error forbidden` for driving ops from a viewer.
    """

    end_with: int | None = None
    close_channel_with: int | None = None
    garbage: bool = False
    first_data: bytes | None = None
    tamper_answer: int | None = None
    hold_answer: bool = False
    agent: dict[str, str] = field(default_factory=lambda: {"name": "scripted", "kind": "chat"})
    # The `sandbox` of the ready message; None leaves it out, as a host before it did.
    sandbox: dict[str, Any] | None = None
    # The `terminal` of the ready message (a terminal agent's size); None leaves it out.
    terminal: dict[str, Any] | None = None
    # The `push_key` of the ready message (the host offers notifications); None leaves it out.
    push_key: str | None = None
    items: list[dict[str, Any]] = field(default_factory=list)
    # How many items go in each snapshot page (the page must handle `more: true`).
    page_size: int = 3


@dataclass
class Attachment:
    role: str
    name: str
    websocket: ServerConnection
    connection: Connection
    channel: int
    crypto: ChannelCrypto
    answer: bytes
    answer_sent: bool = False
    early: EarlySubscribe | None = None
    """The subscribe the page's open carried."""
    confirmed: bool = False
    """Whether a message of the page's decrypted yet (its first is the key confirmation)."""


class FakeRelay:
    """Runs on its own thread and event loop; the test thread talks to it through methods."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.received: list[dict[str, Any]] = []
        self.hellos: list[dict[str, Any]] = []
        self.opens: list[dict[str, Any]] = []
        self.closes: list[tuple[int, str]] = []
        self.attachments: list[Attachment] = []
        self.errors: list[str] = []
        # Data frames the page sent on a channel before that channel's answer went out.
        self.data_before_answer = 0
        self.held: list[Attachment] = []
        self._loop = asyncio.new_event_loop()
        self._server: Server | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    # ---- test thread API ----

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def page_url(self, role: str) -> str:
        return f"{self.base_url}/h/{HOST_ID}{link_fragment(role)}"

    def push(self, item: dict[str, Any]) -> None:
        """Append an item to the conversation and send it to every attachment."""
        self._call(self._push(item))

    def send_event(self, event: dict[str, Any]) -> None:
        self._call(self._broadcast({"op": "event", "event": event}))

    def send(self, message: dict[str, Any]) -> None:
        """Send one host message, as it is, to every attachment."""
        self._call(self._broadcast(message))

    def send_presence(self, members: list[dict[str, str]], count: int | None = None) -> None:
        """Send the whole list: `members` listed, `count` attached in all (default: them)."""
        count = len(members) if count is None else count
        self._call(self._broadcast({"op": "presence", "members": members, "count": count}))

    def release_answer(self) -> None:
        """Send the held answer (scenario `hold_answer`) and carry on as a host."""
        self._call(self._release_answer())

    def drop_all(self) -> None:
        """Cut every attachment abruptly, as a relay restart does."""
        self._call(self._drop_all())

    def ops(self, op: str) -> list[dict[str, Any]]:
        return [m for m in list(self.received) if m.get("op") == op]

    # ---- lifecycle ----

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake relay did not start")

    def stop(self) -> None:
        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
                await self._server.wait_closed()

        try:
            self._call(shutdown())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def _call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            self._server = await serve(
                self._handle, "127.0.0.1", 0, process_request=self._http, max_size=1 << 20
            )
            self.port = self._server.sockets[0].getsockname()[1]
            self._ready.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()

    # ---- relay side ----

    def _http(self, _connection: ServerConnection, request: Request) -> Response | None:
        if request.path == "/v1/attach":
            return None
        result = static_response(request.path)
        if result is None:
            return Response(404, "Not Found", Headers([("Content-Length", "0")]), b"")
        status, headers, body = result
        all_headers = Headers([*headers, ("Content-Length", str(len(body)))])
        return Response(status, http.HTTPStatus(status).phrase, all_headers, body)

    async def _flush(self, websocket: ServerConnection, connection: Connection) -> None:
        for message in connection.data_to_send():
            await websocket.send(message)

    async def _handle(self, websocket: ServerConnection) -> None:
        connection = Connection(Side.ACCEPTER)
        connection.send_hello(
            {
                "role": "relay",
                "version": PROTOCOL_VERSION,
                "challenge": os.urandom(32),
                "limits": {},
            }
        )
        await self._flush(websocket, connection)
        attachment: Attachment | None = None
        try:
            async for message in websocket:
                if not isinstance(message, bytes):
                    await websocket.close(4000)
                    return
                connection.receive_data(message)
                for event in connection.events_received():
                    attachment = await self._on_event(websocket, connection, event, attachment)
                    if attachment is None and websocket.close_code is not None:
                        return
                await self._flush(websocket, connection)
        except ProtocolError as error:
            self.errors.append(f"protocol error from the page: {error}")
            await websocket.close(int(error.code))
        except DecryptionError:
            self.errors.append("the page's ciphertext did not decrypt")
            await websocket.close(4003)
        finally:
            if attachment is not None and attachment in self.attachments:
                self.attachments.remove(attachment)

    async def _on_event(
        self,
        websocket: ServerConnection,
        connection: Connection,
        event: object,
        attachment: Attachment | None,
    ) -> Attachment | None:
        scenario = self.scenario
        if isinstance(event, HelloReceived):
            self.hellos.append(event.payload)
            token = event.payload.get("token")
            valid = {token_verifier(relay_token(s, HOST_ID)) for s in SECRETS.values()}
            if (
                event.payload.get("host_id") != HOST_ID
                or not isinstance(token, bytes)
                or token_verifier(token) not in valid
            ):
                await websocket.close(4002)
                return None
            if scenario.end_with is not None:
                await websocket.close(scenario.end_with)
            return None
        if isinstance(event, ChannelOpened):
            self.opens.append({"path": event.path, "meta": event.meta})
            role = event.meta["role"]
            name = event.meta["name"]
            if not isinstance(name, str) or not 1 <= len(name) <= 64:
                # What the real host does with a missing, empty or longer name.
                self.errors.append(f"the page opened with a bad name {name!r}")
                connection.close_channel(event.channel, 4000, "name must be 1 to 64 characters")
                return attachment
            try:
                salt, teammate_key, proof = check_offer_fields(event.meta)
                early = check_early_subscribe(event.meta)
                offer = Offer(
                    host_id=HOST_ID,
                    role=role,
                    name=name,
                    salt=salt,
                    teammate_key=teammate_key,
                    subscribe=early,
                )
                answered = answer_offer(IDENTITY, root=ROOTS[role], offer=offer, proof=proof)
            except OpeningError as error:
                # What the real host does with an open that does not check out.
                self.errors.append(f"the page's open did not check out: {error.reason}")
                connection.close_channel(event.channel, int(error.code), error.reason)
                return attachment
            answer = answered.answer
            if scenario.tamper_answer is not None:
                flipped = answer[scenario.tamper_answer] ^ 1
                answer = answer[: scenario.tamper_answer] + bytes([flipped])
                answer += answered.answer[scenario.tamper_answer + 1 :]
            attachment = Attachment(
                role=role,
                name=name,
                websocket=websocket,
                connection=connection,
                channel=event.channel,
                crypto=answered.crypto,
                answer=answer,
                early=early,
            )
            if scenario.close_channel_with is not None:
                connection.close_channel(event.channel, scenario.close_channel_with, "scripted")
                return attachment
            if scenario.first_data is not None:
                connection.send_data(event.channel, scenario.first_data)
                return attachment
            if scenario.hold_answer:
                self.held.append(attachment)
                return attachment
            await self._start_channel(attachment)
            return attachment
        if isinstance(event, DataReceived) and attachment is not None:
            connection.acknowledge(event.channel, len(event.data))
            if not attachment.answer_sent:
                # The page cannot have keys yet: whatever it sent breaks the protocol.
                self.data_before_answer += 1
                return attachment
            plaintext = attachment.crypto.receive.decrypt(event.data)
            if plaintext == CONFIRMATION and not attachment.confirmed:
                attachment.confirmed = True  # the page's key confirmation, not a request
                return attachment
            attachment.confirmed = True
            request = msgpack.unpackb(plaintext, raw=False)
            self.received.append({**request, "_role": attachment.role, "_name": attachment.name})
            await self._on_request(attachment, request)
            return attachment
        if isinstance(event, ChannelClosed):
            self.closes.append((event.code, event.reason))
            return attachment
        return attachment

    async def _start_channel(self, attachment: Attachment) -> None:
        """Send the answer, then play the host: `ready` (or garbage, if scripted)."""
        connection, channel = attachment.connection, attachment.channel
        if not connection.send_data(channel, attachment.answer):
            raise RuntimeError("no window for the answer")
        attachment.answer_sent = True
        if self.scenario.garbage:
            connection.send_data(channel, os.urandom(40))
            await self._flush(attachment.websocket, connection)
            return
        self.attachments.append(attachment)
        ready = {
            "op": "ready",
            "conversation_id": CONVERSATION,
            "role": attachment.role,
            "name": attachment.name,
            "agent": self.scenario.agent,
        }
        if self.scenario.sandbox is not None:
            ready["sandbox"] = self.scenario.sandbox
        if self.scenario.terminal is not None:
            ready["terminal"] = self.scenario.terminal
        if self.scenario.push_key is not None:
            ready["push_key"] = self.scenario.push_key
        await self._send(attachment, ready)
        early = attachment.early
        if early is not None:
            # Like the real host: the open's subscribe is served with the answer, as if it
            # were the first request.
            request: dict[str, Any] = {"op": "subscribe", "after": early.after}
            if early.tail is not None:
                request["tail"] = early.tail
            if early.conversation is not None:
                request["conversation"] = early.conversation
            by = {"_role": attachment.role, "_name": attachment.name, "_early": True}
            self.received.append({**request, **by})
            await self._on_request(attachment, request)

    async def _release_answer(self) -> None:
        held, self.held = self.held, []
        for attachment in held:
            await self._start_channel(attachment)

    async def _on_request(self, attachment: Attachment, request: dict[str, Any]) -> None:
        op = request.get("op")
        if op == "subscribe":
            after = request.get("after")
            head = max((i["seq"] for i in self.scenario.items), default=-1)
            # Like the real host: a cursor past the log's end gets a reset and the whole log.
            other = request.get("conversation") not in (None, CONVERSATION)
            reset = after is not None and (after > head or other)
            if reset:
                after = None
            items = [i for i in self.scenario.items if after is None or i["seq"] > after]
            size = self.scenario.page_size
            pages = [items[i : i + size] for i in range(0, len(items), size)] or [[]]
            for index, page in enumerate(pages):
                last = page[-1]["seq"] if page else (after if after is not None else -1)
                more = index < len(pages) - 1
                snapshot = {"op": "snapshot", "items": page, "last_seq": last, "more": more}
                await self._send(attachment, {**snapshot, "reset": reset and index == 0})
            return
        if attachment.role != "drive":
            await self._send(
                attachment,
                {"op": "error", "code": "forbidden", "message": "viewers cannot do that"},
            )

    async def _send(self, attachment: Attachment, message: dict[str, Any]) -> None:
        plaintext = msgpack.packb(message, use_bin_type=True)
        ciphertext = attachment.crypto.send.encrypt(plaintext)
        # The page's grant may still be on its way (the reader loop handles it meanwhile); a
        # page that never grants what it consumed fails here.
        deadline = self._loop.time() + WINDOW_WAIT
        while not attachment.connection.send_data(attachment.channel, ciphertext):
            if self._loop.time() > deadline:
                self.errors.append("the page did not grant window")
                raise RuntimeError("the page did not grant window")
            await asyncio.sleep(0.01)
        await self._flush(attachment.websocket, attachment.connection)

    async def _broadcast(self, message: dict[str, Any]) -> None:
        for attachment in list(self.attachments):
            await self._send(attachment, message)

    async def _push(self, item: dict[str, Any]) -> None:
        self.scenario.items.append(item)
        await self._broadcast({"op": "item", "item": item})

    async def _drop_all(self) -> None:
        for attachment in list(self.attachments):
            await attachment.websocket.close(1001)


@contextmanager
def fake_relay(scenario: Scenario | None = None) -> Iterator[FakeRelay]:
    relay = FakeRelay(scenario or Scenario())
    relay.start()
    try:
        yield relay
    finally:
        relay.stop()
