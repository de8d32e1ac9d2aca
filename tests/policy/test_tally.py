"""The answers to an asked request: who may answer, distinct approvals, one refusal refuses."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tunnel.policy import Rule, Tally, Vote
from tunnel.policy.tally import Refused, Role

LEADS = Rule(index=1, line=1, verdict="ask", answer=("alice", "bob", "carol"), approvals=2)


def vote(by: str, *, allow: bool = True, role: Role = "drive", verified: bool = True) -> Vote:
    """A vote; by default from a personal link, whose name is who the answerer is."""
    return Vote(by=by, role=role, allow=allow, verified=verified)


def test_who_may_answer() -> None:
    anyone = Tally(rule=Rule(index=0, line=0, verdict="ask"))
    assert anyone.may_answer("zed", "drive")
    assert anyone.may_answer("hannah", "host")
    host_only = Tally(rule=Rule(index=1, line=1, verdict="ask", answer=("host",)))
    assert host_only.may_answer("hannah", "host")
    assert not host_only.may_answer("host", "drive")  # a typed name is not the console
    leads = Tally(rule=LEADS)
    assert leads.may_answer("alice", "drive", verified=True)
    assert not leads.may_answer("mallory", "drive", verified=True)
    # "alice" typed on a role link is not alice.
    assert not leads.may_answer("alice", "drive")


def test_two_people_are_two_verified_identities_never_two_typed_names() -> None:
    drivers = Rule(index=1, line=1, verdict="ask", answer=("drivers", "host"), approvals=2)
    with pytest.raises(Refused) as typed:
        Tally(rule=drivers).add(vote("alice", verified=False))
    assert typed.value.code == "forbidden"
    # The host console and an invited person make two.
    tally, outcome = Tally(rule=drivers).add(vote("hannah", role="host", verified=False))
    assert outcome == "open"
    tally, outcome = tally.add(vote("alice"))
    assert outcome == "allowed"
    # One approval is enough: a role link's typed name may give it.
    one = Rule(index=1, line=1, verdict="ask", answer=("drivers",), approvals=1)
    assert Tally(rule=one).add(vote("zed", verified=False))[1] == "allowed"


def test_the_same_person_twice_does_not_make_two() -> None:
    tally, outcome = Tally(rule=LEADS).add(vote("alice"))
    assert (outcome, tally.needed) == ("open", 1)
    with pytest.raises(Refused) as again:
        tally.add(vote("alice"))
    assert again.value.code == "already_answered"
    tally, outcome = tally.add(vote("bob"))
    assert (outcome, tally.approved_by) == ("allowed", ("alice", "bob"))


@given(
    st.lists(
        st.tuples(st.sampled_from(["alice", "bob", "carol", "mallory"]), st.booleans()),
        max_size=8,
    ),
    st.integers(min_value=1, max_value=3),
)
def test_allowed_exactly_when_enough_distinct_people_allowed_before_any_refusal(
    answers: list[tuple[str, bool]], approvals: int
) -> None:
    rule = Rule(index=1, line=1, verdict="ask", answer=LEADS.answer, approvals=approvals)
    tally = Tally(rule=rule)
    outcome = "open"
    approved: list[str] = []
    for name, allow in answers:
        if outcome != "open":
            break
        if name == "mallory" or name in approved:
            with pytest.raises(Refused) as refused:
                tally.add(vote(name, allow=allow))
            assert refused.value.code == ("forbidden" if name == "mallory" else "already_answered")
            continue
        tally, outcome = tally.add(vote(name, allow=allow))
        if allow:
            approved.append(name)
        expected = "refused" if not allow else "allowed" if len(approved) == approvals else "open"
        assert outcome == expected
    assert len(set(tally.approved_by)) == len(tally.approved_by) <= approvals
