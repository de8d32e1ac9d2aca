"""Peers that break the protocol are closed with the right code, logged once, and isolated."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import msgpack
import pytest

from tests.support import (
    RawPeer,
    RelayProcess,
    echo_roundtrip,
    eventually,
    host_settings,
    open_meta,
    raw_peer,
    raw_teammate,
    running_host,
)
from tunnel.e2e.crypto import ShareLink
from tunnel.e2e.identity import HostIdentity
from tunnel.handshake import PROTOCOL_VERSION
from tunnel.proto import DEFAULT_LIMITS
from tunnel.teammate.client import connect_teammate

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]
RELAY_FRAMINGS = True
"""Tests that take `relay` run on websockets and on picows (tests/relay/conftest.py)."""

Misbehaviour = Callable[[RawPeer, ShareLink], Awaitable[None]]


async def garbage_first(peer: RawPeer, link: ShareLink) -> None:
    await peer.receive_frame()
    await peer.websocket.send(b"\xc1 this is not msgpack")


async def open_before_hello(peer: RawPeer, link: ShareLink) -> None:
    await peer.receive_frame()
    await peer.send_frame(1, "open", {"path": "session", "meta": {}})


async def unknown_kind(peer: RawPeer, link: ShareLink) -> None:
    await raw_teammate(peer, link)
    await peer.send_frame(1, "exec", {"cmd": "rm -rf /"})


async def extra_top_level_key(peer: RawPeer, link: ShareLink) -> None:
    await raw_teammate(peer, link)
    await peer.websocket.send(msgpack.packb({"c": 1, "k": "window", "p": {"n": 1}, "x": 0}))


async def text_message(peer: RawPeer, link: ShareLink) -> None:
    await raw_teammate(peer, link)
    await peer.websocket.send("a text message")


async def data_on_a_channel_never_opened(peer: RawPeer, link: ShareLink) -> None:
    await raw_teammate(peer, link)
    await _open(peer, link, 1)
    await peer.send_frame(3, "data", {"d": b"for someone else"})


async def window_on_a_relay_channel_id(peer: RawPeer, link: ShareLink) -> None:
    await raw_teammate(peer, link)
    await peer.send_frame(2, "window", {"n": 1024})


async def oversized_data(peer: RawPeer, link: ShareLink) -> None:
    await raw_teammate(peer, link)
    await _open(peer, link, 1)
    await peer.send_frame(1, "data", {"d": b"x" * (300 * 1024)})


async def beyond_the_window(peer: RawPeer, link: ShareLink) -> None:
    await raw_teammate(peer, link)
    await _open(peer, link, 1)
    # Not a ciphertext: the host closes the channel (4003), and once the relay forwarded that
    # close it grants no more window on it, so one window and 100 KiB overrun it.
    await peer.send_frame(1, "data", {"d": b"not a ciphertext"})
    with anyio.fail_after(10):
        while True:
            frame = await peer.receive_frame()
            if frame["k"] == "close":
                assert frame["p"]["code"] == 4003
                break
    for _ in range(DEFAULT_LIMITS.initial_window // (100 * 1024) + 1):
        await peer.send_frame(1, "data", {"d": b"x" * (100 * 1024)})


async def oversized_message(peer: RawPeer, link: ShareLink) -> None:
    await raw_teammate(peer, link)
    await peer.websocket.send(b"\x00" * (2 * 1024 * 1024))


async def _open(peer: RawPeer, link: ShareLink, channel: int) -> None:
    meta = open_meta(link, "raw")
    await peer.send_frame(channel, "open", {"path": "session", "meta": meta})


CASES: list[tuple[Misbehaviour, int, str]] = [
    (garbage_first, 4000, "protocol error"),
    (open_before_hello, 4000, "protocol error"),
    (unknown_kind, 4000, "protocol error"),
    (extra_top_level_key, 4000, "protocol error"),
    (text_message, 4000, "protocol error"),
    (data_on_a_channel_never_opened, 4000, "protocol error"),
    (window_on_a_relay_channel_id, 4000, "protocol error"),
    (oversized_data, 4006, "protocol error"),
    (beyond_the_window, 4004, "protocol error"),
    (oversized_message, 1009, "message too big"),
]


async def test_misbehaving_peers_are_closed_logged_once_and_nobody_else_notices(
    relay: RelayProcess, tmp_path: Path
) -> None:
    async with (
        running_host(host_settings(relay.url, tmp_path)) as host,
        connect_teammate(host.drive_link, name="good") as good,
    ):
        assert await echo_roundtrip(good, b"before") == b"before"
        baseline = relay.stderr()
        for number, (misbehave, code, _) in enumerate(CASES):
            async with raw_peer(relay.url) as peer:
                await misbehave(peer, host.view_link)
                assert await peer.close_code() == code, misbehave.__name__
            # The good session keeps its channel, its counters and its order throughout.
            message = f"still here {number}".encode()
            assert await echo_roundtrip(good, message) == message

        expected = {
            tag: sum(1 for _, _, t in CASES if t == tag)
            for tag in ("protocol error", "message too big")
        }

        def counts() -> dict[str, int]:
            log = relay.stderr()[len(baseline) :]
            return {
                tag: len(re.findall(rf"WARNING relay\.server: closed teammate .*{tag}", log))
                for tag in expected
            }

        await eventually(lambda: counts() == expected)
        assert counts() == expected, relay.stderr()[len(baseline) :]
        log = relay.stderr()[len(baseline) :]
        # One line per bad peer, and no secrets or tracebacks in it.
        assert "Traceback" not in log
        assert host.view_link.token.hex() not in log
        assert await echo_roundtrip(good, b"after") == b"after"


async def test_a_host_with_a_bad_signature_is_refused_with_4002(relay: RelayProcess) -> None:
    identity = HostIdentity.generate()
    async with raw_peer(relay.url, "/v1/host") as peer:
        hello = await peer.receive_frame()
        challenge = hello["p"]["challenge"]
        assert len(challenge) == 32
        await peer.send_frame(
            None,
            "hello",
            {
                "role": "host",
                "version": PROTOCOL_VERSION,
                "pubkey": identity.public_key,
                # Signed for another relay: the URL is part of what is signed.
                "sig": identity.sign_hello(challenge, "https://elsewhere.example"),
                "capabilities": [],
                "verifiers": {"view": b"v" * 32, "drive": b"d" * 32},
            },
        )
        assert await peer.close_code() == 4002
    assert "bad host signature" in relay.stderr()


async def test_a_silent_connection_is_closed_after_the_hello_timeout(tmp_path: Path) -> None:
    relay = RelayProcess(tmp_path, "--hello-timeout", "0.5").start()
    try:
        async with raw_peer(relay.url) as peer:
            await peer.receive_frame()
            assert await peer.close_code(within=10) == 4000
    finally:
        relay.stop()
