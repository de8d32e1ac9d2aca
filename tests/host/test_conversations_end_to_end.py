"""Several conversations on one host, through a real relay and a real `tunnel host` process:
drivers start, list, switch and close them; each keeps its own items; a viewer watches only."""

from __future__ import annotations

import dataclasses
import shlex
import sys
from pathlib import Path

import anyio
import pytest

from tests.host.conftest import FAKE_ACP_AGENT, _share, wait_online
from tests.host.conversations_host import replies, serving, start_conversation
from tests.host.host_process import HostProcess
from tests.host.teammate import Teammate, attached
from tests.support import RelayProcess, host_settings
from tunnel import handshake
from tunnel.app.requests import (
    CloseConversation,
    Fork,
    ListConversations,
    NewConversation,
    Prompt,
)
from tunnel.host.share import Shared, ShareSettings
from tunnel.relay.server import run as run_relay
from tunnel.relay.settings import RelaySettings

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def _pending(teammate: Teammate, conversation: str) -> int | None:
    """How many requests wait in `conversation`, as the host's list last said."""
    entry = None if teammate.listing is None else teammate.listing.find(conversation)
    return None if entry is None else entry.pending


async def test_drivers_start_switch_and_close_conversations_and_items_stay_apart(
    tmp_path: Path,
) -> None:
    with serving(tmp_path, "--max-conversations", "3") as (_relay, host):
        async with attached(host.drive_link, "ann", conversation="main") as ann:
            await ann.wait_for(lambda t: t.listing is not None)
            assert ann.listing is not None
            assert ann.listing.agents == ("demo", "other")
            assert [c.id for c in ann.listing.conversations] == ["main"]
            assert ann.ready is not None
            assert ann.ready["conversation_id"] == "main"

            second = await start_conversation(ann)
            assert second.startswith("c-")
            await ann.wait_for(
                lambda t: t.listing is not None and len(t.listing.conversations) == 2
            )

            # A viewer may follow the new one and list, but not start one.
            async with attached(host.view_link, "vic", conversation=second) as vic:
                await vic.wait_for(lambda t: t.ready is not None and t.snapshot_done)
                assert vic.ready is not None
                assert vic.ready["conversation_id"] == second
                await vic.send(NewConversation(agent="demo"))
                await vic.wait_for(lambda t: t.errors)
                assert vic.errors[0]["code"] == "forbidden"
                await vic.send(ListConversations())

                async with attached(host.drive_link, "bo", conversation=second) as bo:
                    await bo.wait_for(lambda t: t.snapshot_done)
                    await bo.send(Prompt(text="only in the second"))
                    await ann.send(Prompt(text="only in main"))
                    await bo.wait_for(lambda t: "only in the second" in replies(t))
                    await vic.wait_for(lambda t: "only in the second" in replies(t))
                    await ann.wait_for(lambda t: "only in main" in replies(t))
                    # Each conversation's items reach only its own channels.
                    assert "only in main" not in replies(bo) + replies(vic)
                    assert "only in the second" not in replies(ann)

                    # Unknown agent; too many conversations (max 3).
                    await ann.send(NewConversation(agent="nobody"))
                    await ann.wait_for(lambda t: t.errors)
                    assert ann.errors[-1]["code"] == "unknown_request"
                    await ann.send(NewConversation(agent="demo"))
                    await ann.wait_for(lambda t: len(t.started) == 2)
                    await ann.send(NewConversation(agent="demo"))
                    await ann.wait_for(lambda t: len(t.errors) == 2)
                    assert ann.errors[-1]["code"] == "agent_unavailable"

                    # Closing: its channels stay to read, driving it is refused.
                    await ann.send(CloseConversation(conversation=second))
                    await bo.wait_for(
                        lambda t: (
                            t.listing is not None
                            and any(
                                c.id == second and c.state == "closed"
                                for c in t.listing.conversations
                            )
                        )
                    )
                    await bo.send(Prompt(text="after the close"))
                    await bo.wait_for(lambda t: t.errors)
                    assert bo.errors[-1]["code"] == "conversation_closed"
                    assert bo.item_of("session_event", what="conversation_closed") is not None

                    # The closed one's broadcast group serves the next conversation: its
                    # channels left it, and see nothing of the new one.
                    breaks = bo.session.follower.statistics().breaks
                    await ann.send(NewConversation(agent="other"))
                    await ann.wait_for(lambda t: len(t.started) == 3)
                    async with attached(host.drive_link, "cy", conversation=ann.started[2]) as cy:
                        await cy.wait_for(lambda t: t.snapshot_done)
                        await cy.send(Prompt(text="in the newest"))
                        await cy.wait_for(lambda t: "in the newest" in replies(t))
                        await ann.send(ListConversations())
                        await ann.wait_for(lambda t: "in the newest" not in replies(t))
                    assert "in the newest" not in replies(bo) + replies(vic)
                    assert bo.errors[-1]["code"] == "conversation_closed"
                    # Not even sealed casts of another key reached them (each would break their
                    # broadcast and make them catch up).
                    assert bo.session.follower.statistics().breaks == breaks


