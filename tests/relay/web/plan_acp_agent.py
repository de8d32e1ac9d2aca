"""An ACP agent for the browser tests, run as `python plan_acp_agent.py` over stdio.

On a prompt it asks as Claude's adapter (0.101.0) asks to leave plan mode: a tool call whose
content is the plan, then a permission request for that call with `content: []` and
`rawInput: {}`. Then it asks about a tool it never showed before (as Gemini and Qwen do), with a
title and kind, and afterwards updates that call without them.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import acp
from acp import schema
from markup_acp_agent import MarkupAgent  # beside this script, which Python puts on sys.path

PLAN = "## The plan\n\n1. Read the notes\n2. Write the summary"
OPTIONS = [
    schema.PermissionOption(option_id="yes", name="Yes", kind="allow_once"),
    schema.PermissionOption(option_id="no", name="No", kind="reject_once"),
]


class PlanAgent(MarkupAgent):
    """The markup agent's handshake and session, with a prompt of its own."""

    name = "plan-agent"

    async def prompt(
        self, session_id: str, prompt: list[Any], **kwargs: Any
    ) -> schema.PromptResponse:
        await self.client.session_update(
            session_id,
            acp.start_tool_call(
                "plan-1",
                "Ready to code?",
                kind="switch_mode",
                status="pending",
                content=[acp.tool_content(acp.text_block(PLAN))],
                raw_input={"plan": PLAN},
            ),
        )
        await self.client.request_permission(
            session_id=session_id,
            tool_call=schema.ToolCallUpdate(tool_call_id="plan-1", content=[], raw_input={}),
            options=OPTIONS,
        )
        await self.client.request_permission(
            session_id=session_id,
            tool_call=schema.ToolCallUpdate(
                tool_call_id="fresh-1", title="Run the fresh tool", kind="execute"
            ),
            options=OPTIONS,
        )
        await self.client.session_update(
            session_id, acp.update_tool_call("fresh-1", status="completed")
        )
        await self.client.session_update(session_id, acp.update_agent_message_text("done"))
        return schema.PromptResponse(stop_reason="end_turn")


async def main() -> None:
    # The acp.Agent protocol lists every optional method too; this agent needs only a few.
    agent: Any = PlanAgent()
    await acp.run_agent(agent)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
