"""A small ACP agent for the tests, run as `python fake_acp_agent.py` over stdio.

What it does depends on the prompt:
- `work`: thinks, plans, says hello, proposes a tool call and asks permission; if allowed it reads
  notes.txt, writes out.txt, then tries to write outside the workspace three ways (`..`, an
  absolute path, the symlink `escape`) and reports each refusal; if rejected it says so.
- `count N`: streams N numbered chunks as fast as it can.
- `wait`: streams until cancelled, then ends the turn with stop reason `cancelled`.
- `crash`: exits at once with code 3.
- anything else: echoes it back.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any, cast

import acp
from acp import schema


class FakeAgent:
    def __init__(self) -> None:
        self.client: Any = None
        self.cwd = ""
        self.cancelled: dict[str, asyncio.Event] = {}

    def on_connect(self, conn: Any) -> None:
        self.client = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_info=schema.Implementation(name="fake-agent", version="1.0"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> schema.NewSessionResponse:
        self.cwd = cwd
        return schema.NewSessionResponse(session_id=f"s{os.getpid()}")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled.setdefault(session_id, asyncio.Event()).set()

    async def prompt(
        self, session_id: str, prompt: list[Any], **kwargs: Any
    ) -> schema.PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt).strip()
        self.cancelled[session_id] = asyncio.Event()
        if text == "crash":
            os._exit(3)
        if text == "work":
            await self._work(session_id)
        elif text.startswith("count "):
            for i in range(int(text.split()[1])):
                await self._say(session_id, f"{i},")
        elif text == "wait":
            for _ in range(2000):  # 20 s at most
                await self._say(session_id, ".")
                try:
                    await asyncio.wait_for(self.cancelled[session_id].wait(), 0.01)
                except TimeoutError:
                    continue
                return schema.PromptResponse(stop_reason="cancelled")
        else:
            await self._say(session_id, f"echo: {text}")
        return schema.PromptResponse(stop_reason="end_turn")

    async def _say(self, session_id: str, text: str) -> None:
        await self.client.session_update(session_id, acp.update_agent_message_text(text))

    async def _think(self, session_id: str, text: str) -> None:
        await self.client.session_update(session_id, acp.update_agent_thought_text(text))

    async def _plan(self, session_id: str, done: int) -> None:
        entries = [
            acp.plan_entry(step, status="completed" if i < done else "pending")
            for i, step in enumerate(("read notes", "write out"))
        ]
        await self.client.session_update(session_id, acp.update_plan(entries))

    async def _work(self, sid: str) -> None:
        await self._think(sid, "Let me ")
        await self._think(sid, "think.")
        await self._plan(sid, 0)
        await self._say(sid, "Hello ")
        await self._say(sid, "there.")
        notes = os.path.join(self.cwd, "notes.txt")
        await self.client.session_update(
            sid,
            acp.start_read_tool_call("call_1", "Read notes.txt", notes),
        )
        answer = await self.client.request_permission(
            session_id=sid,
            tool_call=schema.ToolCallUpdate(tool_call_id="call_1", title="Read notes.txt"),
            options=[
                schema.PermissionOption(option_id="yes", name="Allow", kind="allow_once"),
                schema.PermissionOption(option_id="no", name="Reject", kind="reject_once"),
            ],
        )
        outcome = answer.outcome
        if outcome.outcome != "selected" or outcome.option_id != "yes":
            await self.client.session_update(sid, acp.update_tool_call("call_1", status="failed"))
            await self._say(sid, f"Not allowed ({outcome.outcome}).")
            return
        read = await self.client.read_text_file(session_id=sid, path=notes)
        await self.client.session_update(
            sid,
            acp.update_tool_call(
                "call_1",
                status="completed",
                content=[acp.tool_content(acp.text_block(read.content))],
            ),
        )
        await self.client.write_text_file(
            session_id=sid, path=os.path.join(self.cwd, "out.txt"), content=read.content.upper()
        )
        outside = os.path.dirname(self.cwd)
        for path in (
            os.path.join(self.cwd, "..", "escape-dotdot.txt"),
            os.path.join(outside, "escape-absolute.txt"),
            os.path.join(self.cwd, "escape", "escape-symlink.txt"),
        ):
            try:
                await self.client.write_text_file(session_id=sid, path=path, content="pwned")
            except acp.RequestError as exc:
                await self._say(sid, f"refused: {exc}\n")
            else:
                await self._say(sid, f"WROTE {path}\n")
        await self._plan(sid, 2)
        await self._say(sid, "Done.")


async def main() -> None:
    await acp.run_agent(cast(acp.Agent, FakeAgent()))


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
