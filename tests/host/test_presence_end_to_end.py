"""Presence deltas end to end: a relay subprocess, a sharing host and 50 Python clients attaching
at once. Every client ends with the same list of who is attached, made from the host's first
list and its deltas."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.support import RelayProcess
from tunnel.app.follower import Presence
from tunnel.host.presence import LISTED_MEMBERS
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
    wholes: dict[str, int] = {}
    deltas: dict[str, int] = {}
    sessions: dict[str, TeammateSession] = {}
    everyone = anyio.Event()

    def all_told() -> bool:
        return len(sessions) == TEAMMATES and all(
            session.member_count == TEAMMATES + 1 and len(session.members) == LISTED_MEMBERS
            for session in sessions.values()
        )

    async def teammate(name: str, link: str) -> None:
        async with connect_teammate(link, name=name) as session:
            sessions[name] = session
            await session.subscribe(tail=0)
            while True:
                event = await session.receive()
                if not isinstance(event, Presence):
                    continue
                if event.whole:
                    wholes[name] = wholes.get(name, 0) + 1
                else:
                    deltas[name] = deltas.get(name, 0) + 1
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

    # The host sends each channel the whole list once, then only what changed.
    assert wholes == {f"t{n:02}": 1 for n in range(TEAMMATES)}
    assert sum(deltas.values()) > 0
    names = {f"t{n:02}" for n in range(TEAMMATES)}
    expected = None
    unlisted = []
    for name, session in sessions.items():
        members = {(m.id, m.name, m.role) for m in session.members}
        # The host's console is attached too, and attached first: it is listed; of the fifty
        # teammates, the first forty-nine to attach are.
        assert [m.role for m in session.members].count("host") == 1
        assert {m.name for m in session.members if m.role != "host"} <= names
        assert len(members) == LISTED_MEMBERS == TEAMMATES
        expected = members if expected is None else expected
        assert members == expected
        # Each client knows which member it is, listed or not.
        you = [m for m in session.members if m.id == session.you]
        assert [m.name for m in you] in ([name], [])
        if not you:
            unlisted.append(name)
    assert len(unlisted) == TEAMMATES + 1 - LISTED_MEMBERS
