"""The WebSocket libraries a link can run over, by name, and the check that one is installed:
what the commands' `--framing` options and the settings they build take (the libraries
themselves load only once a link is opened; tunnel/link/framing.py is the seam)."""

from __future__ import annotations

import enum


class FramingName(enum.StrEnum):
    """A WebSocket library a link runs over."""

    websockets = "websockets"
    """python-websockets: always installed, the default."""
    picows = "picows"
    """picows: parses frames in Cython (the `fast` extra: pip install 'agent-tunnel[fast]')."""


FRAMINGS = tuple(framing.value for framing in FramingName)
"""Every framing's name, the default first."""


def check_framing(name: str, option: str = "--framing") -> str:
    """`name`, once it names a framing whose library is installed; else ValueError, one line
    that says what to install (`option` is how the caller spells the setting)."""
    if name not in FRAMINGS:
        raise ValueError(f"{option} must be one of {', '.join(FRAMINGS)}")
    if name == FramingName.picows:
        try:
            import picows  # noqa: F401
        except ImportError:
            raise ValueError(
                f"{option} picows needs the picows package: pip install 'agent-tunnel[fast]'"
            ) from None
    return name
