"""`NotifySettings`: how a host notifies of approvals (`tunnel host --notify...`,
`--push-service`), one frozen object; imports nothing heavy."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_CONTACT = "mailto:agent-tunnel@localhost"
"""The VAPID JWT's `sub` when the host names no contact (`--push-contact`): RFC 8292 section
2.1 asks for a mailto: or https: URI a push service's operator could reach."""

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
    push_contact: str = DEFAULT_CONTACT
    """The VAPID JWT's `sub` (`--push-contact`)."""
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
