"""The host survives a relay restart and a frozen relay; links keep working afterwards."""

from __future__ import annotations

import logging
import signal
from pathlib import Path

import anyio
import pytest

from tests.support import (
    RelayProcess,
    echo_roundtrip,
    eventually,
    host_settings,
    running_host,
    wait_online,
)
from tunnel.process.backoff import BACKOFF_INITIAL, HOST_MAX_BACKOFF
from tunnel.teammate.client import TeammateError, connect_teammate

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


async def test_relay_killed_and_restarted_on_the_same_port(tmp_path: Path) -> None:
    relay = RelayProcess(tmp_path).start()
    try:
        async with running_host(host_settings(relay.url, tmp_path)) as host:
            view, drive = host.view_link, host.drive_link
            async with connect_teammate(drive, name="ann") as session:
                assert await echo_roundtrip(session, b"before") == b"before"
                relay.kill()
                with pytest.raises(TeammateError), anyio.fail_after(10):
                    await echo_roundtrip(session, b"during")

            relay = RelayProcess(tmp_path, port=relay.port).start()
            # Bounded: the host's backoff is capped at 1 s in these settings.
            with anyio.fail_after(20):
                await wait_online(view)
            assert host.connected
            assert (host.view_link, host.drive_link) == (view, drive)
            async with connect_teammate(view, name="ann") as a, connect_teammate(drive) as b:
                assert await echo_roundtrip(a, b"after view") == b"after view"
                assert await echo_roundtrip(b, b"after drive") == b"after drive"
    finally:
        relay.stop()


async def test_a_frozen_relay_is_noticed_by_keepalive_and_the_host_comes_back(
    tmp_path: Path,
) -> None:
    relay = RelayProcess(tmp_path).start()
    settings = host_settings(relay.url, tmp_path, ping_interval=0.5, ping_timeout=0.5)
    try:
        async with running_host(settings) as host:
            assert relay.proc is not None
            relay.proc.send_signal(signal.SIGSTOP)
            try:
                # Interval + timeout is 1 s; allow generous scheduling slack, bounded.
                assert await eventually(lambda: not host.connected, attempts=150)
            finally:
                relay.proc.send_signal(signal.SIGCONT)
            with anyio.fail_after(20):
                await wait_online(host.drive_link)
            async with connect_teammate(host.drive_link) as session:
                assert await echo_roundtrip(session, b"thawed") == b"thawed"
    finally:
        relay.stop()


async def test_after_a_long_relay_restart_the_host_is_back_at_once_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tunnel.host")

    def messages(start: str, level: int = logging.INFO) -> list[str]:
        return [
            record.getMessage()
            for record in caplog.records
            if record.name == "tunnel.host"
            and record.levelno >= level
            and record.getMessage().startswith(start)
        ]

    relay = RelayProcess(tmp_path).start()
    # The production backoff, not the tests' quick one.
    settings = host_settings(
        relay.url, tmp_path, backoff_initial=BACKOFF_INITIAL, backoff_max=HOST_MAX_BACKOFF
    )
    refused = "cannot register with the relay (ConnectionRefusedError"
    try:
        async with running_host(settings) as host:
            relay.kill()
            # Down for 8 refused attempts: with one cap for every failure the delays would have
            # grown past 15 s by now (and 8 attempts would take minutes), not stayed near 1 s.
            assert await eventually(lambda: len(messages(refused)) >= 8, attempts=600)
            relay = RelayProcess(tmp_path, port=relay.port).start()
            with anyio.fail_after(20):
                await wait_online(host.view_link)
            assert await eventually(lambda: bool(messages("online again", logging.WARNING)))
            assert messages("online again") == [f"online again: registered with {relay.url}"]
            # One line when the link was lost, one while refused (not one per attempt), one back.
            assert len(messages("link to the relay closed", logging.WARNING)) == 1
            assert len(messages(refused, logging.WARNING)) == 1
    finally:
        relay.stop()
