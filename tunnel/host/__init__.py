"""The host side: dial out to the relay, register, and serve teammate channels end to end.

`run_host(settings, handler)` is the programmatic API; `tunnel host` wraps it.
"""

from __future__ import annotations

from tunnel.host.channel import ChannelRefusedError, HostChannel, MessageTooLargeError
from tunnel.host.echo import echo_handler
from tunnel.host.runner import (
    ChannelHandler,
    Host,
    HostRefusedError,
    JoinHook,
    RelayHelloError,
    run_host,
)
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
    "RelayHelloError",
    "echo_handler",
    "run_host",
]
