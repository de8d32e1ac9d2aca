"""A conversation's items as compact text for an agent to read: the prompts (with who sent them),
the agent's replies, its tool calls by title with their results, the people's decisions on its
permission requests and the errors, each clipped, the whole bounded with the newest kept.

This is what a fresh agent session of a forked conversation is given with its first prompt when
the agent cannot fork its own session (docs/agents.md, "Forks"). Pure: the caller reads the items.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tunnel.log import Item

MAX_TRANSCRIPT_BYTES: Final = 64 * 1024
"""The transcript's size at most, in UTF-8 bytes: the newest entries that fit are kept."""
MAX_TEXT_CHARS: Final = 4000
"""A prompt or a reply in the transcript, at most (its start is kept)."""
MAX_RESULT_CHARS: Final = 500
"""A tool call's result or an error in the transcript, at most."""
MAX_TITLE_CHARS: Final = 200
"""A tool call's title, a name or an option in the transcript, at most."""


@dataclass(frozen=True, slots=True)
class Transcript:
    """The text, how many entries it holds, and whether older ones were left out."""

    text: str
    entries: int
    left_out: bool

    def summary(self) -> dict[str, Any]:
        """What a log event says of it: entries, bytes and whether older ones were left out."""
        return {
            "entries": self.entries,
            "bytes": len(self.text.encode()),
            "left_out": self.left_out,
        }


def render(
    items: Sequence[Item],
    *,
    header: str,
    earlier: bool = False,
    limit: int = MAX_TRANSCRIPT_BYTES,
) -> Transcript:
    """`items` (oldest first) as a transcript under `header`, at most `limit` bytes.

    `earlier`: the conversation has items before the first of `items` (the caller read only
    its end), so older entries are said to be left out even if all of these fit."""
    entries: list[str] = []
    joinable = False
    for item in items:
        line = _entry(item)
        if line is None:
            continue
        if joinable and item.type == "message" and "continues" in item.data:
            # The next part of a reply stored in parts: one entry, as it was said.
            entries[-1] += _clip(_str(item.data, "text"), MAX_TEXT_CHARS)
        else:
            entries.append(line)
        joinable = item.type == "message" and item.data.get("continued") is True
    budget = limit - len(header.encode()) - 200  # the note on what was left out
    kept: list[str] = []
    for entry in reversed(entries):
        size = len(entry.encode()) + 1
        if size > budget:
            break
        budget -= size
        kept.append(entry)
    kept.reverse()
    left_out = earlier or len(kept) < len(entries)
    lines = [header]
    if left_out:
        lines.append("[… the earlier part of the conversation is left out]")
    lines.extend(kept)
    return Transcript(text="\n".join(lines), entries=len(kept), left_out=left_out)


def _entry(item: Item) -> str | None:
    """One item as a transcript entry; None for what a reader does not need (thoughts, plans,
    streaming updates, terminal output, session events)."""
    data = item.data
    if item.type == "message":
        text = _clip(_str(data, "text"), MAX_TEXT_CHARS)
        if data.get("role") == "user":
            images = data.get("images")
            pictured = f" [{len(images)} image(s)]" if isinstance(images, list) and images else ""
            return f"{_clip(item.created_by, MAX_TITLE_CHARS)}: {text}{pictured}"
        return f"agent: {text}"
    if item.type == "tool_call":
        title = _clip(_str(data, "title") or "a tool call", MAX_TITLE_CHARS)
        kind = _str(data, "kind")
        return f"agent's tool call: {title}" + (f" ({kind[:40]})" if kind else "")
    if item.type == "tool_result":
        outcome = "done" if data.get("ok") is True else "failed"
        output = _clip(_str(data, "output").strip(), MAX_RESULT_CHARS)
        return f"  result ({outcome}): {output}" if output else f"  result ({outcome})"
    if item.type == "permission_decision":
        if data.get("outcome") != "selected":
            return "  permission request cancelled"
        who = _clip(item.created_by, MAX_TITLE_CHARS)
        return f"  {who} chose: {_clip(_str(data, 'option_name'), MAX_TITLE_CHARS)}"
    if item.type == "error":
        return f"error: {_clip(_str(data, 'message'), MAX_RESULT_CHARS)}"
    return None


def _str(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    return value if isinstance(value, str) else ""


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " […]"
