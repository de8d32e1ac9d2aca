"""What a line typed at the host console or in `tunnel attach` means.

Plain text is a prompt; a few slash commands answer permissions, cancel, or quit. Both surfaces
share this so the same words do the same thing everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from tunnel.app.requests import Cancel, PermissionAnswer, Prompt, Request
from tunnel.terminal.view import PendingPermission

HELP = (
    "type a prompt and press Enter; /allow or /deny answers the latest permission request "
    "(or /allow REQUEST_ID); /cancel stops the running turn; /revoke (host) replaces both links; "
    "/quit leaves"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Quit:
    """Leave the session."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Revoke:
    """Invalidate both share links at once (host console only)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Say:
    """Nothing to send; show this text to the user instead."""

    text: str


Command = Request | Quit | Revoke | Say


def parse_line(line: str, pending: dict[str, PendingPermission]) -> Command | None:
    """Interpret one typed line; None for a blank line."""
    text = line.strip()
    if not text:
        return None
    if not text.startswith("/"):
        return Prompt(text=text)
    word, _, rest = text.partition(" ")
    rest = rest.strip()
    if word == "/quit":
        return Quit()
    if word == "/revoke":
        return Revoke()
    if word == "/cancel":
        return Cancel()
    if word == "/help":
        return Say(text=HELP)
    if word in ("/allow", "/deny"):
        if not pending:
            return Say(text="no permission request is waiting")
        request = pending.get(rest) if rest else list(pending.values())[-1]
        if request is None:
            return Say(text=f"no waiting permission request {rest!r}")
        option = request.first_option("allow" if word == "/allow" else "reject")
        if option is None:
            return Say(text=f"request {request.request_id} has no such option")
        return PermissionAnswer(request_id=request.request_id, option_id=option)
    return Say(text=f"unknown command {word}; {HELP}")
