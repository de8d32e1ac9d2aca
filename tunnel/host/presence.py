"""Who is attached to the shared session, with change notification for every surface, and what
teammates are told of it: the first members by name and the count of all."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import anyio

from tunnel.app import host_messages as out

LISTED_MEMBERS = 50
"""Members a teammate is told of by name, the first to have attached (the host console first);
everyone else is counted (docs/application.md, "Presence"). A room of N teammates then costs each
of them O(1) presence work per change, not O(N): told of everyone, 1,000 teammates attaching
at once were told of about a million members between them."""


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
class Listing:
    """What teammates are told of the members: the listed ones by key, and how many there are."""

    members: dict[int, Member]
    """The first LISTED_MEMBERS members by key, in the order they joined."""
    count: int
    """Everyone attached, listed or not."""

    def changes_since(self, before: Listing) -> tuple[dict[int, Member], list[int]]:
        """Who entered the list since `before` (by key, in join order) and the keys that left
        it: a presence delta's `joined` and `left`. A member who came and went in between is
        in neither."""
        joined = {key: m for key, m in self.members.items() if key not in before.members}
        left = [key for key in before.members if key not in self.members]
        return joined, left


class Presence:
    """The set of attached members; `version` grows by one on every change.

    Waiters never miss a change: they remember the version they last saw and wait until it
    differs, so a change between two waits is still noticed; what changed for teammates is the
    difference between the `listing` they were last told and the one now.
    """

    def __init__(self) -> None:
        self._members: dict[int, Member] = {}
        self._ids = itertools.count()
        self._version = 0
        self._changed = anyio.Event()

    @property
    def version(self) -> int:
        return self._version

    def members(self) -> list[Member]:
        """Members in the order they joined."""
        return list(self._members.values())

    def listing(self) -> Listing:
        """The members teammates are told of by name (LISTED_MEMBERS at most) and the count."""
        listed = dict(itertools.islice(self._members.items(), LISTED_MEMBERS))
        return Listing(members=listed, count=len(self._members))

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
        self._bump()
        return key

    def leave(self, key: int) -> None:
        """Remove a member; leaving twice is harmless (cleanup paths may overlap)."""
        if self._members.pop(key, None) is not None:
            self._bump()

    async def wait_changed(self, seen_version: int) -> int:
        """Wait until the version differs from `seen_version`; returns the new version."""
        while self._version == seen_version:
            await self._changed.wait()
        return self._version

    def _bump(self) -> None:
        self._version += 1
        self._changed.set()
        self._changed = anyio.Event()


def wire_members(members: dict[int, Member]) -> list[out.Member]:
    """Members as a presence message lists them, each with its key as its id."""
    return [
        out.Member(name=m.name, role=m.role, id=key, verified=m.verified)
        for key, m in members.items()
    ]
