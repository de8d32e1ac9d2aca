"""A relay that flips one byte of a `d` cannot get it past the receiver: close 4003."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import (
    RelayProcess,
    attach_and_echo,
    attach_proxy,
    echo_roundtrip,
    eventually,
    host_settings,
    running_host,
    via,
)
from tunnel.host import HostChannel
from tunnel.proto import Data, decode_frame, encode_frame
from tunnel.teammate.client import DecryptionFailedError, connect_teammate

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def flip_first_data() -> Callable[[bytes], bytes]:
    """A rewrite that flips one bit in the middle of the first `d` it sees."""
    flipped = False

    def rewrite(message: bytes) -> bytes:
        nonlocal flipped
        frame = decode_frame(message)
        if flipped or not isinstance(frame, Data):
            return message
        flipped = True
        data = bytearray(frame.data)
        data[len(data) // 2] ^= 0x01
        return encode_frame(Data(channel=frame.channel, data=bytes(data)))

    return rewrite


async def test_a_flipped_byte_going_to_the_host_closes_the_channel_with_4003(
    relay: RelayProcess, tmp_path: Path
) -> None:
    outcomes: list[str] = []

    async def guarded_echo(channel: HostChannel) -> None:
        try:
            while True:
                await channel.send(await channel.receive())
        except Exception as exc:
            if channel.name != "probe":  # running_host's readiness probe
                outcomes.append(type(exc).__name__)
            raise

    async with running_host(host_settings(relay.url, tmp_path), guarded_echo) as host:
        async with attach_proxy(relay.url, up=flip_first_data()) as proxy:
            with pytest.raises(DecryptionFailedError) as caught:
                await attach_and_echo(via(host.drive_link, proxy), b"transfer 10 EUR")
            assert caught.value.code == 4003
        # The host detected it (not just the teammate) and nothing else was affected.
        assert outcomes == ["DecryptionError"]
        async with connect_teammate(host.drive_link) as session:
            assert await echo_roundtrip(session, b"clean") == b"clean"


async def test_a_flipped_byte_going_to_the_teammate_fails_decryption_there(
    relay: RelayProcess, tmp_path: Path
) -> None:
    closes: list[int] = []

    async def watching_echo(channel: HostChannel) -> None:
        try:
            while True:
                await channel.send(await channel.receive())
        finally:
            assert channel.closed is not None
            if channel.name != "probe":  # running_host's readiness probe
                closes.append(channel.closed.code)

    async with running_host(host_settings(relay.url, tmp_path), watching_echo) as host:
        async with attach_proxy(relay.url, down=flip_first_data()) as proxy:
            with pytest.raises(DecryptionFailedError) as caught:
                await attach_and_echo(via(host.view_link, proxy), b"what the agent said")
            assert caught.value.code == 4003
        # The teammate told the host why it closed the channel.
        assert await eventually(lambda: bool(closes))
        assert closes == [4003]
