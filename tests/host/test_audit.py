"""`HeadSigner` without sockets: it signs when a turn ends, every interval while items come
without one, never twice for one head, and gives a joiner the head with its anchor."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import anyio
import pytest

from tunnel.e2e.identity import HostIdentity
from tunnel.host.audit import HEAD_EVENT, HeadSigner
from tunnel.log import Log, MemoryStore, NewItem
from tunnel.log.chain import Chain, SignedHead
from tunnel.log.item import Event

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(10)]

IDENTITY = HostIdentity.from_seed(bytes(range(32)))


class Signatures:
    """A store of signatures in a list."""

    def __init__(self) -> None:
        self.stored: list[SignedHead] = []

    async def add_signatures(self, signatures: Sequence[SignedHead]) -> None:
        self.stored += signatures

    async def signatures(self, conversation_id: str) -> list[SignedHead]:
        return [s for s in self.stored if s.conversation_id == conversation_id]


def items(count: int) -> list[NewItem]:
    return [NewItem(type="message", data={"n": n}, created_by="agent") for n in range(count)]


async def wait_for(predicate: Callable[[], bool]) -> None:
    with anyio.fail_after(5):
        while not predicate():
            await anyio.sleep(0.01)


async def test_signs_when_a_turn_ends_and_never_twice_for_one_head() -> None:
    store = Signatures()
    async with Log(MemoryStore()) as log, anyio.create_task_group() as tg:
        signer = HeadSigner(
            identity=IDENTITY, log=log, store=store, conversation_id="main", interval=None
        )
        await tg.start(signer.run)
        async with log.subscribe("main") as watcher:
            stored = await log.append("main", items(3))
            idle = Event(conversation_id="main", kind="status", data={"state": "idle"})
            await log.publish(idle)
            await wait_for(lambda: len(store.stored) == 1)
            await log.publish(idle)  # nothing new: no second signature
            head = None
            while head is None:
                entry = await watcher.receive()
                if isinstance(entry, Event) and entry.kind == HEAD_EVENT:
                    head = entry
        await anyio.sleep(0.05)
        assert len(store.stored) == 1
        signed = store.stored[0]
        chain = Chain("main")
        for item in stored:
            chain.add(item)
        assert (signed.seq, signed.hash) == (2, chain.head)
        assert signed.valid()
        assert head.data["seq"] == 2
        assert "anchor" not in head.data

        joiner = signer.head_event(first_seq=2)
        anchor = signer.hash_at(1)
        assert joiner is not None
        assert anchor is not None
        assert joiner.data["anchor"] == {"seq": 1, "hash": anchor.hex()}
        from_start = signer.head_event(first_seq=0)
        assert from_start is not None
        assert "anchor" not in from_start.data
        tg.cancel_scope.cancel()


async def test_signs_every_interval_while_items_come_and_on_close() -> None:
    store = Signatures()
    async with Log(MemoryStore()) as log:
        signer = HeadSigner(
            identity=IDENTITY, log=log, store=store, conversation_id="main", interval=0.05
        )
        async with anyio.create_task_group() as tg:
            await tg.start(signer.run)
            await log.append("main", items(2))
            await wait_for(lambda: [s.seq for s in store.stored] == [1])
            await log.append("main", items(1))
            await wait_for(lambda: [s.seq for s in store.stored] == [1, 2])
            tg.cancel_scope.cancel()
        # Written while the session stopped, after the signer's subscription ended.
        await log.append("main", items(2))
        await signer.close()
        await signer.close()  # nothing new: no other signature
    assert [s.seq for s in store.stored] == [1, 2, 4]
