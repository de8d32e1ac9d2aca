"""Turn what an agent does into log items (stored) and events (ephemeral).

The recorder is the only writer of agent output to the log. Canonical things (messages, tool
calls, permissions, plans, terminal output) become items; streamed text chunks, status, plan and
usage updates are published as events. The shapes are those of docs/application.md.

Streaming: text arrives in chunks on one of two channels (`message`, `reasoning`). Each chunk is
published as a `delta` event; the chunks of one stream are collected and stored as ONE final item
with the same `response_id` when the stream ends (`flush()`, or a chunk on another channel or of
another message). So that a host killed mid-stream loses little, a stream still going after
`STREAM_PART_SECONDS`, or longer than `MAX_STREAM_CHARS`, is stored in parts as it goes: each part
is an item of its own (with its own response id) whose data says `continued: true`, and the next
part says `continues: <that response id>`. The recorder is not meant to be driven by several
tasks at once: each session serialises its calls.

Writing: every append goes through the recorder's `LogWriter` (`.writer`), in one queue, which
holds items and retries while the log cannot be written. Agent output is queued (`record`) and
committed in groups while the agent goes on (the log syncs it to the disk before it leaves the
host), and the events published after it wait for it; a permission request (`append`) waits for
its item; notes of the host's own (`error`, permission decisions, `session_event(...,
hold=True)`) are held and never make their caller wait; a prompt is stored, and synced, at once
or refused (`user_message`).

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

import anyio

from tunnel.log import Event, Item, Log, NewItem

from .writer import LogWriter

Channel = Literal["message", "reasoning"]

MAX_STREAM_CHARS = 16 * 1024
"""A stream longer than this is stored as several consecutive items (each with its own response
id): it bounds the text held in memory, and lost if the host is killed, while an agent streams."""

STREAM_PART_SECONDS = 10.0
"""A stream whose unstored text started this long ago is stored up to there when its next chunk
arrives: a host killed mid-stream loses at most this long of the agent's streaming."""

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
    started: float
    """When its first chunk arrived (the event loop's clock)."""
    continues: str | None = None
    """The response id of the part stored before this one, if the stream was stored in parts."""
    parts: list[str] = field(default_factory=list)
    size: int = 0


