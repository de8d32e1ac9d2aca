"""Who is attached, as a terminal says it: the whole list once, then who joined and who left.

Printing the whole list on every change would scroll a busy session away (a hundred teammates
joining print a hundred lists of up to a hundred names), so a surface keeps a `PresenceLines` and
prints what it returns for each list it is handed.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Protocol

NAMES_SHOWN = 8
"""Names the first list spells out; the rest are counted."""


class Attached(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def role(self) -> str: ...


def _label(member: Attached) -> str:
    return f"{member.name} ({member.role})"


class PresenceLines:
    """Turns successive whole member lists into the lines worth printing.

    Members are told apart by a key the caller gives (the host's member id where there is one),
    so two teammates of the same name are two members. The text is returned unescaped: it holds
    names others chose, and the screen's `note` escapes it.
    """

    def __init__(self) -> None:
        self._members: dict[Hashable, Attached] | None = None

    def update(self, members: Iterable[tuple[Hashable, Attached]]) -> list[str]:
        """The lines that say how `members` differs from the list before it."""
        now = dict(members)
        before, self._members = self._members, now
        if before is None:
            return [_whole(list(now.values()))]
        joined = [member for key, member in now.items() if key not in before]
        left = [member for key, member in before.items() if key not in now]
        lines = [f"{_label(member)} joined" for member in joined]
        lines += [f"{_label(member)} left" for member in left]
        return lines


def _whole(members: list[Attached]) -> str:
    if not members:
        return "attached: nobody"
    shown = ", ".join(_label(member) for member in members[:NAMES_SHOWN])
    rest = len(members) - NAMES_SHOWN
    return f"attached: {shown}" + (f" and {rest} more" if rest > 0 else "")
