"""Who gets in: a teammate's token matched against the verifiers its host registered.

The hellos themselves are built and checked in `tunnel.handshake`; a refusal there or here is a
`HelloError` carrying the close code (docs/relay.md, "Hello and admission").
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from tunnel.e2e.crypto import ROLES


def match_role(token_hash: bytes, verifiers: Mapping[str, bytes]) -> str | None:
    """Return the role whose verifier equals `token_hash`, or None. Constant time per verifier."""
    found = None
    for role in ROLES:
        verifier = verifiers.get(role)
        if verifier is not None and hmac.compare_digest(token_hash, verifier):
            found = role
    return found
