"""Replay links end to end: a relay and `tunnel host` as subprocesses, Python teammates.

`/share-replay` at the host console mints a read-only link to one conversation up to a seq: its
channel gets exactly those items and nothing after them, drives nothing, is shown to nobody,
and `/revoke NAME` ends it like a personal link (docs/security.md, "Replay links").
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.host.host_process import HostProcess
from tests.host.teammate import Teammate, attached
from tests.support import RelayProcess
from tunnel.app.requests import (
    Cancel,
    ListConversations,
    NewConversation,
    PermissionAnswer,
    Prompt,
    Subscribe,
)
from tunnel.e2e.crypto import ShareLink
from tunnel.process.groups import unwrap_group
from tunnel.teammate.client import RevokedError, UnauthorizedError

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

REPLAY_LINE = r"replay link (\S+) \((\S+) up to item (-?\d+)\): (\S+)"


def _host(relay: RelayProcess, tmp_path: Path) -> HostProcess:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    (workspace / "README.md").write_text("one\ntwo\n")
    return HostProcess(
        relay.url,
        tmp_path,
        agent="demo=demo",
        workspace=workspace,
        log_db=tmp_path / "log.db",
        extra=("--agent", "other=demo"),
    )


async def _printed(host: HostProcess, pattern: str, *, after: int = 0) -> re.Match[str]:
    """The first match of `pattern` in what the host printed past character `after`; polled
    so that the teammates' channels keep being served meanwhile."""
    with anyio.fail_after(30):
        while True:
            match = re.compile(pattern).search(host.output(), after)
            if match is not None:
                return match
            await anyio.sleep(0.05)


async def _share_replay(host: HostProcess, line: str) -> tuple[str, str, int, str]:
    """Type `line` (a /share-replay) and return the link's name, conversation, upto and link."""
    mark = len(host.output())
    host.type(line)
    match = await _printed(host, REPLAY_LINE, after=mark)
    return match.group(1), match.group(2), int(match.group(3)), match.group(4)


async def _turn(driver: Teammate, text: str) -> int:
    """Prompt, allow the demo agent's tool call, and return the seq of that decision."""
    await driver.send(Prompt(text=text))

    def asked(t: Teammate) -> dict[str, Any] | None:
        """The permission request no decision answers yet."""
        decided = {
            i["data"].get("request_id") for i in t.items if i["type"] == "permission_decision"
        }
        waiting = [
            i
            for i in t.items
            if i["type"] == "permission_request" and i["data"]["request_id"] not in decided
        ]
        return waiting[0] if waiting else None

    await driver.wait_for(lambda t: asked(t) is not None)
    request = asked(driver)
    assert request is not None
    request_id = request["data"]["request_id"]
    await driver.send(PermissionAnswer(request_id=request_id, option_id="allow_once"))
    await driver.wait_for(
        lambda t: t.item_of("permission_decision", request_id=request_id) is not None
    )
    decided = driver.item_of("permission_decision", request_id=request_id)
    assert decided is not None
    return int(decided["seq"])


