"""`tunnel relay --window` (and TUNNEL_RELAY_WINDOW): the channel window hosts and teammates
adopt from the relay's hello, and the values it refuses."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.relay.held_reader import BURST, WINDOW, HeldReader
from tests.support import ROOT, RelayProcess, host_settings, running_host
from tunnel.process.exit_codes import EXIT_CONFIG
from tunnel.proto import DEFAULT_LIMITS
from tunnel.relay.limits import DEFAULT_WINDOW, MAX_WINDOW_OPTION
from tunnel.teammate.client import connect_teammate


def relay_refuses(*args: str, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "tunnel.cli", "relay", "--port", "0", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == EXIT_CONFIG
    return result.stderr.strip()


@pytest.mark.parametrize(
    "window", [DEFAULT_LIMITS.initial_window - 1, MAX_WINDOW_OPTION + 1, 0, -5]
)
def test_a_window_below_the_default_or_over_the_ceiling_is_refused(window: int) -> None:
    expected = (
        f"tunnel relay: --window must be {DEFAULT_LIMITS.initial_window} to"
        f" {MAX_WINDOW_OPTION} bytes"
    )
    assert relay_refuses("--window", str(window)) == expected
    assert relay_refuses(TUNNEL_RELAY_WINDOW=str(window)) == expected


def test_the_options_default_is_the_protocols() -> None:
    assert DEFAULT_LIMITS.initial_window == DEFAULT_WINDOW


@pytest.fixture
def wide_relay(tmp_path: Path) -> Iterator[RelayProcess]:
    process = RelayProcess(tmp_path, "--window", str(WINDOW)).start()
    try:
        yield process
    finally:
        process.stop()


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_both_ends_adopt_the_relays_window(wide_relay: RelayProcess, tmp_path: Path) -> None:
    # The host reads one message, then nothing until the teammate has sent BURST: with the
    # default window the teammate's sends would wait for grants that never come; with the
    # relay's they all go.
    reader = HeldReader()
    async with (
        running_host(host_settings(wide_relay.url, tmp_path), reader.handler) as host,
        connect_teammate(host.view_link) as session,
    ):
        assert session.max_message_size == DEFAULT_LIMITS.largest_data - 16  # the AEAD tag
        await reader.send_burst(session)
    assert sum(reader.received) >= BURST
