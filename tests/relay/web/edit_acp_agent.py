"""An ACP agent for the browser tests, run as `python edit_acp_agent.py` over stdio.

On a prompt it writes `src/app.py` (300 lines) and `notes.txt` in its workspace, then reports: a
read of `src/app.py` at line 120 (a location), a location outside the workspace (/etc/passwd),
an edit of `src/app.py` as a snippet (line 150 alone, as Claude's adapter sends one), and an edit
of `notes.txt` as the whole file before and after (a change at line 20 of 40).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import acp
from acp import schema
from markup_acp_agent import MarkupAgent  # beside this script, which Python puts on sys.path

NOTES_BEFORE = "".join(f"note {n}\n" for n in range(1, 41))
NOTES_AFTER = NOTES_BEFORE.replace("note 20\n", "note twenty\n")


class EditAgent(MarkupAgent):
    name = "edit-agent"

    def __init__(self) -> None:
        super().__init__()
        self.cwd = "."

    async def new_session(self, cwd: str, **kwargs: Any) -> schema.NewSessionResponse:
        self.cwd = cwd
        return schema.NewSessionResponse(session_id=f"s{os.getpid()}")

    async def prompt(
        self, session_id: str, prompt: list[Any], **kwargs: Any
    ) -> schema.PromptResponse:
        root = Path(self.cwd)
        (root / "src").mkdir(exist_ok=True)
        lines = [f"line {n}" for n in range(1, 301)]
        lines[149] = "value = 150 changed"
        (root / "src" / "app.py").write_text("\n".join(lines) + "\n")
        (root / "notes.txt").write_text(NOTES_AFTER)
        app = str(root / "src" / "app.py")
        updates = [
            acp.start_tool_call(
                "read-1",
                "Read src/app.py",
                kind="read",
                status="completed",
                locations=[schema.ToolCallLocation(path=app, line=120)],
            ),
            acp.start_tool_call(
                "read-2",
                "Read the passwords",
                kind="read",
                status="completed",
                locations=[schema.ToolCallLocation(path="/etc/passwd", line=1)],
            ),
            acp.start_tool_call(
                "edit-1",
                "Edit src/app.py",
                kind="edit",
                status="completed",
                content=[acp.tool_diff_content(app, "value = 150 changed", "value = 150")],
            ),
            acp.start_tool_call(
                "edit-2",
                "Edit notes.txt",
                kind="edit",
                status="completed",
                content=[acp.tool_diff_content(str(root / "notes.txt"), NOTES_AFTER, NOTES_BEFORE)],
            ),
        ]
        for update in updates:
            await self.client.session_update(session_id, update)
        await self.client.session_update(session_id, acp.update_agent_message_text("edited"))
        return schema.PromptResponse(stop_reason="end_turn")


async def main() -> None:
    agent: Any = EditAgent()
    await acp.run_agent(agent)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
