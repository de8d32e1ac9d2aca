"""What a terminal prints of who is attached: the whole list once, then only the changes."""

from __future__ import annotations

from tunnel.app.host_messages import Member
from tunnel.terminal.presence import NAMES_SHOWN, PresenceLines

ANA = Member(name="ana", role="drive", id=0)
BO = Member(name="bo", role="view", id=1)


def keyed(*members: Member) -> list[tuple[int | None, Member]]:
    return [(member.id, member) for member in members]


def test_the_first_list_is_said_whole_then_only_who_joined_and_who_left() -> None:
    lines = PresenceLines()
    assert lines.update(keyed(ANA)) == ["attached: ana (drive)"]
    assert lines.update(keyed(ANA, BO)) == ["bo (view) joined"]
    assert lines.update(keyed(ANA, BO)) == []
    assert lines.update(keyed(BO)) == ["ana (drive) left"]


def test_two_members_of_one_name_are_two_members() -> None:
    lines = PresenceLines()
    twin = Member(name="ana", role="drive", id=5)
    lines.update(keyed(ANA))
    assert lines.update(keyed(ANA, twin)) == ["ana (drive) joined"]
    assert lines.update(keyed(twin)) == ["ana (drive) left"]


def test_a_crowd_is_counted_past_the_first_names() -> None:
    crowd = [Member(name=f"t{n}", role="view", id=n) for n in range(NAMES_SHOWN + 92)]
    (line,) = PresenceLines().update(keyed(*crowd))
    assert line.endswith(" and 92 more")
    assert line.count("(view)") == NAMES_SHOWN


def test_nobody() -> None:
    assert PresenceLines().update([]) == ["attached: nobody"]
