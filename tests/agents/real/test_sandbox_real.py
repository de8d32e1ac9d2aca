"""What a drive link can make a real agent's own shell reach on the host, with and without
`tunnel host --sandbox` (docs/security.md, "What a drive link can do on the host's machine").

A driver prompts Claude Code or Gemini CLI through a real relay; the fake model answers with a
call of the agent's shell tool (Claude's Bash, Gemini's run_shell_command) that runs
tests/host/sandbox_probe.sh, and the driver allows it once from `tunnel attach`. The probe's
answers are read from the tool result the agent sent back to the model. The machine is the one of
tests/host/test_sandbox_share.py: a fake SSH key in the home directory, the host key and share
secrets in ~/.config/agent-tunnel (shown read-only with the rest of ~/.config), the log database
in a writable allowance, a read-only allowance, a directory outside everything, a setuid copy of
`id`. Unconfined, every attempt the machine allows succeeds, so what fails in the sandbox fails
because of the sandbox; sandboxed, each attempt fails while the workspace stays readable and
writable.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.host.teammate import Teammate
from tests.host.test_sandbox_share import (
    Machine,
    assert_confined,
    assert_everything_outside_changed,
    assert_nothing_outside_changed,
    expected_unconfined,
    results,
)

from .conftest import (
    CLAUDE,
    GEMINI,
    Agent,
    Session,
    StartSession,
    agent_said,
    agents_bin,
    ask,
    decisions,
    permission_requests,
    shown,
)
from .model_server import ModelServer, Text, ToolCall, reply

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.agents_real,
    pytest.mark.sandbox,
    pytest.mark.timeout(120),
]

SHELL_TOOLS = {"claude": "Bash", "gemini": "run_shell_command"}
WAIT = 60.0
"""Seconds a turn (the agent started in its sandbox, two model rounds, the probe) may take."""


@pytest.fixture
def machine(tmp_path: Path) -> Iterator[Machine]:
    with socket.create_server(("127.0.0.1", 0), backlog=16) as server:
        made = Machine(tmp=tmp_path, port=server.getsockname()[1])
        made.make()
        yield made


@pytest.fixture
def workspace(machine: Machine) -> Path:
    """The `share` fixture's workspace: the machine's, which `Machine.make` fills."""
    return machine.workspace


def probe_command(machine: Machine) -> str:
    key = machine.key_file
    # With --key-file the share secrets live beside the key (docs/security.md).
    secrets = key.with_name(key.name + ".secrets")
    args = (key, secrets, machine.log_db, machine.shared, machine.elsewhere, machine.port)
    return "bash probe.sh " + " ".join(str(a) for a in args)


def sandbox_args(machine: Machine) -> list[str]:
    # The agents' executables live in the cache under the real home directory, hidden too.
    agents_dir = agents_bin().parent.parent
    return [
        "--sandbox",
        *("--sandbox-allow", f"{machine.home / '.config'}:ro"),  # holds the host key
        *("--sandbox-allow", str(machine.data)),  # holds the log database
        *("--sandbox-allow", f"{machine.shared}:ro"),
        *("--sandbox-allow", f"{agents_dir}:ro"),
    ]


async def probe(
    session: Session, vera: Teammate, model: ModelServer, machine: Machine, key: str
) -> dict[str, bool]:
    """Have the agent run the probe with its shell tool, allowed once by a driver in `tunnel
    attach`; the probe's answers as the agent sent them back to the model."""
    tool = SHELL_TOOLS[session.agent.name]
    model.script(
        key,
        reply(ToolCall(tool, {"command": probe_command(machine)})),
        reply(Text(f"{key} done.")),
    )
    alice = session.attach("alice")
    await alice.output.wait_for(r"attached as alice \(drive\)")
    mark = ask(alice, key)
    await shown(alice, mark)
    alice.type("/allow")
    await vera.wait_for(agent_said(f"{key} done."), within=WAIT)
    assert len(permission_requests(vera)) == 1
    assert [d["option_kind"] for d in decisions(vera)] == ["allow_once"]
    [result] = model.tool_results(key)
    assert result.name == tool
    assert "RESULT done yes" in result.output, result.output
    return results(result.output)


@pytest.mark.parametrize("agent", [CLAUDE, GEMINI], ids=lambda a: a.name)
async def test_an_unconfined_real_agents_shell_reaches_everything_its_user_can(
    agent: Agent, share: StartSession, model: ModelServer, machine: Machine
) -> None:
    async with (
        share(agent, key_file=machine.key_file, log_db=machine.log_db) as session,
        session.teammate("vera") as vera,
    ):
        found = await probe(session, vera, model, machine, "PROBE-UNCONFINED")
    expected = expected_unconfined(machine)
    assert {name: found[name] for name in expected} == expected
    assert found["workspace_read"]
    assert found["workspace_write"]
    assert found["allowed_config"]
    assert found["connect"]
    assert_everything_outside_changed(machine)


@pytest.mark.parametrize("agent", [CLAUDE, GEMINI], ids=lambda a: a.name)
async def test_a_sandboxed_real_agents_shell_reaches_only_the_workspace_and_what_was_allowed(
    agent: Agent, share: StartSession, model: ModelServer, machine: Machine, bwrap: str
) -> None:
    async with (
        share(
            agent, *sandbox_args(machine), key_file=machine.key_file, log_db=machine.log_db
        ) as session,
        session.teammate("vera") as vera,
    ):
        found = await probe(session, vera, model, machine, "PROBE-SANDBOXED")
        assert vera.ready is not None
        assert vera.ready["sandbox"]["enabled"] is True
    assert_confined(found, machine, bwrap)
    assert found["connect"]  # the network is the host's by default: the agent calls its model
    assert_nothing_outside_changed(machine)
