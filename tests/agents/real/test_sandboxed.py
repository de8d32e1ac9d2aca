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

SHELL_TOOLS = {"claude": "Bash", "gemini": "run_shell_command"}


@pytest.mark.parametrize("agent", [CLAUDE, GEMINI], ids=lambda a: a.name)
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
        reply(ToolCall(SHELL_TOOLS[agent.name], {"command": command})),
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
