"""`Framing.has_pending` over real sockets, on both framings: a reader writes what it made due
only once nothing received waits for it (tunnel/link/core.py), so a burst leaves in one write
only if the framing sees the rest of the burst waiting."""

from __future__ import annotations

import anyio
import pytest

from tests.link.socket_pair import FRAMINGS, socket_pair

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("framing", FRAMINGS)
async def test_messages_that_arrived_together_are_pending_until_the_last_is_read(
    framing: str,
) -> None:
    with anyio.fail_after(10):
        async with socket_pair(framing) as (client, server):
            assert not server.framing.has_pending()
            client.framing.write_messages([b"one", b"two", b"three"])  # one socket write
            messages = aiter(server.framing.messages())
            pending = []
            for _ in range(3):
                await anext(messages)
                pending.append(server.framing.has_pending())
            # Each message but the last leaves the rest waiting; after the last, nothing does.
            assert pending == [True, True, False]
