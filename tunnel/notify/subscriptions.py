"""The push subscriptions a host keeps: whose each one is, saved in a 0600 file beside the host
key so they outlive a restart, bounded per person and in all.

A subscription belongs to a person: the invited name of a personal link (the host bound it), or
for a role link the `browser` id its page sent (anyone holding the link could say any name, so
the typed name owns nothing). `/revoke NAME` drops that person's; `/revoke` drops every role
link's, with the links themselves. Each saved entry names the host and, for a role link's, which
role links were valid then: a host that starts with another key, other role links, or without
an invitation, keeps none of theirs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio

from tunnel.app.requests import PUSH_AUTH_SIZE, PUSH_KEY_SIZE
from tunnel.e2e.identity import KeyFileError, read_private_file, write_private_file
from tunnel.notify.vapid import b64url, b64url_decode

logger = logging.getLogger("tunnel.notify")

MAX_PER_OWNER = 4
"""Subscriptions of one person (or one role-link browser): a new one beyond replaces their
oldest, so one person's browsers cannot crowd out everyone else's."""
MAX_SUBSCRIPTIONS = 256
"""Subscriptions a host keeps in all; `push_on` beyond is refused."""
SAVE_INTERVAL = 1.0
"""Seconds at least between two saves of teammates' changes on a running host (`Subscriptions`'
`save_interval`)."""
MAX_PER_ROLE_LINK = 64
"""Subscriptions made through one role link (its browsers' together); `push_on` of a new
browser beyond is refused. Anyone holding the link can make up browser ids, so without this
one holder could take every place and leave none to invited people or the other link; and a
new one is refused rather than an old one dropped, so made-up ids push out nobody."""

OwnerKind = Literal["person", "browser"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Owner:
    """Whose a subscription is: an invited `person`'s name, or a role link's `browser` id."""

    kind: OwnerKind
    id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscription:
    """One browser's push subscription (its PushSubscription) and whose it is."""

    owner: Owner
    endpoint: str
    p256dh: bytes
    auth: bytes
    role: str
    """The role of the link it came through ("view" or "drive"): a viewer's pushes offer no
    answers."""
    browser: str
    """The page's id for this browser."""


def role_links_mark(*links: str) -> str:
    """What the subscriptions file keeps of the role links valid now (`links`, their URLs):
    a one-way digest, so that those made through links since replaced (the share secrets
    rotated, or deleted while the host was down) are dropped at the next start."""
    digest = hashlib.sha256(b"agent-tunnel role links\0" + "\0".join(links).encode())
    return digest.hexdigest()[:32]


class Refused(ValueError):
    """A subscription the host does not keep; the message is for the teammate."""


class Subscriptions:
    """Every subscription, by endpoint; saved to `path` on each change (None: in memory)."""

    def __init__(
        self,
        path: Path | None = None,
        *,
        host_id: str | None = None,
        role_links: str | None = None,
        save_interval: float = 0.0,
    ) -> None:
        """`host_id`: the host whose subscriptions these are, saved with each (None: any).
        `role_links`: which role links are valid now (`role_links_mark`), saved with each made
        through one.
        `save_interval`: seconds at least between two saves of a teammate's change (`push_on`,
        `push_off`); one within it waits for the next change or `flush()`. A teammate could
        otherwise make the host write and sync the file as fast as they send, each write
        holding up the whole host. A revocation is saved at once."""
        self._path = path
        self._host_id = host_id
        self.role_links = role_links
        self._save_interval = save_interval
        self._saved_at = -math.inf
        self._dirty = False
        self._by_endpoint: dict[str, Subscription] = {}
        self._writing = False
        """Whether `run` writes the saves (in a worker thread); else each is written at once."""
        self._unwritten: bytes | None = None
        """The newest save `run` has not written yet."""
        self._wake: anyio.Event | None = None
        """Set when there is a save for `run` to write."""
        self._queued = 0
        """Saves handed to `run` so far."""
        self._written = 0
        """Of those, how many `run` has written (or passed over for a newer one)."""
        self._on_written: anyio.Event | None = None
        """Set, and replaced, each time `run` has written."""

    @classmethod
    def load(
        cls,
        path: Path | None,
        *,
        host_id: str | None = None,
        people: Iterable[str] | None = None,
        role_links: str | None = None,
        save_interval: float = 0.0,
    ) -> Subscriptions:
        """The subscriptions saved at `path` (an empty file made if there is none). Raises
        KeyFileError for a file others may read; an entry that does not read is dropped with a
        warning. With `host_id`, those saved by another host (its key was replaced: every link
        changed) are dropped; with `people`, those of a person no longer invited; with
        `role_links`, those made through role links since replaced."""
        subscriptions = cls(
            path, host_id=host_id, role_links=role_links, save_interval=save_interval
        )
        if path is None:
            return subscriptions
        if not path.exists():
            # Made now, empty: a sandboxed agent's layout hides only files that exist.
            subscriptions._save()
            return subscriptions
        data = read_private_file(path)
        try:
            entries = json.loads(data)
            if not isinstance(entries, list):
                raise TypeError
        except (ValueError, TypeError):
            raise KeyFileError(
                f"{path} holds no push subscriptions; move it away (teammates then turn"
                " notifications on again)"
            ) from None
        dropped = revoked = 0
        invited = None if people is None else frozenset(people)
        for entry in entries[:MAX_SUBSCRIPTIONS]:
            subscription = _from_json(entry)
            if subscription is None:
                dropped += 1
            elif (
                (host_id is not None and entry.get("host") != host_id)
                or (
                    invited is not None
                    and subscription.owner.kind == "person"
                    and subscription.owner.id not in invited
                )
                or (
                    role_links is not None
                    and subscription.owner.kind == "browser"
                    and entry.get("links") != role_links
                )
            ):
                revoked += 1
            else:
                subscriptions._by_endpoint[subscription.endpoint] = subscription
        if dropped:
            logger.warning("dropped %d unreadable push subscription(s) from %s", dropped, path)
        if revoked:
            logger.info("dropped %d push subscription(s) of links no longer valid", revoked)
            subscriptions._save()
        return subscriptions

    def __len__(self) -> int:
        return len(self._by_endpoint)

    def all(self) -> list[Subscription]:
        """Every subscription, oldest first."""
        return list(self._by_endpoint.values())

    def get(self, endpoint: str) -> Subscription | None:
        return self._by_endpoint.get(endpoint)

    def add(self, subscription: Subscription) -> None:
        """Keep `subscription` (replacing its owner's one with the same endpoint); beyond
        `MAX_PER_OWNER` the owner's oldest goes. Raises Refused for an endpoint another owner
        holds, a host holding `MAX_SUBSCRIPTIONS` already, or a new browser of a role link
        holding `MAX_PER_ROLE_LINK`."""
        held = self._by_endpoint.get(subscription.endpoint)
        if held is not None and held.owner != subscription.owner:
            raise Refused("this push endpoint is subscribed by someone else")
        if held == subscription:
            return  # the page says it again on each attach: nothing changes, nothing is written
        if held is None and len(self._by_endpoint) >= MAX_SUBSCRIPTIONS:
            raise Refused("the host keeps no more push subscriptions")
        if held is None and subscription.owner.kind == "browser":
            owned = [s for s in self._by_endpoint.values() if s.owner == subscription.owner]
            link = [
                s
                for s in self._by_endpoint.values()
                if s.owner.kind == "browser" and s.role == subscription.role
            ]
            if len(owned) < MAX_PER_OWNER and len(link) >= MAX_PER_ROLE_LINK:
                raise Refused("the host keeps no more push subscriptions for this link")
        self._by_endpoint.pop(subscription.endpoint, None)
        self._by_endpoint[subscription.endpoint] = subscription
        mine = [s for s in self._by_endpoint.values() if s.owner == subscription.owner]
        for old in mine[: max(0, len(mine) - MAX_PER_OWNER)]:
            del self._by_endpoint[old.endpoint]
        self._changed()

    def remove(self, endpoint: str, *, owner: Owner | None = None) -> bool:
        """Drop the subscription of `endpoint` (only if it is `owner`'s, when given)."""
        held = self._by_endpoint.get(endpoint)
        if held is None or (owner is not None and held.owner != owner):
            return False
        del self._by_endpoint[endpoint]
        self._changed()
        return True

    def remove_person(self, name: str) -> int:
        """Drop every subscription of the invited person `name`; how many."""
        return self._remove_where(lambda s: s.owner == Owner(kind="person", id=name))

    def remove_role_links(self) -> int:
        """Drop every subscription made through a role link; how many."""
        return self._remove_where(lambda s: s.owner.kind == "browser")

    def _remove_where(self, predicate: Any) -> int:
        gone = [s.endpoint for s in self._by_endpoint.values() if predicate(s)]
        for endpoint in gone:
            del self._by_endpoint[endpoint]
        if gone:
            self._dirty = True
            self.flush()
        return len(gone)

    def _changed(self) -> None:
        self._dirty = True
        if time.monotonic() - self._saved_at >= self._save_interval:
            self.flush()

    def flush(self) -> None:
        """Save the changes not saved yet, if any."""
        if self._dirty:
            self._dirty = False
            self._saved_at = time.monotonic()
            self._save()

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Write the saves in a worker thread until cancelled, so that syncing the file never
        holds up the host: one write at a time, each of the newest save (those made while one
        is written are one write after it). A save not written yet when cancelled is written
        before this returns; afterwards each is written at once again."""
        self._wake, self._on_written = anyio.Event(), anyio.Event()
        self._writing = True
        task_status.started()
        try:
            while True:
                await self._wake.wait()
                self._wake = anyio.Event()
                data, self._unwritten, queued = self._unwritten, None, self._queued
                if data is not None:
                    # Not abandoned if cancelled: the write finishes before anything else can
                    # write the file.
                    await anyio.to_thread.run_sync(self._write, data)
                self._wrote(queued)
        finally:
            self._writing = False
            data, self._unwritten = self._unwritten, None
            if data is not None:
                self._write(data)
            self._wrote(self._queued)

    def _wrote(self, queued: int) -> None:
        self._written = queued
        if self._on_written is not None:
            self._on_written.set()
            self._on_written = anyio.Event()

    async def saved(self) -> None:
        """Wait until every save made so far is written (a revocation's, say)."""
        queued = self._queued
        while self._writing and self._written < queued and self._on_written is not None:
            await self._on_written.wait()

    def _save(self) -> None:
        if self._path is None:
            return
        entries = [_to_json(s) for s in self._by_endpoint.values()]
        if self._host_id is not None:
            entries = [entry | {"host": self._host_id} for entry in entries]
        if self.role_links is not None:
            entries = [
                entry | {"links": self.role_links} if entry["owner_kind"] == "browser" else entry
                for entry in entries
            ]
        data = json.dumps(entries, indent=1).encode("utf-8")
        if self._writing and self._wake is not None:
            self._unwritten = data
            self._queued += 1
            self._wake.set()
        else:
            self._write(data)

    def _write(self, data: bytes) -> None:
        assert self._path is not None
        try:
            write_private_file(self._path, data, overwrite=True)
        except OSError as exc:
            # Kept in memory all the same: only a restart would lose the change.
            logger.warning("cannot save the push subscriptions to %s: %s", self._path, exc)


def _to_json(subscription: Subscription) -> dict[str, str]:
    return {
        "owner_kind": subscription.owner.kind,
        "owner": subscription.owner.id,
        "endpoint": subscription.endpoint,
        "p256dh": b64url(subscription.p256dh),
        "auth": b64url(subscription.auth),
        "role": subscription.role,
        "browser": subscription.browser,
    }


def _from_json(entry: Any) -> Subscription | None:
    if not isinstance(entry, dict):
        return None
    fields = ("owner_kind", "owner", "endpoint", "p256dh", "auth", "role", "browser")
    if not all(isinstance(entry.get(name), str) for name in fields):
        return None
    kind = entry["owner_kind"]
    if kind not in ("person", "browser") or entry["role"] not in ("view", "drive"):
        return None
    try:
        p256dh, auth = b64url_decode(entry["p256dh"]), b64url_decode(entry["auth"])
    except ValueError:
        return None
    if len(p256dh) != PUSH_KEY_SIZE or len(auth) != PUSH_AUTH_SIZE:
        return None
    return Subscription(
        owner=Owner(kind=kind, id=entry["owner"]),
        endpoint=entry["endpoint"],
        p256dh=p256dh,
        auth=auth,
        role=entry["role"],
        browser=entry["browser"],
    )
