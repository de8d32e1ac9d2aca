"""The host signs its log's chain head after a turn and on shutdown: a real relay subprocess, a
sharing host with the demo agent, and `tunnel log export` and `verify` as real processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.log.helpers import tunnel
from tests.support import RelayProcess
from tunnel.app.follower import Event as FollowerEvent
from tunnel.app.follower import Item as FollowerItem
from tunnel.app.follower import SnapshotPage
from tunnel.app.requests import PermissionAnswer, Prompt, encode_request
from tunnel.log import SQLiteStore
from tunnel.log.chain import SignedHead, item_hash
from tunnel.log.item import Item
from tunnel.teammate.client import TeammateSession, connect_teammate

from .conftest import sharing

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def stored(db: Path) -> tuple[int, list[SignedHead]]:
    """The conversation's last seq and its signatures, read as another process would."""
    store = await SQLiteStore.open(db, readonly=True)
    try:
        info = await store.get_conversation("main")
        return (-1 if info is None else info.last_seq), await store.signatures("main")
    finally:
        await store.aclose()


async def wait_for_request(db: Path, *, after: int) -> str:
    """The request id of the first permission request stored after seq `after`."""
    with anyio.fail_after(30):
        while True:
            store = await SQLiteStore.open(db, readonly=True)
            try:
                found = await store.query("main", after=after, types=["permission_request"])
            finally:
                await store.aclose()
            if found:
                return str(found[0].data["request_id"])
            await anyio.sleep(0.05)


async def prompt_and_allow(teammate: TeammateSession, db: Path) -> None:
    """Join with no history, prompt the demo agent, and allow its tool call once."""
    await teammate.subscribe(tail=0)
    await teammate.send(encode_request(Prompt(text="hello")))
    request_id = await wait_for_request(db, after=-1)
    await teammate.send(
        encode_request(PermissionAnswer(request_id=request_id, option_id="allow_once"))
    )


async def test_the_host_signs_the_head_after_a_turn_and_on_shutdown(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    db = tmp_path / "log.db"
    async with sharing(relay.url, tmp_path, agent="demo", workspace=workspace) as shared:
        host_id = shared.host.identity.host_id
        async with connect_teammate(str(shared.host.drive_link), name="dave") as dave:
            await prompt_and_allow(dave, db)
            with anyio.fail_after(30):
                while True:
                    last, signatures = await stored(db)
                    if signatures and last >= 1 and signatures[-1].seq == last:
                        break
                    await anyio.sleep(0.05)

        first = signatures[-1]
        assert first.host_id == host_id
        assert first.valid()
        # A turn left waiting for a decision: its items are signed on shutdown.
        await shared.session.prompt("again", by="host")
        await wait_for_request(db, after=first.seq)
    last, signatures = await stored(db)
    assert signatures[-1].seq == last > first.seq

    exported = tunnel("log", "export", "main", "--db", str(db))
    assert exported.returncode == 0, exported.stderr
    path = tmp_path / "main.ndjson"
    path.write_text(exported.stdout)
    verified = tunnel("log", "verify", str(path), "--host-id", host_id, "--all-signed")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"chain intact; signed by host {host_id} up to seq {last}" in verified.stdout

    audit = tunnel("log", "audit", "--db", str(db))
    assert audit.returncode == 0, audit.stderr
    assert 'dave asked: "hello"' in audit.stdout
    assert "decided by dave: Allow once (allow_once)" in audit.stdout
    assert f"chain: signed by host {host_id} up to seq {last}" in audit.stdout


async def test_teammates_get_the_signed_head_and_a_joiner_can_check_the_items_it_holds(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    """The head is published to everyone attached after a turn; a joiner gets the latest one
    after its snapshot, with the hash its first item chains from, and the chain from there over
    the items it holds ends at the signed hash."""
    db = tmp_path / "log.db"
    async with sharing(relay.url, tmp_path, agent="demo", workspace=workspace) as shared:
        host_id = shared.host.identity.host_id
        async with connect_teammate(str(shared.host.drive_link), name="dave") as dave:
            await prompt_and_allow(dave, db)
            live = await next_head(dave)
            assert "anchor" not in live
            signed = SignedHead.from_wire({"kind": "head_signature", **live})
            assert signed.valid()
            assert signed.host_id == host_id

        async with connect_teammate(str(shared.host.view_link), name="vera") as vera:
            await vera.subscribe(tail=3)
            held: list[dict[str, Any]] = []
            head: dict[str, Any] | None = None
            with anyio.fail_after(30):
                while head is None:
                    message = await vera.receive()
                    if isinstance(message, SnapshotPage):
                        held += message.items
                    elif isinstance(message, FollowerItem):
                        held.append(message.item)
                    elif isinstance(message, FollowerEvent) and message.event["kind"] == "head":
                        head = dict(message.event["data"])
        assert len(held) == 3
        anchor = head.pop("anchor")
        assert anchor["seq"] == held[0]["seq"] - 1
        prev = bytes.fromhex(anchor["hash"])
        for wire in held:
            prev = item_hash(Item.from_wire(wire), prev)
        assert held[-1]["seq"] == head["seq"]
        assert prev.hex() == head["hash"]
        assert SignedHead.from_wire({"kind": "head_signature", **head}).valid()


async def next_head(session: TeammateSession) -> dict[str, Any]:
    with anyio.fail_after(30):
        while True:
            message = await session.receive()
            if isinstance(message, FollowerEvent) and message.event["kind"] == "head":
                return dict(message.event["data"])
