"""`Transcript`: the conversation as a terminal shows it, from items and events as they arrive.

Shared by `tunnel attach` and the host console. It does no I/O: it calls its `Output` to print a
renderable (for good, above the input line) and to say that the live part changed. The live part
is what is still moving: replies as they stream (agent `delta` events, before the turn stores the
reply) and tool calls still running, each one line that changes in place. When the reply's item
arrives it is printed for good, as markdown; when a tool call ends, its last line is.

A screen with no live part (output that is not a terminal, or a dumb one) gets the same content
as lines: streamed text is printed as it comes, and a tool call gets a new line when its status
changes. Every string from the wire passes `printable()` on its way (tunnel/terminal/render.py).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from rich.console import RenderableType
from rich.text import Text

from tunnel.terminal.render import (
    FINAL_TOOL_STATUSES,
    labelled,
    markdown,
    render_event,
    render_item,
    reply,
    tool_content,
    tool_line,
)
from tunnel.terminal.sanitize import printable

__all__ = ["Output", "Transcript"]

MAX_STREAMS = 4
"""Streams shown at once; an agent streams one at a time, so more means some item was lost."""

MAX_LIVE_TOOLS = 6
"""Running tool calls shown in place; an older one is printed as it stands to make room."""

MAX_KNOWN_TOOLS = 512
"""Tool calls remembered (by turn and id), so a late update still shows its call's title."""

MAX_SHOWN_ENTRIES = 32
"""Content entries remembered as printed per tool call (the latest)."""

MAX_SCREEN_TAIL = 4000
"""Characters of a terminal agent's unfinished last line kept in the live part; a longer line is
printed for good as it stands."""

MAX_LIVE_CHARS = 6000
"""The tail of a streaming reply that the live part renders: it shows the end, and rendering
stays cheap however long the reply grows."""

TERMINAL = "terminal"
"""`_open_line` when a terminal agent's output ends the last printed line."""

_STREAM_LABELS = {"message": ("agent: ", "bold green"), "reasoning": ("thinking: ", "italic dim")}


class Output(Protocol):
    """Where a transcript goes: a terminal screen."""

    @property
    def live(self) -> bool:
        """Whether the screen has a live part (redrawn in place) above its input line."""
        ...

    def print(self, renderable: RenderableType, *, end: str = "\n") -> None:
        """Print for good, above the input line and the live part."""
        ...

    def changed(self) -> None:
        """The live part changed: redraw it (soon)."""
        ...


@dataclass(slots=True)
class _Stream:
    channel: str
    text: list[str] = field(default_factory=list)
    shown: int = 0
    """Characters already printed (screens without a live part print as it comes)."""


