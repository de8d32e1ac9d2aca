"""The application's error codes (docs/application.md) and the root of the errors that carry one.

A request that is refused gets an `error` message with one of these codes; nothing is recorded
and nothing happens. `AppError` is what the host raises for such a request, whichever layer
refused it: the message decoder (`BadRequest`) or the agent session (`SessionError`).
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["ERROR_CODES", "AppError", "BadRequest", "ErrorCode"]

ErrorCode = Literal[
    "forbidden",
    "bad_request",
    "unknown_request",
    "already_answered",
    "not_supported",
    "agent_unavailable",
    "conversation_closed",
]
"""`forbidden`: a viewer asked to drive; `bad_request`: a malformed message; `unknown_request`:
no such permission request; `already_answered`; `not_supported` (e.g. `input` to a chat agent);
`agent_unavailable`: the agent is not running; `conversation_closed`: a driving request to a
conversation a driver closed (docs/application.md, "Conversations")."""

ERROR_CODES: tuple[ErrorCode, ...] = get_args(ErrorCode)
"""Every error code, in the order above."""


class AppError(Exception):
    """A request was refused; `code` goes back to the teammate with the message."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        """The error code sent in the `error` message."""
        self.message = message
        """What the teammate is told (safe to show: never a secret, never received bytes)."""


class BadRequest(AppError):
    """A teammate sent a request that is not a valid application message (`bad_request`)."""

    def __init__(self, message: str) -> None:
        super().__init__("bad_request", message)