async def test_an_unknown_conversation_is_served_as_the_first_and_a_restart_resumes_the_others(
    tmp_path: Path,
) -> None:
    with serving(tmp_path, "--max-conversations", "3") as (_relay, host):
        async with attached(host.drive_link, "ann", conversation="no-such") as ann:
            await ann.wait_for(lambda t: t.ready is not None and t.listing is not None)
            assert ann.ready is not None
            assert ann.ready["conversation_id"] == "main"
            second = await start_conversation(ann)
        async with attached(host.drive_link, "ann", conversation=second) as ann:
            await ann.wait_for(lambda t: t.snapshot_done)
            await ann.send(Prompt(text="before the restart"))
            await ann.wait_for(lambda t: "before the restart" in replies(t))
            seqs = ann.seqs()
        host.stop()
        host.start()
        async with attached(host.drive_link, "ann", conversation=second) as ann:
            await ann.wait_for(
                lambda t: (
                    t.listing is not None
                    and {c.id for c in t.listing.conversations} == {"main", second}
                )
            )
            await ann.wait_for(lambda t: t.snapshot_done)
            # Exactly once: what the log held, no item twice, and the agent answers again.
            assert ann.seqs()[: len(seqs)] == seqs
            assert len(set(ann.seqs())) == len(ann.seqs())
            await ann.send(Prompt(text="after the restart"))
            await ann.wait_for(lambda t: "after the restart" in replies(t))
            listing = ann.listing
            assert listing is not None
            entry = listing.find(second)
            assert entry is not None
            assert entry.agent == "other"
            assert entry.by == "ann"


async def test_a_fork_copies_the_log_up_to_its_seq_and_records_the_fork_in_both(
    tmp_path: Path,
) -> None:
    with serving(tmp_path, "--max-conversations", "3") as (_relay, host):
        async with attached(host.drive_link, "ann", conversation="main") as ann:
            await ann.wait_for(lambda t: t.snapshot_done)
            await ann.send(Prompt(text="first question"))
            await ann.wait_for(lambda t: "first question" in replies(t))
            await ann.wait_for(lambda t: any(i["created_by"] == "agent" for i in t.items))
            upto = max(ann.seqs())
            await ann.send(Prompt(text="second question"))
            await ann.wait_for(lambda t: "second question" in replies(t))
            await ann.send(Fork(conversation="main", upto=upto))
            await ann.wait_for(lambda t: t.started)
            fork = ann.started[0]
            await ann.wait_for(
                lambda t: t.item_of("session_event", what="session_fork") is not None
            )
            source_items = [i for i in ann.items if i["seq"] <= upto]
        async with attached(host.drive_link, "ann", conversation=fork, after=-1) as forked:
            await forked.wait_for(lambda t: t.snapshot_done)
            await anyio.sleep(0)
            copied = forked.items[: upto + 1]
            assert [(i["seq"], i["type"], i["data"]) for i in copied] == [
                (i["seq"], i["type"], i["data"]) for i in source_items
            ]
            event = forked.items[upto + 1]
            assert event["type"] == "session_event"
            assert event["data"]["what"] == "session_fork"
            assert event["data"]["from"] == "main"
            assert event["data"]["upto"] == upto
            assert "second question" not in replies(forked)


