"""An ACP agent whose one tool is a shell, for the sandbox tests: `python shell_acp_agent.py`.

- `run: COMMAND`: runs COMMAND with `sh -c` in its own process (as an agent's Bash tool does) in
  the session's cwd and says what it printed.
- `terminal: COMMAND`: has the client run it instead, through ACP terminal/create (as agents do
  when the client offers terminals), and says what it printed.
- anything else: echoes it back.

It is a separate script from fake_acp_agent.py so that the sandbox tests depend on nothing but
these two prompts.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any, cast

import acp
from acp import schema


class ShellAgent:
    name = "shell-agent"
    """How the agent introduces itself; the other scripted agents of the tests reuse the rest."""

    def __init__(self) -> None:
        self.client: Any = None
        self.cwd = ""

    def on_connect(self, conn: Any) -> None:
        self.client = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_info=schema.Implementation(name=self.name, version="1.0"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> schema.NewSessionResponse:
        self.cwd = cwd
        return schema.NewSessionResponse(session_id=f"s{os.getpid()}")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        pass

    async def prompt(
        self, session_id: str, prompt: list[Any], **kwargs: Any
    ) -> schema.PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt).strip()
        how, _, command = text.partition(": ")
        if how == "run":
            said = await self._run(command)
        elif how == "terminal":
            said = await self._terminal(session_id, command)
        else:
            said = f"echo: {text}"
        await self.client.session_update(session_id, acp.update_agent_message_text(said))
        return schema.PromptResponse(stop_reason="end_turn")

    async def _run(self, command: str) -> str:
        process = await asyncio.create_subprocess_exec(
            "sh",
            "-c",
            command,
            cwd=self.cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await process.communicate()
        return output.decode(errors="replace")

    async def _terminal(self, sid: str, command: str) -> str:
        terminal = await self.client.create_terminal(
            session_id=sid, command="sh", args=["-c", command], cwd=self.cwd
        )
        await self.client.wait_for_terminal_exit(session_id=sid, terminal_id=terminal.terminal_id)
        result = await self.client.terminal_output(session_id=sid, terminal_id=terminal.terminal_id)
        await self.client.release_terminal(session_id=sid, terminal_id=terminal.terminal_id)
        return str(result.output)


async def main() -> None:
    await acp.run_agent(cast(acp.Agent, ShellAgent()))


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
