"""`tunnel attach LINK`: a terminal teammate client (its options: tunnel/teammate/command.py).

Watches the shared session and, with a drive link, prompts and answers permissions from the
keyboard. Reconnects by itself and resubscribes after the last item it holds, so a dropped link
shows no gap and no duplicate. On a terminal it keeps an input line at the bottom, with history
and completion, while the conversation scrolls above it and replies stream in place
(tunnel/terminal/screen.py); otherwise it reads and prints lines. The conversation goes to
stdout; what it is waiting for (a relay it cannot reach, a host that is offline) and why it stops
go to stderr. Everything that came over the wire is printed through `printable()`
(tunnel/terminal/sanitize.py); only a `pty:` agent's own screen, and only with `--raw`, reaches
the terminal as it is (tunnel/terminal/raw.py).

On a host of several conversations it shows one at a time: `/switch` (and `/new`, `/fork` once
the host says what they started) closes the channel to the one shown and opens one to the next,
resuming after the last item it held there when it showed it before; the host's list gives
`/list` and the count of requests waiting in the others (tunnel/terminal/conversations.py).
"""

from __future__ import annotations

import logging
import shutil
import sys
import time
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TextIO

import anyio
from anyio.abc import TaskGroup
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from tunnel.app import host_messages as incoming
from tunnel.app.conversation_list import ConversationList, ConversationStarted
from tunnel.app.file_view import FileWindow
from tunnel.app.follower import (
    CatchingUp,
    Event,
    FollowerEvent,
    Item,
    Presence,
    Skipped,
    SnapshotPage,
    SnapshotStarted,
)
from tunnel.app.requests import (
    DRIVING_REQUESTS,
    CloseConversation,
    Fork,
    Input,
    ListPaths,
    NewConversation,
    Request,
    Resize,
    encode_request,
)
from tunnel.app.roster import Change, Roster
from tunnel.e2e.crypto import ShareLink
from tunnel.e2e.opening import MAX_CONVERSATION_LENGTH, EarlySubscribe
from tunnel.handshake import check_name
from tunnel.link.framings import FramingName
from tunnel.process.backoff import TEAMMATE_MAX_BACKOFF, Backoff
from tunnel.process.exit_codes import EXIT_OK, EXIT_REFUSED, EXIT_UNREACHABLE
from tunnel.process.groups import unwrap_group
from tunnel.process.signals import exit_code_after, run_until_signal
from tunnel.proto.codes import FINAL_CODES, CloseCode
from tunnel.teammate.client import TeammateError, TeammateSession, connect_teammate
from tunnel.terminal.commands import (
    HOST_COMMANDS,
    LOCAL_COMMANDS,
    Close,
    ConversationCommand,
    ForkAt,
    Invite,
    Listing,
    New,
    People,
    Quit,
    Revoke,
    Say,
    ShareReplay,
    Switch,
    parse_line,
)
from tunnel.terminal.completion import CommandCompleter, PathCache
from tunnel.terminal.conversations import OtherWaiting, listing_lines, short
from tunnel.terminal.notify import TerminalSignals, WaitingRequests
from tunnel.terminal.presence import change_lines, whole_line
from tunnel.terminal.raw import ESCAPE_NAME, RawTerminal
from tunnel.terminal.render import render_item
from tunnel.terminal.sanitize import printable
from tunnel.terminal.screen import PlainScreen, PromptScreen, Screen, interactive_terminal
from tunnel.terminal.transcript import Transcript
from tunnel.terminal.view import ConversationView

logger = logging.getLogger("tunnel.attach")

HOST_GONE_HINT_AFTER = 3
""""Host offline" answers in a row after which the user is told, once, that the link may be
wrong: a mistyped host id looks exactly like a host that is not online."""

HOST_GONE_HINT = "no host is online for this link: it may be wrong, or the host has not started"

RAW_REPLAY_ITEMS = 500
"""Items a fresh `--raw` attach replays: a terminal's screen is drawn by its past output, not
only by its last lines (a full-screen program redraws it all when its size changes)."""

MAX_BACKFILL_PAGES = 5
"""History pages read after a fresh join, unprinted, to learn the agent's commands and settings
and the open permission requests from before the replayed end of the conversation."""

ATTACH_FILE_LINES = 40
"""Lines of a file `/open` prints: the host's window is larger, a terminal shows less."""

