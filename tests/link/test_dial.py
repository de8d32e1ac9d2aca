"""`dial()` through a real relay, on each framing the dial can use (`framing=`, `tunnel host
--framing`): both ends adopt the limits the relay advertises in its hello, and a relay that
cannot be reached, refuses the upgrade or stops answering pings fails the dial the same way."""

from __future__ import annotations

import asyncio
import base64
import errno
import hashlib
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from tests.link.socket_pair import FRAMINGS
from tests.support import host_settings, running_host
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
