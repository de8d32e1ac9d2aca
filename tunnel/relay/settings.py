"""The relay's configuration: one frozen object, built by the command line or by any caller."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from tunnel.link.framings import FRAMINGS
from tunnel.link.urls import http_base_url, normalize_relay_url
from tunnel.proto import Limits
from tunnel.relay.limits import MAX_CAST_BACKLOG

LOG_LEVELS = ("debug", "info", "warning", "error")

_METRICS_TOKEN = re.compile(r"[\x21-\x7e]+")
"""What a bearer token may hold here: visible ASCII, no spaces (it travels in a header)."""


MIN_CLUSTER_SECRET = 16
"""Bytes a cluster secret has at least: it authenticates every node-to-node connection."""

_REDIS_SCHEMES = ("redis", "rediss", "unix")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSettings:
    """How one relay node joins a cluster of nodes behind one address (docs/cluster.md)."""

    redis_url: str = field(repr=False)
    """redis://HOST:PORT/DB (rediss:// for TLS, unix:// for a socket). Kept out of repr: it may
    hold a password."""

    node_url: str
    """How the other nodes reach this one (ws:// or wss://, this node's own address, not the
    load balancer's), in the normal form of `http_base_url`."""

    secret: bytes = field(repr=False)
    """The secret every node shares; it signs node-to-node connections. Never logged."""

    ownership_ttl: float = 15.0
    """Seconds a host's ownership record lives in Redis unless its node refreshes it: how long a
    dead node's hosts keep pointing at it."""

    refresh_interval: float = 5.0
    """Seconds between refreshes of this node's ownership records (well under the TTL)."""

    redis_timeout: float = 2.0
    """Seconds one Redis command or connection attempt may take before Redis counts as down."""

    forward_timeout: float = 5.0
    """Seconds to open a forwarded connection to the owner node and get its hello."""

    max_clock_skew: float = 30.0
    """Seconds a node-to-node signature's timestamp may differ from this node's clock."""

    def __post_init__(self) -> None:
        scheme = urlsplit(self.redis_url).scheme
        if scheme not in _REDIS_SCHEMES:
            raise ValueError("the cluster URL starts with redis://, rediss:// or unix://")
        if urlsplit(self.node_url.strip()).scheme not in ("ws", "wss", "http", "https"):
            raise ValueError(f"the node URL starts with ws:// or wss://: {self.node_url!r}")
        object.__setattr__(self, "node_url", http_base_url(self.node_url))
        if len(self.secret) < MIN_CLUSTER_SECRET:
            raise ValueError(f"the cluster secret has at least {MIN_CLUSTER_SECRET} bytes")
        if not 0 < self.refresh_interval < self.ownership_ttl:
            raise ValueError("the refresh interval is positive and shorter than the TTL")

    @property
    def redis_address(self) -> str:
        """The Redis server for log lines: host, port and database, never a password."""
        parts = urlsplit(self.redis_url)
        if parts.scheme == "unix":
            return parts.path
        host = parts.hostname or "localhost"
        return f"{host}:{parts.port or 6379}{parts.path or '/0'}"


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

    drive_seats: int | None = 4
    """Seats of `max_teammates_per_host` kept for drive teammates: viewers take at most the
    others (at least one); a viewer beyond them is closed with 4006. None or 0 keeps none."""

    channel_timeout: float | None = 10.0
    """Seconds an attached teammate may hold no channel open before it is closed with 4006."""

    max_connections_per_ip: int | None = 64
    """Connections from one IP address at once, counted from the TCP accept (so half-finished
    WebSocket openings count too; on picows from the WebSocket's opening, `hello_timeout`
    bounding the rest); one more is refused."""

    max_channels_per_teammate: int | None = 8
    """Channels one teammate link may hold open; one more `open` is closed with 4006."""

    max_cast_backlog: int = MAX_CAST_BACKLOG
    """Bytes of a host's casts queued for one teammate channel beyond its window before the
    channel is cut from the broadcast (it then catches up on its own channel)."""

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

    cluster: ClusterSettings | None = None
    """Join a cluster of relay nodes through Redis; None runs one relay on its own."""

    framing: str = "websockets"
    """The WebSocket library the relay serves with, one of FRAMINGS: "websockets", or "picows"
    (the `fast` extra; not with `cluster`, whose hand-over takes websockets' connection)."""

    def __post_init__(self) -> None:
        if self.framing not in FRAMINGS:
            raise ValueError(f"framing must be one of {', '.join(FRAMINGS)}")
        if self.framing == "picows" and self.cluster is not None:
            raise ValueError("a cluster node serves with websockets: --framing picows is alone")
        if (self.certfile is None) != (self.keyfile is None):
            raise ValueError("certfile and keyfile go together")
        if self.log_level not in LOG_LEVELS:
            raise ValueError(f"log_level must be one of {', '.join(LOG_LEVELS)}")
        if self.public_url is not None:
            http_base_url(self.public_url)
        for origin in self.allowed_origins:
            url_origin(origin)
        if type(self.max_cast_backlog) is not int or self.max_cast_backlog < 1:
            raise ValueError("the cast backlog is at least 1 byte")
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
