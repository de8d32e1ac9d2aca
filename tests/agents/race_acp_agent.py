"""A hostile ACP agent for the file service's tests: `python race_acp_agent.py`.

Prompted `race read N OUTSIDE` or `race write N OUTSIDE`, it makes the folder `d` of its
workspace flip between a real directory (holding `secret`) and a symlink to OUTSIDE, as fast as
a thread can exchange the two names (renameat2 RENAME_EXCHANGE: `d` is always one or the other),
while it asks the host N times to read (or write) `d/secret` through
fs/read_text_file (fs/write_text_file). It answers with one JSON line: what it was told back
(`seen`: each distinct content read, `answers`: how many of each kind), and how many swaps the
thread made while it asked. What the host did outside the workspace, the test checks itself.

Prompted `terminal CWD COMMAND`, it has the host run `sh -c COMMAND` in CWD (terminal/create)
and answers with its output, or `refused: CODE`.

It runs sandboxed or not; either way the host serves its file requests outside any sandbox.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import json
import os
import sys
import threading
from typing import Any, cast

import acp
from acp import schema
from shell_acp_agent import ShellAgent  # beside this script, which Python puts on sys.path

MAX_SWAPS = 10_000_000
"""The swapping thread stops after this many swaps even if the requests never end."""

AT_FDCWD = -100
RENAME_EXCHANGE = 2

IN_FLIGHT = 4
"""Requests asked at once, so some are always being resolved while the thread swaps."""


class RaceAgent(ShellAgent):
    """The shell agent's handshake and session, with prompts of its own."""

    name = "race-agent"

    async def prompt(
        self, session_id: str, prompt: list[Any], **kwargs: Any
    ) -> schema.PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt).strip()
        words = text.split(" ", 3)
        if len(words) == 4 and words[0] == "race" and words[1] in ("read", "write"):
            said = await self._race(session_id, words[1], int(words[2]), words[3])
        elif len(words) >= 3 and words[0] == "terminal":
            said = await self._terminal(session_id, words[1], " ".join(words[2:]))
        else:
            said = f"echo: {text}"
        await self.client.session_update(session_id, acp.update_agent_message_text(said))
        return schema.PromptResponse(stop_reason="end_turn")

    async def _race(self, sid: str, op: str, count: int, outside: str) -> str:
        folder = os.path.join(self.cwd, "d")
        other = folder + ".other"
        if not os.path.lexists(folder):
            os.mkdir(folder)
            os.symlink(outside, other)
        real = other if os.path.islink(folder) else folder
        with open(os.path.join(real, "secret"), "w") as file:
            file.write("inside\n")
        stop = threading.Event()
        swaps = [0]
        thread = threading.Thread(target=_swap, args=(folder, other, stop, swaps))
        thread.start()
        answers: collections.Counter[str] = collections.Counter()
        seen: set[str] = set()
        path = os.path.join(folder, "secret")
        todo = iter(range(count))

        async def ask() -> None:
            for n in todo:
                try:
                    if op == "read":
                        read = await self.client.read_text_file(session_id=sid, path=path)
                        seen.add(read.content)
                        answers["read"] += 1
                        if read.content != "inside\n":
                            answers["read something else"] += 1
                    else:
                        content = f"written by the agent {n}\n"
                        await self.client.write_text_file(
                            session_id=sid, path=path, content=content
                        )
                        answers["written"] += 1
                except acp.RequestError as exc:
                    answers[f"error {exc.code}"] += 1

        try:
            await asyncio.gather(*(ask() for _ in range(IN_FLIGHT)))
        finally:
            stop.set()
            thread.join()
        return json.dumps({"seen": sorted(seen), "answers": answers, "swaps": swaps[0]})

    async def _terminal(self, sid: str, cwd: str, command: str) -> str:
        try:
            terminal = await self.client.create_terminal(
                session_id=sid, command="sh", args=["-c", command], cwd=cwd
            )
        except acp.RequestError as exc:
            return f"refused: {exc.code}"
        tid = terminal.terminal_id
        await self.client.wait_for_terminal_exit(session_id=sid, terminal_id=tid)
        result = await self.client.terminal_output(session_id=sid, terminal_id=tid)
        await self.client.release_terminal(session_id=sid, terminal_id=tid)
        return str(result.output)


def _swap(folder: str, other: str, stop: threading.Event, swaps: list[int]) -> None:
    """Exchange the directory at `folder` and the symlink at `other`, again and again."""
    libc = ctypes.CDLL(None, use_errno=True)
    names = os.fsencode(other), os.fsencode(folder)
    while not stop.is_set() and swaps[0] < MAX_SWAPS:
        if libc.renameat2(AT_FDCWD, names[0], AT_FDCWD, names[1], RENAME_EXCHANGE) != 0:
            raise OSError(ctypes.get_errno(), "renameat2")
        swaps[0] += 1


async def main() -> None:
    await acp.run_agent(cast(acp.Agent, RaceAgent()))


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
