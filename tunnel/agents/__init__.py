"""Agent sessions: the one shared agent every surface (browser, `tunnel attach`, host console)
drives, and the recorder that writes what it does to the conversation log.

`create_session(spec, ...)` builds the session for `tunnel host --agent SPEC`:

- `demo`: the built-in agent (no network, no key);
- `acp:COMMAND ARGS...`: an Agent Client Protocol agent over stdio;
- `pty:COMMAND ARGS...`: any terminal program in a pseudo-terminal.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from tunnel.log import Log

from .base import AgentInfo, AgentKind, AgentSession
from .demo_agent import DEFAULT_DELAY, DemoSession
from .errors import ErrorCode, SessionError
from .pty_agent import PtySession
from .recorder import Recorder
from .sandbox import Sandbox, SandboxError, SandboxSettings, prepare_sandbox
from .workspace import Workspace

if TYPE_CHECKING:
    from tunnel.policy import Policy

    from .acp_agent import AcpSession
else:
    from tunnel.process.lazy import lazy_exports

    # The acp package (and pydantic under it) takes longer to import than all the rest: only an
    # `acp:` agent loads it.
    __getattr__ = lazy_exports(__name__, {"AcpSession": "tunnel.agents.acp_agent"})

__all__ = [
    "AcpSession",
    "AgentInfo",
    "AgentKind",
    "AgentSession",
    "DemoSession",
    "ErrorCode",
    "PtySession",
    "Recorder",
    "Sandbox",
    "SandboxError",
    "SandboxSettings",
    "SessionError",
    "check_agent",
    "check_policy_agent",
    "create_session",
    "parse_spec",
    "prepare_sandbox",
]


def parse_spec(spec: str) -> tuple[str, list[str]]:
    """Split an agent spec into its kind (`demo`, `acp`, `pty`) and command; ValueError on junk."""
    text = spec.strip()
    if text == "demo":
        return "demo", []
    kind, sep, command = text.partition(":")
    if not sep or kind not in ("acp", "pty"):
        raise ValueError(
            f"unknown agent {spec!r}: use demo, acp:COMMAND ARGS... or pty:COMMAND ARGS..."
        )
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ValueError(f"cannot parse the command of agent {spec!r}: {exc}") from None
    if not argv:
        raise ValueError(f"agent {spec!r} names no command: use {kind}:COMMAND ARGS...")
    return kind, argv


def check_agent(spec: str, *, workspace: Path) -> None:
    """Raise ValueError, in one line, when `--agent SPEC` cannot start in `workspace`.

    Checks the spec, the workspace, and that the program exists and may be executed, as the
    agent's process will look it up: a path relative to the workspace, a bare name on PATH. A
    host calls this before it registers, so a typo is an error, not a link that never works;
    a session whose program goes missing later still records that in the conversation.
    """
    kind, argv = parse_spec(spec)
    if not workspace.is_dir():
        raise ValueError(f"the workspace {workspace} is not a directory")
    if kind == "demo":
        return
    program = argv[0]
    if os.sep not in program:
        if shutil.which(program) is None:
            raise ValueError(f"cannot start the agent: no program {program!r} on PATH")
        return
    path = workspace / program  # an absolute program stays itself
    if not path.exists():
        raise ValueError(f"cannot start the agent: {path} does not exist")
    if not path.is_file():
        raise ValueError(f"cannot start the agent: {path} is not a file")
    if not os.access(path, os.X_OK):
        raise ValueError(f"cannot start the agent: {path} is not executable")


def check_policy_agent(spec: str) -> None:
    """Raise ValueError, in one line, when `--agent SPEC` cannot be held to an approval policy."""
    if parse_spec(spec)[0] == "pty":
        raise ValueError(
            "an approval policy needs a demo or acp: agent; a pty: agent asks in its terminal"
        )


def create_session(
    spec: str,
    log: Log,
    *,
    workspace: Path,
    conversation_id: str,
    demo_delay: float = DEFAULT_DELAY,
    sandbox: Sandbox | None = None,
    agent_auth: str | None = None,
    agent_mode: str | None = None,
    policy: Policy | None = None,
) -> AgentSession:
    """The session for `--agent SPEC`, working in `workspace` and writing to `log`.

    With `sandbox` (made by `prepare_sandbox` for this agent), the agent's process and all it
    spawns run in it. Nothing starts until the session's `run()` does. Raises ValueError for an
    unknown spec, a workspace that is not a directory, or a sandbox for the demo agent (it runs
    in the host's process: nothing to sandbox). `agent_auth` is the login method an ACP agent
    is asked to use first (`tunnel host --agent-auth`; docs/agents.md, "Logging in"),
    `agent_mode` the session mode it starts in (`--agent-mode`; "Modes that ask"). `policy`
    decides every permission request the agent makes before a human sees it (docs/policy.md).
    """
    kind, argv = parse_spec(spec)
    if not workspace.is_dir():
        raise ValueError(f"the workspace {workspace} is not a directory")
    if policy is not None:
        check_policy_agent(spec)
    session: AgentSession
    if kind == "demo":
        if sandbox is not None:
            raise ValueError(
                "--sandbox needs an acp: or pty: agent; the demo agent runs no program"
            )
        demo = DemoSession(
            log=log, workspace=workspace, conversation_id=conversation_id, delay=demo_delay
        )
        demo.set_policy(policy, workspace=Workspace(workspace) if policy else None)
        return demo
    if kind == "acp":
        from .acp_agent import AcpSession

        session = AcpSession(
            argv=argv,
            log=log,
            workspace=workspace,
            conversation_id=conversation_id,
            auth_method=agent_auth,
            start_mode=agent_mode,
        )
    else:
        session = PtySession(
            argv=argv, log=log, workspace=workspace, conversation_id=conversation_id
        )
    session.sandbox = sandbox
    if policy is not None:
        session.set_policy(policy, workspace=Workspace(workspace))
    return session
