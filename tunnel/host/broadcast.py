"""`Broadcaster`: the live tail and presence of the shared session, sealed once for every teammate.

One per host (docs/application.md, "The broadcast"). It follows the log as one subscriber and
the presence as one watcher; what it reads it packs into casts (several messages each when they
come together), seals with the epoch key, signs with the host key (`tunnel.e2e.broadcast`), and
queues on the host's link as one `cast` frame, which the relay copies to every joined channel. So
the host's CPU and uplink per item do not grow with the number of teammates.

Its state changes only in `_cast`, which never awaits: the counter of the next cast, the last
item seq cast and the member list cast so far always agree, and a channel's `broadcast` message
(`start_message`, built inside the same kind of instant) says exactly where the casts it will get
begin.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import anyio
import msgpack

from tunnel.app import host_messages as out
from tunnel.app.entries import SNAPSHOT_PAGE_BYTES, SNAPSHOT_PAGE_ITEMS, encode_entry
from tunnel.e2e.broadcast import CAST_OVERHEAD, BroadcastKey, CastSealer
from tunnel.e2e.identity import HostIdentity
from tunnel.host.presence import Listing, Presence, wire_members
from tunnel.link import Link
from tunnel.log import Event, Item, Log
from tunnel.proto import DEFAULT_LIMITS, LocalProtocolError

logger = logging.getLogger("tunnel.broadcast")

MAX_CAST_PLAINTEXT = SNAPSHOT_PAGE_BYTES
"""Bytes of messages one cast carries at most: with a bin header (5 bytes at most) per message,
at most SNAPSHOT_PAGE_ITEMS messages, and the cast's overhead, it fits one `data` frame, as a
snapshot page does."""

assert (
    DEFAULT_LIMITS.largest_data
    >= MAX_CAST_PLAINTEXT + 5 * (SNAPSHOT_PAGE_ITEMS + 1) + CAST_OVERHEAD
)


CAST_INTERVAL = 0.04
"""Seconds between casts while the log keeps giving. An entry that comes this long or longer
after the one before it is cast at once (an idle session's); one that comes sooner belongs to a
stream, whose entries are gathered into one cast per interval, so a stream is cast in its first
entry, one cast per 40 ms it lasts, and its end. Every teammate verifies every cast's signature
(about 0.1 ms in Python), so the number of casts, not of items, is what a burst costs each of
them; 40 ms is below what a reader of a stream notices."""

BURST_PAUSE = 0.005
"""Seconds without an entry after which a stream is taken to have paused and what it gave is cast
without waiting for the interval, or twice the longest gap seen in the stream when that is longer
(a stream of ten conversations written at once comes to each in clumps): a fast burst's last
entries wait about 5 ms, not up to the interval."""

PRESENCE_SHARE = 0.5
"""A presence cast waits until the changes it carries number this share of the joined channels
(at least one). Each cast is a message to every joined channel, so a cast carrying at least
half as many changes as it has readers costs each change at most two messages: as a room
fills, each cast waits for half again as many joins as the room held at the last one, and a
burst of N joins costs about 3 N presence messages in all (besides each joiner's `broadcast`
message), however fast or slow the machine and however many attach at once."""

PRESENCE_QUIET = 0.5
"""Seconds without a change after which the changes waiting are cast, however few: the last
joins of a burst, or a lone join into a room of three or more, are told this long after at
most. While changes keep coming, their count (PRESENCE_SHARE), not the clock, decides when to
cast; this is long enough that a busy machine, whose joins come further apart, rarely stalls
that long in the middle of a burst (each such stall costs one cast to every joined channel)."""

PRESENCE_LATEST = 5.0
"""Seconds a presence change waits at most. A steady trickle of joins and leaves, each within
PRESENCE_QUIET of the last, into a large room would otherwise wait for changes numbering half
the room: minutes, at one change every few tenths of a second into a room of hundreds. Bursts
reach their share long before this, so it costs them at most one cast to every channel per
PRESENCE_LATEST."""


class Broadcaster:
    """Casts the session's live entries and presence changes to the joined channels."""

    def __init__(
        self,
        *,
        identity: HostIdentity,
        log: Log,
        conversation_id: str,
        presence: Presence,
        link: Callable[[], Link | None],
        group: int = 0,
    ) -> None:
        """`link` returns the host's link to the relay now, or None while there is none;
        `group` is the broadcast group the casts go to on it (one per conversation,
        docs/protocol.md "Broadcast")."""
        self.group = group
        self._identity = identity
        self._log = log
        self._conversation = conversation_id
        self._presence = presence
        self._link = link
        self._sealer = CastSealer(identity, BroadcastKey.generate())
        self.last_seq = -1
        """The seq of the last item cast (or, before any, of the log's head when it started)."""
        # Who is attached as of the last presence cast: what a joining channel is told.
        self._listing: Listing = presence.listing()
        # `_listing`'s members as a joiner's `broadcast` message lists them, packed once per
        # change of `_listing` (None until a join needs it): a burst of joins costs one packing
        # each presence cast, not one per join.
        self._listed: bytes | None = None
        self._last_cast = float("-inf")
        self._last_entry = float("-inf")
        # The longest gap between two entries of the stream going on (0 after a quiet moment).
        self._longest_gap = 0.0
        # The channels that were handed over; while there is none, nothing is sealed.
        self._joined: set[object] = set()
        # Set (and replaced) each time last_seq moves: `wait_cast` waits on it.
        self._moved = anyio.Event()
        # Set by `part_all`: its conversation closed, and its group may be another's now.
        self._parted = False

    # -- what channels use ------------------------------------------------------------------

    def start_message(self, you: int) -> bytes:
        """The `broadcast` message for a channel joining now: call it at the instant of the join
        (`HostChannel.hand_over`), so the next cast is the first the channel gets."""
        listed = self._listed
        if listed is None:
            listed = self._listed = out.pack_members(wire_members(self._listing.members))
        return out.encode_broadcast_start(
            epoch=self._sealer.key.epoch,
            key=self._sealer.key.key,
            public_key=self._identity.public_key,
            counter=self._sealer.counter,
            members=listed,
            count=self._listing.count,
            you=you,
        )

    def joined(self, channel: object) -> None:
        """`channel` now gets the casts (called at the instant of its join); once this
        broadcast has parted for good, it leaves again at once: its group may serve another
        conversation."""
        if self._parted:
            leave = getattr(channel, "leave_broadcast", None)
            if callable(leave):
                leave()
            return
        self._joined.add(channel)

    def left(self, channel: object) -> None:
        """`channel` no longer gets the casts (parted, or gone)."""
        self._joined.discard(channel)

    def part_all(self) -> None:
        """Take every joined channel out of the broadcast (its conversation closed): another
        conversation may use this group next, and its casts must not reach them."""
        self._parted = True
        for channel in list(self._joined):
            leave = getattr(channel, "leave_broadcast", None)
            if callable(leave):
                leave()
        self._joined.clear()

    async def wait_cast(self, seq: int) -> None:
        """Return once the items up to `seq` have been cast (or were, to nobody)."""
        while self.last_seq < seq:
            await self._moved.wait()

    def new_epoch(self) -> None:
        """Start a new epoch key (on revoke): channels joined from now on get the new one, and
        whoever held the old key reads nothing cast after this."""
        self._sealer = CastSealer(self._identity, BroadcastKey.generate())

    # -- running ----------------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Cast until cancelled; started (task_status) once it follows the log."""
        info = await self._log.get_conversation(self._conversation)
        self.last_seq = -1 if info is None else info.last_seq
        async with (
            self._log.subscribe(self._conversation, after=self.last_seq) as sub,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(self._follow_presence)
            task_status.started()
            while True:
                entries = await sub.receive_batch(SNAPSHOT_PAGE_ITEMS)
                now = anyio.current_time()
                gap = now - self._last_entry
                self._last_entry = now
                if gap >= CAST_INTERVAL:
                    self._longest_gap = 0.0  # after a quiet moment: cast at once
                    deadline = now
                else:
                    self._longest_gap = max(self._longest_gap, gap)
                    deadline = self._last_cast + CAST_INTERVAL
                while len(entries) < SNAPSHOT_PAGE_ITEMS and now < deadline:
                    pause = min(CAST_INTERVAL, max(BURST_PAUSE, 2 * self._longest_gap))
                    with anyio.move_on_after(min(deadline - now, pause)) as paused:
                        entries += await sub.receive_batch(SNAPSHOT_PAGE_ITEMS - len(entries))
                    now = anyio.current_time()
                    if paused.cancelled_caught:
                        break
                    self._longest_gap = max(self._longest_gap, now - self._last_entry)
                    self._last_entry = now
                await self._writable()
                self._cast_entries(entries)
                self._last_cast = anyio.current_time()

    def _cast_entries(self, entries: list[Item | Event]) -> None:
        """Cast `entries` in order, as few casts as fit."""
        messages: list[bytes] = []
        size = 0
        last: int | None = None
        for entry in entries:
            plaintext = encode_entry(entry)
            if plaintext is None:
                continue
            if messages and size + len(plaintext) > MAX_CAST_PLAINTEXT:
                self._cast(messages, last)
                messages, size, last = [], 0, None
            messages.append(plaintext)
            size += len(plaintext)
            if isinstance(entry, Item):
                last = entry.seq
        if messages:
            self._cast(messages, last)

    async def _follow_presence(self) -> None:
        """Cast who came and went, all changes since the last cast in one, once they number
        PRESENCE_SHARE of the joined channels, stop coming for PRESENCE_QUIET, or the first of
        them has waited PRESENCE_LATEST."""
        # The first pass casts at once what changed since this broadcaster was made: a channel
        # may have joined from its `start_message` before `run` started.
        seen: int | None = None
        while True:
            if seen is not None:
                await self._presence.wait_changed(seen)
                latest = anyio.current_time() + PRESENCE_LATEST
                while self._presence.version - seen < max(
                    1, math.ceil(len(self._joined) * PRESENCE_SHARE)
                ):
                    wait = min(PRESENCE_QUIET, latest - anyio.current_time())
                    if wait <= 0:
                        break
                    with anyio.move_on_after(wait) as quiet:
                        await self._presence.wait_changed(self._presence.version)
                    if quiet.cancelled_caught:
                        break
                await self._writable()
            seen = self._presence.version
            now = self._presence.listing()
            joined, left = now.changes_since(self._listing)
            if joined or left or now.count != self._listing.count:
                # At most LISTED_MEMBERS joined and as many left: it fits one cast.
                delta = out.PresenceDelta(joined=wire_members(joined), left=left, count=now.count)
                self._cast([out.encode(delta)], None, listing=now)

    async def _writable(self) -> None:
        # Casts take no channel window: while the relay reads the host's link slower than the
        # host writes, wait here, so what waits is the log's (bounded) and not a queue of ours.
        link = self._link()
        if link is not None:
            await link.wait_writable()

    def _cast(
        self,
        messages: list[bytes],
        last_seq: int | None,
        *,
        listing: Listing | None = None,
    ) -> None:
        """Seal, sign and queue one cast; never awaits (see the module)."""
        if last_seq is not None:
            self.last_seq = last_seq
            moved, self._moved = self._moved, anyio.Event()
            moved.set()
        if listing is not None:
            self._listing, self._listed = listing, None
        link = self._link()
        if not self._joined or link is None or link.closing:
            return  # nobody to cast to: a channel joining later starts from the state above
        cast = self._sealer.seal(msgpack.packb(messages, use_bin_type=True))
        try:
            link.connection.cast(cast, group=self.group)
        except LocalProtocolError as exc:
            if link.connection.failure is None:
                # Larger than this relay's limits allow: the joined channels see a counter gap
                # and catch up on their own channels.
                logger.warning("a cast was too large for the relay (%s); teammates catch up", exc)
            return  # else the link failed, and its channels are gone with it
        link.flush()
