"""Why one relay node believes another: what nodes leave in Redis (ownership records, takeover
announcements) sealed with the cluster secret and opened again, a record of seals already used,
and the warning about refused ones said once in a while. No I/O (docs/cluster.md, "What Redis
is trusted with").

Redis is shared infrastructure, not a member of the cluster: a party that can write to it must
not be able to say which node serves a host, nor make a node drop one. So every value a node
reads back from Redis carries an HMAC-SHA256 under the cluster secret, over a label naming the
kind of value, the Redis key or channel it was written to, and the value itself, which says until
when (a record) or since when (an announcement) it holds.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import heapq
import hmac
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = [
    "ANNOUNCEMENT_LABEL",
    "RECORD_LABEL",
    "Announcement",
    "Owner",
    "Seen",
    "SeenSignatures",
    "ThrottledWarnings",
    "UnverifiedError",
    "open_announcement",
    "open_record",
    "seal_announcement",
    "seal_record",
]

RECORD_LABEL = "agent-tunnel/v1 host-record"
"""What a host's ownership record is signed as: a record cannot pass for an announcement."""

ANNOUNCEMENT_LABEL = "agent-tunnel/v1 owners-announcement"
"""What a takeover announcement is signed as."""

MAX_SEALED = 4096
"""Longest sealed value read, in characters (a record is under 300): a longer one is refused
before any work is spent on it."""

_MAC_SIZE = 43
"""Characters of an HMAC-SHA256 in base64url without padding."""


class UnverifiedError(Exception):
    """A value read from Redis that no node of this cluster wrote as it is, or that no longer
    holds: malformed, signed with another secret, written for another key, or out of date."""


# -- sealing ------------------------------------------------------------------------------------


