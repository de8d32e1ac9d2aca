"""The host console on a host of several conversations: `/new`, `/list`, `/switch`, `/fork` and
`/close` act on the host's own registry, typed lines drive the conversation shown, and the list
says what a teammate named without a control character reaching the terminal.

A real `tunnel host --interactive` of two agents, its console typed into through stdin, a real
relay, and scripted teammates that check what reached each conversation.
"""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest

from tests.host.host_process import HostProcess
from tests.host.teammate import Teammate, attached
from tests.support import RelayProcess
from tests.terminal.hostile import dangerous
from tunnel.app.requests import NewConversation, Prompt

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

ID = r"c-[0-9a-f]{8}"


def _prompts(teammate: Teammate) -> list[str]:
    return [
        str(item["data"].get("text", ""))
        for item in teammate.items
        if item["type"] == "message" and item["data"].get("role") == "user"
    ]


async def _output(host: HostProcess, pattern: str) -> re.Match[str]:
    return await anyio.to_thread.run_sync(host.wait_output, pattern)


def _since(host: HostProcess, marker: str) -> str:
    output = host.output()
    return output[output.rindex(marker) :]


async def test_the_host_console_starts_lists_switches_forks_and_closes_conversations(
    relay: RelayProcess, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("milk\n")
    host = HostProcess(
        relay.url,
        tmp_path,
        agent="demo=demo",
        workspace=workspace,
        log_db=tmp_path / "log.db",
        extra=("--agent", "other=demo"),
    ).start()
    try:
        host.type("/list")
        await _output(
            host,
            r"1 conversations open \(at most 8\); /new NAME starts one with:"
            r" demo, other",
        )
        await _output(host, r"1\. main: demo, started by hannah, idle, last active .*shown here")

        host.type("/new other")
        other = (await _output(host, rf"started conversation ({ID}) with other")).group(1)
        await _output(host, rf"showing conversation {other} \(other\)")
        await _output(host, r"hannah started this conversation with other")
        host.type("hello from the host")
        async with attached(host.drive_link, "ann", conversation=other) as ann:
            await ann.wait_for(lambda t: "hello from the host" in _prompts(t))
            await ann.wait_for(lambda t: any(i["type"] == "permission_request" for i in t.items))
        async with attached(host.drive_link, "ann", conversation="main", after=-1) as ann:
            await ann.wait_for(lambda t: t.snapshot_done)
            assert "hello from the host" not in _prompts(ann)

        # Back to main: the other's request is counted in the list; a prompt goes to main.
        host.type("/switch main")
        await _output(host, r"showing conversation main \(demo\)")
        host.type("/list")
        await _output(host, rf"1\. {other}: other, started by hannah, waiting, 1 waiting")
        await _output(host, r"2\. main: demo, started by hannah, idle, .*\(shown here\)")
        # Shown again: what main held was printed when it was shown first, not twice.
        assert "the agent started" not in _since(host, "showing conversation main")
        host.type("now in main")
        async with attached(host.drive_link, "ann", conversation="main") as ann:
            await ann.wait_for(lambda t: "now in main" in _prompts(t))
        await _output(host, r"hannah: now in main")
        # Nothing of the other conversation printed while main is shown.
        assert "hello from the host" not in _since(host, "showing conversation main")

        # A fork of main at its last item: shown, with main's items up to there.
        await _output(host, r"(?s)hannah: now in main.*request perm_")
        host.type("/deny")
        await _output(host, r"hannah chose Reject")
        await anyio.sleep(0.5)
        host.type("/fork")
        found = await _output(host, rf"forked main at item (\d+) into ({ID})")
        upto, fork = int(found.group(1)), found.group(2)
        await _output(host, rf"showing conversation {fork} \(demo\)")
        async with attached(host.drive_link, "ann", conversation=fork, after=-1) as forked:
            await forked.wait_for(
                lambda t: t.item_of("session_event", what="session_fork") is not None
            )
            assert "now in main" in _prompts(forked)
            event = forked.item_of("session_event", what="session_fork")
            assert event is not None
            assert event["data"]["from"] == "main"
            assert event["data"]["upto"] == upto

        # By a unique start of its id, then /allow answers that conversation's request.
        host.type(f"/switch {other[:5]}" if not fork.startswith(other[:5]) else f"/switch {other}")
        await _output(host, rf"showing conversation {other} \(other\)")
        host.type("/allow")
        await _output(host, r"hannah chose Allow once")

        # /close: its agent stops and driving it is refused, in one line.
        host.type("/close")
        await _output(host, rf"closed conversation {other}: its log stays")
        host.type("after the close")
        await _output(host, r"this conversation is closed: start a new one, or switch")
        host.type("/list")
        await _output(host, rf"{other}: other, started by hannah, closed")
        host.type("/switch nothing-like-it")
        await _output(host, r"no conversation nothing-like-it here \(/list shows them\)")
    finally:
        host.stop()


async def test_the_console_list_shows_a_hostile_teammates_name_escaped(
    relay: RelayProcess, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    host = HostProcess(
        relay.url,
        tmp_path,
        agent="demo=demo",
        workspace=workspace,
        log_db=tmp_path / "log.db",
        extra=("--agent", "other=demo"),
    ).start()
    hostile = "mal\u202eory\u2066x"
    try:
        async with attached(host.drive_link, hostile, conversation="main") as mallory:
            await mallory.wait_for(lambda t: t.snapshot_done)
            await mallory.send(NewConversation(agent="other"))
            await mallory.wait_for(lambda t: t.started)
        started = mallory.started[0]
        # A request that waits in a conversation not shown: said in a line (no prompt line here).
        async with attached(host.drive_link, hostile, conversation=started) as mallory:
            await mallory.wait_for(lambda t: t.snapshot_done)
            await mallory.send(Prompt(text="ask away"))
            await _output(host, rf"\[1 waiting in {started}\] \(/switch ID shows one\)")
        host.type("/list")
        line = (await _output(host, r"1\. c-[^\n]*started by mal[^\n]*")).group(0)
        assert dangerous(line) == []
        assert "mal\\u202eory\\u2066x" in line
    finally:
        host.stop()
