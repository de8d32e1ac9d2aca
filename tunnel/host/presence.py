"""Who is attached to the shared session, with change notification for every surface."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import anyio


@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    """One attached teammate (or the host console)."""

    name: str
    """Display name the teammate chose; not authenticated, shown as is."""

    role: str
    """`view` or `drive`: what the member's link allows, proven by its keys."""


class Presence:
    """The set of attached members; `version` grows on every change.

    Waiters never miss a change: they remember the version they last saw and wait until it
    differs, so a change between two waits is still noticed.
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

    def join(self, member: Member) -> int:
        """Add a member; returns the key to pass to `leave`."""
        key = next(self._ids)
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
