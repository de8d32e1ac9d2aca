"""`dial()` through a real relay, on each framing the dial can use (`framing=`, `tunnel host
--framing`): both ends adopt the limits the relay advertises in its hello, a relay that cannot be
reached, refuses the upgrade or stops answering pings fails the dial the same way, and both dial
through the proxy the environment names (HTTPS_PROXY, NO_PROXY), the one websockets picks."""

from __future__ import annotations

import asyncio
import base64
import errno
import hashlib
import os
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import anyio
import pytest

from tests.link.proxies import ForwardProxy, http_connect_proxy, socks5_proxy
from tests.link.socket_pair import FRAMINGS
from tests.support import echo_roundtrip, host_settings, running_host
from tunnel.e2e.channel import MessageTooLargeError
from tunnel.e2e.crypto import TAG_SIZE
from tunnel.link import DialSettings, LinkClosedError, RelayUnreachableError, dial
from tunnel.proto import Limits
from tunnel.proto.codes import CloseCode
from tunnel.relay.server import run as run_relay
from tunnel.relay.settings import RelaySettings
from tunnel.teammate.client import connect_teammate

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("framing", FRAMINGS)]

# Far below both ends' defaults (256 KiB window and frame): a host or teammate that kept its own
# numbers would overrun the relay's window (4004) or send frames it refuses (4006).
RELAY_LIMITS = Limits(initial_window=32 * 1024, max_data_size=8 * 1024)


async def test_host_and_teammate_use_the_window_and_frame_size_the_relay_advertises(
    tmp_path: Path, framing: str
) -> None:
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            port = await tg.start(
                run_relay, RelaySettings(host="127.0.0.1", port=0, limits=RELAY_LIMITS)
            )
            url = f"http://127.0.0.1:{port}"
            async with (
                running_host(host_settings(url, tmp_path, framing=framing)) as host,
                connect_teammate(host.drive_link, name="ana", framing=framing) as session,
            ):
                largest = RELAY_LIMITS.max_data_size - TAG_SIZE
                assert session.max_message_size == largest
                with pytest.raises(MessageTooLargeError):
                    await session.send(b"x" * (largest + 1))
                # Four windows' worth, sent before reading a single echo: only a sender that
                # waits for the relay's grants gets all of it through, in order.
                messages = [bytes([n]) * largest for n in range(16)]
                async with anyio.create_task_group() as senders:

                    async def send_all() -> None:
                        for message in messages:
                            await session.send(message)

                    senders.start_soon(send_all)
                    echoed = [await session.receive_plaintext() for _ in messages]
                assert echoed == messages
            tg.cancel_scope.cancel()


def no_hello(_relay: object) -> dict[str, object]:
    raise AssertionError("the dial never gets as far as our hello")


async def test_a_relay_port_nobody_listens_on_is_refused_at_once(framing: str) -> None:
    with socket.socket() as probe:  # a free port, closed again
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with anyio.fail_after(10), pytest.raises(ConnectionRefusedError) as raised:
        async with dial(
            f"http://127.0.0.1:{port}",
            "/v1/host",
            no_hello,
            DialSettings(),
            backlog=1,
            framing=framing,
        ):
            pass
    # What the host's backoff reads as "the relay is restarting" (tunnel/host/runner.py).
    assert raised.value.errno == errno.ECONNREFUSED


async def test_an_upgrade_the_relay_refuses_is_relay_unreachable(framing: str) -> None:
    async with anyio.create_task_group() as tg:
        port = await tg.start(run_relay, RelaySettings(host="127.0.0.1", port=0))
        with anyio.fail_after(10), pytest.raises(RelayUnreachableError):
            async with dial(
                f"http://127.0.0.1:{port}",
                "/no/such/path",
                no_hello,
                DialSettings(),
                backlog=1,
                framing=framing,
            ):
                pass
        tg.cancel_scope.cancel()


async def test_a_hello_the_relay_refuses_closes_the_link_with_its_code(framing: str) -> None:
    async def attach_without_a_host_id(port: int) -> None:
        async with dial(
            f"http://127.0.0.1:{port}",
            "/v1/attach",
            lambda _relay: {"role": "teammate"},
            DialSettings(),
            backlog=1,
            framing=framing,
        ) as mux:
            closed = await mux.link.wait_closed()
            raise closed

    async with anyio.create_task_group() as tg:
        port = await tg.start(run_relay, RelaySettings(host="127.0.0.1", port=0))
        with anyio.fail_after(10), pytest.raises(LinkClosedError) as raised:
            await attach_without_a_host_id(port)
        assert raised.value.by_peer
        assert raised.value.code == CloseCode.PROTOCOL_ERROR
        tg.cancel_scope.cancel()


