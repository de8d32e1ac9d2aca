"""The relay's routing table, without any network."""

from __future__ import annotations

import pytest

from tunnel.proto.codes import CloseCode
from tunnel.relay.routing import Endpoint, RouteExistsError, RoutingTable


def make_table() -> RoutingTable[str]:
    table: RoutingTable[str] = RoutingTable()
    table.add(teammate="alice", teammate_channel=1, host="host", host_channel=2)
    table.add(teammate="bob", teammate_channel=1, host="host", host_channel=4)
    table.add(teammate="alice", teammate_channel=3, host="host", host_channel=6)
    return table


def test_each_end_finds_the_other() -> None:
    table = make_table()
    assert table.peer("alice", 1) == Endpoint(link="host", channel=2)
    assert table.peer("bob", 1) == Endpoint(link="host", channel=4)
    assert table.peer("host", 6) == Endpoint(link="alice", channel=3)
    assert len(table) == 3


def test_the_same_id_on_two_teammate_links_is_two_channels() -> None:
    table = make_table()
    # Both teammates use id 1; each reaches its own host channel.
    assert table.peer("alice", 1) != table.peer("bob", 1)


def test_a_link_cannot_name_channels_of_another_link() -> None:
    table = make_table()
    # bob never opened 3 (alice did) and the host's ids mean nothing on a teammate link.
    assert table.lookup("bob", 3) is None
    assert table.lookup("bob", 2) is None
    assert table.lookup("alice", 4) is None
    assert table.lookup("mallory", 1) is None


def test_routing_a_channel_twice_is_refused() -> None:
    table = make_table()
    with pytest.raises(RouteExistsError):
        table.add(teammate="alice", teammate_channel=1, host="host", host_channel=8)
    with pytest.raises(RouteExistsError):
        table.add(teammate="carol", teammate_channel=1, host="host", host_channel=2)
    with pytest.raises(ValueError, match="two different links"):
        table.add(teammate="host", teammate_channel=1, host="host", host_channel=8)


def test_removing_one_end_removes_the_route_both_ways() -> None:
    table = make_table()
    route = table.remove("host", 4)
    assert route is not None
    assert route.teammate == Endpoint(link="bob", channel=1)
    assert table.lookup("bob", 1) is None
    assert table.lookup("host", 4) is None
    assert table.remove("host", 4) is None
    assert len(table) == 2


def test_removing_a_host_link_closes_its_teammates_channels_with_host_gone() -> None:
    table = make_table()
    to_close = table.remove_link("host")
    assert {(c.endpoint.link, c.endpoint.channel) for c in to_close} == {
        ("alice", 1),
        ("alice", 3),
        ("bob", 1),
    }
    assert all(c.code == CloseCode.HOST_GONE for c in to_close)
    assert len(table) == 0
    assert table.channels("alice") == 0


def test_removing_a_teammate_link_closes_only_its_host_channels_with_going_away() -> None:
    table = make_table()
    to_close = table.remove_link("alice")
    assert sorted(c.endpoint.channel for c in to_close) == [2, 6]
    assert all(c.endpoint.link == "host" for c in to_close)
    assert all(c.code == CloseCode.GOING_AWAY for c in to_close)
    assert table.peer("bob", 1) == Endpoint(link="host", channel=4)
    assert table.channels("host") == 1


def test_removing_an_unknown_link_returns_nothing() -> None:
    assert make_table().remove_link("nobody") == []


def test_routes_of_a_link_is_a_snapshot() -> None:
    table = make_table()
    routes = table.routes("host")
    assert len(routes) == 3
    for route in routes:
        table.remove(route.host.link, route.host.channel)
    assert len(table) == 0


def test_an_id_is_reusable_once_its_route_is_gone() -> None:
    table = make_table()
    table.remove("alice", 1)
    table.add(teammate="alice", teammate_channel=1, host="host", host_channel=8)
    assert table.peer("alice", 1) == Endpoint(link="host", channel=8)
