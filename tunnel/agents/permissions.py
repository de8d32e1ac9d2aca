"""Permission requests shared by every driver and the host console: the first answer wins.

An agent's request is registered first and then recorded as a `permission_request` item (status
`action_required`), so it can be answered the moment anyone sees it; any driver or the host may
answer. The answer is decided synchronously (no await between the check and the claim), so two
racing answers can never both win. The decision is recorded as a `permission_decision` item whose
`created_by` is who answered, with the chosen option's id, name and kind; a request that ends
without an answer (turn cancelled, agent gone) gets a decision with `outcome: "cancelled"`.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from tunnel.log import Item, StoreError

from .errors import SessionError
from .recorder import Recorder, new_id

logger = logging.getLogger("tunnel.agents.permissions")

MAX_OPEN_REQUESTS = 32
"""Open requests per session; an agent asking for more gets its extra requests cancelled."""

MAX_REMEMBERED = 1024
"""Closed request ids remembered to answer `already_answered` rather than `unknown_request`."""

RECORD_TIMEOUT = 5.0
"""How long closing a request may spend recording its decision while being cancelled."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PermissionOption:
    """One choice offered to the humans."""

    option_id: str
    """Identifier sent back by the driver that picks it."""
    name: str
    """Label shown on the button."""
    kind: str
    """allow_once, allow_always, reject_once or reject_always."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """How a permission request ended."""

    option: PermissionOption | None
    """The chosen option; None when the request was cancelled."""
    by: str
    """Who answered (or cancelled)."""

    @property
    def allowed(self) -> bool:
        return self.option is not None and self.option.kind.startswith("allow")


@dataclass(slots=True, kw_only=True)
class PendingPermission:
    """An open request: `PermissionBroker.wait()` it for the decision."""

    request_id: str
    options: dict[str, PermissionOption]
    data: dict[str, Any]
    """The `permission_request` item's data."""
    item: Item | None = None
    """The stored `permission_request` item; None while it is being stored."""
    answered: anyio.Event = field(default_factory=anyio.Event)
    decision: Decision | None = None


class PermissionBroker:
    """The open permission requests of one session."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self._open: dict[str, PendingPermission] = {}
        self._closed: OrderedDict[str, None] = OrderedDict()

    def pending(self) -> list[Item]:
        """The `permission_request` items still waiting for an answer, oldest first."""
        return [entry.item for entry in self._open.values() if entry.item is not None]

    def open_requests(self) -> list[dict[str, Any]]:
        """The data of every open request, oldest first, including one still being stored."""
        return [entry.data for entry in self._open.values()]

    async def open(
        self,
        *,
        title: str,
        tool_call_id: str | None,
        options: Sequence[PermissionOption],
        details: Mapping[str, Any] | None = None,
    ) -> PendingPermission | None:
        """Record a new request; None if too many are open already (the agent is told no).

        `details` go into the item's data beside the request's own fields (the tool call the
        agent asks about, its turn).
        """
        if len(self._open) >= MAX_OPEN_REQUESTS:
            await self._recorder.error(
                f"the agent asked for more than {MAX_OPEN_REQUESTS} permissions at once; "
                "the extra request was cancelled"
            )
            return None
        request_id = new_id("perm")
        data: dict[str, Any] = {
            **(details or {}),
            "request_id": request_id,
            "title": title,
            "tool_call_id": tool_call_id,
            "options": [
                {"option_id": o.option_id, "name": o.name, "kind": o.kind} for o in options
            ],
        }
        entry = PendingPermission(
            request_id=request_id, options={o.option_id: o for o in options}, data=data
        )
        # Open before it is stored: subscribers may see the item (and answer it) before the
        # append returns here.
        self._open[request_id] = entry
        try:
            entry.item = await self._recorder.permission_request(data)
        except BaseException:
            # Never stored, so nobody can have seen it: forget it without a decision.
            self._open.pop(request_id, None)
            raise
        return entry

    async def wait(self, entry: PendingPermission) -> Decision:
        """Wait for the first answer; if the waiter is cancelled, the request is closed too."""
        try:
            await entry.answered.wait()
        finally:
            if entry.decision is None:
                with anyio.move_on_after(RECORD_TIMEOUT, shield=True):
                    await self._close(entry, Decision(option=None, by="host"))
        assert entry.decision is not None
        return entry.decision

    async def answer(self, request_id: str, option_id: str, *, by: str) -> None:
        """Answer for `by`; raises SessionError unless this is the first valid answer."""
        if not isinstance(request_id, str) or not isinstance(option_id, str):
            raise SessionError("unknown_request", "request_id and option_id must be strings")
        entry = self._open.get(request_id)
        if entry is None:
            if request_id in self._closed:
                raise SessionError("already_answered", "this permission request was answered")
            raise SessionError("unknown_request", "no such permission request")
        option = entry.options.get(option_id)
        if option is None:
            raise SessionError("unknown_request", "no such option for this permission request")
        await self._close(entry, Decision(option=option, by=by))

    async def cancel_all(self, *, by: str) -> None:
        """Close every open request as cancelled (the turn was cancelled or the agent left)."""
        for entry in list(self._open.values()):
            await self._close(entry, Decision(option=None, by=by))

    async def _close(self, entry: PendingPermission, decision: Decision) -> None:
        if entry.decision is not None:
            return
        # Claim first, without awaiting: this is what makes the first answer win.
        entry.decision = decision
        del self._open[entry.request_id]
        self._closed[entry.request_id] = None
        while len(self._closed) > MAX_REMEMBERED:
            self._closed.popitem(last=False)
        try:
            option = decision.option
            await self._recorder.permission_decision(
                request_id=entry.request_id,
                option_id=option.option_id if option else "",
                option_name=option.name if option else "Cancelled",
                option_kind=option.kind if option else "",
                outcome="selected" if option else "cancelled",
                by=decision.by,
            )
        except StoreError as exc:
            # Only when the session is stopping (otherwise the writer holds it): the next
            # host closes the request as interrupted (tunnel.agents.recovery).
            logger.warning("the decision on %s was not stored: %s", entry.request_id, exc)
        finally:
            # The agent goes on even if the decision could not be stored.
            entry.answered.set()
