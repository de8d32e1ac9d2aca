"""The agent's context use and cost (`usage_update`): recorded as a `usage` session event when it
changes (tests/agents/fake_acp_agent.py reports it), and said in words in a terminal."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunnel.log import Log
from tunnel.terminal.render import render_item, usage_text

from .conftest import running
from .test_acp import acp_session

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_a_usage_report_is_recorded_once_per_change(log: Log, tmp_path: Path) -> None:
    session = acp_session(log, tmp_path)
    async with running(session, log) as rec:
        await session.prompt("usage", by="alice")
        usage = await rec.wait_item("session_event", what="usage")
        await rec.wait_item("message", role="agent")
        await session.prompt("usage", by="alice")  # the same numbers again
        await rec.wait_item("message", count=2, role="agent")
    assert (usage.created_by, usage.data) == (
        "agent",
        {
            "what": "usage",
            "used": 53000,
            "size": 200000,
            "cost": {"amount": 0.42, "currency": "USD"},
        },
    )
    assert [i.data.get("what") for i in rec.items].count("usage") == 1
    shown = render_item(usage.to_wire()).plain
    assert "context: 53k of 200k tokens used (26%), 147k left, cost 0.42 USD" in shown


def test_usage_text_takes_only_what_fits() -> None:
    assert usage_text({"used": 900}) == "context: 900 tokens used"
    assert usage_text({"used": "lots", "size": 10}) == "context: unknown"
    assert usage_text({"used": 5, "size": 10, "cost": {"amount": True}}) == (
        "context: 5 of 10 tokens used (50%), 5 left"
    )
