"""Fixtures of the sharing tests: a relay subprocess and a shared session on loopback."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from rich.console import Console

from tests.support import host_settings
from tests.support import wait_online as net_wait_online
from tunnel.app.host_messages import Ready
from tunnel.e2e.crypto import ShareLink
from tunnel.host.share import Shared, ShareSettings, run_share
from tunnel.teammate.client import TeammateSession

FAKE_ACP_AGENT = Path(__file__).resolve().parents[1] / "agents" / "fake_acp_agent.py"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    (path / "notes.txt").write_text("remember the milk\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (path / "escape").symlink_to(elsewhere)
    return path


def acp_spec() -> str:
    return f"acp:{sys.executable} {FAKE_ACP_AGENT}"


@contextlib.asynccontextmanager
async def sharing(
    relay_url: str, tmp_path: Path, *, agent: str, workspace: Path, conversation: str = "main"
) -> AsyncIterator[Shared]:
    """Run `run_share` in the background (no console input) until the block ends."""
    settings = ShareSettings(
        host=host_settings(relay_url, tmp_path),
        agent=agent,
        workspace=workspace,
        log_db=tmp_path / "log.db",
        conversation_id=conversation,
        interactive=False,
        demo_delay=0,
    )
    async with anyio.create_task_group() as tg:
        shared: Shared = await tg.start(_share, settings)
        await wait_online(shared.host.view_link)
        try:
            yield shared
        finally:
            tg.cancel_scope.cancel()


async def _share(settings: ShareSettings, *, task_status: anyio.abc.TaskStatus[Shared]) -> None:
    with open(os.devnull, "w") as sink:
        await run_share(settings, console=Console(file=sink), task_status=task_status)


async def _ready_probe(session: TeammateSession) -> None:
    assert isinstance(await session.receive(), Ready)


async def wait_online(link: str | ShareLink) -> None:
    """Wait until the relay routes `link` to a sharing host: its first message is `ready`."""
    await net_wait_online(link, probe=_ready_probe)
