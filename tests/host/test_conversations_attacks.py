"""What a teammate cannot do with the host's conversations, through a real relay and a real
`tunnel host` process: reach another conversation's casts through a closed one, or move a
channel to another conversation as a relay."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.host.conversations_host import replies, serving, start_conversation
from tests.host.teammate import Teammate, attached
from tests.support import attach_proxy, via
from tunnel.app.requests import (
    CloseConversation,
    Fork,
    ListConversations,
    NewConversation,
    Prompt,
    Subscribe,
)
from tunnel.e2e.crypto import ShareLink
from tunnel.proto import Open, decode_frame, encode_frame
from tunnel.teammate.client import DecryptionFailedError

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


async def test_a_closed_conversations_channels_never_join_the_group_another_took(
    tmp_path: Path,
) -> None:
    """A channel opened to a closed conversation, or one of its channels subscribing again,
    gets no cast of the conversation that took its broadcast group since."""
    with serving(tmp_path, "--max-conversations", "2") as (_relay, host):
        async with attached(host.drive_link, "ann", conversation="main") as ann:
            await ann.wait_for(lambda t: t.listing is not None)
            closed = await start_conversation(ann)
            async with attached(host.view_link, "old", conversation=closed) as old:
                await old.wait_for(lambda t: t.snapshot_done)
                await ann.send(CloseConversation(conversation=closed))
                await old.wait_for(
                    lambda t: t.item_of("session_event", what="conversation_closed") is not None
                )
                # The next conversation takes the closed one's group (max 2: main and it).
                newest = await start_conversation(ann)
                # The attacker: a channel opened to the closed conversation now, and one of
                # its channels asking for its snapshot again.
                async with attached(host.view_link, "late", conversation=closed) as late:
                    await late.wait_for(lambda t: t.snapshot_done)
                    await old.send(Subscribe(after=old.seqs()[-1]))
                    await old.wait_for(lambda t: t.snapshot_done)
                    async with attached(host.drive_link, "cy", conversation=newest) as cy:
                        await cy.wait_for(lambda t: t.snapshot_done)
                        for n in range(3):
                            await cy.send(Prompt(text=f"in the newest {n}"))
                            await cy.wait_for(lambda t, n=n: f"in the newest {n}" in replies(t))
                        # A round trip on each after the casts: what was cast reached them.
                        for teammate in (late, old):
                            seen = len(teammate.errors)
                            await teammate.send(NewConversation(agent="demo"))
                            await teammate.wait_for(lambda t, s=seen: len(t.errors) > s)
                    for teammate in (late, old):
                        assert not [r for r in replies(teammate) if "newest" in r]
                        # Not even sealed casts of another key reached them: each would break
                        # their broadcast and make them catch up.
                        assert teammate.session.follower.statistics().breaks == 0


async def test_closing_a_conversation_cancels_its_waiting_request_where_its_channels_see_it(
    tmp_path: Path,
) -> None:
    """A permission request that waits when its conversation is closed ends cancelled in the
    log, before the close, so every channel still open there gets the decision, and a page no
    longer offers an answer nobody can give."""
    with serving(tmp_path, "--max-conversations", "2") as (_relay, host):
        async with attached(host.drive_link, "ann", conversation="main") as ann:
            await ann.wait_for(lambda t: t.listing is not None)
            second = await start_conversation(ann)
            async with attached(host.view_link, "vic", conversation=second) as vic:
                await vic.wait_for(lambda t: t.snapshot_done)
                await ann.send(Prompt(text="ask me"))  # in main: stays untouched
                async with attached(host.drive_link, "bo", conversation=second) as bo:
                    await bo.wait_for(lambda t: t.snapshot_done)
                    await bo.send(Prompt(text="do it"))
                    await vic.wait_for(lambda t: t.item_of("permission_request") is not None)
                    request = vic.item_of("permission_request")
                    assert request is not None
                    request_id = request["data"]["request_id"]
                    await bo.send(CloseConversation(conversation=second))
                    await vic.wait_for(
                        lambda t: t.item_of("session_event", what="conversation_closed") is not None
                    )
                    decision = vic.item_of("permission_decision", request_id=request_id)
                    assert decision is not None
                    assert decision["data"]["outcome"] == "cancelled"
                    assert decision["seq"] < vic.seqs()[-1]
                # A fresh joiner reads the same.
                async with attached(host.view_link, "late", conversation=second) as late:
                    await late.wait_for(lambda t: t.snapshot_done)
                    assert late.item_of("permission_decision", request_id=request_id) is not None
            # The other conversation's request still waits.
            await ann.wait_for(lambda t: t.item_of("permission_request") is not None)
            assert ann.item_of("permission_decision") is None


async def test_a_relay_that_names_another_conversation_in_the_open_gets_no_channel(
    tmp_path: Path,
) -> None:
    """The early subscribe's conversation is bound into the transcript: a relay that rewrites
    it makes the open fail, and the teammate sees nothing of either conversation."""
    with serving(tmp_path, "--max-conversations", "2") as (relay, host):
        async with attached(host.drive_link, "ann", conversation="main") as ann:
            await ann.wait_for(lambda t: t.listing is not None)
            other = await start_conversation(ann)
            await ann.send(Prompt(text="only in main"))
            await ann.wait_for(lambda t: "only in main" in replies(t))
            rewritten: list[str] = []

            def move(message: bytes) -> bytes:
                frame = decode_frame(message)
                if not isinstance(frame, Open) or "sub" not in frame.meta:
                    return message
                rewritten.append(frame.meta["sub"]["conversation"])
                sub = {**frame.meta["sub"], "conversation": other}
                meta = {**frame.meta, "sub": sub}
                return encode_frame(Open(channel=frame.channel, path=frame.path, meta=meta))

            served: list[Teammate] = []

            async def attach_moved() -> None:
                link = ShareLink.parse(host.view_link)
                async with (
                    attach_proxy(relay.url, up=move) as proxy,
                    attached(via(link, proxy), "vic", conversation="main") as vic,
                ):
                    await vic.wait_for(lambda t: t.ready is not None or t.items)
                    served.append(vic)

            with pytest.raises(ExceptionGroup) as caught:
                await attach_moved()
            assert rewritten == ["main"]
            assert served == []
            # The host checks the proof over the transcript as the relay forwarded it: 4003.
            assert caught.group_contains(DecryptionFailedError, match="proof does not verify")


async def test_a_view_link_starts_closes_and_forks_nothing_and_reads_only_what_it_follows(
    tmp_path: Path,
) -> None:
    with serving(tmp_path, "--max-conversations", "2") as (_relay, host):
        async with attached(host.drive_link, "ann", conversation="main") as ann:
            await ann.wait_for(lambda t: t.listing is not None)
            second = await start_conversation(ann)
            await ann.send(Prompt(text="secret of main"))
            await ann.wait_for(lambda t: "secret of main" in replies(t))
            async with attached(host.view_link, "vic", conversation=second) as vic:
                await vic.wait_for(lambda t: t.snapshot_done)
                for request in (
                    NewConversation(agent="demo"),
                    CloseConversation(conversation=second),
                    CloseConversation(conversation="main"),
                    Fork(conversation="main", upto=0),
                    Fork(conversation=second, upto=0),
                ):
                    await vic.send(request)
                await vic.wait_for(lambda t: len(t.errors) == 5)
                assert {e["code"] for e in vic.errors} == {"forbidden"}
                # A cursor past its own conversation's end reads nothing of another one.
                page = await vic.session.history(10**6, limit=200)
                assert "secret of main" not in str(page.items)
                assert {i["id"].rsplit(":", 1)[0] for i in page.items} == {second}
            await ann.send(ListConversations())
            await ann.wait_for(
                lambda t: t.listing is not None and len(t.listing.conversations) == 2
            )
            assert ann.listing is not None
            assert all(c.state != "closed" for c in ann.listing.conversations)
