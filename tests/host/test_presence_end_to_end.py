"""Presence deltas end to end: a relay subprocess, a sharing host and 50 Python clients attaching
at once. Every client ends with the same list of who is attached, made from the host's first
list and its deltas, and hands its reader that whole list each time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.support import RelayProcess
from tunnel.app.host_messages import PresenceMessage, parse
from tunnel.teammate.client import TeammateSession, connect_teammate

from .conftest import sharing

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

TEAMMATES = 50


@pytest.fixture
def roomy_relay(tmp_path: Path) -> Iterator[RelayProcess]:
    """A relay that admits more teammates per host than the default 32."""
    process = RelayProcess(tmp_path, "--max-teammates-per-host", str(TEAMMATES + 4)).start()
    try:
        yield process
    finally:
        process.stop()


async def test_fifty_clients_attaching_at_once_end_with_the_same_members(
    roomy_relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    lists: dict[str, list[PresenceMessage]] = {}
    sessions: dict[str, TeammateSession] = {}
    everyone = anyio.Event()

    def all_told() -> bool:
        return len(lists) == TEAMMATES and all(
            len(messages[-1].members) == TEAMMATES + 1 for messages in lists.values()
        )

    async def teammate(name: str, link: str) -> None:
        async with connect_teammate(link, name=name) as session:
            sessions[name] = session
            await session.subscribe(tail=0)
            while True:
                message = parse(await session.receive())
                if isinstance(message, PresenceMessage):
                    lists.setdefault(name, []).append(message)
                    if all_told():
                        everyone.set()

    async with sharing(roomy_relay.url, tmp_path, agent="demo", workspace=workspace) as shared:
        link = str(shared.host.view_link)
        async with anyio.create_task_group() as tg:
            for n in range(TEAMMATES):
                tg.start_soon(teammate, f"t{n:02}", link)
            with anyio.fail_after(60):
                await everyone.wait()
            tg.cancel_scope.cancel()

    # The host sends each channel the whole list once: every later list a client got is one it
    # made of a delta.
    assert sum(len(messages) for messages in lists.values()) > TEAMMATES
    names = {f"t{n:02}" for n in range(TEAMMATES)}
    expected = None
    for name, messages in lists.items():
        last = messages[-1]
        members = {(m.id, m.name, m.role) for m in last.members}
        # The host's console is attached too.
        assert {m.name for m in last.members if m.role != "host"} == names
        assert [m.role for m in last.members].count("host") == 1
        assert len(members) == TEAMMATES + 1
        expected = members if expected is None else expected
        assert members == expected
        # Each client knows which member it is, and its session holds the same list.
        you = [m for m in last.members if m.id == last.you]
        assert [m.name for m in you] == [name]
        assert sessions[name].members == list(last.members)
