"""Fixtures of the network tests: a relay subprocess per test, on a free loopback port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .support import RelayProcess


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[RelayProcess]:
    process = RelayProcess(tmp_path).start()
    try:
        yield process
    finally:
        process.stop()
