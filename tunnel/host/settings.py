"""The host's configuration: one frozen object built by `tunnel host` or by any caller."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tunnel.e2e.crypto import default_secrets_path
from tunnel.e2e.identity import default_key_path
from tunnel.link import DialSettings, http_base_url
from tunnel.link.framings import FramingName, check_framing
from tunnel.process.backoff import BACKOFF_INITIAL, HOST_MAX_BACKOFF
from tunnel.proto import Limits

DEFAULT_HOST_LIMITS = Limits(max_channels=1024)
"""The relay opens every channel of a host link, one per attached teammate channel: allow more
than the relay's own default per-link limit, so the relay's limit is the one that bites."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HostSettings:
    """Everything `Host` needs. Every limit is a named field; `None` turns it off."""

    relay_url: str
    """The relay's base URL (https://relay.example or wss://...; normalized to http(s))."""

    key_file: Path | None = None
    """The host's Ed25519 key; default `tunnel.e2e.identity.default_key_path()`, made if missing."""

    secrets_file: Path | None = None
    """The share secrets; default next to the key file. Created if missing."""

    name: str = "host"
    """The host's display name (shown to teammates by the application)."""

    capabilities: tuple[str, ...] = ()
    """What the host announces in its hello (opaque to the relay)."""

    paths: frozenset[str] = frozenset({"session"})
    """Channel paths the host serves; an open for any other path is refused with 4001."""

    replace: bool = False
    """Take the host id over from another host process online with the same key (it stops with
    4009). Without it, this host stops with 4009 while another one is online."""

    ping_interval: float | None = 20.0
    """Seconds between keepalive pings; a dead link is noticed within interval + timeout."""

    ping_timeout: float | None = 20.0
    """Seconds to wait for a pong before the link is considered dead."""

    open_timeout: float = 10.0
    """Seconds for the TCP, TLS and WebSocket handshakes."""

    hello_timeout: float = 10.0
    """Seconds to wait for the relay's hello."""

    backoff_initial: float = BACKOFF_INITIAL
    """Upper bound of the first reconnect delay, in seconds."""

    backoff_max: float = HOST_MAX_BACKOFF
    """Cap of the reconnect delay, in seconds."""

    stable_after: float = 10.0
    """A link that stayed up this long resets the backoff."""

    limits: Limits = field(default_factory=lambda: DEFAULT_HOST_LIMITS)
    """Link protocol limits enforced on what the relay sends."""

    framing: str = FramingName.websockets
    """The WebSocket library to dial the relay with: "websockets", or "picows" (the `fast`
    extra; a ValueError if it is not installed), which spends less CPU per message."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "relay_url", http_base_url(self.relay_url))
        check_framing(self.framing, "framing")

    @property
    def dial(self) -> DialSettings:
        """How the host reaches its relay."""
        return DialSettings(
            open_timeout=self.open_timeout,
            hello_timeout=self.hello_timeout,
            ping_interval=self.ping_interval,
            ping_timeout=self.ping_timeout,
            limits=self.limits,
        )

    @property
    def resolved_key_file(self) -> Path:
        """The key file actually used."""
        return self.key_file if self.key_file is not None else default_key_path()

    @property
    def resolved_secrets_file(self) -> Path:
        """The share secrets file actually used: next to the key file."""
        if self.secrets_file is not None:
            return self.secrets_file
        if self.key_file is None:
            return default_secrets_path()
        return self.key_file.with_name(self.key_file.name + ".secrets")

    @property
    def resolved_invitations_file(self) -> Path:
        """The personal links' file: beside the share secrets (`share_secrets.invitations`, or
        `K.secrets.invitations` with `--key-file K`)."""
        secrets = self.resolved_secrets_file
        return secrets.with_name(secrets.name + ".invitations")

    @property
    def resolved_vapid_file(self) -> Path:
        """The Web Push (VAPID) key: beside the host key (`host_key.vapid`, `K.vapid`)."""
        key = self.resolved_key_file
        return key.with_name(key.name + ".vapid")

    @property
    def resolved_subscriptions_file(self) -> Path:
        """The teammates' push subscriptions: beside the host key (`host_key.push`, `K.push`)."""
        key = self.resolved_key_file
        return key.with_name(key.name + ".push")
