"""`--notify URL` and `--notify-command CMD` end to end: a sharing host (in process) behind a
real relay, a webhook receiver on loopback, and a command that writes down its environment."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from rich.console import Console

from tests.host.conftest import wait_online
from tests.host.teammate import attached
from tests.notify.hook_server import HookServer, hook_server
from tests.support import RelayProcess, host_settings
from tunnel.app.requests import PermissionAnswer, Prompt
from tunnel.host.share import Shared, ShareSettings, run_share
from tunnel.notify.settings import NotifySettings

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

DUMP = """\
import json, os, sys, uuid
env = {k: v for k, v in os.environ.items() if k.startswith("TUNNEL_")}
with open(os.path.join(sys.argv[1], uuid.uuid4().hex + ".json"), "w") as out:
    json.dump({"env": env, "argv": sys.argv[2:]}, out)
"""


@contextlib.asynccontextmanager
async def sharing(
    relay: RelayProcess,
    tmp_path: Path,
    workspace: Path,
    notify: NotifySettings,
    agents: tuple[tuple[str, str], ...] = (),
) -> AsyncIterator[Shared]:
    settings = ShareSettings(
        host=host_settings(relay.url, tmp_path),
        agents=agents,
        workspace=workspace,
        log_db=tmp_path / "log.db",
        interactive=False,
        demo_delay=0,
        notify=notify,
    )
    async with anyio.create_task_group() as tg:

        async def share(*, task_status: anyio.abc.TaskStatus[Shared]) -> None:
            with open(os.devnull, "w") as sink:
                await run_share(settings, console=Console(file=sink), task_status=task_status)

        shared: Shared = await tg.start(share)
        await wait_online(shared.host.view_link)
        try:
            yield shared
        finally:
            tg.cancel_scope.cancel()


async def one_turn(
    shared: Shared, answer: str = "allow_once", conversation: str | None = None
) -> dict[str, Any]:
    """A driver prompts and answers the one request; returns the request item."""
    async with attached(shared.host.drive_link, "dan", conversation=conversation) as dan:
        await dan.wait_for(lambda t: t.snapshot_done)
        await dan.send(Prompt(text="count the lines"))
        await dan.wait_for(lambda t: t.item_of("permission_request") is not None)
        request = dan.item_of("permission_request")
        assert request is not None
        await dan.send(PermissionAnswer(request_id=request["data"]["request_id"], option_id=answer))
        await dan.wait_for(lambda t: t.item_of("tool_result") is not None)
        return request


def events(server: HookServer, path: str) -> list[dict[str, Any]]:
    return [json.loads(post.body) for post in server.to(path)]


async def test_webhooks_say_what_happened_and_not_what_was_asked(
    relay: RelayProcess, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    # A file name that is a shell command: it reaches the command's environment as text only.
    pwned = f"pwned-{secrets.token_hex(4)}"
    (workspace / f"$(touch {pwned}).py").write_text("print(1)\n")
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "dump.py"
    script.write_text(DUMP)
    async with hook_server() as server:
        server.statuses["/fail"] = 500
        notify = NotifySettings(
            push=False,
            webhooks=(
                server.url("/hook?token=s3cret"),
                server.url("/fail"),
                "ntfy+" + server.url("/topic"),
            ),
            command=shlex.join([sys.executable, str(script), str(out), "$(touch", f"{pwned})"]),
            reminder=0,
        )
        async with sharing(relay, tmp_path, workspace, notify) as shared:
            request = await one_turn(shared)
            await server.wait_for(lambda s: len(s.to("/hook?token=s3cret")) == 3)
            waiting, decided, ended = events(server, "/hook?token=s3cret")
            request_id = request["data"]["request_id"]
            assert waiting == {
                "v": 1,
                "event": "waiting",
                "host": shared.host.host_id,
                "conversation": "main",
                "time": waiting["time"],
                "request_id": request_id,
                "kind": "read",
                "answer": ["host", "drivers"],
            }
            assert decided["event"] == "decided"
            assert decided["outcome"] == "selected"
            assert decided["option_kind"] == "allow_once"
            assert decided["by"] == "dan"
            assert ended["event"] == "turn_ended"
            # Content-free: neither the title nor the file it names went out.
            assert not any(pwned.encode() in post.body for post in server.posts)

            # A receiver that keeps failing gets each event a bounded number of times, in
            # order: three tries of the first before the first try of the next.
            await server.wait_for(lambda s: len(s.to("/fail")) >= 4)
            tries = [json.loads(post.body)["event"] for post in server.to("/fail")]
            assert tries[:4] == ["waiting", "waiting", "waiting", "decided"]

            # ntfy's form: plain text, its headers.
            await server.wait_for(lambda s: len(s.to("/topic")) == 3)
            first = server.to("/topic")[0]
            assert first.headers["title"] == "agent-tunnel: approval needed"
            assert first.headers["priority"] == "high"
            assert first.headers["content-type"].startswith("text/plain")
            assert first.body.decode() == "A permission request (read) waits for an answer."

            # The command ran once per event, with the details, and no shell ran anything.
            with anyio.fail_after(20):
                while len(list(out.iterdir())) < 3:
                    await anyio.sleep(0.05)
            runs = [json.loads(p.read_text()) for p in out.iterdir()]
            by_event = {run["env"]["TUNNEL_EVENT"]: run for run in runs}
            assert set(by_event) == {"waiting", "decided", "turn_ended"}
            env = by_event["waiting"]["env"]
            assert env["TUNNEL_REQUEST_ID"] == request_id
            assert env["TUNNEL_KIND"] == "read"
            assert env["TUNNEL_ANSWER"] == "host,drivers"
            assert f"$(touch {pwned}).py" in env["TUNNEL_TITLE"]
            assert by_event["waiting"]["argv"] == ["$(touch", f"{pwned})"]
        for place in (Path.cwd(), tmp_path, workspace, out):
            assert not (place / pwned).exists()


async def test_details_go_out_only_when_the_host_asks(relay: RelayProcess, tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "README.md").write_text("one\n")
    async with hook_server() as server:
        notify = NotifySettings(
            push=False,
            webhooks=(server.url("/hook"), "ntfy+" + server.url("/topic")),
            details=True,
            reminder=0,
        )
        async with sharing(relay, tmp_path, workspace, notify) as shared:
            await one_turn(shared, answer="reject_once")
            await server.wait_for(lambda s: len(s.to("/hook")) == 3 and len(s.to("/topic")) == 3)
            waiting = events(server, "/hook")[0]
            assert "README.md" in waiting["title"]
            assert waiting["command"] is None
            assert "README.md" in server.to("/topic")[0].body.decode()
            assert events(server, "/hook")[1]["option_kind"] == "reject_once"


async def test_a_conversation_a_driver_started_notifies_under_its_own_id(
    relay: RelayProcess, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    async with hook_server() as server:
        notify = NotifySettings(push=False, webhooks=(server.url("/hook"),), reminder=0)
        agents = (("demo", "demo"), ("other", "demo"))
        async with sharing(relay, tmp_path, workspace, notify, agents) as shared:
            assert shared.conversations is not None
            second = await shared.conversations.start("other", by="dan")
            request = await one_turn(shared, conversation=second.id)
            await server.wait_for(lambda s: len(s.to("/hook")) == 3)
            waiting, decided, ended = events(server, "/hook")
            assert waiting["conversation"] == second.id
            assert waiting["request_id"] == request["data"]["request_id"]
            assert decided["conversation"] == second.id
            assert ended["conversation"] == second.id
            # Closed: its agent stops and nothing more is told of it.
            await shared.conversations.close(second.id, by="dan")
            await one_turn(shared)
            await server.wait_for(lambda s: len(s.to("/hook")) == 6)
            assert [e["conversation"] for e in events(server, "/hook")[3:]] == ["main"] * 3
