"""A `tunnel host` process of two demo agents, "demo" and "other", behind a real relay, and what
the conversation tests ask of it and of its teammates."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tests.host.host_process import HostProcess
from tests.host.teammate import Teammate
from tests.support import RelayProcess
from tunnel.app.requests import NewConversation


def replies(teammate: Teammate) -> list[str]:
    """The texts of the prompts `teammate` has seen answered or sent (every message but the
    agent's own)."""
    return [
        str(item["data"].get("text", ""))
        for item in teammate.items
        if item["type"] == "message" and item["created_by"] != "agent"
    ]


def two_agent_host(relay: RelayProcess, tmp_path: Path, *extra: str) -> HostProcess:
    """The host, not started: `--agent demo=demo --agent other=demo`, no console, then `extra`."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    return HostProcess(
        relay.url,
        tmp_path,
        agent="demo=demo",
        workspace=workspace,
        log_db=tmp_path / "log.db",
        interactive=False,
        extra=("--agent", "other=demo", *extra),
    )


@contextlib.contextmanager
def serving(tmp_path: Path, *extra: str) -> Iterator[tuple[RelayProcess, HostProcess]]:
    """A relay and `two_agent_host` on it, started; both stopped when the block ends."""
    relay = RelayProcess(tmp_path).start()
    host = two_agent_host(relay, tmp_path, *extra)
    try:
        host.start()
        yield relay, host
    finally:
        host.stop()
        relay.stop()


async def start_conversation(driver: Teammate, agent: str = "other") -> str:
    """Have `driver` start a conversation of `agent`; its id, once the host says it started."""
    before = len(driver.started)
    await driver.send(NewConversation(agent=agent))
    await driver.wait_for(lambda t: len(t.started) > before)
    return driver.started[before]
