"""The relay's Prometheus metrics, in a registry of their own (docs/relay.md, "Metrics").

Only counts and sizes: the relay has no content to report and labels never carry host ids, names
or addresses, so metric cardinality stays fixed.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "ClusterMetrics", "RelayMetrics"]


class RelayMetrics:
    """The relay's gauges and counters. One instance per running relay."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.hosts_online = Gauge(
            "relay_hosts_online", "Hosts currently registered.", registry=self.registry
        )
        self.teammates_attached = Gauge(
            "relay_teammates_attached",
            "Teammate links currently admitted.",
            registry=self.registry,
        )
        self.open_channels = Gauge(
            "relay_open_channels",
            "Routed channels (teammate channel plus its host channel count once).",
            registry=self.registry,
        )
        self.connections = Gauge(
            "relay_connections",
            "WebSocket connections open, admitted or not.",
            registry=self.registry,
        )
        self.bytes_forwarded = Counter(
            "relay_forwarded_bytes",
            "Bytes of `data` payload forwarded between teammates and hosts.",
            ["direction"],
            registry=self.registry,
        )
        self.frames_forwarded = Counter(
            "relay_forwarded_frames",
            "Frames (open, data, close) forwarded between teammates and hosts.",
            ["direction"],
            registry=self.registry,
        )
        self.frames_rejected = Counter(
            "relay_rejected",
            "Connections or channels refused or closed for breaking a rule, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.casts = Counter(
            "relay_casts",
            "Casts received from hosts (each copied to every joined teammate channel, counted"
            " there as forwarded frames down).",
            registry=self.registry,
        )
        self.cast_cuts = Counter(
            "relay_cast_cuts",
            "Teammate channels cut from a host's broadcast for falling behind.",
            registry=self.registry,
        )
        # The children the switch counts every forwarded frame in, bound once: looking a label
        # up per frame costs more than the count itself.
        self.frames_up = self.frames_forwarded.labels(direction="up")
        """Frames forwarded from teammates to hosts."""
        self.frames_down = self.frames_forwarded.labels(direction="down")
        """Frames forwarded from hosts to teammates."""
        self.bytes_up = self.bytes_forwarded.labels(direction="up")
        """Payload bytes forwarded from teammates to hosts."""
        self.bytes_down = self.bytes_forwarded.labels(direction="down")
        """Payload bytes forwarded from hosts to teammates."""

    def render(self) -> bytes:
        """Return the metrics in the Prometheus text format."""
        return generate_latest(self.registry)


class ClusterMetrics:
    """The gauges of a node in a relay cluster (docs/cluster.md), in the relay's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.member = Gauge(
            "relay_cluster_member",
            "1 while this node reaches Redis and takes part in the cluster, else 0.",
            registry=registry,
        )
        self.owned_hosts = Gauge(
            "relay_cluster_owned_hosts",
            "Hosts this node has recorded as its own in Redis.",
            registry=registry,
        )
        self.forwarded_connections = Gauge(
            "relay_cluster_forwarded_connections",
            "Teammate connections this node carries to the node that serves their host.",
            registry=registry,
        )
        self.hop_messages = Counter(
            "relay_cluster_hop_messages",
            "WebSocket messages this node carried over its hops to other nodes, by direction:"
            " down (from the host's node to a teammate here) or up.",
            ["direction"],
            registry=registry,
        )
        self.redis_errors = Counter(
            "relay_cluster_redis_errors",
            "Redis commands or connections that failed.",
            registry=registry,
        )
