"""The relay's switch: admits connections and forwards channels between teammates and hosts.

Everything here is synchronous and runs on the event loop thread, called with the events of
each link as its messages are read (from the socket's read callback, tunnel/link/core.py), so no
locks are needed and every decision sees a consistent table.

Flow control end to end (docs/relay.md, "Flow control"): a `data` frame received on one side is
acknowledged to its sender only once it was queued onto the other side's link, which happens only
while the other side grants window. Per channel direction the relay therefore holds at most one
window of bytes waiting (`_pending`, bounded by the window the sender had) plus one window queued
in the destination link's protocol object; a teammate that stops reading stalls only its own
channel, and its host sees that channel's window run dry, nothing else.

The host's broadcast (docs/protocol.md, "Broadcast"): a host's `cast` is copied to every channel
it joined to the cast's group, through the same per-channel queue as data, so a teammate gets
casts and data in the host's order. Casts are not the host's to wait for: a channel holding more
than `max_cast_backlog` bytes of queued casts is cut (its queued casts dropped, a `cut` after
its queued data), and the host never learns of the teammate's pace.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import Counter, deque
from dataclasses import dataclass, field, replace
from typing import Any

from tunnel.handshake import (
    ADMISSION_PATH,
    REGISTER_PATH,
    HelloError,
    HostHello,
    Invited,
    parse_host_hello,
    parse_registration,
    parse_teammate_hello,
)
from tunnel.link import Link
from tunnel.proto import (
    CastJoined,
    CastParted,
    CastReceived,
    ChannelClosed,
    ChannelNotOpenError,
    ChannelOpened,
    DataReceived,
    Event,
    HelloReceived,
    Limits,
    LocalProtocolError,
    Payload,
    WindowUpdated,
)
from tunnel.proto.codes import CloseCode
from tunnel.relay.admission import match
from tunnel.relay.limits import MAX_CAST_BACKLOG
from tunnel.relay.metrics import RelayMetrics
from tunnel.relay.routing import Endpoint, Route, RoutingTable

logger = logging.getLogger("relay.switch")


class Kind(enum.Enum):
    """Which WebSocket route a connection came in on."""

    HOST = "host"
    TEAMMATE = "teammate"


@dataclass(eq=False, slots=True, kw_only=True)
class Peer:
    """One WebSocket connection to the relay, admitted or not. Compared by identity."""

    link: Link
    kind: Kind
    ip: str
    challenge: bytes = field(repr=False)
    admitted: bool = False
    host_id: str | None = None
    """Host: its own id. Teammate: the host it attached to."""
    name: str = ""
    """Teammate's display name."""
    role: str | None = None
    """Teammate's role (whose verifier its token matched)."""
    token_hash: bytes = field(default=b"", repr=False)
    """Teammate: sha256 of its token, kept to re-check it when its host re-registers."""
    invitation: bytes | None = field(default=None, repr=False)
    """Teammate: the verifier of the personal link its token matched; None for a role link."""
    verifiers: dict[str, bytes] = field(default_factory=dict, repr=False)
    """Host: the verifiers of its role links."""
    invited: tuple[Invited, ...] = field(default=(), repr=False)
    """Host: the verifiers of its personal links."""
    instance: bytes | None = field(default=None, repr=False)
    """Host: which host process it is (from its hello); None matches no other connection."""
    idle_timer: asyncio.TimerHandle | None = field(default=None, repr=False)
    """Teammate: armed while it holds no channel open (`SwitchLimits.channel_timeout`)."""
    hello_deadline: asyncio.TimerHandle | None = field(default=None, repr=False)
    """Armed by the server for the hello (`--hello-timeout`), cancelled once it is admitted."""

    def admit(self) -> None:
        """Mark the peer admitted. Its hello deadline goes with it: a connection that lasts hours
        should not keep that timer, nor wake for it."""
        self.admitted = True
        if self.hello_deadline is not None:
            self.hello_deadline.cancel()
            self.hello_deadline = None

    def describe(self) -> str:
        """A short label for log lines: kind, address, host id. Never a secret."""
        host = f" host={self.host_id}" if self.host_id else ""
        return f"{self.kind.value} {self.ip}{host}"


