"""An ACP agent for the browser tests, run as `python markup_acp_agent.py` over stdio.

Every reply carries hostile markup (an image with an onerror handler, javascript: links, a
script tag) around the prompt it got, so the tests can check that agent output renders inert.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import acp
from acp import schema

HOSTILE = (
    '<img src=x onerror="window.__pwned = 1"> '
    "[click me](javascript:window.__pwned=2) "
    '<a href="javascript:window.__pwned=3">raw link</a> '
    "<script>window.__pwned = 4</script> "
)


class MarkupAgent:
    name = "markup-agent"
    """How the agent introduces itself; the other scripted agents of the page's tests reuse the
    rest (the handshake and the session)."""

    def __init__(self) -> None:
        self.client: Any = None

    def on_connect(self, conn: Any) -> None:
        self.client = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_info=schema.Implementation(name=self.name, version="1.0"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id=f"s{os.getpid()}")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        return None

    async def prompt(
        self, session_id: str, prompt: list[Any], **kwargs: Any
    ) -> schema.PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt).strip()
        for chunk in (HOSTILE, f"You said: {text} ", "**END**"):
            await self.client.session_update(session_id, acp.update_agent_message_text(chunk))
        return schema.PromptResponse(stop_reason="end_turn")


async def main() -> None:
    # The acp.Agent protocol lists every optional method too; this agent needs only a few.
    agent: Any = MarkupAgent()
    await acp.run_agent(agent)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