class Recorder:
    """Writes one conversation's agent activity to the log."""

    def __init__(self, log: Log, conversation_id: str) -> None:
        self._log = log
        self.conversation_id = conversation_id
        self.writer = LogWriter(log, conversation_id)
        """Every append goes through it; the session runs its `run()`."""
        self._stream: _Stream | None = None
        # (channel, key, response id) of the part just stored: the next part continues it.
        self._previous_part: tuple[Channel, str | None, str] | None = None
        # The last plan stored, so an unchanged plan is only published, not stored again.
        self._last_plan: list[dict[str, Any]] | None = None
        self._turn: int | None = None
        self.turn_items = 0
        """Items recorded with the current `turn` since it was set."""

    @property
    def turn(self) -> int | None:
        """The seq of the prompt the agent is answering (or answered last); None before any."""
        return self._turn

    @turn.setter
    def turn(self, value: int | None) -> None:
        self._turn = value
        self.turn_items = 0

    @property
    def streaming(self) -> bool:
        """Whether a stream is open (chunks received, its final item not stored yet)."""
        return self._stream is not None

    def _in_turn(self, data: Mapping[str, Any], turn: int | None = None) -> dict[str, Any]:
        turn = self.turn if turn is None else turn
        return {**data, "turn": turn} if turn is not None else dict(data)

    def _new(
        self,
        type: str,
        data: Mapping[str, Any],
        by: str,
        status: str | None,
        response_id: str | None,
    ) -> NewItem:
        if self._turn is not None and data.get("turn") == self._turn:
            self.turn_items += 1
        return NewItem(
            type=type, data=dict(data), created_by=by, status=status, response_id=response_id
        )

    async def append(
        self,
        type: str,
        data: Mapping[str, Any],
        *,
        by: str = AGENT,
        status: str | None = None,
        response_id: str | None = None,
    ) -> Item:
        """Store one item and return it as stored; while the log cannot be written, wait."""
        return await self.writer.append(self._new(type, data, by, status, response_id))

    async def append_or_hold(
        self,
        type: str,
        data: Mapping[str, Any],
        *,
        by: str = AGENT,
        status: str | None = None,
        response_id: str | None = None,
    ) -> Item | None:
        """Store one item and return it; while the log cannot be written, keep it to store
        later and return None at once (`LogWriter.append_or_hold`)."""
        return await self.writer.append_or_hold(self._new(type, data, by, status, response_id))

    async def record(
        self,
        type: str,
        data: Mapping[str, Any],
        *,
        by: str = AGENT,
        status: str | None = None,
        response_id: str | None = None,
    ) -> None:
        """Queue one item of the agent's output to be stored in order, without waiting for the
        disk (`LogWriter.enqueue`): a fast agent's updates are committed in groups."""
        await self.writer.enqueue(self._new(type, data, by, status, response_id))

    async def publish(self, kind: str, data: Mapping[str, Any]) -> None:
        """Broadcast one ephemeral event to live subscribers, after the items recorded before
        it (`LogWriter.publish`)."""
        await self.writer.publish(
            Event(conversation_id=self.conversation_id, kind=kind, data=dict(data))
        )

    # -- conversation ------------------------------------------------------------------------

    async def user_message(
        self, text: str, *, by: str, images: Sequence[Mapping[str, Any]] = ()
    ) -> Item:
        """The prompt a driver or the host sent: stored now, or `StoreError` (never held: the
        sender must be told it was not stored). `images`: what images went with it (their type
        and size; the bytes go to the agent only)."""
        data: dict[str, Any] = {"role": "user", "text": text}
        if images:
            data["images"] = list(images)
        new = self._new("message", data, by, "completed", None)
        return await self.writer.try_append(new)

    async def delta(self, channel: Channel, text: str, *, key: str | None = None) -> None:
        """One streamed chunk. `key` groups chunks (an agent's message id): a new key or channel
        ends the previous stream."""
        stream = self._stream
        if stream is not None and text and (stream.channel != channel or stream.key != key):
            await self.flush()
        while text:
            stream = self._stream
            if stream is not None and (
                stream.size >= MAX_STREAM_CHARS
                or anyio.current_time() - stream.started >= STREAM_PART_SECONDS
            ):
                # Stored only now that more text follows, so a part is never the last one.
                await self._store_part(stream)
                stream = None
            if stream is None:
                stream = self._stream = _Stream(
                    channel=channel,
                    key=key,
                    response_id=new_id("resp"),
                    turn=self.turn,
                    started=anyio.current_time(),
                    continues=self._continues(channel, key),
                )
            room = MAX_STREAM_CHARS - stream.size
            piece, text = text[:room], text[room:]
            stream.parts.append(piece)
            stream.size += len(piece)
            await self.publish(
                "delta", {"response_id": stream.response_id, "channel": channel, "text": piece}
            )

    def _continues(self, channel: Channel, key: str | None) -> str | None:
        previous = self._previous_part
        self._previous_part = None
        if previous is not None and previous[:2] == (channel, key):
            return previous[2]
        return None

    async def _store_part(self, stream: _Stream) -> None:
        """Store the text so far as one part of a stream that goes on."""
        self._stream = None
        await self._store_stream(stream, continued=True)
        self._previous_part = (stream.channel, stream.key, stream.response_id)

    async def flush(self) -> None:
        """End the open stream, if any, by recording its final item."""
        stream, self._stream = self._stream, None
        self._previous_part = None
        if stream is not None:
            await self._store_stream(stream, continued=False)

    async def _store_stream(self, stream: _Stream, *, continued: bool) -> None:
        text = "".join(stream.parts)
        if stream.channel == "message":
            data: dict[str, Any] = {"role": "agent", "text": text}
            type_ = "message"
        else:
            data = {"text": text}
            type_ = "reasoning"
        if stream.continues is not None:
            data["continues"] = stream.continues
        if continued:
            data["continued"] = True
        await self.record(
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
    ) -> None:
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
        await self.record("tool_call", self._in_turn(data), status=_item_status(status))

    async def tool_call_update(self, tool_call_id: str, changes: Mapping[str, Any]) -> None:
        """Record what changed about a tool call (any of title, status, content, ...)."""
        await self.flush()
        data = self._in_turn({"tool_call_id": tool_call_id, **changes})
        status = changes.get("status")
        await self.record("tool_call_update", data, status=_item_status(status) if status else None)

    async def tool_result(self, tool_call_id: str, *, ok: bool, output: str) -> None:
        await self.record(
            "tool_result",
            self._in_turn({"tool_call_id": tool_call_id, "ok": ok, "output": output}),
            status="completed",
        )

    async def tool_terminal(self, data: Mapping[str, Any]) -> None:
        """A terminal the agent ran through the host ended (or was released): its output."""
        await self.flush()
        await self.record("tool_terminal", self._in_turn(data), status="completed")

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
        extra: Mapping[str, Any] | None = None,
    ) -> Item | None:
        """Held, never waited for, while the log cannot be written: the agent goes on.

        `extra`: why, under the approval policy (`policy`, `approved_by`, `remembered`, ...)."""
        return await self.append_or_hold(
            "permission_decision",
            {
                "request_id": request_id,
                "option_id": option_id,
                "option_name": option_name,
                "option_kind": option_kind,
                "outcome": outcome,
                **(extra or {}),
            },
            by=by,
            status="completed",
        )

    async def permission_approval(
        self,
        *,
        request_id: str,
        option_id: str,
        option_name: str,
        option_kind: str,
        approved_by: list[str],
        needed: int,
        by: str,
    ) -> Item | None:
        """One approval of a request that needs more (the approval policy's `approvals`); the
        request stays open. Held like a decision while the log cannot be written."""
        return await self.append_or_hold(
            "permission_approval",
            {
                "request_id": request_id,
                "option_id": option_id,
                "option_name": option_name,
                "option_kind": option_kind,
                "approved_by": approved_by,
                "needed": needed,
            },
            by=by,
            status="completed",
        )

    # -- plans, usage ------------------------------------------------------------------------

    async def plan(self, entries: Sequence[Mapping[str, Any]]) -> None:
        """Publish the plan; record it as a `plan` item only when it changed."""
        plain = [dict(entry) for entry in entries]
        await self.publish("plan", {"entries": plain})
        if plain == self._last_plan:
            return
        self._last_plan = plain
        await self.flush()
        await self.record("plan", self._in_turn({"entries": plain}))

    async def usage(self, data: Mapping[str, Any]) -> None:
        await self.publish("usage", data)

    # -- session life --------------------------------------------------------------------------

    async def error(self, message: str, **details: Any) -> Item | None:
        """The host's note that something failed; held, never waited for, while the log
        cannot be written. In a turn it carries the turn."""
        await self.flush()
        return await self.append_or_hold(
            "error", self._in_turn({"message": message, **details}), by="host"
        )

    async def session_event(
        self, what: str, *, by: str = "host", hold: bool = False, **details: Any
    ) -> Item | None:
        """A change of the session; with `hold`, held rather than waited for while the log
        cannot be written (and None returned)."""
        data = {"what": what, **details}
        if hold:
            return await self.append_or_hold("session_event", data, by=by)
        return await self.append("session_event", data, by=by)

    async def terminal(self, text: str) -> None:
        await self.record("terminal", {"text": text})

    async def terminal_exit(self, code: int | None, **details: Any) -> None:
        await self.record("terminal_exit", {"code": code, **details}, status="completed")


def _item_status(tool_status: str | None) -> str:
    """A tool call's own status, as the item status docs/application.md defines."""
    return "completed" if tool_status in ("completed", "failed") else "in_progress"
