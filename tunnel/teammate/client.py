"""The Python teammate client: attach to a host through the relay with a share link.

`connect_teammate(link, name=...)` says hello to the relay with the link's token, opens one
`session` channel with an ephemeral key and the link's role (`tunnel.e2e.opening`), and
yields a `TeammateSession` that sends and receives end-to-end encrypted application messages
(docs/security.md). Every way the session can end is a `TeammateError` carrying the close code
(docs/protocol.md, "Close codes").
The live tail may come as casts of the host's broadcast: `receive` opens them (checking the
host's signature), hands on their messages as if they came on the channel, each item once, and
catches up by cursor on its own when one does not open or the relay cuts the channel
(docs/application.md, "The broadcast").

    async with connect_teammate(link, name="alice") as session:
        await session.subscribe(tail=50)        # the last 50 items, then the live tail
        ...                                     # one task reads session.receive()
        page = await session.history(before=first_seq)   # from another task: earlier items
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, ClassVar

import anyio
import msgpack

from tunnel.app.errors import BadRequest
from tunnel.app.host_messages import (
    BroadcastStart,
    Error,
    HistoryPage,
    ItemMessage,
    Member,
    PresenceDelta,
    PresenceMessage,
    Snapshot,
    decode_host_message,
    encode,
    pack,
    parse,
    parse_map,
)
from tunnel.app.requests import MAX_HISTORY_ITEMS, MAX_SEQ, History, Subscribe, encode_request
from tunnel.app.roster import Roster
from tunnel.e2e.broadcast import CastError, CastOpener
from tunnel.e2e.channel import SealedChannel
from tunnel.e2e.crypto import ChannelCrypto, DecryptionError, ShareLink, e2e_root
from tunnel.e2e.opening import OpeningError, TeammateOpening
from tunnel.errors import TunnelError, describe_close
from tunnel.handshake import HelloError, check_name, teammate_hello
from tunnel.link import (
    Casted,
    ChannelClosedError,
    DialSettings,
    LinkChannel,
    LinkClosedError,
    RelayUnreachableError,
    dial,
)
from tunnel.proto import Limits
from tunnel.proto.codes import CloseCode

__all__ = [
    "DecryptionFailedError",
    "HostGoneError",
    "LimitReachedError",
    "RefusedError",
    "RelayUnreachableError",
    "RevokedError",
    "TeammateError",
    "TeammateSession",
    "UnauthorizedError",
    "connect_teammate",
    "error_for",
]


logger = logging.getLogger("tunnel.teammate")


class TeammateError(TunnelError):
    """The session ended or could not start; `code` says why (a close code)."""

    default_message: ClassVar[str] = "the session ended"

    def __init__(self, code: int, reason: str = "", *, by_peer: bool = True) -> None:
        super().__init__(
            f"{self.default_message} ({describe_close(code, reason)})",
            code=code,
            reason=reason,
            by_peer=by_peer,
        )


class RefusedError(TeammateError):
    """4001: the host declined this channel (unknown path, not approved, malformed open)."""

    default_message = "the host refused the session"


class UnauthorizedError(TeammateError):
    """4002: the relay does not accept this link's token (wrong, or for another host)."""

    default_message = "the relay does not accept this link"


class DecryptionFailedError(TeammateError):
    """4003: a message did not authenticate (tampered, or the link's secret is wrong)."""

    default_message = "end-to-end decryption failed"


class HostGoneError(TeammateError):
    """4005: the host is offline or its link to the relay dropped."""

    default_message = "the host is offline"


class LimitReachedError(TeammateError):
    """4006: a relay or host limit was reached (connections, teammates, channels, sizes)."""

    default_message = "a limit was reached"


class RevokedError(TeammateError):
    """4008: the host revoked the share links; ask for a new one."""

    default_message = "the share link was revoked"


_ERRORS: dict[int, type[TeammateError]] = {
    CloseCode.REFUSED: RefusedError,
    CloseCode.UNAUTHORIZED: UnauthorizedError,
    CloseCode.DECRYPTION_FAILED: DecryptionFailedError,
    CloseCode.HOST_GONE: HostGoneError,
    CloseCode.LIMIT_REACHED: LimitReachedError,
    CloseCode.REVOKED: RevokedError,
}


def error_for(code: int, reason: str = "", *, by_peer: bool = True) -> TeammateError:
    """Return the TeammateError (subclass) for a close code."""
    return _ERRORS.get(code, TeammateError)(code, reason, by_peer=by_peer)


def closed_error(closed: TunnelError) -> TeammateError:
    """Return the TeammateError for a closed link or channel."""
    return error_for(closed.code, closed.reason, by_peer=closed.by_peer)


