"""A real ACP agent shared through a real relay: drivers co-drive, viewers only watch."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import RelayProcess
from tunnel.app.requests import PermissionAnswer, Prompt

from .conftest import acp_spec, sharing
from .teammate import Teammate, attached

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


def _done(teammate: Teammate) -> bool:
    return teammate.item_of("message", role="agent", text="Done.") is not None


async def test_drivers_and_viewer_see_the_same_items_and_only_drivers_act(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    async with (
        sharing(relay.url, tmp_path, agent=acp_spec(), workspace=workspace) as shared,
        attached(str(shared.host.drive_link), "alice") as alice,
        attached(str(shared.host.drive_link), "bob") as bob,
        attached(str(shared.host.view_link), "vera") as vera,
    ):
        await vera.wait_for(lambda t: len(t.presence) > 0 and len(t.presence[-1]) == 4)
        assert {(m["name"], m["role"]) for m in vera.presence[-1]} == {
            ("host", "host"),
            ("alice", "drive"),
            ("bob", "drive"),
            ("vera", "view"),
        }
        assert vera.ready is not None
        assert vera.ready["role"] == "view"

        # The viewer cannot prompt: refused, and nothing is recorded.
        await vera.send(Prompt(text="rm -rf everything"))
        await vera.wait_for(lambda t: t.errors)
        assert vera.errors[0]["code"] == "forbidden"

        await alice.send(Prompt(text="work"))
        await alice.wait_for(lambda t: t.item_of("permission_request") is not None)
        request = alice.item_of("permission_request")
        assert request is not None
        request_id = request["data"]["request_id"]

        # The viewer cannot answer either; alice answers first and wins; bob is told.
        await vera.send(PermissionAnswer(request_id=request_id, option_id="no"))
        await vera.wait_for(lambda t: len(t.errors) == 2)
        await alice.send(PermissionAnswer(request_id=request_id, option_id="yes"))
        await alice.wait_for(lambda t: t.item_of("permission_decision") is not None)
        await bob.send(PermissionAnswer(request_id=request_id, option_id="no"))
        await bob.wait_for(lambda t: t.errors)
        assert bob.errors[0]["code"] == "already_answered"

        for teammate in (alice, bob, vera):
            await teammate.wait_for(_done)
        stored = await shared.log.query("main", limit=1000)

    # Everyone saw exactly what is stored, in order, once.
    wire = [item.to_wire() for item in stored]
    for teammate in (alice, bob, vera):
        assert teammate.items == wire[: len(teammate.items)]
        assert teammate.seqs() == list(range(len(teammate.items)))
    assert alice.items == bob.items == vera.items

    by = [(item.type, item.created_by) for item in stored if item.type in ("message",)]
    assert ("message", "vera") not in by
    decision = next(item for item in stored if item.type == "permission_decision")
    assert (decision.created_by, decision.data["option_id"]) == ("alice", "yes")

    # The agent wrote inside the workspace and nowhere else.
    assert (workspace / "out.txt").read_text() == "REMEMBER THE MILK\n"
    refusals = [item for item in stored if item.data.get("what") == "fs_refused"]
    assert len(refusals) == 3
    assert list((tmp_path / "elsewhere").iterdir()) == []


async def test_a_teammate_that_reconnects_with_after_sees_no_gap_and_no_duplicate(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    async with (
        sharing(relay.url, tmp_path, agent=acp_spec(), workspace=workspace) as shared,
        attached(str(shared.host.drive_link), "alice") as alice,
    ):
        for i in range(6):
            await alice.send(Prompt(text=f"hello {i}"))
        seen: list[dict[str, object]] = []
        async with attached(str(shared.host.view_link), "vera") as vera:
            await vera.wait_for(lambda t: len(t.items) >= 3)
            seen.extend(vera.items)
        # Disconnected mid-stream; the conversation goes on without vera.
        last = seen[-1]["seq"]
        assert isinstance(last, int)
        async with attached(str(shared.host.view_link), "vera", after=last) as vera:
            await vera.wait_for(
                lambda t: t.item_of("message", role="agent", text="echo: hello 5") is not None
            )
            seen.extend(vera.items)
        await alice.wait_for(
            lambda t: t.item_of("message", role="agent", text="echo: hello 5") is not None
        )
    seqs = [item["seq"] for item in seen]
    assert seqs == list(range(len(seqs)))
    assert seen == alice.items[: len(seen)]
