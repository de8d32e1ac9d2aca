"""The answers to one asked request: who may answer it, the distinct people who approved it so
far, and when it is decided (`approvals` of them allowed it, or any one of them refused it)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from .rules import ANSWERERS, Rule

Role = Literal["host", "drive"]
Outcome = Literal["open", "allowed", "refused"]


class Refused(Exception):
    """This answer does not count; `code` is the error the answerer is told."""

    def __init__(self, code: Literal["forbidden", "already_answered"], message: str) -> None:
        super().__init__(message)
        self.code: Literal["forbidden", "already_answered"] = code
        self.message = message


@dataclass(frozen=True, slots=True, kw_only=True)
class Vote:
    """One answer: who gave it, from which end, and whether it allows."""

    by: str
    role: Role
    """`host` for the host console, `drive` for a teammate's drive link."""
    allow: bool
    always: bool = False
    """The answerer chose an "always" option: remember the answer (within the rule's scope)."""
    verified: bool = False
    """`by` is who the answerer is, not a name it typed: a personal link's invited name (the
    host console is itself whatever this says)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Tally:
    """The votes so far on one request asked under `rule`."""

    rule: Rule
    votes: tuple[Vote, ...] = ()

    @property
    def approved_by(self) -> tuple[str, ...]:
        return tuple(v.by for v in self.votes if v.allow)

    @property
    def needed(self) -> int:
        """How many more approvals allow it."""
        return max(self.rule.approvals - len(self.approved_by), 0)

    def may_answer(self, by: str, role: Role, *, verified: bool = False) -> bool:
        """Whether the rule's `answer` list lets `by` (from `role`) answer. A person the rule
        names answers only as that person (`verified`): a name typed on a role link would let
        anyone holding it be them."""
        answer = self.rule.answer
        return (
            (role == "host" and "host" in answer)
            or (role == "drive" and "drivers" in answer)
            or (verified and by in answer and by not in ANSWERERS)
        )

    def add(self, vote: Vote) -> tuple[Tally, Outcome]:
        """The tally with `vote` counted, and whether the request is now decided.

        Raises Refused (`forbidden`) for someone the rule does not let answer, and
        (`already_answered`) for a second answer from someone who already approved."""
        if not self.may_answer(vote.by, vote.role, verified=vote.verified):
            raise Refused("forbidden", "the approval policy does not let you answer this request")
        if self.rule.approvals > 1 and vote.role != "host" and not vote.verified:
            # Distinct people need distinct identities: one holder of a role link could type
            # a second name and count twice.
            raise Refused(
                "forbidden",
                "this request needs approvals from people invited by name (personal links)",
            )
        if vote.by in self.approved_by:
            raise Refused("already_answered", "you already approved this request")
        tally = replace(self, votes=(*self.votes, vote))
        if not vote.allow:
            return tally, "refused"
        return tally, "allowed" if tally.needed == 0 else "open"

    @property
    def remember(self) -> bool:
        """Whether the decided answer is remembered: the rule allows it and every vote chose
        an "always" option."""
        return self.rule.remember != "once" and all(v.always for v in self.votes)
