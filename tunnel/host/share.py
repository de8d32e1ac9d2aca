"""Sharing an agent session: the log, the agent, the host link and the console, run together.

`run_share(settings)` is the programmatic API behind `tunnel host` (and `tunnel demo`): it opens
the conversation log (SQLite), starts the agent session, registers with the relay and serves a
`SessionChannelHandler` per teammate channel until cancelled.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import anyio
from anyio.abc import TaskStatus
from rich.console import Console

from tunnel.agents import (
    AgentSession,
    check_agent,
    check_policy_agent,
    create_session,
    parse_spec,
)
from tunnel.agents.demo_agent import DEFAULT_DELAY
from tunnel.agents.sandbox import (
    Sandbox,
    SandboxSettings,
    host_private_paths,
    prepare_sandbox,
)
from tunnel.agents.workspace import Workspace
from tunnel.host.audit import HeadSigner
from tunnel.host.broadcast import Broadcaster
from tunnel.host.channel import HostChannel, close_quietly
from tunnel.host.console import HostConsole
from tunnel.host.conversations import (
    Conversation,
    ConversationParts,
    Conversations,
    agent_label,
)
from tunnel.host.files import FileReader
from tunnel.host.invitations import InvitationError
from tunnel.host.limits import DEFAULT_MAX_CONVERSATIONS
from tunnel.host.presence import Member, Presence
from tunnel.host.replay_limit import REPLAY_BURST, REPLAY_RATE
from tunnel.host.replay_link import ReplayLink
from tunnel.host.runner import Host
from tunnel.host.session import ReplayBudget, SessionChannelHandler
from tunnel.host.settings import HostSettings
from tunnel.log import Log, StoreError, default_db_path
from tunnel.log.sqlite import SQLiteStore, open_host_store
from tunnel.notify.service import Notifier
from tunnel.notify.settings import NotifySettings
from tunnel.policy import Policy
from tunnel.proto.codes import CloseCode


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareSettings:
    """Everything `run_share` needs besides the host link settings."""

    host: HostSettings
    agent: str = "demo"
    """`demo`, `acp:COMMAND ARGS...` or `pty:COMMAND ARGS...` (docs/agents.md)."""

    workspace: Path = Path()
    """The directory the agent works in; its files are served to ACP agents, nothing outside."""

    log_db: Path | None = None
    """The conversation log's SQLite file; default under the user's data directory."""

    conversation_id: str = "main"
    """Which conversation of the log this session appends to; the same id resumes it."""

    approve: bool = False
    """Ask the host user before each teammate is admitted."""

    interactive: bool = True
    """Read prompts and answers from standard input (the host console's prompt line)."""

    demo_delay: float = DEFAULT_DELAY
    """Seconds between the demo agent's streamed chunks."""

    agent_auth: str | None = None
    """The login method an ACP agent is asked to use before its session starts (`--agent-auth`);
    None: only when it says it needs one, and only the one that needs nobody (docs/agents.md)."""

    agent_mode: str | None = None
    """The session mode an ACP agent starts in (`--agent-mode`); None: the mode the conversation
    last had, else the agent's own (docs/agents.md, "Modes that ask")."""

    sandbox: SandboxSettings | None = None
    """Run the agent in a Linux sandbox (`--sandbox`, tunnel/agents/sandbox.py); None: it runs
    with the host user's rights."""

    replay_burst: int = REPLAY_BURST
    """Bytes of catch-up one channel may take at once (tunnel/host/replay_limit.py)."""

    replay_rate: float = REPLAY_RATE
    """Bytes a second one channel's catch-up budget refills by, however often it subscribes."""

    policy: Policy | None = None
    """The approval policy every permission request of the agent is decided by first
    (`--policy FILE`, `--approvals PRESET`; docs/policy.md); None: the first answer wins."""

    bell: bool = True
    """Ring the console's terminal bell once for each new permission request that waits
    (`--no-bell` turns it off)."""

    notify: NotifySettings = field(default_factory=NotifySettings)
    """Approval notifications: Web Push, webhooks, a local command (docs/notifications.md)."""

    agents: tuple[tuple[str, str], ...] = ()
    """The named agents drivers may start conversations with (`--agent NAME=SPEC`), in order;
    the first runs the host's first conversation. Empty: `agent` alone, under its
    `agent_label`."""

    max_conversations: int = DEFAULT_MAX_CONVERSATIONS
    """Conversations open at once at most (`--max-conversations`)."""

    @property
    def declared_agents(self) -> dict[str, str]:
        """Each agent name drivers may start, with its spec; the first one's runs first."""
        if self.agents:
            return dict(self.agents)
        return {agent_label(self.agent): self.agent}

    @property
    def resolved_log_db(self) -> Path:
        return self.log_db if self.log_db is not None else default_db_path()


def print_links(host: Host) -> None:
    """Print the share links, one per line, on stdout (scripts read these lines)."""
    print(f"view link:  {host.view_link}", flush=True)
    print(f"drive link: {host.drive_link}", flush=True)


class HostPeople:
    """The console's /invite, /revoke NAME, /people and /share-replay, on a running host."""

    def __init__(
        self,
        host: Host,
        new_epoch: Callable[[], None],
        notifier: Notifier | None = None,
        log: Log | None = None,
    ) -> None:
        """`new_epoch` starts a new broadcast key in every conversation (see `invite`); `log`
        says how far a replay link's conversation goes (`share_replay`)."""
        self._host = host
        self._new_epoch = new_epoch
        self._notifier = notifier
        self._log = log

    async def share_replay(self, conversation: str, upto: int | None) -> str:
        """Make a replay link of `conversation` up to `upto` (None: its last item now); return
        the line that names it and gives the link. InvitationError if the log has no such
        conversation or seq."""
        info = None if self._log is None else await self._log.get_conversation(conversation)
        if info is None:
            raise InvitationError(f"no conversation {conversation!r} in the log")
        if upto is None:
            upto = info.last_seq
        elif upto > info.last_seq:
            raise InvitationError(
                f"{conversation} has no item {upto} (its last is {info.last_seq})"
            )
        replay = ReplayLink(conversation=conversation, upto=upto)
        invitation = await self._host.share_replay(replay)
        return replay_line(invitation.name, replay, str(self._host.link_of(invitation)))

    async def invite(self, name: str, role: str) -> str:
        """Invite `name` in `role`; return their link."""
        if self._host.invitations.get(name) is not None:
            # Their old link's channels close: the key they hold reads nothing cast after.
            self._new_epoch()
            # And its browsers' pushes stop: the old link may be in other hands, and a drive
            # link's subscriptions would still offer answers to a name invited again to view.
            # The new link's page subscribes again when it attaches.
            if self._notifier is not None:
                self._notifier.forget_person(name)
                await self._notifier.subscriptions.saved()
        return str(await self._host.invite(name, role))

    async def revoke(self, name: str) -> None:
        """End `name`'s link and channels; everyone else stays attached."""
        if self._host.invitations.get(name) is None:
            raise InvitationError(f"nobody is invited as {name!r}")
        # Before their channels close: the key they hold reads nothing cast after.
        self._new_epoch()
        await self._host.revoke_person(name)
        if self._notifier is not None:
            self._notifier.forget_person(name)
            await self._notifier.subscriptions.saved()

    def listing(self) -> list[str]:
        """One line per invitation: name, role, attached now or when last seen."""
        people = self._host.people()
        if not people:
            return ["nobody is invited: /invite NAME view|drive makes a personal link"]
        lines = []
        for invitation, attached, last_seen in people:
            if attached:
                seen = f"attached ({attached} channel{'s' if attached > 1 else ''})"
            elif last_seen is None:
                seen = "never seen"
            else:
                seen = "last seen " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(last_seen))
            replay = invitation.replay
            kind = (
                invitation.role
                if replay is None
                else f"replay of {replay.conversation} up to item {replay.upto}"
            )
            lines.append(f"{invitation.name} ({kind}): {seen}")
        return lines


