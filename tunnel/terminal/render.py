"""Turns items and events (their wire maps, docs/application.md) into terminal text.

Shared by the host console and `tunnel attach`, so both show a conversation the same way.
Agent output is untrusted: it is rendered as plain text, never as rich markup.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.text import Text

# Long tool outputs and diffs are cut so one item cannot flood a terminal.
MAX_SHOWN_CHARS = 4000


def _clip(text: str) -> str:
    if len(text) <= MAX_SHOWN_CHARS:
        return text
    return text[:MAX_SHOWN_CHARS] + f"\n… ({len(text) - MAX_SHOWN_CHARS} more characters)"


def _str(data: Mapping[str, Any], key: str, default: str = "") -> str:
    value = data.get(key, default)
    return value if isinstance(value, str) else str(value)


def _content_text(content: Any) -> str:
    if not isinstance(content, list):
        return ""
    parts: list[str] = []
    for entry in content:
        if not isinstance(entry, Mapping):
            continue
        if entry.get("type") == "diff":
            parts.append(f"diff {_str(entry, 'path')}")
            old = entry.get("old_text") or ""
            new = entry.get("new_text") or ""
            parts.extend(f"- {line}" for line in str(old).splitlines())
            parts.extend(f"+ {line}" for line in str(new).splitlines())
        elif "text" in entry:
            parts.append(_str(entry, "text"))
    return "\n".join(parts)


def render_item(item: Mapping[str, Any]) -> Text:
    """One item as styled text: who, what kind, and its content."""
    kind = _str(item, "type", "?")
    data = item.get("data")
    data = data if isinstance(data, Mapping) else {}
    who = _str(item, "created_by", "?")
    seq = item.get("seq")
    head = Text(f"#{seq} ", style="dim")

    if kind == "message":
        role = _str(data, "role")
        label = f"{who}: " if role == "user" else "agent: "
        head.append(label, style="bold cyan" if role == "user" else "bold green")
        head.append(_clip(_str(data, "text")))
    elif kind == "reasoning":
        head.append("thinking: ", style="italic dim")
        head.append(_clip(_str(data, "text")), style="italic dim")
    elif kind in ("tool_call", "tool_call_update"):
        status = _str(data, "status")
        title = _str(data, "title") or _str(data, "tool_call_id")
        head.append("tool ", style="bold yellow")
        head.append(title)
        if status:
            head.append(f" [{status}]", style="yellow")
        body = _content_text(data.get("content"))
        if body:
            head.append("\n" + _clip(body))
    elif kind == "tool_result":
        ok = data.get("ok") is True
        head.append("result ", style="bold green" if ok else "bold red")
        head.append(_clip(_str(data, "output")))
    elif kind == "permission_request":
        head.append("permission? ", style="bold magenta")
        head.append(_str(data, "title"))
        options = data.get("options")
        if isinstance(options, list):
            names = [
                f"{_str(option, 'option_id')} ({_str(option, 'name')})"
                for option in options
                if isinstance(option, Mapping)
            ]
            head.append(f"  [request {_str(data, 'request_id')}: {', '.join(names)}]", style="dim")
    elif kind == "permission_decision":
        head.append("decision ", style="bold magenta")
        head.append(f"{who} chose {_str(data, 'option_name') or _str(data, 'option_id')}")
    elif kind == "plan":
        head.append("plan", style="bold blue")
        entries = data.get("entries")
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, Mapping):
                head.append(f"\n  [{_str(entry, 'status')}] {_str(entry, 'content')}")
    elif kind == "error":
        head.append("error: ", style="bold red")
        head.append(_clip(_str(data, "message")))
    elif kind == "terminal":
        head = Text(_str(data, "text"))
    elif kind == "terminal_exit":
        head.append(f"terminal exited with code {data.get('code')}", style="bold")
    else:
        head.append(f"{kind} ", style="bold")
        head.append(_clip(str(dict(data))), style="dim")
    return head


def render_event(event: Mapping[str, Any]) -> Text | None:
    """An ephemeral event worth a line of its own, or None (deltas are shown by the item)."""
    kind = event.get("kind")
    data = event.get("data")
    data = data if isinstance(data, Mapping) else {}
    if kind == "status":
        queued = data.get("queued")
        suffix = f", {queued} queued" if isinstance(queued, int) and queued else ""
        return Text(f"[agent {_str(data, 'state')}{suffix}]", style="dim")
    return None
