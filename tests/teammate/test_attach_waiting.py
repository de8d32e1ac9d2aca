"""`tunnel attach` while it cannot attach: it says on stderr what it waits for, hints once that a
link whose host is never online may be wrong, and gives up when told to."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import RelayProcess
from tunnel.e2e.crypto import ShareLink
from tunnel.e2e.identity import HostIdentity
from tunnel.process.exit_codes import EXIT_UNREACHABLE
from tunnel.teammate.attach import HOST_GONE_HINT

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]


def _link(relay_url: str) -> ShareLink:
    """A well-formed drive link for a host id that no host has."""
    return ShareLink(
        relay_url=relay_url,
        host_id=HostIdentity.generate().host_id,
        role="drive",
        secret=os.urandom(32),
    )


def _attach(link: ShareLink, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tunnel", "attach", *args, str(link)],
        cwd=ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_attach_to_a_dead_relay_names_it_on_stderr_and_gives_up_when_told() -> None:
    with socket.socket() as sock:  # a loopback port where nothing listens
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    result = _attach(_link(url), "--give-up-after", "1")
    assert result.returncode == EXIT_UNREACHABLE, result.stderr
    assert result.stdout == ""  # stdout is the conversation's alone
    *waiting, last = result.stderr.splitlines()
    assert waiting, "it said nothing while it waited"
    for line in waiting:
        assert line.startswith(f"cannot reach the relay at {url}: ")
        assert "; retrying in " in line
    assert last.startswith(f"tunnel attach: cannot reach the relay at {url}: ")
    assert last.endswith("; gave up after 1 s")


def test_a_link_whose_host_is_never_online_gets_one_hint(relay: RelayProcess) -> None:
    result = _attach(_link(relay.url), "--give-up-after", "6")
    assert result.returncode == EXIT_UNREACHABLE, result.stderr
    lines = result.stderr.splitlines()
    assert lines.count(HOST_GONE_HINT) == 1
    offline = [line for line in lines if line.startswith("the host is offline")]
    # The hint comes after the first few "offline" answers, not at the first one.
    assert len(offline) >= 3
    assert lines.index(HOST_GONE_HINT) > lines.index(offline[1])
    assert lines[-1].startswith("tunnel attach: the host is offline")
