"""Agent sessions: the one shared agent every surface (browser, `tunnel attach`, host console)
drives, and the recorder that writes what it does to the conversation log.

`create_session(spec, ...)` builds the session for `tunnel host --agent SPEC`:

- `demo`: the built-in agent (no network, no key);
- `acp:COMMAND ARGS...`: an Agent Client Protocol agent over stdio;
- `pty:COMMAND ARGS...`: any terminal program in a pseudo-terminal.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from tunnel.log import Log

from .acp_agent import AcpSession
from .base import AgentInfo, AgentKind, AgentSession
from .demo_agent import DEFAULT_DELAY, DemoSession
from .errors import ErrorCode, SessionError
from .pty_agent import PtySession
from .recorder import Recorder

__all__ = [
    "AcpSession",
    "AgentInfo",
    "AgentKind",
    "AgentSession",
    "DemoSession",
    "ErrorCode",
    "PtySession",
    "Recorder",
    "SessionError",
    "create_session",
    "parse_spec",
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


def create_session(
    spec: str,
    log: Log,
    *,
    workspace: Path,
    conversation_id: str,
    demo_delay: float = DEFAULT_DELAY,
) -> AgentSession:
    """The session for `--agent SPEC`, working in `workspace` and writing to `log`.

    Nothing starts until the session's `run()` does. Raises ValueError for an unknown spec or a
    workspace that is not a directory.
    """
    kind, argv = parse_spec(spec)
    if not workspace.is_dir():
        raise ValueError(f"the workspace {workspace} is not a directory")
    if kind == "demo":
        return DemoSession(
            log=log, workspace=workspace, conversation_id=conversation_id, delay=demo_delay
        )
    if kind == "acp":
        return AcpSession(argv=argv, log=log, workspace=workspace, conversation_id=conversation_id)
    return PtySession(argv=argv, log=log, workspace=workspace, conversation_id=conversation_id)
