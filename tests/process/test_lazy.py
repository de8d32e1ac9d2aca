"""Package re-exports loaded on first use: each name is the object its home module defines."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from tunnel.process.lazy import lazy_exports

LAZY_PACKAGES = ("tunnel.log", "tunnel.host", "tunnel.agents")


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_exported_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name


def test_a_name_comes_from_its_home_and_is_kept() -> None:
    from tunnel.log import SQLiteStore
    from tunnel.log.sqlite import SQLiteStore as home

    assert SQLiteStore is home
    assert vars(sys.modules["tunnel.log"])["SQLiteStore"] is home


def test_an_unknown_name_is_an_attribute_error() -> None:
    getattr_ = lazy_exports("tunnel.log", {})
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        getattr_("Nope")
    with pytest.raises(ImportError):
        exec("from tunnel.host import Nope", {})


def test_importing_the_packages_loads_none_of_their_parts() -> None:
    code = (
        "import sys, tunnel.log, tunnel.host\n"
        "print(' '.join(m for m in sys.modules if m.startswith(('tunnel.', 'acp', 'anyio'))))"
    )
    loaded = set(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
        ).stdout.split()
    )
    assert loaded == {"tunnel.log", "tunnel.host", "tunnel.process", "tunnel.process.lazy"}


def test_the_agents_package_loads_acp_only_when_an_acp_session_is_asked_for() -> None:
    code = (
        "import sys, tunnel.agents\n"
        "assert 'acp' not in sys.modules, 'imported by tunnel.agents'\n"
        "tunnel.agents.AcpSession\n"
        "assert 'acp' in sys.modules, 'AcpSession without acp'\n"
    )
    subprocess.run([sys.executable, "-c", code], timeout=60, check=True)
