"""A webhook receiver on 127.0.0.1 for the tests: records every POST (path, headers, body) and
answers each path with the status the test set (200 unless told)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream


@dataclass
class Post:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class HookServer:
    port: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    posts: list[Post] = field(default_factory=list)
    changed: anyio.Event = field(default_factory=anyio.Event)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def to(self, path: str) -> list[Post]:
        return [post for post in self.posts if post.path == path]

    async def wait_for(self, predicate: Any, within: float = 20.0) -> None:
        with anyio.fail_after(within):
            while not predicate(self):
                await self.changed.wait()

    async def handle(self, stream: anyio.abc.ByteStream) -> None:
        async with stream:
            buffered = BufferedByteReceiveStream(stream)
            with contextlib.suppress(anyio.EndOfStream, anyio.IncompleteRead):
                while True:  # keep-alive: one connection may carry several POSTs
                    head = await buffered.receive_until(b"\r\n\r\n", 65536)
                    request_line, *lines = head.decode("latin-1").split("\r\n")
                    headers = {}
                    for line in lines:
                        key, _, value = line.partition(":")
                        headers[key.strip().lower()] = value.strip()
                    length = int(headers.get("content-length", "0"))
                    body = await buffered.receive_exactly(length) if length else b""
                    path = request_line.split(" ")[1]
                    self.posts.append(Post(path=path, headers=headers, body=body))
                    self.changed.set()
                    self.changed = anyio.Event()
                    status = self.statuses.get(path, 200)
                    await stream.send(
                        f"HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n".encode("latin-1")
                    )


async def _serve(
    server: HookServer, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    server.port = listener.extra(anyio.abc.SocketAttribute.local_port)
    task_status.started()
    await listener.serve(server.handle)


@contextlib.asynccontextmanager
async def hook_server() -> AsyncIterator[HookServer]:
    server = HookServer()
    async with anyio.create_task_group() as tg:
        await tg.start(_serve, server)
        try:
            yield server
        finally:
            tg.cancel_scope.cancel()
