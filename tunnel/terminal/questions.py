"""The agent's questions in a terminal (`elicitation_request`): shown as numbered fields, and
answered with `/answer` (docs/agents.md, "Questions from the agent").

`/answer 1=ann 2=r` fills the fields by number (or `name=ann` by name), quoting as a shell does
for text with spaces; `/answer decline` and `/answer cancel` refuse. A choice is named by its
value, its label or its number; several choices are separated by commas; a yes/no field takes
yes, no, true or false. The words become typed values here; the host checks them against the
question and says what does not fit.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from tunnel.app.requests import ElicitationAnswer

USAGE = "usage: /answer N=VALUE ... | /answer decline | /answer cancel [REQUEST_ID]"


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingQuestion:
    """An open question and its fields, in the agent's order."""

    request_id: str
    message: str
    fields: tuple[Mapping[str, Any], ...]

    @classmethod
    def from_data(cls, request_id: str, data: Mapping[str, Any]) -> PendingQuestion:
        """The question an `elicitation_request` item's data describes."""
        fields = data.get("fields")
        return cls(
            request_id=request_id,
            message=str(data.get("message", "")),
            fields=tuple(
                f
                for f in (fields if isinstance(fields, list) else [])
                if isinstance(f, Mapping) and isinstance(f.get("name"), str)
            ),
        )


def render_question(head: Text, data: Mapping[str, Any]) -> None:
    """An `elicitation_request` (its data already made printable): the message, then each field
    numbered with its kind, choices and bounds, then how to answer."""
    head.append("question? ", style="bold magenta")
    head.append(str(data.get("message", "")))
    question = PendingQuestion.from_data(str(data.get("request_id", "")), data)
    for number, spec in enumerate(question.fields, 1):
        head.append(f"\n  {number}. {spec.get('title') or spec['name']}")
        head.append(f" ({_kind_words(spec)})", style="dim")
        description = spec.get("description")
        if isinstance(description, str) and description:
            head.append(f"\n     {description}", style="dim")
    head.append(
        f"\n  request {question.request_id}: /answer N=VALUE ..., /answer decline, /answer cancel",
        style="dim",
    )


def render_response(head: Text, who: str, data: Mapping[str, Any]) -> None:
    """An `elicitation_response`: who answered how, and what."""
    head.append("answer ", style="bold magenta")
    action = data.get("action")
    if action == "accept":
        content = data.get("content")
        shown = (
            ", ".join(f"{name}={_shown(value)}" for name, value in (content or {}).items())
            if isinstance(content, Mapping)
            else ""
        )
        head.append(f"{who} answered" + (f": {shown}" if shown else ""))
    elif action == "decline":
        head.append(f"{who} declined to answer")
    else:
        head.append(f"the question was cancelled by {who}")


def parse_answer(
    args: list[str], pending: Mapping[str, PendingQuestion]
) -> ElicitationAnswer | str:
    """What `/answer ARGS` sends, or what to tell the person instead."""
    if not pending:
        return "no question is waiting"
    try:
        words = shlex.split(" ".join(args))
    except ValueError:
        return f"unbalanced quotes; {USAGE}"
    named = [w for w in words if w in pending]
    words = [w for w in words if w not in pending]
    if len(named) > 1:
        return USAGE
    question = pending[named[0]] if named else list(pending.values())[-1]
    if words in (["decline"], ["cancel"]):
        return ElicitationAnswer(request_id=question.request_id, action=words[0])
    content: dict[str, Any] = {}
    for word in words:
        key, equals, value = word.partition("=")
        spec = _field(question, key)
        if not equals or spec is None:
            return f"no field {key!r}: its fields are {_listing(question)}; {USAGE}"
        typed = _typed(spec, value)
        if isinstance(typed, str) and spec.get("kind") not in ("string", "choice"):
            return typed
        content[str(spec["name"])] = typed
    if not content and question.fields:
        return f"its fields are {_listing(question)}; {USAGE}"
    return ElicitationAnswer(request_id=question.request_id, action="accept", content=content)


def _field(question: PendingQuestion, key: str) -> Mapping[str, Any] | None:
    if key.isdigit() and 1 <= int(key) <= len(question.fields):
        return question.fields[int(key) - 1]
    return next((f for f in question.fields if f["name"] == key), None)


def _typed(spec: Mapping[str, Any], value: str) -> Any:
    """The word as the value the field's kind takes; for a word that is none, a sentence."""
    kind = spec.get("kind")
    if kind == "boolean":
        if value.lower() in ("yes", "true", "y"):
            return True
        if value.lower() in ("no", "false", "n"):
            return False
        return f"{spec['name']} takes yes or no"
    if kind in ("integer", "number"):
        try:
            return int(value) if kind == "integer" else float(value)
        except ValueError:
            return f"{spec['name']} takes {'an integer' if kind == 'integer' else 'a number'}"
    if kind == "choice":
        return _choice(spec, value)
    if kind == "choices":
        return [_choice(spec, part.strip()) for part in value.split(",") if part.strip()]
    return value


def _choice(spec: Mapping[str, Any], word: str) -> str:
    choices = [c for c in spec.get("choices") or [] if isinstance(c, Mapping)]
    if word.isdigit() and 1 <= int(word) <= len(choices):
        return str(choices[int(word) - 1].get("value"))
    for choice in choices:
        if word in (choice.get("value"), choice.get("label")):
            return str(choice.get("value"))
    return word  # not one of them: the host says so


def _kind_words(spec: Mapping[str, Any]) -> str:
    kind = spec.get("kind")
    words = {"string": "text", "boolean": "yes/no"}.get(str(kind), str(kind))
    if kind in ("choice", "choices"):
        choices = [c for c in spec.get("choices") or [] if isinstance(c, Mapping)]
        listed = ", ".join(
            f"{n} {c.get('value')}"
            + (f" ({c.get('label')})" if c.get("label") != c.get("value") else "")
            for n, c in enumerate(choices, 1)
        )
        words = ("one of: " if kind == "choice" else "any of, comma separated: ") + listed
    if spec.get("format"):
        words += f", {spec['format']}"
    low, high = spec.get("min"), spec.get("max")
    if low is not None or high is not None:
        what = "length " if kind == "string" else ""
        words += f", {what}{low if low is not None else ''}..{high if high is not None else ''}"
    if spec.get("default") is not None:
        words += f", default {_shown(spec['default'])}"
    return words + (", required" if spec.get("required") else "")


def _listing(question: PendingQuestion) -> str:
    return ", ".join(f"{n} {f['name']}" for n, f in enumerate(question.fields, 1)) or "none"


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)
