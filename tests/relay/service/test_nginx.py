"""The relay as a service, end to end: `tunnel relay` as relay/tunnel-relay.service starts it
(its command line and environment, no new privileges, no memory both writable and executable),
behind nginx as relay/nginx.conf configures it, with TLS on a certificate the test makes. A host
registers and a teammate attaches over wss:// through nginx, and the page and its files come
over https; everything on loopback."""

from __future__ import annotations

import os
import re
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.host.teammate import attached
from tests.relay.service.nginx import Certificates, Nginx, free_port, make_certificates
from tests.relay.service.unit import (
    confine,
    environment,
    memory_deny_write_execute_works,
    relay_argv,
)
from tests.support import read_line, stop_process
from tunnel.app.requests import Prompt
from tunnel.relay.web import static_response

pytestmark = [pytest.mark.service, pytest.mark.anyio, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[3]
FAKE_ACP_AGENT = ROOT / "tests" / "agents" / "fake_acp_agent.py"
LISTENING = re.compile(r"relay listening on http://127\.0\.0\.1:(\d+)")


@pytest.fixture
def certificates(tmp_path: Path) -> Certificates:
    return make_certificates(tmp_path / "tls")


@pytest.fixture
def public_port() -> int:
    """Where nginx listens: the relay's public URL names it."""
    return free_port()


@pytest.fixture
def unit_relay(tmp_path: Path, public_port: int) -> Iterator[int]:
    """The relay as the unit runs it, its public URL nginx's (as /etc/tunnel/relay.env would
    say); its port."""
    env = dict(os.environ, **environment())
    env["TUNNEL_RELAY_PUBLIC_URL"] = f"https://127.0.0.1:{public_port}"
    with (tmp_path / "relay.log").open("wb") as log:
        relay = subprocess.Popen(
            relay_argv(port=free_port()),
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=log,
            preexec_fn=confine,
        )
    try:
        line = read_line(relay, 20)
        match = LISTENING.search(line)
        assert match, f"{line!r}: {(tmp_path / 'relay.log').read_text()}"
        yield int(match.group(1))
        # SIGTERM, as systemd stops it: exit 0 (KillSignal=SIGTERM).
        assert stop_process(relay) == 0, (tmp_path / "relay.log").read_text()
    finally:
        stop_process(relay)
        if relay.stdout is not None:
            relay.stdout.close()


@pytest.fixture
def proxy(
    tmp_path: Path, nginx: str, certificates: Certificates, unit_relay: int, public_port: int
) -> Iterator[Nginx]:
    server = Nginx(tmp_path / "nginx", [unit_relay], nginx, certificates, port=public_port)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _get(url: str, ca: Path | None) -> tuple[int, str, bytes]:
    context = ssl.create_default_context(cafile=str(ca) if ca is not None else None)
    with urllib.request.urlopen(url, context=context, timeout=10) as response:
        return response.status, response.headers.get("Content-Type", ""), response.read()


async def test_a_teammate_attaches_over_wss_through_nginx_and_the_page_comes_over_https(
    tmp_path: Path,
    proxy: Nginx,
    certificates: Certificates,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    argv = [sys.executable, "-m", "tunnel.cli", "host", "--relay", proxy.url]
    argv += ["--agent", f"acp:{sys.executable} {FAKE_ACP_AGENT}", "--workspace", str(workspace)]
    argv += ["--log-db", str(tmp_path / "log.db"), "--key-file", str(tmp_path / "key")]
    argv += ["--no-interactive"]
    # The host trusts the test's authority, as a machine trusts a real one.
    env = dict(os.environ, PYTHONUNBUFFERED="1", SSL_CERT_FILE=str(certificates.ca))
    host = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
    )
    try:
        link = ""
        for _ in range(20):
            line = await anyio.to_thread.run_sync(read_line, host)
            if match := re.search(r"drive link: (\S+)", line):
                link = match.group(1)
                break
        # The host registered over wss:// through nginx: its links name nginx's https origin.
        assert link.startswith(f"{proxy.url}/h/"), link

        # The TLS is nginx's, on the test's certificate: a client that does not trust the
        # authority is refused.
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            await anyio.to_thread.run_sync(_get, link.split("#", 1)[0], None)
        monkeypatch.setenv("SSL_CERT_FILE", str(certificates.ca))
        async with attached(link, "bob") as bob:
            await bob.send(Prompt(text="through nginx"))
            await bob.wait_for(lambda t: t.item_of("message", text="echo: through nginx"))

        page_url = link.split("#", 1)[0]
        status, kind, page = await anyio.to_thread.run_sync(_get, page_url, certificates.ca)
        assert (status, kind.split(";")[0]) == (200, "text/html")
        asset = re.search(rb'src="(/static/[^"]+\.js)"', page)
        assert asset, page[:500]
        path = asset.group(1).decode()
        status, _, body = await anyio.to_thread.run_sync(_get, proxy.url + path, certificates.ca)
        expected = static_response(path)
        assert expected is not None
        assert (status, body) == (200, expected[2])
    finally:
        stop_process(host)
        if host.stdout is not None:
            host.stdout.close()


def test_the_relays_confinement_holds_no_new_privileges_and_no_writable_code() -> None:
    """What the end-to-end test's confinement gives the relay's process: NoNewPrivileges=, and
    MemoryDenyWriteExecute= where this kernel has PR_SET_MDWE (Linux 6.3)."""
    probe = (
        "import mmap, re\n"
        "print(re.search(r'NoNewPrivs:\\s*(\\d)', open('/proc/self/status').read())[1])\n"
        "mmap.mmap(-1, 4096, prot=mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        preexec_fn=confine,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.stdout.strip() == "1"
    if memory_deny_write_execute_works():
        assert result.returncode != 0
        assert "PermissionError" in result.stderr
