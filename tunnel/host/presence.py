"""Who is attached to the shared session, with change notification for every surface, and the
recent changes, so a teammate's channel can be told what changed instead of the whole list."""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field

import anyio

CHANGE_LOG = 1024
"""Changes `Presence` remembers. A channel further behind than this gets the whole list again:
a delta from that far back would weigh about as much, and the log stays a fixed size whatever
the number of joins and leaves."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    """One attached teammate (or the host console)."""

    name: str
    """The invited name for a personal link; else the display name the teammate chose, not
    authenticated, shown as is."""

    role: str
    """`view` or `drive`: what the member's link allows, proven by its keys."""

    verified: bool = False
    """Whether `name` is bound by the host (a personal link's), not typed by the teammate."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Changes:
    """What changed between two versions, all in one: a member who came and went in between
    is in neither list."""

    joined: dict[int, Member] = field(default_factory=dict)
    """The members who came (and are still here), by key, in the order they joined."""
    left: list[int] = field(default_factory=list)
    """The keys of the members who were here at the earlier version and are gone."""


class Presence:
    """The set of attached members; `version` grows by one on every change.

    Waiters never miss a change: they remember the version they last saw and wait until it
    differs, so a change between two waits is still noticed. The last `change_log` changes are
    kept, so `changes_since` can say what a waiter missed.
    """

    def __init__(self, *, change_log: int = CHANGE_LOG) -> None:
        if type(change_log) is not int or change_log < 1:
            raise ValueError("the change log holds at least one change")
        self._members: dict[int, Member] = {}
        self._ids = itertools.count()
        self._version = 0
        self._changed = anyio.Event()
        # (key, member) for a join, (key, None) for a leave; the newest is `version`'s. Bounded:
        # the oldest fall off, and a waiter from before them is sent the whole list.
        self._log: deque[tuple[int, Member | None]] = deque(maxlen=change_log)

    @property
    def version(self) -> int:
        return self._version

    def members(self) -> list[Member]:
        """Members in the order they joined."""
        return list(self._members.values())

    def keyed(self) -> dict[int, Member]:
        """Members by key, in the order they joined; a key is never used twice."""
        return dict(self._members)

    def reserve(self) -> int:
        """A key for a member who joins later (`join(member, key=...)`): a channel's `broadcast`
        message says it before the teammate's keys are confirmed and it is shown."""
        return next(self._ids)

    def join(self, member: Member, *, key: int | None = None) -> int:
        """Add a member, under a `reserve`d key or a new one; returns its key, to pass to
        `leave` (and the id teammates see)."""
        if key is None:
            key = next(self._ids)
        elif key in self._members:
            raise ValueError("that key is in use")
        self._members[key] = member
        self._bump((key, member))
        return key

    def leave(self, key: int) -> None:
        """Remove a member; leaving twice is harmless (cleanup paths may overlap)."""
        if self._members.pop(key, None) is not None:
            self._bump((key, None))

    def changes_since(self, version: int) -> Changes | None:
        """What changed after `version` up to now, coalesced; None when the change log no
        longer reaches back that far (or `version` is not one this set had): send the list."""
        behind = self._version - version
        if behind < 0 or behind > len(self._log):
            return None
        joined: dict[int, Member] = {}
        left: list[int] = []
        for key, member in itertools.islice(self._log, len(self._log) - behind, None):
            if member is not None:
                joined[key] = member
            elif joined.pop(key, None) is None:
                # Here at `version` (keys are never reused, so it joined before): it left.
                left.append(key)
        return Changes(joined=joined, left=left)

    async def wait_changed(self, seen_version: int) -> int:
        """Wait until the version differs from `seen_version`; returns the new version."""
        while self._version == seen_version:
            await self._changed.wait()
        return self._version

    def _bump(self, change: tuple[int, Member | None]) -> None:
        self._log.append(change)
        self._version += 1
        self._changed.set()
        self._changed = anyio.Event()
