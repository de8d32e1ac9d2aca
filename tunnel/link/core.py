"""`Link`: drives one sans-I/O `proto.Connection` over one WebSocket, under anyio.

Host, teammate client and relay all use it. Every received message goes to the protocol object
and the resulting events, in order, to a synchronous callback. The reader task takes what the
framing queued before the link ran; from then on the framing hands each message over from the
socket's read callback as it is parsed (`Framing.receive_with`), which saves a queue and a wake-up
of the reader per message, and the reader only waits for the WebSocket to close. What the
protocol object queued is sent as described below. Nothing here buffers on its own: the outgoing
buffer is the protocol object's (and, while the socket is full, at most what it held then, taken
out of it in order), which flow control bounds (docs/protocol.md, "Flow control") to the send
windows of the open channels plus a few control frames each.

Writes are batched, because the event loop's per-write cost (a timer, a task switch, a system
call) is what bounds throughput, not encoding. `flush()` marks the link due and, for the first
link due in a turn of the event loop, schedules one callback (`_DueWrites`) for the end of it; it
frames everything each due link queued by then and hands it to its socket in one write, without
waking a task. So what many readers forward to one link in a turn (a relay's teammates writing
to their host) leaves in one write, and a cast copied to a thousand links costs one callback, not
a thousand. (Writing at once when a reader has handled every message it received saves the
relay a turn of its loop per forward, but measured no faster round trip and costs that batching:
docs/performance.md, "The link's writes and a joiner's member list".) When a received message
wakes a task that will answer it, the write is made due behind the task's wake-up
(`write_after_woken_task`), so the answer leaves in that turn, not the next; when one read wakes
several tasks of a link, those after the first answer one turn later, in one more write. Only
when the socket's buffer is full (the peer reads slower than we write) is a writer task
started: it waits for the socket to drain, sends whatever was queued meanwhile as further
batches, and ends once nothing is left. Either way frames leave in the order they were queued.

An idle link costs its reader alone: a relay holds thousands of links, and every task, cancel
scope and Event kept per link is memory per connection (docs/performance.md, "Memory"). So the
writer exists only while the socket is backed up, and the two deadlines are timer handles armed
only while they can matter: the send deadline while the writer runs (one look every quarter of
it, not a timer per write), the close deadline once a close was asked for.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable, Coroutine

import anyio
from websockets.asyncio.connection import Connection as WebSocket

from tunnel.link.errors import LinkClosedError
from tunnel.link.framing import Framing, WebsocketsFraming
from tunnel.proto import Connection, Event, Outgoing, ProtocolError, RemoteProtocolError
from tunnel.proto.codes import CloseCode

logger = logging.getLogger("tunnel.link")

MAX_REASON_BYTES = 123
"""A WebSocket close reason fits in a control frame: 125 bytes minus the 2-byte code."""

CLOSE_GRACE = 5.0
"""Seconds to finish sending and closing after `close_soon`, before the socket is dropped."""

CANCEL_GRACE = 1.0
"""Seconds for the closing handshake when the link's task is cancelled."""

WRITE_BATCH_BYTES = 256 * 1024
"""Bytes of frames the writer hands the socket in one write before it waits for the socket to
drain; what is queued beyond it is already in memory (the protocol object's buffer), so the bound
only keeps one write's joined copy small."""

SEND_WATCH_TICKS = 4
"""How often per send timeout the writer's current write is looked at: the cut-off comes after
the timeout to (1 + 1/SEND_WATCH_TICKS) times it."""

EventHandler = Callable[[Event], None]


def _batch_end(messages: list[Outgoing], start: int) -> int:
    """Where the batch from `messages[start]` ends: WRITE_BATCH_BYTES, or one larger message."""
    end, size = start, 0
    while end < len(messages) and (end == start or size < WRITE_BATCH_BYTES):
        message = messages[end]
        size += len(message) if isinstance(message, bytes) else len(message[0]) + len(message[1])
        end += 1
    return end


def clip_reason(reason: str, limit: int = MAX_REASON_BYTES) -> str:
    """Cut `reason` to at most `limit` UTF-8 bytes without splitting a character."""
    data = reason.encode("utf-8")
    if len(data) <= limit:
        return reason
    return data[:limit].decode("utf-8", "ignore")