VIEW_ONLY = "this is a view link: you can watch but not drive (a drive link can)"
"""What a viewer is told when a line would drive the session."""

MAX_VIEWS_KEPT = 16
"""Conversations not shown whose view (cursor, open requests, the agent's commands) is kept, so
switching back resumes after the last item seen; an older one is joined afresh."""


def file_lines(window: FileWindow, around: int = ATTACH_FILE_LINES) -> list[str]:
    """A `FileWindow` as a terminal shows it: a header, then at most `around` lines centred on
    the one asked for (or found), each numbered, that one marked with `>`."""
    target = window.found or window.line or window.first
    start = max(window.first, target - around // 2)
    shown = window.lines[start - window.first : start - window.first + around]
    width = len(str(start + len(shown)))
    header = f"{window.shown or window.path} (lines {start}-{start + len(shown) - 1}"
    header += f" of {window.total})"
    rows = [header]
    for number, text in enumerate(shown, start):
        mark = ">" if number == target and (window.line or window.found) else " "
        rows.append(f"{mark}{number:>{width}} | {text}")
    return rows


def sandbox_text(sandbox: incoming.SandboxInfo) -> str:
    """The line that tells a teammate, on attach, how far the agent reaches on the host."""
    if not sandbox.enabled:
        return "the agent is not sandboxed: it can do whatever the host's user can"
    writable = ", ".join(sandbox.writable) or "nothing"
    network = "network on" if sandbox.network else "no network"
    return f"the agent runs in a sandbox: it can write only in {writable}; {network}"


@dataclass(frozen=True, slots=True, kw_only=True)
class AttachSettings:
    """Everything `tunnel attach` needs."""

    link: ShareLink
    name: str
    """The display name the others see (1 to 64 characters)."""

    reconnect: bool = True
    """Try again when the relay cannot be reached or the link drops."""

    max_backoff: float = TEAMMATE_MAX_BACKOFF
    """Cap of the delay between attempts, in seconds."""

    give_up_after: float | None = None
    """Seconds without being attached (relay unreachable, host offline) after which to stop
    with EXIT_UNREACHABLE; None keeps trying."""

    raw: bool = False
    """Write a `pty:` agent's screen output to this terminal as it is, its escape sequences
    included, so the program draws its own screen; on a terminal, keys then pass through to it
    until Ctrl-]. Off, it is escaped like everything else; on, everything else still is."""

    history: int | None = None
    """How many items of the conversation so far to print on attach (and of what was missed
    after a reconnect); None: as many as the terminal has rows."""

    bell: bool = True
    """Ring the terminal's bell once for each new permission request that waits (a drive link
    only: a viewer cannot answer)."""

    framing: str = FramingName.websockets
    """The WebSocket library to dial the relay with: "websockets", or "picows" (the `fast`
    extra), which spends less CPU per message received."""

    conversation: str | None = None
    """The host's conversation to show first (`/switch` shows another); None: the host's first
    one."""

    def __post_init__(self) -> None:
        check_name(self.name)
        if self.conversation is not None and not (
            1 <= len(self.conversation) <= MAX_CONVERSATION_LENGTH
        ):
            raise ValueError(f"a conversation id is 1 to {MAX_CONVERSATION_LENGTH} characters")
        if self.give_up_after is not None and not self.give_up_after >= 0:
            raise ValueError("give_up_after is a number of seconds, 0 or more")
        if self.history is not None and self.history < 0:
            raise ValueError("history is a number of items, 0 or more")


class _Quit(Exception):
    pass


class Attachment:
    """One attached terminal: prints what arrives, sends what the user types."""

    def __init__(
        self,
        settings: AttachSettings,
        *,
        console: Console,
        stdin: TextIO,
        status: Console | None = None,
        screen: Screen | None = None,
        stdout_fd: int | None = None,
        signals: TerminalSignals | None = None,
    ) -> None:
        self._settings = settings
        self._console = console
        # What it waits for goes to stderr: stdout is the conversation's.
        self._status = status if status is not None else Console(stderr=True, highlight=False)
        self._stdin = stdin
        self._screen = screen if screen is not None else PlainScreen(console, stdin)
        self._stdout_fd = stdout_fd
        self._transcript = Transcript(self._screen, markdown=self._screen.live)
        if isinstance(self._screen, PromptScreen):
            self._screen.set_live_source(self._transcript.live_view)
        self._attached = False
        self._host_gone = 0
        self._hinted = False
        self._view = ConversationView()
        self.paths = PathCache()
        """The workspace paths the host listed for the `@path` words typed (completion)."""
        self.paths.on_answer = self._screen.complete_again
        self._roster = Roster()
        # None until the first presence message (printed whole); then whether some of those
        # attached were not listed (`change_lines`).
        self._crowded: bool | None = None
        self._terminal = False
        self._backoff = Backoff(maximum=settings.max_backoff)
        # Lines typed while disconnected wait here; bounded so a paste storm cannot grow memory.
        self._lines_send, self._lines_receive = anyio.create_memory_object_stream[str](16)
        self._history = (
            settings.history
            if settings.history is not None
            else shutil.get_terminal_size((80, 24)).lines
        )
        # The replay in progress: the last `history` items it holds, and how many went unshown.
        self._replay: deque[Mapping[str, Any]] = deque(maxlen=max(self._history, 1))
        self._replaying = False
        self._unshown = 0
        self._channel: TeammateSession | None = None
        self._connection: TaskGroup | None = None
        self._earlier: int | None = None
        """Where the replay began, when the log holds items before it (a fresh join)."""
        self._raw: RawTerminal | None = None
        self._raw_told = False
        self._host_size: tuple[int, int] | None = None
        """A terminal agent's size on the host (`ready`, then `terminal_size` events)."""
        self._left = anyio.Event()
        self._tg: TaskGroup | None = None
        self._signals = signals
        self._waiting = WaitingRequests()
        self._prompt = "> " if self._driver else "(view) > "
        self._shown_prompt = ""
        self._conversation = settings.conversation
        """The conversation shown, which the next channel opens to (None: the host's first,
        until its `ready` names it)."""
        self._switch_to: str | None = None
        """The conversation to show next: the channel to the one shown is closing."""
        self._switched = settings.conversation is not None
        self._views: OrderedDict[str, ConversationView] = OrderedDict()
        """The views of the conversations shown before (bounded: MAX_VIEWS_KEPT)."""
        self._listing: ConversationList | None = None
        """The host's conversations as it last listed them."""
        self._others = OtherWaiting()
        self._credit = 0
        """Requests of the conversation just switched to that rang when it was not shown: they
        do not ring again when its replay shows them."""

    @property
    def view(self) -> ConversationView:
        """What typed commands refer to (and the completion offers)."""
        return self._view

    @property
    def listing(self) -> ConversationList | None:
        """The host's conversations as it last listed them (the completion offers them)."""
        return self._listing

    @property
    def _driver(self) -> bool:
        return self._settings.link.role == "drive"

    async def run(self) -> int:
        """Attach until the user quits or the link is refused; returns the exit code."""
        code = EXIT_OK
        if not self._driver:
            self._screen.note("view-only link: you can watch but not drive")
        self._refresh_prompt()

        async def attach() -> None:
            nonlocal code
            try:
                code = await self._attach_forever()
            except _Quit:
                code = EXIT_OK
            self._left.set()

        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._read_keyboard)
            tg.start_soon(attach)
            await self._left.wait()
            if isinstance(self._screen, PromptScreen):
                self._screen.exit()
            tg.cancel_scope.cancel()
        return code

    async def _read_keyboard(self) -> None:
        await self._screen.run(self._lines_send)
        if self._raw is not None:
            return  # the keyboard went to the raw terminal
        if self._driver or self._screen.live:
            # End of input (or Ctrl-D at the prompt line): leave once what was typed is sent.
            await self._lines_send.send("/quit")
        # A viewer whose input ended (stdin is /dev/null) has nothing to send: it keeps watching.

    async def _attach_forever(self) -> int:
        settings = self._settings
        waiting_since = anyio.current_time()
        while True:
            host_gone = False
            try:
                # The client's task groups wrap what they raise: look through the wrapping.
                async with unwrap_group():
                    await self._attach_once()
            except TeammateError as exc:
                if exc.by_peer and exc.code in FINAL_CODES:
                    self._stop(str(exc))
                    return EXIT_REFUSED
                problem = str(exc)
                host_gone = exc.code == CloseCode.HOST_GONE
            except OSError as exc:
                problem = f"cannot reach the relay at {settings.link.relay_url}: {exc}"
            else:
                if self._switch_to is not None:
                    continue  # the channel to the conversation shown closed: open the next
                return EXIT_OK
            finally:
                self._channel = None
            if self._attached:
                # It was attached until now: the wait starts over.
                self._attached = False
                waiting_since = anyio.current_time()
            self._count_host_gone(host_gone)
            delay = self._backoff.next_delay()
            waited = anyio.current_time() - waiting_since
            if not settings.reconnect:
                self._stop(problem)
                return EXIT_UNREACHABLE
            if settings.give_up_after is not None:
                if waited >= settings.give_up_after:
                    self._stop(f"{problem}; gave up after {settings.give_up_after:g} s")
                    return EXIT_UNREACHABLE
                # The last attempt is made at the deadline, not after it.
                delay = min(delay, settings.give_up_after - waited)
            self._say_status(f"{printable(problem)}; retrying in {delay:.1f} s", "yellow")
            await anyio.sleep(delay)

    def _say_status(self, text: str, style: str) -> None:
        if self._raw is not None and self._raw.running:
            self._raw.note(text)
        else:
            self._status.print(f"[{style}]{escape(printable(text))}[/{style}]", soft_wrap=True)

    def _count_host_gone(self, host_gone: bool) -> None:
        self._host_gone = self._host_gone + 1 if host_gone else 0
        if self._host_gone >= HOST_GONE_HINT_AFTER and not self._hinted:
            self._hinted = True
            self._say_status(HOST_GONE_HINT, "bold")

    def _stop(self, reason: str) -> None:
        """Say why attach stops: one line on stderr, like every command's last word."""
        if self._raw is not None and self._raw.running:
            # The terminal is raw: a line needs its carriage return.
            self._raw.note(f"tunnel attach: {reason}")
            return
        # The reason may be a close reason the relay or the host chose.
        print(f"tunnel attach: {printable(reason)}", file=sys.stderr, flush=True)

    async def _attach_once(self) -> None:
        if self._switch_to is not None:
            self._enter(self._switch_to)
        # The open carries the subscribe, so the snapshot comes with `ready` (docs/protocol.md,
        # "Attaching in one round trip"), and names the conversation shown: a reconnect resumes
        # that one, whichever the host would show first.
        if self._view.last_seq is None:
            # A fresh join: the end of the conversation only (docs/application.md); with
            # --raw, enough of a terminal's output to draw its screen.
            tail = max(self._history, RAW_REPLAY_ITEMS) if self._settings.raw else self._history
            early = EarlySubscribe(tail=tail, conversation=self._conversation)
        else:
            # A resume: everything missed, exactly once; what is printed of it is cut here.
            early = EarlySubscribe(after=self._view.last_seq, conversation=self._conversation)
        async with connect_teammate(
            self._settings.link,
            name=self._settings.name,
            subscribe=early,
            framing=self._settings.framing,
        ) as channel:
            # One roster for every attachment: the list after a reconnect says only what changed.
            channel.follower.roster = self._roster
            # Attached once the host answered: a refusal ends this attempt before any input is
            # read.
            await channel.start()
            self._channel = channel
            channel.on_file = self._show_file
            channel.on_paths = self.paths.received
            channel.on_conversations = self._on_conversations
            async with anyio.create_task_group() as tg:
                self._connection = tg

                def ask(prefix: str) -> None:
                    tg.start_soon(channel.send, encode_request(ListPaths(prefix=prefix)))

                self.paths.ask = ask
                tg.start_soon(self._forward_lines, channel)
                try:
                    while True:
                        self._show(await channel.receive())
                        self._signal_waiting()
                finally:
                    self._connection = None
                    self.paths.ask = None

    async def _backfill(self, channel: TeammateSession, before: int) -> None:
        """Read earlier items, unprinted, for the state they hold: the agent's commands and
        settings, open permission requests. Stops once both are known or after
        `MAX_BACKFILL_PAGES` pages."""
        try:
            for _ in range(MAX_BACKFILL_PAGES):
                if self._view.complete:
                    return
                page = await channel.history(before=before)
                for item in reversed(page.items):
                    self._view.absorb_earlier(item)
                if not page.more or not page.items:
                    return
                seq = page.items[0].get("seq")
                if not isinstance(seq, int):
                    return
                before = seq
        finally:
            # A request from before the replayed end still waits: it counts, and is new here.
            self._signal_waiting()

    async def _forward_lines(self, channel: TeammateSession) -> None:
        async for line in self._lines_receive:
            request = self._request_for(line)
            if request is not None:
                await channel.send(encode_request(request))

    def _request_for(self, line: str) -> Request | None:
        """What a typed line sends, if anything; says in one line why it sends nothing."""
        command = parse_line(line, self._view)
        if command is None:
            if not self._terminal or line.strip(" \t\r\n"):
                return None
            # A terminal program waits for Enter as often as for text: a blank line sends it.
            command = Input(data=b"\r")
        if isinstance(command, Quit):
            raise _Quit
        if isinstance(command, New | Listing | Switch | Close | ForkAt):
            return self._conversation_request(command)
        if isinstance(command, Say):
            # It may echo what the agent named: option names and ids, its commands.
            self._screen.note(command.text)
            return None
        if isinstance(command, Revoke):
            self._screen.note("only the host can revoke the links")
            return None
        if isinstance(command, Invite | People | ShareReplay):
            self._screen.note("only the host can invite people")
            return None
        if isinstance(command, DRIVING_REQUESTS) and not self._driver:
            self._screen.note(VIEW_ONLY, "yellow")
            return None
        return command

    def _show(self, event: FollowerEvent) -> None:
        raw = self._raw
        match event:
            case incoming.Ready():
                self._ready(event)
            case SnapshotStarted():
                if event.reset:
                    # The host's log is not the one we saw (a new log under the same
                    # conversation).
                    self._view = ConversationView()
                    self._note("the host's conversation log starts over")
                if event.earlier and event.first_seq is not None:
                    self._earlier = event.first_seq
                # The state a bounded join left behind (settings, commands, open requests):
                # known, not shown.
                for item in reversed(event.context):
                    self._view.absorb_earlier(item)
            case SnapshotPage():
                for item in event.items:
                    self._replayed(item)
                if not event.more:
                    self._end_replay()
            case Item():
                self._show_item(event.item)
            case Event():
                if raw is None:
                    self._transcript.event(event.event)
                elif event.event.get("kind") == "terminal_size":
                    self._terminal_size(event.event.get("data"))
            case Presence():
                if raw is None:
                    if self._crowded is None:
                        self._screen.note(whole_line(event.members, event.count))
                    else:
                        change = Change(list(event.joined), list(event.left))
                        for line in change_lines(change, crowded=self._crowded):
                            self._screen.note(line)
                    self._crowded = event.count > len(event.members)
            case incoming.Error():
                self._note(f"refused: {event.message}", "red")
            case Skipped():
                logger.warning("dropped a message from the host: %s", event.reason)
            case CatchingUp():
                logger.info("catching up after seq %d: %s", event.after, event.reason)

    def _show_file(self, window: FileWindow) -> None:
        """The answer to `/open`: the lines around the one asked for, numbered, that one marked."""
        if window.refused is not None:
            self._screen.note(window.refused, "red")
            return
        for line in file_lines(window):
            self._screen.note(line, "default")

    def _signal_waiting(self) -> None:
        """Show how many permission requests wait, and ring for each new one. Not while a
        replay is being read: a request it holds may be answered further on."""
        if self._replaying or self._raw is not None:
            return
        before = self._waiting.count
        # The agent's questions wait for a person too.
        new = self._waiting.update([*self._view.pending, *self._view.questions])
        # Those that rang while their conversation was not shown ring no more; after the replay
        # that resumed it, every request is one the list never counted.
        new = max(0, new - self._credit)
        self._credit = 0
        if self._waiting.count != before:
            self._refresh_prompt()
        if self._signals is not None:
            self._signals.show(self._waiting, new if self._driver else 0)

    def _refresh_prompt(self) -> None:
        """The prompt: requests waiting here, then elsewhere, then the conversation shown when
        the host has several (`[1 waiting] [2 waiting in c-1a2b] main > `)."""
        base = self._prompt
        several = self._listing is not None and len(self._listing.conversations) > 1
        if self._conversation is not None and several:
            base = f"{short(self._conversation)} {base}"
        prompt = self._waiting.prompt(self._others.prompt(base))
        if prompt != self._shown_prompt:
            self._shown_prompt = prompt
            self._screen.set_prompt(prompt)

    # -- conversations --------------------------------------------------------------------------

    def _on_conversations(self, message: ConversationList | ConversationStarted) -> None:
        """The host's list (after the snapshot, and on every change), or the conversation this
        teammate's `/new` or `/fork` started, which is then shown."""
        if isinstance(message, ConversationStarted):
            self._note(f"started conversation {short(message.conversation)}", "bold")
            self._switch(message.conversation)
            return
        self._listing = message
        new = self._others.update(message, self._conversation)
        self._waiting.elsewhere = self._others.count
        self._refresh_prompt()
        if new and self._raw is None and not self._screen.live:
            self._screen.note(self._others.line(), "yellow")  # no prompt line shows it
        if self._signals is not None and self._raw is None:
            self._signals.show(self._waiting, new if self._driver else 0)

    def _find(self, target: str) -> str | None:
        """The id of the conversation `target` names (id, unique start, number); says why not."""
        if self._listing is None:
            self._screen.note("the host has listed no conversations (yet)")
            return None
        entry = self._listing.find(target)
        if entry is None:
            self._screen.note(f"no conversation {short(target)} here (/list shows them)")
            return None
        return entry.id

    def _conversation_request(self, command: ConversationCommand) -> Request | None:
        """/new, /list, /switch, /close, /fork: what to send, if anything."""
        listing = self._listing
        match command:
            case Listing():
                if listing is None:
                    self._screen.note("the host has listed no conversations (yet)")
                    return None
                for line in listing_lines(listing, current=self._conversation, now=time.time()):
                    self._screen.note(line, "default")
                return None
            case Switch(target=target):
                found = self._find(target)
                if found is not None:
                    self._switch(found)
                return None
        if not self._driver:
            self._screen.note(VIEW_ONLY, "yellow")
            return None
        match command:
            case New(agent=agent):
                if listing is not None and agent not in listing.agents:
                    offered = ", ".join(short(a) for a in listing.agents) or "none"
                    self._screen.note(f"no agent {short(agent)} here; this host offers {offered}")
                    return None
                return NewConversation(agent=agent)
            case Close(target=named):
                closing = self._conversation if named is None else self._find(named)
                if closing is None:
                    if named is None:
                        self._screen.note("not attached to a conversation yet")
                    return None
                return CloseConversation(conversation=closing)
            case ForkAt(upto=given):
                if self._conversation is None:
                    self._screen.note("not attached to a conversation yet")
                    return None
                upto = self._view.last_seq if given is None else given
                if upto is None:
                    self._screen.note("nothing to fork yet: the conversation holds no item")
                    return None
                return Fork(conversation=self._conversation, upto=upto)

    def _switch(self, conversation: str) -> None:
        """Show `conversation`: the channel to the one shown closes, one to it opens."""
        if len(conversation) > MAX_CONVERSATION_LENGTH:
            self._screen.note("that conversation's id is too long to open")
            return
        if conversation == self._conversation and self._switch_to is None:
            self._screen.note(f"conversation {short(conversation)} is the one shown")
            return
        if self._raw is not None:
            self._note("--raw shows one conversation: leave and attach again to show another")
            return
        self._switch_to = conversation
        connection = self._connection
        if connection is not None:
            connection.cancel_scope.cancel()

    def _enter(self, conversation: str) -> None:
        """Make `conversation` the one shown, its view resumed where it was left."""
        self._switch_to = None
        self._switched = True
        old = self._conversation
        if old is not None:
            self._views[old] = self._view
            self._views.move_to_end(old)
            while len(self._views) > MAX_VIEWS_KEPT:
                self._views.popitem(last=False)
            # What waits there was told of here: leaving it rings nothing.
            self._others.leave(old, self._waiting.count)
        kept = self._views.pop(conversation, None)
        self._view = kept if kept is not None else ConversationView()
        self._conversation = conversation
        self._credit = self._others.seen(conversation)
        # What streamed and ran in the one left is not this one's.
        self._transcript = Transcript(self._screen, markdown=self._screen.live)
        if isinstance(self._screen, PromptScreen):
            self._screen.set_live_source(self._transcript.live_view)
        self._screen.changed()
        self._waiting.update([*self._view.pending, *self._view.questions])
        if self._listing is not None:
            self._others.recount(self._listing, conversation)
            self._waiting.elsewhere = self._others.count
        self._refresh_prompt()
        self._screen.note(f"showing conversation {short(conversation)}", "bold")

    def _note(self, text: str, style: str = "dim") -> None:
        if self._raw is not None:
            self._raw.note(text)
        else:
            self._screen.note(text, style)

    def _ready(self, message: incoming.Ready) -> None:
        # The host answered: this attachment works, so the next outage starts over.
        self._backoff.reset()
        self._attached = True
        self._host_gone = 0
        served = message.conversation_id
        if self._conversation is not None and served != self._conversation:
            # The host has no such conversation and serves its first (docs/application.md).
            self._note(
                f"the host has no conversation {short(self._conversation)}: showing"
                f" {short(served)}",
                "yellow",
            )
            self._views.pop(served, None)
        self._conversation = served
        self._terminal = message.agent_kind == "terminal"
        if message.terminal is not None:
            self._draw_at(message.terminal.cols, message.terminal.rows)
        # What was streaming when the link dropped comes back whole in the replay.
        self._transcript.drop_streams()
        self._replaying = True
        self._replay.clear()
        self._unshown = 0
        if self._raw is not None:
            self._send_size_soon()
            return
        name, role = printable(message.name), printable(message.role)
        where = f" to conversation {short(served)}" if self._switched else ""
        self._screen.print(
            Text(f"attached as {name} ({role}){where}", style="bold")
            + (Text(" /help lists the commands", style="dim") if self._driver else Text(""))
        )
        if message.sandbox is not None:
            self._screen.note(sandbox_text(message.sandbox))
        if not self._terminal:
            return
        if self._settings.raw and self._raw_possible():
            self._start_raw()
        elif not self._settings.raw:
            self._screen.note(
                "the agent is a terminal program: its screen is shown with escape sequences made"
                " visible (--raw shows it as it is)"
                + ("; a blank line sends Enter" if self._driver else "")
            )

    def _replayed(self, item: Any) -> None:
        """One item of a snapshot: kept to be shown at its end, if among the last ones."""
        if not isinstance(item, Mapping) or not self._view.accept(item):
            return
        if self._raw is not None or not self._replaying:
            # A terminal's screen needs all its output to be drawn right.
            self._show_accepted(item)
            return
        if self._history == 0:
            self._transcript.remember(item)
            self._unshown += 1
            return
        if len(self._replay) == self._replay.maxlen:
            self._transcript.remember(self._replay[0])
            self._unshown += 1
        self._replay.append(item)

    def _end_replay(self) -> None:
        if not self._replaying:
            return
        self._replaying = False
        earlier, self._earlier = self._earlier, None
        if self._unshown:
            noun = "item" if self._unshown == 1 else "items"
            self._screen.note(
                f"… {self._unshown} earlier {noun} not shown (--history N shows the last N)"
            )
        elif earlier is not None:
            self._screen.note("… earlier items not shown (--history N shows the last N)")
        if earlier is not None and self._channel is not None and self._connection is not None:
            self._connection.start_soon(self._backfill, self._channel, earlier)
        replay, self._unshown = list(self._replay), 0
        self._replay.clear()
        for item in replay:
            self._show_accepted(item)

    def _show_item(self, item: Any) -> None:
        if not isinstance(item, Mapping) or not self._view.accept(item):
            return
        if self._replaying:
            # An item after an unfinished snapshot: the replay ends with what it holds.
            self._end_replay()
        self._show_accepted(item)

    def _show_accepted(self, item: Mapping[str, Any]) -> None:
        kind = item.get("type")
        raw = self._raw
        data = item.get("data")
        if raw is not None:
            # The one exception (docs/security.md, "What a terminal prints"): with --raw, a
            # terminal agent's screen output is written as it is, so its escapes draw the screen.
            if kind == "terminal" and isinstance(data, Mapping):
                raw.write(str(data.get("text", "")))
            elif kind != "message":
                # Prompts show on the screen as the program echoes them; the rest as a note.
                raw.note(render_item(item).plain)
            return
        if kind == "terminal" and self._settings.raw and self._terminal:
            # --raw where keys cannot pass through (not a terminal): the screen output as it is.
            if isinstance(data, Mapping):
                self._console.file.write(str(data.get("text", "")))
                self._console.file.flush()
            return
        self._transcript.item(item)

    # -- raw mode -------------------------------------------------------------------------------

    def _terminal_size(self, data: Any) -> None:
        """A `terminal_size` event: the host's terminal was resized."""
        if not isinstance(data, Mapping):
            return
        cols, rows = data.get("cols"), data.get("rows")
        if type(cols) is int and type(rows) is int and cols > 0 and rows > 0:
            self._draw_at(cols, rows)

    def _draw_at(self, cols: int, rows: int) -> None:
        self._host_size = (cols, rows)
        # A driver's terminal gives the host its size; a viewer shows the screen at the size
        # the drivers gave.
        if self._raw is not None and not self._driver:
            self._raw.draw_at(cols, rows)

    def _raw_possible(self) -> bool:
        return isinstance(self._screen, PromptScreen) and self._stdout_fd is not None

    def _start_raw(self) -> None:
        assert self._stdout_fd is not None
        assert self._tg is not None
        self._raw = RawTerminal(
            fd_in=self._stdin.fileno(),
            fd_out=self._stdout_fd,
            send_keys=self._send_keys,
            resized=self._send_size,
        )
        if self._host_size is not None and not self._driver:
            self._raw.draw_at(*self._host_size)
        self._tg.start_soon(self._run_raw, self._raw)

    async def _run_raw(self, raw: RawTerminal) -> None:
        host = self._host_size
        cols, rows = raw.size()
        if host is not None and not self._driver and (host[0] > cols or host[1] > rows):
            self._screen.note(
                f"the host's terminal is {host[0]}x{host[1]}, larger than this one ({cols}x"
                f"{rows}): the agent's screen does not fit and shows garbled; enlarge this "
                "terminal",
                "yellow",
            )
        self._screen.note(
            f"the agent's screen follows; your keys go to it. {ESCAPE_NAME} leaves", "bold"
        )
        await self._screen.release()
        await raw.run()
        self._left.set()

    async def _send_keys(self, data: bytes) -> None:
        if not self._driver:
            self._tell_once(VIEW_ONLY + f"; {ESCAPE_NAME} leaves")
            return
        channel = self._channel
        if channel is None:
            self._tell_once("not attached right now: keys are not sent")
            return
        await channel.send(encode_request(Input(data=data)))

    async def _send_size(self, cols: int, rows: int) -> None:
        # A viewer sees the screen at the size its drivers gave it.
        channel = self._channel
        if self._driver and channel is not None:
            await channel.send(encode_request(Resize(cols=cols, rows=rows)))

    def _send_size_soon(self) -> None:
        raw = self._raw
        if raw is not None and raw.running and self._tg is not None:
            self._tg.start_soon(self._send_size, *raw.size())

    def _tell_once(self, text: str) -> None:
        if not self._raw_told and self._raw is not None:
            self._raw_told = True
            self._raw.note(text)


