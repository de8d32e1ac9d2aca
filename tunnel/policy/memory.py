"""Answers the humans chose to remember ("always"), each for the scope its rule allows (`turn`:
until the turn ends, `session`: while the host runs), never wider; pure."""

from __future__ import annotations

from dataclasses import dataclass

from .decide import ToolRequest, Verdict

Key = tuple[int, str, str | None, tuple[str | None, ...]]

MAX_REMEMBERED = 256
"""Remembered answers kept; the oldest is forgotten first."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Remembered:
    """An answer given once for every request like it."""

    allow: bool
    scope: str
    """`turn` or `session`."""
    turn: int | None
    """The turn it was given in (what `turn` scope is bound to)."""
    by: tuple[str, ...]
    """Who decided it."""


def key_of(verdict: Verdict, request: ToolRequest) -> Key:
    """What a remembered answer covers: the same rule, kind, command line and paths."""
    return (verdict.rule.index, request.known_kind, request.command, request.paths)


class Memory:
    """The remembered answers of one session."""

    def __init__(self) -> None:
        self._answers: dict[Key, Remembered] = {}

    def recall(self, key: Key, *, turn: int | None) -> Remembered | None:
        """The answer remembered for `key` that still holds in `turn`, if any."""
        found = self._answers.get(key)
        if found is None or (found.scope == "turn" and found.turn != turn):
            return None
        return found

    def remember(self, key: Key, answer: Remembered) -> None:
        if answer.scope not in ("turn", "session"):
            return
        self._answers.pop(key, None)
        self._answers[key] = answer
        while len(self._answers) > MAX_REMEMBERED:
            del self._answers[next(iter(self._answers))]
