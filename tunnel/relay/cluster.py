"""One relay node in a cluster: who serves which host, kept in Redis (docs/cluster.md).

The node that admits a host records `host id -> node` in Redis with a TTL it keeps refreshing,
and announces the change on a pub/sub channel, so the node that served the host before drops its
stale link and the teammates it served (they reconnect). A teammate that reaches a node without
its host is forwarded to the owner node (`tunnel.relay.node_forward`); while Redis cannot be
reached, a node keeps serving what it holds and refuses cross-node attaches with 4010. Every
record and announcement is sealed with the cluster secret (`tunnel.relay.cluster_auth`): what
Redis alone says is believed by no node.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import anyio
from anyio.abc import TaskStatus
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from websockets.exceptions import ConnectionClosed

from tunnel.handshake import (
    HelloError,
    HostHello,
    advertised,
    parse_host_hello,
    parse_teammate_hello,
)
from tunnel.process.backoff import Backoff
from tunnel.proto import Event, HelloReceived, RemoteProtocolError
from tunnel.proto.codes import CloseCode
from tunnel.relay.cluster_auth import (
    Announcement,
    Owner,
    Seen,
    SeenSignatures,
    ThrottledWarnings,
    UnverifiedError,
    open_announcement,
    open_record,
    seal_announcement,
    seal_record,
)
from tunnel.relay.metrics import ClusterMetrics, RelayMetrics
from tunnel.relay.node_entry import EntryLinks
from tunnel.relay.node_forward import close_websocket
from tunnel.relay.settings import ClusterSettings, RelaySettings
from tunnel.relay.switch import Kind, Peer, Switch

__all__ = ["Cluster", "ClusterUnavailableError", "Owner"]

logger = logging.getLogger("relay.cluster")

KEY_PREFIX = "agent-tunnel:host:"
"""Redis key of a host's ownership record: this prefix and the host id."""

OWNERS_CHANNEL = "agent-tunnel:owners"
"""Redis pub/sub channel on which a node announces that it took a host over."""

REFRESH_BATCH = 500
"""Ownership records refreshed per Redis call: one round trip for most nodes, bounded work."""

_RECONNECT_MAX = 5.0
"""Cap of the wait between attempts to reach Redis again, in seconds: Redis is this relay's own
infrastructure, and while it is away no teammate can be forwarded."""

# Store each newly signed record where the record this node wrote last (ARGV[2i], '' for none) is
# still there, or none is (Redis restarted empty, or the record expired while Redis was out of
# reach: an absent record is the holder's). Otherwise return what is there, for the node to
# judge: only a record that verifies, of another node, takes a host from it. ARGV[1] is the TTL
# in milliseconds, ARGV[2i + 1] the new record of KEYS[i]. Returns, per key, 1 when stored, else
# the value found.
_REFRESH = """
local result = {}
for i, key in ipairs(KEYS) do
  local current = redis.call('GET', key)
  if current == false or current == ARGV[2 * i] then
    redis.call('SET', key, ARGV[2 * i + 1], 'PX', ARGV[1])
    result[i] = 1
  else
    result[i] = current
  end
end
return result
"""

# Delete a record only while it is still ours: a host that moved on belongs to its new node.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class ClusterUnavailableError(Exception):
    """Redis cannot be reached now, so the node serving a host cannot be found."""


@dataclass(slots=True)
class _Claim:
    """A host this node serves, as recorded in Redis."""

    instance: bytes | None
    """The host process's instance, from its hello."""

    written: str | None = None
    """The record as this node last stored it (None: not stored yet): what a refresh or a
    release expects to find."""


def _key(host_id: str) -> str:
    return KEY_PREFIX + host_id


