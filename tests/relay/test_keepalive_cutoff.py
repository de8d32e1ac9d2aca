"""A peer that stops reading its socket is cut off by the relay's keepalive (docs/relay.md)."""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import pytest

from tests.link.socket_pair import FRAMINGS
from tests.support import attach_and_echo, host_settings, raw_peer, raw_teammate, running_host
from tunnel.relay.server import run as run_relay
from tunnel.relay.settings import RelaySettings

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.mark.parametrize("framing", FRAMINGS)
async def test_a_teammate_that_stops_reading_is_cut_off_by_the_keepalive_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, framing: str
) -> None:
    caplog.set_level(logging.INFO, logger="relay.server")
    # Short keepalive, so the test waits a second rather than the default 40 s.
    settings = RelaySettings(
        host="127.0.0.1", port=0, ping_interval=0.5, ping_timeout=0.5, framing=framing
    )
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            port = await tg.start(run_relay, settings)
            url = f"http://127.0.0.1:{port}"
            async with running_host(host_settings(url, tmp_path)) as host, raw_peer(url) as stalled:
                await raw_teammate(stalled, host.view_link, name="stalled")
                # It stops reading its socket: it sees no ping, so it answers none.
                stalled.websocket.transport.pause_reading()
                while not any(
                    "1011 no answer to the keepalive ping" in r.getMessage() for r in caplog.records
                ):
                    await anyio.sleep(0.05)
                # Nobody else noticed: the host serves on, a new teammate gets through.
                assert host.connected
                assert await attach_and_echo(host.view_link, b"after") == b"after"
            tg.cancel_scope.cancel()
    cut = [r for r in caplog.records if "keepalive" in r.getMessage()]
    assert len(cut) == 1, [r.getMessage() for r in cut]
