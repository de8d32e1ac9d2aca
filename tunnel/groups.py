"""Helpers for exceptions leaving anyio task groups."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


@asynccontextmanager
async def unwrap_single() -> AsyncIterator[None]:
    """Re-raise a task group's lone exception as itself, not inside an ExceptionGroup.

    Callers catch specific errors (a channel that closed, a refused link); a group holding just
    one of them should look like that error. Groups of several stay groups.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        leaves = list(_leaves(group))
        if len(leaves) == 1:
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
