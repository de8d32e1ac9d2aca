"""The host side: dial out to the relay, register, and serve teammate channels end to end.

`Host(settings, handler).run()` is the programmatic API of the link; `run_share` (tunnel.host.share)
adds the agent session, the log and the console, and is what `tunnel host` runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tunnel.e2e.channel import MessageTooLargeError
    from tunnel.host.channel import ChannelRefusedError, HostChannel
    from tunnel.host.echo import echo_handler
    from tunnel.host.runner import ChannelHandler, Host, HostRefusedError, JoinHook
    from tunnel.host.settings import HostSettings
    from tunnel.process.backoff import Backoff
else:
    from tunnel.process.lazy import lazy_exports

    # Loaded on first use: `tunnel host --help` (tunnel/host/command.py) needs none of it.
    __getattr__ = lazy_exports(
        __name__,
        {
            "Backoff": "tunnel.process.backoff",
            "ChannelHandler": "tunnel.host.runner",
            "ChannelRefusedError": "tunnel.host.channel",
            "Host": "tunnel.host.runner",
            "HostChannel": "tunnel.host.channel",
            "HostRefusedError": "tunnel.host.runner",
            "HostSettings": "tunnel.host.settings",
            "JoinHook": "tunnel.host.runner",
            "MessageTooLargeError": "tunnel.e2e.channel",
            "echo_handler": "tunnel.host.echo",
        },
    )

__all__ = [
    "Backoff",
    "ChannelHandler",
    "ChannelRefusedError",
    "Host",
    "HostChannel",
    "HostRefusedError",
    "HostSettings",
    "JoinHook",
    "MessageTooLargeError",
    "echo_handler",
]
