"""Suite-wide fixtures and the rule that required suites may not be skipped."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

from tests.support import RelayProcess

if TYPE_CHECKING:
    from tests.relay.cluster.support import RedisServer

# Property tests check behaviour, not speed: on a busy 2-core machine a slow example is not a
# failure (speed is measured in bench/).
settings.register_profile(
    "agent-tunnel", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("agent-tunnel")

# A suite started as a background job of a script has SIGINT ignored (POSIX, for asynchronous
# lists), and every program it starts would inherit that: the sandboxed shells' job control and
# Ctrl-C tests need Ctrl-C to mean what it means on a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# A parallel test worker (pytest-xdist) is given COLUMNS=80 and LINES=24; the programs the tests
# start on terminals of a set size would take those over the terminal's own.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)

REQUIRED_MARKERS = ("browser", "sandbox", "agents_real", "cluster", "service")
_skipped: list[str] = []
_missing_suites: list[str] = []


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def relay(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RelayProcess]:
    """`tunnel relay` as a subprocess on a free loopback port, stopped after the test; on the
    framing a module's `RELAY_FRAMINGS` parametrizes (tests/relay/conftest.py), else the
    default."""
    framing = getattr(request, "param", None)
    process = RelayProcess(tmp_path, *(["--framing", framing] if framing else [])).start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def bwrap() -> str:
    """bubblewrap, checked to make a sandbox here. The `sandbox` suite is required: under
    TUNNEL_REQUIRE_ALL=1 it fails without one (and says how to get it), never skips."""
    path = shutil.which("bwrap")
    problem = "bwrap is not installed (apt-get install -y bubblewrap)"
    if path is not None:
        probe = [path, "--unshare-all", "--unshare-user", "--die-with-parent"]
        probe += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--", "true"]
        result = subprocess.run(probe, capture_output=True, text=True, timeout=30, check=False)
        if result.returncode == 0:
            return path
        problem = f"bwrap cannot make a sandbox here: {result.stderr.strip()}"
    if _require_all():
        pytest.fail(f"the sandbox tests need bubblewrap: {problem}", pytrace=False)
    pytest.skip(f"the sandbox tests need bubblewrap: {problem}")


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """Debian's redis-server on a free loopback port, in memory only, stopped after the test.
    The `cluster` suite is required: under TUNNEL_REQUIRE_ALL=1 it fails without one."""
    if shutil.which("redis-server") is None:
        problem = "the cluster tests need redis-server (apt-get install -y redis-server)"
        if _require_all():
            pytest.fail(problem, pytrace=False)
        pytest.skip(problem)
    # Imported here: only the cluster suite needs it, and it loads the host's modules.
    from tests.relay.cluster.support import RedisServer

    server = RedisServer(tmp_path / "redis").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def haproxy() -> str:
    """Debian's haproxy, the load balancer the cluster tests put in front of their nodes. The
    `cluster` suite is required: under TUNNEL_REQUIRE_ALL=1 it fails without one."""
    # Debian installs it in /usr/sbin, which is not on every user's PATH.
    path = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/sbin")
    if path is None:
        problem = "the cluster tests need haproxy (apt-get install -y haproxy)"
        if _require_all():
            pytest.fail(problem, pytrace=False)
        pytest.skip(problem)
    return path


@pytest.fixture
def nginx() -> str:
    """Debian's nginx, which the `service` suite puts in front of a relay as relay/nginx.conf
    configures it. The suite is required: under TUNNEL_REQUIRE_ALL=1 it fails without one."""
    path = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")
    if path is None:
        problem = "the service tests need nginx (apt-get install -y nginx)"
        if _require_all():
            pytest.fail(problem, pytrace=False)
        pytest.skip(problem)
    return path


@pytest.fixture
def systemd_analyze() -> str:
    """systemd-analyze, which checks relay/tunnel-relay.service (Debian's systemd package; it
    need not be the init). The `service` suite is required: under TUNNEL_REQUIRE_ALL=1 it fails
    without it."""
    path = shutil.which("systemd-analyze")
    if path is None:
        problem = "the service tests need systemd-analyze (apt-get install -y systemd)"
        if _require_all():
            pytest.fail(problem, pytrace=False)
        pytest.skip(problem)
    return path


def _require_all() -> bool:
    return os.environ.get("TUNNEL_REQUIRE_ALL") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    selected = config.getoption("-k") or config.getoption("-m")
    # Paths given on the command line, not the suite's testpaths (an option's value, such as
    # `-n auto`'s, is not a path).
    paths = config.args_source is pytest.Config.ArgsSource.ARGS
    if not _require_all() or selected or paths:
        return
    # A whole run (no paths, no -k/-m selection) must include every required suite.
    for marker in REQUIRED_MARKERS:
        if not any(item.get_closest_marker(marker) for item in items):
            problem = f"required suite {marker!r} collected no test"
            if not os.environ.get("PYTEST_XDIST_WORKER"):
                raise pytest.UsageError(problem)
            # A worker's UsageError reaches the controller as an internal error without its
            # message: the worker runs one test instead, which fails with it.
            _missing_suites.append(problem)
            del items[1:]
            return


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _missing_suites:
        pytest.fail(_missing_suites[0], pytrace=False)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _require_all() and _skipped:
        print(f"\n{len(_skipped)} test(s) skipped; with TUNNEL_REQUIRE_ALL=1 nothing may skip:")
        for nodeid in _skipped:
            print(f"  {nodeid}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
