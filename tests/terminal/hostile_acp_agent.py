"""An ACP agent for the terminal tests whose every word is hostile: run as
`python hostile_acp_agent.py` over stdio.

Each string it controls is `<label>` followed by the whole corpus of tests/terminal/hostile.py,
so a test can check that a surface showed it (the label) and showed it inert (no control
character). Its modes and models have hostile names, its commands hostile names and
descriptions. For every prompt it thinks, plans, echoes the prompt, makes a tool call (title,
location, raw input, text and diff content), completes it, sends an update of an unknown kind
and runs a command whose output and arguments are hostile. Then:
- a prompt with `ask` in it also asks permission (hostile title, option names and ids; the
  allow-once option's id is `ok`) and says `chose <id>`;
- a prompt with `fail` in it fails with a hostile JSON-RPC error;
- every prompt ends by saying `turn over`.
Switching to the mode `trap` is refused with a hostile error.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any, cast

import acp
from acp import schema
from acp.agent.connection import AgentSideConnection
from acp.helpers import update_available_commands

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from tests.terminal.hostile import WIRE


def h(label: str) -> str:
    """A hostile string that says where it was put."""
    return f"<{label}>{WIRE}"


# A command line may not hold NUL: the command's own argument carries the rest.
ARGUMENT = h("terminal-arg").replace("\x00", "")
SCRIPT = (
    "import os, sys; out = os.fsencode(sys.argv[1]);"
    " sys.stdout.buffer.write(out.replace(b'<terminal-arg>', b'<terminal-out>'))"
)


class HostileAgent:
    def __init__(self) -> None:
        self.client: Any = None
        self.cwd = ""
        self.advertising: asyncio.Future[None] | None = None

    def on_connect(self, conn: Any) -> None:
        self.client = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_info=schema.Implementation(name=h("agent-name"), version="1.0"),
            agent_capabilities=schema.AgentCapabilities(),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> dict[str, Any]:
        self.cwd = cwd
        self.advertising = asyncio.ensure_future(self._advertise("s-1"))
        return {
            "sessionId": "s-1",
            "modes": {
                "currentModeId": "default",
                "availableModes": [
                    {"id": "default", "name": h("mode-name")},
                    {"id": "trap", "name": h("trap-mode-name")},
                ],
            },
            "models": {
                "currentModelId": "fast",
                "availableModels": [{"modelId": "fast", "name": h("model-name")}],
            },
        }

    async def _advertise(self, session_id: str) -> None:
        await asyncio.sleep(0.01)  # after the response, as real agents do
        await self.client.session_update(
            session_id,
            update_available_commands(
                [schema.AvailableCommand(name=h("command-name"), description=h("command-desc"))]
            ),
        )

    async def set_session_mode(self, session_id: str, mode_id: str, **kwargs: Any) -> None:
        raise acp.RequestError(-32603, h("refusal"), {h("refusal-key"): h("refusal-data")})

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        pass

    async def prompt(
        self, session_id: str, prompt: list[Any], **kwargs: Any
    ) -> schema.PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt)
        update = self.client.session_update
        await update(session_id, acp.update_agent_thought_text(h("thought")))
        await update(session_id, acp.update_plan([acp.plan_entry(h("plan"))]))
        await update(session_id, acp.update_agent_message_text(f"echo: {text}{h('message')}"))
        await update(session_id, self._tool_call())
        await update(
            session_id,
            acp.update_tool_call(
                "call_h",
                status="completed",
                content=[acp.tool_content(acp.text_block(h("result")))],
            ),
        )
        await self.client._conn.send_notification(
            "session/update",
            {"sessionId": session_id, "update": {"sessionUpdate": h("update-kind")}},
        )
        await self._terminal(session_id)
        if "ask" in text:
            answer = await self.client.request_permission(
                session_id=session_id,
                tool_call=schema.ToolCallUpdate(tool_call_id="call_p", title=h("permission")),
                options=[
                    schema.PermissionOption(
                        option_id="ok", name=h("allow-name"), kind="allow_once"
                    ),
                    schema.PermissionOption(
                        option_id=h("reject-id"), name=h("reject-name"), kind="reject_once"
                    ),
                ],
            )
            outcome = answer.outcome
            chosen = outcome.option_id if outcome.outcome == "selected" else "cancelled"
            await update(session_id, acp.update_agent_message_text(f"chose {chosen}"))
        if "fail" in text:
            raise acp.RequestError(-32603, h("failure"), {h("failure-key"): h("failure-data")})
        await update(session_id, acp.update_agent_message_text(" turn over"))
        return schema.PromptResponse(stop_reason="end_turn")

    def _tool_call(self) -> Any:
        path = os.path.join(self.cwd, "notes.txt")
        return acp.start_tool_call(
            "call_h",
            h("tool-title"),
            kind="edit",
            status="pending",
            locations=[schema.ToolCallLocation(path=h("location"), line=1)],
            raw_input={h("input-key"): h("input-value")},
            content=[
                acp.tool_content(acp.text_block(h("content"))),
                acp.tool_diff_content(path, h("diff-new"), h("diff-old")),
            ],
        )

    async def _terminal(self, sid: str) -> None:
        created = await self.client.create_terminal(
            session_id=sid, command=sys.executable, args=["-c", SCRIPT, ARGUMENT]
        )
        await self.client.wait_for_terminal_exit(session_id=sid, terminal_id=created.terminal_id)
        await self.client.release_terminal(session_id=sid, terminal_id=created.terminal_id)


async def main() -> None:
    agent = HostileAgent()
    output, input_ = await acp.stdio_streams(limit=50 * 1024 * 1024)
    conn = AgentSideConnection(cast(acp.Agent, agent), input_, output, listening=False)
    await conn.listen()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
