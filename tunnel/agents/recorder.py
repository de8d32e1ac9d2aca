"""Turn what an agent does into log items (stored) and events (ephemeral).

The recorder is the only writer of agent output to the log. Canonical things (messages, tool
calls, permissions, plans, terminal output) become items; streamed text chunks, status, plan and
usage updates are published as events. The shapes are those of docs/application.md.

Streaming: text arrives in chunks on one of two channels (`message`, `reasoning`). Each chunk is
published as a `delta` event; the chunks of one stream are collected and stored as ONE final item
with the same `response_id` when the stream ends (`flush()`, or a chunk on another channel or of
another message). The recorder is not meant to be driven by several tasks at once: each session
serialises its calls.

Turns: while `turn` is set (the seq of the prompt a chat agent is answering), every item the agent
produces (messages, reasoning, tool calls, their updates and results, permission requests, plans)
carries it as `data.turn`, so a tool call is known by (turn, tool_call_id) even when an agent
reuses its ids in a later turn. A stream keeps the turn it started in.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tunnel.log import Event, Item, Log, NewItem

Channel = Literal["message", "reasoning"]

MAX_STREAM_CHARS = 256 * 1024
"""A stream longer than this is stored as several consecutive items (each with its own response
id): it bounds the text held in memory while an agent streams."""

AGENT = "agent"
"""`created_by` of everything the agent itself produced."""


def new_id(prefix: str) -> str:
    """A short random id, unique across host restarts that continue one conversation."""
    return f"{prefix}_{secrets.token_hex(6)}"


@dataclass(slots=True, kw_only=True)
class _Stream:
    channel: Channel
    key: str | None
    response_id: str
    turn: int | None
    parts: list[str] = field(default_factory=list)
    size: int = 0


class Recorder:
    """Writes one conversation's agent activity to the log."""

    def __init__(self, log: Log, conversation_id: str) -> None:
        self._log = log
        self.conversation_id = conversation_id
        self._stream: _Stream | None = None
        # The last plan stored, so an unchanged plan is only published, not stored again.
        self._last_plan: list[dict[str, Any]] | None = None
        self.turn: int | None = None
        """The seq of the prompt the agent is answering (or answered last); None before any."""

    @property
    def streaming(self) -> bool:
        """Whether a stream is open (chunks received, its final item not stored yet)."""
        return self._stream is not None

    def _in_turn(self, data: Mapping[str, Any], turn: int | None = None) -> dict[str, Any]:
        turn = self.turn if turn is None else turn
        return {**data, "turn": turn} if turn is not None else dict(data)

    async def append(
        self,
        type: str,
        data: Mapping[str, Any],
        *,
        by: str = AGENT,
        status: str | None = None,
        response_id: str | None = None,
    ) -> Item:
        """Store one item and return it as stored."""
        new = NewItem(
            type=type, data=dict(data), created_by=by, status=status, response_id=response_id
        )
        (item,) = await self._log.append(self.conversation_id, new)
        return item

    async def publish(self, kind: str, data: Mapping[str, Any]) -> None:
        """Broadcast one ephemeral event to live subscribers."""
        await self._log.publish(
            Event(conversation_id=self.conversation_id, kind=kind, data=dict(data))
        )

    # -- conversation ------------------------------------------------------------------------

    async def user_message(self, text: str, *, by: str) -> Item:
        """The prompt a driver or the host sent."""
        return await self.append(
            "message", {"role": "user", "text": text}, by=by, status="completed"
        )

    async def delta(self, channel: Channel, text: str, *, key: str | None = None) -> None:
        """One streamed chunk. `key` groups chunks (an agent's message id): a new key or channel
        ends the previous stream."""
        stream = self._stream
        if stream is not None and text and (stream.channel != channel or stream.key != key):
            await self.flush()
        while text:
            stream = self._stream
            if stream is None:
                stream = self._stream = _Stream(
                    channel=channel, key=key, response_id=new_id("resp"), turn=self.turn
                )
            room = MAX_STREAM_CHARS - stream.size
            piece, text = text[:room], text[room:]
            stream.parts.append(piece)
            stream.size += len(piece)
            await self.publish(
                "delta", {"response_id": stream.response_id, "channel": channel, "text": piece}
            )
            if stream.size >= MAX_STREAM_CHARS:
                await self.flush()

    async def flush(self) -> Item | None:
        """End the open stream, if any, by storing its final item."""
        stream, self._stream = self._stream, None
        if stream is None:
            return None
        text = "".join(stream.parts)
        if stream.channel == "message":
            data: dict[str, Any] = {"role": "agent", "text": text}
            type_ = "message"
        else:
            data = {"text": text}
            type_ = "reasoning"
        return await self.append(
            type_,
            self._in_turn(data, stream.turn),
            status="completed",
            response_id=stream.response_id,
        )

    # -- tools and permissions -----------------------------------------------------------------

    async def tool_call(
        self,
        *,
        tool_call_id: str,
        title: str,
        kind: str = "other",
        status: str = "pending",
        input: Any = None,
        content: Sequence[Mapping[str, Any]] = (),
        extra: Mapping[str, Any] | None = None,
    ) -> Item:
        await self.flush()
        data: dict[str, Any] = {
            "tool_call_id": tool_call_id,
            "title": title,
            "kind": kind,
            "status": status,
            "input": input,
            "content": [dict(entry) for entry in content],
        }
        data.update(extra or {})
        return await self.append("tool_call", self._in_turn(data), status=_item_status(status))

    async def tool_call_update(self, tool_call_id: str, changes: Mapping[str, Any]) -> Item:
        """Record what changed about a tool call (any of title, status, content, ...)."""
        await self.flush()
        data = self._in_turn({"tool_call_id": tool_call_id, **changes})
        status = changes.get("status")
        return await self.append(
            "tool_call_update", data, status=_item_status(status) if status else None
        )

    async def tool_result(self, tool_call_id: str, *, ok: bool, output: str) -> Item:
        return await self.append(
            "tool_result",
            self._in_turn({"tool_call_id": tool_call_id, "ok": ok, "output": output}),
            status="completed",
        )

    async def tool_terminal(self, data: Mapping[str, Any]) -> Item:
        """A terminal the agent ran through the host ended (or was released): its output."""
        await self.flush()
        return await self.append("tool_terminal", self._in_turn(data), status="completed")

    async def permission_request(self, data: Mapping[str, Any]) -> Item:
        """An open request: `request_id`, `title`, `tool_call_id`, `options` and any details."""
        await self.flush()
        return await self.append(
            "permission_request", self._in_turn(data), status="action_required"
        )

    async def permission_decision(
        self,
        *,
        request_id: str,
        option_id: str,
        option_name: str,
        option_kind: str,
        outcome: str,
        by: str,
    ) -> Item:
        return await self.append(
            "permission_decision",
            {
                "request_id": request_id,
                "option_id": option_id,
                "option_name": option_name,
                "option_kind": option_kind,
                "outcome": outcome,
            },
            by=by,
            status="completed",
        )

    # -- plans, usage, status ------------------------------------------------------------------

    async def plan(self, entries: Sequence[Mapping[str, Any]]) -> Item | None:
        """Publish the plan; store it as a `plan` item only when it changed."""
        plain = [dict(entry) for entry in entries]
        await self.publish("plan", {"entries": plain})
        if plain == self._last_plan:
            return None
        self._last_plan = plain
        await self.flush()
        return await self.append("plan", self._in_turn({"entries": plain}))

    async def usage(self, data: Mapping[str, Any]) -> None:
        await self.publish("usage", data)

    async def status(self, *, running: bool, queued: int) -> None:
        await self.publish("status", {"state": "running" if running else "idle", "queued": queued})

    # -- session life --------------------------------------------------------------------------

    async def error(self, message: str, **details: Any) -> Item:
        await self.flush()
        return await self.append("error", {"message": message, **details}, by="host")

    async def session_event(self, what: str, *, by: str = "host", **details: Any) -> Item:
        return await self.append("session_event", {"what": what, **details}, by=by)

    async def terminal(self, text: str) -> Item:
        return await self.append("terminal", {"text": text})

    async def terminal_exit(self, code: int | None, **details: Any) -> Item:
        return await self.append("terminal_exit", {"code": code, **details}, status="completed")


def _item_status(tool_status: str | None) -> str:
    """A tool call's own status, as the item status docs/application.md defines."""
    return "completed" if tool_status in ("completed", "failed") else "in_progress"
