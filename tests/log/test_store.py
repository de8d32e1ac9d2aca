"""Store behaviour shared by MemoryStore and SQLiteStore: appends, pagination, imports."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

from tunnel.log import Item, LogClosedError, NewItem, SeqConflictError, Store
from tunnel.log.store import Order

from .conftest import StoreFactory
from .helpers import new, news

pytestmark = pytest.mark.anyio

# Seqs 0..19; every third item is a tool_call, every fifth (not a tool_call) is reasoning.
TYPES = [
    "tool_call" if seq % 3 == 0 else "reasoning" if seq % 5 == 0 else "message" for seq in range(20)
]


async def filled(store: Store) -> Store:
    await store.append(
        "c", [NewItem(type=t, data={"n": i}, created_by="host") for i, t in enumerate(TYPES)]
    )
    await store.append("other", news(5))
    return store


def expected(
    *,
    after: int | None = None,
    before: int | None = None,
    limit: int = 100,
    order: Order = "asc",
    types: set[str] | None = None,
) -> list[int]:
    seqs = [
        s
        for s in range(20)
        if (after is None or s > after)
        and (before is None or s < before)
        and (types is None or TYPES[s] in types)
    ]
    if order == "desc":
        seqs.reverse()
    return seqs[:limit]


PAGES: list[dict[str, Any]] = [
    {},
    {"after": 4},
    {"after": -1},
    {"before": 5},
    {"after": 4, "before": 9},
    {"after": 4, "before": 5},  # nothing strictly between
    {"after": 4, "before": 4},
    {"after": 19},
    {"after": 25},
    {"before": 0},
    {"before": 100},
    {"limit": 0},
    {"limit": 1},
    {"limit": 1, "order": "desc"},
    {"limit": 3, "order": "desc"},  # the NEWEST three, newest first
    {"limit": 3, "order": "desc", "before": 10},
    {"limit": 3, "order": "desc", "after": 15},
    {"order": "desc"},
    {"types": {"tool_call"}},
    {"types": {"tool_call"}, "limit": 2, "order": "desc"},
    {"types": {"tool_call", "reasoning"}},
    {"types": {"tool_call", "reasoning"}, "limit": 4},
    {"types": {"tool_call", "reasoning"}, "limit": 4, "order": "desc"},
    {"types": {"tool_call", "reasoning"}, "after": 3, "before": 16, "limit": 3},
    {"types": {"tool_call", "message", "reasoning"}, "limit": 7, "order": "desc"},
    {"types": {"no_such_type"}},
    {"types": set()},
    {"types": {"tool_call"}, "limit": 0},
]


def page_id(page: dict[str, Any]) -> str:
    # Sorted: a set's order changes with the string hash seed, and parallel workers must
    # collect the same ids.
    return ",".join(f"{k}={sorted(v) if isinstance(v, set) else v}" for k, v in page.items())


@pytest.mark.parametrize("page", PAGES, ids=page_id)
async def test_query_pages_like_the_reference(store: Store, page: dict[str, Any]) -> None:
    await filled(store)
    args = dict(page)
    if "types" in args:
        args["types"] = sorted(args["types"])
    got = await store.query("c", **args)
    assert [item.seq for item in got] == expected(**page)
    assert all(item.conversation_id == "c" for item in got)
    assert all(item.type == TYPES[item.seq] and item.data == {"n": item.seq} for item in got)


async def test_a_single_type_may_be_given_as_a_string(store: Store) -> None:
    await filled(store)
    got = await store.query("c", types="reasoning")
    assert [item.seq for item in got] == expected(types={"reasoning"})


async def test_cursor_pagination_walks_everything_once_both_ways(store: Store) -> None:
    await filled(store)
    seen: list[int] = []
    after = None
    while page := await store.query("c", after=after, limit=3):
        seen += [item.seq for item in page]
        after = page[-1].seq
    assert seen == list(range(20))
    back: list[int] = []
    before = None
    while page := await store.query("c", before=before, limit=6, order="desc"):
        back += [item.seq for item in page]
        before = page[-1].seq
    assert back == list(range(19, -1, -1))


async def test_unknown_and_empty_conversations(store: Store) -> None:
    assert await store.query("nobody") == []
    assert await store.get_conversation("nobody") is None
    assert await store.list_conversations() == []
    assert await store.append("nobody", []) == []
    assert await store.get_conversation("nobody") is None


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        ({"limit": -1}, "limit"),
        ({"after": -2}, "after"),
        ({"before": "3"}, "before"),
        ({"order": "up"}, "order"),
        ({"types": [1]}, "types"),
    ],
)
async def test_bad_query_arguments_are_refused(
    store: Store, args: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(ValueError, match=complaint):
        await store.query("c", **args)


async def test_append_assigns_consecutive_seqs_per_conversation(store: Store) -> None:
    first = await store.append("a", news(3))
    second = await store.append("a", [new()])
    other = await store.append("b", news(2))
    assert [i.seq for i in first + second] == [0, 1, 2, 3]
    assert [i.id for i in other] == ["b:0", "b:1"]
    info = await store.get_conversation("a")
    assert info is not None
    assert (info.last_seq, info.item_count) == (3, 4)
    assert info.updated_at == second[0].created_at


async def test_stored_items_read_back_equal_to_what_append_returned(store: Store) -> None:
    at = datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC)
    stored = await store.append(
        "c",
        [
            NewItem(
                type="brand_new_type",
                data={"x": [1, 2.5, None, True, {"deep": "é ✓ \x00"}], "": ""},
                created_by="Zoë",
                status="action_required",
                response_id="resp_1",
                created_at=at,
            ),
            NewItem(type="message", data={}, created_by="agent"),
        ],
    )
    assert stored[0].created_at == at
    assert stored[1].created_at.tzinfo is UTC
    assert await store.query("c") == stored


async def test_an_invalid_item_stores_nothing_of_the_append(store: Store) -> None:
    with pytest.raises(ValueError, match="bytes"):
        await store.append("c", [new(), NewItem(type="m", data={"b": b"x"}, created_by="h")])
    assert await store.get_conversation("c") is None
    assert [i.seq for i in await store.append("c", [new()])] == [0]


async def test_the_caller_mutating_its_data_later_does_not_change_the_item(store: Store) -> None:
    data: dict[str, Any] = {"list": [1]}
    await store.append("c", [NewItem(type="m", data=data, created_by="h")])
    data["list"].append(2)
    (item,) = await store.query("c")
    assert item.data == {"list": [1]}


async def test_concurrent_appends_get_distinct_consecutive_seqs(store: Store) -> None:
    results: list[list[Item]] = []

    async def append(i: int) -> None:
        results.append(await store.append("c", news(1 + i % 3, start=i * 10)))

    async with anyio.create_task_group() as tg:
        for i in range(30):
            tg.start_soon(append, i)
    seqs = sorted(item.seq for batch in results for item in batch)
    assert seqs == list(range(len(seqs)))
    for batch in results:  # each append's items are adjacent, in the order given
        assert [i.seq for i in batch] == list(range(batch[0].seq, batch[0].seq + len(batch)))
        assert [i.data["n"] for i in batch] == sorted(i.data["n"] for i in batch)
    assert await store.query("c", limit=1000) == sorted(
        (i for b in results for i in b), key=lambda i: i.seq
    )


async def test_list_conversations_newest_first(store: Store) -> None:
    t = [datetime(2025, 1, d, tzinfo=UTC) for d in (1, 2, 3)]
    await store.append("old", [NewItem(type="m", data={}, created_by="h", created_at=t[0])])
    await store.append("new", [NewItem(type="m", data={}, created_by="h", created_at=t[2])])
    await store.append("mid", [NewItem(type="m", data={}, created_by="h", created_at=t[1])])
    assert [i.conversation_id for i in await store.list_conversations()] == ["new", "mid", "old"]


async def test_on_commit_runs_once_per_append_in_seq_order(store: Store) -> None:
    calls: list[list[int]] = []

    async def append(n: int) -> None:
        await store.append(
            "c", news(n), on_commit=lambda items: calls.append([i.seq for i in items])
        )

    async with anyio.create_task_group() as tg:
        for n in (1, 2, 3, 1, 2):
            tg.start_soon(append, n)
    assert [s for call in calls for s in call] == list(range(9))
    assert sorted(len(c) for c in calls) == [1, 1, 2, 2, 3]


async def test_a_failing_commit_callback_does_not_fail_the_append(store: Store) -> None:
    def boom(items: list[Item]) -> None:
        raise RuntimeError("listener bug")

    stored = await store.append("c", [new()], on_commit=boom)
    assert [i.seq for i in stored] == [0]
    assert len(await store.query("c")) == 1


async def test_extend_imports_consecutive_items_all_or_nothing(make_store: StoreFactory) -> None:
    source = make_store()
    await source.append("c", news(5))
    await source.append("d", news(2))
    items = await source.query("c") + await source.query("d")

    target = make_store()
    assert await target.extend(items[:3]) == 3
    assert await target.extend(items[3:]) == 4
    assert await target.query("c") == items[:5]
    assert await target.query("d") == items[5:]
    after = await target.append("c", [new()])
    assert after[0].seq == 5

    fresh = make_store()
    with pytest.raises(SeqConflictError, match=r"c:2 leaves a gap.*continues at seq 1"):
        await fresh.extend([items[0], items[2]])
    with pytest.raises(SeqConflictError, match="c:1 leaves a gap"):
        await fresh.extend(items[1:2])
    assert await fresh.list_conversations() == []
    await fresh.extend(items[:2])
    with pytest.raises(SeqConflictError, match="c:1 collides"):
        await fresh.extend([items[5], items[1]])
    assert await fresh.get_conversation("d") is None  # d:0 came first but was rolled back


async def test_a_lazy_import_that_fails_midway_writes_nothing(make_store: StoreFactory) -> None:
    source = make_store()
    await source.append("c", news(5))
    items = await source.query("c")

    def lazy() -> Any:
        yield from items[:3]
        raise ValueError("line 4: broken")

    target = make_store()
    with pytest.raises(ValueError, match="line 4"):
        await target.extend(lazy())
    assert await target.get_conversation("c") is None


async def test_closed_store_refuses_calls(store: Store) -> None:
    await store.append("c", [new()])
    await store.aclose()
    await store.aclose()  # idempotent
    with pytest.raises(LogClosedError):
        await store.append("c", [new()])
    with pytest.raises(LogClosedError):
        await store.query("c")
    with pytest.raises(LogClosedError):
        await store.list_conversations()


async def test_a_cancelled_waiting_append_stores_nothing_and_others_proceed(store: Store) -> None:
    # Many appenders at once; cancel half of them right away. Every append that returned is
    # stored exactly once and the seqs have no gap.
    returned: list[Item] = []

    async def append(i: int) -> None:
        returned.extend(await store.append("c", news(2, start=2 * i)))

    async with anyio.create_task_group() as tg:
        scopes = []
        for i in range(40):
            scope = anyio.CancelScope()
            scopes.append(scope)

            async def run(i: int = i, scope: anyio.CancelScope = scope) -> None:
                with scope:
                    await append(i)

            tg.start_soon(run)
        await anyio.lowlevel.checkpoint()
        for scope in scopes[::2]:
            scope.cancel()
    stored = await store.query("c", limit=1000)
    assert [i.seq for i in stored] == list(range(len(stored)))
    assert {i.id for i in returned} <= {i.id for i in stored}
    # Pairs stay together: an append is atomic even when its caller was cancelled.
    for a, b in zip(stored[::2], stored[1::2], strict=True):
        assert b.data["n"] == a.data["n"] + 1
