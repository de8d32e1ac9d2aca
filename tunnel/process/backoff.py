"""Reconnect delays: capped exponential backoff with jitter, the one policy of every end.

The host, `tunnel attach` and the page (which gets these numbers from Python through the
generated wire module) all wait this way before trying again.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

BACKOFF_INITIAL = 0.5
"""Upper bound of the first delay, in seconds."""

BACKOFF_FACTOR = 2.0
"""Growth of the upper bound per failed attempt."""

HOST_MAX_BACKOFF = 30.0
"""Cap of a host's delay: a host waits for its relay unattended."""

TEAMMATE_MAX_BACKOFF = 10.0
"""Cap of a teammate's delay (attach, the page): a person is waiting to see the session."""

JITTER = 0.5
"""A delay is drawn between (1 - JITTER) and all of its upper bound."""


@dataclass(slots=True, kw_only=True)
class Backoff:
    """Delays before successive reconnect attempts.

    Attempt n waits a random time between half and all of min(maximum, initial * factor**n), so
    peers that lost the same relay do not all come back in the same instant.
    """

    initial: float = BACKOFF_INITIAL
    """Upper bound of the first delay, in seconds."""

    maximum: float = HOST_MAX_BACKOFF
    """Cap of every delay, in seconds."""

    factor: float = BACKOFF_FACTOR
    """Growth per failed attempt."""

    rng: random.Random = field(default_factory=random.Random)
    """Source of jitter (seedable in tests)."""

    attempt: int = 0
    """Failed attempts since the last reset."""

    def next_delay(self) -> float:
        """Return the delay before the next attempt and count this attempt."""
        # Capping the exponent keeps the power finite however long the relay stays away.
        ceiling = min(self.maximum, self.initial * self.factor ** min(self.attempt, 64))
        self.attempt += 1
        return ceiling * (1 - JITTER + JITTER * self.rng.random())

    def reset(self) -> None:
        """Start over from `initial`: the last connection was healthy."""
        self.attempt = 0
