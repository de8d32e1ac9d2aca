"""The node-to-node hop of a relay cluster: a teammate's WebSocket carried to its host's node.

A teammate that reaches a node without its host is forwarded: the entry node opens a WebSocket to
the owner node's `/v1/node/attach`, signed with the cluster secret (docs/cluster.md, "Node to
node"), hands over the teammate's hello, and then copies every message both ways unchanged. The
owner node admits the teammate exactly as if it had connected there (verifiers, roles, revoke,
the client's own address for per-IP limits); the entry node reads nothing but the hello.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import ipaddress
import logging
import math
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.connection import Connection as WebSocket
from websockets.datastructures import Headers, MultipleValuesError
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from tunnel.link.core import clip_reason
from tunnel.link.framing import WebsocketsFraming
from tunnel.link.urls import websocket_url
from tunnel.proto import Hello, ProtocolError, decode_frame
from tunnel.proto.codes import CloseCode
from tunnel.relay.cluster_auth import Seen, SeenSignatures, ThrottledWarnings

__all__ = [
    "CLIENT_HEADER",
    "NODE_ATTACH_PATH",
    "ForwardResult",
    "SeenSignatures",
    "close_websocket",
    "forward",
    "sign_headers",
    "verified_client",
]

logger = logging.getLogger("relay.cluster")

NODE_ATTACH_PATH = "/v1/node/attach"
"""Where a cluster node forwards a teammate to its host's node; the route exists on cluster nodes
only, and only requests signed with the cluster secret get through (`verified_client`)."""

TIME_HEADER = "Tunnel-Node-Time"
NONCE_HEADER = "Tunnel-Node-Nonce"
CLIENT_HEADER = "Tunnel-Node-Client"
SIGNATURE_HEADER = "Tunnel-Node-Signature"

_LABEL = b"agent-tunnel/v1 node-attach"

_MAX_NONCE = 64
"""Longest nonce accepted, in characters (`sign_headers` makes 22)."""

# Close codes a WebSocket may carry on the wire; 1005, 1006 and 1015 are only ever reported.
_SENDABLE = frozenset({1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011})


def _mac(secret: bytes, *, timestamp: str, nonce: str, client: str, target: str, run: str) -> str:
    # The target node's URL is signed too, so a signature made for one node opens nothing on
    # another; so is its run, so a signature made for one process of that node opens nothing on
    # the next one, which has not seen it (docs/cluster.md, "Node to node"). The client address
    # is signed, so the owner can trust it for its per-IP limits; the nonce makes every signature
    # unique, so that the owner can refuse one it has seen before. None of the fields holds a
    # newline (the URL and the run are this cluster's own, the rest is checked on receipt).
    message = b"\n".join(
        (
            _LABEL,
            timestamp.encode(),
            nonce.encode(),
            client.encode(),
            target.encode(),
            run.encode(),
        )
    )
    digest = hmac.new(secret, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def sign_headers(
    secret: bytes, *, target: str, run: str, client: str, now: float | None = None
) -> dict[str, str]:
    """The headers of a forwarded connection to the node at `target` (its base URL), while that
    node runs as `run` (from its ownership record), on behalf of a teammate connected from
    `client` (an IP address). Each call signs a fresh nonce: the headers open one connection."""
    timestamp = str(int(time.time() if now is None else now))
    nonce = secrets.token_urlsafe(16)
    return {
        TIME_HEADER: timestamp,
        NONCE_HEADER: nonce,
        CLIENT_HEADER: client,
        SIGNATURE_HEADER: _mac(
            secret, timestamp=timestamp, nonce=nonce, client=client, target=target, run=run
        ),
    }


# One record per process is enough: a process is one node, and a signature names the node and
# run it was made for, so relays sharing a process (as in the tests) cannot take each other's
# entries. A restart empties it, and changes the run: what it held cannot pass any more.
_SEEN = SeenSignatures()

_WARNINGS = ThrottledWarnings(logger)


def verified_client(
    headers: Headers,
    secret: bytes,
    *,
    node_url: str,
    run: str,
    max_skew: float,
    now: float | None = None,
    seen: SeenSignatures | None = None,
) -> str | None:
    """The client address a forwarded connection speaks for, or None if its signature is
    missing, wrong, made for another node or another run of this one (`run`: this process's),
    too old (or too far in the future), or was accepted before (recorded in `seen`; None: this
    process's record).

    A signature that verifies is recorded in `seen` for as long as it could be accepted: it opens
    one connection."""
    try:
        timestamp = headers.get(TIME_HEADER)
        nonce = headers.get(NONCE_HEADER)
        client = headers.get(CLIENT_HEADER)
        signature = headers.get(SIGNATURE_HEADER)
    except MultipleValuesError:
        return None
    if timestamp is None or nonce is None or client is None or signature is None:
        return None
    if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 12:
        return None
    if not nonce or not nonce.isascii() or len(nonce) > _MAX_NONCE:
        return None
    current = time.time() if now is None else now
    if abs(current - int(timestamp)) > max_skew:
        return None
    expected = _mac(
        secret, timestamp=timestamp, nonce=nonce, client=client, target=node_url, run=run
    )
    # Constant time: the answer's timing must not tell how much of a guess was right.
    if not hmac.compare_digest(signature.encode(), expected.encode()):
        return None
    try:
        ipaddress.ip_address(client.split("%")[0])
    except ValueError:
        return None
    record = _SEEN if seen is None else seen
    # Past int(timestamp) + max_skew the time check above refuses the signature by itself.
    seen_before = record.remember(expected, until=int(timestamp) + max_skew, now=current)
    if seen_before is Seen.REPLAYED:
        _WARNINGS.warning("refused a replayed node-to-node signature")
        return None
    if seen_before is Seen.FULL:
        _WARNINGS.warning(
            "refused a node-to-node connection: %d signatures already seen within their"
            " validity window",
            len(record),
        )
        return None
    return client


@dataclass(frozen=True, slots=True, kw_only=True)
class ForwardResult:
    """How a forwarded connection ended, for the entry node's log line."""

    reached: bool
    """Whether the owner node answered (False: it could not be reached or refused the hop)."""

    code: int
    """The close code the teammate got."""


def _close_of(websocket: WebSocket) -> tuple[int, str]:
    """The close code and reason `websocket` ended with, as the other side should see them."""
    received = websocket.protocol.close_rcvd
    sent = websocket.protocol.close_sent
    frame = received if received is not None else sent
    if frame is None or (frame.code not in _SENDABLE and not 3000 <= frame.code <= 4999):
        return CloseCode.ABNORMAL_CLOSURE, ""
    return frame.code, frame.reason


PIPE_BATCH = 16
"""Messages a hop writes to the other socket at most in one write."""


def _queued(websocket: WebSocket) -> int:
    """Frames `websocket` has received and not yet handed out: what `recv()` returns without
    waiting. 0 when this version of websockets does not say (then each message is written alone,
    which is only slower)."""
    frames = getattr(getattr(websocket, "recv_messages", None), "frames", None)
    return len(frames) if frames is not None else 0


async def _pipe(
    source: WebSocket,
    sink: WebSocket,
    send_timeout: float | None,
    stalled: list[WebSocket],
    count: Callable[[int], object] | None = None,
) -> None:
    """Copy messages from `source` to `sink` until `source` closes.

    Reads the next message only once the last batch was written, so a sink that stops reading
    stops this pipe, websockets then stops reading `source`'s socket (its receive queue is
    bounded), and TCP pushes back on the sender: as on a single node, the link protocol's
    end-to-end windows bound what is in flight per channel. Messages already received go out
    together in one socket write (a write per message is what would bound the hop's throughput),
    and a lone message goes out at once, without waiting for company.
    """
    try:
        # One scope for the pipe's life, with a deadline only while a write may wait: a timer per
        # message would cost more than the rest of the hop.
        with anyio.CancelScope() as scope:
            while True:
                batch = [await source.recv()]
                while len(batch) < PIPE_BATCH and _queued(source):
                    batch.append(await source.recv())
                if count is not None:
                    count(len(batch))  # before the write: whoever gets them finds them counted
                # send_context() is the guard websockets' own send() runs in (state check,
                # errors become ConnectionClosed, drain on exit); inside it the frames of the
                # whole batch go out in one write.
                async with sink.send_context():
                    # A text message is not the link protocol (the owner closes with 4000), but
                    # it is passed on as it came: the hop judges nothing.
                    WebsocketsFraming(sink).write_messages(batch)
                    if send_timeout is not None and sink.transport.get_write_buffer_size():
                        # The socket did not take it all: the drain on exit may wait for it.
                        scope.deadline = anyio.current_time() + send_timeout
                scope.deadline = math.inf
        if scope.cancelled_caught:
            stalled.append(sink)  # our deadline: an outer cancellation is not caught here
    except ConnectionClosed:
        pass


async def close_websocket(websocket: WebSocket, code: int, reason: str) -> None:
    """Close `websocket` with `code` (the closing handshake is bounded by its close_timeout)."""
    with contextlib.suppress(ConnectionClosed):
        await websocket.close(code, clip_reason(reason))


async def forward(
    teammate: WebSocket,
    hello: bytes,
    *,
    owner_url: str,
    owner_run: str,
    client: str,
    secret: bytes,
    relay_limits: Mapping[str, Any],
    max_message_size: int | None,
    open_timeout: float,
    send_timeout: float | None,
    ping_interval: float | None,
    ping_timeout: float | None,
    count_down: Callable[[int], object] | None = None,
    count_up: Callable[[int], object] | None = None,
) -> ForwardResult:
    """Carry `teammate` (which already got this node's hello and sent `hello`, its raw first
    message) to the owner node at `owner_url`, running as `owner_run`, until either side
    closes.

    The teammate sees the owner's close code and reason as they are. If the owner node cannot be
    reached, or its own link ends without a close (it died), the teammate gets 4005: its host
    will be back on some node, and a retry finds it there. `count_down` and `count_up` are told
    how many messages went each way with every write (the hop's messages metric).
    """
    url = websocket_url(owner_url, NODE_ATTACH_PATH)
    headers = sign_headers(secret, target=owner_url, run=owner_run, client=client)
    upstream: ClientConnection | None = None
    try:
        with anyio.fail_after(open_timeout):
            upstream = await connect(
                url,
                additional_headers=headers,
                compression=None,
                max_size=max_message_size,
                ping_interval=ping_interval,
                ping_timeout=ping_timeout,
                open_timeout=None,
                user_agent_header=None,
            )
            owner_hello = await upstream.recv()
    except (OSError, TimeoutError, InvalidHandshake, ConnectionClosed) as exc:
        if isinstance(exc, InvalidStatus) and exc.response.status_code == 403:
            logger.error(
                "node %s refused a forwarded connection: do the nodes share one cluster secret"
                " and agree on the time?",
                owner_url,
            )
        else:
            logger.info("cannot reach node %s: %s", owner_url, type(exc).__name__)
        if upstream is not None:
            upstream.transport.abort()
        await close_websocket(teammate, CloseCode.HOST_GONE, "host is offline")
        return ForwardResult(reached=False, code=CloseCode.HOST_GONE)
    try:
        if not _same_limits(owner_hello, relay_limits):
            # The teammate adopted our limits; the owner would enforce others.
            logger.error("node %s advertises other link limits than this node", owner_url)
            await close_websocket(
                teammate, CloseCode.INTERNAL_ERROR, "relay nodes disagree on limits"
            )
            return ForwardResult(reached=True, code=CloseCode.INTERNAL_ERROR)
        stalled: list[WebSocket] = []
        if count_up is not None:
            count_up(1)
        with contextlib.suppress(ConnectionClosed):
            await upstream.send(hello)
        async with anyio.create_task_group() as tg:

            async def run(
                source: WebSocket, sink: WebSocket, count: Callable[[int], object] | None
            ) -> None:
                await _pipe(source, sink, send_timeout, stalled, count)
                tg.cancel_scope.cancel()

            tg.start_soon(run, teammate, upstream, count_up)
            tg.start_soon(run, upstream, teammate, count_down)
        code, reason = _ending(teammate, upstream, stalled)
        with anyio.move_on_after(open_timeout, shield=True):
            await close_websocket(teammate, code, reason)
        return ForwardResult(reached=True, code=code)
    finally:
        with anyio.move_on_after(open_timeout, shield=True):
            teammate_code, teammate_reason = _close_of(teammate)
            if teammate_code == CloseCode.ABNORMAL_CLOSURE:
                teammate_code, teammate_reason = CloseCode.GOING_AWAY, "teammate left"
            await close_websocket(upstream, teammate_code, teammate_reason)
        upstream.transport.abort()


def _ending(teammate: WebSocket, upstream: WebSocket, stalled: list[WebSocket]) -> tuple[int, str]:
    """The close code the teammate should get once one side of the hop ended."""
    if teammate in stalled:
        return CloseCode.SLOW_CONSUMER, "stopped reading for too long"
    if upstream in stalled:
        return CloseCode.HOST_GONE, "host is not reading"
    code, reason = _close_of(upstream)
    if code == CloseCode.ABNORMAL_CLOSURE:
        # The owner node vanished without a close: its host will come back on another node.
        return CloseCode.HOST_GONE, "host went offline"
    return code, reason


def _same_limits(message: Any, relay_limits: Mapping[str, Any]) -> bool:
    if not isinstance(message, bytes):
        return False
    try:
        frame = decode_frame(message)
    except ProtocolError:
        return False
    if not isinstance(frame, Hello) or frame.payload.get("role") != "relay":
        return False
    return frame.payload.get("limits") == dict(relay_limits)
