"""The host console: the live conversation, who is attached, and a prompt line for the host user.

The host user is a co-driver like any teammate: typed lines go to the same shared session, and
permission requests can be answered here. With `--approve`, each joining teammate waits until the
host user admits them. On a terminal the prompt line stays at the bottom, with history and
completion, while the conversation scrolls above it and replies stream in place (the same screen
as `tunnel attach`, tunnel/terminal/screen.py); otherwise lines are read and printed. Names, items
and messages come from others: all are printed through `printable()`
(tunnel/terminal/sanitize.py), a terminal agent's screen output included.

On a host of several conversations the console shows one at a time: /new, /list, /switch,
/close and /fork act on the host's registry (tunnel/host/conversations.py) directly, and the
prompt counts the requests that wait in the others. /sessions and /resume list and resume an ACP
agent's own past sessions: here alone, since they are the host user's, perhaps never shared.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TextIO

import anyio
from rich.console import Console
from rich.text import Text

from tunnel.agents import AgentSession, parse_spec
from tunnel.app.conversation_list import ConversationList, parse_conversation_message
from tunnel.app.errors import AppError, BadRequest
from tunnel.app.host_messages import PresenceMessage
from tunnel.app.requests import (
    DRIVING_REQUESTS,
    Authenticate,
    Cancel,
    ElicitationAnswer,
    PermissionAnswer,
    Prompt,
    SetConfig,
    SetMode,
    SetModel,
)
from tunnel.app.roster import Roster
from tunnel.host.conversations import Conversation, Conversations
from tunnel.host.invitations import InvitationError
from tunnel.host.presence import Presence, wire_members
from tunnel.log import Event, Log
from tunnel.terminal.commands import (
    HELP,
    Close,
    ConversationCommand,
    ForkAt,
    Invite,
    Listing,
    New,
    PastSessionCommand,
    People,
    Quit,
    Resume,
    Revoke,
    Say,
    Sessions,
    ShareReplay,
    Switch,
    parse_host_line,
)
from tunnel.terminal.completion import CommandCompleter
from tunnel.terminal.conversations import OtherWaiting, listing_lines, short
from tunnel.terminal.notify import TerminalSignals, WaitingRequests
from tunnel.terminal.presence import change_lines, whole_line
from tunnel.terminal.questions import PendingQuestion
from tunnel.terminal.sanitize import printable
from tunnel.terminal.screen import PlainScreen, PromptScreen, Screen, interactive_terminal
from tunnel.terminal.transcript import Transcript
from tunnel.terminal.view import ConversationView, PendingPermission

if TYPE_CHECKING:
    from tunnel.agents.acp_agent import AcpSession, PastSession

logger = logging.getLogger("tunnel.console")

# How much earlier conversation the console shows when it starts (and, at most, of what a
# conversation switched back to holds since it was shown).
HISTORY_SHOWN = 20
# Conversations whose last item shown is remembered, so switching back resumes after it.
CURSORS_KEPT = 64
# Seconds between two looks at the host's list of conversations, at least: it changes with every
# item of every conversation; the prompt follows at this pace.
LIST_INTERVAL = 0.25
# Lines typed ahead of the console; the screen says so when a line finds no room.
LINE_BUFFER = 16
# A joiner waits this long for the host user's answer, then is refused.
APPROVAL_TIMEOUT = 120.0
# Joiners waiting for an answer at once; more are refused at once rather than queued forever.
MAX_WAITING_JOINERS = 8


CLOSED = "this conversation is closed: start a new one, or switch"
"""What driving a closed conversation gets, as a teammate's request gets it."""


@dataclass(slots=True)
class _Question:
    who: str
    answered: anyio.Event = field(default_factory=anyio.Event)
    admit: bool = False


class PeopleControl(Protocol):
    """What the console's /invite, /revoke NAME and /people do (the share provides it)."""

    async def invite(self, name: str, role: str) -> str:
        """Invite `name` in `role`; return their link. InvitationError if it cannot be."""
        ...

    async def revoke(self, name: str) -> None:
        """End `name`'s link and channels. InvitationError if nobody has that name."""
        ...

    def listing(self) -> list[str]:
        """One line per invitation: name, role, attached or when last seen."""
        ...

    async def share_replay(self, conversation: str, upto: int | None) -> str:
        """Make a replay link of `conversation` up to `upto` (None: its head); return the line
        that names it and gives the link. InvitationError if it cannot be."""
        ...


