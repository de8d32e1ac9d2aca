"""A channel handler that sends every message back: for tests and for checking a relay setup."""

from __future__ import annotations

from tunnel.host.channel import HostChannel
from tunnel.link import ChannelClosedError


async def echo_handler(channel: HostChannel) -> None:
    """Echo each decrypted message back, encrypted, until the channel closes."""
    while True:
        try:
            message = await channel.receive()
            await channel.send(message)
        except ChannelClosedError:
            return
