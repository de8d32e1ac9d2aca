"""The host's handler for one `session` channel: streams the log, takes a driver's requests.

One task per channel (docs/application.md). The conversation log is the only source of what the
teammate sees: a snapshot in pages, then the live tail, every item exactly once; requests from a
driver go to the shared agent session, requests from a viewer are refused and change nothing.
A fresh joiner's snapshot is only the end of the conversation (`DEFAULT_HISTORY_ITEMS`, one
page); what came before is read a page at a time when the teammate asks (`history`).

Replays share the host: every channel's snapshot pages are read and encoded under one
`ReplayBudget`, a few pages at a time host-wide, and a joiner holds nothing of the log while it
waits for its turn; live tails never wait for it. So ten late joiners replaying a long log take
turns instead of starving the teammates who follow the conversation live, and the memory they
use is that of the budget's pages, not of ten replays at once. History pages are read under the
same budget.

A fresh joiner also gets, with its first snapshot page, the items from before the snapshot whose
state still holds (`context`: the latest settings, commands and plan, the open permission
requests and their tool calls), so what it shows of the session's state is what a replay from
the start would show; and right after its snapshot, the state that only ephemeral events tell
(the agent's status, a terminal agent's size, the log's trouble), as it stands then. And
presence goes as deltas: the whole list once, then what changed.

With the host's broadcast (`tunnel.host.broadcast`), a channel that has caught up joins it: the
live tail and presence then reach it as casts, sealed once for every teammate, and the channel
itself carries only its snapshot, its catch-up and the answers to its requests.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import anyio

from tunnel.agents import AgentSession
from tunnel.agents.chat import STATUS_EVENT
from tunnel.agents.pty_agent import TERMINAL_SIZE_EVENT
from tunnel.agents.writer import STORAGE_EVENT
from tunnel.app import host_messages as out
from tunnel.app.entries import SNAPSHOT_PAGE_BYTES, SNAPSHOT_PAGE_ITEMS, encode_entry, fit_item
from tunnel.app.errors import AppError, BadRequest
from tunnel.app.file_view import FileWindow, encode_file
from tunnel.app.requests import (
    DEFAULT_HISTORY_ITEMS,
    DRIVING_REQUESTS,
    Authenticate,
    Cancel,
    CloseConversation,
    ElicitationAnswer,
    Focus,
    Fork,
    History,
    Input,
    ListConversations,
    ListPaths,
    NewConversation,
    PermissionAnswer,
    Prompt,
    PushOff,
    PushOn,
    ReadFile,
    Request,
    Resize,
    SetConfig,
    SetMode,
    SetModel,
    Subscribe,
    decode_request,
)
from tunnel.e2e.opening import CONFIRMATION, CONFIRMATION_TIMEOUT
from tunnel.host.files import FileReader, ReadLimit
from tunnel.host.presence import Listing, Member, Presence, wire_members
from tunnel.host.replay_limit import REPLAY_BURST, REPLAY_RATE, ReplayLimit
from tunnel.log import Event, Item, Log, StoreError
from tunnel.notify.subscriptions import Owner, Subscription
from tunnel.process.groups import unwrap_group

if TYPE_CHECKING:
    from tunnel.host.broadcast import Broadcaster
    from tunnel.host.conversations import Conversation, Conversations
    from tunnel.host.replay_link import ReplayLink
    from tunnel.notify.service import Notifier

logger = logging.getLogger("tunnel.session")

CONVERSATIONS_INTERVAL = 0.25
"""Seconds between two `conversations` messages to one channel at least: a busy agent changes
its state often; the list goes at most this often, always as it stands."""

REPLAY_PAGES = 2
"""Snapshot pages the whole host reads and encodes at once, whatever the number of joiners."""

CONTEXT_EVENTS = ("settings", "commands", "usage", "title")
"""The `session_event`s (by `what`) whose latest one is state every surface shows: the agent's
modes, models and config options, its slash commands, its context use and cost, and the
session's title (docs/application.md)."""
CONTEXT_TYPES = ("plan",)
"""Item types whose latest one is state: the plan a page shows beside the conversation."""
CONTEXT_SCAN_ITEMS = 2000
"""Session events read back from a fresh joiner's snapshot, at most, to find the latest of each
of `CONTEXT_EVENTS`: they are few among the items (one per change of setting, of command list,
per agent start, about one usage report per turn), so this reaches far back, and a log that never
had one costs a bounded read."""
CONTEXT_TOOL_SCAN = 200
"""Tool calls read back from an open permission request to find the one it gates."""
CONTEXT_BYTES = SNAPSHOT_PAGE_BYTES // 2
"""Most bytes a first page's `context` takes: the rest of the page is the snapshot's."""

