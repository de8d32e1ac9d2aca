"""Who gets in: a teammate's token matched against the verifiers its host registered.

The hellos themselves are built and checked in `tunnel.handshake`; a refusal there or here is a
`HelloError` carrying the close code (docs/relay.md, "Hello and admission").
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tunnel.e2e.crypto import ROLES
from tunnel.handshake import Invited


@dataclass(frozen=True, slots=True, kw_only=True)
class Match:
    """Which of a host's verifiers a token matched."""

    role: str
    """The role the token grants."""

    invitation: bytes | None = field(default=None, repr=False)
    """The verifier of the personal link it matched, None for a role link. The relay passes it
    to the host in the open's `peer`; the host binds the person only by the open's proof."""


def match_role(token_hash: bytes, verifiers: Mapping[str, bytes]) -> str | None:
    """Return the role whose verifier equals `token_hash`, or None. Constant time per verifier."""
    found = match(token_hash, verifiers)
    return None if found is None else found.role


def match(
    token_hash: bytes, verifiers: Mapping[str, bytes], invited: Sequence[Invited] = ()
) -> Match | None:
    """Return which verifier (of a role link or a personal link) equals `token_hash`, or None.

    Every verifier is compared, in constant time each, so the time taken says nothing about
    which one matched.
    """
    found: Match | None = None
    for role in ROLES:
        verifier = verifiers.get(role)
        if verifier is not None and hmac.compare_digest(token_hash, verifier):
            found = Match(role=role)
    for entry in invited:
        if hmac.compare_digest(token_hash, entry.verifier):
            found = Match(role=entry.role, invitation=entry.verifier)
    return found
