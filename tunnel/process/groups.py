"""The one policy for errors leaving anyio task groups: callers see the error, not the group.

Callers catch specific errors (a channel that closed, a refused link); a group holding just one
of them, or several of the same kind (two tasks that saw the same channel close), should look
like that error. Groups of different kinds stay groups. Code that runs a caller's block inside a
task group of its own (`tunnel.link.dial`) re-raises the block's error outside the group instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


def unwrapped(exc: BaseException) -> BaseException:
    """Return the error a group stands for (the first leaf, if all leaves are of one type), or
    `exc` itself when it is not such a group."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    leaves = _leaves(exc)
    return leaves[0] if len({type(leaf) for leaf in leaves}) == 1 else exc


@asynccontextmanager
async def unwrap_group() -> AsyncIterator[None]:
    """Re-raise a task group's exception as `unwrapped` says, not inside an ExceptionGroup."""
    try:
        yield
    except BaseExceptionGroup as group:
        error = unwrapped(group)
        if error is group:
            raise
        raise error from None


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            found.extend(_leaves(exc))
        else:
            found.append(exc)
    return found