@asynccontextmanager
async def silent_relay() -> AsyncIterator[int]:
    """A server that completes the WebSocket upgrade, then neither speaks nor answers pings."""
    held: list[asyncio.StreamWriter] = []

    async def upgrade(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = (await reader.readuntil(b"\r\n\r\n")).decode()
        key = next(
            line.split(":", 1)[1].strip()
            for line in request.split("\r\n")
            if line.lower().startswith("sec-websocket-key:")
        )
        guid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
        accept = base64.b64encode(hashlib.sha1((key + guid).encode()).digest()).decode()
        writer.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept.encode() + b"\r\n\r\n"
        )
        held.append(writer)

    server = await asyncio.start_server(upgrade, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_a_relay_that_stops_answering_pings_is_given_up_with_1011(framing: str) -> None:
    settings = DialSettings(hello_timeout=30, ping_interval=0.2, ping_timeout=0.2)
    async with silent_relay() as port:
        with anyio.fail_after(10), pytest.raises(LinkClosedError) as raised:
            async with dial(
                f"http://127.0.0.1:{port}",
                "/v1/host",
                no_hello,
                settings,
                backlog=1,
                framing=framing,
            ):
                pass
    assert raised.value.code == CloseCode.INTERNAL_ERROR
    assert not raised.value.by_peer


def test_a_framing_whose_library_is_missing_is_refused_in_one_line(
    framing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "picows", None)  # an install without the `fast` extra
    if framing == "websockets":
        host_settings("http://127.0.0.1:1", Path("/nonexistent"), framing=framing)
        return
    with pytest.raises(ValueError, match="needs the picows package") as raised:
        host_settings("http://127.0.0.1:1", Path("/nonexistent"), framing=framing)
    assert str(raised.value) == (
        "framing picows needs the picows package: pip install 'agent-tunnel[fast]'"
    )


def name_proxy(monkeypatch: pytest.MonkeyPatch, proxy: str, no_proxy: str | None = None) -> None:
    """The environment names `proxy` as HTTPS_PROXY (and `no_proxy` as NO_PROXY), and no other."""
    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HTTPS_PROXY", proxy)
    if no_proxy is not None:
        monkeypatch.setenv("NO_PROXY", no_proxy)


def a_free_port() -> int:
    with socket.socket() as probe:  # a free port, closed again
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.parametrize(
    "open_proxy",
    [
        pytest.param(http_connect_proxy, id="http-proxy"),
        pytest.param(socks5_proxy, id="socks5h-proxy"),
    ],
)
async def test_host_and_teammate_dial_the_relay_through_the_proxy_the_environment_names(
    tmp_path: Path,
    framing: str,
    monkeypatch: pytest.MonkeyPatch,
    open_proxy: Callable[[], AbstractAsyncContextManager[ForwardProxy]],
) -> None:
    attach = "GET /v1/attach HTTP/1.1"
    with anyio.fail_after(30):
        async with open_proxy() as proxy, anyio.create_task_group() as tg:
            name_proxy(monkeypatch, proxy.url)
            port = await tg.start(run_relay, RelaySettings(host="127.0.0.1", port=0))
            url = f"http://127.0.0.1:{port}"
            async with running_host(host_settings(url, tmp_path, framing=framing)) as host:
                # running_host waited for the host with teammates of its own (websockets').
                attached_before = proxy.requests().count(attach)
                async with connect_teammate(host.drive_link, name="ana", framing=framing) as ana:
                    assert await echo_roundtrip(ana, b"via the proxy") == b"via the proxy"
                assert proxy.requests().count(attach) == attached_before + 1
            tg.cancel_scope.cancel()
    assert "GET /v1/host HTTP/1.1" in proxy.requests()
    assert {(tunnel.target, tunnel.opened) for tunnel in proxy.tunnels} == {
        (f"127.0.0.1:{port}", True)
    }


async def test_a_relay_no_proxy_names_is_dialed_directly(
    framing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = a_free_port()
    async with http_connect_proxy() as proxy:
        name_proxy(monkeypatch, proxy.url, no_proxy="127.0.0.1")
        # Refused by nobody listening on the relay's port, not by the proxy.
        with anyio.fail_after(10), pytest.raises(ConnectionRefusedError):
            async with dial(
                f"http://127.0.0.1:{port}",
                "/v1/host",
                no_hello,
                DialSettings(),
                backlog=1,
                framing=framing,
            ):
                pass
    assert proxy.tunnels == []


async def test_a_tunnel_the_proxy_refuses_is_relay_unreachable(
    framing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = a_free_port()
    async with http_connect_proxy(answer="refuse") as proxy:
        name_proxy(monkeypatch, proxy.url)
        with anyio.fail_after(10), pytest.raises(RelayUnreachableError, match="403"):
            async with dial(
                f"http://127.0.0.1:{port}",
                "/v1/host",
                no_hello,
                DialSettings(),
                backlog=1,
                framing=framing,
            ):
                pass
    assert [(tunnel.target, tunnel.opened) for tunnel in proxy.tunnels] == [
        (f"127.0.0.1:{port}", False)
    ]


async def test_a_proxy_that_never_answers_fails_the_dial_at_the_open_timeout(
    framing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with http_connect_proxy(answer="nothing") as proxy:
        name_proxy(monkeypatch, proxy.url)
        with anyio.fail_after(10), pytest.raises(TimeoutError):
            async with dial(
                f"http://127.0.0.1:{a_free_port()}",
                "/v1/host",
                no_hello,
                DialSettings(open_timeout=0.5),
                backlog=1,
                framing=framing,
            ):
                pass
    assert len(proxy.tunnels) == 1


async def test_a_proxy_the_environment_misnames_fails_the_dial_without_showing_its_url(
    framing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    name_proxy(monkeypatch, "ftp://user:secret@127.0.0.1:1")
    with anyio.fail_after(10), pytest.raises(RelayUnreachableError) as raised:
        async with dial(
            f"http://127.0.0.1:{a_free_port()}",
            "/v1/host",
            no_hello,
            DialSettings(),
            backlog=1,
            framing=framing,
        ):
            pass
    assert str(raised.value) == "the environment's proxy cannot be used: scheme ftp isn't supported"
