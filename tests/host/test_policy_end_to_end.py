"""The approval policy through a real relay and a `tunnel host --policy FILE` process with the
demo agent: a two-person rule naming alice and bob (invited by name), a viewer and another
driver refused (a role link cannot even take an invited name: its channel is refused)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.support import RelayProcess
from tunnel.app.requests import PermissionAnswer, Prompt

from .conftest import wait_online
from .host_process import HostProcess
from .teammate import Teammate, attached

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

POLICY = """\
# The demo agent's tool reads: two of alice and bob must allow it.
[[rule]]
verdict = "ask"
kind = "read"
answer = ["alice", "bob"]
approvals = 2
"""


def errors(teammate: Teammate) -> list[str]:
    return [error["code"] for error in teammate.errors]


async def test_two_named_people_must_approve_and_nobody_else_may(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    policy = tmp_path / "team.toml"
    policy.write_text(POLICY)
    host = HostProcess(
        relay.url, tmp_path, workspace=workspace, log_db=tmp_path / "log.db", interactive=False
    )
    # Alice and bob are invited by name: a rule naming people counts their personal links only
    # (a name typed on the drive link is anyone's).
    host.command += ["--policy", str(policy), "--invite", "alice:drive", "--invite", "bob:drive"]
    await anyio.to_thread.run_sync(host.start)
    try:
        alice_link = host.wait_output(r"drive link for alice:\s+(\S+)").group(1)
        bob_link = host.wait_output(r"drive link for bob:\s+(\S+)").group(1)
        await wait_online(host.view_link)
        async with (
            attached(alice_link, "a") as alice,
            attached(bob_link, "b") as bob,
            attached(host.drive_link, "mallory") as mallory,
            attached(host.view_link, "vera") as vera,
        ):
            await alice.wait_for(lambda t: t.snapshot_done)
            await alice.send(Prompt(text="count the lines"))
            await vera.wait_for(lambda t: t.item_of("permission_request") is not None)
            request = vera.item_of("permission_request")
            assert request is not None
            approval = request["data"]["approval"]
            assert approval["answer"] == ["alice", "bob"]
            assert approval["approvals"] == 2
            assert approval["rule"]["line"] == 2
            request_id = request["data"]["request_id"]
            allow = PermissionAnswer(request_id=request_id, option_id="allow_once")

            await vera.send(allow)
            await vera.wait_for(lambda t: errors(t) == ["forbidden"])
            await mallory.send(allow)
            await mallory.wait_for(lambda t: errors(t) == ["forbidden"])

            await alice.send(allow)
            await vera.wait_for(lambda t: t.item_of("permission_approval") is not None)
            approved = vera.item_of("permission_approval")
            assert approved is not None
            assert approved["created_by"] == "alice"
            assert approved["data"]["approved_by"] == ["alice"]
            assert approved["data"]["needed"] == 1
            await alice.send(allow)
            await alice.wait_for(lambda t: errors(t) == ["already_answered"])
            assert vera.item_of("permission_decision") is None

            await bob.send(allow)
            await vera.wait_for(lambda t: t.item_of("tool_result") is not None)
            decision = vera.item_of("permission_decision")
            assert decision is not None
            assert decision["created_by"] == "bob"
            assert decision["data"]["approved_by"] == ["alice", "bob"]
            result = vera.item_of("tool_result")
            assert result is not None
            assert result["data"]["ok"] is True
            assert bob.errors == []
    finally:
        host.kill()


async def test_read_only_lets_the_demo_agent_read_and_records_the_rule(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    host = HostProcess(
        relay.url, tmp_path, workspace=workspace, log_db=tmp_path / "log.db", interactive=False
    )
    host.command += ["--approvals", "read-only"]
    await anyio.to_thread.run_sync(host.start)
    try:
        await wait_online(host.view_link)
        host.wait_output("under the approval policy preset:read-only")
        async with attached(host.drive_link, "alice") as alice:
            await alice.wait_for(lambda t: t.snapshot_done)
            await alice.send(Prompt(text="count the lines"))
            await alice.wait_for(lambda t: t.item_of("tool_result") is not None)
            decision = alice.item_of("permission_decision")
            assert decision is not None
            assert decision["created_by"] == "policy"
            assert decision["data"]["option_kind"] == "allow_once"
            assert decision["data"]["policy"] == {
                "source": "preset:read-only",
                "index": 1,
                "rule": 'verdict = "allow", kind = ["read", "search", "think"]',
            }
    finally:
        host.kill()
