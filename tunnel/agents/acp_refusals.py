"""Refusals ACP agents are known to send, in words a teammate can act on.

An agent's own error says what failed ("Cannot enable privileged approval modes in an untrusted
folder."), not what to do about it. `readable` turns a known one into a line that does; the
session shows it instead of the agent's bare error (a mode switch or a session/load refused) or
beside it (a tool call the agent failed after someone chose an option it would not honour).
docs/agents.md, "Resuming" and "Gemini CLI in a folder it does not trust".
"""

from __future__ import annotations

__all__ = ["SESSION_GONE", "UNTRUSTED_FOLDER", "readable"]

UNTRUSTED_FOLDER = "Cannot enable privileged approval modes in an untrusted folder"
"""Gemini CLI's refusal of "Allow for this session" and of the modes autoEdit and yolo in a
folder its user has not trusted."""

_UNTRUSTED_FOLDER_TEXT = (
    "it does not trust this folder, and there it allows nothing that acts without asking "
    '("Allow for this session", the modes Auto Edit and YOLO); to allow them, trust the '
    "workspace (Gemini CLI: run gemini in it once and trust it, or start the host with "
    "GEMINI_CLI_TRUST_WORKSPACE=true)"
)


SESSION_GONE = "No previous sessions found for this project"
"""Gemini CLI's answer to session/load when it no longer has the session."""

_SESSION_GONE_TEXT = (
    "it no longer has that session (Gemini CLI deletes a session it loaded once at its next "
    "start, unless its session cleanup is off: general.sessionRetention.enabled false in "
    "~/.gemini/settings.json)"
)


def readable(text: str) -> str | None:
    """The known refusal in `text` (an agent's error or a failed tool call's text) as one line,
    or None when it is none of those."""
    if UNTRUSTED_FOLDER in text:
        return _UNTRUSTED_FOLDER_TEXT
    if SESSION_GONE in text:
        return _SESSION_GONE_TEXT
    return None
