"""Questions an ACP agent asks the humans (`elicitation/create`, form mode): the requested schema
checked and reduced to flat fields, each answer checked against them, and the open questions of
one session, answered like permission requests (the first driver's answer wins).

A question is registered, then recorded as an `elicitation_request` item (status
`action_required`) whose `fields` are what `form_fields` made of the agent's schema; its end is
an `elicitation_response` item whose `created_by` is who answered, with the `action` (`accept`,
`decline` or `cancel`) and, for `accept`, the checked `content`. A question that ends without an
answer (turn cancelled, agent gone, the agent's own `$/cancel_request`) gets a response with
`action: "cancel"`. docs/application.md, "Items", has both shapes.
"""

from __future__ import annotations

import logging
import math
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import anyio

from tunnel.app.requests import (
    MAX_ELICITATION_CHOICES,
    MAX_ELICITATION_FIELDS,
    MAX_ELICITATION_NAME_LENGTH,
    MAX_ELICITATION_TEXT_LENGTH,
)
from tunnel.log import Item, StoreError

from .errors import SessionError
from .recorder import Recorder, new_id

logger = logging.getLogger("tunnel.agents.elicitation")

Action = Literal["accept", "decline", "cancel"]
ACTIONS: tuple[Action, ...] = ("accept", "decline", "cancel")

MAX_OPEN_QUESTIONS = 8
"""Open questions per session; an agent asking more at once gets the extra ones cancelled."""

MAX_LABEL_CHARS = 1024
"""A title, description or choice label longer than this is cut (the message: 4 times as long);
a form with a longer choice value is refused. So a question's item stays well under a snapshot
page, whatever the agent sends."""

MAX_REMEMBERED = 1024
"""Closed question ids remembered to answer `already_answered` rather than `unknown_request`."""

RECORD_TIMEOUT = 5.0
"""How long closing a question may spend recording its response while being cancelled."""

FORMATS = frozenset({"email", "uri", "date", "date-time"})
"""The string formats of ACP's (MCP's) form schema; a string of another format is refused."""

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


class BadForm(ValueError):
    """The agent's requested schema is not a flat form of the primitive kinds ACP allows."""


@dataclass(slots=True, kw_only=True)
class PendingQuestion:
    """An open question: `ElicitationBroker.wait()` it for the answer."""

    request_id: str
    fields: list[dict[str, Any]]
    data: dict[str, Any]
    item: Item | None = None
    answered: anyio.Event = field(default_factory=anyio.Event)
    action: Action | None = None
    content: dict[str, Any] | None = None


def form_fields(requested: Any) -> list[dict[str, Any]]:
    """The fields of a form-mode `requestedSchema`, in the agent's order; `BadForm` for anything
    but a flat object of strings, numbers, integers, booleans and (multi-)choices.

    Each field: `name`, `kind` (`string`, `number`, `integer`, `boolean`, `choice` or
    `choices`), `title`, `description`, `required`, `default` (dropped when it does not fit),
    `choices` (`value` and `label` each), `min` and `max` (a number's bounds, a string's length,
    how many choices), `format` (a string's: email, uri, date, date-time)."""
    if not isinstance(requested, Mapping) or requested.get("type", "object") != "object":
        raise BadForm("the form is not an object")
    properties = requested.get("properties") or {}
    if not isinstance(properties, Mapping) or len(properties) > MAX_ELICITATION_FIELDS:
        raise BadForm(f"the form has more than {MAX_ELICITATION_FIELDS} fields")
    required = requested.get("required") or []
    if not isinstance(required, list) or not all(
        isinstance(name, str) and name in properties for name in required
    ):
        raise BadForm("the form requires a field it does not have")
    fields = []
    for name, spec in properties.items():
        if not isinstance(name, str) or not 1 <= len(name) <= MAX_ELICITATION_NAME_LENGTH:
            raise BadForm(f"a field name must be 1 to {MAX_ELICITATION_NAME_LENGTH} characters")
        if not isinstance(spec, Mapping):
            raise BadForm(f"field {name!r} is not a schema")
        made = {"name": name, **_field(name, spec), "required": name in required}
        if "default" in spec and _fits(made, spec["default"]):
            made["default"] = spec["default"]
        fields.append(made)
    return fields


def check_content(fields: list[dict[str, Any]], content: Any) -> dict[str, Any]:
    """The answer to a form, checked against its fields; `SessionError("bad_request")` for a
    field the form does not have, a required one missing, or a value that does not fit."""
    if not isinstance(content, Mapping):
        raise SessionError("bad_request", "an accepted answer carries the form's content")
    known = {f["name"]: f for f in fields}
    if any(name not in known for name in content):
        raise SessionError("bad_request", "the answer names a field the question does not have")
    checked: dict[str, Any] = {}
    for name, spec in known.items():
        value = content.get(name)
        if value is None:
            if spec["required"]:
                raise SessionError("bad_request", f"field {_shown(name)} is required")
            continue
        if not _fits(spec, value):
            raise SessionError("bad_request", f"field {_shown(name)}: {_expected(spec)}")
        checked[name] = int(value) if spec["kind"] == "integer" else value
    return checked