async def test_on_a_relay_without_broadcast_groups_a_second_conversation_streams_on_its_channel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A relay from before groups: its hello advertises no `cast-groups`.
    monkeypatch.setattr(handshake, "RELAY_CAPABILITIES", ())
    workspace = tmp_path / "ws"
    workspace.mkdir()
    settings = ShareSettings(
        host=host_settings("http://127.0.0.1:1", tmp_path),
        agents=(("demo", "demo"), ("other", "demo")),
        workspace=workspace,
        log_db=tmp_path / "log.db",
        interactive=False,
        demo_delay=0,
    )
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            port = await tg.start(run_relay, RelaySettings(host="127.0.0.1", port=0))
            url = f"http://127.0.0.1:{port}"
            settings = dataclasses.replace(settings, host=host_settings(url, tmp_path))
            shared: Shared = await tg.start(_share, settings)
            await wait_online(shared.host.view_link)
            assert shared.conversations is not None
            second = await shared.conversations.start("other", by="ann")
            async with (
                attached(shared.host.drive_link, "ann", conversation=second.id) as ann,
                attached(shared.host.view_link, "vic", conversation="main") as vic,
            ):
                await ann.wait_for(lambda t: t.snapshot_done)
                await vic.wait_for(lambda t: t.snapshot_done)
                await ann.send(Prompt(text="live without a group"))
                await ann.wait_for(lambda t: "live without a group" in replies(t))
                await ann.wait_for(lambda t: any(i["created_by"] == "agent" for i in t.items))
                # Presence came on the channel too.
                await ann.wait_for(
                    lambda t: bool(t.presence) and "ann" in {m["name"] for m in t.presence[-1]}
                )
                assert "live without a group" not in replies(vic)
            tg.cancel_scope.cancel()


async def test_an_acp_agent_and_the_demo_in_one_host_a_waiting_approval_blocks_only_its_own(
    tmp_path: Path,
) -> None:
    relay = RelayProcess(tmp_path).start()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    fake = shlex.join([sys.executable, str(FAKE_ACP_AGENT)])
    host = HostProcess(
        relay.url,
        tmp_path,
        agent=f"fake=acp:{fake}",
        workspace=workspace,
        log_db=tmp_path / "log.db",
        interactive=False,
        extra=("--agent", "demo=demo"),
    )
    try:
        host.start()
        async with attached(host.drive_link, "ann", conversation="main") as ann:
            await ann.wait_for(lambda t: t.listing is not None and t.snapshot_done)
            assert ann.listing is not None
            assert ann.listing.agents == ("fake", "demo")
            # The ACP agent asks, and nobody answers yet.
            await ann.send(Prompt(text="ask"))
            await ann.wait_for(lambda t: t.item_of("permission_request") is not None)
            await ann.wait_for(
                lambda t: t.listing is not None and t.listing.conversations[0].state == "waiting"
            )
            await ann.send(NewConversation(agent="demo"))
            await ann.wait_for(lambda t: t.started)
            async with attached(host.drive_link, "bo", conversation=ann.started[0]) as bo:
                await bo.wait_for(lambda t: t.snapshot_done)
                await bo.send(Prompt(text="while the other waits"))
                # The demo's turn runs to its end while the ACP agent's request still waits.
                await bo.wait_for(lambda t: any(i["created_by"] == "agent" for i in t.items))
                await bo.wait_for(lambda t: _pending(t, "main") == 1)
                assert bo.item_of("permission_request") is None
            request = ann.item_of("permission_request")
            assert request is not None
            assert ann.item_of("permission_decision") is None
    finally:
        host.stop()
        relay.stop()
