"""The relay's configuration: one frozen object, built by the command line or by any caller."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from tunnel.e2e.crypto import normalize_relay_url
from tunnel.link.urls import http_base_url
from tunnel.proto import Limits

LOG_LEVELS = ("debug", "info", "warning", "error")

_METRICS_TOKEN = re.compile(r"[\x21-\x7e]+")
"""What a bearer token may hold here: visible ASCII, no spaces (it travels in a header)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RelaySettings:
    """Everything `tunnel.relay.server.run` needs. Every limit is a named field; `None` is off."""

    host: str = "127.0.0.1"
    """Interface to bind."""

    port: int = 8765
    """TCP port to bind; 0 picks a free port (printed on stdout once listening)."""

    certfile: Path | None = None
    """PEM certificate chain: serve TLS directly (wss:// and https://)."""

    keyfile: Path | None = None
    """PEM private key of `certfile`."""

    authorized_keys: Path | None = None
    """Only hosts whose public key is listed here may register; None admits any key."""

    public_url: str | None = None
    """The base URL hosts and browsers use to reach this relay (scheme://host[:port], no path).

    Hosts sign it in their hello, and the browser Origin is checked against it. Defaults to the
    bound address, which is only right when nothing sits in between."""

    allowed_origins: tuple[str, ...] = ()
    """Extra browser origins allowed to open WebSockets, besides the public URL's own origin."""

    metrics_token: str | None = field(default=None, repr=False)
    """The bearer token `/metrics` requires (`Authorization: Bearer <token>`); None leaves
    `/metrics` open to anyone who can reach the relay. Kept out of repr, so never logged."""

    max_hosts: int | None = 1000
    """Hosts online at once; one more is closed with 4006."""

    max_teammates_per_host: int | None = 32
    """Teammate links attached to one host at once; one more is closed with 4006."""

    max_connections_per_ip: int | None = 64
    """WebSocket connections from one IP address at once; one more is closed with 4006."""

    max_channels_per_teammate: int | None = 8
    """Channels one teammate link may hold open; one more `open` is closed with 4006."""

    hello_timeout: float = 10.0
    """Seconds a new connection has to send its hello before it is closed with 4000."""

    send_timeout: float | None = 30.0
    """Seconds a connection's socket may refuse our writes before it is cut off with 4007."""

    ping_interval: float | None = 20.0
    """Seconds between WebSocket keepalive pings."""

    ping_timeout: float | None = 20.0
    """Seconds to wait for a pong before the connection is considered dead."""

    limits: Limits = field(default_factory=Limits)
    """Link protocol limits (message and data sizes, channels per link, window)."""

    log_level: str = "info"
    """One of LOG_LEVELS."""

    def __post_init__(self) -> None:
        if (self.certfile is None) != (self.keyfile is None):
            raise ValueError("certfile and keyfile go together")
        if self.log_level not in LOG_LEVELS:
            raise ValueError(f"log_level must be one of {', '.join(LOG_LEVELS)}")
        if self.public_url is not None:
            http_base_url(self.public_url)
        for origin in self.allowed_origins:
            url_origin(origin)
        if self.metrics_token is not None and not _METRICS_TOKEN.fullmatch(self.metrics_token):
            raise ValueError("the metrics token must be visible ASCII characters, without spaces")

    @property
    def tls(self) -> bool:
        """Whether the relay serves TLS itself."""
        return self.certfile is not None

    def resolved_public_url(self, bound_port: int) -> str:
        """Return the public URL in normal form (`normalize_relay_url`), defaulting to the
        address actually bound."""
        if self.public_url is not None:
            return http_base_url(self.public_url)
        scheme = "https" if self.tls else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return normalize_relay_url(f"{scheme}://{host}:{bound_port}")


def url_origin(url: str) -> str:
    """Return the browser origin of an http(s) URL: its scheme://host[:port] in the normal form
    of `normalize_relay_url`, which is how browsers send an Origin header."""
    parts = urlsplit(url.strip())
    try:
        return normalize_relay_url(f"{parts.scheme}://{parts.netloc}")
    except ValueError:
        raise ValueError(f"not an http(s) origin: {url!r}") from None
