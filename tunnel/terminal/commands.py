"""What a line typed at the host console or in `tunnel attach` means.

Both surfaces share this so the same words do the same thing everywhere. The rule
(docs/agents.md, "Typed commands"): the local commands are /allow /deny /cancel /quit /revoke
/invite /people /share-replay /help /mode /model (/revoke, /invite, /people and /share-replay are
the host's); any other line
starting with `/` (`/compact`, `/init`) is sent to the agent as a prompt, as it was typed; a line
starting with `//` is sent with one `/` removed (`//help` sends `/help` to the agent); everything
else is a prompt.

Permission answers never pick an "always" or bypass option unless the person named exactly that:
`/allow` picks the agent's allow-once option, `/allow always` its one allow-always option,
`/allow N` the Nth option as listed, `/allow OPTION_ID` that option; `/deny` rejects once and
`/deny always` always. A request id among the words picks that request instead of the latest.

/new /list /switch /close /fork act on the host's conversations (`ConversationCommand`): each
surface carries them out, attach through requests, the host console on its registry. /sessions
and /resume (`PastSessionCommand`) are the host console's alone: an agent's past sessions are the
host user's own, so elsewhere they parse to a line saying so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tunnel.app.requests import (
    MAX_SEQ,
    Authenticate,
    Cancel,
    PermissionAnswer,
    Prompt,
    ReadFile,
    Request,
    SetMode,
    SetModel,
)
from tunnel.terminal.questions import parse_answer
from tunnel.terminal.view import ConversationView, Option, PendingPermission

LOCAL_COMMANDS = (
    "/allow",
    "/deny",
    "/answer",
    "/cancel",
    "/quit",
    "/revoke",
    "/invite",
    "/people",
    "/share-replay",
    "/help",
    "/mode",
    "/model",
    "/open",
    "/login",
    "/new",
    "/list",
    "/switch",
    "/close",
    "/fork",
    "/sessions",
    "/resume",
)
"""Words handled here; any other `/word` goes to the agent."""

HOST_COMMANDS = ("/revoke", "/invite", "/people", "/share-replay", "/sessions", "/resume")
"""The host console's alone: only the host mints and revokes links, and its agents' own past
sessions are its user's."""

