"""Turns items and events (their wire maps, docs/application.md) into terminal text.

Shared by the host console and `tunnel attach`, so both show a conversation the same way.
Agent output is untrusted: every string of an item or event is made printable (control and
invisible characters escaped, tunnel/terminal/sanitize.py) before anything is built from it, and
it is rendered as plain text, never as rich markup.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Any

from rich.text import Text

from tunnel.terminal.sanitize import printable

# Long tool outputs and diffs are cut so one item cannot flood a terminal.
MAX_SHOWN_CHARS = 4000

# A diff is computed over at most this many lines of each side (difflib is quadratic).
MAX_DIFF_LINES = 2000

# Deeper values are shown as "…": the log refuses items nested deeper than 64 levels, and a
# message from elsewhere must not exhaust the stack.
MAX_SHOWN_DEPTH = 64


def _printable_data(value: Any, depth: int = 0) -> Any:
    """`value` with every string in it, keys included, made printable: whatever is built from
    the result (labels, JSON, diffs, `str()` of a value) prints no control character."""
    if isinstance(value, str):
        return printable(value)
    if depth >= MAX_SHOWN_DEPTH:
        return "…"
    if isinstance(value, Mapping):
        return {_printable_key(k): _printable_data(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_printable_data(v, depth + 1) for v in value]
    if value is None or isinstance(value, int | float):
        return value
    # bytes, msgpack's ExtType, anything else: its repr, escaped like any text.
    return printable(repr(value))


def _printable_key(key: Any) -> Any:
    if isinstance(key, str):
        return printable(key)
    return key if key is None or isinstance(key, int | float) else printable(repr(key))


def _clip(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… ({len(text) - limit} more characters)"


def _str(data: Mapping[str, Any], key: str, default: str = "") -> str:
    value = data.get(key, default)
    return value if isinstance(value, str) else str(value)


def unified_diff(path: str, old: str, new: str) -> str:
    """`old` to `new` as a unified diff of `path` (a file the agent creates has no old text)."""
    before = old.splitlines()[:MAX_DIFF_LINES]
    after = new.splitlines()[:MAX_DIFF_LINES]
    lines = difflib.unified_diff(
        before, after, fromfile=path if old else "/dev/null", tofile=path, lineterm=""
    )
    return "\n".join(lines)


def _content_text(content: Any) -> str:
    if not isinstance(content, list):
        return ""
    parts: list[str] = []
    for entry in content:
        if not isinstance(entry, Mapping):
            continue
        if entry.get("type") == "diff":
            old = entry.get("old_text")
            new = entry.get("new_text")
            parts.append(
                unified_diff(
                    _str(entry, "path"),
                    old if isinstance(old, str) else "",
                    new if isinstance(new, str) else "",
                )
            )
        elif entry.get("type") == "terminal":
            parts.append(f"[terminal {_str(entry, 'terminal_id')}]")
        elif "text" in entry:
            parts.append(_str(entry, "text"))
    return "\n".join(parts)


def _json(value: Any) -> str:
    """A raw input or output, pretty-printed."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except ValueError:
        return str(value)


def _locations(locations: Any) -> str:
    if not isinstance(locations, list):
        return ""
    shown = []
    for location in locations:
        if isinstance(location, Mapping):
            line = location.get("line")
            path = _str(location, "path")
            shown.append(f"{path}:{line}" if isinstance(line, int) else path)
    return ", ".join(shown)


def _tool_call_details(head: Text, call: Mapping[str, Any]) -> None:
    """Kind, locations, raw input and content (diffs as unified diffs) of a tool call."""
    kind = _str(call, "kind")
    if kind:
        head.append(f"\n  kind: {kind}", style="dim")
    where = _locations(call.get("locations"))
    if where:
        head.append(f"\n  where: {where}", style="dim")
    if call.get("input") is not None:
        head.append("\n  input:\n")
        head.append(_clip(_json(call["input"])))
    body = _content_text(call.get("content"))
    if body:
        head.append("\n" + _clip(body))
    if call.get("truncated") is True:
        head.append("\n  (cut: too large to store whole)", style="dim")


def _permission_request(head: Text, data: Mapping[str, Any]) -> None:
    head.append("permission? ", style="bold magenta")
    head.append(_str(data, "title"))
    call = data.get("tool_call")
    if isinstance(call, Mapping):
        _tool_call_details(head, call)
    options = data.get("options")
    if isinstance(options, list):
        for number, option in enumerate(options, 1):
            if isinstance(option, Mapping):
                head.append(f"\n  {number}. {_str(option, 'name')}")
                head.append(
                    f" ({_str(option, 'kind')}, id {_str(option, 'option_id')})", style="dim"
                )
    head.append(
        f"\n  request {_str(data, 'request_id')}: /allow (allow once), /allow always,"
        " /allow N, /deny, /deny always",
        style="dim",
    )


