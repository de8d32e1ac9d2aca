"""Who is attached, as a teammate learns it: the host's listing once, then what changed."""

from __future__ import annotations

from typing import NamedTuple

from tunnel.app.host_messages import Member, PresenceDelta, PresenceMessage


class Change(NamedTuple):
    """What one presence message changed in the list."""

    joined: list[Member]
    left: list[Member]


class Roster:
    """The members a channel's presence messages add up to, by member id, and how many are
    attached in all (the host lists the first ones by name and counts the rest).

    A host from before member ids sends only whole lists: its members are keyed by place
    (negative keys, which no host id takes).
    """

    def __init__(self) -> None:
        self._members: dict[int, Member] = {}
        self.you: int | None = None
        """The member id of the receiving channel, once the host said it."""
        self.count = 0
        """Everyone attached as the host last counted them; never fewer than are listed."""

    @property
    def members(self) -> list[Member]:
        """The members listed, in the order they joined."""
        return list(self._members.values())

    def apply(self, message: PresenceMessage | PresenceDelta) -> Change:
        """Take in one presence message; returns who it added to the list and who it removed."""
        change = self._apply(message)
        self.count = max(message.count, len(self._members))
        return change

    def _apply(self, message: PresenceMessage | PresenceDelta) -> Change:
        if isinstance(message, PresenceMessage):
            before = self._members
            members = self._members = {
                m.id if m.id is not None else -1 - n: m for n, m in enumerate(message.members)
            }
            self.you = message.you
            if not before:
                # A joiner's first list: everyone in it is new.
                return Change(list(members.values()), [])
            joined = [m for key, m in members.items() if key not in before]
            left = [m for key, m in before.items() if key not in members]
            return Change(joined, left)
        members = self._members
        left = [m for key in message.left if (m := members.pop(key, None)) is not None]
        joined = []
        for member in message.joined:
            member_id = member.id
            if member_id is not None and member_id not in members:
                joined.append(member)
                members[member_id] = member
        return Change(joined, left)
