"""A push service on 127.0.0.1 for the tests, speaking RFC 8030's one request the host makes:
`POST /push/<id>` with an encrypted body. It checks each push as a real service and a browser
would: the VAPID JWT (audience, expiry, ES256 signature by the host's key) and the payload,
decrypted with the subscription keys the test made. Each subscription answers 201, 410, 500, or
never (it hangs until the test releases it)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from tests.notify.push_keys import BrowserKeys, b64e, verify_vapid

Answer = Literal["created", "gone", "hang", "error"]


@dataclass
class Push:
    """One push the service took: its subscription, headers, and plaintext (JSON)."""

    subscription: str
    headers: dict[str, str]
    message: dict[str, Any]


@dataclass
class PushService:
    port: int = 0
    vapid_key: bytes | None = None
    """The host's VAPID public key: every push must be signed by it."""
    keys: dict[str, BrowserKeys] = field(default_factory=dict)
    answers: dict[str, Answer] = field(default_factory=dict)
    pushes: list[Push] = field(default_factory=list)
    hanging: int = 0
    """Pushes being held without an answer right now."""
    errors: list[str] = field(default_factory=list)
    release: anyio.Event = field(default_factory=anyio.Event)
    changed: anyio.Event = field(default_factory=anyio.Event)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def subscribe(self, answer: Answer = "created") -> tuple[str, BrowserKeys]:
        """A new subscription: its endpoint and the browser's keys."""
        name = b64e(os.urandom(12))
        self.keys[name] = BrowserKeys()
        self.answers[name] = answer
        return f"{self.origin}/push/{name}", self.keys[name]

    def to(self, endpoint: str) -> list[Push]:
        name = endpoint.rsplit("/", 1)[1]
        return [push for push in self.pushes if push.subscription == name]

    async def wait_for(self, predicate: Any, within: float = 20.0) -> None:
        with anyio.fail_after(within):
            while not predicate(self):
                await self.changed.wait()

    def _changed(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    async def handle(self, stream: anyio.abc.ByteStream) -> None:
        async with stream:
            buffered = BufferedByteReceiveStream(stream)
            head = await buffered.receive_until(b"\r\n\r\n", 65536)
            request_line, *lines = head.decode("latin-1").split("\r\n")
            headers = {}
            for line in lines:
                key, _, value = line.partition(":")
                headers[key.strip().lower()] = value.strip()
            body = await buffered.receive_exactly(int(headers.get("content-length", "0")))
            method, path, _ = request_line.split(" ", 2)
            name = path.rsplit("/", 1)[1]
            try:
                self._check(method, name, headers)
                keys = self.keys[name]
                message = json.loads(keys.decrypt(body))
            except Exception as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                self._changed()
                await stream.send(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                return
            self.pushes.append(Push(subscription=name, headers=headers, message=message))
            answer = self.answers[name]
            if answer == "hang":
                self.hanging += 1
                self._changed()
                try:
                    await self.release.wait()
                finally:
                    self.hanging -= 1
                return
            self._changed()
            status = {"created": b"201 Created", "gone": b"410 Gone"}.get(answer, b"500 Oops")
            await stream.send(b"HTTP/1.1 " + status + b"\r\ncontent-length: 0\r\n\r\n")

    def _check(self, method: str, name: str, headers: dict[str, str]) -> None:
        assert method == "POST", method
        assert name in self.keys, "unknown subscription"
        assert headers["content-encoding"] == "aes128gcm"
        assert int(headers["ttl"]) > 0
        assert headers["urgency"] == "high"
        assert len(headers["topic"]) <= 32
        claims = verify_vapid(headers["authorization"], audience=self.origin, now=time.time())
        assert claims["k"] == self.vapid_key, "not signed by the host's VAPID key"


async def _serve(
    service: PushService, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    service.port = listener.extra(anyio.abc.SocketAttribute.local_port)
    task_status.started()
    await listener.serve(service.handle)


@contextlib.asynccontextmanager
async def push_service() -> AsyncIterator[PushService]:
    service = PushService()
    async with anyio.create_task_group() as tg:
        await tg.start(_serve, service)
        try:
            yield service
        finally:
            service.release.set()
            tg.cancel_scope.cancel()
