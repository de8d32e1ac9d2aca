"""The host side: dial out to the relay, register, and serve teammate channels end to end.

`Host(settings, handler).run()` is the programmatic API of the link; `run_share` (tunnel.host.share)
adds the agent session, the log and the console, and is what `tunnel host` runs.
"""

from __future__ import annotations

from tunnel.e2e.channel import MessageTooLargeError
from tunnel.host.channel import ChannelRefusedError, HostChannel
from tunnel.host.echo import echo_handler
from tunnel.host.runner import ChannelHandler, Host, HostRefusedError, JoinHook
from tunnel.host.settings import HostSettings
from tunnel.process.backoff import Backoff

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
