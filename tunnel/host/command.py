"""`tunnel host`: options and TUNNEL_HOST_* variables become settings, which
`run_host_command` (tunnel/host/serve.py) serves.
"""

from __future__ import annotations

import enum
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tunnel.host.limits import DEFAULT_MAX_CONVERSATIONS
from tunnel.link.framings import FramingName, check_framing
from tunnel.process.exit_codes import EXIT_CONFIG
from tunnel.process.logs import LogLevel, configure_logging

if TYPE_CHECKING:
    from tunnel.agents.sandbox import SandboxSettings
    from tunnel.notify.settings import NotifySettings
    from tunnel.policy import Policy


class Approvals(enum.StrEnum):
    """A built-in approval policy (--approvals; docs/policy.md)."""

    ask = "ask"
    read_only = "read-only"
    trust_reads = "trust-reads"


class SandboxNet(enum.StrEnum):
    """What network a sandboxed agent has (--sandbox-net)."""

    host = "host"
    none = "none"


def host_command(
    relay: Annotated[
        str,
        typer.Option(
            "--relay",
            envvar="TUNNEL_HOST_RELAY",
            metavar="URL",
            help="The relay's URL (https://relay.example).",
        ),
    ],
    agent: Annotated[
        list[str] | None,
        typer.Option(
            metavar="[NAME=]SPEC",
            show_default=False,
            help='The agent to share: demo, "acp:COMMAND ARGS..." or "pty:COMMAND ARGS...";'
            " default demo, or $TUNNEL_HOST_AGENT. Repeat as NAME=SPEC to offer several: the"
            " first runs the first conversation, drivers start more with /new NAME.",
        ),
    ] = None,
    max_conversations: Annotated[
        int,
        typer.Option(
            envvar="TUNNEL_HOST_MAX_CONVERSATIONS",
            metavar="N",
            help="Conversations open at once at most (each runs an agent process).",
        ),
    ] = DEFAULT_MAX_CONVERSATIONS,
    agent_auth: Annotated[
        str | None,
        typer.Option(
            envvar="TUNNEL_HOST_AGENT_AUTH",
            metavar="METHOD_ID",
            show_default=False,
            help="The login method an ACP agent uses first (one of those it lists when it needs"
            " a login); without it, only a method that needs nobody is used, when needed.",
        ),
    ] = None,
    agent_mode: Annotated[
        str | None,
        typer.Option(
            envvar="TUNNEL_HOST_AGENT_MODE",
            metavar="ID",
            show_default=False,
            help="The session mode an ACP agent starts in (default, plan, acceptEdits...; the"
            " agent's own ids); without it, the mode the conversation last had, else the"
            " agent's own default. Every teammate is told whether the mode asks before edits.",
        ),
    ] = None,
    workspace: Annotated[
        Path,
        typer.Option(
            envvar="TUNNEL_HOST_WORKSPACE",
            metavar="DIR",
            help="The agent's working directory; an ACP agent's file and terminal requests"
            " stay inside it (its own tools are gated by approvals only).",
        ),
    ] = Path(),
    policy: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            envvar="TUNNEL_HOST_POLICY",
            metavar="FILE",
            show_default=False,
            help="An approval policy (TOML, docs/policy.md): which permission requests the host"
            " allows or refuses itself, and who must approve the rest.",
        ),
    ] = None,
    approvals: Annotated[
        Approvals | None,
        typer.Option(
            "--approvals",
            envvar="TUNNEL_HOST_APPROVALS",
            show_default=False,
            help="A built-in approval policy: ask (every request is asked), read-only (reads"
            " allowed, all else refused) or trust-reads (reads allowed, the rest asked).",
        ),
    ] = None,
    sandbox: Annotated[
        bool,
        typer.Option(
            "--sandbox",
            envvar="TUNNEL_HOST_SANDBOX",
            help="Run the agent in a Linux sandbox (bubblewrap): it writes only in the"
            " workspace, sees the system read-only and none of your home but its own config.",
        ),
    ] = False,
    sandbox_allow: Annotated[
        list[str] | None,
        typer.Option(
            envvar="TUNNEL_HOST_SANDBOX_ALLOW",
            metavar="PATH[:ro]",
            show_default=False,
            help="With --sandbox: also show the agent this path, writable or (:ro) read-only"
            " (repeatable; the variable takes paths separated by spaces).",
        ),
    ] = None,
    sandbox_net: Annotated[
        SandboxNet,
        typer.Option(
            envvar="TUNNEL_HOST_SANDBOX_NET",
            help="With --sandbox: host (the agent reaches what this machine reaches) or none"
            " (no network at all).",
        ),
    ] = SandboxNet.host,
    log_db: Annotated[
        Path | None,
        typer.Option(
            envvar="TUNNEL_LOG_DB",
            metavar="FILE",
            help="The conversation log (SQLite); default: the data dir. Its directory must exist.",
        ),
    ] = None,
    conversation: Annotated[
        str,
        typer.Option(
            envvar="TUNNEL_HOST_CONVERSATION",
            metavar="ID",
            help="Conversation id in the log; the same id resumes an earlier session.",
        ),
    ] = "main",
    key_file: Annotated[
        Path | None,
        typer.Option(
            envvar="TUNNEL_HOST_KEY_FILE",
            metavar="FILE",
            help="The host's private key (created if missing); default: the user config dir.",
        ),
    ] = None,
    name: Annotated[
        str,
        typer.Option(
            envvar="TUNNEL_HOST_NAME", metavar="NAME", help="Your name, as teammates see it."
        ),
    ] = "host",
    approve: Annotated[
        bool,
        typer.Option("--approve", help="Ask here before each teammate is admitted."),
    ] = False,
    invite: Annotated[
        list[str] | None,
        typer.Option(
            "--invite",
            metavar="NAME:ROLE",
            show_default=False,
            help="Give NAME a personal link in ROLE (view or drive), kept across restarts"
            " (repeatable); their name is shown for all they do, whatever name they type.",
        ),
    ] = None,
    new_links: Annotated[
        bool,
        typer.Option(
            "--new-links", help="Revoke the previous share links and make new ones first."
        ),
    ] = False,
    replace: Annotated[
        bool,
        typer.Option(
            "--replace",
            envvar="TUNNEL_HOST_REPLACE",
            help="Take over from another host sharing with the same key (it stops); without it,"
            " this host stops if one is online.",
        ),
    ] = False,
    interactive: Annotated[
        bool,
        typer.Option(help="Read prompts and answers from standard input."),
    ] = True,
    no_bell: Annotated[
        bool,
        typer.Option(
            "--no-bell",
            envvar="TUNNEL_HOST_NO_BELL",
            help="Do not ring the console's terminal bell when a permission request starts"
            " waiting (the prompt and the window title still show how many wait).",
        ),
    ] = False,
    push: Annotated[
        bool,
        typer.Option(
            envvar="TUNNEL_HOST_PUSH",
            help="Send approval notifications to the browsers whose page turned them on (Web"
            " Push, end-to-end encrypted to each browser).",
        ),
    ] = True,
    push_service: Annotated[
        list[str] | None,
        typer.Option(
            "--push-service",
            envvar="TUNNEL_HOST_PUSH_SERVICE",
            metavar="ORIGIN",
            show_default=False,
            help="Also push to this origin (scheme://host[:port]) besides the browsers' own push"
            " services (repeatable; the variable takes origins separated by spaces).",
        ),
    ] = None,
    push_contact: Annotated[
        str | None,
        typer.Option(
            envvar="TUNNEL_HOST_PUSH_CONTACT",
            metavar="URI",
            show_default=False,
            help="A mailto: address or https://host (no port or path) push services may reach you"
            " at (the VAPID 'sub'); default: the relay's https host.",
        ),
    ] = None,
    notify: Annotated[
        list[str] | None,
        typer.Option(
            "--notify",
            envvar="TUNNEL_HOST_NOTIFY",
            metavar="URL",
            show_default=False,
            help="POST a small JSON to URL when a request waits or is answered, or a turn ends"
            " (repeatable; the variable, better for a URL holding a token, takes URLs separated"
            " by spaces); ntfy+https://SERVER/TOPIC posts ntfy's plain text instead.",
        ),
    ] = None,
    notify_details: Annotated[
        bool,
        typer.Option(
            "--notify-details",
            envvar="TUNNEL_HOST_NOTIFY_DETAILS",
            help="Put the request's title and command in what --notify posts (left out by"
            " default).",
        ),
    ] = False,
    notify_command: Annotated[
        str | None,
        typer.Option(
            envvar="TUNNEL_HOST_NOTIFY_COMMAND",
            metavar="CMD",
            show_default=False,
            help="Run CMD (split like a shell line, run without a shell) for each of those"
            " events, with TUNNEL_EVENT, TUNNEL_KIND, TUNNEL_TITLE... in its environment.",
        ),
    ] = None,
    notify_reminder: Annotated[
        float,
        typer.Option(
            envvar="TUNNEL_HOST_NOTIFY_REMINDER",
            metavar="SECONDS",
            help="Push once more after this long if a request still waits; 0: never.",
        ),
    ] = 300.0,
    ping_interval: Annotated[
        float,
        typer.Option(
            envvar="TUNNEL_HOST_PING_INTERVAL",
            metavar="SECONDS",
            help="Seconds between keepalive pings.",
        ),
    ] = 20.0,
    ping_timeout: Annotated[
        float,
        typer.Option(
            envvar="TUNNEL_HOST_PING_TIMEOUT", metavar="SECONDS", help="Seconds to wait for a pong."
        ),
    ] = 20.0,
    framing: Annotated[
        FramingName,
        typer.Option(
            envvar="TUNNEL_HOST_FRAMING",
            help="The WebSocket library to dial the relay with: picows (pip install"
            " 'agent-tunnel[fast]') spends less CPU per message received (docs/performance.md).",
        ),
    ] = FramingName.websockets,
    echo: Annotated[bool, typer.Option("--echo", hidden=True)] = False,
    log_level: Annotated[
        LogLevel, typer.Option(envvar="TUNNEL_HOST_LOG_LEVEL", help="Log verbosity.")
    ] = LogLevel.warning,
) -> None:
    """Share an agent session through a relay and print the view and drive links."""
    # What the command runs loads only now, so that `tunnel --help` and the other commands
    # never do.
    from rich.markup import escape

    from tunnel.handshake import check_name
    from tunnel.host.serve import run_host_command, serve_echo, serve_share
    from tunnel.host.settings import HostSettings
    from tunnel.host.share import ShareSettings

    configure_logging(log_level.value)
    try:
        check_name(name)
    except ValueError as exc:
        typer.echo(f"tunnel host: --name: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    try:
        host = HostSettings(
            relay_url=relay,
            key_file=key_file,
            name=name,
            replace=replace,
            ping_interval=ping_interval,
            ping_timeout=ping_timeout,
            framing=check_framing(framing.value),
        )
    except ValueError as exc:
        typer.echo(f"tunnel host: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    from tunnel.host.invitations import InvitationError, parse_invite

    try:
        invites = tuple(parse_invite(value) for value in invite or ())
    except InvitationError as exc:
        typer.echo(f"tunnel host: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    try:
        first_agent, named_agents = _agents(agent, max_conversations)
        sandbox_settings = _sandbox_settings(sandbox, sandbox_allow or [], sandbox_net)
        approval_policy = _approval_policy(policy, approvals)
        _check_agent_mode(agent_mode, first_agent, approval_policy)
        notify_settings = _notify_settings(
            push=push,
            services=push_service or [],
            contact=push_contact,
            webhooks=notify or [],
            details=notify_details,
            command=notify_command,
            reminder=notify_reminder,
        )
    except ValueError as exc:
        typer.echo(f"tunnel host: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    if echo:  # a bare echo handler: used to test the link layer on its own
        raise typer.Exit(
            run_host_command(host, serve_echo(host), new_links=new_links, invite=invites)
        )
    settings = ShareSettings(
        host=host,
        agent=first_agent,
        agents=named_agents,
        max_conversations=max_conversations,
        workspace=workspace,
        log_db=log_db,
        conversation_id=conversation,
        approve=approve,
        interactive=interactive,
        sandbox=sandbox_settings,
        agent_auth=agent_auth,
        agent_mode=agent_mode,
        policy=approval_policy,
        notify=notify_settings,
        bell=not no_bell,
    )
    confined = ""
    if sandbox_settings is not None:
        confined = " in a sandbox" + ("" if sandbox_settings.network else " with no network")
    if approval_policy is not None:
        confined += f" under the approval policy {escape(approval_policy.source)}"
    shared = ", ".join(f"{n}={s}" for n, s in named_agents) if named_agents else settings.agent
    banner = (
        f"[dim]sharing {escape(shared)} in {escape(str(settings.workspace))}{confined};"
        " type a prompt, /allow or /deny a request, /help for more, /quit to stop[/dim]"
    )
    raise typer.Exit(
        run_host_command(
            host, serve_share(settings), new_links=new_links, banner=banner, invite=invites
        )
    )


def _sandbox_settings(sandbox: bool, allow: list[str], net: SandboxNet) -> SandboxSettings | None:
    """The --sandbox options as settings; ValueError (one line) for options without --sandbox."""
    from tunnel.agents.sandbox import Allowance, SandboxSettings

    if not sandbox:
        if allow or net == SandboxNet.none:
            raise ValueError("--sandbox-allow and --sandbox-net none need --sandbox")
        return None
    allowances = []
    for text in allow:
        try:
            allowances.append(Allowance.parse(text))
        except ValueError as exc:
            raise ValueError(f"--sandbox-allow: {exc}") from None
    return SandboxSettings(allow=tuple(allowances), network=net != SandboxNet.none)


def _notify_settings(
    *,
    push: bool,
    services: list[str],
    contact: str | None,
    webhooks: list[str],
    details: bool,
    command: str | None,
    reminder: float,
) -> NotifySettings:
    """The notification options as settings; ValueError (one line) for one that cannot work."""
    from tunnel.notify.command import parse_command
    from tunnel.notify.endpoints import normalize_origin
    from tunnel.notify.settings import NotifySettings, contact_problem
    from tunnel.notify.webhook import parse_webhook_url

    if contact is not None and (problem := contact_problem(contact)) is not None:
        raise ValueError(f"--push-contact: {problem}")
    if not reminder >= 0:
        raise ValueError("--notify-reminder: give 0 or more seconds")
    for url in webhooks:
        parse_webhook_url(url)
    if command is not None:
        parse_command(command)
    return NotifySettings(
        push=push,
        push_services=frozenset(normalize_origin(origin) for origin in services),
        push_contact=contact,
        reminder=reminder,
        webhooks=tuple(webhooks),
        details=details,
        command=command,
    )


def _agents(
    values: list[str] | None, max_conversations: int
) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The first agent's spec and the named ones of `--agent` (ValueError in one line): one
    unnamed SPEC, or NAME=SPEC each with a distinct name."""
    from tunnel.host.conversations import MAX_CONVERSATIONS, split_agent

    if not 1 <= max_conversations <= MAX_CONVERSATIONS:
        raise ValueError(f"--max-conversations is 1 to {MAX_CONVERSATIONS}")
    if not values:
        return os.environ.get("TUNNEL_HOST_AGENT") or "demo", ()
    split = [split_agent(value) for value in values]
    if len(split) == 1 and split[0][0] is None:
        return split[0][1], ()
    named: dict[str, str] = {}
    for name, spec in split:
        if name is None:
            raise ValueError(f"--agent {spec!r}: with several agents, each is NAME=SPEC")
        if name in named:
            raise ValueError(f"--agent {name}=...: the name {name!r} is given twice")
        named[name] = spec
    return next(iter(named.values())), tuple(named.items())


def _check_agent_mode(mode: str | None, agent: str, policy: Policy | None) -> None:
    """ValueError (one line) for --agent-mode with an agent that has no modes, or a mode known
    not to ask under a policy that needs requests asked (tunnel.agents.acp_modes)."""
    if mode is None:
        return
    from tunnel.agents import parse_spec
    from tunnel.agents.acp_modes import asking_text, mode_asks, policy_needs_asking

    if parse_spec(agent)[0] != "acp":
        raise ValueError("--agent-mode needs an acp: agent")
    if policy is not None and policy_needs_asking(policy) and not mode_asks(mode):
        raise ValueError(
            f"--agent-mode {mode} {asking_text(mode)}, and the approval policy {policy.source}"
            " needs edits and commands asked"
        )


def _approval_policy(path: Path | None, approvals: Approvals | None) -> Policy | None:
    """--policy or --approvals as a policy; PolicyError (a ValueError, one line naming the file
    and line) for a policy file with a mistake."""
    from tunnel.policy import PolicyError, load_policy, preset

    if path is not None and approvals is not None:
        raise PolicyError("--policy and --approvals: give one or the other")
    if path is not None:
        return load_policy(path)
    return preset(approvals.value) if approvals is not None else None
