"""The agent's stdio as the acp package's message `Transport`, with a look at each message first.

The acp package validates every incoming message against the schema it was built with: a session
update of a kind it does not know (a newer agent) would end in a logged traceback and be lost, and
fields the schema lacks (the unstable `models` of session/new) are dropped. So the session sees
each message here first. It may take a notification for itself (`on_notification` returns True:
an unknown update kind, an update replayed by session/load), read the raw result of a response
(`results`), and send requests the package has no method for (`request`, e.g. the unstable
session/set_model), whose answers never reach the package.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import json
import logging
from collections.abc import Callable, Collection
from typing import Any

import anyio
from acp import RequestError

logger = logging.getLogger("tunnel.agents.acp")

NotificationHook = Callable[[dict[str, Any]], bool]
"""Sees each notification from the agent first; True means it was handled and goes no further."""

incoming_request: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "incoming_request", default=None
)
"""The agent's request a handler of the acp package is serving, as it was sent (its JSON-RPC id
and raw params): set as `receive` hands it over, and the package's task that serves it starts
with a copy of the receiving task's context."""


class StdioTransport:
    """Newline-delimited JSON-RPC over the agent's stdin and stdout (the acp Transport protocol).

    Lines are written whole, one at a time. A line from the agent may be longer than the reader's
    buffer: it is joined from several reads (the agent is the host user's own program).
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        on_notification: NotificationHook | None = None,
        keep_results_of: Collection[str] = (),
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._on_notification = on_notification
        self._keep_results_of = frozenset(keep_results_of)
        self._send_lock = anyio.Lock()
        self._watched: dict[Any, str] = {}
        self._ids = itertools.count(1)
        self._own: dict[str, asyncio.Future[Any]] = {}
        self._closed = False
        self.results: dict[str, Any] = {}
        """The raw `result` of the latest response to each method in `keep_results_of`."""

    # -- the Transport protocol ----------------------------------------------------------------

    async def send(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method in self._keep_results_of and "id" in message:
            self._watched[message["id"]] = method
        await self._write(message)

    async def receive(self) -> dict[str, Any] | None:
        while True:
            message = await self._read_message()
            if message is None:
                self._fail_own(ConnectionError("the agent closed its output"))
                return None
            if "method" in message:
                if (
                    "id" not in message
                    and self._on_notification is not None
                    and self._on_notification(message)
                ):
                    continue
                incoming_request.set(message if "id" in message else None)
                return message
            request_id = message.get("id")
            if isinstance(request_id, str) and request_id in self._own:
                self._answer_own(self._own.pop(request_id), message)
                continue
            hashable = isinstance(request_id, int | str)
            method = self._watched.pop(request_id, None) if hashable else None
            if method is not None and "result" in message:
                self.results[method] = message["result"]
            return message

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._fail_own(ConnectionError("the connection to the agent is closed"))
        self._writer.close()

    def waiting_for(self, *methods: str) -> bool:
        """Whether a request for one of `methods` (of `keep_results_of`) is still unanswered.

        Checked by `on_notification`, in the order the agent's messages arrive: an update read
        before the answer to session/load is a replayed one (one read after it may be too:
        tunnel.agents.acp_agent holds those back until the next prompt).
        """
        return any(method in self._watched.values() for method in methods)

    # -- requests of our own -------------------------------------------------------------------

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """Send a request the acp package has no method for; its result, or RequestError."""
        if self._closed:
            raise ConnectionError("the connection to the agent is closed")
        # Ids of another type than the package's integers: the answers can never be confused.
        request_id = f"tunnel-{next(self._ids)}"
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._own[request_id] = future
        try:
            message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            await self._write(message)
            return await future
        finally:
            self._own.pop(request_id, None)

    # -- internals -----------------------------------------------------------------------------

    async def _write(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode("utf-8")
        async with self._send_lock:
            try:
                self._writer.write(data)
                await self._writer.drain()
            except (OSError, RuntimeError) as exc:
                raise ConnectionError(f"cannot write to the agent: {exc}") from exc

    async def _read_message(self) -> dict[str, Any] | None:
        while True:
            line = await self._read_line()
            if not line:
                return None
            line = line.strip()
            if not line:
                continue
            try:
                message = json.loads(line)
            except ValueError:
                # Agents print banners and logs; JSON-RPC lines are the only ones that count.
                logger.debug("skipped a line from the agent that is not JSON")
                continue
            if isinstance(message, dict):
                return message
            logger.debug("skipped a JSON line from the agent that is not a message")

    async def _read_line(self) -> bytes:
        chunks: list[bytes] = []
        try:
            while True:
                try:
                    chunks.append(await self._reader.readuntil(b"\n"))
                    return b"".join(chunks)
                except asyncio.LimitOverrunError as exc:
                    chunks.append(await self._reader.readexactly(exc.consumed))
        except asyncio.IncompleteReadError as exc:
            chunks.append(exc.partial)
            return b"".join(chunks)

    def _answer_own(self, future: asyncio.Future[Any], message: dict[str, Any]) -> None:
        if future.done():
            return
        error = message.get("error")
        if isinstance(error, dict):
            future.set_exception(
                RequestError(
                    error.get("code", -32603), str(error.get("message", "Error")), error.get("data")
                )
            )
        else:
            future.set_result(message.get("result"))

    def _fail_own(self, exc: Exception) -> None:
        for future in self._own.values():
            if not future.done():
                future.set_exception(exc)
        self._own.clear()
