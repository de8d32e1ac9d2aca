"""`NotifySettings`: how a host notifies of approvals (`tunnel host --notify...`,
`--push-service`), one frozen object; imports nothing heavy."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

FALLBACK_CONTACT = "mailto:agent-tunnel@example.com"
"""The VAPID JWT's `sub` when the host names no contact and its relay is not https."""

DEFAULT_REMINDER = 300.0
"""Seconds after a request's push before the one reminder, if it still waits."""

SEND_TIMEOUT = 10.0
"""Seconds one push, webhook POST or command may take; then it is given up."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NotifySettings:
    """Everything the host's notifications need. Every limit is a named field."""

    push: bool = True
    """Web Push to the browsers that turned notifications on (the page's toggle)."""
    push_services: frozenset[str] = frozenset()
    """Origins (`scheme://host[:port]`) pushed to besides the browsers' own push services
    (`--push-service`)."""
    push_contact: str | None = None
    """The VAPID JWT's `sub` (`--push-contact`); None: `default_contact` of the relay."""
    reminder: float = DEFAULT_REMINDER
    """Seconds before one more push for a request that still waits; 0: none."""
    webhooks: tuple[str, ...] = ()
    """URLs POSTed to when a request waits, is answered, or a turn ends (`--notify`)."""
    details: bool = False
    """Whether webhooks and commands get the request's title and command (`--notify-details`);
    pushes always do, encrypted to the browser."""
    command: str | None = None
    """A local command run for each event (`--notify-command`), argv split with shlex."""
    send_timeout: float = SEND_TIMEOUT
    """Seconds one push, webhook POST or command may take."""
    max_sends: int = 4
    """Pushes (and, separately, commands) in flight at once."""
    queue_size: int = 256
    """Pushes, webhook POSTs and commands waiting their turn, each; beyond, dropped and logged."""
    webhook_attempts: int = 3
    """Tries of one webhook POST (with the reconnect backoff between them)."""


_CONTACT = re.compile(
    r"mailto:[^@\s]+@(localhost|[\w%-]+(\.[\w%-]+)+)|https://(localhost|[\w-]+(\.[\w-]+)+)"
)
"""A `sub` push services take: a `mailto:` address, or `https://` and a host name alone (no
port, path or trailing slash). py_vapid refuses to sign with any other, so no push would go."""


def contact_problem(contact: str) -> str | None:
    """Why `contact` cannot be the VAPID JWT's `sub`, or None if it can."""
    if _CONTACT.fullmatch(contact) is None:
        return "give a mailto: address or https:// and a host name alone (no port or path)"
    return None


def default_contact(relay_url: str) -> str:
    """The VAPID JWT's `sub` when the host names none: the relay's https host (a real address
    of this deployment, without its port or path, which a `sub` may not carry), else
    `FALLBACK_CONTACT`. RFC 8292 section 2.1 asks for a mailto: or https: URI a push service's
    operator could reach, and Apple's refuses one whose host does not resolve (a `localhost`
    address)."""
    parts = urlsplit(relay_url)
    if parts.scheme == "https" and parts.hostname:
        contact = f"https://{parts.hostname}"
        if contact_problem(contact) is None:
            return contact
    return FALLBACK_CONTACT
