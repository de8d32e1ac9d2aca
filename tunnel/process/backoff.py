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

REFUSED_MAX_BACKOFF = 1.0
"""Cap of the delay after an attempt the relay's machine refused at once (nothing listens on the
port, as while the relay restarts): it is likely back within seconds, and a refused connection
costs it nothing. A timeout or any other failure waits up to the full cap."""

JITTER = 0.5
"""A delay is drawn between (1 - JITTER) and all of its upper bound."""


@dataclass(slots=True, kw_only=True)
class Backoff:
    """Delays before successive reconnect attempts.

    Attempt n waits a random time between half and all of min(maximum, initial * factor**n), so
    peers that lost the same relay do not all come back in the same instant. After an attempt
    refused at once, `refused_maximum` caps it instead of `maximum`, and n stops growing there:
    refusals alone never make a later delay longer than that, timeouts and other failures do.
    """

    initial: float = BACKOFF_INITIAL
    """Upper bound of the first delay, in seconds."""

    maximum: float = HOST_MAX_BACKOFF
    """Cap of every delay, in seconds."""

    refused_maximum: float = REFUSED_MAX_BACKOFF
    """Cap of a delay after an attempt that was refused at once, in seconds (at most `maximum`)."""

    factor: float = BACKOFF_FACTOR
    """Growth per failed attempt."""

    rng: random.Random = field(default_factory=random.Random)
    """Source of jitter (seedable in tests)."""

    attempt: int = 0
    """Failed attempts since the last reset."""

    def next_delay(self, *, refused: bool = False) -> float:
        """Return the delay before the next attempt and count this attempt.

        `refused`: the attempt was refused at once (connection refused); the delay is then capped
        at `refused_maximum` instead of `maximum`, and counts only until it reaches that cap.
        """
        cap = min(self.maximum, self.refused_maximum) if refused else self.maximum
        # Capping the exponent keeps the power finite however long the relay stays away.
        ceiling = min(cap, self.initial * self.factor ** min(self.attempt, 64))
        if not refused or ceiling < cap:
            self.attempt += 1
        return ceiling * (1 - JITTER + JITTER * self.rng.random())

    def reset(self) -> None:
        """Start over from `initial`: the last connection was healthy."""
        self.attempt = 0
