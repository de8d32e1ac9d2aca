"""Reconnect delays: capped exponential backoff with jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(slots=True, kw_only=True)
class Backoff:
    """Delays before successive reconnect attempts.

    Attempt n waits a random time between half and all of min(maximum, initial * factor**n), so
    hosts that lost the same relay do not all come back in the same instant.
    """

    initial: float = 0.5
    """Upper bound of the first delay, in seconds."""

    maximum: float = 30.0
    """Cap of every delay, in seconds."""

    factor: float = 2.0
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
        return ceiling * (0.5 + 0.5 * self.rng.random())

    def reset(self) -> None:
        """Start over from `initial`: the last connection was healthy."""
        self.attempt = 0
