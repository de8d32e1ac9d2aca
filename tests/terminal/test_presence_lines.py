"""What a terminal prints of who is attached: the whole list once, then only the changes."""

from __future__ import annotations

from tunnel.app.host_messages import Member, PresenceDelta, PresenceMessage
from tunnel.app.roster import Roster
from tunnel.terminal.presence import NAMES_SHOWN, change_lines, whole_line

ANA = Member(name="ana", role="drive", id=0)
BO = Member(name="bo", role="view", id=1)


def test_deltas_and_whole_lists_both_say_only_who_joined_and_who_left() -> None:
    roster = Roster()
    assert change_lines(roster.apply(PresenceMessage(members=[ANA], you=0))) == [
        "ana (drive) joined"
    ]
    assert change_lines(roster.apply(PresenceDelta(joined=[BO], left=[]))) == ["bo (view) joined"]
    assert change_lines(roster.apply(PresenceDelta(joined=[], left=[0]))) == ["ana (drive) left"]
    assert roster.members == [BO]
    # A whole list again (a reconnect): told apart from the list held by member id.
    twin = Member(name="bo", role="view", id=7)
    change = roster.apply(PresenceMessage(members=[BO, twin], you=7))
    assert change_lines(change) == ["bo (view) joined"]
    assert (roster.you, roster.members) == (7, [BO, twin])


def test_a_delta_for_someone_unknown_changes_nothing() -> None:
    roster = Roster()
    roster.apply(PresenceMessage(members=[ANA]))
    assert change_lines(roster.apply(PresenceDelta(joined=[ANA], left=[5]))) == []
    assert roster.members == [ANA]


def test_a_host_without_member_ids_is_keyed_by_place() -> None:
    roster = Roster()
    same = Member(name="x", role="view")
    roster.apply(PresenceMessage(members=[same, same]))
    assert len(roster.members) == 2


def test_the_whole_list_is_one_line_counting_past_the_first_names() -> None:
    crowd = [Member(name=f"t{n}", role="view", id=n) for n in range(NAMES_SHOWN + 92)]
    line = whole_line(crowd)
    assert line.endswith(" and 92 more")
    assert line.count("(view)") == NAMES_SHOWN
    assert whole_line([ANA, BO]) == "attached: ana (drive), bo (view)"
    assert whole_line([]) == "attached: nobody"