class ElicitationBroker:
    """The open questions of one session."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self._open: dict[str, PendingQuestion] = {}
        self._closed: OrderedDict[str, None] = OrderedDict()

    def pending(self) -> list[Item]:
        """The `elicitation_request` items still waiting for an answer, in seq order."""
        items = [entry.item for entry in self._open.values() if entry.item is not None]
        return sorted(items, key=lambda item: item.seq)

    async def open(
        self, *, message: str, fields: list[dict[str, Any]], tool_call_id: str | None
    ) -> PendingQuestion | None:
        """Record a new question; None if too many are open already (the agent is told cancel)."""
        if len(self._open) >= MAX_OPEN_QUESTIONS:
            await self._recorder.error(
                f"the agent asked more than {MAX_OPEN_QUESTIONS} questions at once; "
                "the extra question was cancelled"
            )
            return None
        request_id = new_id("ask")
        data: dict[str, Any] = {
            "request_id": request_id,
            "message": message[: MAX_LABEL_CHARS * 4],
            "fields": fields,
        }
        if tool_call_id is not None:
            data["tool_call_id"] = tool_call_id
        entry = PendingQuestion(request_id=request_id, fields=fields, data=data)
        # Open before it is stored: a subscriber may answer as soon as it sees the item.
        self._open[request_id] = entry
        try:
            await self._recorder.flush()
            entry.item = await self._recorder.append(
                "elicitation_request",
                self._recorder._in_turn(data),
                status="action_required",
            )
        except BaseException:
            self._open.pop(request_id, None)
            raise
        return entry

    async def wait(self, entry: PendingQuestion) -> tuple[Action, dict[str, Any] | None]:
        """The first answer; if the waiter is cancelled, the question is closed as cancelled."""
        try:
            await entry.answered.wait()
        finally:
            if entry.action is None:
                with anyio.move_on_after(RECORD_TIMEOUT, shield=True):
                    await self._close(entry, "cancel", None, by="host")
        assert entry.action is not None
        return entry.action, entry.content

    async def answer(self, request_id: str, action: str, content: Any, *, by: str) -> None:
        """Answer for `by`; raises SessionError unless this is the first valid answer."""
        entry = self._open.get(request_id)
        if entry is None:
            if request_id in self._closed:
                raise SessionError("already_answered", "this question was answered")
            raise SessionError("unknown_request", "no such question")
        if action not in ACTIONS:
            raise SessionError("bad_request", "the action must be accept, decline or cancel")
        checked = None
        if action == "accept":
            checked = check_content(entry.fields, content)
        elif content is not None:
            raise SessionError("bad_request", "only an accepted answer carries content")
        await self._close(entry, action, checked, by=by)

    async def cancel(self, request_id: str, *, by: str) -> None:
        """Close one question as cancelled, if still open."""
        entry = self._open.get(request_id)
        if entry is not None:
            await self._close(entry, "cancel", None, by=by)

    async def cancel_all(self, *, by: str) -> None:
        """Close every open question as cancelled (the turn was cancelled or the agent left)."""
        for entry in list(self._open.values()):
            await self._close(entry, "cancel", None, by=by)

    async def _close(
        self, entry: PendingQuestion, action: Action, content: dict[str, Any] | None, *, by: str
    ) -> None:
        if entry.action is not None:
            return
        # Claimed before any await: the first answer wins.
        entry.action, entry.content = action, content
        self._open.pop(entry.request_id, None)
        self._closed[entry.request_id] = None
        while len(self._closed) > MAX_REMEMBERED:
            self._closed.popitem(last=False)
        data: dict[str, Any] = {"request_id": entry.request_id, "action": action}
        if content is not None:
            data["content"] = content
        try:
            await self._recorder.append_or_hold(
                "elicitation_response", data, by=by, status="completed"
            )
        except StoreError as exc:
            logger.warning("the answer to %s was not stored: %s", entry.request_id, exc)
        finally:
            entry.answered.set()


def _field(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    kind = spec.get("type")
    made: dict[str, Any] = {
        "title": _label(spec.get("title")) or name,
        "description": _label(spec.get("description")),
    }
    if kind == "string" and ("enum" in spec or "oneOf" in spec):
        return {**made, "kind": "choice", "choices": _choices(name, spec)}
    if kind == "string":
        fmt = spec.get("format")
        if fmt is not None and fmt not in FORMATS:
            raise BadForm(f"field {name!r} has a string format this host does not know")
        low, high = _bounds(name, spec, "minLength", "maxLength", integral=True)
        return {**made, "kind": "string", "format": fmt, "min": low, "max": high}
    if kind in ("number", "integer"):
        low, high = _bounds(name, spec, "minimum", "maximum", integral=kind == "integer")
        return {**made, "kind": kind, "min": low, "max": high}
    if kind == "boolean":
        return {**made, "kind": "boolean"}
    if kind == "array":
        items = spec.get("items")
        if not isinstance(items, Mapping):
            raise BadForm(f"field {name!r} is an array of no choices")
        if "anyOf" in items:
            items = {"type": "string", "oneOf": items["anyOf"]}
        low, high = _bounds(name, spec, "minItems", "maxItems", integral=True)
        return {
            **made,
            "kind": "choices",
            "choices": _choices(name, items),
            "min": low,
            "max": high,
        }
    raise BadForm(f"field {name!r} is not a string, number, integer, boolean or choice")


def _choices(name: str, spec: Mapping[str, Any]) -> list[dict[str, str]]:
    if spec.get("type", "string") != "string":
        raise BadForm(f"field {name!r} offers choices that are not strings")
    if "oneOf" in spec:
        listed = spec["oneOf"]
        if not isinstance(listed, list) or not all(
            isinstance(o, Mapping) and isinstance(o.get("const"), str) for o in listed
        ):
            raise BadForm(f"field {name!r} has choices without a string const")
        pairs = [(o["const"], o.get("title")) for o in listed]
    else:
        values, names = spec.get("enum"), spec.get("enumNames")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise BadForm(f"field {name!r} has choices that are not strings")
        if not isinstance(names, list) or len(names) != len(values):
            names = values
        pairs = list(zip(values, names, strict=True))
    if not 1 <= len(pairs) <= MAX_ELICITATION_CHOICES:
        raise BadForm(f"field {name!r} must offer 1 to {MAX_ELICITATION_CHOICES} choices")
    if len({value for value, _ in pairs}) != len(pairs) or any(
        len(value) > MAX_LABEL_CHARS for value, _ in pairs
    ):
        raise BadForm(f"field {name!r} offers a choice twice or one too long")
    return [{"value": value, "label": _label(label) or value} for value, label in pairs]


def _bounds(
    name: str, spec: Mapping[str, Any], low_key: str, high_key: str, *, integral: bool
) -> tuple[float | None, float | None]:
    found: list[float | None] = []
    for key in (low_key, high_key):
        value = spec.get(key)
        if value is not None and not _number(value, integral=integral):
            raise BadForm(f"field {name!r} has a {key} that is not a number")
        found.append(value)
    low, high = found
    if low is not None and high is not None and low > high:
        raise BadForm(f"field {name!r} has {low_key} above {high_key}")
    return low, high


def _number(value: Any, *, integral: bool) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        if not math.isfinite(value):
            return False
    except OverflowError:  # an int too large for a float
        return False
    return not integral or float(value).is_integer()


def _fits(spec: Mapping[str, Any], value: Any) -> bool:
    """Whether `value` is an answer the field `spec` (one of `form_fields`) accepts."""
    kind = spec["kind"]
    low, high = spec.get("min"), spec.get("max")
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in ("number", "integer"):
        return (
            _number(value, integral=kind == "integer")
            and abs(value) <= 2**53
            and (low is None or value >= low)
            and (high is None or value <= high)
        )
    if kind == "choice":
        return isinstance(value, str) and value in {c["value"] for c in spec["choices"]}
    if kind == "choices":
        values = {c["value"] for c in spec["choices"]}
        return (
            isinstance(value, list)
            and all(isinstance(v, str) and v in values for v in value)
            and len(set(value)) == len(value)
            and (low is None or len(value) >= low)
            and (high is None or len(value) <= high)
        )
    if not isinstance(value, str) or len(value) > MAX_ELICITATION_TEXT_LENGTH:
        return False
    if (low is not None and len(value) < low) or (high is not None and len(value) > high):
        return False
    return _formatted(spec.get("format"), value)


def _formatted(fmt: Any, value: str) -> bool:
    if fmt == "email":
        local, at, domain = value.partition("@")
        return bool(local and at and domain) and " " not in value
    if fmt == "uri":
        scheme, colon, rest = value.partition(":")
        return bool(scheme.isascii() and scheme.isalpha() and colon and rest)
    if fmt == "date":
        return _DATE.fullmatch(value) is not None and _parses(value)
    if fmt == "date-time":
        return _DATE.match(value) is not None and _parses(value)
    return True


def _parses(value: str) -> bool:
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


def _expected(spec: Mapping[str, Any]) -> str:
    kind = spec["kind"]
    low, high = spec.get("min"), spec.get("max")
    between = f" from {low:g}" if low is not None else ""
    between += f" to {high:g}" if high is not None else ""
    if kind == "boolean":
        return "expected true or false"
    if kind in ("number", "integer"):
        return f"expected {'an integer' if kind == 'integer' else 'a number'}{between}"
    if kind == "choice":
        return "expected one of its choices"
    if kind == "choices":
        return f"expected distinct choices of its own{', how many:' + between if between else ''}"
    fmt = f" ({spec['format']})" if spec.get("format") else ""
    length = f", length{between}" if between else ""
    return f"expected text{fmt}{length}"


def _label(value: Any) -> str:
    return value[:MAX_LABEL_CHARS] if isinstance(value, str) else ""


def _shown(name: str) -> str:
    """A field name of the question (the agent's) for an error message: quoted, printable."""
    return repr("".join(c if c.isprintable() else "?" for c in name[:64]))
