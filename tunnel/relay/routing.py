"""The relay's routing table: which teammate channel is which host channel (docs/relay.md).

Pure bookkeeping, no I/O. A route joins one channel on a teammate's link to one channel on a
host's link. Channel ids are only ever looked up together with the link they arrived on, so a
peer can only name channels of its own link: an id that is not in the table for that link is not
routed anywhere, whatever other link may use the same number.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from tunnel.proto.codes import CloseCode

L = TypeVar("L", bound=Hashable)


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint(Generic[L]):
    """One end of a route: a channel id on a link."""

    link: L
    """The link (connection) the channel lives on."""

    channel: int
    """The channel id, in that link's own id space."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Route(Generic[L]):
    """A teammate channel and the host channel the relay opened for it."""

    teammate: Endpoint[L]
    """The channel the teammate opened (teammate-chosen id)."""

    host: Endpoint[L]
    """The channel the relay opened on the host's link (relay-chosen id)."""

    def other(self, link: L, channel: int) -> Endpoint[L]:
        """Return the end opposite to (`link`, `channel`), which must be an end of this route."""
        if self.teammate.link == link and self.teammate.channel == channel:
            return self.host
        if self.host.link == link and self.host.channel == channel:
            return self.teammate
        raise KeyError((link, channel))


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelToClose(Generic[L]):
    """A channel that must be closed because the link at the other end of its route went away."""

    endpoint: Endpoint[L]
    """The surviving end: close this channel on this link."""

    code: CloseCode
    """The close code to send there."""


class RouteExistsError(Exception):
    """The caller tried to route a channel that is already routed (the relay's own mistake)."""


class RoutingTable(Generic[L]):
    """Maps (teammate link, teammate channel) <-> (host link, relay-chosen host channel).

    Bounded by the links' channel limits: every route is an open channel on two links.
    """

    def __init__(self) -> None:
        self._by_end: dict[tuple[L, int], Route[L]] = {}
        # Per link, its routed channel ids: removing a link must not scan every route.
        self._by_link: dict[L, set[int]] = {}

    def __len__(self) -> int:
        return len(self._by_end) // 2

    def add(self, *, teammate: L, teammate_channel: int, host: L, host_channel: int) -> Route[L]:
        """Record a new route; raise `RouteExistsError` if either end is already routed."""
        if teammate == host:
            raise ValueError("a route joins two different links")
        t_key, h_key = (teammate, teammate_channel), (host, host_channel)
        if t_key in self._by_end or h_key in self._by_end:
            raise RouteExistsError("channel already routed")
        route = Route(
            teammate=Endpoint(link=teammate, channel=teammate_channel),
            host=Endpoint(link=host, channel=host_channel),
        )
        self._by_end[t_key] = route
        self._by_end[h_key] = route
        self._by_link.setdefault(teammate, set()).add(teammate_channel)
        self._by_link.setdefault(host, set()).add(host_channel)
        return route

    def lookup(self, link: L, channel: int) -> Route[L] | None:
        """Return the route of `channel` on `link`, or None if that link has no such channel."""
        return self._by_end.get((link, channel))

    def peer(self, link: L, channel: int) -> Endpoint[L] | None:
        """Return the other end of `channel` on `link`, or None if it is not routed."""
        route = self._by_end.get((link, channel))
        return None if route is None else route.other(link, channel)

    def remove(self, link: L, channel: int) -> Route[L] | None:
        """Forget the route of `channel` on `link` (either end) and return it, or None."""
        route = self._by_end.get((link, channel))
        if route is None:
            return None
        for end in (route.teammate, route.host):
            del self._by_end[(end.link, end.channel)]
            ids = self._by_link[end.link]
            ids.discard(end.channel)
            if not ids:
                del self._by_link[end.link]
        return route

    def remove_link(self, link: L) -> list[ChannelToClose[L]]:
        """Forget every route through `link`; return the surviving ends to close, with their code.

        A host link going away closes its teammates' channels with HOST_GONE; a teammate link
        going away closes the host channels it used with GOING_AWAY.
        """
        to_close: list[ChannelToClose[L]] = []
        for channel in sorted(self._by_link.get(link, ())):
            route = self.remove(link, channel)
            if route is None:  # pragma: no cover - _by_link and _by_end change together
                continue
            if route.host.link == link:
                to_close.append(ChannelToClose(endpoint=route.teammate, code=CloseCode.HOST_GONE))
            else:
                to_close.append(ChannelToClose(endpoint=route.host, code=CloseCode.GOING_AWAY))
        return to_close

    def channels(self, link: L) -> int:
        """Return how many routed channels `link` has."""
        return len(self._by_link.get(link, ()))

    def routes(self, link: L) -> list[Route[L]]:
        """Return the routes through `link`, as a list: safe to remove routes while iterating."""
        return [self._by_end[(link, channel)] for channel in sorted(self._by_link.get(link, ()))]