class HostConsole:
    """Renders the log to a terminal and turns typed lines into session requests."""

    def __init__(
        self,
        *,
        session: AgentSession,
        log: Log,
        presence: Presence,
        host_name: str,
        console: Console,
        stdin: TextIO | None,
        bell: bool = True,
        conversations: Conversations | None = None,
    ) -> None:
        """`session` and `presence` are those of the conversation shown first; `conversations`
        the host's registry, when it runs several (/new, /list, /switch, /close, /fork)."""
        self._session = session
        self._log = log
        self._presence = presence
        self._conversations = conversations
        self._conversation: Conversation | None = (
            None if conversations is None else conversations.get(session.conversation_id)
        )
        self._switched = anyio.Event()
        self._cursors: OrderedDict[str, int] = OrderedDict()
        """The last seq shown of each conversation shown (bounded: CURSORS_KEPT)."""
        self._others = OtherWaiting()
        self._shown_prompt = ""
        self._host_name = host_name
        self._console = console
        self._stdin = stdin
        self._questions: deque[_Question] = deque()
        # The console's file now, before the prompt screen puts its proxy in sys.stdout's place.
        # Without a prompt line nobody here answers: no bell then.
        self._signals = TerminalSignals(
            console.file, program="tunnel host", bell=bell and stdin is not None
        )
        self._waiting = WaitingRequests()
        self._screen: Screen
        if stdin is not None and interactive_terminal(stdin, console.file):
            self._screen = PromptScreen(
                completer=CommandCompleter(self._view, conversations=self._listing),
                on_eof=self._keep_sharing,
            )
        else:
            self._screen = PlainScreen(console, stdin)
        self._transcript = Transcript(self._screen, markdown=self._screen.live)
        if isinstance(self._screen, PromptScreen):
            self._screen.set_live_source(self._transcript.live_view)
        self.quit_requested = anyio.Event()
        self.revoke: Callable[[], Awaitable[None]] | None = None
        """Set by the share once the host exists: revokes both links and prints the new ones."""
        self.people: PeopleControl | None = None
        """Set by the share once the host exists: personal links (/invite, /revoke NAME,
        /people)."""

    async def run(self) -> None:
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._follow)
                if self._conversations is not None:
                    tg.start_soon(self._watch_conversations, self._conversations)
                if self._stdin is not None:
                    tg.start_soon(self._read_lines)
        finally:
            if isinstance(self._screen, PromptScreen):
                self._screen.exit()
            self._signals.close()

    async def approve_join(self, who: str, role: str) -> bool:
        """Ask the host user whether `who` may join; False when refused or unanswered in time."""
        if self._stdin is None or len(self._questions) >= MAX_WAITING_JOINERS:
            return False
        question = _Question(who=who)
        self._questions.append(question)
        # The name is the joiner's own choice: it must not be able to redraw this question. A
        # Text, not markup: a name that ends in a backslash is shown as it is.
        verb = "drive" if role == "drive" else "watch"
        self._screen.print(
            Text(f"{printable(who)} wants to {verb}. Admit? [y/N]", style="bold magenta")
        )
        self._screen.set_prompt("admit? [y/N] ")
        try:
            with anyio.move_on_after(APPROVAL_TIMEOUT):
                await question.answered.wait()
        finally:
            if question in self._questions:
                self._questions.remove(question)
            if not self._questions:
                self._refresh_prompt()
        return question.admit

    async def _follow(self) -> None:
        """Show the conversation shown, its items and who is attached to it; after a switch,
        the next one."""
        while True:
            switched = self._switched = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._show_log, self._session, self._transcript)
                tg.start_soon(self._show_presence, self._presence)
                await switched.wait()
                tg.cancel_scope.cancel()

    async def _show_log(self, session: AgentSession, transcript: Transcript) -> None:
        conversation_id = session.conversation_id
        info = await self._log.get_conversation(conversation_id)
        after = None if info is None else max(info.last_seq - HISTORY_SHOWN, -1)
        cursor = self._cursors.get(conversation_id)
        if cursor is not None and after is not None:
            # Shown before: what came since, no item twice (the end of it when it is long).
            if cursor < after:
                self._screen.note(f"… {after - cursor} earlier items not shown")
            after = max(after, cursor)
        async with self._log.subscribe(conversation_id, after=after) as sub:
            async for entry in sub:
                # A terminal agent's output is typed by whoever drives it: escaped here too.
                if isinstance(entry, Event):
                    transcript.event(entry.to_wire())
                else:
                    transcript.item(entry.to_wire())
                    self._cursors[conversation_id] = entry.seq
                    self._cursors.move_to_end(conversation_id)
                    while len(self._cursors) > CURSORS_KEPT:
                        self._cursors.popitem(last=False)
                    # A request is open before its item is stored: its item announces it.
                    self._signal_waiting()

    def _signal_waiting(self) -> None:
        """Show how many permission requests and questions of the agent's wait, and ring for
        each new one."""
        before = self._waiting.count
        new = self._waiting.update(self._open_requests())
        if self._waiting.count != before:
            self._refresh_prompt()
        self._signals.show(self._waiting, new)

    def _refresh_prompt(self) -> None:
        """The prompt: requests waiting here, then elsewhere, then the conversation shown when
        the host runs several; unless a joiner's question holds it."""
        if self._questions:
            return
        base = "> "
        listing = self._listing()
        if listing is not None and len(listing.conversations) > 1:
            base = f"{short(self._session.conversation_id)} {base}"
        prompt = self._waiting.prompt(self._others.prompt(base))
        if prompt != self._shown_prompt:
            self._shown_prompt = prompt
            self._screen.set_prompt(prompt)

    async def _show_presence(self, presence: Presence) -> None:
        seen = presence.version
        roster = Roster()
        roster.apply(self._whole_list(presence))  # who is here already is no news
        while True:
            seen = await presence.wait_changed(seen)
            crowded = roster.count > len(roster.members)
            for line in change_lines(roster.apply(self._whole_list(presence)), crowded=crowded):
                self._screen.note(line)

    def _whole_list(self, presence: Presence) -> PresenceMessage:
        # What teammates are told, so the console names who they see named.
        listing = presence.listing()
        return PresenceMessage(members=wire_members(listing.members), count=listing.count)

    async def _read_lines(self) -> None:
        assert self._stdin is not None
        send, receive = anyio.create_memory_object_stream[str](LINE_BUFFER)

        async def read() -> None:
            # At end of input the host keeps sharing; it just stops reading.
            async with send:
                await self._screen.run(send)

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            async with receive:
                async for line in receive:
                    await self._handle_line(line)

    def _keep_sharing(self) -> None:
        """Ctrl-D at the prompt line: sharing goes on, so say how to stop it."""
        self._screen.note("the host keeps sharing: /quit stops it")

    async def _handle_line(self, line: str) -> None:
        if self._questions:
            question = self._questions.popleft()
            question.admit = line.strip().lower() in ("y", "yes")
            question.answered.set()
            verdict = "admitted" if question.admit else "refused"
            self._screen.print(Text(f"{printable(question.who)} {verdict}", style="dim"))
            if not self._questions:
                self._refresh_prompt()
            return
        command = parse_host_line(line, self._view())
        closed = self._conversation is not None and self._conversation.closed
        if closed and (
            isinstance(command, DRIVING_REQUESTS)
            or (command is None and self._session.info.kind == "terminal")
        ):
            self._screen.note(CLOSED, "red")
            return
        try:
            match command:
                case None:
                    if self._session.info.kind == "terminal" and not line.strip(" \t\r\n"):
                        # A terminal program waits for Enter as often as for text: a blank
                        # line sends it.
                        await self._session.input(b"\r", by=self._host_name)
                case Quit():
                    self.quit_requested.set()
                case New() | Listing() | Switch() | Close() | ForkAt():
                    await self._conversation_command(command)
                case Sessions() | Resume():
                    await self._past_session_command(command)
                case Revoke(name=None):
                    await self._revoke()
                case Revoke(name=str(name)) if self.people is not None:
                    await self.people.revoke(name)
                    self._screen.note(f"{name}'s link revoked; their channels were closed.", "bold")
                case Invite(name=name, role=role) if self.people is not None:
                    link = await self.people.invite(name, role)
                    # The link goes where the role links go (stdout), not into the screen's
                    # history only: whoever runs the host copies it from there.
                    self._screen.note(f"{role} link for {name}: {link}", "bold")
                case People() if self.people is not None:
                    # Who is attached to the conversation shown, as teammates are told it (the
                    # count says those past the names), then every invitation.
                    listing = self._presence.listing()
                    self._screen.note(whole_line(wire_members(listing.members), listing.count))
                    for line in self.people.listing():
                        self._screen.note(line)
                case ShareReplay(conversation=conversation, upto=upto) if self.people is not None:
                    shown = conversation or self._session.conversation_id
                    self._screen.note(await self.people.share_replay(shown, upto), "bold")
                case Revoke() | Invite() | People() | ShareReplay():
                    self._screen.note("not connected to a relay yet")
                case Say(text=text):
                    # It may echo what the agent named: option names and ids, its commands.
                    self._screen.note(text)
                case Prompt(text=text):
                    await self._session.prompt(text, by=self._host_name)
                case PermissionAnswer(request_id=request_id, option_id=option_id):
                    await self._session.answer_permission(
                        request_id, option_id, by=self._host_name, role="host"
                    )
                case ElicitationAnswer(request_id=request_id, action=action, content=content):
                    await self._session.answer_elicitation(
                        request_id, action, content, by=self._host_name
                    )
                case Cancel():
                    await self._session.cancel(by=self._host_name)
                case SetMode(mode_id=mode_id):
                    await self._session.set_mode(mode_id, by=self._host_name)
                case SetModel(model_id=model_id):
                    await self._session.set_model(model_id, by=self._host_name)
                case SetConfig(config_id=config_id, value=value):
                    await self._session.set_config(config_id, value, by=self._host_name)
                case Authenticate(method_id=method_id):
                    await self._session.authenticate(method_id, by=self._host_name)
                case _:
                    self._screen.note(HELP)
        except (AppError, InvitationError) as exc:
            # SessionError is an AppError: the session's refusals and the registry's alike.
            self._screen.note(str(exc), "red")

    # -- conversations --------------------------------------------------------------------------

    def _listing(self) -> ConversationList | None:
        """The host's conversations as a teammate is sent them; None on a host of one."""
        if self._conversations is None:
            return None
        try:
            parsed = parse_conversation_message(self._conversations.listing())
        except BadRequest as exc:  # our own list: a bug, said once per look
            logger.warning("cannot list the conversations: %s", exc)
            return None
        return parsed if isinstance(parsed, ConversationList) else None

    async def _watch_conversations(self, conversations: Conversations) -> None:
        """Count the requests that wait in the conversations not shown; ring as that grows."""
        version = conversations.version
        while True:
            listing = self._listing()
            if listing is not None:
                new = self._others.update(listing, self._session.conversation_id)
                self._waiting.elsewhere = self._others.count
                self._refresh_prompt()
                if new and not self._screen.live:
                    self._screen.note(self._others.line(), "yellow")  # no prompt line shows it
                self._signals.show(self._waiting, new)
            version = await conversations.wait_changed(version)
            await anyio.sleep(LIST_INTERVAL)

    async def _conversation_command(self, command: ConversationCommand) -> None:
        """/new, /list, /switch, /close, /fork on the host's registry, by the host user."""
        conversations = self._conversations
        listing = self._listing()
        if conversations is None or listing is None:
            self._screen.note("this host runs one conversation")
            return
        current = self._session.conversation_id
        by = self._host_name
        match command:
            case Listing():
                for line in listing_lines(listing, current=current, now=time.time()):
                    self._screen.note(line, "default")
            case Switch(target=target):
                entry = listing.find(target)
                if entry is None:
                    self._screen.note(f"no conversation {short(target)} here (/list shows them)")
                    return
                self._switch(entry.id)
            case New(agent=agent):
                started = await conversations.start(agent, by=by)
                self._screen.note(f"started conversation {short(started.id)} with {agent}", "bold")
                self._switch(started.id)
            case Close(target=named):
                entry = None if named is None else listing.find(named)
                if named is not None and entry is None:
                    self._screen.note(f"no conversation {short(named)} here (/list shows them)")
                    return
                closing = current if entry is None else entry.id
                await conversations.close(closing, by=by)
                self._screen.note(f"closed conversation {short(closing)}: its log stays", "bold")
            case ForkAt(upto=upto):
                if upto is None:
                    info = await self._log.get_conversation(current)
                    if info is None or info.last_seq < 0:
                        self._screen.note("nothing to fork yet: the conversation holds no item")
                        return
                    upto = info.last_seq
                started = await conversations.fork(current, upto, by=by)
                self._screen.note(
                    f"forked {short(current)} at item {upto} into {short(started.id)}", "bold"
                )
                self._switch(started.id)

    async def _past_session_command(self, command: PastSessionCommand) -> None:
        """/sessions NAME and /resume NAME SESSION_ID: an ACP agent's own past sessions in the
        workspace, listed by a running conversation's agent, resumed in a new conversation."""
        conversations = self._conversations
        if conversations is None:
            self._screen.note("this host runs one conversation")
            return
        name = command.agent
        spec = conversations.spec(name)
        if spec is None:
            offered = ", ".join(short(a) for a in conversations.agents)
            self._screen.note(f"no agent {short(name)} here; this host offers {offered}", "red")
            return
        if parse_spec(spec)[0] != "acp":
            self._screen.note(f"{name} is not an ACP agent: it keeps no sessions to resume", "red")
            return
        match command:
            case Sessions():
                session = self._running_acp(name)
                if session is None:
                    self._screen.note(
                        f"start a conversation with {name} first (/new {name})", "red"
                    )
                    return
                listed = await session.list_agent_sessions()
                if not listed:
                    self._screen.note(f"{name} lists no past session in this workspace")
                    return
                self._screen.note(
                    f"{len(listed)} past sessions of {name} here (/resume {name} ID resumes one):"
                )
                for past in listed:
                    self._screen.note(_past_line(past), "default")
            case Resume(session_id=session_id):
                started = await conversations.start(name, by=self._host_name, resume=session_id)
                self._screen.note(
                    f"started conversation {short(started.id)} with {name},"
                    f" resuming its session {short(session_id, MAX_PAST_FIELD)}",
                    "bold",
                )
                self._switch(started.id)

    def _running_acp(self, agent: str) -> AcpSession | None:
        """The ACP session of a running conversation of `agent`: the one shown if it is one."""
        from tunnel.agents.acp_agent import AcpSession

        assert self._conversations is not None
        candidates = [self._conversation, *self._conversations.open_conversations()]
        for conversation in candidates:
            if (
                conversation is not None
                and conversation.agent == agent
                and conversation.running
                and not conversation.closed
                and isinstance(conversation.session, AcpSession)
            ):
                return conversation.session
        return None

    def _switch(self, conversation_id: str) -> None:
        """Show another conversation of the host's: its items, its people, its requests; typed
        lines drive it from now on."""
        assert self._conversations is not None
        conversation = self._conversations.get(conversation_id)
        if conversation is None:
            self._screen.note(f"no conversation {short(conversation_id)} here")
            return
        if conversation is self._conversation:
            self._screen.note(f"conversation {short(conversation_id)} is the one shown")
            return
        self._others.leave(self._session.conversation_id, self._waiting.count)
        self._conversation = conversation
        self._session = conversation.session
        self._presence = conversation.presence
        # What streamed and ran in the one left is not this one's.
        self._transcript = Transcript(self._screen, markdown=self._screen.live)
        if isinstance(self._screen, PromptScreen):
            self._screen.set_live_source(self._transcript.live_view)
        self._screen.changed()
        # Those told of as waiting elsewhere are not new here.
        self._waiting.update(self._open_requests())
        listing = self._listing()
        if listing is not None:
            self._others.recount(listing, conversation_id)
            self._waiting.elsewhere = self._others.count
        self._refresh_prompt()
        self._screen.note(
            f"showing conversation {short(conversation_id)} ({conversation.agent})", "bold"
        )
        self._switched.set()

    def _open_requests(self) -> list[str]:
        ids = [str(data.get("request_id")) for data in self._session.open_permissions()]
        ids += [str(item.data.get("request_id")) for item in self._session.pending_elicitations()]
        return ids

    async def _revoke(self) -> None:
        if self.revoke is None:
            self._screen.note("not connected to a relay yet")
            return
        await self.revoke()
        self._screen.note("links revoked; everyone attached was disconnected.", "bold")

    def _view(self) -> ConversationView:
        """What typed commands refer to, from the session itself: every open permission request
        (answerable as soon as it exists), the agent's commands and settings."""
        pending = {
            str(data.get("request_id")): PendingPermission.from_data(
                str(data.get("request_id")), data
            )
            for data in self._session.open_permissions()
        }
        questions = {
            str(item.data.get("request_id")): PendingQuestion.from_data(
                str(item.data.get("request_id")), item.data
            )
            for item in self._session.pending_elicitations()
        }
        return ConversationView(
            pending=pending,
            questions=questions,
            commands=self._session.commands(),
            settings=self._session.settings(),
        )


MAX_PAST_FIELD = 64
"""Characters of a past session's id or time shown; its title gets twice as many."""


def _past_line(past: PastSession) -> str:
    """A past session on one line, every field the agent's: escaped and cut short."""
    title = short(past.title, 2 * MAX_PAST_FIELD) if past.title else "(no title)"
    updated = f", updated {short(past.updated_at, MAX_PAST_FIELD)}" if past.updated_at else ""
    return f"{short(past.session_id, MAX_PAST_FIELD)}  {title}{updated}"