# What an item is guessed to weigh before a replay has seen any: each page asks the store for
# about as many items as fit, so a page of large items does not read (and drop) 200 of them.
# About 1 KiB: just light enough that a default join's first read asks for its whole page.
FIRST_ITEM_ESTIMATE = SNAPSHOT_PAGE_BYTES // DEFAULT_HISTORY_ITEMS


class ReplayStatistics(NamedTuple):
    """The state of a host's `ReplayBudget`."""

    pages: int
    """Snapshot pages being read and encoded now (at most the budget's size)."""
    waiting: int
    """Replays waiting for a page of the budget."""


class ReplayBudget:
    """What every channel's history replay shares, so that replays take turns.

    A replay reads and encodes one snapshot page at a time inside `page()`; at most `pages`
    pages are in progress host-wide, the others wait their turn in order (FIFO). Sending a page
    happens outside it, so a joiner that reads slowly holds up nobody's replay but its own.
    """

    def __init__(self, pages: int = REPLAY_PAGES) -> None:
        if type(pages) is not int or pages < 1:
            raise ValueError("a replay budget needs at least one page")
        self._limiter = anyio.CapacityLimiter(pages)

    def page(self) -> anyio.CapacityLimiter:
        """`async with budget.page():` around reading and encoding one page."""
        return self._limiter

    def statistics(self) -> ReplayStatistics:
        stats = self._limiter.statistics()
        return ReplayStatistics(pages=stats.borrowed_tokens, waiting=stats.tasks_waiting)


class _TailStart(NamedTuple):
    """Where a fresh join's snapshot starts, and what finding it read."""

    after: int
    """The snapshot holds the items after this seq."""
    estimate: int = FIRST_ITEM_ESTIMATE
    """What an item of it weighs, for the snapshot's next read."""
    page: Sequence[tuple[dict[str, Any], int]] = ()
    """The items after `after` read to find it, in seq order, each as its wire map and packed
    size: the snapshot's first page takes them."""


class SessionChannel(Protocol):
    """What the handler needs from a host channel (tunnel.host provides it)."""

    @property
    def role(self) -> str: ...

    @property
    def name(self) -> str: ...

    async def receive(self) -> bytes: ...

    async def send(self, plaintext: bytes) -> None: ...

    @property
    def max_message_size(self) -> int: ...

    async def hand_over(
        self,
        largest: int,
        build: Callable[[], bytes],
        *,
        joined: Callable[[], None],
        group: int = 0,
    ) -> None: ...

    def leave_broadcast(self) -> None: ...


def _terminal_size(session: AgentSession) -> out.TerminalSize | None:
    """What the `ready` message says of the agent's terminal: its size, for a terminal agent."""
    size = session.terminal_size()
    return None if size is None else out.TerminalSize(cols=size[0], rows=size[1])


def _sandbox_info(session: AgentSession) -> out.SandboxInfo:
    """What the `ready` message says of the agent's sandbox (docs/application.md)."""
    sandbox = session.sandbox
    if sandbox is None:
        return out.SandboxInfo(enabled=False)
    return out.SandboxInfo(enabled=True, writable=sandbox.writable, network=sandbox.network)


def _owner(person: str | None, browser: str) -> Owner:
    """Whose a page's subscription and focus are: the invited person's, or on a role link (no
    `person`) its browser's."""
    return (
        Owner(kind="person", id=person) if person is not None else Owner(kind="browser", id=browser)
    )


class HeadSource(Protocol):
    """Where a joiner's latest signed chain head comes from (`tunnel.host.audit.HeadSigner`)."""

    def head_event(self, first_seq: int) -> Event | None:
        """The `head` event for a teammate whose first item is `first_seq`, or None."""
        ...


