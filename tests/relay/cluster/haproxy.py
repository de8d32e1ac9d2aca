"""haproxy in front of the cluster tests' nodes, configured from relay/haproxy.cfg (which
docs/cluster.md quotes whole).

The shipped configuration is what operators install, so it is what the tests run: its bind line
becomes a loopback port without TLS (the tests dial ws://), its server lines name the tests' nodes
with the file's options (the health check included); every other line is used as written. A
`global` section adds haproxy's runtime API on a loopback port, through which a test chooses
which nodes take new connections.
"""

from __future__ import annotations

import re
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import anyio

from tests.support import stop_process

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "relay" / "haproxy.cfg"

BACKEND = "relay_nodes"
"""The shipped backend, whose servers the tests' nodes are."""

_BIND = re.compile(r"^([ \t]*)bind[ \t].*$", re.MULTILINE)
_SERVER = re.compile(r"^([ \t]*)server[ \t]+\S+[ \t]+\S+(.*)$", re.MULTILINE)


def free_port() -> int:
    """A loopback port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def shipped_config(path: Path = CONFIG) -> str:
    """relay/haproxy.cfg, as written."""
    return path.read_text()


def loopback_config(shipped: str, *, port: int, admin_port: int, node_ports: Sequence[int]) -> str:
    """`shipped` listening on 127.0.0.1:`port` without TLS, with one server line per port of
    `node_ports` (named node1, node2, ... with the file's servers' options) in place of its
    own, and the runtime API on 127.0.0.1:`admin_port`."""
    assert len(_BIND.findall(shipped)) == 1, "expected one bind line"
    servers = list(_SERVER.finditer(shipped))
    assert servers, f"expected server lines in backend {BACKEND}"
    span = shipped[servers[0].start() : servers[-1].end()]
    assert len(span.splitlines()) == len(servers), "expected the server lines together"
    options = {server.group(2) for server in servers}
    assert len(options) == 1, "expected the same options on every shipped server"
    indent, (option,) = servers[0].group(1), options
    lines = [f"{indent}server node{i} 127.0.0.1:{p}{option}" for i, p in enumerate(node_ports, 1)]
    config = shipped[: servers[0].start()] + "\n".join(lines) + shipped[servers[-1].end() :]
    config = _BIND.sub(lambda bind: f"{bind.group(1)}bind 127.0.0.1:{port}", config)
    # The runtime API on a port of the test's choosing, not a socket at a fixed path: several
    # test runs may share a machine.
    return f"global\n    stats socket ipv4@127.0.0.1:{admin_port} level admin\n\n{config}"


class Haproxy:
    """`haproxy -db` (in the foreground) on loopback, in front of the nodes at `node_ports`."""

    def __init__(self, workdir: Path, node_ports: Sequence[int], executable: str) -> None:
        self.workdir = workdir
        self.executable = executable
        self.port = free_port()
        self.admin_port = free_port()
        self.servers = {port: f"node{i}" for i, port in enumerate(node_ports, 1)}
        """The name of each node's server in the backend, by the node's port."""
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.workdir / "haproxy.cfg"

    @property
    def log_path(self) -> Path:
        return self.workdir / "haproxy.log"

    def write_config(self) -> Path:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = loopback_config(
            shipped_config(),
            port=self.port,
            admin_port=self.admin_port,
            node_ports=list(self.servers),
        )
        self.config_path.write_text(config)
        return self.config_path

    def start(self, timeout: float = 20.0) -> Haproxy:
        self.write_config()
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [self.executable, "-f", str(self.config_path), "-db"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.command("show info")
                return self
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise AssertionError(f"haproxy did not start: {self.log()}")
            time.sleep(0.05)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)

    def command(self, line: str) -> str:
        """Run one command of haproxy's runtime API and return its answer (a loopback round
        trip; haproxy closes the connection after answering)."""
        with socket.create_connection(("127.0.0.1", self.admin_port), timeout=5) as sock:
            sock.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")

    def statuses(self) -> dict[int, tuple[str, str]]:
        """(status, last check's status) of each node's server, by the node's port: ("UP",
        "L7OK") for a node that answered its health check, ("DOWN", "L4CON") for one that
        refuses connections, ("DRAIN", ...) for one taking no new connections."""
        lines = self.command("show stat").splitlines()
        if not lines:
            # haproxy closed the runtime connection without an answer (it does while it is
            # still starting): nothing known yet, and wait_status asks again.
            return {}
        header = lines[0].lstrip("# ").split(",")
        status, check = header.index("status"), header.index("check_status")
        found: dict[int, tuple[str, str]] = {}
        names = {name: port for port, name in self.servers.items()}
        for line in lines[1:]:
            fields = line.split(",")
            if len(fields) > check and fields[0] == BACKEND and fields[1] in names:
                found[names[fields[1]]] = (fields[status], fields[check])
        return found

    async def wait_status(
        self, port: int, status: str, check: str | None = None, attempts: int = 600
    ) -> None:
        """Wait until the server of the node at `port` has `status` (and its last health check
        `check`), bounded: haproxy checks every 2 s and needs 3 failures to take a server out."""
        for _ in range(attempts):
            now = (await anyio.to_thread.run_sync(self.statuses)).get(port)
            if now is not None and now[0] == status and check in (None, now[1]):
                return
            await anyio.sleep(0.05)
        raise AssertionError(f"{self.servers[port]} never {status}: {self.statuses().get(port)}")

    async def route_to(self, *ports: int) -> None:
        """Send new connections only to the nodes at `ports`; the others drain (the connections
        they hold stay), as an operator would do with this same command."""
        for port, name in self.servers.items():
            state = "ready" if port in ports else "drain"
            answer = await anyio.to_thread.run_sync(
                self.command, f"set server {BACKEND}/{name} state {state}"
            )
            assert not answer.strip(), f"haproxy refused to set {name} {state}: {answer}"
