"""Turns items and events (their wire maps, docs/application.md) into terminal text.

Shared by the host console and `tunnel attach`, so both show a conversation the same way: in
words (a tool call is one line with its title, kind and status; a session event is a sentence),
never as raw maps or internal ids. Agent output is untrusted: every string of an item or event is
made printable (control and invisible characters escaped, tunnel/terminal/sanitize.py) before
anything is built from it, and it is rendered as text, never as rich markup. An agent's reply can
also be rendered as markdown (`markdown()`): the markdown parser decodes entities, so what it
renders is made printable a second time.
"""

from __future__ import annotations

import difflib
import json
import re
import textwrap
from collections.abc import Iterable, Mapping
from typing import Any

from markdown_it import MarkdownIt
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.markdown import Markdown
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from tunnel.terminal.questions import render_question, render_response
from tunnel.terminal.sanitize import printable

# Long tool outputs and diffs are cut so one item cannot flood a terminal.
MAX_SHOWN_CHARS = 4000

# A diff is computed over at most this many lines of each side (difflib is quadratic).
MAX_DIFF_LINES = 2000

# Deeper values are shown as "…": the log refuses items nested deeper than 64 levels, and a
# message from elsewhere must not exhaust the stack.
MAX_SHOWN_DEPTH = 64

# A tool call's input on its one line: enough to tell one call from another.
MAX_INPUT_SHOWN = 160

FINAL_TOOL_STATUSES = frozenset({"completed", "failed"})
"""A tool call in one of these is over: its line no longer changes."""

_STOP_REASONS = {
    "cancelled": "the turn was cancelled",
    "max_tokens": "the agent reached its token limit",
    "max_turn_requests": "the agent reached its limit of requests in one turn",
    "refusal": "the agent refused to go on",
}


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


