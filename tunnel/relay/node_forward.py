"""How one relay node trusts another: the signature of a node-to-node connection.

A teammate that reaches a node without its host is carried to its host's node over a node link
(tunnel/relay/node_entry.py), which the entry node opens with headers signed with the cluster
secret (docs/cluster.md, "Node to node"): for the target node's URL and run, once. The owner
node lets the link through only with such a signature (`verified_client`).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import ipaddress
import logging
import secrets
import time
from dataclasses import dataclass

from websockets.asyncio.connection import Connection as WebSocket
from websockets.datastructures import Headers, MultipleValuesError
from websockets.exceptions import ConnectionClosed

from tunnel.link.core import clip_reason
from tunnel.proto.codes import CloseCode
from tunnel.relay.cluster_auth import Seen, SeenSignatures, ThrottledWarnings

__all__ = [
    "CLIENT_HEADER",
    "ForwardResult",
    "SeenSignatures",
    "close_of",
    "close_websocket",
    "sign_headers",
    "verified_client",
]

logger = logging.getLogger("relay.cluster")

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


def close_of(websocket: WebSocket) -> tuple[int, str]:
    """The close code and reason `websocket` ended with, as the other side should see them."""
    received = websocket.protocol.close_rcvd
    sent = websocket.protocol.close_sent
    frame = received if received is not None else sent
    if frame is None or (frame.code not in _SENDABLE and not 3000 <= frame.code <= 4999):
        return CloseCode.ABNORMAL_CLOSURE, ""
    return frame.code, frame.reason


async def close_websocket(websocket: WebSocket, code: int, reason: str) -> None:
    """Close `websocket` with `code` (the closing handshake is bounded by its close_timeout)."""
    with contextlib.suppress(ConnectionClosed):
        await websocket.close(code, clip_reason(reason))
