"""Task-group errors reach callers as the error they catch."""

from __future__ import annotations

import anyio
import pytest

from tunnel.process.groups import unwrap_group

pytestmark = pytest.mark.anyio


async def _fail(exc: BaseException) -> None:
    raise exc


async def test_a_lone_error_leaves_as_itself() -> None:
    with pytest.raises(KeyError):
        async with unwrap_group(), anyio.create_task_group() as tg:
            tg.start_soon(_fail, KeyError("gone"))


async def test_several_errors_of_one_kind_leave_as_the_first() -> None:
    async def both() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_fail, ConnectionError("a"))
            await _fail(ConnectionError("b"))

    with pytest.raises(ConnectionError):
        async with unwrap_group():
            await both()


async def test_errors_of_different_kinds_stay_a_group() -> None:
    async def both() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_fail, KeyError("a"))
            await _fail(ValueError("b"))

    with pytest.raises(ExceptionGroup):
        async with unwrap_group():
            await both()
