"""How Agent Client Protocol `session/update` notifications become log items and events.

Pure mapping, no I/O: `apply_update()` drives the recorder. Message and thought chunks become
`delta` events plus one final `message`/`reasoning` item per stream; tool calls become
`tool_call` / `tool_call_update` items (and a `tool_result` when a call finishes), their content
and input cut down to a budget so an item always fits one message; plans become `plan` events
and items; usage and session info are kept as `usage` events. Mode, config and command updates
are the session's (tunnel.agents.acp_settings).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from acp import schema

from .recorder import Recorder

logger = logging.getLogger("tunnel.agents.acp")

MAX_RESULT_CHARS = 64 * 1024
"""A tool result's output beyond this is cut: the full content is in the tool_call_update."""

MAX_INPUT_BYTES = 32 * 1024
"""A tool call's raw input (or raw output, or locations) is cut down to about this much JSON."""

MAX_CONTENT_BYTES = 96 * 1024
"""A tool call's content (text, diffs) is cut down to about this much JSON. With the input, an
item stays well under what one message can carry (tunnel.app.entries.MAX_ITEM_BYTES)."""

_MIN_CUT = 64
"""Strings are never cut shorter than this while fitting a value into its budget."""


def clip_text(text: str, limit: int) -> str:
    """`text`, cut to `limit` characters with a marker saying how much is missing."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… [{len(text) - limit} more characters not stored]"


def _json_size(value: Any) -> int:
    # ASCII-escaped JSON is never shorter than the UTF-8 JSON or the msgpack of the same value.
    return len(json.dumps(value, default=str))


def _clip_strings(value: Any, cap: int, depth: int = 0) -> Any:
    if isinstance(value, str):
        return clip_text(value, cap)
    if depth > 64:
        return clip_text(json.dumps(value, default=str), cap)
    if isinstance(value, dict):
        return {k: _clip_strings(v, cap, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clip_strings(v, cap, depth + 1) for v in value]
    return value


def clip_value(value: Any, limit: int) -> tuple[Any, bool]:
    """`value` (JSON data) cut down so its JSON is at most about `limit` bytes; and whether it
    was cut. Long strings are cut first, each ending with a marker; a value that still does not
    fit (too many keys) becomes `{"truncated": true, "preview": <the start of its JSON>}`."""
    if _json_size(value) <= limit:
        return value, False
    cap = limit
    while cap >= 2 * _MIN_CUT:
        cap //= 2
        clipped = _clip_strings(value, cap)
        if _json_size(clipped) <= limit:
            return clipped, True
    text = json.dumps(value, ensure_ascii=False, default=str)
    # Characters, not bytes: escaped, one character may take up to twelve, so shrink to fit.
    keep = limit // 8
    while True:
        preview = {"truncated": True, "preview": clip_text(text, keep)}
        if keep == 0 or _json_size(preview) <= limit:
            return preview, True
        keep //= 2


def clip_content(entries: list[dict[str, Any]], limit: int) -> tuple[list[dict[str, Any]], bool]:
    """Tool call content cut down to about `limit` bytes of JSON, keeping each entry's shape:
    long texts and diff sides are cut (with a marker); entries that still do not fit are
    replaced by one text entry saying how many were left out."""
    if _json_size(entries) <= limit:
        return entries, False
    cap = limit
    clipped = entries
    while cap >= 2 * _MIN_CUT:
        cap //= 2
        clipped = [_clip_strings(entry, cap) for entry in entries]
        if _json_size(clipped) <= limit:
            return clipped, True
    kept: list[dict[str, Any]] = []
    used = 0
    for entry in clipped:
        size = _json_size(entry)
        if used + size > limit - 256:
            break
        kept.append(entry)
        used += size
    left_out = len(entries) - len(kept)
    kept.append({"type": "text", "text": f"… [{left_out} more content entries not stored]"})
    return kept, True


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


OUTPUT_FIELDS = ("aggregated_output", "formatted_output", "output", "stdout")
"""Fields of a tool call's raw output that hold what a command printed, in the order they are
preferred: codex-acp reports a command's output only so (`stdout`, `stderr`, `aggregated_output`
of both, `formatted_output` as its model reads it), with ids and timings beside it."""


def result_text(content: list[dict[str, Any]], raw_output: Any) -> str:
    """What a finished tool call produced, as plain text for the `tool_result` item: its text
    content, else what its raw output says it printed, else the raw output as JSON."""
    texts = [entry["text"] for entry in content if entry.get("type") == "text"]
    if texts:
        text = "\n".join(texts)
    elif raw_output is None:
        text = ""
    elif isinstance(raw_output, str):
        text = raw_output
    else:
        printed = None
        if isinstance(raw_output, Mapping):
            printed = next(
                (raw_output[k] for k in OUTPUT_FIELDS if isinstance(raw_output.get(k), str)), None
            )
        text = (
            printed
            if printed is not None
            else json.dumps(raw_output, ensure_ascii=False, default=str)
        )
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


def tool_fields(
    *,
    content: list[Any] | None,
    locations: list[schema.ToolCallLocation] | None,
    raw_input: Any,
    raw_output: Any = None,
) -> dict[str, Any]:
    """A tool call's `content`, `locations`, `input` and `output`, each within its budget; the
    ones the agent did not send are left out, and `truncated: true` says something was cut."""
    fields: dict[str, Any] = {}
    cut = False
    if content is not None:
        fields["content"], cut = clip_content(tool_content(content), MAX_CONTENT_BYTES)
    for key, value in (
        ("locations", _locations(locations)),
        ("input", raw_input),
        ("output", raw_output),
    ):
        if value is not None:
            fields[key], clipped = clip_value(value, MAX_INPUT_BYTES)
            cut = cut or clipped
    if cut:
        fields["truncated"] = True
    return fields


def permission_details(tool_call: schema.ToolCallUpdate) -> dict[str, Any]:
    """The tool call a permission request is about, whole (within budgets), for the humans who
    decide: `{"tool_call": {tool_call_id, title, kind, status, content, locations, input}}`."""
    call: dict[str, Any] = {"tool_call_id": tool_call.tool_call_id}
    for key, value in (
        ("title", tool_call.title),
        ("kind", tool_call.kind),
        ("status", tool_call.status),
    ):
        if value is not None:
            call[key] = value
    call.update(
        tool_fields(
            content=tool_call.content,
            locations=tool_call.locations,
            raw_input=tool_call.raw_input,
            raw_output=tool_call.raw_output,
        )
    )
    return {"tool_call": call}


def merge_known_call(known: Mapping[str, Any], seen: Mapping[str, Any]) -> dict[str, Any]:
    """What is known of a tool call once `seen` (its fields in an update or a permission
    request) adds to `known`: a field that is missing or empty (`None`, "", [], {}) never
    replaces a known value, one with something in it does. Claude's adapter asks to leave plan
    mode with `content: []` and `rawInput: {}` for a call whose plan it already sent."""
    merged = dict(known)
    for key, value in seen.items():
        if value is not None and value != "" and value != [] and value != {}:
            merged[key] = value
    return merged


def call_fields(update: Any) -> dict[str, Any]:
    """The fields of a tool call or tool call update an approval policy looks at."""
    fields: dict[str, Any] = {"title": update.title, "kind": update.kind}
    fields.update(
        tool_fields(content=update.content, locations=update.locations, raw_input=update.raw_input)
    )
    return fields


async def apply_update(recorder: Recorder, update: Any) -> None:
    """Record one `session/update` notification of the conversation.

    The kinds that change the session's state (modes, config options, commands) are the
    session's to handle (`tunnel.agents.acp_settings`); they are not passed here.
    """
    if isinstance(update, schema.AgentMessageChunk):
        await recorder.delta("message", block_text(update.content), key=update.message_id)
    elif isinstance(update, schema.AgentThoughtChunk):
        await recorder.delta("reasoning", block_text(update.content), key=update.message_id)
    elif isinstance(update, schema.UserMessageChunk):
        # The prompt is already stored (with who sent it); an echo adds nothing.
        return
    elif isinstance(update, schema.ToolCallStart):
        status = update.status or "pending"
        fields = tool_fields(
            content=update.content or [],
            locations=update.locations,
            raw_input=update.raw_input,
        )
        content = fields.pop("content")
        await recorder.tool_call(
            tool_call_id=update.tool_call_id,
            title=update.title,
            kind=update.kind or "other",
            status=status,
            input=fields.pop("input", None),
            content=content,
            extra=fields,
        )
        if status in ("completed", "failed"):
            await recorder.tool_result(
                update.tool_call_id,
                ok=status == "completed",
                output=result_text(content, update.raw_output),
            )
    elif isinstance(update, schema.ToolCallProgress):
        changes: dict[str, Any] = {}
        for key, value in (
            ("title", update.title),
            ("kind", update.kind),
            ("status", update.status),
        ):
            if value is not None:
                changes[key] = value
        changes.update(
            tool_fields(
                content=update.content,
                locations=update.locations,
                raw_input=update.raw_input,
                raw_output=update.raw_output,
            )
        )
        await recorder.tool_call_update(update.tool_call_id, changes)
        if update.status in ("completed", "failed"):
            await recorder.tool_result(
                update.tool_call_id,
                ok=update.status == "completed",
                output=result_text(changes.get("content", []), update.raw_output),
            )
    elif isinstance(update, schema.AgentPlanUpdate):
        await recorder.plan(
            [
                {"content": e.content, "status": e.status, "priority": e.priority}
                for e in update.entries
            ]
        )
    else:
        kind = getattr(update, "session_update", None)
        if not isinstance(kind, str):
            logger.debug("ignoring an update of unknown shape: %r", type(update).__name__)
            return
        await recorder.usage({"update": kind, **_plain(update)})
