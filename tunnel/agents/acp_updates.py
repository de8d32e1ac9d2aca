"""How Agent Client Protocol `session/update` notifications become log items and events.

Pure mapping, no I/O: `apply_update()` drives the recorder. Message and thought chunks become
`delta` events plus one final `message`/`reasoning` item per stream; tool calls become
`tool_call` / `tool_call_update` items (and a `tool_result` when a call finishes); plans become
`plan` events and items; everything else (usage, modes, commands, config, session info) is kept
as `usage` events, and a mode change is also stored as a `session_event`.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from acp import schema

from .recorder import Recorder

logger = logging.getLogger("tunnel.agents.acp")

MAX_RESULT_CHARS = 64 * 1024
"""A tool result's output beyond this is cut: the full content is in the tool_call_update."""


def block_text(block: Any) -> str:
    """Markdown for one ACP content block; non-text blocks are named, not embedded."""
    if isinstance(block, schema.TextContentBlock):
        return block.text
    if isinstance(block, schema.ResourceContentBlock):
        return f"[{block.name}]({block.uri})"
    if isinstance(block, schema.EmbeddedResourceContentBlock):
        resource = block.resource
        text = getattr(resource, "text", None)
        return text if isinstance(text, str) else f"[{resource.uri}]"
    return f"[{getattr(block, 'type', 'unknown')} content]"


def tool_content(entries: list[Any] | None) -> list[dict[str, Any]]:
    """ACP tool call content as docs/application.md `content` entries."""
    out: list[dict[str, Any]] = []
    for entry in entries or ():
        if isinstance(entry, schema.FileEditToolCallContent):
            out.append(
                {
                    "type": "diff",
                    "path": entry.path,
                    "old_text": entry.old_text,
                    "new_text": entry.new_text,
                }
            )
        elif isinstance(entry, schema.TerminalToolCallContent):
            out.append({"type": "terminal", "terminal_id": entry.terminal_id})
        else:
            out.append({"type": "text", "text": block_text(entry.content)})
    return out


def result_text(content: list[dict[str, Any]], raw_output: Any) -> str:
    """What a finished tool call produced, as plain text for the `tool_result` item."""
    texts = [entry["text"] for entry in content if entry.get("type") == "text"]
    if texts:
        text = "\n".join(texts)
    elif raw_output is None:
        text = ""
    elif isinstance(raw_output, str):
        text = raw_output
    else:
        text = json.dumps(raw_output, ensure_ascii=False, default=str)
    return text[:MAX_RESULT_CHARS]


def _locations(locations: list[schema.ToolCallLocation] | None) -> list[dict[str, Any]] | None:
    if locations is None:
        return None
    return [{"path": loc.path, "line": loc.line} for loc in locations]


def _plain(model: Any) -> dict[str, Any]:
    data: dict[str, Any] = model.model_dump(
        mode="json", exclude_none=True, exclude={"session_update", "field_meta"}
    )
    return data


async def apply_update(recorder: Recorder, update: Any) -> None:
    """Record one `session/update` notification."""
    if isinstance(update, schema.AgentMessageChunk):
        await recorder.delta("message", block_text(update.content), key=update.message_id)
    elif isinstance(update, schema.AgentThoughtChunk):
        await recorder.delta("reasoning", block_text(update.content), key=update.message_id)
    elif isinstance(update, schema.UserMessageChunk):
        # The prompt is already stored (with who sent it); an echo adds nothing.
        return
    elif isinstance(update, schema.ToolCallStart):
        content = tool_content(update.content)
        status = update.status or "pending"
        extra = {}
        if (locations := _locations(update.locations)) is not None:
            extra["locations"] = locations
        await recorder.tool_call(
            tool_call_id=update.tool_call_id,
            title=update.title,
            kind=update.kind or "other",
            status=status,
            input=update.raw_input,
            content=content,
            extra=extra,
        )
        if status in ("completed", "failed"):
            await recorder.tool_result(
                update.tool_call_id,
                ok=status == "completed",
                output=result_text(content, update.raw_output),
            )
    elif isinstance(update, schema.ToolCallProgress):
        changes: dict[str, Any] = {}
        content = tool_content(update.content)
        for key, value in (
            ("title", update.title),
            ("kind", update.kind),
            ("status", update.status),
            ("content", content if update.content is not None else None),
            ("locations", _locations(update.locations)),
            ("input", update.raw_input),
            ("output", update.raw_output),
        ):
            if value is not None:
                changes[key] = value
        await recorder.tool_call_update(update.tool_call_id, changes)
        if update.status in ("completed", "failed"):
            await recorder.tool_result(
                update.tool_call_id,
                ok=update.status == "completed",
                output=result_text(content, update.raw_output),
            )
    elif isinstance(update, schema.AgentPlanUpdate):
        await recorder.plan(
            [
                {"content": e.content, "status": e.status, "priority": e.priority}
                for e in update.entries
            ]
        )
    elif isinstance(update, schema.CurrentModeUpdate):
        await recorder.usage({"update": "current_mode_update", **_plain(update)})
        await recorder.flush()
        await recorder.session_event("mode_changed", by="agent", mode_id=update.current_mode_id)
    else:
        kind = getattr(update, "session_update", None)
        if not isinstance(kind, str):
            logger.debug("ignoring an update of unknown shape: %r", type(update).__name__)
            return
        await recorder.usage({"update": kind, **_plain(update)})