class _HistoryWait:
    """One `history()` call waiting for its answer, which `receive()` hands over."""

    def __init__(self, before: int) -> None:
        self.before = before
        self.done = anyio.Event()
        self.page: HistoryPage | None = None
        self.error: TeammateError | BadRequest | None = None


class TeammateSession(SealedChannel):
    """One attached session: plaintext messages in and out over an encrypted channel.

    The channel keys need the host's signed answer, its first message on the channel
    (docs/security.md, "Opening a channel"): the first send or receive waits for it. Every way
    the session ends is a TeammateError.
    `subscribe()` and `history()` send the two requests that read the log
    (docs/application.md); every other request is `send(encode_request(...))`.
    """

    def __init__(self, channel: LinkChannel, *, link: ShareLink, opening: TeammateOpening) -> None:
        async def receive_answer() -> ChannelCrypto:
            try:
                answer = await channel.receive()
            except ChannelClosedError as exc:
                raise closed_error(exc) from None
            try:
                return opening.finish(answer)
            except OpeningError as exc:
                channel.close_soon(exc.code, exc.reason)
                raise error_for(exc.code, exc.reason, by_peer=False) from None

        super().__init__(channel, receive_answer)
        self.link = link
        """The share link this session was opened with."""
        # One history request at a time: its answer is told apart by its `before` alone.
        self._history_lock = anyio.Lock()
        self._history_wait: _HistoryWait | None = None
        # Who is attached: the host sends the whole list once, then what changed. As many as
        # the host's presence holds, which the relay's teammate limit bounds.
        self._roster = Roster()
        # The host's broadcast (docs/application.md, "The broadcast"): the last item seq held,
        # the opener of the epoch while the channel is in it, the messages of the last cast
        # still to hand on (one cast's worth at most), and whether a resubscribe of ours is
        # catching up, whose snapshot is handed on as items.
        self._cursor: int | None = None
        self._opener: CastOpener | None = None
        self._queued: deque[bytes] = deque()
        self._catching_up = False

    @property
    def role(self) -> str:
        """The role of the link: "view" or "drive"."""
        return self.link.role

    @property
    def host_id(self) -> str:
        """The host this session is attached to."""
        return self.link.host_id

    @property
    def members(self) -> list[Member]:
        """Who is attached, as of the last presence message `receive()` returned, in the order
        they joined; `you` says which of them this session is."""
        return self._roster.members

    @property
    def you(self) -> int | None:
        """The member id of this session, once the host's first presence message said it."""
        return self._roster.you

    async def send(self, plaintext: bytes) -> None:
        """Encrypt and send one message, waiting for window. Raises TeammateError once closed."""
        try:
            await super().send(plaintext)
        except ChannelClosedError as exc:
            raise closed_error(exc) from None

    async def receive(self) -> bytes:
        """Return the next decrypted message. Raises TeammateError once the session ended.

        While a `history()` call waits, its answer is handed to it and not returned here.
        Presence arrives as the host sends it, the whole list once and then what changed
        (docs/application.md); `members` holds the list they make, already updated when the
        message is returned.
        """
        while True:
            if self._queued:
                return self._queued.popleft()
            try:
                message = await super().receive_any()
                if isinstance(message, Casted):
                    await self._on_cast(message.data)
                elif not self._hand_over(message):
                    self._queued.extend(await self._on_message(message))
                continue
            except ChannelClosedError as exc:
                error = closed_error(exc)
            except DecryptionError:
                error = DecryptionFailedError(CloseCode.DECRYPTION_FAILED, "from the host")
            except TeammateError as exc:  # a catch-up's subscribe, on a channel that ended
                error = exc
            wait = self._history_wait
            if wait is not None:
                wait.error = error
                wait.done.set()
            raise error from None

    async def subscribe(self, after: int | None = None, *, tail: int | None = None) -> None:
        """Ask for a snapshot, then the live tail; they arrive through `receive()`.

        `after` None is a fresh join: the snapshot holds the last `tail` items, or with `tail`
        None the host's default (`DEFAULT_HISTORY_ITEMS`, at most one page). Its pages say
        where it starts (`Snapshot.first_seq`) and whether the log holds items before that
        (`Snapshot.earlier`): fetch those with `history(before=first_seq)`. Its first page's
        `Snapshot.context` holds the items from before it whose state still holds (the agent's
        settings and commands, the plan, open permission requests): apply them, do not list them.
        `after` set is a resume: every item after it, exactly once (-1: the whole log); `tail`
        must then be None. A new subscribe replaces the previous one. Raises ValueError for a
        `tail` with an `after`, which the host would refuse.
        """
        if tail is not None and after is not None:
            raise ValueError("tail goes only with after=None: a resume gets every item after it")
        self._catching_up = False
        await self.send(encode_request(Subscribe(after=after, tail=tail)))

    async def history(self, before: int, limit: int = MAX_HISTORY_ITEMS) -> HistoryPage:
        """Fetch the newest page of stored items with seq < `before`, at most `limit` (1 to
        `MAX_HISTORY_ITEMS`); viewers may too.

        Returns the page: `items` in seq order (as wire maps; none that the client holds if
        `before` is the oldest seq it holds), and `more`, whether still earlier items exist;
        walk back with `before=page.items[0]["seq"]`. The answer arrives on the channel, so
        another task must be reading `receive()` meanwhile; it hands the answer here. One call
        at a time (others wait their turn).

        Raises ValueError for a `before` or `limit` out of range, BadRequest when the host
        refuses the request (a host from before `history` does: the reader sees its `error`
        too), and TeammateError if the session ends first.
        """
        if not 0 <= before <= MAX_SEQ or not 1 <= limit <= MAX_HISTORY_ITEMS:
            raise ValueError(f"before must be 0 to {MAX_SEQ}, limit 1 to {MAX_HISTORY_ITEMS}")
        request = encode_request(History(before=before, limit=limit))
        async with self._history_lock:
            wait = _HistoryWait(before)
            self._history_wait = wait
            try:
                await self.send(request)
                await wait.done.wait()
            finally:
                self._history_wait = None
        if wait.error is not None:
            raise wait.error
        assert wait.page is not None  # set with done, unless error was
        return wait.page

    # -- the live tail, on the channel or through the broadcast -------------------------------

    async def _on_message(self, plaintext: bytes) -> list[bytes]:
        """What to hand on of a message that came on the channel, after keeping the cursor,
        the broadcast and presence up to date."""
        try:
            wire = decode_host_message(plaintext)
        except BadRequest:
            return [plaintext]  # the reader sees it, and what it does with a malformed message
        op = wire["op"]
        if op == "item":
            return [plaintext] if self._take_item(wire) else []
        if op == "snapshot":
            return self._on_snapshot(plaintext, wire)
        if op == "broadcast":
            return self._on_broadcast_start(plaintext)
        if op == "presence":
            self._track_presence(wire)
        return [plaintext]

    def _on_snapshot(self, plaintext: bytes, wire: Mapping[str, Any]) -> list[bytes]:
        # The host took the channel out of the broadcast before it sent this.
        self._opener = None
        try:
            snapshot = parse_map(wire)
        except BadRequest:
            return [plaintext]
        assert isinstance(snapshot, Snapshot)
        if not self._catching_up or snapshot.reset:
            self._catching_up = False
            self._cursor = snapshot.last_seq
            return [plaintext]
        # Ours, to catch up after the broadcast failed: hand on the items the reader lacks.
        items = [
            encode(ItemMessage(item=item)) for item in snapshot.items if self._take_item(item, True)
        ]
        if not snapshot.more:
            self._catching_up = False
        return items

    def _on_broadcast_start(self, plaintext: bytes) -> list[bytes]:
        try:
            wire = decode_host_message(plaintext)
            start = parse_map(wire)
            assert isinstance(start, BroadcastStart)
            self._opener = CastOpener(
                host_id=self.host_id,
                public_key=start.public_key,
                epoch=start.epoch,
                key=start.key,
                counter=start.counter,
            )
        except (BadRequest, CastError):
            # Not the host's key: whoever sent this is not the host of the link.
            self.close_soon(CloseCode.DECRYPTION_FAILED, "not the host's broadcast")
            raise DecryptionFailedError(
                CloseCode.DECRYPTION_FAILED, "the broadcast is not the host's"
            ) from None
        self._roster.apply(PresenceMessage(members=start.members, you=start.you))
        # Handed on as the whole list it is, from the members as they came (checked above).
        return [pack({"op": "presence", "members": wire["members"], "you": start.you})]

    async def _on_cast(self, cast: bytes | None) -> None:
        """Open a cast and queue its messages; on a cut, a cast that does not open or a gap,
        catch up on the channel."""
        opener = self._opener
        if opener is None:
            return  # not in the broadcast (yet, or any more): this one is not for us
        if cast is None:
            await self._catch_up("the relay cut this channel from the broadcast")
            return
        try:
            messages = _cast_messages(opener.open(cast))
        except CastError as exc:
            await self._catch_up(str(exc))
            return
        accepted: list[bytes] = []
        for plaintext in messages:
            try:
                wire = decode_host_message(plaintext)
            except BadRequest:
                accepted.append(plaintext)
                continue
            if wire["op"] == "item":
                taken = self._take_item(wire, from_cast=True)
                if taken is None:
                    self._queued.extend(accepted)
                    await self._catch_up("an item missing from the broadcast")
                    return
                if not taken:
                    continue
            elif wire["op"] == "presence":
                self._track_presence(wire)
            accepted.append(plaintext)
        self._queued.extend(accepted)

    def _take_item(self, wire: Mapping[str, Any], from_cast: bool = False) -> bool | None:
        """Whether to hand on this item message (or item map): not one held already. From a
        cast, None for one past the next expected (a gap)."""
        item = wire.get("item", wire) if wire.get("op") == "item" else wire
        seq = item.get("seq") if isinstance(item, dict) else None
        if type(seq) is not int:
            return True  # the reader sees it, and what it does with a malformed item
        if self._cursor is not None:
            if seq <= self._cursor:
                return False
            if from_cast and seq > self._cursor + 1:
                return None
        self._cursor = seq
        return True

    async def _catch_up(self, why: str) -> None:
        """Leave the broadcast and ask the host, on the channel, for every item after the last
        one held; its snapshot is handed on as items, and a new `broadcast` message follows."""
        logger.info("catching up on the channel: %s", why)
        self._opener = None
        self._catching_up = True
        after = -1 if self._cursor is None else self._cursor
        await self.send(encode_request(Subscribe(after=after, tail=None)))

    def _track_presence(self, wire: Mapping[str, Any]) -> None:
        """Update `members` from a decoded presence message (the whole list, or what changed)."""
        try:
            message = parse_map(wire)
        except BadRequest:
            return  # the reader sees it, and what it does with a malformed message
        if isinstance(message, PresenceMessage | PresenceDelta):
            self._roster.apply(message)

    def _hand_over(self, plaintext: bytes) -> bool:
        """Give `plaintext` to the waiting `history()` call if it is its answer."""
        wait = self._history_wait
        if wait is None:
            return False
        try:
            op = decode_host_message(plaintext)["op"]
            if op not in ("history", "error"):
                return False
            message = parse(plaintext)
        except BadRequest:
            return False  # the reader sees it, and what it does with a malformed message
        if isinstance(message, Error):
            # Errors name no request. The host answers a channel's requests in order and a
            # well-formed history request is refused only by a host from before it, so a
            # bad_request now is taken as the answer; the reader still shows it, as any error.
            if message.code == "bad_request":
                wait.error = BadRequest(message.message)
                wait.done.set()
            return False
        if not isinstance(message, HistoryPage) or message.before != wait.before:
            return False
        wait.page = message
        wait.done.set()
        return True


