"""Every user mistake, whichever command: one line on stderr naming it, and the shared exit code.

Each row of the table is a real `python -m tunnel ...` process with a short timeout; none needs
a relay (a mistake is found before anything is dialed) except where the row says so.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tunnel.e2e.crypto import ShareLink
from tunnel.e2e.identity import HostIdentity
from tunnel.process.exit_codes import EXIT_CONFIG, EXIT_UNREACHABLE

ROOT = Path(__file__).resolve().parents[1]

BOX = "╭╮╰╯│─┌┐└┘━┃"
"""Characters of the boxes rich draws around usage errors and tracebacks."""


@dataclass(frozen=True)
class Mistake:
    args: tuple[str, ...]
    """Arguments after `tunnel`; `{tmp}` is a fresh directory, `{link}` a well-formed drive link
    to a loopback port where nothing listens."""

    code: int
    says: str
    """What the one line on stderr must contain (it names what is wrong)."""


MISTAKES = {
    "attach-link-file-missing": Mistake(
        ("attach", "--link-file", "/nonexistent"), EXIT_CONFIG, "--link-file /nonexistent"
    ),
    "attach-link-file-is-a-directory": Mistake(
        ("attach", "--link-file", "{tmp}"), EXIT_CONFIG, "--link-file"
    ),
    "attach-empty-name": Mistake(("attach", "--name", "", "{link}"), EXIT_CONFIG, "--name"),
    "attach-long-name": Mistake(("attach", "--name", "x" * 65, "{link}"), EXIT_CONFIG, "--name"),
    "attach-empty-conversation": Mistake(
        ("attach", "--conversation", "", "{link}"), EXIT_CONFIG, "--conversation"
    ),
    "attach-long-conversation": Mistake(
        ("attach", "--conversation", "c" * 257, "{link}"), EXIT_CONFIG, "--conversation"
    ),
    "attach-junk-link": Mistake(("attach", "not-a-link"), EXIT_CONFIG, "tunnel attach:"),
    "attach-negative-give-up": Mistake(
        ("attach", "--give-up-after", "-1", "{link}"), EXIT_CONFIG, "--give-up-after"
    ),
    "attach-dead-relay-give-up-at-once": Mistake(
        ("attach", "--give-up-after", "0", "{link}"), EXIT_UNREACHABLE, "cannot reach the relay at"
    ),
    "relay-port-too-big": Mistake(("relay", "--port", "99999"), EXIT_CONFIG, "--port"),
    "relay-port-negative": Mistake(("relay", "--port", "-1"), EXIT_CONFIG, "--port"),
    "relay-port-not-a-number": Mistake(("relay", "--port", "http"), EXIT_CONFIG, "--port"),
    "relay-certfile-missing": Mistake(
        ("relay", "--certfile", "/nonexistent.pem", "--keyfile", "/nonexistent.pem"),
        EXIT_CONFIG,
        "/nonexistent.pem",
    ),
    "relay-certfile-not-pem": Mistake(
        ("relay", "--port", "0", "--certfile", "{tmp}/bad.pem", "--keyfile", "{tmp}/bad.pem"),
        EXIT_CONFIG,
        "{tmp}/bad.pem",
    ),
    "relay-certfile-without-keyfile": Mistake(
        ("relay", "--certfile", "{tmp}/bad.pem"), EXIT_CONFIG, "keyfile"
    ),
    "relay-bad-origin": Mistake(("relay", "--allowed-origin", "garbage"), EXIT_CONFIG, "garbage"),
    "relay-unknown-option": Mistake(("relay", "--nope"), EXIT_CONFIG, "--nope"),
    "demo-port-too-big": Mistake(("demo", "--port", "99999"), EXIT_CONFIG, "--port"),
    "host-flag-given-a-value": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--approve", "true"), EXIT_CONFIG, "true"
    ),
    "host-no-relay": Mistake(("host",), EXIT_CONFIG, "--relay"),
    "host-push-service-not-an-origin": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--push-service", "push.example/x"),
        EXIT_CONFIG,
        "--push-service",
    ),
    "host-push-contact-with-a-port": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--push-contact", "https://me.example:8443"),
        EXIT_CONFIG,
        "--push-contact",
    ),
    "host-notify-not-a-url": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--notify", "ftp://hooks"),
        EXIT_CONFIG,
        "--notify",
    ),
    "host-notify-command-unbalanced": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--notify-command", "say 'hi"),
        EXIT_CONFIG,
        "--notify-command",
    ),
    "host-bad-relay-url": Mistake(("host", "--relay", "ftp://relay"), EXIT_CONFIG, "tunnel host:"),
    "host-empty-name": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--name", ""), EXIT_CONFIG, "--name"
    ),
    "host-log-db-in-missing-directory": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--log-db", "/nonexistent/dir/log.db"),
        EXIT_CONFIG,
        "/nonexistent/dir",
    ),
    "host-acp-agent-missing": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--agent", "acp:/nonexistent/binary"),
        EXIT_CONFIG,
        "/nonexistent/binary",
    ),
    "host-pty-agent-missing": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--agent", "pty:/nonexistent"),
        EXIT_CONFIG,
        "/nonexistent",
    ),
    "host-agent-not-on-path": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--agent", "pty:no-such-program-here"),
        EXIT_CONFIG,
        "no-such-program-here",
    ),
    "host-named-agent-not-on-path": Mistake(
        (
            "host",
            "--relay",
            "http://127.0.0.1:9",
            "--agent",
            "a=demo",
            "--agent",
            "b=pty:no-such-x",
        ),
        EXIT_CONFIG,
        "no-such-x",
    ),
    "host-agents-named-and-not": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--agent", "a=demo", "--agent", "demo"),
        EXIT_CONFIG,
        "NAME=SPEC",
    ),
    "host-agent-named-twice": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--agent", "a=demo", "--agent", "a=demo"),
        EXIT_CONFIG,
        "given twice",
    ),
    "host-agent-bad-name": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--agent", "Big=demo"),
        EXIT_CONFIG,
        "agent name",
    ),
    "host-max-conversations-zero": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--max-conversations", "0"),
        EXIT_CONFIG,
        "--max-conversations",
    ),
    "host-sandbox-allow-without-sandbox": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--sandbox-allow", "{tmp}"),
        EXIT_CONFIG,
        "--sandbox-allow and --sandbox-net none need --sandbox",
    ),
    "host-sandbox-net-none-without-sandbox": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--sandbox-net", "none"),
        EXIT_CONFIG,
        "need --sandbox",
    ),
    "host-sandbox-net-unknown": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--sandbox", "--sandbox-net", "off"),
        EXIT_CONFIG,
        "--sandbox-net",
    ),
    "host-sandbox-allow-no-path": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--sandbox", "--sandbox-allow", ":ro"),
        EXIT_CONFIG,
        "--sandbox-allow: ':ro' names no path",
    ),
    "host-sandbox-allow-missing": Mistake(
        (
            *("host", "--relay", "http://127.0.0.1:9", "--agent", "pty:sh", "--sandbox"),
            *("--workspace", "/usr", "--sandbox-allow", "/nonexistent/dir:ro"),
        ),
        EXIT_CONFIG,
        "--sandbox-allow /nonexistent/dir:ro: no such file or directory",
    ),
    "host-sandbox-demo-agent": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--sandbox"),
        EXIT_CONFIG,
        "--sandbox needs an acp: or pty: agent",
    ),
    "host-unknown-agent-kind": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--agent", "gpt:x"), EXIT_CONFIG, "gpt:x"
    ),
    "host-invite-without-role": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--invite", "alice"),
        EXIT_CONFIG,
        "--invite 'alice': expected NAME:ROLE",
    ),
    "host-invite-unknown-role": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--invite", "alice:admin"),
        EXIT_CONFIG,
        "the role is one of view, drive",
    ),
    "host-invite-too-many": Mistake(
        (
            *("host", "--relay", "http://127.0.0.1:9", "--key-file", "{tmp}/key"),
            *(arg for n in range(33) for arg in ("--invite", f"p{n}:view")),
        ),
        EXIT_CONFIG,
        "--invite: a host has at most 32 personal links (33 asked",
    ),
    "host-invite-bad-name": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--invite", "al ice:drive"),
        EXIT_CONFIG,
        "'al ice' is not a name to invite",
    ),
    "host-policy-bad-kind": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--policy", "{tmp}/policy.toml"),
        EXIT_CONFIG,
        "{tmp}/policy.toml:3: rule 1: kind names 'exec', not a kind",
    ),
    "host-policy-not-toml": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--policy", "{tmp}/broken.toml"),
        EXIT_CONFIG,
        "{tmp}/broken.toml:2: not valid TOML",
    ),
    "host-policy-missing": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--policy", "{tmp}/none.toml"),
        EXIT_CONFIG,
        "{tmp}/none.toml: cannot read the policy file",
    ),
    "host-policy-and-preset": Mistake(
        (
            *("host", "--relay", "http://127.0.0.1:9", "--policy", "{tmp}/policy.toml"),
            *("--approvals", "read-only"),
        ),
        EXIT_CONFIG,
        "--policy and --approvals",
    ),
    "host-approvals-unknown": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--approvals", "yolo"), EXIT_CONFIG, "yolo"
    ),
    "attach-unknown-framing": Mistake(
        ("attach", "--framing", "aiohttp", "{link}"), EXIT_CONFIG, "--framing"
    ),
    "host-unknown-framing": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--framing", "aiohttp"), EXIT_CONFIG, "--framing"
    ),
    "host-policy-pty-agent": Mistake(
        ("host", "--relay", "http://127.0.0.1:9", "--agent", "pty:sh", "--approvals", "ask"),
        EXIT_CONFIG,
        "an approval policy needs a demo or acp: agent",
    ),
    "log-show-no-database": Mistake(
        ("log", "show", "main", "--db", "{tmp}/none.db"), EXIT_CONFIG, "{tmp}/none.db"
    ),
    "log-import-db-in-missing-directory": Mistake(
        ("log", "import", "{tmp}/empty.ndjson", "--db", "/nonexistent/dir/log.db"),
        EXIT_CONFIG,
        "/nonexistent/dir",
    ),
    "unknown-command": Mistake(("relax",), EXIT_CONFIG, "relax"),
}


def _free_port() -> int:
    """A loopback port where nothing listens (it was free a moment ago)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(MISTAKES))
