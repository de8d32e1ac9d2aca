"""A replay link's name never takes another link's: every /share-replay makes a new link, and
the ones shared before keep working, whatever the case of the conversation's id."""

from __future__ import annotations

from pathlib import Path

from tunnel.host.invitations import Invitations
from tunnel.host.replay_link import ReplayLink


def test_a_second_replay_of_a_conversation_with_capitals_is_a_new_link(tmp_path: Path) -> None:
    invitations = Invitations.load(tmp_path / "share_secrets.invitations")
    first = invitations.add_replay(ReplayLink(conversation="Bugfix-42", upto=3))
    second = invitations.add_replay(ReplayLink(conversation="Bugfix-42", upto=7))
    assert first.name != second.name
    assert first.name.casefold() != second.name.casefold()
    # The first link is still the one shared: same secret, same scope.
    assert invitations.get(first.name) == first
    assert len(invitations.all()) == 2