class Transcript:
    """Items and events in, what a terminal shows out (see the module docstring)."""

    def __init__(self, output: Output, *, markdown: bool = True) -> None:
        self._out = output
        self._markdown = markdown
        self._streams: OrderedDict[str, _Stream] = OrderedDict()
        self._tools: OrderedDict[tuple[Any, str], dict[str, Any]] = OrderedDict()
        self._live_tools: list[tuple[Any, str]] = []
        self._shown_status: dict[tuple[Any, str], str] = {}
        self._shown_content: dict[tuple[Any, str], list[Any]] = {}
        """The content entries printed for each tool call: an update repeating one (an agent
        sends a diff with the call and again with its end) does not print it again."""
        self._open_line: str | None = None
        """The stream whose text ends the last printed line (screens without a live part), or
        `TERMINAL` for a terminal agent's output."""
        self._screen_tail = ""
        """A terminal agent's output after its last line break (screens with a live part)."""
        self.state = "idle"
        """The agent's last reported state: idle or running."""
        self.queued = 0

    # -- what arrives ---------------------------------------------------------------------------

    def item(self, item: Mapping[str, Any]) -> None:
        """Show a new item (after `ConversationView.accept` said it is new)."""
        kind = item.get("type")
        data = item.get("data")
        data = data if isinstance(data, Mapping) else {}
        if kind in ("tool_call", "tool_call_update"):
            self._tool(item, data)
            return
        if kind == "terminal":
            text = data.get("text")
            self.terminal(text if isinstance(text, str) else "")
            return
        if (
            kind == "session_event"
            and data.get("what") == "turn_ended"
            and data.get("stop_reason") == "cancelled"
        ):
            self._print(render_item(item))
            self._cancelled(data.get("turn"))
            return
        if kind == "permission_request":
            self._asked(data)
            call = data.get("tool_call")
            if isinstance(call, Mapping) and isinstance(call.get("content"), list):
                # What the call printed already (a diff just above) is not printed again, and
                # its updates need not print what the request shows.
                key = (data.get("turn"), str(data.get("tool_call_id", "")))
                fresh = self._unshown(key, call["content"])
                if len(fresh) < len(call["content"]):
                    item = {**item, "data": {**data, "tool_call": {**call, "content": fresh}}}
        if kind == "tool_result" and not str(data.get("output") or "").strip():
            # Nothing came out: the call's line above already says how it ended.
            return
        response_id = item.get("response_id")
        if kind in ("message", "reasoning") and isinstance(response_id, str):
            self._stored_stream(item, response_id, data)
            return
        self._print(render_item(item))

    def remember(self, item: Mapping[str, Any]) -> None:
        """Take an item in without showing it (history not shown): a tool call it updates later
        still shows its title."""
        kind = item.get("type")
        data = item.get("data")
        if kind in ("tool_call", "tool_call_update") and isinstance(data, Mapping):
            key = self._merge(data)
            self._shown_status[key] = str(self._tools[key].get("status", ""))
        elif kind == "permission_request" and isinstance(data, Mapping):
            self._asked(data)
        elif (
            kind == "session_event"
            and isinstance(data, Mapping)
            and data.get("what") == "turn_ended"
            and data.get("stop_reason") == "cancelled"
        ):
            for key, call in self._tools.items():
                if key[0] == data.get("turn") and call.get("status") not in FINAL_TOOL_STATUSES:
                    call["status"] = self._shown_status[key] = "failed"

    def event(self, event: Mapping[str, Any]) -> None:
        """Show an ephemeral event: a streamed chunk, the agent's state, the host's storage."""
        kind = event.get("kind")
        data = event.get("data")
        data = data if isinstance(data, Mapping) else {}
        if kind == "delta":
            response_id, text = data.get("response_id"), data.get("text")
            if isinstance(response_id, str) and isinstance(text, str) and text:
                self._delta(response_id, str(data.get("channel")), text)
            return
        if kind == "status":
            state, queued = data.get("state"), data.get("queued")
            self.state = state if state in ("idle", "running") else "idle"
            self.queued = queued if isinstance(queued, int) and queued > 0 else 0
            if self.state == "idle":
                # The turn is over: whatever is still live stays as it is now.
                self.settle()
            if self._out.live:
                self._out.changed()
                return
        line = render_event(event)
        if line is not None:
            self._print(line)

    def terminal(self, text: str) -> None:
        """A terminal agent's output, shown escaped: its lines as they end; with a live part,
        the unfinished last line (a shell's prompt) is shown there until it ends."""
        if not text:
            return
        if not self._out.live:
            if self._open_line not in (None, TERMINAL):
                self._end_line()
            self._out.print(Text(printable(text)), end="")
            self._open_line = None if text.endswith("\n") else TERMINAL
            return
        *lines, self._screen_tail = (self._screen_tail + text).split("\n")
        if len(self._screen_tail) > MAX_SCREEN_TAIL:
            lines.append(self._screen_tail)
            self._screen_tail = ""
        for line in lines:
            # A terminal ends its lines with \r\n: the \r is part of the line end.
            self._out.print(Text(printable(line.removesuffix("\r"))))
        self._out.changed()

    def settle(self) -> None:
        """Print for good whatever is still live: open streams and running tool calls."""
        for response_id in list(self._streams):
            self._print_stream(response_id)
        for key in list(self._live_tools):
            self._print(tool_line(self._tools.get(key, {})))
        self._live_tools.clear()
        if self._out.live:
            self._out.changed()

    def drop_streams(self) -> None:
        """Forget the streams in progress (the link dropped: their items come with the replay)."""
        self._streams.clear()
        self._end_line()
        if self._out.live:
            self._out.changed()

    # -- the live part --------------------------------------------------------------------------

    def live_view(self) -> list[RenderableType]:
        """What the live part shows now: streaming replies, running tool calls, the state."""
        shown: list[RenderableType] = []
        for stream in self._streams.values():
            text = "".join(stream.text)[-MAX_LIVE_CHARS:]
            shown.append(self._stream_renderable(stream.channel, text))
        for key in self._live_tools:
            shown.append(tool_line(self._tools.get(key, {})))
        if self._screen_tail:
            shown.append(Text(printable(self._screen_tail)))
        if self.state == "running":
            queued = f", {self.queued} queued" if self.queued else ""
            shown.append(Text(f"the agent is working{queued}; /cancel stops it", style="dim"))
        return shown

    # -- internals ------------------------------------------------------------------------------

    def _print(self, renderable: RenderableType) -> None:
        self._end_line()
        self._out.print(renderable)

    def _end_line(self) -> None:
        if self._open_line is not None:
            self._open_line = None
            self._out.print(Text(""))

    def _stream_renderable(self, channel: str, text: str) -> RenderableType:
        if channel == "message" and self._markdown:
            return labelled(Text("agent", style="bold green"), markdown(text))
        label_text, style = _STREAM_LABELS.get(channel, ("agent: ", "bold green"))
        shown = Text(label_text, style=style)
        shown.append(printable(text), style="italic dim" if channel == "reasoning" else "")
        return shown

    def _delta(self, response_id: str, channel: str, text: str) -> None:
        stream = self._streams.get(response_id)
        if stream is None:
            while len(self._streams) >= MAX_STREAMS:
                self._print_stream(next(iter(self._streams)))
            stream = self._streams[response_id] = _Stream(channel=channel)
        stream.text.append(text)
        if self._out.live:
            self._out.changed()
            return
        # No live part: the text goes out as it comes, on one line that stays open.
        if self._open_line != response_id:
            self._end_line()
            label, style = _STREAM_LABELS.get(channel, ("agent: ", "bold green"))
            self._out.print(Text(label, style=style), end="")
        self._out.print(
            Text(printable(text), style="italic dim" if channel == "reasoning" else ""), end=""
        )
        stream.shown += len(text)
        self._open_line = response_id

    def _print_stream(self, response_id: str) -> None:
        """A stream whose item has not come (yet): what arrived of it, for good."""
        stream = self._streams.pop(response_id)
        if self._out.live:
            text = "".join(stream.text)
            self._out.print(self._stream_renderable(stream.channel, text))
        elif self._open_line == response_id:
            self._end_line()

    def _stored_stream(
        self, item: Mapping[str, Any], response_id: str, data: Mapping[str, Any]
    ) -> None:
        """The stored item of a reply or a thought: it replaces what streamed of it."""
        stream = self._streams.pop(response_id, None)
        text = data.get("text")
        text = text if isinstance(text, str) else ""
        # A part of a long reply after the first (docs/agents.md, "Streamed text and crashes")
        # goes on where the previous one stopped: no label of its own.
        continued = isinstance(data.get("continues"), str)
        if not self._out.live and stream is not None and stream.shown:
            # Printed as it streamed: only what did not stream (if anything) is left.
            streamed = "".join(stream.text)
            rest = text[len(streamed) :] if text.startswith(streamed) else None
            if rest is not None and self._open_line == response_id:
                if rest:
                    self._out.print(Text(printable(rest)), end="")
                self._end_line()
                return
            if rest == "":
                return  # all of it is on the screen already, if cut by other lines
        if self._out.live:
            self._out.changed()
        if item.get("type") == "message" and self._markdown and data.get("role") != "user":
            self._print(reply(item, continued=continued))
        else:
            self._print(render_item(item))

    def _merge(self, data: Mapping[str, Any]) -> tuple[Any, str]:
        """The tool call `data` belongs to, with `data`'s fields over what was known."""
        key = (data.get("turn"), str(data.get("tool_call_id", "")))
        known = self._tools.pop(key, None) or {}
        merged = {**known, **{k: v for k, v in data.items() if v is not None}}
        self._tools[key] = merged
        while len(self._tools) > MAX_KNOWN_TOOLS:
            old, _ = self._tools.popitem(last=False)
            self._shown_status.pop(old, None)
            self._shown_content.pop(old, None)
        return key

    def _asked(self, data: Mapping[str, Any]) -> None:
        """A permission request about a tool call not seen before: its title and kind name the
        call when updates of it come later (agents that ask before they announce the call)."""
        call = data.get("tool_call")
        key = (data.get("turn"), str(data.get("tool_call_id", "")))
        if not isinstance(call, Mapping) or key in self._tools:
            return
        named = {k: v for k in ("title", "kind") if isinstance(v := call.get(k), str) and v}
        if named:
            self._merge({"turn": key[0], "tool_call_id": key[1], **named})

    def _cancelled(self, turn: Any) -> None:
        """A cancelled turn's tool calls still open are over: each is shown failed, as the page
        shows them (an agent's own update saying so later adds no line)."""
        for key, call in self._tools.items():
            if key[0] != turn or str(call.get("status", "")) in FINAL_TOOL_STATUSES:
                continue
            call["status"] = "failed"
            self._shown_status[key] = "failed"
            if key in self._live_tools:
                self._live_tools.remove(key)
            self._print(tool_line(call))
        if self._out.live:
            self._out.changed()

    def _unshown(self, key: tuple[Any, str], content: Any) -> list[Any]:
        """The entries of `content` not yet printed for tool call `key`, now counted as printed."""
        if not isinstance(content, list):
            return []
        shown = self._shown_content.setdefault(key, [])
        fresh = [entry for entry in content if entry not in shown]
        shown.extend(fresh)
        del shown[:-MAX_SHOWN_ENTRIES]
        return fresh

    def _tool(self, item: Mapping[str, Any], data: Mapping[str, Any]) -> None:
        key = self._merge(data)
        call = self._tools[key]
        status = str(call.get("status", ""))
        content = tool_content({**data, "content": self._unshown(key, data.get("content"))})
        over = status in FINAL_TOOL_STATUSES or not status
        if self._out.live:
            if over:
                # The call's line first, then what it produced: read as one block.
                if key in self._live_tools:
                    self._live_tools.remove(key)
                if self._shown_status.get(key) != status or not status:
                    self._print(tool_line(call))
                self._shown_status[key] = status
            if content is not None:
                self._print(content)
            if not over and key not in self._live_tools:
                self._live_tools.append(key)
                while len(self._live_tools) > MAX_LIVE_TOOLS:
                    self._print(tool_line(self._tools.get(self._live_tools.pop(0), {})))
            self._out.changed()
            return
        # No live part: a line when the call first shows or its status changes.
        if self._shown_status.get(key) != status or item.get("type") == "tool_call":
            self._shown_status[key] = status
            self._print(tool_line(call))
        if content is not None:
            self._print(content)