def _words(value: Any, depth: int = 0) -> str:
    """A value as words, for details nobody gave a sentence to: no braces, no quotes."""
    if isinstance(value, Mapping):
        if depth >= 3:
            return "…"
        return ", ".join(f"{k} {_words(v, depth + 1)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        if depth >= 3:
            return "…"
        return ", ".join(_words(v, depth + 1) for v in value)
    if value is None:
        return "none"
    if value is True or value is False:
        return "yes" if value else "no"
    return str(value)


def unified_diff(path: str, old: str, new: str) -> str:
    """`old` to `new` as a unified diff of `path` (a file the agent creates has no old text)."""
    before = old.splitlines()[:MAX_DIFF_LINES]
    after = new.splitlines()[:MAX_DIFF_LINES]
    lines = difflib.unified_diff(
        before, after, fromfile=path if old else "/dev/null", tofile=path, lineterm=""
    )
    return "\n".join(lines)


def _diff_style(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "bold"
    if line.startswith("@@"):
        return "cyan"
    if line.startswith("+"):
        return "green"
    if line.startswith("-"):
        return "red"
    return ""


def _append_diff(text: Text, diff: str) -> None:
    """A unified diff, its added lines green and removed lines red."""
    for number, line in enumerate(_clip(diff).split("\n")):
        if number:
            text.append("\n")
        text.append(line, style=_diff_style(line))


def _append_content(text: Text, content: Any) -> None:
    """A tool call's content entries, each on lines of its own: text, diffs, terminals."""
    if not isinstance(content, list):
        return
    for entry in content:
        if not isinstance(entry, Mapping):
            continue
        if entry.get("type") == "diff":
            old = entry.get("old_text")
            new = entry.get("new_text")
            text.append("\n")
            _append_diff(
                text,
                unified_diff(
                    _str(entry, "path"),
                    old if isinstance(old, str) else "",
                    new if isinstance(new, str) else "",
                ),
            )
        elif entry.get("type") == "terminal":
            # The output itself follows as a `tool_terminal` item.
            text.append("\n  (runs a command; its output follows)", style="dim")
        elif "text" in entry:
            text.append("\n" + _clip(unfenced(_str(entry, "text"))))


_FENCED = re.compile(r"(`{3,})[^`\n]*\n(?:(.*?)\n)?\1[ \t]*\n?", re.DOTALL)


def unfenced(text: str) -> str:
    """The code inside `text` when `text` is one fenced code block whole (Claude's adapter sends
    a Read or Bash result so, ```` ```console ```` and all); any other text as it is. The page
    does the same (`unfenced` in tools.js)."""
    match = _FENCED.fullmatch(text)
    if match is None:
        return text
    code = match[2] or ""
    # A closing fence inside means two blocks and text between them: not one block.
    if re.search(rf"^`{{{len(match[1])},}}[ \t]*$", code, re.MULTILINE):
        return text
    return code


def _json(value: Any) -> str:
    """A raw input or output, pretty-printed."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except ValueError:
        return str(value)


def _compact_json(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str, separators=(", ", ": "))
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
    """Kind, locations, raw input and content (diffs as unified diffs) of a tool call, as a
    permission request shows them: in full, since someone decides on them."""
    kind = _str(call, "kind")
    if kind:
        head.append(f"\n  kind: {kind}", style="dim")
    where = _locations(call.get("locations"))
    if where:
        head.append(f"\n  where: {where}", style="dim")
    if call.get("input") is not None:
        head.append("\n  input:\n")
        head.append(textwrap.indent(_clip(_json(call["input"])), "    "))
    _append_content(head, call.get("content"))
    if call.get("truncated") is True:
        head.append("\n  (cut: too large to store whole)", style="dim")


def _status_style(status: str) -> str:
    if status == "completed":
        return "green"
    if status == "failed":
        return "bold red"
    return "yellow"


def tool_line(call: Mapping[str, Any]) -> Text:
    """A tool call as one line: `tool TITLE · KIND · STATUS · WHERE · INPUT`; safe to print.

    `call` is the tool call as known so far: the `tool_call` item's data with every later
    update's fields over it.
    """
    call = _printable_data(call)
    line = Text("tool ", style="bold yellow")
    # An update of a call this client never saw has no title: its id would say nothing.
    line.append(_str(call, "title") or "a tool call")
    kind = _str(call, "kind")
    if kind:
        line.append(f" · {kind}", style="dim")
    status = _str(call, "status")
    if status:
        line.append(" · ")
        line.append(status, style=_status_style(status))
    where = _locations(call.get("locations"))
    if where:
        line.append(f" · {where}", style="dim")
    if call.get("input") is not None:
        line.append(f" · {_input_summary(call['input'])}", style="dim")
    return line


def _short(text: str, limit: int) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "…"


def _input_summary(value: Any) -> str:
    """A tool call's input on one line: each field cut short, so every field shows."""
    if isinstance(value, Mapping) and value:
        share = max(MAX_INPUT_SHOWN // len(value), 24)
        fields = [
            f"{_short(str(k), share // 3)}={_short(_compact_json(v), share)}"
            for k, v in value.items()
        ]
        return _short(" ".join(fields), 2 * MAX_INPUT_SHOWN)
    return _short(_compact_json(value), MAX_INPUT_SHOWN)


def tool_content(data: Mapping[str, Any]) -> Text | None:
    """What a tool call item carries below its line (text, diffs in colour, a cut); None when
    it carries nothing."""
    data = _printable_data(data)
    text = Text()
    _append_content(text, data.get("content"))
    if data.get("truncated") is True:
        text.append("\n  (cut: too large to store whole)", style="dim")
    if not text.plain:
        return None
    # Each piece starts with a line break of its own; the first is not needed.
    return text[1:]


def _permission_request(head: Text, data: Mapping[str, Any]) -> None:
    head.append("permission? ", style="bold magenta")
    head.append(_str(data, "title"))
    call = data.get("tool_call")
    if isinstance(call, Mapping):
        _tool_call_details(head, call)
    approval = data.get("approval")
    if isinstance(approval, Mapping):
        head.append("\n  " + approval_needed(approval), style="bold yellow")
        rule = approval.get("rule")
        if isinstance(rule, Mapping):
            head.append(f"\n  by rule {_str(rule, 'index')}: {_str(rule, 'rule')}", style="dim")
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


def approval_needed(approval: Mapping[str, Any], approved_by: Any = None) -> str:
    """What an asked request needs under the host's approval policy, in words: "needs 2
    approvals (from alice or bob): alice approved"."""
    needed = approval.get("approvals")
    needed = needed if isinstance(needed, int) and not isinstance(needed, bool) else 1
    who = approval.get("answer")
    names = [str(n) for n in who] if isinstance(who, list) else []
    text = f"needs {needed} approval{'s' if needed != 1 else ''}"
    if names and names != ["host", "drivers"]:
        text += f" (from {' or '.join(names)})"
    approved = approved_by if approved_by is not None else approval.get("approved_by")
    if isinstance(approved, list) and approved:
        text += f": {', '.join(str(n) for n in approved)} approved"
    return text


def _decided_by(head: Text, data: Mapping[str, Any]) -> None:
    """Why a decision was made, after what was chosen: the policy's rule, who approved, or the
    remembered answer it repeats."""
    policy = data.get("policy")
    if isinstance(policy, Mapping):
        where = _str(policy, "source")
        line = policy.get("line")
        if isinstance(line, int) and not isinstance(line, bool):
            where += f":{line}"
        rule = "the default" if policy.get("default") else f"rule {_str(policy, 'index')}"
        head.append(f"\n  by the policy, {rule} of {where}: {_str(policy, 'rule')}", style="dim")
    remembered = data.get("remembered")
    if isinstance(remembered, Mapping):
        head.append(f"\n  remembered for the {_str(remembered, 'scope')}", style="dim")
    approved = data.get("approved_by")
    if isinstance(approved, list) and len(approved) > 1:
        head.append(f"\n  approved by {', '.join(str(n) for n in approved)}", style="dim")
    if _str(data, "remember"):
        head.append(f"\n  remembered for the {_str(data, 'remember')}", style="dim")


def _choice_text(state: Any) -> str | None:
    if not isinstance(state, Mapping):
        return None
    current = _str(state, "current")
    for entry in state.get("available") or ():
        if isinstance(entry, Mapping) and entry.get("id") == current:
            return f"{current} ({_str(entry, 'name')})"
    return current


def _count(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if isinstance(value, list):
        return len(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def usage_text(data: Mapping[str, Any]) -> str:
    """A `usage` session event in words: "context: 53k of 200k tokens used (26%), 147k left,
    cost 0.42 USD"."""

    def count(n: int) -> str:
        return f"{n // 1000}k" if n >= 10_000 else str(n)

    used, size = data.get("used"), data.get("size")
    if type(used) is not int or used < 0:
        return "context: unknown"
    text = f"context: {count(used)} tokens used"
    if type(size) is int and size > 0:
        left = count(max(0, size - used))
        text = f"context: {count(used)} of {count(size)} tokens used "
        text += f"({100 * used // size}%), {left} left"
    cost = data.get("cost")
    amount = cost.get("amount") if isinstance(cost, Mapping) else None
    if isinstance(amount, int | float) and not isinstance(amount, bool):
        assert isinstance(cost, Mapping)
        text += f", cost {amount:.2f} {_str(cost, 'currency')}".rstrip()
    return text


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
        approval = data.get("approval")
        if isinstance(approval, Mapping) and isinstance(approval.get("text"), str):
            # Whether the agent asks before edits and commands: said each time, plainly.
            head.append(f"  the agent {_clip(approval['text'], 200)}", style="bold")
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
    if what == "usage":
        head.append(usage_text(data), style="dim")
        return
    if what == "title":
        head.append(f"the session is titled {_clip(_str(data, 'title'), 200)}", style="dim")
        return
    sentence = _sentence(what, who, data)
    if sentence is not None:
        head.append(sentence, style="dim")
        return
    # A kind this client does not know: its name in words, its details without braces.
    head.append(what.replace("_", " ") or "session event", style="bold")
    details = _words({k: v for k, v in data.items() if k not in ("what", "turn")})
    if details:
        head.append(": " + _clip(details, 500), style="dim")


def _sentence(what: str, who: str, data: Mapping[str, Any]) -> str | None:
    """The session events of docs/application.md as sentences; None for any other."""
    if what == "cancelled":
        return f"{who} cancelled the turn"
    if what == "context_attached":
        files = [f for f in data.get("files") or () if isinstance(f, Mapping)]
        named = [
            f"{_str(f, 'path')} ({'its text' if f.get('embedded') is True else 'a link'})"
            for f in files
        ]
        return "with the prompt: " + _clip(", ".join(named), 500)
    if what == "agent_started":
        name = " ".join(x for x in (_str(data, "agent"), _str(data, "version")) if x)
        said = f"the agent started ({name})" if name else "the agent started"
        if data.get("resumed") is True:
            said += "; it resumed its earlier session"
        if data.get("load_failed"):
            said += f"; it could not resume its earlier session: {_str(data, 'load_failed')}"
        if data.get("forked") == "session_fork":
            said += "; it continues from the fork in its own fork of the agent's session"
        elif data.get("forked") == "transcript":
            said += "; a new session, given the conversation up to the fork with its first prompt"
        return said
    if what == "auth_required":
        methods = [m for m in data.get("methods") or () if isinstance(m, Mapping)]
        listed = ", ".join(f"{_str(m, 'id')} ({_str(m, 'name')})" for m in methods) or "none"
        reason = _str(data, "reason")
        return f"the agent needs a login ({reason}); its methods: {_clip(listed, 500)}"
    if what == "authenticated":
        return f"{who} logged the agent in ({_str(data, 'method_id')})"
    if what == "auth_failed":
        return (
            f"{who}'s login ({_str(data, 'method_id')}) failed: {_clip(_str(data, 'reason'), 500)}"
        )
    if what == "conversation_started":
        agent = _str(data, "agent")
        resume = _str(data, "resume")
        return (
            f"{who} started this conversation"
            + (f" with {_clip(agent, 64)}" if agent else "")
            + (f", resuming the agent's session {_clip(resume, 64)}" if resume else "")
        )
    if what == "conversation_closed":
        return f"{who} closed this conversation: its agent stopped, its log stays"
    if what == "session_fork":
        upto = data.get("upto")
        at = f" at item {upto}" if type(upto) is int else ""
        if "from" in data:
            return f"{who} forked this conversation from {_clip(_str(data, 'from'), 64)}{at}"
        return f"{who} forked this conversation{at} into {_clip(_str(data, 'to'), 64)}"
    if what == "agent_exited":
        code = data.get("code")
        return f"the agent exited with code {code}" if code is not None else "the agent exited"
    if what == "turn_ended":
        reason = _str(data, "stop_reason")
        if not reason:
            return "the turn ended with nothing to show"
        return _STOP_REASONS.get(reason, f"the turn ended: {reason.replace('_', ' ')}")
    if what == "fs_refused":
        return (
            f"refused the agent's {_str(data, 'op')} of {_str(data, 'path')}: outside the workspace"
        )
    if what == "terminal_refused":
        command = data.get("command")
        line = " ".join(str(a) for a in command) if isinstance(command, list) else str(command)
        return f"refused to run {line} in {_str(data, 'cwd')}: outside the workspace"
    if what == "log_unwritable":
        seconds = data.get("seconds")
        lasted = f" for {seconds:.0f} s" if isinstance(seconds, int | float) else ""
        said = f"the host's log could not be written{lasted} ({_str(data, 'reason')})"
        said += f": {_count(data, 'held')} items held, {_count(data, 'dropped')} dropped"
        if data.get("turn_cancelled") is True:
            said += "; the turn was cancelled"
        return said
    if what == "host_restarted":
        forked = data.get("reason") == "left open where the conversation was forked"
        said = (
            "what the fork copied open is closed here, its turn goes on in the source"
            if forked
            else "the host restarted after it stopped mid-turn"
        )
        closed = [
            f"{_count(data, 'dropped_prompts')} prompts not run",
            f"{_count(data, 'closed_permissions')} permission requests closed",
            f"{_count(data, 'closed_tool_calls')} tool calls closed",
        ]
        said += ": " + ", ".join(closed)
        if data.get("partial_text") is True:
            said += "; the last reply was cut short"
        return said
    return None


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
    head = Text()

    if kind == "message":
        role = _str(data, "role")
        label = f"{who}: " if role == "user" else "agent: "
        head.append(label, style="bold cyan" if role == "user" else "bold green")
        head.append(_clip(_str(data, "text")))
    elif kind == "reasoning":
        head.append("thinking: ", style="italic dim")
        head.append(_clip(_str(data, "text")), style="italic dim")
    elif kind in ("tool_call", "tool_call_update"):
        head = tool_line(data)
        content = tool_content(data)
        if content is not None:
            head.append("\n")
            head.append(content)
    elif kind == "tool_result":
        ok = data.get("ok") is True
        output = unfenced(_str(data, "output"))
        if output.strip():
            head.append("result ", style="bold green" if ok else "bold red")
            head.append(_clip(output))
        else:
            head.append("result", style="bold green" if ok else "bold red")
            head.append(": none" if ok else ": failed, no output", style="dim")
    elif kind == "tool_terminal":
        _tool_terminal(head, data)
    elif kind == "permission_request":
        _permission_request(head, data)
    elif kind == "permission_decision":
        head.append("decision ", style="bold magenta")
        name = _str(data, "option_name") or _str(data, "option_id")
        if data.get("outcome") == "cancelled" or not name:
            reason = _str(data, "reason")
            head.append("the request was closed" + (f": {reason}" if reason else ""))
        else:
            option_kind = _str(data, "option_kind")
            chooser = "the policy" if who == "policy" and "policy" in data else who
            head.append(f"{chooser} chose {name}" + (f" ({option_kind})" if option_kind else ""))
            _decided_by(head, data)
    elif kind == "elicitation_request":
        render_question(head, data)
    elif kind == "elicitation_response":
        render_response(head, who, data)
    elif kind == "permission_approval":
        head.append("approval ", style="bold magenta")
        needed = data.get("needed")
        more = needed if isinstance(needed, int) and not isinstance(needed, bool) else 0
        approved = data.get("approved_by")
        approved = approved if isinstance(approved, list) else [who]
        head.append(approval_needed({"approvals": len(approved) + more}, approved))
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
        head.append(f"the program exited with code {data.get('code')}", style="bold")
    else:
        # A kind this client does not know (the type set is open): in words, not as a map.
        head.append(f"{kind.replace('_', ' ')}", style="bold")
        details = _words(dict(data))
        if details:
            head.append(": " + _clip(details, 500), style="dim")
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


# -- markdown --------------------------------------------------------------------------------


class _Printable:
    """A renderable whose every printed segment is made printable, and carries no hyperlink.

    The markdown parser turns entities (`&#x1b;`, `&#x202e;`) into the characters they name,
    after `printable()` saw the text: each segment it renders is escaped again. Control
    segments (cursor moves) of the inner renderable are dropped.
    """

    def __init__(self, inner: RenderableType) -> None:
        self._inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for segment in console.render(self._inner, options):
            if segment.control:
                continue
            style = segment.style
            if style is not None and style.link:
                style = style.update_link(None)
            yield Segment(printable(segment.text), style)


class _Markdown(Markdown):
    """Rich's Markdown with HTML off (a tag is text, not dropped) and no hyperlinks (a link
    shows its target, so its text cannot hide where it goes)."""

    def __init__(self, markup: str) -> None:
        super().__init__("", hyperlinks=False)
        self.markup = markup
        parser = MarkdownIt("commonmark", {"html": False}).enable("strikethrough").enable("table")
        self.parsed = parser.parse(markup)


def markdown(text: str) -> RenderableType:
    """Untrusted markdown (an agent's reply) rendered for a terminal; safe to print."""
    return _Printable(_Markdown(printable(_clip(text))))


def labelled(label: Text, body: RenderableType) -> RenderableType:
    """`body` beside `label`, its lines indented under the first (a reply under `agent`)."""
    grid = Table.grid(padding=(0, 1, 0, 0))
    grid.add_column(no_wrap=True)
    grid.add_column(ratio=1)
    grid.add_row(label, body)
    return grid


def reply(item: Mapping[str, Any], *, continued: bool = False) -> RenderableType:
    """An agent's `message` item with its text as markdown; other items as `render_item`."""
    data = item.get("data")
    if (
        item.get("type") != "message"
        or not isinstance(data, Mapping)
        or data.get("role") == "user"
        or not isinstance(data.get("text"), str)
    ):
        return render_item(item)
    label = Text("   " if continued else "agent", style="bold green")
    return labelled(label, markdown(data["text"]))


def renderables(items: Iterable[Mapping[str, Any]]) -> list[RenderableType]:
    """`render_item` of each item, in order."""
    return [render_item(item) for item in items]