async def run_attach(settings: AttachSettings) -> int:
    """The programmatic API behind `tunnel attach`; returns the process exit code.

    Runs until the user quits, the link is refused, attach gives up, or SIGINT/SIGTERM.
    """
    console = Console(highlight=False)
    # The real standard output, taken before the prompt screen puts its proxy in its place.
    signals = TerminalSignals(sys.stdout, program="tunnel attach", bell=settings.bell)
    screen: Screen
    if interactive_terminal(sys.stdin, sys.stdout):
        local = [name for name in LOCAL_COMMANDS if name not in HOST_COMMANDS]
        view = CommandCompleter(
            lambda: attachment.view,
            local=local,
            paths=lambda: attachment.paths,
            conversations=lambda: attachment.listing,
        )
        screen = PromptScreen(completer=view)
    else:
        screen = PlainScreen(console, sys.stdin)
    attachment = Attachment(
        settings,
        console=console,
        stdin=sys.stdin,
        screen=screen,
        stdout_fd=sys.stdout.fileno() if screen.live else None,
        signals=signals,
    )
    code = EXIT_OK

    async def main(tg: TaskGroup) -> None:
        nonlocal code
        code = await attachment.run()
        tg.cancel_scope.cancel()

    try:
        stopped_by = await run_until_signal(main)
    finally:
        signals.close()
    return code if stopped_by is None else exit_code_after(stopped_by)