def test_a_mistake_is_one_line_on_stderr_and_a_shared_exit_code(name: str, tmp_path: Path) -> None:
    mistake = MISTAKES[name]
    (tmp_path / "bad.pem").write_text("not a certificate\n")
    (tmp_path / "empty.ndjson").write_text("")
    (tmp_path / "policy.toml").write_text('[[rule]]\nverdict = "allow"\nkind = "exec"\n')
    (tmp_path / "broken.toml").write_text("[[rule]]\nverdict = allow\n")
    link = ShareLink(
        relay_url=f"http://127.0.0.1:{_free_port()}",
        host_id=HostIdentity.generate().host_id,
        role="drive",
        secret=os.urandom(32),
    )

    def fill(text: str) -> str:
        return text.replace("{tmp}", str(tmp_path)).replace("{link}", str(link))

    # The user's own directories stay out of it: the host's key and log default there.
    env = dict(
        os.environ,
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_DATA_HOME=str(tmp_path / "data"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        TERMINAL_WIDTH="80",
    )
    env.pop("TUNNEL_LOG_DB", None)
    result = subprocess.run(
        [sys.executable, "-m", "tunnel", *map(fill, mistake.args)],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    lines = result.stderr.splitlines()
    assert result.returncode == mistake.code, result.stderr
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert not set(BOX) & set(result.stderr), result.stderr
    assert lines[0].startswith("tunnel"), lines[0]
    assert fill(mistake.says) in lines[0]
    # Nothing was made in the user's directories for a mistake.
    assert not (tmp_path / "data").exists()
