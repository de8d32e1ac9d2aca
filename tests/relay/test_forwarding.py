"""What the relay counts while it forwards: every frame and byte, by direction."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import anyio
import pytest

from tests.support import RelayProcess, echo_roundtrip, host_settings, running_host
from tunnel.e2e.crypto import TAG_SIZE
from tunnel.teammate.client import connect_teammate

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

COUNTER = re.compile(r'^(relay_forwarded_(?:frames|bytes))_total\{direction="(up|down)"\} (\S+)$')


def forwarded(relay: RelayProcess) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(relay.url + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    found = {}
    for line in text.splitlines():
        match = COUNTER.match(line)
        if match:
            found[match.group(1), match.group(2)] = float(match.group(3))
    return found


async def test_every_forwarded_data_frame_and_its_bytes_are_counted_by_direction(
    relay: RelayProcess, tmp_path: Path
) -> None:
    count, size = 300, 3000
    with anyio.fail_after(40):
        async with (
            running_host(host_settings(relay.url, tmp_path)) as host,
            connect_teammate(host.drive_link, name="counted") as session,
        ):
            assert await echo_roundtrip(session, b"warm") == b"warm"
            before = forwarded(relay)
            for n in range(count):
                assert (
                    await echo_roundtrip(session, bytes([n % 256]) * size)
                    == bytes([n % 256]) * size
                )
            after = forwarded(relay)
    change = {key: after[key] - before.get(key, 0.0) for key in after}
    ciphertext = size + TAG_SIZE
    assert change == {
        ("relay_forwarded_frames", "up"): count,
        ("relay_forwarded_frames", "down"): count,
        ("relay_forwarded_bytes", "up"): count * ciphertext,
        ("relay_forwarded_bytes", "down"): count * ciphertext,
    }
