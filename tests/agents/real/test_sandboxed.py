"""The real agents under `tunnel host --sandbox`: their own tools reach the workspace and nothing
else of the machine (docs/agents.md, "The sandbox"), and they still work.

The agents' executables live in the cache under the home directory, which the sandbox hides, so
the tests show them read-only with `--sandbox-allow`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import (
    CLAUDE,
    CODEX,
    GEMINI,
    Agent,
    StartSession,
    agent_said,
    agents_bin,
    ask,
    decisions,
    shown,
)
from .model_server import ModelServer, Text, ToolCall, reply

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.agents_real,
    pytest.mark.sandbox,
    pytest.mark.timeout(120),
]


def shell_call(agent: Agent, command: str) -> ToolCall:
    """A call of `agent`'s shell tool running `command`. Codex's asks to leave Codex's own
    sandbox (which cannot start inside ours: docs/agents.md, "Tested with"), so it asks."""
    if agent.name == "codex":
        escalated = {"sandbox_permissions": "require_escalated", "justification": "Write"}
        return ToolCall("exec_command", {"cmd": command, **escalated})
    tool = {"claude": "Bash", "gemini": "run_shell_command"}[agent.name]
    return ToolCall(tool, {"command": command})


@pytest.mark.parametrize("agent", [CLAUDE, GEMINI, CODEX], ids=lambda a: a.name)
async def test_a_sandboxed_agents_shell_writes_the_workspace_and_not_outside(
    agent: Agent,
    share: StartSession,
    model: ModelServer,
    workspace: Path,
    tmp_path: Path,
    bwrap: str,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    command = f"echo inside > shell.txt; echo escaped > {outside}/escaped.txt; echo ran"
    model.script(
        "SANDBOXED",
        reply(shell_call(agent, command)),
        reply(Text("SANDBOXED done.")),
    )
    agents_dir = agents_bin().parent.parent
    async with (
        share(agent, "--sandbox", "--sandbox-allow", f"{agents_dir}:ro") as session,
        session.teammate("vera") as vera,
    ):
        alice = session.attach("alice")
        await alice.output.wait_for(r"attached as alice \(drive\)")
        mark = ask(alice, "SANDBOXED")
        await shown(alice, mark)
        alice.type("/allow")
        await vera.wait_for(agent_said("SANDBOXED done."))
        assert decisions(vera)[0]["option_kind"] == "allow_once"
        assert (workspace / "shell.txt").read_text() == "inside\n"
        # The host's /tmp is not the agent's: the write outside the workspace went nowhere here.
        assert list(outside.iterdir()) == []
