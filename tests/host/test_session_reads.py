"""What one teammate's attach reads from the log, counted on a real SQLite store, where each read
is a hop to a reader thread and back. The host's broadcast follows the conversation, as under
`tunnel host`, so its head comes from memory: an attach reads only the items it sends and the
state from before them. In process with the channel faked, and once through `tunnel host` and a
relay."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.log.counting_store import CountingStore
from tests.support import RelayProcess
from tunnel.agents import DemoSession
from tunnel.app.follower import Following
from tunnel.app.requests import DEFAULT_HISTORY_ITEMS, Subscribe
from tunnel.e2e.identity import HostIdentity
from tunnel.e2e.opening import EarlySubscribe
from tunnel.host.broadcast import Broadcaster
from tunnel.host.presence import Presence
from tunnel.host.session import SessionChannelHandler
from tunnel.log import Log, NewItem
from tunnel.log.sqlite import open_host_store
from tunnel.proto import DEFAULT_LIMITS
from tunnel.teammate.client import connect_teammate

from .conftest import sharing
from .test_session_context import event, filler, settings
from .test_session_history import ScriptedChannel, message_item

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


class JoiningChannel(ScriptedChannel):
    """A scripted channel that joins the broadcast as a host channel does: the `broadcast`
    message, then the joined callback."""

    max_message_size = DEFAULT_LIMITS.largest_data

    async def hand_over(
        self,
        largest: int,
        build: Callable[[], bytes],
        *,
        joined: Callable[[], None],
        group: int = 0,
    ) -> None:
        await self.send(build())
        joined()

    def leave_broadcast(self) -> None:
        pass

    def joined(self) -> bool:
        return bool(self.of("broadcast"))


@dataclass
class Host:
    log: Log
    store: CountingStore
    presence: Presence
    broadcast: Broadcaster
    workspace: Path

    async def attach(self, subscribe: Subscribe) -> tuple[JoiningChannel, list[str]]:
        """One teammate's attach until it joins the broadcast; the store reads it made."""
        self.store.reads.clear()
        channel = JoiningChannel()
        session = DemoSession(log=self.log, workspace=self.workspace, conversation_id="c1", delay=0)
        handler = SessionChannelHandler(
            channel, session=session, log=self.log, presence=self.presence, broadcast=self.broadcast
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(handler.run)
            await channel.request(subscribe)
            await channel.wait_for(channel.joined)
            tg.cancel_scope.cancel()
        return channel, list(self.store.reads)


@contextlib.asynccontextmanager
async def hosting(tmp_path: Path, items: list[NewItem]) -> AsyncIterator[Host]:
    """The conversation `c1` holding `items` in the host's SQLite log, its broadcast running."""
    store = CountingStore(await open_host_store(tmp_path / "log.db"))
    async with Log(store) as log:
        if items:
            await log.append("c1", items)
        presence = Presence()
        broadcast = Broadcaster(
            identity=HostIdentity.generate(),
            log=log,
            conversation_id="c1",
            presence=presence,
            link=lambda: None,
        )
        async with anyio.create_task_group() as tg:
            await tg.start(broadcast.run)
            yield Host(log, store, presence, broadcast, tmp_path)
            tg.cancel_scope.cancel()


def snapshot_seqs(channel: JoiningChannel) -> list[int]:
    return [item["seq"] for page in channel.of("snapshot") for item in page["items"]]


async def test_a_fresh_join_to_an_empty_conversation_reads_nothing(tmp_path: Path) -> None:
    async with hosting(tmp_path, []) as host:
        channel, reads = await host.attach(Subscribe(after=None))
    assert reads == []
    (page,) = channel.of("snapshot")
    assert page["items"] == []
    assert not page["more"]


async def test_a_fresh_join_to_a_short_conversation_reads_its_items_once(
    tmp_path: Path,
) -> None:
    async with hosting(tmp_path, [message_item(n) for n in range(5)]) as host:
        channel, reads = await host.attach(Subscribe(after=None))
    # The newest page, read backwards to find where it starts, is the snapshot's page.
    assert len(reads) == 1, reads
    assert snapshot_seqs(channel) == [0, 1, 2, 3, 4]
    assert len(channel.of("snapshot")) == 1


async def test_a_fresh_join_to_a_long_conversation_reads_its_page_and_the_state_before_it(
    tmp_path: Path,
) -> None:
    plan = NewItem(type="plan", data={"entries": []}, created_by="agent")
    items = [settings("default"), plan, *filler(), event("commands", commands=[])]
    async with hosting(tmp_path, items) as host:
        channel, reads = await host.attach(Subscribe(after=None))
    # The page, the session events before it, the latest plan before it.
    assert len(reads) == 3, reads
    head = len(items) - 1
    assert snapshot_seqs(channel) == list(range(head - DEFAULT_HISTORY_ITEMS + 1, head + 1))
    (page,) = channel.of("snapshot")
    assert [item["seq"] for item in page["context"]] == [0, 1]


async def test_a_resume_reads_only_what_came_after_its_cursor(tmp_path: Path) -> None:
    async with hosting(tmp_path, [message_item(n) for n in range(50)]) as host:
        channel, reads = await host.attach(Subscribe(after=49))
        assert reads == []
        assert snapshot_seqs(channel) == []
        channel, reads = await host.attach(Subscribe(after=45))
        assert len(reads) == 1, reads
        assert snapshot_seqs(channel) == [46, 47, 48, 49]


async def test_items_committed_and_not_yet_synced_at_the_join_are_sent_once_synced(
    tmp_path: Path,
) -> None:
    # The head in memory counts items once committed; the snapshot's read waits for their sync.
    store = CountingStore(await open_host_store(tmp_path / "log.db"))
    async with Log(store) as log:
        await log.append("c1", [message_item(n) for n in range(5)])
        # Followed, as by the host's broadcast, but by nobody who reads: nothing syncs here.
        async with log.subscribe("c1", after=4):
            await log.append("c1", [message_item(n) for n in range(5, 8)], durable=False)
            assert store.inner.synced_head("c1") == 4  # 5 to 7 committed, not synced
            channel = ScriptedChannel()
            session = DemoSession(log=log, workspace=tmp_path, conversation_id="c1", delay=0)
            handler = SessionChannelHandler(channel, session=session, log=log, presence=Presence())
            store.reads.clear()
            async with anyio.create_task_group() as tg:
                tg.start_soon(handler.run)
                await channel.request(Subscribe(after=None))
                await channel.wait_for(channel.snapshot_done)
                tg.cancel_scope.cancel()
            assert store.inner.synced_head("c1") is None
    assert len(store.reads) == 1, store.reads
    assert channel.streamed_seqs() == list(range(8))


async def test_attaching_to_tunnel_host_reads_the_log_only_for_the_items_it_sends(
    relay: RelayProcess, tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stores: list[CountingStore] = []

    async def counted(path: str | Path) -> CountingStore:
        store = CountingStore(await open_host_store(path))
        stores.append(store)
        return store

    monkeypatch.setattr("tunnel.host.share.open_host_store", counted)

    async def attach(link: Any) -> list[str]:
        (store,) = stores
        store.reads.clear()
        with anyio.fail_after(30):
            async with connect_teammate(link, name="t", subscribe=EarlySubscribe()) as session:
                while not isinstance(await session.receive(), Following):
                    pass
                return list(store.reads)

    async with sharing(relay.url, tmp_path, agent="demo", workspace=workspace) as shared:
        link = shared.host.view_link
        assert await attach(link) == []
        await shared.log.append("main", [message_item(n) for n in range(5)])
        reads = await attach(link)
        assert len(reads) == 1, reads
