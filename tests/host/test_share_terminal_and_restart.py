"""Terminal agents over the tunnel, and a host restarted on the same log."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support import RelayProcess
from tunnel.app.requests import Input, Prompt, Resize

from .conftest import sharing
from .teammate import Teammate, attached

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


def _terminal_text(teammate: Teammate) -> str:
    return "".join(item["data"]["text"] for item in teammate.items if item["type"] == "terminal")


async def test_a_drivers_keystrokes_reach_a_terminal_agent_and_come_back_as_items(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    agent = f"pty:{sys.executable} -i -q"
    async with (
        sharing(relay.url, tmp_path, agent=agent, workspace=workspace) as shared,
        attached(str(shared.host.drive_link), "alice") as alice,
        attached(str(shared.host.view_link), "vera") as vera,
    ):
        await alice.wait_for(lambda t: t.ready is not None)
        assert alice.ready is not None
        assert alice.ready["agent"]["kind"] == "terminal"
        await alice.send(Resize(cols=100, rows=30))
        await alice.send(Input(data=b"print(6 * 7)\n"))
        await vera.wait_for(lambda t: "42" in _terminal_text(t))

        # A viewer's keystrokes are refused and never reach the program.
        await vera.send(Input(data=b"print('viewer was here')\n"))
        await vera.wait_for(lambda t: t.errors)
        assert vera.errors[0]["code"] == "forbidden"
        await alice.send(Input(data=b"print(1 + 1)\n"))
        await alice.wait_for(lambda t: "\n2" in _terminal_text(t).replace("\r", ""))
        assert "viewer was here" not in _terminal_text(alice)


async def test_a_restarted_host_shows_the_earlier_conversation(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    async with (
        sharing(relay.url, tmp_path, agent="demo", workspace=workspace) as shared,
        attached(str(shared.host.drive_link), "alice") as alice,
    ):
        await alice.send(Prompt(text="remember this"))
        await alice.wait_for(lambda t: t.item_of("permission_request") is not None)
        before = list(alice.items)

    # Same key, same secrets, same log file: the same links show the same conversation.
    async with (
        sharing(relay.url, tmp_path, agent="demo", workspace=workspace) as shared,
        attached(str(shared.host.view_link), "vera") as vera,
    ):
        await vera.wait_for(lambda t: t.snapshot_done)
        assert vera.items[: len(before)] == before
        assert vera.item_of("message", role="user", text="remember this") is not None


async def test_a_cursor_past_the_logs_end_gets_a_reset_and_the_whole_log(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    async with (
        sharing(relay.url, tmp_path, agent="demo", workspace=workspace) as shared,
        attached(str(shared.host.drive_link), "alice") as alice,
    ):
        await alice.send(Prompt(text="first words"))
        await alice.wait_for(lambda t: t.item_of("permission_request") is not None)
        # A teammate that saw seq 999 of some other log under this conversation id.
        async with attached(str(shared.host.view_link), "vera", after=999) as vera:
            await vera.wait_for(lambda t: t.snapshot_done)
            assert vera.resets == 1
            assert vera.seqs()[:3] == [0, 1, 2]
            assert vera.item_of("message", role="user", text="first words") is not None