HELP = (
    "type a prompt and press Enter. /allow answers the latest permission request with its"
    " allow-once option (/allow always, /allow N for the Nth option, /allow OPTION_ID; add a"
    " request id to answer another one); /deny rejects it (/deny always); /answer N=VALUE ..."
    " answers the agent's latest question (/answer decline, /answer cancel); /cancel stops the"
    " running turn; /new NAME starts a conversation with that agent and shows it; /list lists the"
    " host's conversations; /switch ID|N shows another; /close [ID] stops one's agent (its log"
    " stays; default: the one shown); /fork [SEQ] starts a conversation from this one up to an"
    " item (default: the last); /sessions NAME (host) lists the ACP agent NAME's own past"
    " sessions, /resume NAME SESSION_ID (host) starts a conversation that resumes one;"
    " /mode and /model show or switch the agent's mode and model (/mode ID);"
    " /open PATH[:LINE] shows a workspace file around a line; /login METHOD_ID logs the agent in"
    " when it asks;"
    " /revoke (host) replaces both links, /revoke NAME ends one person's link, /invite NAME"
    " view|drive makes a personal link, /people lists them;"
    " /share-replay [ID] [SEQ] (host) makes a read-only replay link of a conversation as it"
    " stands (or up to SEQ);"
    " /quit leaves. Any other /command"
    " goes to the agent (//x sends /x)."
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Quit:
    """Leave the session."""


@dataclass(frozen=True, slots=True, kw_only=True)
class New:
    """Start a conversation with the declared agent `agent`, and show it."""

    agent: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Listing:
    """Show the host's conversations: agent, who started it, state, last activity, requests
    waiting."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Switch:
    """Show another conversation: `target` is its id, a unique start of it, or its number in
    the list (`ConversationList.find`)."""

    target: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Close:
    """Stop a conversation's agent; its log stays."""

    target: str | None = None
    """As `Switch.target`; None: the conversation shown."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ForkAt:
    """Start a conversation from the one shown, its items up to `upto` copied."""

    upto: int | None = None
    """The last seq copied; None: the last item the surface holds."""


ConversationCommand = New | Listing | Switch | Close | ForkAt
"""What acts on the host's conversations (docs/application.md, "Conversations")."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Sessions:
    """List the past sessions the declared ACP agent `agent` offers (host console only)."""

    agent: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Resume:
    """Start a conversation with `agent` that resumes its past session `session_id` (host
    console only)."""

    agent: str
    session_id: str


PastSessionCommand = Sessions | Resume
"""What acts on an agent's own past sessions: the host user's alone."""

ONLY_THE_HOST_SESSIONS = "only the host lists and resumes its agents' own sessions"


@dataclass(frozen=True, slots=True, kw_only=True)
class Revoke:
    """Invalidate both share links at once, or one person's link (host console only)."""

    name: str | None = None
    """The invited person whose link ends; None rotates both role links."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Invite:
    """Make a personal link for `name` in `role` (host console only)."""

    name: str
    role: str


@dataclass(frozen=True, slots=True, kw_only=True)
class People:
    """List the invitations, who is attached and when each was last seen (host console only)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareReplay:
    """Make a replay link: one conversation, read-only, up to a seq (host console only)."""

    conversation: str | None = None
    """The conversation replayed; None: the console's."""
    upto: int | None = None
    """The last seq the link shows; None: the conversation's head when it is made."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Say:
    """Nothing to send; show this text to the user instead."""

    text: str
    """It may echo what the agent named (option names and ids, its commands, modes, models):
    print it through `printable()` (tunnel/terminal/sanitize.py), as every surface does."""


Command = Request | Quit | Revoke | Invite | People | ShareReplay | ConversationCommand | Say

HostCommand = Revoke | Invite | People | ShareReplay
"""What only the host console does (`HOST_COMMANDS`)."""


def parse_host_line(line: str, view: ConversationView) -> Command | PastSessionCommand | None:
    """`parse_line` at the host console, where /sessions and /resume work too."""
    word, _, rest = line.strip().partition(" ")
    if word in ("/sessions", "/resume"):
        return _past_session_command(word, rest.split())
    return parse_line(line, view)


def parse_line(line: str, view: ConversationView) -> Command | None:
    """Interpret one typed line; None for a blank line."""
    text = line.strip()
    if not text:
        return None
    if text.startswith("//"):
        return Prompt(text=text[1:])
    if not text.startswith("/"):
        return Prompt(text=text)
    word, _, rest = text.partition(" ")
    if word not in LOCAL_COMMANDS:
        # The agent's own slash commands (/compact, /init, ...) are prompts to it.
        return Prompt(text=text)
    args = rest.split()
    if word == "/quit":
        return Quit()
    if word in ("/new", "/list", "/switch", "/close", "/fork"):
        return _conversation_command(word, args)
    if word in ("/sessions", "/resume"):
        return Say(text=ONLY_THE_HOST_SESSIONS)
    if word == "/revoke":
        if len(args) > 1:
            return Say(text="usage: /revoke [NAME]")
        return Revoke(name=args[0] if args else None)
    if word == "/invite":
        if len(args) != 2 or args[1] not in ("view", "drive"):
            return Say(text="usage: /invite NAME view|drive")
        return Invite(name=args[0], role=args[1])
    if word == "/people":
        return People()
    if word == "/share-replay":
        return _share_replay(args)
    if word == "/cancel":
        return Cancel()
    if word == "/help":
        return Say(text=help_text(view))
    if word == "/mode":
        return _mode(args, view.settings)
    if word == "/model":
        return _model(args, view.settings)
    if word == "/open":
        return _open(rest.strip())
    if word == "/login":
        if len(args) != 1:
            return Say(text="usage: /login METHOD_ID (the agent lists its methods when it asks)")
        return Authenticate(method_id=args[0])
    if word == "/answer":
        answer = parse_answer(args, view.questions)
        return Say(text=answer) if isinstance(answer, str) else answer
    return _answer(word, args, view.pending)


def _conversation_command(word: str, args: list[str]) -> ConversationCommand | Say:
    """`/new NAME`, `/list`, `/switch ID|N`, `/close [ID]`, `/fork [SEQ]`."""
    if word == "/list":
        return Listing() if not args else Say(text="usage: /list")
    if word == "/new":
        if len(args) != 1:
            return Say(text="usage: /new NAME (/list says which agents this host offers)")
        return New(agent=args[0])
    if word == "/switch":
        if len(args) != 1:
            return Say(text="usage: /switch ID|N (/list numbers the conversations)")
        return Switch(target=args[0])
    if word == "/close":
        if len(args) > 1:
            return Say(text="usage: /close [ID|N] (default: the conversation shown)")
        return Close(target=args[0] if args else None)
    if len(args) > 1 or (
        args and not (args[0].isascii() and args[0].isdigit() and int(args[0]) <= MAX_SEQ)
    ):
        return Say(text="usage: /fork [SEQ] (default: the last item)")
    return ForkAt(upto=int(args[0]) if args else None)


def _past_session_command(word: str, args: list[str]) -> PastSessionCommand | Say:
    """`/sessions NAME`, `/resume NAME SESSION_ID`."""
    if word == "/sessions":
        if len(args) != 1:
            return Say(text="usage: /sessions NAME (an ACP agent this host declares)")
        return Sessions(agent=args[0])
    if len(args) != 2:
        return Say(text="usage: /resume NAME SESSION_ID (/sessions NAME lists them)")
    return Resume(agent=args[0], session_id=args[1])


def help_text(view: ConversationView) -> str:
    """HELP, then the agent's own commands when it advertised some."""
    if not view.commands:
        return HELP
    names = ", ".join(
        f"/{command.get('name')}"
        + (f" ({command.get('description')})" if command.get("description") else "")
        for command in view.commands
    )
    return f"{HELP}\nthe agent's commands: {names}"


def _answer(word: str, args: list[str], pending: dict[str, PendingPermission]) -> Command:
    if not pending:
        return Say(text="no permission request is waiting")
    named = [a for a in args if a in pending]
    rest = [a for a in args if a not in pending]
    request = pending[named[-1]] if named else list(pending.values())[-1]
    if len(named) > 1 or len(rest) > 1:
        return Say(text=f"usage: {word} [always|N|OPTION_ID] [REQUEST_ID]")
    choice = rest[0] if rest else None
    option = _choose(word, choice, request)
    if isinstance(option, Say):
        return option
    return PermissionAnswer(request_id=request.request_id, option_id=option.option_id)


def _choose(word: str, choice: str | None, request: PendingPermission) -> Option | Say:
    options = f"its options: {request.listing()}"
    if word == "/deny":
        if choice not in (None, "always"):
            return Say(text=f"/deny takes nothing or 'always' (/allow N picks any); {options}")
        kind = "reject_always" if choice == "always" else "reject_once"
        return _single(request, kind, options)
    if choice is None:
        return _single(request, "allow_once", options)
    if choice == "always":
        return _single(request, "allow_always", options)
    if choice.isdigit():
        number = int(choice)
        if 1 <= number <= len(request.options):
            return request.options[number - 1]
        return Say(text=f"request {request.request_id} has no option {number}; {options}")
    option = request.option(choice)
    if option is None:
        return Say(text=f"request {request.request_id} has no option {choice!r}; {options}")
    return option


def _single(request: PendingPermission, kind: str, options: str) -> Option | Say:
    """The one option of `kind` (bypass options never count); otherwise say what to type."""
    found = request.of_kind(kind)
    if len(found) == 1:
        return found[0]
    how_many = "no" if not found else str(len(found))
    return Say(
        text=f"request {request.request_id} has {how_many} {kind} options: use /allow N; {options}"
    )


def _share_replay(args: list[str]) -> Command:
    """`/share-replay [ID] [SEQ]`; a lone number is a SEQ of the console's conversation."""
    usage = Say(text="usage: /share-replay [CONVERSATION_ID] [SEQ]")
    if len(args) > 2:
        return usage
    if len(args) == 1 and args[0].isdigit():
        return ShareReplay(upto=int(args[0]))
    if len(args) == 2:
        if not args[1].isdigit():
            return usage
        return ShareReplay(conversation=args[0], upto=int(args[1]))
    return ShareReplay(conversation=args[0] if args else None)


def _open(target: str) -> Command:
    """`/open PATH[:LINE]`: a path may hold spaces and colons; a last `:N` is the line."""
    if not target:
        return Say(text="usage: /open PATH[:LINE]")
    path, colon, number = target.rpartition(":")
    if colon and path and number.isdigit() and int(number) >= 1:
        return ReadFile(path=path, line=int(number))
    return ReadFile(path=target)


def _mode(args: list[str], settings: Mapping[str, Any]) -> Command:
    if len(args) > 1:
        return Say(text="usage: /mode [MODE_ID]")
    if args:
        return SetMode(mode_id=args[0])
    shown = _choices("mode", settings.get("modes"))
    approval = settings.get("approval")
    if isinstance(approval, Mapping) and isinstance(approval.get("text"), str):
        # Whether the mode asks before edits and commands, in the host's words.
        shown += f"; in it the agent {approval['text']}"
    return Say(text=shown)


def _model(args: list[str], settings: Mapping[str, Any]) -> Command:
    if len(args) > 1:
        return Say(text="usage: /model [MODEL_ID]")
    if args:
        return SetModel(model_id=args[0])
    return Say(text=_choices("model", settings.get("models")))


def _choices(what: str, state: Any) -> str:
    """`mode: plan (Plan); available: default (Default), plan (Plan)`, or that there is none."""
    if not isinstance(state, Mapping):
        return f"the agent offers no {what} choice"
    available = state.get("available")
    entries = available if isinstance(available, list) else []
    names = {
        str(a.get("id")): str(a.get("name") or a.get("id"))
        for a in entries
        if isinstance(a, Mapping)
    }
    current = str(state.get("current"))
    listed = ", ".join(f"{id_} ({name})" for id_, name in names.items()) or "none"
    shown = f"{current} ({names.get(current, current)})"
    return f"{what}: {shown}; available: {listed}; /{what} ID switches"
