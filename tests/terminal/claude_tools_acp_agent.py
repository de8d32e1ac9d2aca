"""An ACP agent that reports its tools as Claude Code's adapter does, run as
`python claude_tools_acp_agent.py` over stdio.

- `read`: a Read and a Bash call whose results are text wrapped in code fences;
- `edit`: an edit whose diff comes with the call, with its permission request and again with its
  end;
- `wait`: a Bash call that stays pending until the turn is cancelled; the turn ends `cancelled`
  and the call is said to have failed just after (as Claude's adapter reports an interrupted
  tool); `wait quietly`: the same, and no update ever ends the call.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import acp
from acp import schema

READ_RESULT = "```\n1  def f():\n2      return '<b>[bold]x[/bold]</b>'\n```"
BASH_RESULT = "```console\n$ echo hi\nhi\n```"
OPTIONS = [
    schema.PermissionOption(option_id="yes", name="Yes", kind="allow_once"),
    schema.PermissionOption(option_id="no", name="No", kind="reject_once"),
]


class ClaudeToolsAgent:
    def __init__(self) -> None:
        self.client: Any = None
        self.cancelled = asyncio.Event()
        self.late: set[asyncio.Task[None]] = set()

    def on_connect(self, conn: Any) -> None:
        self.client = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_info=schema.Implementation(name="claude-tools-agent", version="1.0"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id=f"s{os.getpid()}")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled.set()

    async def prompt(
        self, session_id: str, prompt: list[Any], **kwargs: Any
    ) -> schema.PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt)
        send = self.client.session_update
        if text == "read":
            for call_id, title, kind, result in (
                ("read-1", "Read notes.py", "read", READ_RESULT),
                ("bash-1", "echo hi", "execute", BASH_RESULT),
            ):
                await send(session_id, acp.start_tool_call(call_id, title, kind=kind))
                await send(
                    session_id,
                    acp.update_tool_call(
                        call_id,
                        status="completed",
                        content=[acp.tool_content(acp.text_block(result))],
                    ),
                )
        elif text == "edit":
            diff = acp.tool_diff_content("a.py", "y = 2\n", "x = 1\n")
            await send(
                session_id,
                acp.start_tool_call("edit-1", "Write a.py", kind="edit", content=[diff]),
            )
            await self.client.request_permission(
                session_id=session_id,
                tool_call=schema.ToolCallUpdate(tool_call_id="edit-1", content=[diff]),
                options=OPTIONS,
            )
            await send(
                session_id, acp.update_tool_call("edit-1", status="completed", content=[diff])
            )
        elif text in ("wait", "wait quietly"):
            self.cancelled.clear()
            await send(session_id, acp.start_tool_call("bash-2", "sleep 60", kind="execute"))
            await self.cancelled.wait()
            if text == "wait quietly":
                return schema.PromptResponse(stop_reason="cancelled")

            async def late() -> None:
                await asyncio.sleep(0.3)
                await send(session_id, acp.update_tool_call("bash-2", status="failed"))

            task = asyncio.ensure_future(late())
            self.late.add(task)
            task.add_done_callback(self.late.discard)
            return schema.PromptResponse(stop_reason="cancelled")
        await send(session_id, acp.update_agent_message_text("done"))
        return schema.PromptResponse(stop_reason="end_turn")


async def main() -> None:
    # The acp.Agent protocol lists every optional method too; this agent needs only a few.
    agent: Any = ClaudeToolsAgent()
    await acp.run_agent(agent)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
