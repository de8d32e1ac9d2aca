"""The anyio + websockets layer over the sans-I/O link protocol, shared by host, client and relay.

`Link` drives a `proto.Connection` over one WebSocket; `ChannelMux` gives the endpoints one
`LinkChannel` per channel with flow-controlled `send` and acknowledging `receive`; `dial` is how
a host or a teammate reaches the relay.
"""

from __future__ import annotations

from tunnel.link.core import Link, clip_reason
from tunnel.link.dial import DialSettings, RelayUnreachableError, dial
from tunnel.link.errors import ChannelClosedError, LinkClosedError
from tunnel.link.mux import Casted, ChannelMux, LinkChannel
from tunnel.link.urls import http_base_url, websocket_url

__all__ = [
    "Casted",
    "ChannelClosedError",
    "ChannelMux",
    "DialSettings",
    "Link",
    "LinkChannel",
    "LinkClosedError",
    "RelayUnreachableError",
    "clip_reason",
    "dial",
    "http_base_url",
    "websocket_url",
]