class _QueuedCast:
    """A cast waiting in a channel's queue among its data (which is queued as bare bytes)."""

    __slots__ = ("data",)

    def __init__(self, data: Payload) -> None:
        self.data = data


_CUT = object()
"""The `cut` that follows the data still queued for a channel cut from the broadcast."""

_Queued = Payload | _QueuedCast | object


class _Groups:
    """One host link's broadcast groups: which of its channels each group's casts are copied to.
    A channel is in one group at most; bounded by the host link's routes."""

    __slots__ = ("_group_of", "members")

    def __init__(self) -> None:
        self.members: dict[int, dict[int, Endpoint[Peer]]] = {}
        """Group -> (host channel id -> the teammate's end), in join order."""
        self._group_of: dict[int, int] = {}

    def join(self, channel: int, group: int, end: Endpoint[Peer]) -> None:
        """Put `channel` in `group`, out of any other."""
        self.leave(channel)
        self._group_of[channel] = group
        self.members.setdefault(group, {})[channel] = end

    def leave(self, channel: int) -> Endpoint[Peer] | None:
        """Take `channel` out of its group; its end, or None if it was in none."""
        group = self._group_of.pop(channel, None)
        if group is None:
            return None
        members = self.members[group]
        end = members.pop(channel)
        if not members:
            del self.members[group]
        return end


class _Outcome(enum.Enum):
    SENT = "sent"
    BLOCKED = "blocked"
    DROPPED = "dropped"


@dataclass(frozen=True, slots=True, kw_only=True)
class SwitchLimits:
    """Admission limits of the switch; None turns one off."""

    max_hosts: int | None = 1000
    max_teammates_per_host: int | None = 32
    max_connections_per_ip: int | None = 64
    max_channels_per_teammate: int | None = 8
    """Channels one teammate link may hold open: the host link's channels are shared by every
    teammate, so one link must not be able to take them all."""
    drive_seats: int | None = 4
    """Seats of `max_teammates_per_host` that only drive teammates may take: viewers take at
    most the others (and always at least one), so view links handed around widely never lock a
    host's drivers out."""
    channel_timeout: float | None = 10.0
    """Seconds an attached teammate may hold no channel open (after its hello, or after its
    last channel closed) before its link is closed with 4006, giving its seat back."""
    max_cast_backlog: int = MAX_CAST_BACKLOG
    """Bytes of casts queued for one teammate channel beyond its window before it is cut from
    the broadcast (docs/protocol.md, "Broadcast")."""

    def view_seats(self) -> int | None:
        """Seats viewers may take on one host; None if unlimited."""
        limit = self.max_teammates_per_host
        if limit is None:
            return None
        return max(1, limit - (self.drive_seats or 0))