def print_invitations(host: Host) -> None:
    """Print each personal link and replay link on stdout, one per line, after the role
    links."""
    for invitation in host.invitations.all():
        link = host.link_of(invitation)
        if invitation.replay is not None:
            print(replay_line(invitation.name, invitation.replay, str(link)), flush=True)
        else:
            print(f"{invitation.role} link for {invitation.name}: {link}", flush=True)


def replay_line(name: str, replay: ReplayLink, link: str) -> str:
    """How the host prints a replay link (scripts read these lines)."""
    return f"replay link {name} ({replay.conversation} up to item {replay.upto}): {link}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Shared:
    """What a running share exposes to its caller (through task_status)."""

    host: Host
    session: AgentSession
    log: Log
    presence: Presence
    console: HostConsole
    notifier: Notifier | None = None
    conversations: Conversations | None = None


async def run_share(
    settings: ShareSettings,
    *,
    console: Console | None = None,
    stdin: TextIO | None = None,
    task_status: TaskStatus[Shared] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Share an agent session until cancelled (or the host user types /quit).

    Reports a `Shared` through task_status once the agent runs and the relay registered us.
    Raises ValueError, before anything is written or registered, for an agent that cannot
    start, a `log_db` whose directory does not exist, or a log database that cannot be used
    (not a log, a newer schema, unreadable or read-only: docs/log.md, "Faults").
    """
    workspace = settings.workspace.resolve()
    agents = settings.declared_agents
    for spec in agents.values():
        check_agent(spec, workspace=workspace)
        if settings.policy is not None:
            check_policy_agent(spec)
    sandboxes: dict[str, Sandbox] = {}
    if settings.sandbox is not None:
        for name, spec in agents.items():
            sandboxes[name] = await _prepare_sandbox(settings, workspace, spec)
    db = settings.resolved_log_db
    if settings.log_db is None:
        db.parent.mkdir(parents=True, exist_ok=True)
    elif not db.parent.is_dir():
        # A mistyped path should not grow directories; the default location may.
        raise ValueError(f"the log's directory {db.parent} does not exist")
    console = console if console is not None else Console(highlight=False)
    if stdin is None and settings.interactive:
        stdin = sys.stdin
    try:
        store = await open_host_store(db)
    except StoreError as exc:
        # The command says a ValueError in one line (run_host_command): the file is the mistake.
        raise ValueError(f"cannot use the log database: {exc}") from None
    async with Log(store) as log:
        # One for the whole host: late joiners' replays take turns (tunnel/host/session.py).
        replay = ReplayBudget()
        files = FileReader(
            Workspace(workspace),
            hidden=(*_private_paths(settings), *(h for b in sandboxes.values() for h in b.hide)),
        )
        # Made before any agent starts, with the key and share secrets if missing, so an
        # agent's sandbox finds them to hide (tunnel/agents/sandbox.py).
        host = Host(settings.host, lambda channel: handler(channel), on_join=None)

        def build(conversation_id: str, agent: str, group: int) -> ConversationParts:
            return _build_parts(
                settings,
                log=log,
                store=store,
                host=host,
                spec=agents[agent],
                conversation_id=conversation_id,
                group=group,
                workspace=workspace,
                sandbox=sandboxes.get(agent),
                files=files,
            )

        conversations = Conversations(
            log=log,
            agents=agents,
            build=build,
            host_name=settings.host.name,
            max_open=settings.max_conversations,
        )
        host_console: HostConsole | None = None
        notifier: Notifier | None = None

        async def handler(channel: HostChannel) -> None:
            replay_link: ReplayLink | None = None
            if channel.invitation is not None:
                invitation = host.invitations.by_verifier(channel.invitation, host.host_id)
                if invitation is None:  # revoked since its open
                    close_quietly(channel, CloseCode.REVOKED, "personal link revoked")
                    return
                replay_link = invitation.replay
            if replay_link is not None:
                # Its own conversation, whatever the open names (tunnel/host/replay_link.py).
                replayed = conversations.get(replay_link.conversation)
                if replayed is None:
                    close_quietly(channel, CloseCode.REFUSED, "that conversation is not served")
                    return
                await SessionChannelHandler(
                    channel,
                    session=replayed.session,
                    log=log,
                    presence=replayed.presence,
                    replay=replay,
                    replay_burst=settings.replay_burst,
                    replay_rate=settings.replay_rate,
                    files=files,
                    conversation=replayed,
                    replay_link=replay_link,
                ).run()
                return
            conversation = conversations.for_channel(channel.early_conversation)
            parts = conversation.parts
            assert isinstance(parts, _Parts)
            await SessionChannelHandler(
                channel,
                session=parts.session,
                log=log,
                presence=parts.presence,
                replay=replay,
                broadcast=parts.broadcast,
                replay_burst=settings.replay_burst,
                replay_rate=settings.replay_rate,
                heads=parts.signer,
                # Subscriptions and focus are the host's, whichever conversation a page shows.
                notifier=notifier,
                files=files,
                conversations=conversations,
                conversation=conversation,
            ).run()

        async def approve(channel: HostChannel) -> bool:
            assert host_console is not None
            return await host_console.approve_join(channel.name, channel.role)

        if settings.approve:
            host.set_join_hook(approve)

        def new_epoch() -> None:
            # Before revoked channels close: the keys they hold read nothing cast after.
            for conversation in conversations.open_conversations():
                parts = conversation.parts
                assert isinstance(parts, _Parts)
                parts.broadcast.new_epoch()

        async def revoke() -> None:
            new_epoch()
            await host.revoke()
            if notifier is not None:
                notifier.forget_role_links(_role_links(host))
                await notifier.subscriptions.saved()
            print_links(host)

        async with anyio.create_task_group() as tg:
            await tg.start(conversations.run, settings.conversation_id)
            first = conversations.first.parts
            assert isinstance(first, _Parts)
            session = first.session
            notifier = _notifier(settings, host, session, conversations)
            if notifier is not None:
                await tg.start(notifier.run, log, session.conversation_id)
                for conversation in conversations.open_conversations():
                    await notifier.follow(conversation.id)

                async def follow(conversation: Conversation) -> None:
                    assert notifier is not None
                    await notifier.follow(conversation.id)

                def unfollow(conversation: Conversation) -> None:
                    assert notifier is not None
                    notifier.unfollow(conversation.id)

                conversations.on_started = follow
                conversations.on_closed = unfollow
            host_console = HostConsole(
                session=session,
                log=log,
                presence=first.presence,
                host_name=settings.host.name,
                console=console,
                stdin=stdin if settings.interactive else None,
                bell=settings.bell,
                conversations=conversations,
            )
            host_console.revoke = revoke
            host_console.people = HostPeople(host, new_epoch, notifier, log)
            await tg.start(host.run)
            tg.start_soon(host_console.run)
            task_status.started(
                Shared(
                    host=host,
                    session=session,
                    log=log,
                    presence=first.presence,
                    console=host_console,
                    notifier=notifier,
                    conversations=conversations,
                )
            )
            await host_console.quit_requested.wait()
            tg.cancel_scope.cancel()


@dataclass(frozen=True, slots=True, kw_only=True)
class _Parts:
    """One conversation's agent session, presence, broadcast and head signer."""

    session: AgentSession
    presence: Presence
    broadcast: Broadcaster
    signer: HeadSigner

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(self.signer.run)
                await tg.start(self.session.run)
                await tg.start(self.broadcast.run)
                task_status.started()
                try:
                    await anyio.sleep_forever()
                finally:
                    # Closed: its group is free for the next conversation at once, while the
                    # agent may take a while to stop, so its channels leave it now.
                    self.broadcast.part_all()
        finally:
            # Its group may serve another conversation next: its channels leave it now.
            self.broadcast.part_all()
            # The agent has stopped: what it wrote while stopping is signed too.
            await self.signer.close()

    async def cast_through(self, seq: int) -> None:
        await self.broadcast.wait_cast(seq)


def _build_parts(
    settings: ShareSettings,
    *,
    log: Log,
    store: SQLiteStore,
    host: Host,
    spec: str,
    conversation_id: str,
    group: int,
    workspace: Path,
    sandbox: Sandbox | None,
    files: FileReader,
) -> _Parts:
    session = create_session(
        spec,
        log,
        workspace=workspace,
        conversation_id=conversation_id,
        demo_delay=settings.demo_delay,
        sandbox=sandbox,
        agent_auth=settings.agent_auth,
        agent_mode=settings.agent_mode if parse_spec(spec)[0] == "acp" else None,
        policy=settings.policy,
    )
    # The agent is handed none of the host's private files either (`@path`, its file reads).
    session.set_hidden(files.hidden)
    presence = Presence()
    # The host user co-drives from the console: they are attached to every conversation.
    presence.join(Member(name=settings.host.name, role="host"))
    broadcast = Broadcaster(
        identity=host.identity,
        log=log,
        conversation_id=conversation_id,
        presence=presence,
        link=lambda: host.link,
        group=group,
    )
    # Signs the chain head after each turn and on shutdown (docs/log.md, "The audit chain").
    signer = HeadSigner(
        identity=host.identity, log=log, store=store, conversation_id=conversation_id
    )
    return _Parts(session=session, presence=presence, broadcast=broadcast, signer=signer)


def _role_links(host: Host) -> str:
    """Which role links are valid now, as the push subscriptions keep it."""
    from tunnel.notify.subscriptions import role_links_mark

    return role_links_mark(str(host.view_link), str(host.drive_link))


def _notifier(
    settings: ShareSettings, host: Host, session: AgentSession, conversations: Conversations
) -> Notifier | None:
    """The host's notifications (tunnel/notify), its push key and subscriptions beside the host
    key; None when there is nothing to notify (no pushes, webhooks nor command)."""
    from tunnel.notify.command import CommandRunner
    from tunnel.notify.settings import default_contact
    from tunnel.notify.subscriptions import SAVE_INTERVAL, Subscriptions
    from tunnel.notify.vapid import VapidKey
    from tunnel.notify.webhook import WebhookSender

    notify = settings.notify
    if not (notify.push or notify.webhooks or notify.command):
        return None
    vapid = VapidKey.load_or_create(settings.host.resolved_vapid_file) if notify.push else None
    # Only those of links still valid: made for this host key, by people still invited (a
    # revocation the host did not live to save, or an invitations file edited, ends theirs too).
    subscriptions = Subscriptions.load(
        settings.host.resolved_subscriptions_file if notify.push else None,
        host_id=host.host_id,
        people=[invitation.name for invitation in host.invitations.all()],
        role_links=_role_links(host),
        save_interval=SAVE_INTERVAL,
    )
    listeners: list[WebhookSender | CommandRunner] = [
        WebhookSender(url, notify, conversation_id=session.conversation_id, host_id=host.host_id)
        for url in notify.webhooks
    ]
    if notify.command is not None:
        listeners.append(
            CommandRunner(
                notify.command,
                notify,
                conversation_id=session.conversation_id,
                host_id=host.host_id,
            )
        )
    return Notifier(
        notify,
        host_id=host.host_id,
        vapid=vapid,
        contact=notify.push_contact or default_contact(settings.host.relay_url),
        subscriptions=subscriptions,
        agent_name=lambda conversation_id: _agent_name(conversations, conversation_id, session),
        listeners=listeners,
    )


def _agent_name(conversations: Conversations, conversation_id: str, first: AgentSession) -> str:
    """The name of the agent of `conversation_id`, for a notification."""
    conversation = conversations.get(conversation_id)
    return (conversation.session if conversation is not None else first).info.name


def _private_paths(settings: ShareSettings) -> tuple[Path, ...]:
    """The host's own files: hidden from a sandboxed agent, and never shown to a teammate."""
    return host_private_paths(
        key_file=settings.host.resolved_key_file,
        secrets_file=settings.host.resolved_secrets_file,
        invitations_file=settings.host.resolved_invitations_file,
        log_db=settings.resolved_log_db,
        others=(
            settings.host.resolved_vapid_file,
            settings.host.resolved_subscriptions_file,
        ),
    )


async def _prepare_sandbox(settings: ShareSettings, workspace: Path, spec: str) -> Sandbox:
    """The sandbox of the agent `spec`, checked (bubblewrap runs once): a SandboxError, a
    ValueError, says in one line why there is none, before anything is registered or
    written."""
    assert settings.sandbox is not None
    kind, argv = parse_spec(spec)
    if kind == "demo":
        raise ValueError("--sandbox needs an acp: or pty: agent; the demo agent runs no program")
    hide = _private_paths(settings)
    prepare = functools.partial(
        prepare_sandbox,
        settings.sandbox,
        argv=argv,
        workspace=workspace,
        hide=hide,
        terminal=kind == "pty",
    )
    return await anyio.to_thread.run_sync(prepare)


async def share_until_quit(
    settings: ShareSettings,
    console: Console,
    scope: anyio.CancelScope,
    *,
    task_status: anyio.abc.TaskStatus[Shared],
) -> None:
    """Run the share; when the host user types /quit, cancel `scope` (the whole command)."""
    await run_share(settings, console=console, task_status=task_status)
    scope.cancel()
