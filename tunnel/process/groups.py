"""Helpers for exceptions leaving anyio task groups."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


@asynccontextmanager
async def unwrap_group() -> AsyncIterator[None]:
    """Re-raise a task group's exception as itself, not inside an ExceptionGroup.

    Callers catch specific errors (a channel that closed, a refused link); a group holding just
    one of them, or several of the same kind (two tasks that saw the same channel close), should
    look like that error. Groups of different kinds stay groups.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        leaves = _leaves(group)
        if len({type(leaf) for leaf in leaves}) == 1:
            raise leaves[0] from None
        raise


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            found.extend(_leaves(exc))
        else:
            found.append(exc)
    return found