async def test_a_replay_link_shows_exactly_its_items_nothing_live_and_cannot_drive(
    tmp_path: Path,
) -> None:
    relay = RelayProcess(tmp_path).start()
    host = _host(relay, tmp_path)
    try:
        host.start()
        async with attached(host.drive_link, "ann", conversation="main") as ann:
            await ann.wait_for(lambda t: t.snapshot_done)
            decided = await _turn(ann, "first question")
            name, conversation, upto, link = await _share_replay(
                host, f"/share-replay main {decided}"
            )
            assert (name, conversation, upto) == ("replay-main-1", "main", decided)
            assert ShareLink.parse(link).role == "view"
            expected = [i for i in ann.items if i["seq"] <= upto]

            async with attached(link, "rita", conversation="main") as rita:
                await rita.wait_for(lambda t: t.snapshot_done)
                assert rita.ready is not None
                assert rita.ready["replay"] == {"conversation": "main", "upto": upto}
                assert rita.ready["conversation_id"] == "main"
                # The name is the link's, whatever the client sent; it only views.
                assert (rita.ready["name"], rita.ready["verified"]) == ("replay-main-1", True)
                assert rita.ready["role"] == "view"
                assert rita.seqs() == list(range(upto + 1))
                assert [i["id"] for i in rita.items] == [i["id"] for i in expected]

                # More happens in the conversation: the replay gets nothing of it.
                later = await _turn(ann, "second question")
                assert later > upto
                # A request answered proves everything sent before it has arrived.
                await rita.send(Prompt(text="let me drive"))
                await rita.wait_for(lambda t: len(t.errors) == 1)
                assert rita.seqs() == list(range(upto + 1))
                assert rita.events == []
                assert rita.presence == []
                assert rita.listing is None

                # Nothing that drives, manages or lists is served; every answer is forbidden.
                for request in (
                    Cancel(),
                    NewConversation(agent="demo"),
                    ListConversations(),
                ):
                    await rita.send(request)
                await rita.wait_for(lambda t: len(t.errors) == 4)
                assert {e["code"] for e in rita.errors} == {"forbidden"}
                assert not [i for i in ann.items if "let me drive" in str(i["data"])]
                # History stops at the replay's last item, whatever it asks for.
                page = await rita.session.history(later + 1, limit=5)
                assert [i["seq"] for i in page.items] == list(range(upto - 4, upto + 1))
                # And the replay is shown to nobody.
                names = {m.name for m in ann.session.members}
                assert "replay-main-1" not in names
                assert "rita" not in names

                # Without a seq, the conversation as it stands.
                mark = len(host.output())
                host.type("/people")
                await _printed(
                    host,
                    rf"replay-main-1 \(replay of main up to item {upto}\): attached",
                    after=mark,
                )
                other_name, _, head, other_link = await _share_replay(host, "/share-replay")
                assert other_name == "replay-main-2"
                assert head >= later
                async with attached(other_link, "ro") as ro:
                    await ro.wait_for(lambda t: t.snapshot_done)
                    assert ro.seqs() == list(range(head + 1))

            async def revoked() -> None:
                async with unwrap_group(), attached(link, "rita") as rita:
                    await rita.wait_for(lambda t: t.snapshot_done)
                    host.type("/revoke replay-main-1")
                    await rita.wait_for(lambda t: False, within=20)

            with pytest.raises(RevokedError):
                await revoked()
            with pytest.raises(UnauthorizedError):
                async with unwrap_group(), attached(link, "again") as again:
                    await again.wait_for(lambda t: t.ready is not None)
            # The other replay link is not touched.
            async with attached(other_link, "ro") as ro:
                await ro.wait_for(lambda t: t.snapshot_done)
    finally:
        host.stop()
        relay.stop()


async def test_a_replay_link_naming_another_conversation_still_gets_only_its_own(
    tmp_path: Path,
) -> None:
    relay = RelayProcess(tmp_path).start()
    host = _host(relay, tmp_path)
    try:
        host.start()
        async with attached(host.drive_link, "ann", conversation="main") as ann:
            await ann.wait_for(lambda t: t.snapshot_done)
            await ann.send(NewConversation(agent="other"))
            await ann.wait_for(lambda t: t.started)
            second = ann.started[0]
            decided = await _turn(ann, "in main")
            _, _, upto, link = await _share_replay(host, f"/share-replay main {decided}")
        async with attached(host.drive_link, "bo", conversation=second) as bo:
            await bo.wait_for(lambda t: t.snapshot_done)
            await _turn(bo, "secret of the second")
            second_ids = {i["id"] for i in bo.items}

        # The open names the other conversation, fresh or with a cursor counted there.
        for after in (None, 2):
            async with attached(link, "mallory", conversation=second, after=after) as mallory:
                await mallory.wait_for(lambda t: t.snapshot_done)
                assert mallory.ready is not None
                assert mallory.ready["conversation_id"] == "main"
                assert mallory.seqs() == list(range(upto + 1))
                assert not {i["id"] for i in mallory.items} & second_ids
                assert "secret of the second" not in str(mallory.items)
                # A cursor past the replay's end starts it over, still up to its seq.
                resets = mallory.resets
                await mallory.send(Subscribe(after=upto + 10))
                await mallory.wait_for(
                    lambda t: t.resets > resets and len(t.items) == upto + 1  # noqa: B023
                )
                assert mallory.seqs() == list(range(upto + 1))

        # The link is kept across a restart, printed with the others, and shows the same.
        host.stop()
        host.start()
        assert (await _printed(host, REPLAY_LINE)).group(4) == link
        async with attached(link, "rita") as rita:
            await rita.wait_for(lambda t: t.snapshot_done)
            assert rita.seqs() == list(range(upto + 1))
    finally:
        host.stop()
        relay.stop()
