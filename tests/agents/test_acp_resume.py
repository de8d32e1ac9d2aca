"""Which earlier ACP session the host resumes, and how long a Gemini CLI load waits first."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tunnel.agents import AcpSession
from tunnel.agents.acp_agent import _next_minute_wait
from tunnel.agents.acp_origin import OwnSession
from tunnel.log import Log, NewItem

pytestmark = pytest.mark.anyio


def _started(at: str, session_id: str, *, resumed: bool, agent_id: str = "gemini-cli") -> NewItem:
    data = {"what": "agent_started", "agent_id": agent_id, "session_id": session_id}
    return NewItem(
        type="session_event",
        data={**data, "resumed": resumed},
        created_by="host",
        created_at=datetime.fromisoformat(at).replace(tzinfo=UTC),
    )


def _session(log: Log, workspace: Path) -> AcpSession:
    argv = [sys.executable, "-c", "pass"]
    return AcpSession(argv=argv, log=log, workspace=workspace, conversation_id="c1")


async def test_the_latest_session_is_resumed_and_dated_by_its_creation(
    log: Log, workspace: Path
) -> None:
    await log.append(
        "c1",
        [
            _started("2026-12-02T10:00:10", "old", resumed=False),
            _started("2026-12-02T10:05:50", "s1", resumed=False),
            _started("2026-12-02T10:06:20", "s1", resumed=True),
            _started("2026-12-02T10:09:00", "s1", resumed=True),
        ],
    )
    found = await _session(log, workspace)._origin("gemini-cli")
    created = datetime(2026, 12, 2, 10, 5, 50, tzinfo=UTC).timestamp()
    assert isinstance(found, OwnSession)
    assert (found.session_id, found.created) == ("s1", created)


async def test_a_session_of_another_agent_is_not_resumed(log: Log, workspace: Path) -> None:
    await log.append("c1", _started("2026-12-02T10:00:10", "s1", resumed=False))
    assert await _session(log, workspace)._origin("claude-agent-acp") is None


def test_a_load_in_the_minute_the_session_was_created_waits_for_the_next() -> None:
    created = 600.0 + 50  # 10 s before a minute ends
    assert _next_minute_wait(created, created + 4) == pytest.approx(6.5)
    assert _next_minute_wait(created, 660.0) == 0.0
    assert _next_minute_wait(created, 7200.0) == 0.0