def _cast_messages(plaintext: bytes) -> list[bytes]:
    """The host messages in an opened cast: a msgpack array of bin (docs/application.md)."""
    try:
        messages = msgpack.unpackb(plaintext, raw=False)
    except Exception as exc:  # msgpack raises many types
        raise CastError("a cast that is not a list of messages") from exc
    if not isinstance(messages, list) or not all(isinstance(m, bytes) for m in messages):
        raise CastError("a cast that is not a list of messages")
    return messages


@asynccontextmanager
async def connect_teammate(
    link: str | ShareLink,
    *,
    name: str = "teammate",
    path: str = "session",
    open_timeout: float = 10.0,
    hello_timeout: float = 10.0,
    ping_interval: float | None = 20.0,
    ping_timeout: float | None = 20.0,
    limits: Limits | None = None,
) -> AsyncIterator[TeammateSession]:
    """Attach to the host of `link` and yield the session; close it on exit.

    Raises ValueError for a malformed link or name, RelayUnreachableError (an OSError) when the
    relay cannot be reached, and TeammateError (with the close code) when the relay or host
    refuses. Admission is not confirmed by the relay: a refused token surfaces as
    UnauthorizedError from the first `receive()`.
    """
    share = ShareLink.parse(link) if isinstance(link, str) else link
    check_name(name)
    settings = DialSettings(
        open_timeout=open_timeout,
        hello_timeout=hello_timeout,
        ping_interval=ping_interval,
        ping_timeout=ping_timeout,
        **({} if limits is None else {"limits": limits}),
    )

    def hello(_relay: object) -> dict[str, object]:
        return teammate_hello(host_id=share.host_id, token=share.token, name=name)

    try:
        where = share.dial_url or share.relay_url
        async with dial(where, "/v1/attach", hello, settings, backlog=1) as mux:
            opening = TeammateOpening(
                root=e2e_root(share.secret, share.host_id),
                host_id=share.host_id,
                relay_url=share.relay_url,
                role=share.role,
                name=name,
            )
            channel = mux.open_channel(path, opening.meta())
            try:
                yield TeammateSession(channel, link=share, opening=opening)
            finally:
                channel.close_soon(CloseCode.NORMAL, "")
    except LinkClosedError as exc:
        raise closed_error(exc) from None
    except HelloError as exc:
        raise TeammateError(exc.code, str(exc)) from None
