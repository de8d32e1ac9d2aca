"""The anyio + websockets layer over the sans-I/O link protocol, shared by host, client and relay.

`Link` drives a `proto.Connection` over one WebSocket; `ChannelMux` gives the endpoints one
`LinkChannel` per channel with flow-controlled `send` and acknowledging `receive`.
"""

from __future__ import annotations

from tunnel.link.core import Link, clip_reason
from tunnel.link.errors import ABNORMAL_CLOSURE, ChannelClosedError, LinkClosedError, code_name
from tunnel.link.mux import ChannelMux, LinkChannel
from tunnel.link.urls import http_base_url, websocket_url

__all__ = [
    "ABNORMAL_CLOSURE",
    "ChannelClosedError",
    "ChannelMux",
    "Link",
    "LinkChannel",
    "LinkClosedError",
    "clip_reason",
    "code_name",
    "http_base_url",
    "websocket_url",
]
