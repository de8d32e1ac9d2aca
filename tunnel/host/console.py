"""The host console: the live conversation, who is attached, and a prompt line for the host user.

The host user is a co-driver like any teammate: typed lines go to the same shared session, and
permission requests can be answered here. With `--approve`, each joining teammate waits until the
host user admits them. On a terminal the prompt line stays at the bottom, with history and
completion, while the conversation scrolls above it and replies stream in place (the same screen
as `tunnel attach`, tunnel/terminal/screen.py); otherwise lines are read and printed. Names, items
and messages come from others: all are printed through `printable()`
(tunnel/terminal/sanitize.py), a terminal agent's screen output included.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, TextIO

import anyio
from rich.console import Console
from rich.text import Text

from tunnel.agents import AgentSession, SessionError
from tunnel.app.host_messages import Member, PresenceMessage
from tunnel.app.requests import (
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
from tunnel.host.invitations import InvitationError
from tunnel.host.presence import Presence
from tunnel.log import Event, Log
from tunnel.terminal.commands import (
    HELP,
    Invite,
    People,
    Quit,
    Revoke,
    Say,
    ShareReplay,
    parse_line,
)
from tunnel.terminal.completion import CommandCompleter
from tunnel.terminal.notify import TerminalSignals, WaitingRequests
from tunnel.terminal.presence import change_lines
from tunnel.terminal.questions import PendingQuestion
from tunnel.terminal.sanitize import printable
from tunnel.terminal.screen import PlainScreen, PromptScreen, Screen, interactive_terminal
from tunnel.terminal.transcript import Transcript
from tunnel.terminal.view import ConversationView, PendingPermission

# How much earlier conversation the console shows when it starts.
HISTORY_SHOWN = 20
# Lines typed ahead of the console; the screen says so when a line finds no room.
LINE_BUFFER = 16
# A joiner waits this long for the host user's answer, then is refused.
APPROVAL_TIMEOUT = 120.0
# Joiners waiting for an answer at once; more are refused at once rather than queued forever.
MAX_WAITING_JOINERS = 8


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
    ) -> None:
        self._session = session
        self._log = log
        self._presence = presence
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
                completer=CommandCompleter(self._view), on_eof=self._keep_sharing
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
                tg.start_soon(self._show_log)
                tg.start_soon(self._show_presence)
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
                self._screen.set_prompt(self._waiting.prompt("> "))
        return question.admit

    async def _show_log(self) -> None:
        info = await self._log.get_conversation(self._session.conversation_id)
        after = None if info is None else max(info.last_seq - HISTORY_SHOWN, -1)
        async with self._log.subscribe(self._session.conversation_id, after=after) as sub:
            async for entry in sub:
                # A terminal agent's output is typed by whoever drives it: escaped here too.
                if isinstance(entry, Event):
                    self._transcript.event(entry.to_wire())
                else:
                    self._transcript.item(entry.to_wire())
                    # A request is open before its item is stored: its item announces it.
                    self._signal_waiting()

    def _signal_waiting(self) -> None:
        """Show how many permission requests and questions of the agent's wait, and ring for
        each new one."""
        before = self._waiting.count
        ids = [str(data.get("request_id")) for data in self._session.open_permissions()]
        ids += [str(item.data.get("request_id")) for item in self._session.pending_elicitations()]
        new = self._waiting.update(ids)
        if self._waiting.count != before and not self._questions:
            self._screen.set_prompt(self._waiting.prompt("> "))
        self._signals.show(self._waiting, new)

    async def _show_presence(self) -> None:
        seen = self._presence.version
        roster = Roster()
        roster.apply(self._whole_list())  # who is here already is no news
        while True:
            seen = await self._presence.wait_changed(seen)
            for line in change_lines(roster.apply(self._whole_list())):
                self._screen.note(line)

    def _whole_list(self) -> PresenceMessage:
        members = self._presence.keyed().items()
        return PresenceMessage(
            members=[
                Member(name=m.name, role=m.role, id=k, verified=m.verified) for k, m in members
            ]
        )

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
                self._screen.set_prompt(self._waiting.prompt("> "))
            return
        command = parse_line(line, self._view())
        try:
            match command:
                case None:
                    if self._session.info.kind == "terminal" and not line.strip(" \t\r\n"):
                        # A terminal program waits for Enter as often as for text: a blank
                        # line sends it.
                        await self._session.input(b"\r", by=self._host_name)
                case Quit():
                    self.quit_requested.set()
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
        except (SessionError, InvitationError) as exc:
            self._screen.note(str(exc), "red")

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