def _mac(secret: bytes, label: str, name: str, body: str) -> str:
    # JSON of the three, not a separator-joined string: no choice of host id (part of the key
    # name) or body can make two different triples sign the same bytes.
    message = json.dumps([label, name, body], separators=(",", ":")).encode()
    digest = hmac.new(secret, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _seal(secret: bytes, label: str, name: str, body: Mapping[str, object]) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return f"{_mac(secret, label, name, text)}.{text}"


def _open(secret: bytes, label: str, name: str, raw: bytes | str) -> dict[str, object]:
    """The body of a sealed value, once its MAC holds for `label` and `name`; else
    UnverifiedError."""
    if isinstance(raw, bytes):
        if len(raw) > MAX_SEALED:
            raise UnverifiedError("too long")
        try:
            raw = raw.decode()
        except UnicodeDecodeError:
            raise UnverifiedError("not text") from None
    if len(raw) > MAX_SEALED:
        raise UnverifiedError("too long")
    mac, dot, text = raw.partition(".")
    if not dot or len(mac) != _MAC_SIZE:
        raise UnverifiedError("not signed")
    # Constant time: how long a refusal takes must not tell how much of a guess was right.
    if not hmac.compare_digest(mac.encode(), _mac(secret, label, name, text).encode()):
        raise UnverifiedError("bad signature")
    try:
        body = json.loads(text)
    except ValueError:
        raise UnverifiedError("malformed") from None
    if not isinstance(body, dict):
        raise UnverifiedError("malformed")
    return body


def _text(body: Mapping[str, object], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str):
        raise UnverifiedError("malformed")
    return value


def _seconds(body: Mapping[str, object], name: str) -> int:
    value = body.get(name)
    if type(value) is not int:
        raise UnverifiedError("malformed")
    return value


def _instance(body: Mapping[str, object]) -> bytes | None:
    value = body.get("instance")
    if value is None:
        return None
    if not isinstance(value, str):
        raise UnverifiedError("malformed")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise UnverifiedError("malformed") from None


# -- ownership records --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Owner:
    """A host's ownership record in Redis: which node serves it, and which host process."""

    node_url: str
    """The owner node's URL for other nodes (its `--node-url`, normal form)."""

    run: str
    """Random per node process: a record a node wrote before it restarted is not its own, and a
    node-to-node signature made for one run opens nothing on the next (docs/cluster.md)."""

    instance: bytes | None
    """The host process's instance (from its hello): a reconnect of the same process."""


def seal_record(secret: bytes, key: str, owner: Owner, *, expires: int) -> str:
    """`owner` as stored at the Redis key `key`, valid until `expires` (unix seconds)."""
    body = {
        "exp": expires,
        "instance": None if owner.instance is None else owner.instance.hex(),
        "node": owner.node_url,
        "run": owner.run,
    }
    return _seal(secret, RECORD_LABEL, key, body)


def open_record(secret: bytes, key: str, raw: bytes | str, *, now: float, max_skew: float) -> Owner:
    """The record read from the Redis key `key`; UnverifiedError unless a node sealed it for
    that very key, and it expired no earlier than `max_skew` seconds ago (the writer's clock may
    be that far behind ours)."""
    body = _open(secret, RECORD_LABEL, key, raw)
    expires = _seconds(body, "exp")
    owner = Owner(node_url=_text(body, "node"), run=_text(body, "run"), instance=_instance(body))
    if now > expires + max_skew:
        raise UnverifiedError("expired")
    return owner


# -- announcements ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Announcement:
    """A node says, on the owners channel, that it serves a host now."""

    host_id: str
    """The host it took over."""

    node_url: str
    """The announcing node's URL for other nodes."""

    run: str
    """The announcing node's run (`Owner.run`)."""

    issued: int
    """When it was said, in unix seconds of the announcing node's clock."""

    nonce: str
    """Random: every announcement is unique, so a node acts on each one once."""


def seal_announcement(secret: bytes, channel: str, announcement: Announcement) -> str:
    """`announcement` as published on `channel`."""
    body = {
        "host": announcement.host_id,
        "iat": announcement.issued,
        "node": announcement.node_url,
        "nonce": announcement.nonce,
        "run": announcement.run,
    }
    return _seal(secret, ANNOUNCEMENT_LABEL, channel, body)


def open_announcement(
    secret: bytes, channel: str, raw: bytes | str, *, now: float, max_skew: float
) -> Announcement:
    """The announcement received on `channel`; UnverifiedError unless a node sealed it for that
    channel within `max_skew` seconds of `now`. A replay within that window verifies: the caller
    refuses a nonce it has seen (`SeenSignatures`)."""
    body = _open(secret, ANNOUNCEMENT_LABEL, channel, raw)
    announcement = Announcement(
        host_id=_text(body, "host"),
        node_url=_text(body, "node"),
        run=_text(body, "run"),
        issued=_seconds(body, "iat"),
        nonce=_text(body, "nonce"),
    )
    if not announcement.nonce or abs(now - announcement.issued) > max_skew:
        raise UnverifiedError("out of date")
    return announcement


# -- seals used once ----------------------------------------------------------------------------


class Seen(enum.Enum):
    """What `SeenSignatures.remember` found."""

    NEW = "new"
    """Not seen before: now recorded."""

    REPLAYED = "replayed"
    """Seen before, within its validity window: a replay."""

    FULL = "full"
    """The record is full: refused rather than let it grow."""


class SeenSignatures:
    """Signatures (or nonces) accepted that are still recent enough to be accepted again: one
    presented again within its validity window finds itself here and is refused.

    Bounded: entries are dropped once their signature is too old to pass the time check anyway,
    and when `max_entries` are held, further ones are refused until some expire, rather than let
    the record grow. Only signatures that verified are recorded, so only a holder of the cluster
    secret can fill it.
    """

    def __init__(self, max_entries: int = 65_536) -> None:
        self.max_entries = max_entries
        """Signatures held at most. 65,536 within one window (about 30 s; up to 60 s for a
        signature stamped ahead by a fast clock) is over 1,000 a second, and under 16 MiB."""
        self._until: dict[str, float] = {}
        # A heap, not a queue: signatures arrive stamped by different nodes' clocks, so they do
        # not expire in the order they arrive.
        self._expiries: list[tuple[float, str]] = []

    def __len__(self) -> int:
        return len(self._until)

    def remember(self, signature: str, *, until: float, now: float) -> Seen:
        """Record `signature` as used until `until` (unix seconds), unless it was recorded
        already or the record is full; say which."""
        self.prune(now)
        if signature in self._until:
            return Seen.REPLAYED
        if len(self._until) >= self.max_entries:
            return Seen.FULL
        self._until[signature] = until
        heapq.heappush(self._expiries, (until, signature))
        return Seen.NEW

    def prune(self, now: float) -> None:
        """Forget the signatures that are too old to be accepted at `now`."""
        while self._expiries and self._expiries[0][0] < now:
            _, signature = heapq.heappop(self._expiries)
            del self._until[signature]


# -- the log ------------------------------------------------------------------------------------


class ThrottledWarnings:
    """Warnings said the first time, then at most once per `interval` seconds each, with how
    many like it were held back: whoever can write to Redis can send forgeries by the thousand,
    and the log must not grow with them.

    Keyed by the message's format string, so the held-back count is per kind of refusal; the
    format strings are this program's own, so the keys are few.
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval = interval
        self._clock = clock
        # Format string -> (when it was last said, how many were held back since).
        self._said: dict[str, tuple[float, int]] = {}

    def warning(self, message: str, *args: object) -> None:
        """Log `message % args` as a warning, unless one like it was logged within the interval
        (then it is only counted, and said with the next one that is logged)."""
        now = self._clock()
        said = self._said.get(message)
        if said is not None and now - said[0] < self._interval:
            self._said[message] = (said[0], said[1] + 1)
            return
        held = 0 if said is None else said[1]
        self._said[message] = (now, 0)
        if held:
            self._logger.warning(message + " (and %d more like it since)", *args, held)
        else:
            self._logger.warning(message, *args)
