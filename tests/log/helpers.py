"""Small builders shared by the log tests."""

from __future__ import annotations

from typing import Any

from tunnel.log import NewItem


def new(type: str = "message", by: str = "host", **data: Any) -> NewItem:
    """A NewItem with the given data."""
    return NewItem(type=type, data=data or {"text": "hi"}, created_by=by)


def news(count: int, type: str = "message", start: int = 0) -> list[NewItem]:
    """`count` NewItems whose data numbers them from `start`."""
    return [NewItem(type=type, data={"n": start + i}, created_by="host") for i in range(count)]
