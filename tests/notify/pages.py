"""A teammate's page as far as notifications go, for the tests: a channel that sends `push_on`,
`push_off` and `focus` and reads the host's answers; and a driver's prompt that makes the demo
agent ask for permission."""

from __future__ import annotations

import base64
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import msgpack

from tests.host.teammate import Teammate
from tests.notify.push_keys import BrowserKeys
from tunnel.app.host_messages import decode_host_message
from tunnel.app.requests import Focus, Prompt, PushOff, PushOn, encode_request
from tunnel.e2e.crypto import ShareLink
from tunnel.teammate.client import TeammateSession, connect_teammate


@dataclass
class Page:
    """A teammate's page as far as notifications go: its channel, never subscribed to the log."""

    session: TeammateSession
    ready: dict[str, Any]
    browser: str

    async def ask(self, request: PushOn | PushOff | dict[str, Any]) -> dict[str, Any]:
        """Send a request and return the host's answer (a `push` or an `error`)."""
        packed = msgpack.packb(request) if isinstance(request, dict) else encode_request(request)
        await self.session.send(packed)
        return decode_host_message(await self.session.receive_plaintext())

    async def push_on(self, endpoint: str, keys: BrowserKeys) -> dict[str, Any]:
        return await self.ask(
            PushOn(endpoint=endpoint, p256dh=keys.public, auth=keys.auth, browser=self.browser)
        )

    async def focus(self, focused: bool) -> None:
        await self.session.send(encode_request(Focus(focused=focused, browser=self.browser)))
        # Requests are served in order: once this is answered, the focus was taken.
        answer = await self.ask(PushOff(endpoint="https://fcm.googleapis.com/fcm/send/none"))
        assert answer == {"op": "push", "on": False, "endpoint": answer["endpoint"]}


@contextlib.asynccontextmanager
async def page(link: str | ShareLink, name: str) -> AsyncIterator[Page]:
    async with connect_teammate(link, name=name) as session:
        ready = decode_host_message(await session.receive_plaintext())
        assert ready["op"] == "ready"
        browser = base64.urlsafe_b64encode(os.urandom(18)).decode()
        yield Page(session=session, ready=ready, browser=browser)


async def request_waits(driver: Teammate, n: int) -> str:
    """Prompt, and return the id of the `n`th permission request of the session."""
    await driver.send(Prompt(text="count the lines"))
    await driver.wait_for(
        lambda t: len([i for i in t.items if i["type"] == "permission_request"]) >= n
    )
    requests = [i for i in driver.items if i["type"] == "permission_request"]
    return str(requests[n - 1]["data"]["request_id"])
