"""What a terminal prints of who is attached: the whole list once, then only the changes."""

from __future__ import annotations

from tunnel.app.host_messages import Member, PresenceDelta, PresenceMessage
from tunnel.app.roster import Roster
from tunnel.terminal.presence import NAMES_SHOWN, change_lines, whole_line

ANA = Member(name="ana", role="drive", id=0)
BO = Member(name="bo", role="view", id=1)


def test_deltas_and_whole_lists_both_say_only_who_joined_and_who_left() -> None:
    roster = Roster()
    assert change_lines(roster.apply(PresenceMessage(members=[ANA], count=1, you=0))) == [
        "ana (drive) joined"
    ]
    assert change_lines(roster.apply(PresenceDelta(joined=[BO], left=[], count=2))) == [
        "bo (view) joined"
    ]
    assert change_lines(roster.apply(PresenceDelta(joined=[], left=[0], count=1))) == [
        "ana (drive) left"
    ]
    assert (roster.members, roster.count) == ([BO], 1)
    # A whole list again (a reconnect): told apart from the list held by member id.
    twin = Member(name="bo", role="view", id=7)
    change = roster.apply(PresenceMessage(members=[BO, twin], count=2, you=7))
    assert change_lines(change) == ["bo (view) joined"]
    assert (roster.you, roster.members) == (7, [BO, twin])


def test_a_delta_for_someone_unknown_changes_nothing() -> None:
    roster = Roster()
    roster.apply(PresenceMessage(members=[ANA], count=1))
    assert change_lines(roster.apply(PresenceDelta(joined=[ANA], left=[5], count=1))) == []
    assert roster.members == [ANA]


def test_a_host_without_member_ids_is_keyed_by_place() -> None:
    roster = Roster()
    same = Member(name="x", role="view")
    roster.apply(PresenceMessage(members=[same, same], count=2))
    assert len(roster.members) == 2


def test_the_count_is_the_hosts_and_never_below_the_members_listed() -> None:
    roster = Roster()
    roster.apply(PresenceMessage(members=[ANA, BO], count=900))
    assert roster.count == 900
    change = roster.apply(PresenceDelta(joined=[], left=[], count=901))
    assert (change_lines(change), roster.count) == ([], 901)  # an unlisted join: no line
    roster.apply(PresenceDelta(joined=[], left=[], count=0))  # a host that miscounts
    assert roster.count == 2


def test_the_whole_list_is_one_line_counting_past_the_first_names() -> None:
    crowd = [Member(name=f"t{n}", role="view", id=n) for n in range(NAMES_SHOWN + 92)]
    line = whole_line(crowd, len(crowd))
    assert line.endswith(" and 92 more")
    assert line.count("(view)") == NAMES_SHOWN
    # Those the host did not list are counted with the others not named.
    assert whole_line(crowd, 1000).endswith(f" and {1000 - NAMES_SHOWN} more")
    assert whole_line([ANA, BO], 2) == "attached: ana (drive), bo (view)"
    assert whole_line([ANA, BO], 5) == "attached: ana (drive), bo (view) and 3 more"
    assert whole_line([], 0) == "attached: nobody"
    assert whole_line([], 4) == "attached: 4"


def test_a_member_moved_up_into_a_crowded_list_is_not_said_to_have_joined() -> None:
    listed = [Member(name=f"t{n}", role="view", id=n) for n in range(3)]
    roster = Roster()
    roster.apply(PresenceMessage(members=listed, count=5, you=0))
    # t1 left; t3, attached all along but not listed, moves up into its place.
    crowded = roster.count > len(roster.members)
    t3 = Member(name="t3", role="view", id=3)
    change = roster.apply(PresenceDelta(joined=[t3], left=[1], count=4))
    assert change_lines(change, crowded=crowded) == ["t1 (view) left"]
    # Everyone listed again: a newcomer is news.
    roster.apply(PresenceDelta(joined=[], left=[4], count=3))
    crowded = roster.count > len(roster.members)
    t9 = Member(name="t9", role="drive", id=9)
    change = roster.apply(PresenceDelta(joined=[t9], left=[], count=4))
    assert change_lines(change, crowded=crowded) == ["t9 (drive) joined"]
