"""`PicowsFraming` on its own: the bounded queue between picows' callback and the link's reader."""

from __future__ import annotations

import logging

import anyio
import pytest

from tests.link.socket_pair import HAS_PICOWS, socket_pair

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not HAS_PICOWS, reason="picows is not installed"),
]


async def test_the_socket_stops_being_read_while_the_reader_takes_nothing() -> None:
    from tunnel.link.framing_picows import MAX_QUEUE, PicowsFraming

    with anyio.fail_after(10):
        async with socket_pair("picows") as (client, server):
            assert isinstance(server.framing, PicowsFraming)
            sent = [b"%d" % n for n in range(2000)]
            for start in range(0, len(sent), 100):
                client.framing.write_messages(sent[start : start + 100])
                await anyio.sleep(0.01)
            queued, paused = server.framing.statistics()
            # Bounded by MAX_QUEUE plus the frames of the one read that crossed it.
            assert paused
            assert MAX_QUEUE <= queued < len(sent)
            received = []
            async for message in server.framing.messages():
                received.append(message)
                if len(received) == len(sent):
                    break
            assert received == sent
            assert server.framing.statistics() == (0, False)


async def test_a_broken_frame_is_logged_by_the_links_owner_not_by_picows(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    with anyio.fail_after(10):
        async with socket_pair("picows", max_size=1024) as (client, server):
            client.framing.write_messages([b"x" * 2048])
            await server.framing.wait_closed()
    assert server.framing.close_reason()[0] == 1009
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


async def test_a_close_the_peer_never_answers_drops_the_socket_after_close_timeout() -> None:
    from tunnel.link.framing_picows import PicowsFraming

    with anyio.fail_after(10):
        async with socket_pair("picows", close_timeout=0.2) as (client, server):
            assert isinstance(server.framing, PicowsFraming)
            client.pause_reading()  # it never reads our close, so never answers it
            await server.framing.close(4001, "bye")
            assert server.framing.is_closed
            assert server.framing.close_reason() == (4001, "bye", False)
