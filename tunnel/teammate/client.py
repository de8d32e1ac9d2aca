"""The Python teammate client: attach to a host through the relay with a share link.

`connect_teammate(link, name=...)` says hello to the relay with the link's token, opens one
`session` channel with an ephemeral key and the link's role (`tunnel.e2e.opening`), and
yields a `TeammateSession` that sends end-to-end encrypted requests and returns the typed
events of `tunnel.app.follower` (docs/security.md). Every way the session can end is a
`TeammateError` carrying the close code (docs/protocol.md, "Close codes").
The live tail may come as casts of the host's broadcast: the follower opens them (checking the
host's signature), hands on each item once, and asks for a catch-up by cursor when one does not
open, an item is missing, or the relay cuts the channel (docs/application.md, "The broadcast").

    async with connect_teammate(link, name="alice") as session:
        await session.subscribe(tail=50)        # the last 50 items, then the live tail
        ...                                     # one task reads session.receive()
        page = await session.history(before=first_seq)   # from another task: earlier items
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, ClassVar

import anyio

from tunnel.app.conversation_list import (
    CONVERSATION_OPS,
    ConversationList,
    ConversationStarted,
    parse_conversation_message,
)
from tunnel.app.errors import BadRequest
from tunnel.app.file_view import FileWindow, parse_file
from tunnel.app.follower import CatchingUp, Follower, FollowerError, FollowerEvent, Skipped
from tunnel.app.host_messages import Error, HistoryPage, Member, decode_host_message
from tunnel.app.requests import MAX_HISTORY_ITEMS, MAX_SEQ, History, encode_request
from tunnel.e2e.channel import SealedChannel
from tunnel.e2e.crypto import TAG_SIZE, ChannelCrypto, DecryptionError, ShareLink, e2e_root
from tunnel.e2e.opening import CONFIRMATION, EarlySubscribe, OpeningError, TeammateOpening
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
from tunnel.link.framings import FramingName
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


class TeammateSession:
    """One attached session: typed events in, requests out, over an end-to-end channel.

    A thin I/O layer over `tunnel.app.follower.Follower`, which keeps the cursor, follows the
    host's broadcast, catches up after a cut or a gap and keeps the roster. The channel keys
    need the host's signed answer, its first message on the channel (docs/security.md,
    "Opening a channel"): the first send or receive waits for it. Every way the session ends
    is a TeammateError. `subscribe()` and `history()` send the two requests that read the log
    (docs/application.md); every other request is `send(encode_request(...))`.
    """

    def __init__(self, channel: LinkChannel, *, link: ShareLink, opening: TeammateOpening) -> None:
        async def receive_answer() -> ChannelCrypto:
            try:
                answer = await channel.receive()
            except ChannelClosedError as exc:
                raise closed_error(exc) from None
            try:
                crypto = opening.finish(answer)
            except OpeningError as exc:
                channel.close_soon(exc.code, exc.reason)
                raise error_for(exc.code, exc.reason, by_peer=False) from None
            if opening.offer.subscribe is not None:
                # The key confirmation, at once: the open asked for everything already, and
                # only this shows the host a live teammate, not a replayed open
                # (docs/security.md, "Opening a channel").
                try:
                    await channel.send_sealed(
                        len(CONFIRMATION) + TAG_SIZE, lambda: crypto.send.encrypt(CONFIRMATION)
                    )
                except ChannelClosedError as exc:
                    raise closed_error(exc) from None
            return crypto

        self._sealed = SealedChannel(channel, receive_answer)
        self.link = link
        """The share link this session was opened with."""
        self.follower = Follower(host_id=link.host_id)
        """The session protocol's state: cursor, broadcast, roster (`statistics()`)."""
        early = opening.offer.subscribe
        if early is not None:
            # The open carried the subscribe: the follower takes it as sent.
            self.follower.subscribe(early.after, tail=early.tail)
        # One history request at a time: its answer is told apart by its `before` alone.
        self._history_lock = anyio.Lock()
        self._history_wait: _HistoryWait | None = None
        # The events of the last message or cast still to hand on: one cast's worth at most.
        self._events: deque[FollowerEvent] = deque()
        self.on_file: Callable[[FileWindow], None] | None = None
        """Called with each answer to a `read_file` this teammate sent (they are not events of
        the session); None drops them."""
        self.on_paths: Callable[[dict[str, Any]], None] | None = None
        """Called with each `paths` message (the answer to a `paths` request: workspace paths
        that complete an `@path`); None drops them."""
        self.on_conversations: Callable[[ConversationList | ConversationStarted], None] | None = (
            None
        )
        """Gets the host's list of conversations and the one this teammate started
        (docs/application.md, "Conversations"); None drops them."""
        self.conversations: ConversationList | None = None
        """The host's list as last sent (None until it is, and from a host of one)."""

    @property
    def role(self) -> str:
        """The role of the link: "view" or "drive"."""
        return self.link.role

    @property
    def host_id(self) -> str:
        """The host this session is attached to."""
        return self.link.host_id

    @property
    def max_message_size(self) -> int:
        """Largest plaintext `send` accepts."""
        return self._sealed.max_message_size

    @property
    def closed(self) -> ChannelClosedError | None:
        """Why the channel closed, or None while open."""
        return self._sealed.closed

    @property
    def members(self) -> list[Member]:
        """Who is attached, as far as the host lists them (the first to have attached), as of
        the last `Presence` event `receive()` returned, in the order they joined; `you` says
        which of them this session is."""
        return self.follower.roster.members

    @property
    def member_count(self) -> int:
        """Everyone attached, listed in `members` or not, as of the same event."""
        return self.follower.roster.count

    @property
    def you(self) -> int | None:
        """The member id of this session, once the host's first presence message said it."""
        return self.follower.roster.you

    async def start(self) -> None:
        """Wait for the host's answer and make the keys (every send and receive does this
        first). Raises TeammateError when the relay or the host refused the attachment."""
        try:
            await self._sealed.keys()
        except ChannelClosedError as exc:
            raise closed_error(exc) from None

    def close_soon(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Close the channel without waiting."""
        self._sealed.close_soon(code, reason)

    async def aclose(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Close the channel."""
        await self._sealed.aclose(code, reason)

    async def send(self, plaintext: bytes) -> None:
        """Encrypt and send one message, waiting for window. Raises TeammateError once closed.

        A `subscribe` request goes through `subscribe()`, never here: the follower must know
        it asked, or it refuses the snapshot that answers it (4000)."""
        try:
            await self._sealed.send(plaintext)
        except ChannelClosedError as exc:
            raise closed_error(exc) from None

    async def receive_plaintext(self) -> bytes:
        """Return the next decrypted message as it came, past the follower: for a channel
        that is not a session (an echo, a probe). Raises TeammateError once it ended."""
        try:
            return await self._sealed.receive()
        except ChannelClosedError as exc:
            raise closed_error(exc) from None
        except DecryptionError:
            raise DecryptionFailedError(CloseCode.DECRYPTION_FAILED, "from the host") from None

    async def receive(self) -> FollowerEvent:
        """Return the next event of the session (`tunnel.app.follower`). Raises TeammateError
        once the session ended, also when the host broke the protocol (the channel is then
        closed with the follower's code and reason).

        Casts of the host's broadcast are opened here, each item is returned once, and a
        catch-up is asked for on its own (`CatchingUp`). While a `history()` call waits, its
        answer is handed to it and not returned here. `members` is already updated when a
        `Presence` is returned. The answer to a `read_file` goes to `on_file`.
        """
        while True:
            if self._events:
                return self._events.popleft()
            try:
                message = await self._sealed.receive_any()
                if isinstance(message, Casted):
                    events = self.follower.receive_cast(message.data)
                else:
                    events = self._on_message(message)
                requests = self.follower.requests_to_send()
                if requests:
                    # Only a catch-up queues a request: the events need a look only then, not
                    # once per item of every cast.
                    for event in events:
                        if isinstance(event, CatchingUp):
                            logger.info(
                                "catching up on the channel after seq %d: %s",
                                event.after,
                                event.reason,
                            )
                    for request in requests:
                        await self.send(encode_request(request))
                if self._history_wait is None:
                    self._events.extend(events)
                else:
                    self._events.extend(event for event in events if not self._hand_over(event))
                continue
            except ChannelClosedError as exc:
                error = closed_error(exc)
            except DecryptionError:
                error = DecryptionFailedError(CloseCode.DECRYPTION_FAILED, "from the host")
            except FollowerError as exc:
                self.close_soon(exc.code, exc.reason)
                error = error_for(exc.code, exc.reason, by_peer=False)
            except TeammateError as exc:  # a catch-up's subscribe, on a channel that ended
                error = exc
            wait = self._history_wait
            if wait is not None:
                wait.error = error
                wait.done.set()
            raise error from None

    def _on_message(self, plaintext: bytes) -> list[FollowerEvent]:
        try:
            message = decode_host_message(plaintext)
        except BadRequest as exc:
            return [Skipped(op=None, reason=str(exc))]
        if message["op"] == "paths":
            if self.on_paths is not None:
                self.on_paths(message)
            return []
        if message["op"] in CONVERSATION_OPS:
            # The host's conversations: nothing of this channel's own conversation's state.
            try:
                parsed = parse_conversation_message(message)
            except BadRequest as exc:
                return [Skipped(op=message["op"], reason=str(exc))]
            if isinstance(parsed, ConversationList):
                self.conversations = parsed
            if self.on_conversations is not None:
                self.on_conversations(parsed)
            return []
        if message["op"] == "file":
            # An answer to this teammate's `read_file`: nothing of the session's state.
            try:
                window = parse_file(message)
            except BadRequest as exc:
                return [Skipped(op="file", reason=str(exc))]
            if self.on_file is not None:
                self.on_file(window)
            return []
        return self.follower.receive_message(message)

    async def subscribe(self, after: int | None = None, *, tail: int | None = None) -> None:
        """Ask for a snapshot, then the live tail; they arrive through `receive()`.

        `after` None is a fresh join: the snapshot holds the last `tail` items, or with `tail`
        None the host's default (`DEFAULT_HISTORY_ITEMS`, at most one page). Its first page
        comes as `SnapshotStarted`, which says where it starts (`first_seq`) and whether the
        log holds items before that (`earlier`): fetch those with `history(before=first_seq)`;
        its `context` holds the items from before it whose state still holds (the agent's
        settings and commands, the plan, open permission requests): apply them, do not list
        them. Then a `SnapshotPage` per page, then `Item`s.
        `after` set is a resume: every item after it, exactly once (-1: the whole log); `tail`
        must then be None. A new subscribe replaces the previous one. Raises ValueError for a
        `tail` with an `after`, which the host would refuse.
        """
        await self.send(encode_request(self.follower.subscribe(after, tail=tail)))

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

    def _hand_over(self, event: FollowerEvent) -> bool:
        """Give `event` to the waiting `history()` call if it is its answer."""
        wait = self._history_wait
        if wait is None:
            return False
        if isinstance(event, Error):
            # Errors name no request. The host answers a channel's requests in order and a
            # well-formed history request is refused only by a host from before it, so a
            # bad_request now is taken as the answer; the reader still shows it, as any error.
            if event.code == "bad_request":
                wait.error = BadRequest(event.message)
                wait.done.set()
            return False
        if not isinstance(event, HistoryPage) or event.before != wait.before:
            return False
        wait.page = event
        wait.done.set()
        return True


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
    subscribe: EarlySubscribe | None = None,
    framing: str = FramingName.websockets,
) -> AsyncIterator[TeammateSession]:
    """Attach to the host of `link` and yield the session; close it on exit.

    With `subscribe`, the `open` carries it and the host's first answer holds the snapshot
    (docs/protocol.md, "Application messages"): do not `subscribe()` again, read `receive()`.
    `framing` is the WebSocket library to dial with ("websockets" or "picows": `dial()`).

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
        async with dial(
            share.relay_url, "/v1/attach", hello, settings, backlog=1, framing=framing
        ) as mux:
            opening = TeammateOpening(
                root=e2e_root(share.secret, share.host_id),
                host_id=share.host_id,
                role=share.role,
                name=name,
                subscribe=subscribe,
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
