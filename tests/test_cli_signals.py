"""Every long-running command agrees on how a signal ends it: 130 after SIGINT (Ctrl-C), as a
shell reports it, and 0 after SIGTERM, a service manager's normal stop."""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import RelayProcess, read_line, start_host_process
from tunnel.e2e.crypto import ShareLink
from tunnel.e2e.identity import HostIdentity
from tunnel.process.exit_codes import EXIT_INTERRUPTED, EXIT_OK

pytestmark = pytest.mark.timeout(90)

ROOT = Path(__file__).resolve().parents[1]

ENDINGS = [(signal.SIGINT, EXIT_INTERRUPTED), (signal.SIGTERM, EXIT_OK)]


def _stop(proc: subprocess.Popen[bytes], signum: signal.Signals) -> int:
    proc.send_signal(signum)
    try:
        return proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
        raise AssertionError(f"still running 15 s after {signum.name}") from None


def _stderr_line(proc: subprocess.Popen[bytes], timeout: float = 20.0) -> str:
    """One line of `proc`'s stderr, failing after `timeout` seconds."""
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stderr, selectors.EVENT_READ)
        while not buffer.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no stderr line in time; got {buffer!r}")
            if selector.select(remaining):
                chunk = os.read(proc.stderr.fileno(), 1)
                if not chunk:
                    raise AssertionError(f"stderr closed; got {buffer!r}")
                buffer += chunk
    return buffer.decode(errors="replace")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_DATA_HOME=str(tmp_path / "data"),
    )


@pytest.mark.parametrize(("signum", "code"), ENDINGS)
def test_the_relay_exit_code_says_which_signal_stopped_it(
    tmp_path: Path, signum: signal.Signals, code: int
) -> None:
    relay = RelayProcess(tmp_path).start()
    try:
        assert relay.proc is not None
        assert _stop(relay.proc, signum) == code, relay.stderr()
    finally:
        relay.stop()


@pytest.mark.parametrize(("signum", "code"), ENDINGS)
def test_the_demo_exit_code_says_which_signal_stopped_it(
    tmp_path: Path, env: dict[str, str], signum: signal.Signals, code: int
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tunnel", "demo", "--port", "0"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(20):
            if "drive:" in read_line(proc, timeout=30):
                break
        assert _stop(proc, signum) == code
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


@pytest.mark.parametrize(("signum", "code"), ENDINGS)
def test_the_host_exit_code_says_which_signal_stopped_it(
    relay: RelayProcess, tmp_path: Path, signum: signal.Signals, code: int
) -> None:
    proc = start_host_process(relay.url, tmp_path / "key")
    try:
        assert read_line(proc, timeout=30).startswith("host id:")
        assert _stop(proc, signum) == code
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


@pytest.mark.parametrize(("signum", "code"), ENDINGS)
def test_attach_exit_code_says_which_signal_stopped_it(
    tmp_path: Path, env: dict[str, str], signum: signal.Signals, code: int
) -> None:
    with socket.socket() as sock:  # a loopback port where nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    link = ShareLink(
        relay_url=f"http://127.0.0.1:{port}",
        host_id=HostIdentity.generate().host_id,
        role="drive",
        secret=os.urandom(32),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "tunnel", "attach", str(link)],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert "retrying" in _stderr_line(proc)  # it is running, waiting for the relay
        assert _stop(proc, signum) == code
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
