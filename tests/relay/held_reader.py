"""A host that holds back its reads, for the tests of `tunnel relay --window`: what a teammate
can send it meanwhile is what the channel's window lets through."""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from tunnel.host import HostChannel
from tunnel.proto import DEFAULT_LIMITS
from tunnel.teammate.client import TeammateSession

WINDOW = 4 * DEFAULT_LIMITS.initial_window
"""The wider window the tests give the relay."""

BURST = 3 * DEFAULT_LIMITS.initial_window
"""More than the default window lets a teammate send unread, less than WINDOW."""


@dataclass
class HeldReader:
    """A host channel handler (`handler`) that reads one message, then nothing until the
    teammate has sent BURST (`send_burst`); it answers running_host's online probe."""

    sent: anyio.Event = field(default_factory=anyio.Event)
    received: list[int] = field(default_factory=list)

    async def handler(self, channel: HostChannel) -> None:
        first = await channel.receive()
        if first == b"probe":
            await channel.send(first)
            return
        self.received.append(len(first))
        await self.sent.wait()
        while sum(self.received) < BURST:
            self.received.append(len(await channel.receive()))

    async def send_burst(self, session: TeammateSession, within: float = 30) -> None:
        """Send BURST from `session` while the host reads nothing (each send must find window,
        or this times out), then let the host read it all and wait until it has."""
        size = session.max_message_size
        with anyio.fail_after(within):
            for _ in range(BURST // size + 1):
                await session.send(bytes(size))
        self.sent.set()
        with anyio.fail_after(within):
            while sum(self.received) < BURST:
                await anyio.sleep(0.01)
