"""`tunnel host` as a real subprocess for the fault tests: started, fed, starved of disk, killed.

Its stdout and stderr are pipes drained by threads (a pipe that fills would stall the host, and
a regular file would be subject to the file size limit the storage tests set on the process).
"""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.support import read_line

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="500", TERMINAL_WIDTH="500")


class HostProcess:
    """One `tunnel host` process with its key, links and log under `workdir`."""

    def __init__(
        self,
        relay_url: str,
        workdir: Path,
        *,
        agent: str = "demo",
        workspace: Path,
        log_db: Path,
        name: str = "hannah",
        interactive: bool = True,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.command = [
            sys.executable,
            "-m",
            "tunnel.cli",
            "host",
            "--relay",
            relay_url,
            "--agent",
            agent,
            "--workspace",
            str(workspace),
            "--log-db",
            str(log_db),
            "--key-file",
            str(workdir / "host_key"),
            "--name",
            name,
            "--interactive" if interactive else "--no-interactive",
            *extra,
        ]
        self.proc: subprocess.Popen[bytes] | None = None
        self.view_link = ""
        self.drive_link = ""
        self._lines: list[str] = []
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> HostProcess:
        self._lines = []
        self.proc = subprocess.Popen(
            self.command,
            cwd=ROOT,
            env=ENV,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(50):
            line = read_line(self.proc, timeout=30)
            self._add(line)
            if match := re.match(r"view link:\s+(\S+)", line):
                self.view_link = match.group(1)
            if match := re.match(r"drive link:\s+(\S+)", line):
                self.drive_link = match.group(1)
                break
        assert self.drive_link, f"no links from the host: {self.output()}"
        assert self.proc.stdout is not None
        assert self.proc.stderr is not None
        for stream in (self.proc.stdout, self.proc.stderr):
            threading.Thread(target=self._drain, args=(stream,), daemon=True).start()
        return self

    def _add(self, line: str) -> None:
        with self._lock:
            self._lines.append(line)

    def _drain(self, stream: object) -> None:
        fileno = stream.fileno()  # type: ignore[attr-defined]
        pending = b""
        while chunk := os.read(fileno, 65536):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                self._add(line.decode(errors="replace"))

    def output(self) -> str:
        """Everything the host printed so far (console and log lines), in arrival order."""
        with self._lock:
            return "\n".join(self._lines)

    def wait_output(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, self.output())
            if match:
                return match
            time.sleep(0.05)
        raise AssertionError(f"the host never printed {pattern!r}; it printed:\n{self.output()}")

    def type(self, line: str) -> None:
        """Type one line at the host console."""
        assert self.proc is not None
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def limit_file_size(self, size: int | None) -> None:
        """Set the host's RLIMIT_FSIZE (None: unlimited): with 0 the kernel refuses every write
        to a regular file (EFBIG), as a full disk refuses it (ENOSPC)."""
        soft = resource.RLIM_INFINITY if size is None else size
        resource.prlimit(self.pid, resource.RLIMIT_FSIZE, (soft, resource.RLIM_INFINITY))

    def kill(self) -> None:
        """SIGKILL: no cleanup of any kind runs in the host."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode
