"""The editor bridge (tunnel/teammate/acp_bridge.py) between what the host sends and what it puts
to the editor: its requests withdrawn however late they close, a cancel that ends with its
prompt, a host error taken for the refusal only of a request it can refuse. The editor's
connection and the host's channel are stand-ins; no I/O."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from acp import RequestError
from acp.connection import StreamDirection, StreamEvent

from tunnel.app.follower import Event, Item
from tunnel.app.host_messages import Error
from tunnel.e2e.crypto import ShareLink
from tunnel.e2e.identity import HostIdentity
from tunnel.teammate.acp_bridge import AcpBridge, AcpSettings, _CancelAsk
from tunnel.teammate.acp_mirror import PermissionOpened

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

ME = "zed"
REQUEST = {
    "request_id": "perm_1",
    "tool_call_id": "call_1",
    "turn": 3,
    "options": [{"option_id": "yes", "name": "Allow", "kind": "allow_once"}],
    "tool_call": {"tool_call_id": "call_1", "title": "Run tests", "kind": "execute"},
}


def item(seq: int, type_: str, data: dict[str, Any], *, by: str = "agent") -> Item:
    status = "action_required" if type_ == "permission_request" else "completed"
    return Item(item={"seq": seq, "type": type_, "status": status, "created_by": by, "data": data})


class Editor:
    """The editor's connection: records what is put to it; `while_sending` runs as a request
    is written, before the bridge sees it go out."""

    def __init__(self, bridge: AcpBridge) -> None:
        self.bridge = bridge
        self.requests: list[dict[str, Any]] = []
        self.while_sending: Callable[[], Awaitable[None]] | None = None

    async def send_request(self, method: str, params: Any = None) -> Any:
        payload = {"jsonrpc": "2.0", "id": len(self.requests) + 7, "method": method}
        self.requests.append({**payload, "params": params})
        if self.while_sending is not None:
            await self.while_sending()
        self.bridge._observe(StreamEvent(StreamDirection.OUTGOING, {**payload, "params": params}))
        return {"outcome": {"outcome": "selected", "optionId": "yes"}}


class Channel:
    """The host's channel: records what the bridge sends."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def send(self, data: bytes) -> None:
        self.sent.append(data)


def bridge() -> tuple[AcpBridge, Editor, Channel]:
    link = ShareLink(
        relay_url="http://127.0.0.1:9",
        host_id=HostIdentity.generate().host_id,
        role="drive",
        secret=os.urandom(32),
    )
    # A request the host never shows taken fails in seconds, not the default 30.
    acp = AcpBridge(AcpSettings(link=link, name=ME, answer_timeout=5))
    editor, channel = Editor(acp), Channel()
    acp._mirror.me = ME
    acp._session_id = "main"
    acp._conn = editor  # type: ignore[assignment]
    acp._channel = channel  # type: ignore[assignment]
    return acp, editor, channel


def opened(acp: AcpBridge) -> PermissionOpened:
    (entry,) = [e for e in acp._outbox if isinstance(e, PermissionOpened)]
    return entry


async def sent(channel: Channel, count: int) -> None:
    while len(channel.sent) < count:
        await anyio.sleep(0)


async def test_a_request_closed_before_it_is_put_to_the_editor_is_not_put_to_it() -> None:
    acp, editor, _ = bridge()
    await acp._take(item(5, "permission_request", REQUEST))
    waiting = opened(acp)
    await acp._take(item(6, "permission_decision", {"request_id": "perm_1"}, by="alice"))
    await acp._ask(waiting)
    assert editor.requests == []


async def test_a_request_closed_while_it_is_being_sent_is_withdrawn_once_sent() -> None:
    acp, editor, channel = bridge()
    await acp._take(item(5, "permission_request", REQUEST))

    async def alice_answers() -> None:
        await acp._take(item(6, "permission_decision", {"request_id": "perm_1"}, by="alice"))

    editor.while_sending = alice_answers
    await acp._ask(opened(acp))
    assert [e for e in acp._outbox if isinstance(e, _CancelAsk)] == [_CancelAsk(7)]
    assert channel.sent == []  # the editor's answer came after alice's: not sent
    assert acp._asks == {}


async def test_a_cancel_of_a_prompt_the_host_refused_does_not_cancel_the_next() -> None:
    acp, _, channel = bridge()
    text = [SimpleNamespace(type="text", text="first")]
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def refused() -> None:
                with pytest.raises(RequestError):
                    await acp.prompt(text, "main")

            tg.start_soon(refused)
            await sent(channel, 1)
            await acp.cancel("main")
            await acp._take(Error(code="agent_unavailable", message="the agent is not running"))

        answers: list[dict[str, Any]] = []

        async def second() -> None:
            answers.append(await acp.prompt([SimpleNamespace(type="text", text="next")], "main"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(second)
            await sent(channel, 2)
            await acp._take(item(9, "message", {"role": "user", "text": "next"}, by=ME))
            await acp._take(
                Event(event={"kind": "status", "data": {"state": "running", "turn": 9}})
            )
            assert acp._cancel_at == set()
            await acp._take(Event(event={"kind": "status", "data": {"state": "idle", "queued": 0}}))
    assert answers == [{"stopReason": "end_turn"}]
    assert len(channel.sent) == 2  # the two prompts, no cancel


async def test_an_error_a_prompt_cannot_get_is_not_taken_for_its_refusal() -> None:
    acp, _, channel = bridge()
    answers: list[dict[str, Any]] = []

    async def prompt() -> None:
        answers.append(await acp.prompt([SimpleNamespace(type="text", text="hi")], "main"))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(prompt)
            await sent(channel, 1)
            await acp._take(Error(code="unknown_request", message="no such permission request"))
            await acp._take(item(9, "message", {"role": "user", "text": "hi"}, by=ME))
            await acp._take(Event(event={"kind": "status", "data": {"state": "idle", "queued": 0}}))
    assert answers == [{"stopReason": "end_turn"}]