class SessionChannelHandler:
    """Serves one teammate on one channel; `run` returns when the channel ends."""

    def __init__(
        self,
        channel: SessionChannel,
        *,
        session: AgentSession,
        log: Log,
        presence: Presence,
        replay: ReplayBudget | None = None,
        broadcast: Broadcaster | None = None,
        replay_burst: int = REPLAY_BURST,
        replay_rate: float = REPLAY_RATE,
        heads: HeadSource | None = None,
        notifier: Notifier | None = None,
        files: FileReader | None = None,
        conversations: Conversations | None = None,
        conversation: Conversation | None = None,
        replay_link: ReplayLink | None = None,
    ) -> None:
        """`replay` is the host's budget shared by every channel; None gives this channel one
        of its own. `replay_burst` and `replay_rate` bound this channel's catch-up
        (`ReplayLimit`). With `broadcast`, the live tail and presence go to this channel as casts
        once its snapshot is sent (docs/application.md, "The broadcast"); without, on the
        channel itself. `heads` gives a joiner the latest signed chain head after its snapshot
        (docs/log.md, "The audit chain"). `notifier` takes the teammate's push subscriptions
        and focus (docs/application.md, "Notifications"). `files` reads the workspace files a
        teammate asks to see (`read_file`); None refuses them. `conversations` is the host's
        list, which the channel is sent and may start and close conversations in;
        `conversation` the one of them it follows (docs/application.md, "Conversations").
        `replay_link` makes the channel a replay link's: `session`'s conversation up to its
        seq, read-only, nothing live, shown to nobody (tunnel/host/replay_link.py)."""
        if replay_link is not None and replay_link.conversation != session.conversation_id:
            raise ValueError("a replay link is served its own conversation's session")
        self._replay_link = replay_link
        self._channel = channel
        self._conversations = conversations
        self._conversation = conversation
        self._snapshot_sent = anyio.Event()
        self._files = files
        self._read_limit: ReadLimit | None = None
        self._paths_limit: ReadLimit | None = None
        self._notifier = notifier
        self._session = session
        self._log = log
        self._presence = presence
        self._replay = replay if replay is not None else ReplayBudget()
        self._broadcast = broadcast
        self._heads = heads
        self._you = -1
        self._stream_scope: anyio.CancelScope | None = None
        # Whether the channel's name is its personal link's invited name; a channel that does
        # not say (a test's stand-in) holds no personal link.
        self._verified = getattr(channel, "verified", False) is True
        # This channel's own catch-up rate, however often it subscribes (docs/application.md).
        self._replay_limit = ReplayLimit(
            now=anyio.current_time(), burst=replay_burst, rate=replay_rate
        )

    async def run(self) -> None:
        member = Member(name=self._channel.name, role=self._channel.role, verified=self._verified)
        await self._send(
            out.Ready(
                conversation_id=self._session.conversation_id,
                role=member.role,
                name=member.name,
                verified=member.verified,
                agent_name=self._session.info.name,
                agent_kind=self._session.info.kind,
                sandbox=_sandbox_info(self._session),
                terminal=_terminal_size(self._session),
                push_key=None if self._notifier is None else self._notifier.push_key,
                replay=self._replay_info(),
            )
        )
        key = self._you = self._presence.reserve()
        try:
            async with unwrap_group(), anyio.create_task_group() as tg:
                if self._conversations is not None and self._replay_link is None:
                    tg.start_soon(self._pump_conversations, self._conversations)
                early = getattr(self._channel, "early_subscribe", None)
                if isinstance(early, Subscribe):
                    # The open carried the subscribe: the snapshot and the `broadcast` message
                    # go with the answer and `ready`, in the host's first flight
                    # (docs/protocol.md, "Application messages"). Read-only and the same
                    # however often it is replayed, so it needs no key confirmation.
                    conversation = getattr(self._channel, "early_conversation", None)
                    await self._restart_stream(tg, early, conversation=conversation)
                # Only a message that decrypted proves the keys, and with them the role and the
                # name: until then the teammate is not shown to anyone (a relay can replay an
                # open, never its confirmation).
                first: bytes | None = None
                with anyio.move_on_after(CONFIRMATION_TIMEOUT):
                    first = await self._channel.receive()
                if first is None:
                    logger.info("%s sent nothing after its open; channel ended", self._channel.name)
                    tg.cancel_scope.cancel()
                    return
                if self._replay_link is None:  # a replay is shown nobody, and shown to nobody
                    self._presence.join(member, key=key)
                    if self._broadcast is None or (
                        self._broadcast.group and not self._takes_groups()
                    ):
                        tg.start_soon(self._pump_presence, key)
                await self._serve_requests(tg, first)
                tg.cancel_scope.cancel()
        finally:
            self._presence.leave(key)
            if self._notifier is not None:
                self._notifier.left(self)
            if self._broadcast is not None:
                self._broadcast.left(self._channel)

    async def _send(self, message: out.HostMessage | out.PushState) -> None:
        await self._send_plaintext(out.encode(message))

    async def _send_plaintext(self, plaintext: bytes) -> None:
        # Sends come from the request loop, the stream and the presence pump with no lock of
        # their own: the channel queues each message whole, first come first served, and
        # without a task switch while its window has room (LinkChannel.send_sealed).
        await self._channel.send(plaintext)

    async def _serve_requests(self, tg: anyio.abc.TaskGroup, first: bytes) -> None:
        plaintext = first
        if plaintext == CONFIRMATION:
            # The teammate's key confirmation: it asks for nothing.
            plaintext = await self._channel.receive()
        while True:
            await self._serve_one(tg, plaintext)
            plaintext = await self._channel.receive()

    async def _serve_one(self, tg: anyio.abc.TaskGroup, plaintext: bytes) -> None:
        try:
            request = decode_request(plaintext)
        except BadRequest as exc:
            logger.info("bad request from %s: %s", self._channel.name, exc)
            await self._send(out.Error(code=exc.code, message=exc.message))
            return
        if self._replay_link is not None and not self._replay_link.allows(request):
            await self._send(out.Error(code="forbidden", message="a replay link only reads"))
            return
        if isinstance(request, Subscribe):
            await self._restart_stream(tg, request)
        elif isinstance(request, History):
            # Read-only, so viewers may ask. Answered here in the request loop, not in a task
            # of its own: one history read per channel at a time, and a teammate that asks
            # faster than it reads the answers waits for them.
            await self._send_history(request)
        elif isinstance(request, ListPaths):
            # Read-only, as history: names of the workspace an `@path` being typed may complete.
            # Budgeted per channel as read_file: beyond it, an empty answer.
            now = anyio.current_time()
            if self._paths_limit is None:
                self._paths_limit = ReadLimit(now=now)
            paths: list[str] = []
            more = False
            if self._paths_limit.take(now):
                paths, more = await self._session.list_paths(request.prefix)
            answer = {"op": "paths", "prefix": request.prefix, "paths": paths, "more": more}
            await self._send_plaintext(out.pack(answer))
        elif isinstance(request, ReadFile):
            # Read-only, so viewers may ask; one read per channel at a time, as history.
            await self._read_file(request)
        elif isinstance(request, PushOn | PushOff | Focus):
            # Any role: a viewer may want to know that a request waits, too.
            await self._notifications(request)
        elif isinstance(request, ListConversations):
            if self._conversations is not None:
                await self._send_plaintext(out.pack(self._conversations.listing()))
        elif isinstance(request, DRIVING_REQUESTS) and self._channel.role != "drive":
            await self._send(out.Error(code="forbidden", message="this link can only view"))
        elif isinstance(request, NewConversation | CloseConversation | Fork):
            try:
                await self._manage(request)
            except AppError as exc:
                await self._send(out.Error(code=exc.code, message=exc.message))
        elif self._conversation is not None and self._conversation.closed:
            await self._send(
                out.Error(
                    code="conversation_closed",
                    message="this conversation is closed: start a new one, or switch",
                )
            )
        else:
            try:
                await self._drive(request)
            except AppError as exc:
                await self._send(out.Error(code=exc.code, message=exc.message))
            except StoreError:
                # The session says this itself (agent_unavailable); should anything else get
                # through, the teammate is told, and the channel stays.
                logger.warning("a request of %s failed on the log", self._channel.name)
                await self._send(
                    out.Error(code="agent_unavailable", message="the log cannot be written")
                )

    async def _read_file(self, request: ReadFile) -> None:
        """A window of a workspace file (docs/application.md, "Reading a file")."""
        # Every answer is a `file` message, a refusal too: the page matches it with its read.
        now = anyio.current_time()
        if self._read_limit is None:
            self._read_limit = ReadLimit(now=now)
        if self._files is None:
            why = "this host shows no files"
            window = FileWindow(path=request.path, line=request.line, refused=why)
        elif self._read_limit.take(now):
            window = await self._files.read(request.path, request.line, request.find)
        else:
            why = "too many files were asked for at once; try again in a moment"
            window = FileWindow(path=request.path, line=request.line, refused=why)
        await self._send_plaintext(out.pack(encode_file(window)))

    async def _notifications(self, request: PushOn | PushOff | Focus) -> None:
        """A teammate's push subscription or focus (docs/application.md, "Notifications")."""
        notifier = self._notifier
        if notifier is None or notifier.push_key is None:
            await self._send(
                out.Error(code="not_supported", message="this host sends no push notifications")
            )
            return
        # A personal link's person is the host's; a role link's holder is only their browser.
        person = self._channel.name if self._verified else None
        match request:
            case Focus(focused=focused, browser=browser):
                notifier.focus(self, _owner(person, browser), focused)
            case PushOn(endpoint=endpoint, p256dh=p256dh, auth=auth, browser=browser):
                subscription = Subscription(
                    owner=_owner(person, browser),
                    endpoint=endpoint,
                    p256dh=p256dh,
                    auth=auth,
                    role=self._channel.role,
                    browser=browser,
                )
                try:
                    notifier.subscribe(subscription)
                except ValueError as exc:
                    # Said to the teammate as is: every such message is written for them.
                    logger.info("refused a push subscription of %s: %s", self._channel.name, exc)
                    await self._send(out.Error(code="forbidden", message=str(exc)))
                    return
                await self._send(out.PushState(on=True, endpoint=endpoint))
            case PushOff(endpoint=endpoint):
                notifier.unsubscribe(endpoint, person=person)
                held = notifier.subscriptions.get(endpoint) is not None
                await self._send(out.PushState(on=held, endpoint=endpoint))

    async def _manage(self, request: NewConversation | CloseConversation | Fork) -> None:
        """Start, close or fork a conversation (docs/application.md, "Conversations")."""
        conversations = self._conversations
        if conversations is None:
            raise AppError("not_supported", "this host runs one conversation")
        by = self._channel.name
        match request:
            case NewConversation(agent=agent):
                started = await conversations.start(agent, by=by)
            case Fork(conversation=conversation, upto=upto):
                started = await conversations.fork(conversation, upto, by=by)
            case CloseConversation(conversation=conversation):
                await conversations.close(conversation, by=by)
                return
        await self._send_plaintext(
            out.pack({"op": "conversation_started", "conversation": started.id})
        )

    async def _pump_conversations(self, conversations: Conversations) -> None:
        """Send the list after `ready`, then again as it changes, at most every
        CONVERSATIONS_INTERVAL and never the same twice in a row."""
        # After the first snapshot: the first flight stays answer, ready, snapshot, broadcast.
        await self._snapshot_sent.wait()
        version = -1
        sent: dict[str, Any] | None = None
        while True:
            if version >= 0:
                version = await conversations.wait_changed(version)
            else:
                version = conversations.version
            listing = conversations.listing()
            if listing != sent:
                await self._send_plaintext(out.pack(listing))
                sent = listing
            await anyio.sleep(CONVERSATIONS_INTERVAL)

    async def _drive(self, request: Request) -> None:
        by = self._channel.name
        match request:
            case Prompt(text=text, images=images):
                await self._session.prompt(text, by=by, images=images)
            case PermissionAnswer(request_id=request_id, option_id=option_id):
                await self._session.answer_permission(
                    request_id, option_id, by=by, verified=self._verified
                )
            case ElicitationAnswer(request_id=request_id, action=action, content=content):
                await self._session.answer_elicitation(request_id, action, content, by=by)
            case Cancel():
                await self._session.cancel(by=by)
            case SetMode(mode_id=mode_id):
                await self._session.set_mode(mode_id, by=by)
            case SetModel(model_id=model_id):
                await self._session.set_model(model_id, by=by)
            case SetConfig(config_id=config_id, value=value):
                await self._session.set_config(config_id, value, by=by)
            case Input(data=data):
                await self._session.input(data, by=by)
            case Resize(cols=cols, rows=rows):
                await self._session.resize(cols, rows, by=by)
            case Authenticate(method_id=method_id):
                await self._session.authenticate(method_id, by=by)
            case (
                Subscribe()
                | History()
                | PushOn()
                | PushOff()
                | Focus()
                | ReadFile()
                | ListConversations()
                | NewConversation()
                | CloseConversation()
                | Fork()
            ):
                pass  # handled by the caller; here for exhaustiveness

    async def _restart_stream(
        self, tg: anyio.abc.TaskGroup, request: Subscribe, *, conversation: str | None = None
    ) -> None:
        # A new subscribe replaces the old stream: the client starts over from `after`.
        if self._stream_scope is not None:
            self._stream_scope.cancel()
        if self._broadcast is not None:
            # Out of the broadcast until this stream has sent everything after `after`.
            self._broadcast.left(self._channel)
            self._channel.leave_broadcast()
        self._stream_scope = anyio.CancelScope()
        if self._replay_link is not None:
            tg.start_soon(self._stream_replay, self._stream_scope, request.after, conversation)
            return
        tg.start_soon(self._stream, self._stream_scope, request.after, request.tail, conversation)

    async def _stream(
        self,
        scope: anyio.CancelScope,
        after: int | None,
        tail: int | None,
        counted_in: str | None = None,
    ) -> None:
        with scope:
            conversation = self._session.conversation_id
            # In memory while the host's broadcast follows the conversation: no store read.
            head = await self._log.last_seq(conversation)
            # A cursor past the end means the teammate saw a log this host does not have (a new
            # log file under the same conversation id), and one counted in another conversation
            # (an early subscribe says which) a log of another: tell it to start over, as a
            # fresh join.
            reset = after is not None and (
                after > head or (counted_in is not None and counted_in != conversation)
            )
            # A fresh join gets the end of the log (found on the snapshot's first page); a
            # resume everything after its cursor, however much.
            start = None if after is None or reset else after
            first_seq, last = await self._send_snapshot(conversation, start, head, reset, tail)
            # Subscribed only now, after exactly the items the snapshot sent: what was appended
            # meanwhile comes from the store, then the live tail; a joiner waiting for its
            # replay holds no live buffer.
            async with self._log.subscribe(conversation, after=last) as sub:
                await self._send_state(conversation, first_seq)
                broadcast = self._broadcast
                if broadcast is not None and broadcast.group and not self._takes_groups():
                    broadcast = None  # a relay from before groups: the tail comes here
                if self._conversation is not None and self._conversation.closed:
                    # Its group may be another conversation's now: nothing more is cast here.
                    broadcast = None
                if broadcast is not None:
                    # Until the channel holds every item the broadcast has cast, the items come
                    # on the channel; then it joins, and every later one comes as a cast.
                    while broadcast.last_seq > last:
                        for entry in await sub.receive_batch(SNAPSHOT_PAGE_ITEMS):
                            await self._send_entry(entry)
                            if isinstance(entry, Item):
                                last = entry.seq
                    await self._join_broadcast(broadcast)
                    self._snapshot_sent.set()
                    return
                self._snapshot_sent.set()
                while True:  # the live tail
                    for entry in await sub.receive_batch(SNAPSHOT_PAGE_ITEMS):
                        await self._send_entry(entry)

    async def _stream_replay(
        self, scope: anyio.CancelScope, after: int | None, counted_in: str | None
    ) -> None:
        """A replay link's stream: its conversation's items after `after` (all of them from
        seq 0 for a fresh join) up to its `upto`, in snapshot pages, and then nothing: no
        state, no head, no live tail, no broadcast. A cursor past `upto`, or counted in another
        conversation, starts over from seq 0."""
        link = self._replay_link
        assert link is not None
        with scope:
            conversation = self._session.conversation_id
            head = link.head(await self._log.last_seq(conversation))
            reset = after is not None and (
                after > head or (counted_in is not None and counted_in != conversation)
            )
            start = -1 if after is None or reset else after
            await self._send_snapshot(conversation, start, head, reset)
            self._snapshot_sent.set()

    def _replay_info(self) -> out.ReplayInfo | None:
        link = self._replay_link
        return (
            None if link is None else out.ReplayInfo(conversation=link.conversation, upto=link.upto)
        )

    def _takes_groups(self) -> bool:
        """Whether the relay copies casts by group (`cast-groups`); a stand-in channel does."""
        return getattr(self._channel, "cast_groups", True) is not False

    async def _join_broadcast(self, broadcast: Broadcaster) -> None:
        """Send the `broadcast` message and join the channel in one instant: it says the
        counter of the very next cast, and the presence as of then."""
        channel = self._channel
        await channel.hand_over(
            channel.max_message_size,
            lambda: broadcast.start_message(self._you),
            joined=lambda: broadcast.joined(channel),
            group=broadcast.group,
        )

    async def _send_state(self, conversation: str, first_seq: int) -> None:
        """Say again, after the snapshot, the session's state that only events tell: the
        agent's status (so a joiner knows a turn runs, and which stored prompts still wait
        behind it), the terminal's size (it may have changed while the snapshot was sent), and
        the log's trouble, and the latest signed chain head with the hash the snapshot's first
        item (`first_seq`) chains from. Read once subscribed, so a change from now on comes as
        its own event, after this one."""
        state: list[tuple[str, dict[str, Any] | None]] = [
            (STATUS_EVENT, self._session.status()),
            (STORAGE_EVENT, self._session.storage()),
        ]
        size = self._session.terminal_size()
        if size is not None:
            state.append((TERMINAL_SIZE_EVENT, {"cols": size[0], "rows": size[1]}))
        for kind, data in state:
            if data is not None:
                await self._send_entry(Event(conversation_id=conversation, kind=kind, data=data))
        head = None if self._heads is None else self._heads.head_event(first_seq)
        if head is not None:
            await self._send_entry(head)

    async def _tail_start(self, conversation: str, head: int, tail: int | None) -> _TailStart:
        """Where a fresh join's snapshot starts (the last `tail` items, or with None the newest
        page of at most `DEFAULT_HISTORY_ITEMS`, so a default join costs one page). The caller
        holds a page of the replay budget."""
        if tail is not None:
            # Seqs run from 0 without a gap: the last `tail` items are those after head - tail.
            return _TailStart(after=max(-1, head - tail))
        if head < 0:
            return _TailStart(after=-1)
        # Read backwards to find where the page starts; the snapshot's first page then takes
        # these items instead of reading them again.
        page = await self._read_before(conversation, head + 1, DEFAULT_HISTORY_ITEMS)
        if not page:
            # Items missing from the store: the snapshot from the start says so.
            return _TailStart(after=-1)
        # Their average weight sizes the next read, should the context leave some out.
        estimate = max(1, sum(size for _, size in page) // len(page))
        return _TailStart(after=int(page[0][0]["seq"]) - 1, estimate=estimate, page=page)

    async def _context(self, conversation: str, first_seq: int) -> list[dict[str, Any]]:
        """The items before `first_seq` whose state a surface still shows (see `Snapshot.context`),
        as wire maps in seq order, at most `CONTEXT_BYTES` of them. The caller holds a page of
        the replay budget. An item that would be cut to fit is left out: cut, it holds no
        state."""
        if first_seq <= 0:
            return []
        # In the order they are kept when not all fit: the agent's settings and commands, the
        # open requests, the plan, then the cards the requests show in.
        found: list[Item] = []
        found += await self._latest_events(conversation, first_seq)
        requests = self._session.pending_permissions()
        found += [request for request in requests if request.seq < first_seq]
        questions = self._session.pending_elicitations()
        found += [question for question in questions if question.seq < first_seq]
        for kind in CONTEXT_TYPES:
            found += await self._log.query(
                conversation, before=first_seq, limit=1, order="desc", types=kind
            )
        for request in requests:
            call = await self._gated_call(conversation, request, first_seq)
            if call is not None:
                found.append(call)
        context: dict[int, dict[str, Any]] = {}
        context_bytes = 0
        for item in found:
            wire = item.to_wire()
            size = len(out.pack(wire))
            if item.seq in context or context_bytes + size > CONTEXT_BYTES:
                continue
            context[item.seq] = wire
            context_bytes += size
        return [context[seq] for seq in sorted(context)]

    async def _latest_events(self, conversation: str, before: int) -> list[Item]:
        """The latest session event before `before` of each of `CONTEXT_EVENTS`, newest first,
        reading back at most `CONTEXT_SCAN_ITEMS` session events."""
        wanted = set(CONTEXT_EVENTS)
        found: list[Item] = []
        scanned = 0
        while wanted and scanned < CONTEXT_SCAN_ITEMS:
            want = min(SNAPSHOT_PAGE_ITEMS, CONTEXT_SCAN_ITEMS - scanned)
            items = await self._log.query(
                conversation, before=before, limit=want, order="desc", types="session_event"
            )
            for item in items:
                what = item.data.get("what")
                if what in wanted:
                    wanted.discard(what)
                    found.append(item)
            scanned += len(items)
            if len(items) < want:
                break
            before = items[-1].seq
        return found

    async def _gated_call(self, conversation: str, request: Item, first_seq: int) -> Item | None:
        """The `tool_call` item an open permission request gates, if it is before `first_seq`:
        a page shows the request inside that call's card. Known by `(turn, tool_call_id)`, and
        stored after the turn's prompt and before the request."""
        tool_call_id = request.data.get("tool_call_id")
        turn = request.data.get("turn")
        if not isinstance(tool_call_id, str):
            return None
        turn_start = turn - 1 if isinstance(turn, int) and not isinstance(turn, bool) else None
        calls = await self._log.query(
            conversation,
            after=turn_start,
            before=min(first_seq, request.seq),
            limit=CONTEXT_TOOL_SCAN,
            order="desc",
            types="tool_call",
        )
        for call in calls:
            if call.data.get("tool_call_id") == tool_call_id and call.data.get("turn") == turn:
                return call
        return None

    async def _send_history(self, request: History) -> None:
        """Answer `history`: the newest page before `request.before`, read and encoded with a
        page of the host's replay budget, sent after it is given back."""
        before = request.before
        if self._replay_link is not None:
            before = self._replay_link.before(before)  # nothing after the replay's last seq
        async with self._replay.page():
            fitted = await self._read_before(self._session.conversation_id, before, request.limit)
            page = [wire for wire, _ in fitted]
            # Seqs start at 0 without a gap, so an item before the page exists unless it
            # starts at 0.
            more = bool(page) and page[0]["seq"] > 0
            plaintext = out.encode(out.HistoryPage(items=page, before=request.before, more=more))
            del page, fitted  # only the encoded page waits for the channel's window
        await self._send_plaintext(plaintext)

    async def _read_before(
        self, conversation: str, before: int, limit: int
    ) -> list[tuple[dict[str, Any], int]]:
        """The newest stored items with seq < `before` that fit one message (at most `limit`
        of them, and at least one if there is any), in seq order, each as its wire map and
        packed size (`fit_item`). The caller holds a page of the replay budget."""
        newest_first: list[tuple[dict[str, Any], int]] = []
        page_bytes = 0
        cursor = before
        estimate = FIRST_ITEM_ESTIMATE
        while len(newest_first) < limit:
            # About as many as fit, as the snapshot reads: a page of large items does not read
            # (and drop) `limit` of them.
            want = min(
                limit - len(newest_first), (SNAPSHOT_PAGE_BYTES - page_bytes) // estimate + 1
            )
            items = await self._log.query(conversation, before=cursor, limit=want, order="desc")
            for item in items:
                wire, size = fit_item(item.to_wire())
                if newest_first and page_bytes + size > SNAPSHOT_PAGE_BYTES:
                    newest_first.reverse()
                    return newest_first
                newest_first.append((wire, size))
                page_bytes += size
                cursor = item.seq
            if len(items) < want:  # nothing older is stored
                break
            estimate = max(1, page_bytes // len(newest_first))
        newest_first.reverse()
        return newest_first

    async def _send_snapshot(
        self,
        conversation: str,
        last: int | None,
        head: int,
        reset: bool,
        tail: int | None = None,
    ) -> tuple[int, int]:
        """Every stored item after `last`, in pages that each fit a message, up to the head
        (looked at again at the end, so a long replay also sends what came meanwhile); returns
        the first and the last seq the snapshot covers. With `last` None, a fresh join's: the
        end of the log (`tail`, see `_tail_start`), found on the first page, which also carries
        the state from before it (`_context`) and takes the items that search read. Each page
        is read and encoded with a page of the host's replay budget, and sent after it is given
        back: nothing read is kept from one page to the next."""
        estimate = FIRST_ITEM_ESTIMATE  # what an item is guessed to weigh until a page is read
        context: list[dict[str, Any]] = []
        held: Sequence[tuple[dict[str, Any], int]] = ()  # items read for this page already
        first_seq = -1 if last is None else last + 1
        while True:
            async with self._replay.page():
                if last is None:
                    found = await self._tail_start(conversation, head, tail)
                    last, estimate, held = found.after, found.estimate, found.page
                    first_seq = last + 1
                    # Bounded: what came before the snapshot is not sent, but the state it
                    # holds is. It goes on the first page, and takes its room: that page may
                    # then hold no item at all.
                    context = await self._context(conversation, first_seq)
                page: list[dict[str, Any]] = []
                page_bytes = sum(len(out.pack(wire)) for wire in context)
                if last < head:
                    fitted: Iterable[tuple[dict[str, Any], int]] = held
                    if not held:
                        # About as many as fit: what does not fit is read again for the next
                        # page.
                        limit = min(SNAPSHOT_PAGE_ITEMS, SNAPSHOT_PAGE_BYTES // estimate + 1)
                        items = await self._log.query(
                            conversation, after=last, before=head + 1, limit=limit
                        )
                        if not items:
                            raise StoreError(
                                f"conversation {conversation}: items {last + 1} to {head} are "
                                "missing from the store"
                            )
                        fitted = (fit_item(item.to_wire()) for item in items)
                    for wire, size in fitted:
                        # A page holds at least one item, or the context, so the snapshot
                        # always moves on.
                        if (page or context) and page_bytes + size > SNAPSHOT_PAGE_BYTES:
                            break
                        page.append(wire)
                        page_bytes += size
                        last = int(wire["seq"])
                    held = ()
                    if page:
                        estimate = max(1, page_bytes // len(page))
                if last >= head and self._replay_link is None:  # a replay's head is fixed
                    # In memory while the broadcast follows the conversation: no store read.
                    head = max(head, await self._log.last_seq(conversation))
                more = last < head
                # Every page says where the snapshot starts and whether the log holds anything
                # before it (seqs start at 0 without a gap), so a client can offer to load
                # earlier items.
                plaintext = out.encode(
                    out.Snapshot(
                        items=page,
                        last_seq=last,
                        more=more,
                        reset=reset,
                        first_seq=first_seq,
                        earlier=first_seq > 0,
                        context=context,
                    )
                )
                del page  # only the encoded page waits for the channel's window
            await anyio.sleep(self._replay_limit.take(len(plaintext), anyio.current_time()))
            await self._send_plaintext(plaintext)
            reset, context = False, []  # said once, on the first page
            if not more:
                return first_seq, last

    async def _send_entry(self, entry: Item | Event) -> None:
        plaintext = encode_entry(entry)
        if plaintext is not None:
            await self._send_plaintext(plaintext)

    async def _pump_presence(self, you: int) -> None:
        """Tell the teammate who is attached: the listing first (and which member it is,
        `you`), then only how it changed since the one it was last told. Every change made
        while a message waits for the channel's window goes in the next one, so N joins cost a
        channel at most N small messages, and one that reads slowly gets fewer, larger ones."""
        told: Listing | None = None
        while True:
            version = self._presence.version
            now = self._presence.listing()
            message: out.HostMessage | None = None
            if told is None:
                members = wire_members(now.members)
                message = out.PresenceMessage(members=members, count=now.count, you=you)
            else:
                joined, left = now.changes_since(told)
                if joined or left or now.count != told.count:
                    members = wire_members(joined)
                    message = out.PresenceDelta(joined=members, left=left, count=now.count)
                # Else someone came and went before this channel was told: nothing to tell.
            told = now
            if message is not None:
                await self._send(message)
            await self._presence.wait_changed(version)
