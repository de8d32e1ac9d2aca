"""`tunnel attach` on a host of several conversations: `/new` starts one and shows it, `/switch`
goes back without an item twice, `/list` says each one's state and requests, a request waiting
in a conversation not shown is counted before the prompt and rings once, `/close` ends driving.

The real command on an emulated terminal, with a real relay and a real `tunnel host` of two
agents; a scripted teammate drives the other conversation meanwhile. A hostile host's list is fed
to an attachment directly.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from rich.console import Console

from tests.host.conversations_host import two_agent_host
from tests.host.host_process import HostProcess
from tests.host.teammate import Teammate, attached
from tests.support import RelayProcess
from tests.terminal.hostile import WIRE, dangerous
from tests.terminal.pty_process import ScreenProcess, bells, screen_process
from tunnel.app.conversation_list import parse_conversation_message
from tunnel.app.follower import Follower
from tunnel.app.host_messages import ItemMessage, Ready, Snapshot, decode_host_message, encode
from tunnel.app.requests import MAX_AGENT_NAME_LENGTH, NewConversation, PermissionAnswer, Prompt
from tunnel.e2e.crypto import ShareLink, new_secret
from tunnel.e2e.opening import MAX_CONVERSATION_LENGTH
from tunnel.teammate.attach import Attachment, AttachSettings
from tunnel.terminal.notify import TerminalSignals

ROOT = Path(__file__).resolve().parents[2]
TUNNEL = (sys.executable, "-m", "tunnel.cli")
TERMINAL = {"TERM": "xterm-256color", "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"}

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]


def _host(relay: RelayProcess, tmp_path: Path) -> HostProcess:
    host = two_agent_host(relay, tmp_path)
    (tmp_path / "ws" / "notes.txt").write_text("milk\n")
    return host


def _attach(link: str, *args: str) -> Any:
    argv = [*TUNNEL, "attach", "--name", "alice", *args]
    environ = dict(os.environ, TUNNEL_LINK=link, **TERMINAL)
    return screen_process(argv, env=environ, cwd=ROOT, rows=40, columns=160)


def _after(screen: ScreenProcess, marker: str) -> str:
    """What the screen shows after the last line that holds `marker`."""
    lines = screen.lines()
    last = max(i for i, line in enumerate(lines) if marker in line)
    return "\n".join(lines[last + 1 :])


def _count(screen: ScreenProcess, text: str) -> int:
    return sum(line.count(text) for line in screen.lines())


def _open_request(teammate: Teammate) -> str:
    closed = {i["data"]["request_id"] for i in teammate.items if i["type"] == "permission_decision"}
    waiting = [
        i["data"]["request_id"]
        for i in teammate.items
        if i["type"] == "permission_request" and i["data"]["request_id"] not in closed
    ]
    assert len(waiting) == 1, waiting
    return str(waiting[0])


async def test_attach_starts_switches_lists_and_closes_conversations(
    relay: RelayProcess, tmp_path: Path
) -> None:
    host = _host(relay, tmp_path).start()
    try:
        with _attach(host.drive_link) as alice:
            await alice.wait_screen(r"attached as alice \(drive\)")
            alice.keys(b"only in main\r")
            await alice.wait_screen(r"^\[1 waiting\] main >$|^\[1 waiting\] >$", where="cursor")
            alice.keys(b"/deny\r")
            await alice.wait_screen(r"alice chose Reject")
            assert bells(alice.received) == 1

            # /new: the new conversation is shown, and nothing of main's comes with it.
            alice.keys(b"/new other\r")
            found = await alice.wait_screen(r"started conversation (c-[0-9a-f]{8})")
            other = found.group(1)
            await alice.wait_screen(rf"attached as alice \(drive\) to conversation {other}")
            await alice.wait_screen(r"alice started this conversation with other")
            await alice.wait_screen(rf"^{other} >$", where="cursor")
            assert "only in main" not in _after(alice, f"showing conversation {other}")

            alice.keys(b"only in other\r")
            await alice.wait_screen(rf"^\[1 waiting\] {other} >$", where="cursor")
            assert bells(alice.received) == 2

            # Back to main: resumed after what was shown, its request counted as elsewhere
            # (it rang already).
            alice.keys(b"/switch main\r")
            await alice.wait_screen(r"attached as alice \(drive\) to conversation main")
            await alice.wait_screen(rf"^\[1 waiting in {other}\] main >$", where="cursor")
            assert _count(alice, "alice: only in main") == 1
            assert alice.screen.title == "[1 waiting elsewhere] tunnel attach"
            assert bells(alice.received) == 2

            async with attached(host.drive_link, "bo", conversation=other) as bo:
                await bo.wait_for(lambda t: t.snapshot_done)
                await bo.wait_for(lambda t: any(i["type"] == "permission_request" for i in t.items))
                await bo.send(
                    PermissionAnswer(request_id=_open_request(bo), option_id="reject_once")
                )
                await alice.wait_screen(r"^main >$", where="cursor")
                # A request that starts waiting in the other conversation: counted, one bell.
                await bo.send(Prompt(text="again in other"))
                await alice.wait_screen(rf"^\[1 waiting in {other}\] main >$", where="cursor")
                await anyio.sleep(0.5)
                assert bells(alice.received) == 3

                alice.keys(b"/list\r")
                await alice.wait_screen(
                    rf"1\. {other}: other, started by alice, waiting, 1 waiting, last active"
                )
                await alice.wait_screen(
                    r"2\. main: demo, started by hannah, idle, last active .*\(shown here\)"
                )

                # Back to the other: what bo did meanwhile, nothing twice, no second bell.
                alice.keys(b"/switch c-\r")
                await alice.wait_screen(rf"^\[1 waiting\] {other} >$", where="cursor")
                await alice.wait_screen(r"bo: again in other")
                assert _count(alice, "alice: only in other") == 1
                assert _count(alice, "bo: again in other") == 1
                await anyio.sleep(0.5)
                assert bells(alice.received) == 3

                # /close: the agent stops, the channel stays to read; driving is refused.
                alice.keys(b"/close\r")
                await alice.wait_screen(r"alice closed this conversation")
                await bo.wait_for(lambda t: t.item_of("session_event", what="conversation_closed"))
                alice.keys(b"after the close\r")
                await alice.wait_screen(
                    r"refused: this conversation is closed: start a new one, or switch"
                )
            alice.keys(b"\x04")  # Ctrl-D: leave
            assert await alice.wait_exit() == 0
    finally:
        host.stop()


async def test_attach_conversation_starts_in_that_one_and_a_reconnect_resumes_it(
    tmp_path: Path,
) -> None:
    relay = RelayProcess(tmp_path).start()
    host = _host(relay, tmp_path).start()
    try:
        async with attached(host.drive_link, "bo", conversation="main") as bo:
            await bo.wait_for(lambda t: t.snapshot_done)
            await bo.send(NewConversation(agent="other"))
            await bo.wait_for(lambda t: t.started)
            other = bo.started[0]
        with _attach(host.drive_link, "--conversation", other) as alice:
            await alice.wait_screen(rf"attached as alice \(drive\) to conversation {other}")
            await alice.wait_screen(r"bo started this conversation with other")
            # The relay restarts: attach comes back to the same conversation, not the first.
            relay.kill()
            restarted = RelayProcess(tmp_path, port=relay.port).start()
            try:
                await alice.wait_screen(
                    rf"(?s)to conversation {other}.*attached as alice \(drive\) to conversation"
                    rf" {other}"
                )
                assert "to conversation main" not in "\n".join(alice.lines())
                assert _count(alice, "bo started this conversation with other") == 1
                # /fork: a conversation from this one's last item, shown at once.
                alice.keys(b"/fork\r")
                fork = (await alice.wait_screen(r"started conversation (c-[0-9a-f]{8})")).group(1)
                await alice.wait_screen(rf"attached as alice \(drive\) to conversation {fork}")
                await alice.wait_screen(rf"alice forked this conversation from {other} at item")
                assert fork != other
            finally:
                restarted.stop()
    finally:
        host.stop()
        relay.stop()


def _attachment(role: str = "drive") -> tuple[Attachment, io.StringIO]:
    out = io.StringIO()
    link = ShareLink(
        relay_url="http://127.0.0.1:1", host_id="a" * 26, role=role, secret=new_secret()
    )
    attachment = Attachment(
        AttachSettings(link=link, name="me"),
        console=Console(file=out, width=10_000, color_system=None),
        stdin=io.StringIO(),
        status=Console(file=out, width=10_000, color_system=None),
    )
    return attachment, out


def test_a_viewer_lists_and_switches_but_starts_closes_and_forks_nothing() -> None:
    attachment, out = _attachment("view")
    entry = {"agent": "demo", "by": "h", "state": "idle", "pending": 0, "last": 0, "started": 0}
    listing = parse_conversation_message(
        {"op": "conversations", "agents": ["demo"], "max": 8, "list": [{**entry, "id": "main"}]}
    )
    attachment._on_conversations(listing)
    for line in ("/new demo", "/close", "/fork 3"):
        assert attachment._request_for(line) is None
    assert out.getvalue().count("this is a view link") == 3
    assert attachment._request_for("/list") is None
    assert "1. main: demo, started by h, idle" in out.getvalue()


def test_new_names_a_declared_agent_and_fork_needs_an_item() -> None:
    attachment, out = _attachment()
    assert attachment._request_for("/fork") is None
    assert "not attached to a conversation yet" in out.getvalue()
    entry = {"agent": "demo", "by": "h", "state": "idle", "pending": 0, "last": 0, "started": 0}
    listing = parse_conversation_message(
        {"op": "conversations", "agents": ["demo"], "max": 8, "list": [{**entry, "id": "main"}]}
    )
    attachment._on_conversations(listing)
    assert attachment._request_for("/new nobody") is None
    assert "no agent nobody here; this host offers demo" in out.getvalue()
    assert attachment._request_for("/new demo") == NewConversation(agent="demo")
    assert attachment._request_for("/switch 7") is None
    assert "no conversation 7 here (/list shows them)" in out.getvalue()


def test_a_hostile_list_is_printed_escaped() -> None:
    attachment, out = _attachment()
    # As long as the host may send them: a longer list is refused whole (tests/app).
    huge = "c-" + "\u202e" * 10 + "y" * (MAX_CONVERSATION_LENGTH - 12)
    entry = {"state": "waiting", "pending": 2, "last": 0.0, "started": 0.0}
    listing = parse_conversation_message(
        {
            "op": "conversations",
            "agents": [WIRE[:MAX_AGENT_NAME_LENGTH]],
            "max": 8,
            "list": [
                {**entry, "id": huge, "agent": WIRE[:MAX_AGENT_NAME_LENGTH], "by": WIRE[:64]},
                {
                    **entry,
                    "id": WIRE[:MAX_CONVERSATION_LENGTH],
                    "agent": "x" * MAX_AGENT_NAME_LENGTH,
                    "by": "\x1b]52;c;eA==\x07",
                },
            ],
        }
    )
    attachment._on_conversations(listing)
    assert attachment._request_for("/list") is None
    shown = out.getvalue()
    assert dangerous(shown) == []
    assert "\\u202e" in shown
    assert "\\x1b]52" in shown
    # No prompt line here: what waits elsewhere is said in a line.
    assert "[4 waiting in c-\\u202e" in shown
    assert len(shown) < 2000


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _channel(attachment: Attachment, conversation: str, *messages: Any) -> None:
    """A channel to `conversation` as attach opens one: a follower of its own, its messages
    shown, then what the receive loop does after each."""
    follower = Follower(host_id="host")
    ready = Ready(
        conversation_id=conversation, name="me", role="drive", agent_name="a", agent_kind="chat"
    )
    for message in (ready, *messages):
        for event in follower.receive_message(decode_host_message(encode(message))):
            attachment._show(event)
        attachment._signal_waiting()


def _request(seq: int, request_id: str) -> ItemMessage:
    data = {"request_id": request_id, "title": "Edit", "options": []}
    return ItemMessage(item={"seq": seq, "type": "permission_request", "data": data})


def _waiting_in(pending: dict[str, int]) -> Any:
    entry = {"agent": "demo", "by": "h", "state": "idle", "last": 0, "started": 0}
    listed = [{**entry, "id": c, "pending": n} for c, n in pending.items()]
    return parse_conversation_message(
        {"op": "conversations", "agents": ["demo"], "max": 8, "list": listed}
    )


def test_a_request_rings_once_whichever_conversation_shows_it_first() -> None:
    terminal = _Terminal()
    link = ShareLink(
        relay_url="http://127.0.0.1:1", host_id="a" * 26, role="drive", secret=new_secret()
    )
    attachment = Attachment(
        AttachSettings(link=link, name="me"),
        console=Console(file=io.StringIO(), width=10_000, color_system=None),
        stdin=io.StringIO(),
        signals=TerminalSignals(terminal, program="tunnel attach", environ={"TERM": "xterm"}),
    )
    _channel(attachment, "main", Snapshot(items=[], last_seq=-1, more=False))
    attachment._on_conversations(_waiting_in({"main": 0, "c-1": 1}))
    assert bells(terminal.getvalue().encode()) == 1
    # Shown: its replay holds the request that rang already; a new one rings.
    attachment._enter("c-1")
    _channel(attachment, "c-1", Snapshot(items=[_request(0, "r1").item], last_seq=0, more=False))
    assert bells(terminal.getvalue().encode()) == 1
    _channel(attachment, "c-1", _request(1, "r2"))
    assert bells(terminal.getvalue().encode()) == 2
    # Left with both waiting, then shown again with nothing new: no bell, and the next new
    # request still rings.
    attachment._enter("main")
    _channel(attachment, "main", Snapshot(items=[], last_seq=-1, more=False))
    attachment._on_conversations(_waiting_in({"main": 0, "c-1": 2}))
    assert bells(terminal.getvalue().encode()) == 2
    attachment._enter("c-1")
    _channel(attachment, "c-1", Snapshot(items=[], last_seq=1, more=False))
    assert attachment._waiting.count == 2
    _channel(attachment, "c-1", _request(2, "r3"))
    assert bells(terminal.getvalue().encode()) == 3
