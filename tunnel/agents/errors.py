"""Why an agent session refuses a request: `SessionError` with its error code, and the checks on a
request's author and prompt that every session makes before it records or does anything.

This module imports nothing else of `tunnel.agents`, so the session, the permission broker and
the agents can all raise the same error without importing one another.
"""

from __future__ import annotations

from tunnel.app.errors import AppError, ErrorCode
from tunnel.app.requests import MAX_PROMPT_LENGTH
from tunnel.log.item import MAX_ID_CHARS

__all__ = ["ErrorCode", "SessionError", "check_by", "check_prompt"]


class SessionError(AppError):
    """A request to the session was refused; nothing was recorded and nothing happened.

    The fault is the caller's (a bad or late request) or the agent's (`agent_unavailable`);
    `code` is sent back to the teammate as the `error` message's code.
    """


def check_by(by: str) -> None:
    """Refuse a request whose author the log could not store as `created_by` (`bad_request`)."""
    if not isinstance(by, str) or not by or len(by) > MAX_ID_CHARS:
        raise SessionError(
            "bad_request", f"the sender's name must be 1 to {MAX_ID_CHARS} characters"
        )


def check_prompt(text: str, by: str) -> None:
    """Refuse a prompt no agent should receive (`bad_request`).

    The length limit is the one a teammate's `prompt` message already meets on the wire, so the
    host console is held to the same limit as the browser and `tunnel attach`.
    """
    check_by(by)
    if not text.strip():
        raise SessionError("bad_request", "the prompt is empty")
    if len(text) > MAX_PROMPT_LENGTH:
        raise SessionError(
            "bad_request", f"the prompt is longer than {MAX_PROMPT_LENGTH} characters"
        )