def _choice_text(state: Any) -> str | None:
    if not isinstance(state, Mapping):
        return None
    current = _str(state, "current")
    for entry in state.get("available") or ():
        if isinstance(entry, Mapping) and entry.get("id") == current:
            return f"{current} ({_str(entry, 'name')})"
    return current


def _session_event(head: Text, who: str, data: Mapping[str, Any]) -> None:
    what = _str(data, "what")
    if what == "settings":
        change = data.get("change")
        if isinstance(change, Mapping) and change:
            ((key, value),) = list(change.items())[:1]
            if isinstance(value, Mapping):
                value = f"{_str(value, 'id')} = {value.get('value')}"
            head.append(f"{who} set the {key} to {value}", style="bold")
        else:
            head.append("agent settings", style="bold")
        for name in ("mode", "model"):
            shown = _choice_text(data.get(f"{name}s"))
            if shown is not None:
                head.append(f"  {name}: {shown}", style="dim")
        return
    if what == "commands":
        commands = data.get("commands")
        names = ["/" + _str(c, "name") for c in (commands or ()) if isinstance(c, Mapping)]
        head.append("the agent's commands: ", style="bold")
        head.append(_clip(", ".join(names) or "none"), style="dim")
        return
    if what == "unsupported_update":
        head.append(f"unsupported update: {_str(data, 'kind')}", style="dim")
        return
    head.append(what or "session event", style="bold")
    details = ", ".join(f"{k}={v}" for k, v in data.items() if k not in ("what", "turn"))
    if details:
        head.append(" " + _clip(details, 500), style="dim")


def _tool_terminal(head: Text, data: Mapping[str, Any]) -> None:
    command = data.get("command")
    line = " ".join(str(a) for a in command) if isinstance(command, list) else ""
    head.append("terminal ", style="bold yellow")
    head.append(_clip(line, 500))
    code, sig = data.get("exit_code"), data.get("signal")
    end = f"killed by {sig}" if sig else f"exit code {code}" if code is not None else "released"
    head.append(f" [{end}]", style="yellow")
    output = _str(data, "output")
    if output:
        cut = "… (earlier output not kept)\n" if data.get("truncated") is True else ""
        head.append("\n" + cut + _clip(output[-MAX_SHOWN_CHARS:]))


def render_item(item: Mapping[str, Any]) -> Text:
    """One item as styled text: who, what kind, and its content; safe to print."""
    item = _printable_data(item)
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
        if kind == "tool_call":
            _tool_call_details(head, data)
        else:
            body = _content_text(data.get("content"))
            if body:
                head.append("\n" + _clip(body))
    elif kind == "tool_result":
        ok = data.get("ok") is True
        head.append("result ", style="bold green" if ok else "bold red")
        head.append(_clip(_str(data, "output")))
    elif kind == "tool_terminal":
        _tool_terminal(head, data)
    elif kind == "permission_request":
        _permission_request(head, data)
    elif kind == "permission_decision":
        head.append("decision ", style="bold magenta")
        name = _str(data, "option_name") or _str(data, "option_id")
        option_kind = _str(data, "option_kind")
        head.append(f"{who} chose {name}" + (f" ({option_kind})" if option_kind else ""))
    elif kind == "plan":
        head.append("plan", style="bold blue")
        entries = data.get("entries")
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, Mapping):
                head.append(f"\n  [{_str(entry, 'status')}] {_str(entry, 'content')}")
    elif kind == "error":
        head.append("error: ", style="bold red")
        head.append(_clip(_str(data, "message")))
    elif kind == "session_event":
        _session_event(head, who, data)
    elif kind == "terminal":
        head = Text(_str(data, "text"))
    elif kind == "terminal_exit":
        head.append(f"terminal exited with code {data.get('code')}", style="bold")
    else:
        head.append(f"{kind} ", style="bold")
        head.append(_clip(str(dict(data))), style="dim")
    return head


def render_event(event: Mapping[str, Any]) -> Text | None:
    """An ephemeral event worth a line of its own, or None (deltas are shown by the item);
    safe to print."""
    event = _printable_data(event)
    kind = event.get("kind")
    data = event.get("data")
    data = data if isinstance(data, Mapping) else {}
    if kind == "status":
        queued = data.get("queued")
        suffix = f", {queued} queued" if isinstance(queued, int) and queued else ""
        return Text(f"[agent {_str(data, 'state')}{suffix}]", style="dim")
    if kind == "storage":
        # The host's log cannot be written (disk full, unwritable file): it pauses, then resumes.
        if data.get("state") == "ok":
            return Text("[the host's log writes again; the session goes on]", style="yellow")
        retry = data.get("retry_in")
        when = f"; retrying in {retry:g}s" if isinstance(retry, int | float) else ""
        return Text(
            f"[the host's log cannot be written ({_str(data, 'reason')}): paused{when}]",
            style="bold yellow",
        )
    return None
