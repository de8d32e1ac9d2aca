"""Who is attached, as a terminal says it: the host's listing once, then who joined and who left.

Printing the whole list on every change would scroll a busy session away (a hundred teammates
joining print a hundred lists of up to a hundred names). The text is returned unescaped: it holds
names others chose, and the screen's `note` escapes it.
"""

from __future__ import annotations

from collections.abc import Sequence

from tunnel.app.host_messages import Member
from tunnel.app.roster import Change

NAMES_SHOWN = 8
"""Names the whole list spells out; the rest are counted."""


def _label(member: Member) -> str:
    return f"{member.name} ({member.role})"


def whole_line(members: Sequence[Member], count: int) -> str:
    """Everyone attached, in one line: `members` listed by the host, `count` in all."""
    if not members and count <= 0:
        return "attached: nobody"
    shown = ", ".join(_label(member) for member in members[:NAMES_SHOWN])
    rest = max(count, len(members)) - min(len(members), NAMES_SHOWN)
    if not shown:
        return f"attached: {rest}"
    return f"attached: {shown}" + (f" and {rest} more" if rest > 0 else "")


def change_lines(change: Change, *, crowded: bool = False) -> list[str]:
    """A line for each member who joined or left. `crowded`: before this change some of those
    attached were not listed (docs/application.md, "Presence"); a member who enters the list
    then may have been attached all along, moved up as a listed one left, and gets no line."""
    lines = [] if crowded else [f"{_label(member)} joined" for member in change.joined]
    lines += [f"{_label(member)} left" for member in change.left]
    return lines