class _DueWrites:
    """The links of one event loop with a write due at the end of the current turn."""

    # No reference to the loop: the loop is the weak key this is kept under.
    __slots__ = ("_links", "_scheduled")

    def __init__(self) -> None:
        # Insertion-ordered: links write in the order they became due.
        self._links: dict[Link, None] = {}
        self._scheduled = False

    def add(self, link: Link) -> None:
        self._links[link] = None
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.write)

    def write(self) -> None:
        """Write every due link; what becomes due meanwhile waits for the next turn."""
        self._scheduled = False
        links, self._links = self._links, {}
        for link in links:
            try:
                link._write_now()
            except Exception as exc:  # a bug: it ends that link, never the others due
                link._write_failed(exc)


_due_writes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _DueWrites] = (
    weakref.WeakKeyDictionary()
)
"""Each event loop's due writes, made by the first link to flush on it."""


class Link:
    """One WebSocket carrying one protocol connection.

    Call `run(on_event)` in a task: it returns (with the `LinkClosedError` describing why) once
    the WebSocket is closed. Everything else is synchronous and never blocks: after changing the
    protocol object (open, send, acknowledge, close a channel), call `flush()` so the writer sends
    what was queued.
    """

    # A relay keeps one per connection: no per-instance dict.
    __slots__ = (
        "_close_request",
        "_close_timer",
        "_closed",
        "_closed_waiter",
        "_closer",
        "_due",
        "_failure",
        "_send_timeout",
        "_sending",
        "_task_error",
        "_unsent",
        "_watch",
        "_watch_seen",
        "_watched",
        "_websocket",
        "_writable_waiter",
        "_write_scheduled",
        "_write_started",
        "_writer",
        "_writes",
        "_writing",
        "connection",
        "framing",
        "label",
    )

    def __init__(
        self,
        websocket: WebSocket | None,
        connection: Connection,
        *,
        send_timeout: float | None = None,
        label: str = "link",
        framing: Framing | None = None,
    ) -> None:
        if framing is None:
            if websocket is None:
                raise TypeError("a link needs a websocket or a framing")
            framing = WebsocketsFraming(websocket)
        self._websocket = websocket
        self.framing: Framing = framing
        """Everything the link does with its WebSocket goes through here (link/framing.py)."""
        self.connection = connection
        """The protocol object; mutate it only from the event loop thread, then call flush()."""
        self.label = label
        """Short description used in log lines (never a secret)."""
        self._send_timeout = send_timeout
        # From run() until the link stops sending (the writer gave up, or run() is ending).
        self._sending = False
        self._write_scheduled = False
        # This loop's due writes, found at the first flush (a link lives on one loop).
        self._due: _DueWrites | None = None
        # Alive only while the socket is backed up or a close is being sent; while it is, it
        # takes everything queued and flush() leaves the socket to it.
        self._writer: asyncio.Task[None] | None = None
        # Closes the WebSocket of a peer cut off for not reading, while the writer is stuck.
        self._closer: asyncio.Task[None] | None = None
        self._task_error: BaseException | None = None
        # Frames taken from the protocol object beyond one batch, for the writer task to send
        # first: bounded by what the protocol object held.
        self._unsent: list[Outgoing] = []
        self._writes = 0
        self._write_started = 0
        # A write is in progress, maybe waiting for the socket to drain: the send deadline's cue.
        self._writing = False
        self._watch: asyncio.TimerHandle | None = None
        self._watched = -1
        self._watch_seen = 0
        self._close_request: tuple[int, str] | None = None
        self._close_timer: asyncio.TimerHandle | None = None
        self._closed: LinkClosedError | None = None
        # Made by the first wait_closed() that has to wait: most links are never waited on.
        self._closed_waiter: asyncio.Event | None = None
        # Made by the first wait_writable() that has to wait, set when the writer task ends.
        self._writable_waiter: asyncio.Event | None = None
        self._failure: ProtocolError | None = None

    # -- state ------------------------------------------------------------------------------

    @property
    def websocket(self) -> WebSocket:
        """The python-websockets connection this link runs over, for what takes the socket over
        from the link (a relay cluster's hand-over); a link over another framing has none."""
        if self._websocket is None:
            raise RuntimeError(f"{self.label} runs over {type(self.framing).__name__}")
        return self._websocket

    @property
    def closed(self) -> LinkClosedError | None:
        """Why the link closed, or None while it is open."""
        return self._closed

    @property
    def closing(self) -> bool:
        """Whether a close was requested or happened: nothing new should be started on it."""
        return self._close_request is not None or self._closed is not None

    @property
    def failure(self) -> ProtocolError | None:
        """The protocol error that made us close the link, if that is how it ended."""
        return self._failure

    @property
    def writes(self) -> int:
        """How many batches of frames went to the socket, each in one write."""
        return self._writes

    async def wait_closed(self) -> LinkClosedError:
        """Wait until the link is closed and return why."""
        if self._closed is None:
            if self._closed_waiter is None:
                self._closed_waiter = asyncio.Event()
            await self._closed_waiter.wait()
        assert self._closed is not None
        return self._closed

    async def wait_writable(self) -> None:
        """Wait while the socket is backed up (the writer task runs): a sender that queues
        without a channel window, as the host's broadcast does, waits here instead of letting
        the protocol object's buffer grow. Returns at once once the link is closed."""
        while self._writer is not None and self._closed is None:
            if self._writable_waiter is None:
                self._writable_waiter = asyncio.Event()
            await self._writable_waiter.wait()

    # -- sending ----------------------------------------------------------------------------

    def flush(self) -> None:
        """Make sure everything the protocol object has queued gets sent.

        Cheap enough to call after every change: the first call in a turn of the event loop
        schedules one write for the end of it, later calls find it scheduled; a running writer
        task takes the new frames before it ends.
        """
        if not self._sending or self._write_scheduled or self._writer is not None:
            return
        if self._close_request is not None:
            self._start_writer()
        elif self.connection.has_data_to_send():
            self._write_scheduled = True
            self._due_writes().add(self)

    def write_after_woken_task(self) -> None:
        """Make the turn's write due now, before anything is queued: a received message just woke
        a task that is likely to answer it (a host's session, a teammate's client). Scheduled
        behind that task's wake-up, the write runs right after the task's step, in the same turn
        of the event loop, instead of in a turn of its own (docs/performance.md, "Round trips on
        one CPU, and an answer written in the turn that computed it"). A task that queues nothing
        leaves the write nothing to send. When another link made the turn's write due earlier,
        it runs before the task instead and the task's flush makes another due, as before."""
        if (
            self._sending
            and not self._write_scheduled
            and self._writer is None
            and self._close_request is None
            and self.framing.is_open
        ):
            self._write_scheduled = True
            self._due_writes().add(self)

    def _due_writes(self) -> _DueWrites:
        due = self._due
        if due is None:
            loop = asyncio.get_running_loop()
            due = _due_writes.get(loop)
            if due is None:
                due = _due_writes[loop] = _DueWrites()
            self._due = due
        return due

    def _write_now(self) -> None:
        """Send what is queued in one socket write while no writer task runs (see the module)."""
        self._write_scheduled = False
        if not self._sending or self._writer is not None:
            return  # the writer task takes everything queued, or nothing is sent any more
        if self._close_request is None and not self.connection.has_data_to_send():
            return  # made due for a woken task that queued nothing (write_after_woken_task)
        if self._close_request is not None or not self.framing.is_open:
            # Closing: the writer task sends what is queued, then the close.
            self._start_writer()
            return
        try:
            messages = self.connection.data_to_write()
        except ProtocolError:
            return  # the link failed; close_soon() is on its way
        if not messages:
            return
        end = _batch_end(messages, 0)
        self._hand_to_socket(messages[:end])
        if end < len(messages):
            # The writer task sends the rest, one batch per drain of the socket, before anything
            # queued later.
            self._unsent = messages[end:]
            self._start_writer()
        elif self._backed_up():
            self._start_writer()  # to wait for the socket to drain, under the send deadline

    def _hand_to_socket(self, messages: list[Outgoing]) -> None:
        """Frame `messages` and write them to the socket at once; the connection must be open."""
        self.framing.write_messages(messages)
        self._writes += 1

    def _backed_up(self) -> bool:
        """The socket's buffer is over its high-water mark: websockets waits for it to drain."""
        return self.framing.backed_up()

    def close_soon(self, code: int, reason: str = "") -> None:
        """Ask the writer to send what is queued, then close the WebSocket with `code`.

        The first request wins; later ones are ignored.
        """
        if self._close_request is None and self._closed is None:
            self._close_request = (int(code), clip_reason(reason))
            if self._sending:
                self._arm_close_deadline()
        self.flush()

    async def aclose(self, code: int = CloseCode.NORMAL, reason: str = "") -> LinkClosedError:
        """Close the link with `code` and wait until it is closed (bounded by CLOSE_GRACE)."""
        self.close_soon(code, reason)
        with anyio.move_on_after(CLOSE_GRACE + 1):
            return await self.wait_closed()
        self._abort()
        return await self.wait_closed()

    # -- running ----------------------------------------------------------------------------

    async def run(self, on_event: EventHandler) -> LinkClosedError:
        """Read and write until the WebSocket closes; return why it closed.

        `on_event` is called synchronously, in order, for every protocol event. It must not
        block; it may change the protocol object and call `flush()` or `close_soon()`.
        """
        self._sending = True
        if self._close_request is not None:
            self._arm_close_deadline()
        self.flush()  # what was queued before the link ran
        framing = self.framing

        def pushed(message: bytes | str) -> None:
            try:
                self._receive(message, on_event)
            except Exception as exc:  # a bug: it ends this link, never the socket's caller
                self._write_failed(exc)

        try:
            # The reader, in this frame rather than a coroutine of its own: a relay holds one
            # per idle connection for as long as it lasts.
            try:
                pushing = framing.receive_with(pushed)
                async for message in framing.messages():
                    self._receive(message, on_event)
                    if not pushing:
                        pushing = framing.receive_with(pushed)
            except framing.closed_errors:
                pass
            self._finish()
            # The reader ended: give the writer a bounded moment to finish a requested close.
            with anyio.move_on_after(CLOSE_GRACE):
                await self.framing.wait_closed()
        finally:
            self._sending = False  # nothing more is sent but the goodbye below
            await self._stop_tasks()
            if not self.framing.is_closed:
                # Cancelled from outside (the owner is stopping): say goodbye, briefly.
                if self._close_request is None:
                    self._close_request = (int(CloseCode.GOING_AWAY), "going away")
                with anyio.move_on_after(CANCEL_GRACE, shield=True):
                    await self._close_websocket()
                self._abort()
            if self._closed is None:
                self._finish()
        if self._task_error is not None:
            raise self._task_error
        assert self._closed is not None
        return self._closed

    def _receive(self, message: bytes | str, on_event: EventHandler) -> None:
        if self._close_request is not None:
            return  # we are closing: whatever the peer still sends is moot
        try:
            if isinstance(message, str):
                raise RemoteProtocolError("text message on a binary protocol")
            self.connection.receive_data(message)
        except RemoteProtocolError as exc:
            self._failure = exc
            self.close_soon(exc.code, str(exc))
            return
        for event in self.connection.events_received():
            on_event(event)
        self.flush()

    # -- the writer task and the deadlines ----------------------------------------------------

    def _spawn(self, coroutine: Coroutine[None, None, None], name: str) -> asyncio.Task[None]:
        """Start a task that run() owns: it cancels and awaits it before it returns."""
        task = asyncio.get_running_loop().create_task(coroutine, name=f"{self.label} {name}")
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if task is self._writer:
            self._writer = None
            self._wake_writable()
        if task is self._closer:
            self._closer = None
        if task.cancelled():
            return
        error = task.exception()
        if error is not None and self._task_error is None:
            # A bug, not the peer: end the link (the reader sees the socket go) and let run()
            # raise it, as a task group would have.
            self._task_error = error
            self._abort()

    async def _stop_tasks(self) -> None:
        for timer in (self._watch, self._close_timer):
            if timer is not None:
                timer.cancel()
        self._watch = self._close_timer = None
        tasks = [task for task in (self._writer, self._closer) if task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            with anyio.move_on_after(CANCEL_GRACE, shield=True):
                await asyncio.wait(tasks)

    def _start_writer(self) -> None:
        if self._writer is not None or not self._sending:
            return
        self._writer = self._spawn(self._write_while_needed(), "writer")
        if self._send_timeout is not None and self._watch is None:
            self._watch = asyncio.get_running_loop().call_later(
                self._send_timeout / SEND_WATCH_TICKS, self._watch_send
            )

    async def _write_while_needed(self) -> None:
        lingered = False
        while True:
            if (
                self._close_request is None
                and not self._unsent
                and not self.connection.has_data_to_send()
                and not self._backed_up()
            ):
                if not lingered:
                    # A bulk sender queues more within a turn of the loop, when the socket is
                    # likely to back up again: waiting one turn is cheaper than a new task.
                    lingered = True
                    await asyncio.sleep(0)
                    continue
                # Checked and ended with no await in between, so no flush() can fall in a gap:
                # the next one writes from its callback again.
                self._writer = None
                self._wake_writable()
                return
            lingered = False
            try:
                await self._send_queued()
            except self.framing.closed_errors:
                self._sending = False
                return
            if self._close_request is not None:
                self._sending = False
                await self._close_websocket()
                return

    def _watch_send(self) -> None:
        """Cut off a peer that has kept one write waiting for more than the send timeout.

        A deadline per write would cost a timer per batch; looking every quarter of the limit
        while the writer runs costs four wake-ups per limit, and cuts off after the limit to
        1.25 times it.
        """
        self._watch = None
        if self._writer is None or self._send_timeout is None:
            return  # nothing waits on the socket; the next writer arms it again
        current = self._write_started if self._writing else -1
        if current < 0 or current != self._watched:
            self._watched, self._watch_seen = current, 0
        else:
            self._watch_seen += 1
            if self._watch_seen >= SEND_WATCH_TICKS:
                # The same write has waited at least the limit: the peer stopped reading its
                # socket. The writer is stuck in that write, so the close is sent from aside.
                self.close_soon(CloseCode.SLOW_CONSUMER, "stopped reading for too long")
                if self._closer is None:
                    self._closer = self._spawn(self._close_websocket(), "closer")
                return
        self._watch = asyncio.get_running_loop().call_later(
            self._send_timeout / SEND_WATCH_TICKS, self._watch_send
        )

    def _arm_close_deadline(self) -> None:
        # A writer stuck in send() (peer not reading, no send_timeout) must not keep a link we
        # decided to close alive forever.
        if self._close_timer is None:
            self._close_timer = asyncio.get_running_loop().call_later(CLOSE_GRACE * 2, self._abort)

    async def _send_queued(self) -> None:
        while True:
            messages, self._unsent = self._unsent, []
            try:
                messages += self.connection.data_to_write()
            except ProtocolError:
                return  # the link failed; close_soon() is on its way
            if not messages:
                if self._backed_up():
                    await self._write(messages)  # a batch of none: wait for the socket to drain
                return
            start = 0
            while start < len(messages):
                end = _batch_end(messages, start)
                await self._write(messages[start:end])
                start = end

    async def _write(self, messages: list[Outgoing]) -> None:
        """Send `messages` as WebSocket binary messages in one socket write, then drain.

        The write guard checks the WebSocket is open and drains the socket on exit; inside it
        every message is framed and the frames go out together.
        """
        self._write_started += 1
        self._writing = True
        try:
            async with self.framing.write_guard():
                if messages:
                    self._hand_to_socket(messages)  # the guard checked the connection
        finally:
            self._writing = False

    async def _close_websocket(self) -> None:
        assert self._close_request is not None
        code, reason = self._close_request
        with anyio.move_on_after(CLOSE_GRACE):
            await self.framing.close(code, reason)
            return
        self._abort()

    def _abort(self) -> None:
        self.framing.abort()

    def _write_failed(self, error: Exception) -> None:
        """A write raised: end the link and let run() raise it, as the writer task's does."""
        if self._task_error is None:
            self._task_error = error
        self._abort()

    def _finish(self) -> None:
        if self._closed is not None:
            return
        if self._close_request is not None:
            code, reason = self._close_request
            self._closed = LinkClosedError(code, reason, by_peer=False)
        else:
            code, reason, by_peer = self.framing.close_reason()
            self._closed = LinkClosedError(code, reason, by_peer=by_peer)
        if self._closed_waiter is not None:
            self._closed_waiter.set()
        self._wake_writable()

    def _wake_writable(self) -> None:
        waiter, self._writable_waiter = self._writable_waiter, None
        if waiter is not None:
            waiter.set()
