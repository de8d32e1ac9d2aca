"""A module of tests/relay that sets `RELAY_FRAMINGS = True` runs each test that takes the
`relay` fixture once per framing the relay serves with (`tunnel relay --framing`)."""

from __future__ import annotations

import pytest

from tests.link.socket_pair import FRAMINGS


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "relay" in metafunc.fixturenames and getattr(metafunc.module, "RELAY_FRAMINGS", False):
        metafunc.parametrize("relay", FRAMINGS, indirect=True)
