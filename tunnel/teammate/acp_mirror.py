"""The shared session as an ACP agent's session, sans-I/O: log items and events in, ACP
`session/update` payloads, permission requests and turn endings out (docs/agents.md, "Editors
as teammates").

`Mirror.item(item)` and `Mirror.event(event)` take what the host sent (the wire maps of
docs/application.md) and return what to do, in order: `Update`s to send as `session/update`,
`PermissionOpened` and `PermissionClosed` for the editor's `session/request_permission`,
`QuestionOpened` and `QuestionClosed` for its `elicitation/create` (the agent's questions),
`PromptStored` and `SettingsStored` that confirm a request the editor made, and `TurnEnded` for
a prompt whose turn is over. `replay(items)` turns stored items into the updates a
`session/load` streams. Everything from the host is read field by field: a map of the wrong
shape is left out, never raised on. No I/O; `tunnel.teammate.acp_bridge` is its I/O.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "PROMPT_CAPABILITIES",
    "Mirror",
    "MirrorOutput",
    "PermissionClosed",
    "PermissionOpened",
    "PromptStored",
    "QuestionClosed",
    "QuestionOpened",
    "SettingsStored",
    "TurnEnded",
    "TurnStarted",
    "Update",
    "replay",
    "tool_call_key",
]

PROMPT_CAPABILITIES: Final = {"image": False, "audio": False, "embeddedContext": False}
"""What a prompt to the shared session may hold: text only (a teammate's `prompt` is text)."""

TOOL_KINDS: Final = frozenset(
    {"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode"}
)
TOOL_STATUSES: Final = frozenset({"pending", "in_progress", "completed", "failed"})
PLAN_PRIORITIES: Final = frozenset({"high", "medium", "low"})
PLAN_STATUSES: Final = frozenset({"pending", "in_progress", "completed"})
STOP_REASONS: Final = frozenset(
    {"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"}
)
OPTION_KINDS: Final = frozenset({"allow_once", "allow_always", "reject_once", "reject_always"})

MAX_OPEN_PERMISSIONS = 256
"""Open permission requests remembered; a host never has more waiting at once."""
MAX_OPEN_QUESTIONS = 64
"""Open questions remembered; a host has far fewer waiting at once."""
MAX_PENDING_TURNS = 1024
"""Prompts remembered whose turn has not ended: more than the host queues (its limit is lower)."""
MAX_STREAMS = 64
"""Streams whose streamed text is remembered, so their stored item does not repeat it."""
MAX_TOOL_CALLS = 4096
"""Tool calls remembered as shown, so that a permission request about one does not show it
again."""
MAX_STREAMED_TEXT = 1024 * 1024
"""Characters of one stream remembered until its item is stored."""
MAX_DEPTH = 64
"""Nesting kept of a tool call's raw input or output, as deep as the log's items may go."""


# -- outputs ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Update:
    """One `session/update` notification's `update`, as ACP JSON."""

    update: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptStored:
    """The host stored a prompt: it is the turn `seq` (a prompt's turn is its seq)."""

    seq: int
    by: str
    own: bool
    """The editor sent it (its text and this channel's name): not echoed back as an update."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnStarted:
    """The turn of the prompt at `turn` runs now."""

    turn: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEnded:
    """The turn of the prompt at `turn` is over, with this ACP stop reason."""

    turn: int
    stop_reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PermissionOpened:
    """The agent waits for a permission answer: ask the editor (`session/request_permission`)."""

    request_id: str
    tool_call: Mapping[str, Any]
    """ACP `ToolCallUpdate`: `toolCallId` and what the request says of the call."""
    options: Sequence[Mapping[str, Any]]
    """ACP `PermissionOption`s: `optionId`, `name`, `kind`."""
    answer: Sequence[str] | None = None
    """Who may answer, when the host's approval policy says (`"host"`, `"drivers"`, names);
    None: any driver."""

    def answerable_by(self, name: str | None, *, verified: bool) -> bool:
        """Whether a driver of this name may answer: the policy's `drivers`, or its own name
        when the host gave it (a personal link's)."""
        if self.answer is None:
            return True
        return "drivers" in self.answer or (verified and name is not None and name in self.answer)


@dataclass(frozen=True, slots=True, kw_only=True)
class PermissionClosed:
    """A permission request was decided (by anyone) or, with `approval`, approved once and still
    open for more approvals: who answered."""

    request_id: str
    by: str
    approval: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class QuestionOpened:
    """The agent asks the humans a question: ask the editor (`elicitation/create`, form mode)."""

    request_id: str
    message: str
    requested_schema: Mapping[str, Any]
    """The form as ACP's `ElicitationSchema`, rebuilt from the question's checked fields."""
    tool_call_id: str | None = None
    """The ACP `toolCallId` (`tool_call_key`) of the tool call the agent tied it to, if any."""


@dataclass(frozen=True, slots=True, kw_only=True)
class QuestionClosed:
    """A question was answered or cancelled (by anyone): who answered."""

    request_id: str
    by: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SettingsStored:
    """The agent's settings changed; `change` says what a person asked (`{"mode": id}`, ...)."""

    by: str
    change: Mapping[str, Any] | None


MirrorOutput = (
    Update
    | PromptStored
    | TurnStarted
    | TurnEnded
    | PermissionOpened
    | PermissionClosed
    | QuestionOpened
    | QuestionClosed
    | SettingsStored
)


# -- reading wire maps ------------------------------------------------------------------------


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def json_safe(value: Any, depth: int = 0) -> Any:
    """`value` as JSON can carry it: what JSON has no form for (bytes, a key that is not a
    string, NaN, nesting past `MAX_DEPTH`) becomes None. The log never holds such values, but a
    hostile host could send them, and the editor's connection must not fail on one."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth >= MAX_DEPTH:
        return None
    if isinstance(value, Mapping):
        return {k: json_safe(v, depth + 1) for k, v in value.items() if isinstance(k, str)}
    if isinstance(value, list | tuple):
        return [json_safe(v, depth + 1) for v in value]
    return None


def tool_call_key(turn: Any, tool_call_id: str) -> str:
    """The ACP `toolCallId` of a tool call: an agent may reuse an id in a later turn, so the
    turn is part of it."""
    return f"{turn}:{tool_call_id}" if type(turn) is int else tool_call_id


def _text_chunk(kind: str, text: str, meta: Mapping[str, Any] | None = None) -> Update:
    update: dict[str, Any] = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
    if meta:
        update["_meta"] = dict(meta)
    return Update(update=update)


def _content(entries: Any) -> list[dict[str, Any]]:
    """Tool call content as ACP's: text and diffs. A `terminal` entry names a terminal on the
    host, which the editor cannot read: it is left out (its output is in the items)."""
    result: list[dict[str, Any]] = []
    for entry in entries if isinstance(entries, list) else []:
        entry = _map(entry)
        kind = entry.get("type")
        if kind == "text" and isinstance(entry.get("text"), str):
            result.append({"type": "content", "content": {"type": "text", "text": entry["text"]}})
        elif kind == "diff" and isinstance(entry.get("path"), str):
            new_text = _text(entry.get("new_text"))
            if new_text is not None:
                result.append(
                    {
                        "type": "diff",
                        "path": entry["path"],
                        "oldText": _text(entry.get("old_text")),
                        "newText": new_text,
                    }
                )
    return result


def _locations(value: Any) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = []
    for entry in value if isinstance(value, list) else []:
        entry = _map(entry)
        if isinstance(entry.get("path"), str):
            location: dict[str, Any] = {"path": entry["path"]}
            line = _int(entry.get("line"))
            if line is not None and line >= 0:
                location["line"] = line
            result.append(location)
    return result


def _tool_fields(data: Mapping[str, Any], *, start: bool) -> dict[str, Any]:
    """The fields of a tool call (or an update of one) that ACP knows, from an item's data."""
    fields: dict[str, Any] = {}
    title = _text(data.get("title"))
    if title is not None or start:
        fields["title"] = title or "tool call"
    kind = data.get("kind")
    if kind in TOOL_KINDS:
        fields["kind"] = kind
    elif start or isinstance(kind, str):
        fields["kind"] = "other"
    if data.get("status") in TOOL_STATUSES:
        fields["status"] = data["status"]
    if "content" in data:
        fields["content"] = _content(data.get("content"))
    if "locations" in data:
        fields["locations"] = _locations(data.get("locations"))
    if "input" in data:
        fields["rawInput"] = json_safe(data.get("input"))
    if "output" in data:
        fields["rawOutput"] = json_safe(data.get("output"))
    return fields


def _plan(entries: Any) -> Update | None:
    if not isinstance(entries, list):
        return None
    result = []
    for entry in entries:
        entry = _map(entry)
        if isinstance(entry.get("content"), str):
            result.append(
                {
                    "content": entry["content"],
                    "priority": entry.get("priority")
                    if entry.get("priority") in PLAN_PRIORITIES
                    else "medium",
                    "status": entry.get("status")
                    if entry.get("status") in PLAN_STATUSES
                    else "pending",
                }
            )
    return Update(update={"sessionUpdate": "plan", "entries": result})


def _commands(commands: Any) -> Update | None:
    if not isinstance(commands, list):
        return None
    result = []
    for command in commands:
        command = _map(command)
        name = _text(command.get("name"))
        if not name:
            continue
        entry: dict[str, Any] = {
            "name": name,
            "description": _text(command.get("description")) or "",
        }
        hint = _text(command.get("hint"))
        if hint:
            entry["input"] = {"hint": hint}
        result.append(entry)
    return Update(
        update={"sessionUpdate": "available_commands_update", "availableCommands": result}
    )


def config_options(options: Any) -> list[dict[str, Any]] | None:
    """A `settings` event's `config_options` as ACP `SessionConfigOption`s; None if it has none."""
    if not isinstance(options, list):
        return None
    result: list[dict[str, Any]] = []
    for option in options:
        option = _map(option)
        option_id, name = _text(option.get("id")), _text(option.get("name"))
        if option_id is None:
            continue
        entry: dict[str, Any] = {"id": option_id, "name": name or option_id}
        if _text(option.get("description")):
            entry["description"] = option["description"]
        if _text(option.get("category")):
            entry["category"] = option["category"]
        if option.get("type") == "boolean" and isinstance(option.get("current_value"), bool):
            entry.update(type="boolean", currentValue=option["current_value"])
        elif isinstance(option.get("current_value"), str):
            values = []
            for value in _list(option.get("options")):
                value = _map(value)
                if isinstance(value.get("id"), str):
                    choice = {"value": value["id"], "name": _text(value.get("name")) or value["id"]}
                    if _text(value.get("description")):
                        choice["description"] = value["description"]
                    values.append(choice)
            entry.update(type="select", currentValue=option["current_value"], options=values)
        else:
            continue
        result.append(entry)
    return result


def _choices(state: Any, id_key: str) -> tuple[str, list[dict[str, Any]]] | None:
    """A `settings` event's `modes` or `models`: the current id and the choices, ACP-keyed."""
    state = _map(state)
    current = _text(state.get("current"))
    if current is None:
        return None
    available = []
    for choice in _list(state.get("available")):
        choice = _map(choice)
        if isinstance(choice.get("id"), str):
            entry = {id_key: choice["id"], "name": _text(choice.get("name")) or choice["id"]}
            if _text(choice.get("description")):
                entry["description"] = choice["description"]
            available.append(entry)
    return current, available


def _asked_tool_call(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """The tool call a `permission_request` asks about, as an ACP `ToolCallUpdate`."""
    request_id = _text(data.get("request_id"))
    if request_id is None:
        return None
    tool = _map(data.get("tool_call"))
    tool_call_id = _text(data.get("tool_call_id")) or _text(tool.get("tool_call_id")) or request_id
    turn = data.get("turn")
    tool_call = {"toolCallId": tool_call_key(turn, tool_call_id), **_tool_fields(tool, start=False)}
    if "title" not in tool_call and _text(data.get("title")):
        tool_call["title"] = data["title"]
    return tool_call


def decided_as_recorded(data: Mapping[str, Any]) -> bool:
    """Whether a `permission_request`'s data is of one the approval policy or a remembered
    answer decided as it was recorded: it never waits for anyone (its decision follows at
    once), whatever its status says."""
    return "policy" in data or "remembered" in data


def _permission(data: Mapping[str, Any]) -> PermissionOpened | None:
    """The request as one the editor is asked, if it waits for a person to answer."""
    request_id = _text(data.get("request_id"))
    tool_call = _asked_tool_call(data)
    if request_id is None or tool_call is None or decided_as_recorded(data):
        return None
    options = []
    for option in _list(data.get("options")):
        option = _map(option)
        option_id = _text(option.get("option_id"))
        if option_id is not None and option.get("kind") in OPTION_KINDS:
            name = _text(option.get("name")) or option_id
            options.append({"optionId": option_id, "name": name, "kind": option["kind"]})
    if not options:
        return None
    answer = _map(data.get("approval")).get("answer")
    return PermissionOpened(
        request_id=request_id,
        tool_call=tool_call,
        options=options,
        answer=[who for who in answer if isinstance(who, str)]
        if isinstance(answer, list)
        else None,
    )


def _question(data: Mapping[str, Any]) -> QuestionOpened | None:
    request_id = _text(data.get("request_id"))
    schema = requested_schema(data.get("fields"))
    if request_id is None or schema is None:
        return None
    tool_call_id = _text(data.get("tool_call_id"))
    return QuestionOpened(
        request_id=request_id,
        message=_text(data.get("message")) or "",
        requested_schema=schema,
        tool_call_id=None
        if tool_call_id is None
        else tool_call_key(data.get("turn"), tool_call_id),
    )


def requested_schema(fields: Any) -> dict[str, Any] | None:
    """ACP's form `requestedSchema` for a question's `fields` (docs/application.md,
    `elicitation_request`), the shape tunnel.agents.elicitation reads an agent's in; None when
    a field is of a kind this end does not know (the editor is then not asked)."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for field in _list(fields):
        field = _map(field)
        name, kind = _text(field.get("name")), field.get("kind")
        if name is None:
            return None
        spec: dict[str, Any] = {}
        for key in ("title", "description"):
            if _text(field.get(key)):
                spec[key] = field[key]
        low, high = _bound(field.get("min")), _bound(field.get("max"))
        if kind == "string":
            spec["type"] = "string"
            if _text(field.get("format")):
                spec["format"] = field["format"]
            spec |= _bounds("minLength", low, "maxLength", high)
        elif kind in ("number", "integer"):
            spec["type"] = kind
            spec |= _bounds("minimum", low, "maximum", high)
        elif kind == "boolean":
            spec["type"] = "boolean"
        elif kind in ("choice", "choices"):
            choices = []
            for choice in map(_map, _list(field.get("choices"))):
                value = _text(choice.get("value"))
                if value is not None:
                    choices.append({"const": value, "title": _text(choice.get("label")) or value})
            if not choices:
                return None
            if kind == "choice":
                spec |= {"type": "string", "oneOf": choices}
            else:
                spec |= {"type": "array", "items": {"anyOf": choices}}
                spec |= _bounds("minItems", low, "maxItems", high)
        else:
            return None
        default = field.get("default")
        strings = isinstance(default, list) and all(isinstance(v, str) for v in default)
        if isinstance(default, str | bool) or _bound(default) is not None or strings:
            spec["default"] = default
        properties[name] = spec
        if field.get("required") is True:
            required.append(name)
    return {"type": "object", "properties": properties, "required": required}


def _bound(value: Any) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return value


def _bounds(
    low_key: str, low: int | float | None, high_key: str, high: int | float | None
) -> dict[str, Any]:
    return {k: v for k, v in ((low_key, low), (high_key, high)) if v is not None}


def translate(
    item: Mapping[str, Any], first_seen: Callable[[str], bool] = lambda _key: False
) -> list[Update]:
    """The updates one stored item shows as, whoever made it; none for what ACP cannot show.

    `first_seen(tool_call_id)` says whether the editor has not been shown that tool call yet
    (and remembers it): a permission request about one it has not seen (an agent may ask
    before it announces the call) shows the call first.
    """
    data = _map(item.get("data"))
    kind = item.get("type")
    if kind == "permission_request":
        asked = _asked_tool_call(data)
        if asked is None or not first_seen(asked["toolCallId"]):
            return []
        start = {"sessionUpdate": "tool_call", "title": "tool call", "kind": "other", **asked}
        return [Update(update=start)]
    if kind == "message":
        text = _text(data.get("text"))
        if not text:
            return []
        if data.get("role") == "user":
            by = _text(item.get("created_by"))
            return [_text_chunk("user_message_chunk", text, {"tunnel": {"by": by}} if by else None)]
        return [_text_chunk("agent_message_chunk", text)]
    if kind == "reasoning":
        text = _text(data.get("text"))
        return [_text_chunk("agent_thought_chunk", text)] if text else []
    if kind in ("tool_call", "tool_call_update", "tool_result"):
        tool_call_id = _text(data.get("tool_call_id"))
        if tool_call_id is None:
            return []
        key = tool_call_key(data.get("turn"), tool_call_id)
        first_seen(key)
        if kind == "tool_call":
            fields = _tool_fields(data, start=True)
            return [Update(update={"sessionUpdate": "tool_call", "toolCallId": key, **fields})]
        if kind == "tool_call_update":
            fields = _tool_fields(data, start=False)
            return [
                Update(update={"sessionUpdate": "tool_call_update", "toolCallId": key, **fields})
            ]
        ok = data.get("ok")
        update: dict[str, Any] = {
            "sessionUpdate": "tool_call_update",
            "toolCallId": key,
            "status": "completed" if ok is not False else "failed",
        }
        return [Update(update=update)]
    if kind == "plan":
        plan = _plan(data.get("entries"))
        return [plan] if plan is not None else []
    if kind == "error":
        message = _text(data.get("message"))
        return [_text_chunk("agent_message_chunk", f"\n\n[error] {message}\n")] if message else []
    if kind == "session_event" and data.get("what") == "commands":
        commands = _commands(data.get("commands"))
        return [commands] if commands is not None else []
    return []


def replay(items: Iterable[Mapping[str, Any]]) -> list[Update]:
    """The updates a `session/load` streams for these stored items, in order."""
    seen: set[str] = set()

    def first_seen(key: str) -> bool:
        new = key not in seen
        seen.add(key)
        return new

    return [update for item in items for update in translate(item, first_seen)]


# -- the live session -------------------------------------------------------------------------


class Mirror:
    """The shared session as one ACP session sees it, kept from the items and events.

    Feed it every item (the snapshot's, its context's, the live tail's) with `item()`, every
    event with `event()`; call `prompt_sent()` before sending a prompt, so that the item which
    stores it is known for the editor's own. The state it keeps (settings, commands, plan, open
    permission requests, turns not yet ended, replies still streaming) is what
    `session_setup()`, `state_updates()`, `streams_in_progress()` and `open_permissions()` give
    a newly attached editor.
    """

    def __init__(self) -> None:
        self.me: str | None = None
        """This channel's name as the host shows it (`ready`): whose items are the editor's."""
        self.settings: Mapping[str, Any] = {}
        """The latest `settings` session event's data."""
        self.commands: Update | None = None
        self.plan: Update | None = None
        self._open: OrderedDict[str, PermissionOpened] = OrderedDict()
        self._questions: OrderedDict[str, QuestionOpened] = OrderedDict()
        self._sent: deque[str] = deque(maxlen=MAX_PENDING_TURNS)
        self._pending: OrderedDict[int, str | None] = OrderedDict()
        """Prompts whose turn has not ended, by seq: the stop reason heard so far, if any."""
        self._running: int | None = None
        self._streamed: OrderedDict[str, tuple[str, str]] = OrderedDict()
        """Streams not stored yet, by response id: their update kind and the text so far."""
        self._tools: OrderedDict[str, None] = OrderedDict()
        """The tool calls the editor has been shown, newest last."""

    @property
    def running(self) -> int | None:
        """The turn that runs now, as far as the host said."""
        return self._running

    # -- what the editor does ------------------------------------------------------------------

    def prompt_sent(self, text: str) -> None:
        """The editor is sending a prompt of this text: its stored item is the editor's own."""
        self._sent.append(text)

    def prompt_refused(self, text: str) -> None:
        """The host refused the prompt `prompt_sent` announced: no item will store it."""
        if text in self._sent:
            self._sent.remove(text)

    # -- what a newly attached editor gets -----------------------------------------------------

    def session_setup(self) -> dict[str, Any]:
        """The modes, models (ACP's unstable field) and config options of a `session/new` or
        `session/load` response, as the host last said them."""
        setup: dict[str, Any] = {}
        modes = _choices(self.settings.get("modes"), "id")
        if modes is not None:
            setup["modes"] = {"currentModeId": modes[0], "availableModes": modes[1]}
        models = _choices(self.settings.get("models"), "modelId")
        if models is not None:
            setup["models"] = {"currentModelId": models[0], "availableModels": models[1]}
        options = config_options(self.settings.get("config_options"))
        if options is not None:
            setup["configOptions"] = options
        return setup

    def state_updates(self) -> list[Update]:
        """The state only updates tell, as it stands: the agent's commands and the plan."""
        return [update for update in (self.commands, self.plan) if update is not None]

    def streams_in_progress(self) -> list[Update]:
        """What streamed so far of the replies not stored yet, one chunk each: a newly attached
        editor sees a reply whole, its start included, once the rest streams and is stored."""
        return [_text_chunk(kind, text) for kind, text in self._streamed.values()]

    def open_permissions(self) -> list[PermissionOpened]:
        """The permission requests the agent still waits on, oldest first."""
        return list(self._open.values())

    def open_questions(self) -> list[QuestionOpened]:
        """The questions the agent still waits on, oldest first."""
        return list(self._questions.values())

    def is_open(self, request_id: str) -> bool:
        """Whether the agent still waits on the permission request or question `request_id`."""
        return request_id in self._open or request_id in self._questions

    # -- what the host sends -------------------------------------------------------------------

    def context(self, items: Iterable[Mapping[str, Any]]) -> None:
        """Take a snapshot's `context` (or items replayed): their state, nothing to show."""
        for item in items:
            self._apply(item, live=False)

    def item(self, item: Mapping[str, Any], *, live: bool = True) -> list[MirrorOutput]:
        """Take one item; return what to do. `live` False for a snapshot's items: history,
        whose turns the status event after it says."""
        return self._apply(item, live=live)

    def event(self, event: Mapping[str, Any]) -> list[MirrorOutput]:
        """Take one live event; return what to do."""
        kind, data = event.get("kind"), _map(event.get("data"))
        if kind == "delta":
            return self._delta(data)
        if kind == "status":
            return self._status(data)
        if kind == "plan":
            plan = _plan(data.get("entries"))
            if plan is None:
                return []
            self.plan = plan
            return [plan]
        return []

    # -- internals -----------------------------------------------------------------------------

    def _apply(self, item: Mapping[str, Any], *, live: bool) -> list[MirrorOutput]:
        data = _map(item.get("data"))
        kind = item.get("type")
        outputs: list[MirrorOutput] = []
        turn = _int(data.get("turn"))
        if live and turn is not None:
            outputs += self._turn_seen(turn)
        if kind == "message" and data.get("role") == "user":
            return outputs + self._prompt(item, data, live=live)
        if kind in ("message", "reasoning"):
            return outputs + self._stored_stream(item)
        if kind == "permission_request":
            opened = _permission(data)
            if opened is not None and item.get("status") != "completed":
                self._open[opened.request_id] = opened
                while len(self._open) > MAX_OPEN_PERMISSIONS:
                    self._open.popitem(last=False)
            else:
                opened = None
            if not live:
                return outputs
            # The call asked about first, if the editor has not seen it, then the question.
            outputs += translate(item, self._first_seen)
            return outputs + ([opened] if opened is not None else [])
        if kind == "elicitation_request":
            asked = _question(data)
            if asked is not None and item.get("status") != "completed":
                self._questions[asked.request_id] = asked
                while len(self._questions) > MAX_OPEN_QUESTIONS:
                    self._questions.popitem(last=False)
                if live:
                    outputs.append(asked)
            return outputs + (translate(item, self._first_seen) if live else [])
        if kind == "elicitation_response":
            request_id = _text(data.get("request_id"))
            if request_id is not None:
                self._questions.pop(request_id, None)
                by = _text(item.get("created_by")) or ""
                outputs.append(QuestionClosed(request_id=request_id, by=by))
            return outputs + (translate(item, self._first_seen) if live else [])
        if kind in ("permission_decision", "permission_approval"):
            request_id = _text(data.get("request_id"))
            if request_id is not None:
                approval = kind == "permission_approval"
                if not approval:
                    self._open.pop(request_id, None)
                by = _text(item.get("created_by")) or ""
                outputs.append(PermissionClosed(request_id=request_id, by=by, approval=approval))
            return outputs
        if kind == "plan":
            plan = _plan(data.get("entries"))
            if plan is not None:
                self.plan = plan
        if kind == "session_event":
            outputs += self._session_event(item, data, live=live)
        return outputs + (translate(item, self._first_seen) if live else [])

    def _first_seen(self, key: str) -> bool:
        """Whether the editor has not been shown the tool call `key`; it has from now on."""
        new = key not in self._tools
        self._tools[key] = None
        self._tools.move_to_end(key)
        while len(self._tools) > MAX_TOOL_CALLS:
            self._tools.popitem(last=False)
        return new

    def _prompt(
        self, item: Mapping[str, Any], data: Mapping[str, Any], *, live: bool
    ) -> list[MirrorOutput]:
        seq, text, by = _int(item.get("seq")), _text(data.get("text")), item.get("created_by")
        if not live or seq is None or text is None:
            return []
        by = by if isinstance(by, str) else ""
        own = by == self.me and bool(self._sent) and self._sent[0] == text
        if own:
            self._sent.popleft()
        self._pending[seq] = None
        while len(self._pending) > MAX_PENDING_TURNS:
            self._pending.popitem(last=False)
        outputs: list[MirrorOutput] = [PromptStored(seq=seq, by=by, own=own)]
        return outputs if own else outputs + list(translate(item))

    def _delta(self, data: Mapping[str, Any]) -> list[MirrorOutput]:
        response_id, text = _text(data.get("response_id")), _text(data.get("text"))
        if response_id is None or not text:
            return []
        kind = (
            "agent_thought_chunk" if data.get("channel") == "reasoning" else "agent_message_chunk"
        )
        _, so_far = self._streamed.pop(response_id, (kind, ""))
        if len(so_far) + len(text) <= MAX_STREAMED_TEXT:
            # Past that (a host streaming without end), its stored item is shown whole.
            self._streamed[response_id] = (kind, so_far + text)
        while len(self._streamed) > MAX_STREAMS:
            self._streamed.popitem(last=False)
        return [_text_chunk(kind, text)]

    def _stored_stream(self, item: Mapping[str, Any]) -> list[MirrorOutput]:
        """A stored message or thought: only what its deltas did not show already."""
        updates: list[MirrorOutput] = list(translate(item))
        response_id = _text(item.get("response_id"))
        kind_and_text = self._streamed.pop(response_id, None) if response_id else None
        streamed = kind_and_text[1] if kind_and_text is not None else None
        text = _text(_map(item.get("data")).get("text"))
        if streamed is None or text is None or not updates:
            return updates
        if not text.startswith(streamed):
            return updates  # the stored text differs from what streamed: show it whole
        rest = text[len(streamed) :]
        if not rest:
            return []
        first = updates[0]
        assert isinstance(first, Update)  # translate() gives nothing else
        return [Update(update={**first.update, "content": {"type": "text", "text": rest}})]

    def _session_event(
        self, item: Mapping[str, Any], data: Mapping[str, Any], *, live: bool
    ) -> list[MirrorOutput]:
        what = data.get("what")
        if what == "settings":
            return self._settings(item, data, live=live)
        if what == "commands":
            self.commands = _commands(data.get("commands"))
            return []
        if not live:
            return []
        if what == "turn_ended":
            turn = _int(data.get("turn"))
            if turn is None or turn not in self._pending:
                return []
            reason = data.get("stop_reason")
            heard = self._pending.get(turn)
            if heard is None:
                heard = reason if reason in STOP_REASONS else "end_turn"
            del self._pending[turn]
            if self._running == turn:
                self._running = None
            return [TurnEnded(turn=turn, stop_reason=heard)]
        if what == "host_restarted":
            # A host stopped mid-turn: the turn it ran and the prompts it held never finish.
            stopped = [_int(data.get("interrupted_turn")), *_list(data.get("dropped_prompts"))]
            outputs: list[MirrorOutput] = []
            for turn in stopped:
                if type(turn) is int and turn in self._pending:
                    del self._pending[turn]
                    outputs.append(TurnEnded(turn=turn, stop_reason="cancelled"))
            if self._running is not None and self._running not in self._pending:
                self._running = None
            return outputs
        running = self._running
        if what == "cancelled" and running is not None and running in self._pending:
            # The running turn was cancelled: ACP's stop reason is then `cancelled`.
            self._pending[running] = "cancelled"
        return []

    def _settings(
        self, item: Mapping[str, Any], data: Mapping[str, Any], *, live: bool
    ) -> list[MirrorOutput]:
        before = self.session_setup()
        self.settings = data
        if not live:
            return []
        after = self.session_setup()
        outputs: list[MirrorOutput] = []
        mode = _map(after.get("modes")).get("currentModeId")
        if mode is not None and mode != _map(before.get("modes")).get("currentModeId"):
            outputs.append(
                Update(update={"sessionUpdate": "current_mode_update", "currentModeId": mode})
            )
        if "configOptions" in after and after["configOptions"] != before.get("configOptions"):
            outputs.append(
                Update(
                    update={
                        "sessionUpdate": "config_option_update",
                        "configOptions": after["configOptions"],
                    }
                )
            )
        change = data.get("change")
        outputs.append(
            SettingsStored(
                by=_text(item.get("created_by")) or "",
                change=change if isinstance(change, Mapping) else None,
            )
        )
        return outputs

    def _status(self, data: Mapping[str, Any]) -> list[MirrorOutput]:
        """Prompts run one at a time in seq order: a turn running at `turn` means every prompt
        before it has ended, and idle with none queued means every prompt has."""
        if data.get("state") == "running":
            turn = _int(data.get("turn"))
            return self._turn_seen(turn) if turn is not None else []
        if data.get("state") == "idle" and data.get("queued") == 0:
            self._running = None
            return self._end_before(None)
        return []

    def _turn_seen(self, turn: int) -> list[MirrorOutput]:
        """Something of the turn at `turn` arrived: it runs, and every earlier one ended."""
        if self._running is not None and turn <= self._running:
            return []
        self._running = turn
        outputs = self._end_before(turn)
        if turn in self._pending:
            outputs.append(TurnStarted(turn=turn))
        return outputs

    def _end_before(self, turn: int | None) -> list[MirrorOutput]:
        ended = [seq for seq in self._pending if turn is None or seq < turn]
        outputs: list[MirrorOutput] = []
        for seq in ended:
            reason = self._pending.pop(seq)
            outputs.append(TurnEnded(turn=seq, stop_reason=reason or "end_turn"))
        return outputs
