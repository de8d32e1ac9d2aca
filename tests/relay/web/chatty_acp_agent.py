"""An ACP agent for the browser tests, run as `python chatty_acp_agent.py` over stdio.

On a prompt it keeps working until cancelled (or for a few minutes): every few milliseconds a
tool call titled with the prompt's first word and a line of streamed text saying it, so a page
that shows two of its conversations in turn can tell each one's items apart.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import acp
from acp import schema
from markup_acp_agent import MarkupAgent  # beside this script, which Python puts on sys.path

STEPS = 6000
PAUSE = 0.03


class ChattyAgent(MarkupAgent):
    """The markup agent's handshake and session, with a long prompt of its own."""

    name = "chatty-agent"

    def __init__(self) -> None:
        super().__init__()
        self.cancelled = False

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled = True

    async def prompt(
        self, session_id: str, prompt: list[Any], **kwargs: Any
    ) -> schema.PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt).strip()
        tag = (text.split() or ["?"])[0]
        self.cancelled = False
        for step in range(STEPS):
            if self.cancelled:
                return schema.PromptResponse(stop_reason="cancelled")
            call = acp.start_tool_call(
                f"{tag}-{step}", f"{tag} step {step}", kind="read", status="completed"
            )
            await self.client.session_update(session_id, call)
            await self.client.session_update(
                session_id, acp.update_agent_message_text(f"{tag} says {step}. ")
            )
            await asyncio.sleep(PAUSE)
        return schema.PromptResponse(stop_reason="end_turn")


async def main() -> None:
    agent: Any = ChattyAgent()
    await acp.run_agent(agent)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
