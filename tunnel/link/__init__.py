"""The anyio + websockets layer over the sans-I/O link protocol, shared by host, client and relay.

`Link` drives a `proto.Connection` over one WebSocket; `ChannelMux` gives the endpoints one
`LinkChannel` per channel with flow-controlled `send` and acknowledging `receive`; `dial` is how
a host or a teammate reaches the relay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tunnel.link.core import Link, clip_reason
    from tunnel.link.dial import DialSettings, RelayUnreachableError, dial
    from tunnel.link.errors import ChannelClosedError, LinkClosedError
    from tunnel.link.mux import Casted, ChannelMux, LinkChannel
    from tunnel.link.urls import http_base_url, websocket_url
else:
    from tunnel.process.lazy import lazy_exports

    # Loaded on first use: the relay URL's normal form (`tunnel.link.urls`), which share links
    # need, must not pull in the dial and with it the hellos, which use share links' roles.
    __getattr__ = lazy_exports(
        __name__,
        {
            "Casted": "tunnel.link.mux",
            "ChannelClosedError": "tunnel.link.errors",
            "ChannelMux": "tunnel.link.mux",
            "DialSettings": "tunnel.link.dial",
            "Link": "tunnel.link.core",
            "LinkChannel": "tunnel.link.mux",
            "LinkClosedError": "tunnel.link.errors",
            "RelayUnreachableError": "tunnel.link.dial",
            "clip_reason": "tunnel.link.core",
            "dial": "tunnel.link.dial",
            "http_base_url": "tunnel.link.urls",
            "websocket_url": "tunnel.link.urls",
        },
    )

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
