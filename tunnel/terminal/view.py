"""A teammate's local view of the conversation: items by seq, pending permission requests.

Used by `tunnel attach` to de-duplicate across reconnects (it resubscribes with the last seq it
holds) and to know which permission requests are still open when the user types /allow or /deny.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingPermission:
    """An open permission request and its options."""

    request_id: str
    title: str
    options: tuple[tuple[str, str, str], ...]
    """(option_id, name, kind) in the agent's order."""

    @classmethod
    def from_data(cls, request_id: str, data: Mapping[str, Any]) -> PendingPermission:
        """The request described by a `permission_request` item's data."""
        options = data.get("options")
        return cls(
            request_id=request_id,
            title=str(data.get("title", "")),
            options=tuple(
                (str(o.get("option_id")), str(o.get("name")), str(o.get("kind", "")))
                for o in (options if isinstance(options, list) else [])
                if isinstance(o, Mapping)
            ),
        )

    def first_option(self, prefix: str) -> str | None:
        """The first option whose kind starts with `prefix` (`allow` or `reject`)."""
        for option_id, _name, kind in self.options:
            if kind.startswith(prefix):
                return option_id
        return None


@dataclass(slots=True)
class ConversationView:
    """Items seen so far (only the last seq is kept, not the items) and open permissions."""

    last_seq: int | None = None
    pending: dict[str, PendingPermission] = field(default_factory=dict)

    def accept(self, item: Mapping[str, Any]) -> bool:
        """Take one item; False if it was already seen (a duplicate to drop)."""
        seq = item.get("seq")
        if not isinstance(seq, int) or (self.last_seq is not None and seq <= self.last_seq):
            return False
        self.last_seq = seq
        data = item.get("data")
        data = data if isinstance(data, Mapping) else {}
        request_id = data.get("request_id")
        if not isinstance(request_id, str):
            return True
        if item.get("type") == "permission_request":
            self.pending[request_id] = PendingPermission.from_data(request_id, data)
        elif item.get("type") == "permission_decision":
            self.pending.pop(request_id, None)
        return True
