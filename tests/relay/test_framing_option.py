"""`tunnel relay --framing` (and TUNNEL_RELAY_FRAMING): which WebSocket library the relay serves
with, and the combinations it refuses."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import anyio
import pytest
from websockets.exceptions import ConnectionClosed

from tests.link.socket_pair import HAS_PICOWS
from tests.support import LISTENING, ROOT, RelayProcess, raw_peer, stop_process
from tunnel.process.exit_codes import EXIT_CONFIG
from tunnel.proto.codes import CloseCode
from tunnel.relay.settings import ClusterSettings, RelaySettings


def test_an_unknown_framing_is_refused() -> None:
    with pytest.raises(ValueError, match="framing must be one of websockets, picows"):
        RelaySettings(framing="aiohttp")


def test_a_cluster_node_keeps_websockets() -> None:
    cluster = ClusterSettings(
        redis_url="redis://127.0.0.1:6379/0", node_url="ws://10.0.0.1:8765", secret=b"s" * 32
    )
    RelaySettings(cluster=cluster)
    with pytest.raises(ValueError, match="cluster node serves with websockets"):
        RelaySettings(cluster=cluster, framing="picows")


@pytest.mark.skipif(not HAS_PICOWS, reason="picows is not installed")
@pytest.mark.timeout(60)
def test_the_variable_picks_picows_and_the_relay_serves_http_on_it() -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1", TUNNEL_RELAY_FRAMING="picows")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tunnel.cli", "relay", "--port", "0"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        match = LISTENING.search(proc.stdout.readline().decode())
        assert match is not None
        with urllib.request.urlopen(match.group(1) + "/healthz", timeout=10) as reply:
            assert reply.read() == b"ok\n"
    finally:
        stop_process(proc)
    assert proc.stderr is not None
    assert "serving WebSockets with picows" in proc.stderr.read().decode()


def test_picows_asked_for_but_not_installed_is_a_config_error(tmp_path: Path) -> None:
    # A package named picows that cannot be imported stands for an install without the extra.
    (tmp_path / "picows").mkdir()
    (tmp_path / "picows" / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    result = subprocess.run(
        [sys.executable, "-m", "tunnel.cli", "relay", "--port", "0", "--framing", "picows"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == EXIT_CONFIG
    assert result.stderr.strip() == (
        "tunnel relay: --framing picows needs the picows package: pip install 'agent-tunnel[fast]'"
    )


@pytest.mark.skipif(not HAS_PICOWS, reason="picows is not installed")
@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_on_picows_a_connection_beyond_the_per_ip_limit_is_closed_with_4006(
    tmp_path: Path,
) -> None:
    relay = RelayProcess(tmp_path, "--framing", "picows", "--max-connections-per-ip", "3").start()
    try:
        async with contextlib.AsyncExitStack() as stack:
            peers = [await stack.enter_async_context(raw_peer(relay.url)) for _ in range(3)]
            for peer in peers:
                assert (await peer.receive_frame())["k"] == "hello"
            # Counted once its WebSocket is open (websockets' server refuses it with 503 at
            # the TCP accept): it opens, and is closed at once.
            async with raw_peer(relay.url) as refused:
                with anyio.fail_after(10), pytest.raises(ConnectionClosed):
                    await refused.websocket.recv()
                assert refused.websocket.close_code == CloseCode.LIMIT_REACHED
            for peer in peers:
                assert peer.websocket.close_code is None
    finally:
        relay.stop()