class Cluster:
    """This node's part in the cluster: its ownership records, the Redis link, the entry logic.

    `run()` keeps the Redis link (reconnecting with backoff), listens for ownership changes and
    refreshes this node's records. `route(peer)` decides, once a connection said hello, whether
    the host is served here or the teammate must be forwarded.
    """

    def __init__(
        self,
        settings: ClusterSettings,
        *,
        relay: RelaySettings,
        switch: Switch,
        relay_metrics: RelayMetrics,
    ) -> None:
        self.settings = settings
        self._relay = relay
        self._switch = switch
        self._relay_metrics = relay_metrics
        self.metrics = ClusterMetrics(relay_metrics.registry)
        self.node_url = settings.node_url
        self.run_id = secrets.token_hex(16)
        """Distinguishes this process from an earlier run of the node at the same URL: in its
        records, and in the node-to-node signatures made for it."""
        self.member = False
        """Whether Redis is reachable and this node's records are current."""
        # Bounded by the hosts this node serves (max_hosts): one record per local host.
        self._owned: dict[str, _Claim] = {}
        # Announcements acted on, by nonce, while they could pass the time check: a replay of one
        # is refused. Bounded like the node signatures (SeenSignatures).
        self._announcements = SeenSignatures()
        self._warnings = ThrottledWarnings(logger)
        self._redis = Redis.from_url(
            settings.redis_url,
            socket_timeout=settings.redis_timeout,
            socket_connect_timeout=settings.redis_timeout,
            # One attempt per command: this node's own backoff decides when to try again, and a
            # teammate waiting on a lookup gets 4010 at once rather than after retries.
            retry=Retry(NoBackoff(), 0),
        )
        self._refresh_script = self._redis.register_script(_REFRESH)
        self._release_script = self._redis.register_script(_RELEASE)
        self.links = EntryLinks(
            secret=settings.secret,
            relay_limits=advertised(relay.limits),
            max_message_size=relay.limits.max_message_size,
            open_timeout=settings.forward_timeout,
            send_timeout=relay.send_timeout,
            ping_interval=relay.ping_interval,
            ping_timeout=relay.ping_timeout,
            count_down=self.metrics.hop_messages.labels(direction="down").inc,
            count_up=self.metrics.hop_messages.labels(direction="up").inc,
        )
        """The node links this node carries its forwarded teammates over, one per other node."""

    # -- the Redis link -----------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Stay in the cluster until cancelled: reconnect to Redis with backoff while it is away.

        Reports started at once: the node serves its own hosts and teammates with or without
        Redis.
        """
        async with anyio.create_task_group() as tg:
            await tg.start(self.links.run)
            task_status.started()
            await self._stay()

    async def _stay(self) -> None:
        backoff = Backoff(maximum=_RECONNECT_MAX)
        away_logged = False
        try:
            while True:
                try:
                    await self._session(backoff)
                except Exception as exc:
                    # Whatever went wrong with Redis (or with what it answered), this node's own
                    # hosts and teammates must keep being served: leave the cluster and retry.
                    self._set_member(False)
                    self.metrics.redis_errors.inc()
                    if not isinstance(exc, RedisError | OSError):
                        logger.exception("cluster session failed")
                    if not away_logged:
                        logger.warning(
                            "Redis at %s is unreachable (%s): serving this node's hosts and"
                            " teammates only, cross-node attaches get %d; retrying",
                            self.settings.redis_address,
                            type(exc).__name__,
                            CloseCode.CLUSTER_UNAVAILABLE,
                        )
                        away_logged = True
                    refused = isinstance(exc, RedisConnectionError)
                    await anyio.sleep(backoff.next_delay(refused=refused))
                    continue
                away_logged = False
        finally:
            self._set_member(False)
            with anyio.move_on_after(1.0, shield=True):
                await self._redis.aclose()

    async def _session(self, backoff: Backoff) -> None:
        """One Redis session: subscribe, re-assert our records, then listen and refresh."""
        pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        try:
            with anyio.fail_after(self.settings.redis_timeout):
                await pubsub.subscribe(OWNERS_CHANNEL)
            # Subscribed first, so no takeover announced from here on is missed.
            await self._refresh()
            self._set_member(True)
            backoff.reset()
            logger.info(
                "in the cluster through Redis at %s, as run %s",
                self.settings.redis_address,
                self.run_id,
            )
            interval = self.settings.refresh_interval
            next_refresh = anyio.current_time() + interval
            while True:
                wait = max(0.0, next_refresh - anyio.current_time())
                message = await pubsub.get_message(timeout=wait)
                if message is not None and message.get("type") == "message":
                    self._on_announcement(message.get("channel"), message.get("data"))
                if anyio.current_time() >= next_refresh:
                    await self._refresh()
                    next_refresh = anyio.current_time() + interval
        finally:
            with anyio.move_on_after(1.0, shield=True):
                # redis-py annotates PubSub.aclose from 8.2 on; earlier releases leave it bare.
                await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]

    def _set_member(self, member: bool) -> None:
        self.member = member
        self.metrics.member.set(1 if member else 0)

    async def _refresh(self) -> None:
        """Extend every record of ours; drop a local host whose record another node took.

        Each record is signed afresh (its expiry moves on). Where Redis holds something else
        than what this node stored last, that is judged here: a record that verifies, of another
        node, means the host moved on; anything else (a forgery, an expired record, one of this
        node's earlier run) is overwritten.
        """
        owned = list(self._owned.items())
        for start in range(0, len(owned), REFRESH_BATCH):
            batch = owned[start : start + REFRESH_BATCH]
            found = await self._store([(host_id, claim, claim.written) for host_id, claim in batch])
            again: list[tuple[str, _Claim, bytes | str | None]] = []
            for (host_id, claim), current in zip(batch, found, strict=True):
                if current is None or self._owned.get(host_id) is not claim:
                    continue  # stored; or the host left or came again meanwhile
                owner = self._verified(host_id, current)
                if owner is None or self._is_us(owner):
                    again.append((host_id, claim, current))
                    continue
                del self._owned[host_id]
                peer = self._switch.hosts.get(host_id)
                if peer is not None:
                    logger.info("%s is served by another node now", peer.describe())
                    self._drop(peer)
            if again:
                # Replace what was judged not to be another node's; what changed once more in
                # between is judged at the next refresh.
                await self._store(again)
        self.metrics.owned_hosts.set(len(self._owned))

    async def _store(
        self, claims: list[tuple[str, _Claim, bytes | str | None]]
    ) -> list[bytes | None]:
        """Store a freshly signed record for each (host id, claim, value expected in Redis);
        return, per claim, None where it was stored, else the value Redis holds instead."""
        ttl = self.settings.ownership_ttl
        expires = int(time.time() + ttl)
        args: list[bytes | str] = [str(int(ttl * 1000))]
        records = []
        for host_id, claim, expected in claims:
            record = self._seal_record(host_id, claim, expires)
            records.append(record)
            args += [expected or "", record]
        with anyio.fail_after(self.settings.redis_timeout):
            results = await self._refresh_script(
                keys=[_key(host_id) for host_id, _, _ in claims], args=args
            )
        found: list[bytes | None] = []
        for (host_id, claim, _), record, result in zip(claims, records, results, strict=True):
            if isinstance(result, bytes):
                found.append(result)
                continue
            if self._owned.get(host_id) is claim:
                claim.written = record
            found.append(None)
        return found

    def _seal_record(self, host_id: str, claim: _Claim, expires: int) -> str:
        owner = Owner(node_url=self.node_url, run=self.run_id, instance=claim.instance)
        return seal_record(self.settings.secret, _key(host_id), owner, expires=expires)

    def _verified(self, host_id: str, raw: bytes | str) -> Owner | None:
        """The record read for `host_id`, if a node of this cluster wrote it for that host and it
        is still valid; else None, counted and logged (throttled) as a refusal."""
        try:
            return open_record(
                self.settings.secret,
                _key(host_id),
                raw,
                now=time.time(),
                max_skew=self.settings.max_clock_skew,
            )
        except UnverifiedError as exc:
            self._relay_metrics.frames_rejected.labels(reason="cluster_record").inc()
            self._warnings.warning(
                "refused an ownership record in Redis (%s): not written by a node of this"
                " cluster for this host, or out of date. Can someone else write to Redis?",
                exc,
            )
            return None

    def _on_announcement(self, channel: object, data: object) -> None:
        """Another node took a host over: drop our link to it, if we still have one."""
        if isinstance(channel, bytes):
            channel = channel.decode(errors="replace")
        if not isinstance(data, bytes | str) or channel != OWNERS_CHANNEL:
            return
        now = time.time()
        skew = self.settings.max_clock_skew
        try:
            announcement = open_announcement(
                self.settings.secret, OWNERS_CHANNEL, data, now=now, max_skew=skew
            )
        except UnverifiedError as exc:
            self._relay_metrics.frames_rejected.labels(reason="cluster_announcement").inc()
            self._warnings.warning(
                "refused an ownership announcement (%s): not sent by a node of this cluster,"
                " or out of date. Can someone else publish on Redis?",
                exc,
            )
            return
        if announcement.node_url == self.node_url:
            # Ours, or our earlier run's (a replay: that process is gone).
            return
        seen = self._announcements.remember(
            announcement.nonce, until=announcement.issued + skew, now=now
        )
        if seen is not Seen.NEW:
            self._relay_metrics.frames_rejected.labels(reason="cluster_announcement").inc()
            self._warnings.warning("refused an ownership announcement: %s", seen.value)
            return
        host_id = announcement.host_id
        if self._owned.pop(host_id, None) is not None:
            self.metrics.owned_hosts.set(len(self._owned))
        peer = self._switch.hosts.get(host_id)
        if peer is None:
            return
        logger.info("%s moved to node %s", peer.describe(), announcement.node_url)
        self._drop(peer)

    def _drop(self, peer: Peer) -> None:
        """Close a host link another node now serves; its teammates get 4005 from the switch
        once the link is gone, and find the host on its new node when they retry.

        With a code every end retries, whatever the other node said: what a Redis announcement
        or record says makes nobody stop for good. Where the host really was taken over (by
        another process with `--replace`), or really revoked its links, the node that now holds
        it says so with the final code when they come back (4009, or the token's refusal), as
        one relay would.
        """
        peer.link.close_soon(CloseCode.GOING_AWAY, "another relay node serves this host now")

    # -- ownership ----------------------------------------------------------------------------

    async def owner_of(self, host_id: str) -> Owner | None:
        """The node that serves `host_id`, None if none does; ClusterUnavailableError if Redis
        cannot say."""
        if not self.member:
            raise ClusterUnavailableError
        try:
            with anyio.fail_after(self.settings.redis_timeout):
                raw = await self._redis.get(_key(host_id))
        except (RedisError, OSError, TimeoutError):
            self.metrics.redis_errors.inc()
            raise ClusterUnavailableError from None
        # A record that does not verify names no node: as if the host were offline, until its
        # owner's next refresh writes its record again.
        return None if raw is None else self._verified(host_id, raw)

    def _is_us(self, owner: Owner) -> bool:
        # A record with our URL but another run was written before this node restarted: the
        # connections it stood for are gone.
        return owner.node_url == self.node_url

    async def _check_takeover(self, hello: HostHello) -> None:
        """Raise HelloError (4009) for a host process while another one is online with the same
        key on another node, as one relay does; let the same process (a reconnect) and one that
        asked to `--replace` through.

        The record read is verified: only a record a node of this cluster wrote for this host,
        and still valid, can have a host refused."""
        if not self.member:
            return  # the local switch still applies its own rules
        try:
            owner = await self.owner_of(hello.host_id)
        except ClusterUnavailableError:
            return
        if owner is None or self._is_us(owner) or hello.replace:
            return
        if owner.instance is not None and owner.instance == hello.instance:
            return
        raise HelloError(
            CloseCode.HOST_ID_IN_USE,
            "another host is online with this key",
            metric="host_id_in_use",
        )

    async def _claim(self, hello: HostHello) -> None:
        """Record this node as the host's owner and announce it (both at once, in MULTI)."""
        claim = _Claim(instance=hello.instance)
        self._owned[hello.host_id] = claim
        self.metrics.owned_hosts.set(len(self._owned))
        if not self.member:
            return  # written when Redis is back (`_refresh` re-creates absent records)
        now = time.time()
        record = self._seal_record(hello.host_id, claim, int(now + self.settings.ownership_ttl))
        announcement = Announcement(
            host_id=hello.host_id,
            node_url=self.node_url,
            run=self.run_id,
            issued=int(now),
            nonce=secrets.token_urlsafe(16),
        )
        sealed = seal_announcement(self.settings.secret, OWNERS_CHANNEL, announcement)
        ttl_ms = int(self.settings.ownership_ttl * 1000)
        try:
            with anyio.fail_after(self.settings.redis_timeout):
                async with self._redis.pipeline(transaction=True) as pipe:
                    pipe.set(_key(hello.host_id), record, px=ttl_ms)
                    pipe.publish(OWNERS_CHANNEL, sealed)
                    await pipe.execute()
        except (RedisError, OSError, TimeoutError):
            # Kept in _owned: the next refresh after Redis is back writes it.
            self.metrics.redis_errors.inc()
            return
        if self._owned.get(hello.host_id) is claim:
            claim.written = record

    async def host_left(self, peer: Peer) -> None:
        """A host link closed: release its record unless the host is still served here."""
        if peer.kind is not Kind.HOST or peer.host_id is None:
            return
        if self._switch.hosts.get(peer.host_id) is not None:
            return  # replaced by a newer link on this node, which holds the record now
        claim = self._owned.pop(peer.host_id, None)
        self.metrics.owned_hosts.set(len(self._owned))
        if claim is None or claim.written is None or not self.member:
            return  # not ours any more, or it expires by itself
        try:
            with anyio.move_on_after(self.settings.redis_timeout, shield=True):
                await self._release_script(keys=[_key(peer.host_id)], args=[claim.written])
        except (RedisError, OSError):
            self.metrics.redis_errors.inc()

    # -- the entry: where a new connection is served ------------------------------------------

    async def route(self, peer: Peer) -> bool:
        """Read `peer`'s hello and decide where it is served.

        Returns False when this node serves it: the hello went to the switch, and the caller
        runs the link as usual. Returns True when the connection was dealt with here (forwarded
        to the owner node, or refused) and is closed: the caller is done with it.
        """
        link = peer.link
        websocket = link.websocket
        try:
            with anyio.fail_after(self._relay.hello_timeout):
                # The link's writer is not running yet: send our hello ourselves.
                for message in link.connection.data_to_send():
                    await websocket.send(message)
                first = await websocket.recv()
        except TimeoutError:
            self._relay_metrics.frames_rejected.labels(reason="hello_timeout").inc()
            logger.info("closed %s: %d no hello in time", peer.describe(), CloseCode.PROTOCOL_ERROR)
            await close_websocket(websocket, CloseCode.PROTOCOL_ERROR, "hello timeout")
            return True
        except ConnectionClosed:
            return True
        try:
            if not isinstance(first, bytes):
                raise RemoteProtocolError("text message on a binary protocol")
            link.connection.receive_data(first)
        except RemoteProtocolError as exc:
            self._relay_metrics.frames_rejected.labels(reason=f"protocol_{int(exc.code)}").inc()
            logger.warning("closed %s: %d protocol error: %s", peer.describe(), exc.code, exc)
            await close_websocket(websocket, exc.code, str(exc))
            return True
        events = link.connection.events_received()
        payload = next((e.payload for e in events if isinstance(e, HelloReceived)), None)
        if payload is None:
            self._dispatch(peer, events)
            return False
        if peer.kind is Kind.HOST:
            return await self._route_host(peer, payload, events)
        return await self._route_teammate(peer, payload, events, first)

    def _dispatch(self, peer: Peer, events: Iterable[Event]) -> None:
        for event in events:
            self._switch.on_event(peer, event)
        peer.link.flush()

    async def _route_host(
        self, peer: Peer, payload: Mapping[str, object], events: list[Event]
    ) -> bool:
        try:
            # Checked again by the switch, with the authorized keys: here only to learn who it
            # is, from a hello that proves it.
            hello = parse_host_hello(
                payload,
                challenge=peer.challenge,
                public_url=self._switch.public_url,
                authorized_keys=None,
            )
        except HelloError:
            self._dispatch(peer, events)  # the switch refuses it, logs and counts it
            return False
        peer.host_id = hello.host_id
        try:
            await self._check_takeover(hello)
        except HelloError as refusal:
            self._relay_metrics.frames_rejected.labels(reason=refusal.metric).inc()
            logger.info(
                "refused %s: %d %s (on another node)", peer.describe(), refusal.code, refusal
            )
            await close_websocket(peer.link.websocket, refusal.code, str(refusal))
            return True
        self._dispatch(peer, events)
        if peer.admitted and self._switch.hosts.get(hello.host_id) is peer:
            # Before the link runs, so the host's admission is confirmed only once every node
            # can find it (or Redis is known to be away).
            await self._claim(hello)
        return False

    async def _route_teammate(
        self, peer: Peer, payload: Mapping[str, object], events: list[Event], first: bytes
    ) -> bool:
        try:
            hello = parse_teammate_hello(payload)
        except HelloError:
            self._dispatch(peer, events)
            return False
        peer.host_id = hello.host_id
        local = self._switch.hosts.get(hello.host_id)
        if local is not None and not local.link.closing:
            self._dispatch(peer, events)
            return False
        try:
            owner = await self.owner_of(hello.host_id)
        except ClusterUnavailableError:
            self._relay_metrics.frames_rejected.labels(reason="cluster_unavailable").inc()
            logger.info(
                "refused %s: %d cluster unavailable", peer.describe(), CloseCode.CLUSTER_UNAVAILABLE
            )
            await close_websocket(
                peer.link.websocket, CloseCode.CLUSTER_UNAVAILABLE, "cluster unavailable, retry"
            )
            return True
        if owner is None or self._is_us(owner):
            self._dispatch(peer, events)  # the switch answers 4005: the host is offline
            return False
        logger.info("%s forwarded to node %s", peer.describe(), owner.node_url)
        self.metrics.forwarded_connections.inc()
        try:
            result = await self.links.carry(
                peer.link.websocket,
                first,
                owner_url=owner.node_url,
                owner_run=owner.run,
                client=peer.ip,
            )
        finally:
            self.metrics.forwarded_connections.dec()
        if not result.reached:
            self._relay_metrics.frames_rejected.labels(reason="forward_failed").inc()
        logger.debug("%s forwarded connection ended: %d", peer.describe(), result.code)
        return True
