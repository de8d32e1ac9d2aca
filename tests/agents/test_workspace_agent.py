"""A hostile ACP agent against the host's file service (tests/agents/race_acp_agent.py): it swaps
a workspace folder for a symlink to a directory outside while it asks the host to read and write
through it. The host serves fs/* outside any sandbox, so the race is run sandboxed and not; both
times nothing outside may be read or written. Also: a terminal starts in the directory the host
checked, not in whatever its name leads to later."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tunnel.agents import AcpSession, create_session
from tunnel.agents.acp_terminals import Terminal, Terminals
from tunnel.agents.sandbox import Allowance, SandboxSettings, prepare_sandbox
from tunnel.log import Log

from .conftest import Recording, running

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

RACE_AGENT = Path(__file__).with_name("race_acp_agent.py")
SHELL_AGENT = Path(__file__).with_name("shell_acp_agent.py")
TRIES = 1000
"""Requests the agent makes for each of read and write while it swaps."""
SECRET = "-----BEGIN OPENSSH PRIVATE KEY-----\nfake, for the test\n"
REPLY_WAIT = 240.0
"""Seconds the agent may take to make all its requests on a busy machine."""


def session_for(script: Path, log: Log, workspace: Path, *, sandboxed: bool) -> AcpSession:
    argv = [sys.executable, str(script)]
    sandbox = None
    if sandboxed:
        # A home of its own: the real one (and what it holds) is none of the test's business.
        home = workspace.parent / "home"
        home.mkdir(exist_ok=True)
        # Python itself may live under the real home (pyenv), the venv and this checkout under
        # /tmp (a CI clone): all shown read-only.
        shown = (sys.base_prefix, sys.prefix, str(Path(__file__).resolve().parents[2]))
        settings = SandboxSettings(allow=tuple(Allowance.parse(f"{path}:ro") for path in shown))
        sandbox = prepare_sandbox(settings, argv=argv, workspace=workspace, home=str(home))
    spec = "acp:" + " ".join(argv)
    session = create_session(spec, log, workspace=workspace, conversation_id="c1", sandbox=sandbox)
    assert isinstance(session, AcpSession)
    return session


async def agent_reply(rec: Recording, count: int) -> str:
    """The text of the agent's `count`-th reply, however long the agent takes."""
    with anyio.fail_after(REPLY_WAIT):
        while True:
            replies = [i for i in rec.of_type("message") if i.data.get("role") == "agent"]
            if len(replies) >= count:
                return str(replies[count - 1].data["text"])
            assert rec.of_type("error") == []  # e.g. the agent could not start
            await anyio.sleep(0.05)


async def race(tmp_path: Path, log: Log, *, sandboxed: bool) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    outside = tmp_path / "dot-ssh"
    outside.mkdir()
    (outside / "secret").write_text(SECRET)
    before = (outside / "secret").stat()
    session = session_for(RACE_AGENT, log, workspace, sandboxed=sandboxed)
    results: dict[str, Any] = {}
    async with running(session, log) as rec:
        for n, op in enumerate(("read", "write"), start=1):
            await session.prompt(f"race {op} {TRIES} {outside}", by="alice")
            results[op] = json.loads(await agent_reply(rec, n))

    read, write = results["read"], results["write"]
    after = (outside / "secret").stat()
    escapes = {
        "outside bytes read": [text for text in read["seen"] if text != "inside\n"],
        "outside files made": sorted(set(os.listdir(outside)) - {"secret"}),
        "outside file changed": (outside / "secret").read_text() != SECRET
        or (after.st_ino, after.st_mtime_ns) != (before.st_ino, before.st_mtime_ns),
    }
    assert escapes == {
        "outside bytes read": [],
        "outside files made": [],
        "outside file changed": False,
    }
    # Every request was answered, and the folder flipped while the host resolved them: some
    # were served, some refused (the symlink leads out).
    for result in (read, write):
        assert sum(result["answers"].values()) == TRIES
        assert result["answers"]["error -32602"] > 0
        assert result["swaps"] > 0
    assert read["answers"]["read"] > 0
    assert write["answers"]["written"] > 0
    inside = workspace / ("d" if not (workspace / "d").is_symlink() else "d.other")
    assert (inside / "secret").read_text().startswith("written by the agent ")
    assert sorted(os.listdir(inside)) == ["secret"]  # no temporary file left behind


async def test_an_agent_swapping_a_folder_for_a_symlink_reads_and_writes_nothing_outside(
    log: Log, tmp_path: Path
) -> None:
    await race(tmp_path, log, sandboxed=False)


@pytest.mark.sandbox
async def test_a_sandboxed_agent_swapping_a_folder_for_a_symlink_reads_and_writes_nothing_outside(
    log: Log, tmp_path: Path, bwrap: str
) -> None:
    await race(tmp_path, log, sandboxed=True)


async def test_a_terminal_runs_in_an_inside_symlinked_folder_and_not_in_one_that_leaves(
    log: Log, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "in").symlink_to("sub")
    (workspace / "out").symlink_to(tmp_path)
    session = session_for(RACE_AGENT, log, workspace, sandboxed=False)
    async with running(session, log) as rec:
        await session.prompt("terminal in pwd -P", by="alice")
        assert await agent_reply(rec, 1) == f"{os.path.realpath(workspace / 'sub')}\n"
        await session.prompt("terminal out pwd -P", by="alice")
        assert await agent_reply(rec, 2) == "refused: -32602"
        refused = await rec.wait_item("session_event", what="terminal_refused")
        assert refused.data["cwd"] == "out"


async def test_a_terminal_starts_in_the_directory_checked_not_where_its_name_leads_later(
    tmp_path: Path,
) -> None:
    """Terminals.create gets the directory as an fd: renaming the name away after the check
    changes nothing."""
    checked, elsewhere = tmp_path / "checked", tmp_path / "elsewhere"
    checked.mkdir()
    elsewhere.mkdir()
    fd = os.open(checked, os.O_RDONLY | os.O_DIRECTORY)
    exited: list[Terminal] = []

    async def on_output(terminal: Terminal, text: str) -> None:
        pass

    async def on_exit(terminal: Terminal) -> None:
        exited.append(terminal)

    try:
        checked.rename(tmp_path / "moved")
        os.symlink(elsewhere, checked)  # the name now leads elsewhere
        async with anyio.create_task_group() as tg:
            terminals = Terminals(tg, on_output=on_output, on_exit=on_exit)
            # pwd, then the descriptors open in the command: its stdio only, no directory fd.
            terminal = await terminals.create(
                "sh",
                ["-c", "pwd -P; ls /proc/$$/fd"],
                cwd=str(checked),
                cwd_fd=fd,
                env={},
                output_byte_limit=None,
            )
            with anyio.fail_after(30):
                await terminal.exited.wait()
    finally:
        os.close(fd)
    assert terminal.text().splitlines() == [os.path.realpath(tmp_path / "moved"), "0", "1", "2"]
    assert terminal.exit_code == 0
    assert exited == [terminal]
