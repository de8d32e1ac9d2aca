"""The built-in demo agent: no network, no key, and every kind of item shows up.

Each prompt gets a plan, some streamed reasoning, a streamed reply, and a tool call that needs
permission. Once a driver allows it, the agent runs a harmless, read-only tool in the workspace
(counts the lines of the README or of the biggest Python file, or lists the files) and reports the
result; if the driver rejects it, the agent says so.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from tunnel.log import Log

from .base import AgentInfo
from .chat import ChatSession, Prompt
from .permissions import POLICY, PermissionOption
from .recorder import Channel, new_id
from .workspace import OutsideWorkspace, Workspace

DEFAULT_DELAY = 0.03
"""Seconds between streamed chunks: lively for a human watching, 0 makes tests instant."""

MAX_WALK_ENTRIES = 5000
"""Directory entries the demo looks at when it searches for a Python file."""

SKIPPED_DIRS = frozenset({".git", ".venv", "venv", "node_modules", "__pycache__", ".tox"})
README_NAMES = ("README.md", "README.rst", "README.txt", "README")

ALLOW = PermissionOption(option_id="allow_once", name="Allow once", kind="allow_once")
REJECT = PermissionOption(option_id="reject_once", name="Reject", kind="reject_once")


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoTool:
    """What the demo proposes to run."""

    title: str
    kind: str
    input: dict[str, Any] = field(default_factory=dict)
    path: str | None = None
    """The file whose lines are counted, relative to the workspace; None lists the workspace."""

    @property
    def action(self) -> str:
        """The title as the middle of a sentence; file names keep their case."""
        return self.title[:1].lower() + self.title[1:]


def choose_tool(workspace: Workspace) -> DemoTool:
    """Pick the file to count lines of: the README, else the biggest .py file, else none."""
    for name in README_NAMES:
        try:
            os.close(workspace.open_file(name))
        except (OutsideWorkspace, OSError, ValueError):
            continue
        return DemoTool(
            title=f"Count the lines of {name}", kind="read", input={"path": name}, path=name
        )
    biggest = _biggest_python_file(workspace)
    if biggest is not None:
        return DemoTool(
            title=f"Count the lines of {biggest}",
            kind="read",
            input={"path": biggest},
            path=biggest,
        )
    return DemoTool(title="List the files of the workspace", kind="read", input={"path": "."})


def run_tool(workspace: Workspace, tool: DemoTool) -> tuple[bool, str]:
    """Run the chosen tool; (ok, output). Read-only and bounded."""
    try:
        if tool.path is None:
            names = sorted(os.listdir(workspace.root))
            shown = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
            return True, f"{len(names)} entries: {shown}" if names else "the workspace is empty"
        count = _count_lines(workspace, tool.path)
        noun = "line" if count == 1 else "lines"
        return True, f"{tool.path} has {count} {noun}"
    except (OutsideWorkspace, ValueError) as exc:
        return False, f"could not run: {exc}"
    except OSError as exc:
        return False, f"could not run: {exc.strerror or exc}"


def _count_lines(workspace: Workspace, path: str) -> int:
    lines = 0
    last = b"\n"
    # Opened through the workspace: the file may have been swapped for a symlink since chosen.
    with os.fdopen(workspace.open_file(path), "rb") as file:
        while chunk := file.read(1 << 16):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (0 if last == b"\n" else 1)


def _biggest_python_file(workspace: Workspace) -> str | None:
    """The biggest .py file, relative to the workspace; symlinks are skipped."""
    best: tuple[int, str] | None = None
    seen = 0
    for top, dirs, files in os.walk(workspace.root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith("."))
        for name in sorted(files):
            seen += 1
            if seen > MAX_WALK_ENTRIES:
                return best[1] if best else None
            if not name.endswith(".py"):
                continue
            path = os.path.join(top, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode) and (best is None or info.st_size > best[0]):
                best = (info.st_size, workspace.relative(path))
    return best[1] if best else None


def _chunks(text: str) -> Iterator[str]:
    """Word-sized pieces, spaces kept, so the reply appears to type itself."""
    start = 0
    for index, char in enumerate(text):
        if char == " " and index > start:
            yield text[start : index + 1]
            start = index + 1
    if start < len(text):
        yield text[start:]


def _plan(done: int) -> list[dict[str, str]]:
    steps = ("Read the request", "Run a harmless tool in the workspace", "Report the result")
    return [
        {
            "content": step,
            "status": "completed" if i < done else "in_progress" if i == done else "pending",
            "priority": "medium",
        }
        for i, step in enumerate(steps)
    ]


class DemoSession(ChatSession):
    """The built-in agent of `tunnel host --agent demo`."""

    def __init__(
        self,
        *,
        log: Log,
        workspace: Path,
        conversation_id: str,
        delay: float = DEFAULT_DELAY,
    ) -> None:
        super().__init__(
            info=AgentInfo(name="demo", kind="chat"), log=log, conversation_id=conversation_id
        )
        self._workspace = Workspace(workspace)
        self._delay = delay

    async def _run_turn(self, prompt: Prompt) -> None:
        recorder = self._recorder
        await recorder.plan(_plan(0))
        quoted = prompt.text.strip().splitlines()[0][:80]
        await self._stream(
            "reasoning",
            f'{prompt.by} asked: "{quoted}". I am the demo agent, so I cannot really do that. '
            "I will show what a turn looks like: look at the workspace and run a harmless tool, "
            "after asking for permission.",
        )
        tool = await anyio.to_thread.run_sync(choose_tool, self._workspace)
        await self._stream(
            "message",
            f"Hello {prompt.by}! I am a demo agent with no model behind me. "
            f"I would like to **{tool.action}**; I need permission first.",
        )
        await recorder.plan(_plan(1))
        tool_call_id = new_id("call")
        await recorder.tool_call(
            tool_call_id=tool_call_id, title=tool.title, kind=tool.kind, input=tool.input
        )
        pending = await self._permissions.open(
            title=f"Allow the demo agent to {tool.action}?",
            tool_call_id=tool_call_id,
            options=(ALLOW, REJECT),
            # The tool call asked about, as ACP agents' requests carry it.
            details={
                "tool_call": {
                    "tool_call_id": tool_call_id,
                    "title": tool.title,
                    "kind": tool.kind,
                    "status": "pending",
                    "input": tool.input,
                }
            },
        )
        decision = await self._permissions.wait(pending) if pending is not None else None
        if decision is None or decision.option is None:
            await recorder.tool_call_update(tool_call_id, {"status": "failed"})
            return
        if not decision.allowed:
            await recorder.tool_call_update(tool_call_id, {"status": "failed"})
            await recorder.tool_result(
                tool_call_id, ok=False, output=f"not run: {decision.by} rejected it"
            )
            who = "The approval policy" if decision.by == POLICY else decision.by
            await self._stream("message", f"{who} said no, so I did not {tool.action}.")
            await recorder.plan(_plan(3))
            return
        await recorder.tool_call_update(tool_call_id, {"status": "in_progress"})
        ok, output = await anyio.to_thread.run_sync(run_tool, self._workspace, tool)
        content = [{"type": "text", "text": output}]
        await recorder.tool_call_update(
            tool_call_id, {"status": "completed" if ok else "failed", "content": content}
        )
        await recorder.tool_result(tool_call_id, ok=ok, output=output)
        await recorder.plan(_plan(2))
        reply = f"Done: {output}." if ok else f"The tool failed: {output}."
        thanks = (
            "The approval policy allowed it."
            if decision.by == POLICY
            else f"Thanks, {decision.by}, for allowing it."
        )
        await self._stream("message", f"{reply} {thanks}")
        await recorder.plan(_plan(3))
        await recorder.usage(
            {"update": "usage", "words_in": len(prompt.text.split()), "tools_run": 1}
        )

    async def _stream(self, channel: Channel, text: str) -> None:
        for chunk in _chunks(text):
            await self._recorder.delta(channel, chunk)
            if self._delay > 0:
                await anyio.sleep(self._delay)
        await self._recorder.flush()