class Switch:
    """Admission, routing and forwarding for every connection of one relay."""

    def __init__(
        self,
        *,
        public_url: str,
        limits: SwitchLimits,
        link_limits: Limits,
        metrics: RelayMetrics,
        authorized_keys: frozenset[bytes] | None = None,
    ) -> None:
        self.public_url = public_url
        self._limits = limits
        self._link_limits = link_limits
        self._metrics = metrics
        self._authorized_keys = authorized_keys
        self.hosts: dict[str, Peer] = {}
        # Bounded by max_teammates_per_host per host.
        self.teammates: dict[str, set[Peer]] = {}
        self.routes: RoutingTable[Peer] = RoutingTable()
        # Bounded per destination channel by the window its source channel had, plus
        # max_cast_backlog of casts (see module doc).
        self._pending: dict[tuple[Peer, int], deque[_Queued]] = {}
        # Per host, its broadcast groups and their joined channels; bounded by the routes.
        self._joined: dict[Peer, _Groups] = {}
        # Bytes of casts in each teammate channel's queue.
        self._cast_backlog: dict[tuple[Peer, int], int] = {}
        self._per_ip: Counter[str] = Counter()
        # TCP connections whose WebSocket opening is under way, per address; bounded by the
        # per-IP limit, which they count against.
        self._opening: Counter[str] = Counter()

    # -- connections --------------------------------------------------------------------------

    def accept(self, ip: str) -> bool:
        """Count a TCP connection from `ip` from its accept until its WebSocket opens (`opened`)
        or it ends, so half-finished openings count against the per-IP limit; False if `ip` is
        at the maximum (then refuse it at once, uncounted)."""
        limit = self._limits.max_connections_per_ip
        if limit is not None and self._per_ip[ip] + self._opening[ip] >= limit:
            self._metrics.frames_rejected.labels(reason="connections_per_ip").inc()
            return False
        self._opening[ip] += 1
        return True

    def opened(self, ip: str) -> None:
        """Stop counting a connection counted by `accept`: its WebSocket opened (`connect`
        counts it from now on, under its client's address) or it ended."""
        self._opening[ip] -= 1
        if self._opening[ip] <= 0:
            del self._opening[ip]

    def connect(self, peer: Peer) -> bool:
        """Count a new connection; False if its IP is at the maximum (then close it with 4006)."""
        limit = self._limits.max_connections_per_ip
        if limit is not None and self._per_ip[peer.ip] >= limit:
            self._metrics.frames_rejected.labels(reason="connections_per_ip").inc()
            return False
        self._per_ip[peer.ip] += 1
        self._metrics.connections.inc()
        return True

    def disconnect(self, peer: Peer) -> None:
        """Forget a connection whose link has closed; close what depended on it."""
        self._per_ip[peer.ip] -= 1
        if self._per_ip[peer.ip] <= 0:
            del self._per_ip[peer.ip]
        self._metrics.connections.dec()
        self._disarm(peer)
        self._drop_routes(peer)
        if not peer.admitted:
            return
        peer.admitted = False
        assert peer.host_id is not None
        if peer.kind is Kind.HOST:
            self._joined.pop(peer, None)
            if self.hosts.get(peer.host_id) is peer:
                del self.hosts[peer.host_id]
                self._metrics.hosts_online.set(len(self.hosts))
                for teammate in list(self.teammates.get(peer.host_id, ())):
                    teammate.link.close_soon(CloseCode.HOST_GONE, "host went offline")
        else:
            attached = self.teammates.get(peer.host_id)
            if attached is not None:
                attached.discard(peer)
                if not attached:
                    del self.teammates[peer.host_id]
            self._metrics.teammates_attached.dec()

    # -- events -------------------------------------------------------------------------------

    def on_event(self, peer: Peer, event: Event) -> None:
        """Handle one protocol event from `peer`'s link (the `Link.run` callback)."""
        if isinstance(event, DataReceived):
            self._on_data(peer, event)
        elif isinstance(event, CastReceived):
            self._on_cast(peer, event)
        elif isinstance(event, CastJoined | CastParted):
            self._on_join_or_part(peer, event)
        elif isinstance(event, WindowUpdated):
            self._drain(peer, event.channel)
        elif isinstance(event, ChannelOpened):
            self._on_open(peer, event)
        elif isinstance(event, ChannelClosed):
            self._on_close(peer, event)
        elif isinstance(event, HelloReceived):
            self._on_hello(peer, event)

    # -- hello and admission ------------------------------------------------------------------

    def _on_hello(self, peer: Peer, event: HelloReceived) -> None:
        try:
            if peer.kind is Kind.HOST:
                hello = parse_host_hello(
                    event.payload,
                    challenge=peer.challenge,
                    public_url=self.public_url,
                    authorized_keys=self._authorized_keys,
                )
                self._admit_host(peer, hello)
            else:
                self._admit_teammate(peer, event)
        except HelloError as refusal:
            self._metrics.frames_rejected.labels(reason=refusal.metric).inc()
            logger.info("refused %s: %d %s", peer.describe(), refusal.code, refusal)
            peer.link.close_soon(refusal.code, str(refusal))

    def _admit_host(self, peer: Peer, hello: HostHello) -> None:
        peer.host_id = hello.host_id  # for log lines, refused or not
        old = self.hosts.get(hello.host_id)
        limit = self._limits.max_hosts
        if old is None and limit is not None and len(self.hosts) >= limit:
            raise HelloError(CloseCode.LIMIT_REACHED, "relay is full", metric="max_hosts")
        same_process = (
            old is not None and old.instance is not None and old.instance == hello.instance
        )
        if old is not None and not old.link.closing and not same_process and not hello.replace:
            # Two processes with one key would replace each other forever, and teammates would
            # flip between two sessions: the one online keeps the host id.
            raise HelloError(
                CloseCode.HOST_ID_IN_USE,
                "another host is online with this key",
                metric="host_id_in_use",
            )
        peer.verifiers = dict(hello.verifiers)
        peer.invited = hello.invited
        peer.instance = hello.instance
        host_channels = hello.limits.get("max_channels")
        if host_channels is not None:
            # The relay opens a channel toward the host for every teammate open: keep within the
            # host's limit, so one open too many is refused for that channel (4006) instead of
            # failing the host's whole link at the host.
            ours = peer.link.connection.limits
            if ours.max_channels is None or host_channels < ours.max_channels:
                peer.link.connection.adopt_limits(replace(ours, max_channels=host_channels))
        peer.admit()
        self.hosts[hello.host_id] = peer
        self._metrics.hosts_online.set(len(self.hosts))
        if old is not None:
            self._drop_routes(old, code=CloseCode.HOST_GONE)
            if same_process or old.link.closing:
                # A reconnect after a network change, or a re-registration with new verifiers
                # (revoke): the process has left that connection already.
                logger.info("%s replaces its previous connection", peer.describe())
                old.link.close_soon(CloseCode.GOING_AWAY, "replaced by a newer connection")
            else:
                # Taken over on purpose: the other process stops instead of coming back.
                logger.info("%s takes over from another host process", peer.describe())
                old.link.close_soon(CloseCode.HOST_ID_IN_USE, "another host took over this key")
        self._rematch(peer)
        logger.info("%s online", peer.describe())

    def _rematch(self, host: Peer) -> None:
        """Match every teammate of `host` against its verifiers again: close (4008) those whose
        link was revoked."""
        assert host.host_id is not None
        for teammate in list(self.teammates.get(host.host_id, ())):
            found = match(teammate.token_hash, host.verifiers, host.invited)
            if found is None:
                teammate.link.close_soon(CloseCode.REVOKED, "share link revoked")
            else:
                teammate.role, teammate.invitation = found.role, found.invitation

    def _register(self, peer: Peer, channel: int, meta: dict[str, Any]) -> None:
        """A registered host replaces its verifiers (REGISTER_PATH): the open's close says
        whether they are in force."""
        endpoint = Endpoint(link=peer, channel=channel)
        try:
            verifiers, invited = parse_registration(meta)
        except HelloError as refusal:
            self._close_channel(endpoint, refusal.code, str(refusal))
            return
        peer.verifiers, peer.invited = verifiers, invited
        self._rematch(peer)
        logger.info("%s registered %d personal links", peer.describe(), len(invited))
        self._close_channel(endpoint, CloseCode.NORMAL, "")

    def _admit_teammate(self, peer: Peer, event: HelloReceived) -> None:
        hello = parse_teammate_hello(event.payload)
        peer.host_id = hello.host_id
        host = self.hosts.get(hello.host_id)
        if host is None:
            raise HelloError(CloseCode.HOST_GONE, "host is offline", metric="host_offline")
        found = match(hello.token_hash, host.verifiers, host.invited)
        if found is None:
            raise HelloError(CloseCode.UNAUTHORIZED, "token does not match", metric="bad_token")
        role = found.role
        attached = self.teammates.get(hello.host_id, set())
        limit = self._limits.max_teammates_per_host
        if limit is not None and len(attached) >= limit:
            raise HelloError(
                CloseCode.LIMIT_REACHED, "host has too many teammates", metric="max_teammates"
            )
        view_seats = self._limits.view_seats()
        if role != "drive" and view_seats is not None:
            # The drive seats stay free of viewers (docs/relay.md, "Limits").
            viewers = sum(1 for teammate in attached if teammate.role != "drive")
            if viewers >= view_seats:
                raise HelloError(
                    CloseCode.LIMIT_REACHED, "host has too many viewers", metric="max_viewers"
                )
        peer.name = hello.name
        peer.role = role
        peer.invitation = found.invitation
        peer.token_hash = hello.token_hash
        peer.admit()
        self.teammates[hello.host_id] = attached
        attached.add(peer)
        self._metrics.teammates_attached.inc()
        self._arm(peer)
        logger.info("%s attached as %s", peer.describe(), role)

    # -- teammates that open no channel -------------------------------------------------------

    def _arm(self, peer: Peer) -> None:
        """Start the clock of a teammate that holds no channel open."""
        timeout = self._limits.channel_timeout
        if timeout is None or peer.idle_timer is not None:
            return
        peer.idle_timer = asyncio.get_running_loop().call_later(timeout, self._idle, peer)

    def _disarm(self, peer: Peer) -> None:
        if peer.idle_timer is not None:
            peer.idle_timer.cancel()
            peer.idle_timer = None

    def _idle(self, peer: Peer) -> None:
        peer.idle_timer = None
        if not peer.admitted or peer.link.closing or self.routes.channels(peer):
            return
        # A seat is for a teammate using it: one that only said hello gives it back.
        self._metrics.frames_rejected.labels(reason="no_channel").inc()
        logger.info("closed %s: %d no channel open", peer.describe(), CloseCode.LIMIT_REACHED)
        peer.link.close_soon(CloseCode.LIMIT_REACHED, "no channel open in time")

    # -- channels -----------------------------------------------------------------------------

    def _on_open(self, peer: Peer, event: ChannelOpened) -> None:
        if peer.kind is Kind.HOST:
            if event.path == ADMISSION_PATH:
                # Frames are handled in order: this close tells the host its hello was accepted.
                self._close_channel(
                    Endpoint(link=peer, channel=event.channel), CloseCode.NORMAL, ""
                )
                return
            if event.path == REGISTER_PATH and peer.admitted:
                self._register(peer, event.channel, dict(event.meta))
                return
            # Otherwise, on a host link only the relay opens channels.
            self._refuse_channel(peer, event.channel, CloseCode.REFUSED, "hosts do not open")
            return
        assert peer.host_id is not None
        host = self.hosts.get(peer.host_id)
        if host is None or host.link.closing:
            self._refuse_channel(peer, event.channel, CloseCode.HOST_GONE, "host is offline")
            return
        per_teammate = self._limits.max_channels_per_teammate
        if per_teammate is not None and self.routes.channels(peer) >= per_teammate:
            self._refuse_channel(
                peer, event.channel, CloseCode.LIMIT_REACHED, "too many channels on this link"
            )
            return
        entries = self._link_limits.max_meta_entries
        if entries is not None and len(event.meta) + 1 > entries:
            self._refuse_channel(peer, event.channel, CloseCode.LIMIT_REACHED, "meta too large")
            return
        # "peer" is the relay's word, so a teammate cannot pose as another name or role.
        meta = dict(event.meta)
        meta["peer"] = {"name": peer.name, "role": peer.role}
        if peer.invitation is not None:
            # Which personal link the token matched: the host checks the open's proof with that
            # link's root, so a relay that names the wrong one only makes the opening fail.
            meta["peer"]["invitation"] = peer.invitation
        try:
            host_channel = host.link.connection.open_channel(event.path, meta)
        except LocalProtocolError as exc:
            limited = exc.code == CloseCode.LIMIT_REACHED
            code = CloseCode.LIMIT_REACHED if limited else CloseCode.REFUSED
            self._refuse_channel(peer, event.channel, code, "host cannot take more channels")
            return
        self.routes.add(
            teammate=peer,
            teammate_channel=event.channel,
            host=host,
            host_channel=host_channel,
        )
        self._disarm(peer)
        host.link.flush()
        self._metrics.forwarded.frames_up += 1
        self._metrics.open_channels.set(len(self.routes))

    def _refuse_channel(self, peer: Peer, channel: int, code: CloseCode, reason: str) -> None:
        self._metrics.frames_rejected.labels(reason="channel_refused").inc()
        self._close_channel(Endpoint(link=peer, channel=channel), code, reason)

    def _on_close(self, peer: Peer, event: ChannelClosed) -> None:
        route = self.routes.remove(peer, event.channel)
        if route is None:
            return  # the answer to a close of ours
        self._unjoin(route)
        self._forget_pending(route.teammate, route.host)
        other = route.other(peer, event.channel)
        self._close_channel(other, event.code, event.reason)
        teammate = route.teammate.link
        if teammate.admitted and not self.routes.channels(teammate):
            self._arm(teammate)
        forwarded = self._metrics.forwarded
        if peer.kind is Kind.HOST:
            forwarded.frames_down += 1
        else:
            forwarded.frames_up += 1
        self._metrics.open_channels.set(len(self.routes))

    def _close_channel(self, end: Endpoint[Peer], code: int, reason: str) -> None:
        try:
            end.link.link.connection.close_channel(end.channel, code, reason)
        except LocalProtocolError:
            return  # that link failed; it is being closed as a whole
        end.link.link.flush()

    def _drop_routes(self, peer: Peer, code: CloseCode | None = None) -> None:
        teammates: set[Peer] = set()
        for route in self.routes.routes(peer):
            self._unjoin(route)
            teammates.add(route.teammate.link)
        for item in self.routes.remove_link(peer):
            self._forget_pending(item.endpoint)
            self._close_channel(
                item.endpoint,
                item.code if code is None else code,
                "host went away" if item.code == CloseCode.HOST_GONE else "teammate left",
            )
        for key in [key for key in self._pending if key[0] is peer]:
            del self._pending[key]
            self._cast_backlog.pop(key, None)
        self._metrics.open_channels.set(len(self.routes))
        for teammate in teammates - {peer}:
            if teammate.admitted:
                self._arm(teammate)  # its host was replaced: its channels are gone

    # -- data ---------------------------------------------------------------------------------

    def _on_data(self, peer: Peer, event: DataReceived) -> None:
        # The hot path of a relay: one call per forwarded message, so it builds no objects but
        # the pending key.
        channel = event.channel
        route = self.routes.lookup(peer, channel)
        if route is None:
            # Not routed (cannot happen for a channel we still have open): consume it so the
            # peer's window stays honest.
            self._acknowledge(peer, channel, len(event.data))
            return
        destination = route.other(peer, channel)
        key = (destination.link, destination.channel)
        waiting = self._pending.get(key)
        if waiting is None:
            outcome = self._send(destination, event.data)
            if outcome is not _Outcome.BLOCKED:
                self._acknowledge(peer, channel, len(event.data))
                return
            waiting = self._pending[key] = deque()
        waiting.append(event.data)

    def _drain(self, peer: Peer, channel: int) -> None:
        key = (peer, channel)
        waiting = self._pending.get(key)
        if not waiting:
            return
        source = self.routes.peer(peer, channel)
        if source is None:
            del self._pending[key]
            return
        destination = Endpoint(link=peer, channel=channel)
        while waiting:
            entry = waiting[0]
            if isinstance(entry, bytes | memoryview):
                if self._send(destination, entry) is _Outcome.BLOCKED:
                    return
                self._acknowledge(source.link, source.channel, len(entry))
            elif isinstance(entry, _QueuedCast):
                if self._send(destination, entry.data, cast=True) is _Outcome.BLOCKED:
                    return
                self._cast_backlog[key] -= len(entry.data)
                self._count_casts(1, len(entry.data))
            else:
                self._send_cut(destination)
            waiting.popleft()
        del self._pending[key]
        self._cast_backlog.pop(key, None)

    def _send(self, destination: Endpoint[Peer], data: Payload, *, cast: bool = False) -> _Outcome:
        """Queue `data` (a cast with `cast`) on the destination channel if its window allows."""
        link = destination.link.link
        connection = link.connection
        try:
            if cast:
                sent = connection.send_cast(destination.channel, data)
            else:
                sent = connection.send_data(destination.channel, data)
        except ChannelNotOpenError:
            return _Outcome.DROPPED  # its close is on the way; the route goes with it
        except LocalProtocolError:
            self._metrics.frames_rejected.labels(reason="undeliverable").inc()
            return _Outcome.DROPPED
        if not sent:
            return _Outcome.BLOCKED
        link.flush()
        if cast:
            return _Outcome.SENT  # counted by the caller, once per cast (see _on_cast)
        forwarded = self._metrics.forwarded
        if destination.link.kind is Kind.HOST:
            forwarded.frames_up += 1
            forwarded.bytes_up += len(data)
        else:
            forwarded.frames_down += 1
            forwarded.bytes_down += len(data)
        return _Outcome.SENT

    # -- the broadcast --------------------------------------------------------------------------

    def _on_join_or_part(self, peer: Peer, event: CastJoined | CastParted) -> None:
        if peer.kind is not Kind.HOST:
            self._broadcast_from_teammate(peer)
            return
        if isinstance(event, CastParted):
            joined = self._joined.get(peer)
            if joined is not None:
                joined.leave(event.channel)
            return
        teammate = self.routes.peer(peer, event.channel)
        if teammate is not None:  # else its close is on the way
            groups = self._joined.get(peer)
            if groups is None:
                groups = self._joined[peer] = _Groups()
            groups.join(event.channel, event.group, teammate)

    def _unjoin(self, route: Route[Peer]) -> None:
        joined = self._joined.get(route.host.link)
        if joined is not None:
            joined.leave(route.host.channel)

    def _broadcast_from_teammate(self, peer: Peer) -> None:
        # Only a host casts: a teammate that tries breaks the protocol, and loses its link.
        self._metrics.frames_rejected.labels(reason="teammate_cast").inc()
        logger.info("closing %s: a broadcast frame from a teammate", peer.describe())
        peer.link.close_soon(CloseCode.PROTOCOL_ERROR, "only a host casts")

    def _on_cast(self, peer: Peer, event: CastReceived) -> None:
        """Copy a host's cast to each channel it joined to the cast's group: at once where the
        window allows, else behind what that channel has queued; a channel with too much queued
        is cut."""
        if peer.kind is not Kind.HOST:
            self._broadcast_from_teammate(peer)
            return
        self._metrics.casts.inc()
        groups = self._joined.get(peer)
        joined = None if groups is None else groups.members.get(event.group)
        if not joined:
            return
        data = event.data
        limit = self._limits.max_cast_backlog
        cut: list[int] = []
        sent = 0
        for host_channel, end in joined.items():
            key = (end.link, end.channel)
            waiting = self._pending.get(key)
            if waiting is None:
                outcome = self._send(end, data, cast=True)
                if outcome is _Outcome.SENT:
                    sent += 1
                if outcome is not _Outcome.BLOCKED:
                    continue
                waiting = self._pending[key] = deque()
            backlog = self._cast_backlog.get(key, 0) + len(data)
            if backlog > limit:
                cut.append(host_channel)
                continue
            self._cast_backlog[key] = backlog
            waiting.append(_QueuedCast(data))
        assert groups is not None
        for host_channel in cut:
            behind = groups.leave(host_channel)
            assert behind is not None
            self._cut(behind)
        self._count_casts(sent, sent * len(data))

    def _count_casts(self, frames: int, size: int) -> None:
        # Once per cast, not once per copy.
        if frames:
            forwarded = self._metrics.forwarded
            forwarded.frames_down += frames
            forwarded.bytes_down += size

    def _cut(self, end: Endpoint[Peer]) -> None:
        """Take a channel that fell behind out of the broadcast: its queued casts go, and a
        `cut` follows whatever data it still has queued."""
        self._metrics.cast_cuts.inc()
        key = (end.link, end.channel)
        self._cast_backlog.pop(key, None)
        waiting = self._pending.get(key)
        if waiting is not None:
            kept: deque[_Queued] = deque(e for e in waiting if not isinstance(e, _QueuedCast))
            if kept:
                kept.append(_CUT)
                self._pending[key] = kept
                return
            del self._pending[key]
        self._send_cut(end)

    def _send_cut(self, destination: Endpoint[Peer]) -> None:
        link = destination.link.link
        try:
            link.connection.cut(destination.channel)
        except LocalProtocolError:
            return  # closing or gone: it gets no more casts either way
        link.flush()

    def _acknowledge(self, source: Peer, channel: int, n: int) -> None:
        link = source.link
        try:
            link.connection.acknowledge(channel, n)
        except LocalProtocolError:
            return
        link.flush()

    def _forget_pending(self, *ends: Endpoint[Peer]) -> None:
        for end in ends:
            self._pending.pop((end.link, end.channel), None)
            self._cast_backlog.pop((end.link, end.channel), None)
