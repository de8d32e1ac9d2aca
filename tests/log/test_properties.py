"""Randomised races between appenders and subscribers, on both stores, over many seeds.

Each seed builds a different schedule: concurrent appenders (batches of 1..4 items, events
published after some of them), and subscribers that join mid-stream with a random `after`,
some slow, some that give up on receives (timeouts), some cancelled or failing part-way. Every
subscriber must see exactly the items with seq > after, in order, once each; an event published
after item n must reach it after item n; nothing may be left registered at the end.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel
import pytest

from tunnel.log import Event, Item, Log, NewItem

from .conftest import StoreFactory

pytestmark = pytest.mark.anyio

SEEDS = range(50)


@dataclass
class Seen:
    after: int | None
    behaviour: str
    items: list[Item] = field(default_factory=list)
    events: list[tuple[int, Event]] = field(default_factory=list)  # (last seq seen, event)
    finished: bool = False

    @property
    def start(self) -> int:
        return 0 if self.after is None else self.after + 1


class Failure(Exception):
    """A subscriber's consumer failing on purpose."""


async def pause(rng: random.Random) -> None:
    roll = rng.random()
    if roll < 0.5:
        await anyio.lowlevel.checkpoint()
    elif roll < 0.9:
        for _ in range(rng.randint(1, 5)):
            await anyio.lowlevel.checkpoint()
    else:
        await anyio.sleep(rng.random() * 0.003)


@pytest.mark.parametrize("seed", SEEDS)
async def test_every_subscriber_sees_exactly_the_items_after_its_cursor(
    make_store: StoreFactory, seed: int
) -> None:
    rng = random.Random(seed)
    log = Log(
        make_store(),
        buffer_size=rng.choice([2, 8, 64, 256]),
        page_size=rng.choice([1, 3, 10, 100]),
    )
    cid = "conv"
    prefill = rng.randint(0, 30)
    appenders = rng.randint(1, 4)
    appends_each = rng.randint(5, 25)
    returned: list[list[Item]] = []
    appending_done = anyio.Event()
    final_seq = -1
    seen: list[Seen] = []

    async with log:
        if prefill:
            await log.append(
                cid,
                [NewItem(type="message", data={"p": i}, created_by="host") for i in range(prefill)],
            )

        async def appender(a: int, arng: random.Random) -> None:
            for k in range(appends_each):
                await pause(arng)
                batch = [
                    NewItem(
                        type=arng.choice(["message", "tool_call", "reasoning"]),
                        data={"a": a, "k": k, "j": j},
                        created_by=f"writer{a}",
                    )
                    for j in range(arng.randint(1, 4))
                ]
                stored = await log.append(cid, batch)
                returned.append(stored)
                if arng.random() < 0.3:
                    await log.publish(
                        Event(conversation_id=cid, kind="after", data={"seq": stored[-1].seq})
                    )

        async def subscriber(s: Seen, srng: random.Random) -> None:
            for _ in range(srng.randint(0, 30)):  # join mid-stream
                await anyio.lowlevel.checkpoint()
            give_up_after = srng.randint(1, 40)
            async with log.subscribe(cid, after=s.after) as sub:
                while True:
                    if appending_done.is_set() and (
                        (s.items and s.items[-1].seq >= final_seq)
                        or (not s.items and s.start > final_seq)
                    ):
                        s.finished = True
                        return
                    if s.behaviour == "slow":
                        await pause(srng)
                    if s.behaviour == "fails" and len(s.items) >= give_up_after:
                        raise Failure
                    with anyio.move_on_after(srng.choice([0, 0.001, 0.02])):
                        batch = await sub.receive_batch(srng.choice([1, 2, 7, 100]))
                        for entry in batch:
                            if isinstance(entry, Item):
                                s.items.append(entry)
                            else:
                                last = s.items[-1].seq if s.items else s.start - 1
                                s.events.append((last, entry))

        async def run_subscriber(s: Seen, srng: random.Random) -> None:
            if s.behaviour == "cancelled":
                with anyio.move_on_after(srng.random() * 0.05):
                    await subscriber(s, srng)
            elif s.behaviour == "fails":
                try:
                    await subscriber(s, srng)
                except Failure:
                    assert not s.finished
            else:
                await subscriber(s, srng)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for _ in range(rng.randint(2, 6)):
                    head = prefill + 4 * appenders * appends_each // 2
                    after = rng.choice([None, -1, rng.randint(-1, head)])
                    behaviour = rng.choice(["normal", "normal", "slow", "cancelled", "fails"])
                    s = Seen(after=after, behaviour=behaviour)
                    seen.append(s)
                    tg.start_soon(run_subscriber, s, random.Random(rng.random()))
                async with anyio.create_task_group() as writers:
                    for a in range(appenders):
                        writers.start_soon(appender, a, random.Random(rng.random()))
                info = await log.get_conversation(cid)
                assert info is not None
                final_seq = info.last_seq
                appending_done.set()

        stats = log.statistics()
        assert stats.subscribers == 0
        assert stats.conversations_watched == 0

        stored = await log.query(cid, limit=100_000)
        assert [i.seq for i in stored] == list(range(final_seq + 1))
        by_seq = {i.seq: i for i in stored}
        for batch in returned:  # each append's items are consecutive and stored as returned
            assert [i.seq for i in batch] == list(range(batch[0].seq, batch[0].seq + len(batch)))
            assert all(by_seq[i.seq] == i for i in batch)

    for s in seen:
        expected = list(range(s.start, s.start + len(s.items)))
        assert [i.seq for i in s.items] == expected, (s.behaviour, s.after)
        assert all(by_seq[i.seq] == i for i in s.items)
        if s.finished:
            assert [i.seq for i in s.items] == list(range(s.start, final_seq + 1))
        if s.behaviour in ("normal", "slow"):
            assert s.finished
        for last_seen, event in s.events:
            # An event published after item n arrives after item n.
            assert last_seen >= event.data["seq"], (last_seen, event.data)
