"""relay/ is the one source of the configurations the docs show: docs/relay.md and docs/cluster.md
quote relay/nginx.conf and relay/haproxy.cfg whole. relay/README.md's command lines are ones
`tunnel relay` accepts, and its drop-ins ones systemd accepts on top of the unit."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.relay.service.unit import INSTALLED, UNIT

ROOT = Path(__file__).resolve().parents[3]
RELAY = ROOT / "relay"
README = RELAY / "README.md"


def _blocks(doc: Path, language: str) -> list[str]:
    """The fenced blocks of `language` in `doc`, as written (a block indented in a list item
    without its indent)."""
    found = re.findall(
        rf"^( *)```{language}\n(.*?)^\1```$", doc.read_text(), re.MULTILINE | re.DOTALL
    )
    return [textwrap.dedent(block) if indent else block for indent, block in found]


@pytest.mark.parametrize(
    ("doc", "language", "shipped"),
    [
        ("docs/relay.md", "nginx", "nginx.conf"),
        ("docs/cluster.md", "nginx", "nginx.conf"),
        ("docs/cluster.md", "haproxy", "haproxy.cfg"),
    ],
)
def test_the_docs_quote_the_shipped_configuration_whole(
    doc: str, language: str, shipped: str
) -> None:
    assert _blocks(ROOT / doc, language) == [(RELAY / shipped).read_text()]


def _relay_command_lines() -> list[list[str]]:
    """Each `tunnel relay` command of the README, its arguments after `relay`."""
    found = []
    for line in README.read_text().splitlines():
        words = shlex.split(line.strip()) if "tunnel relay" in line else []
        # A command line: variables, then the command (an ExecStart= line names its path).
        while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
            words.pop(0)
        if words[:2] in (["tunnel", "relay"], [f"ExecStart={INSTALLED}", "relay"]):
            found.append(words[2:])
    return found


def test_the_readmes_relay_command_lines_name_options_the_command_has() -> None:
    lines = _relay_command_lines()
    assert len(lines) == 3, lines
    for args in lines:
        # An unknown option is a usage error, --help or not.
        result = subprocess.run(
            [sys.executable, "-m", "tunnel.cli", "relay", *args, "--help"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, (args, result.stderr)


@pytest.mark.service
def test_systemd_accepts_the_readmes_drop_ins_on_the_unit(
    tmp_path: Path, systemd_analyze: str
) -> None:
    drop_ins = _blocks(README, "ini")
    assert len(drop_ins) == 2
    tunnel = str(Path(sys.executable).with_name("tunnel"))
    units = tmp_path / "units"
    (units / f"{UNIT.name}.d").mkdir(parents=True)
    (units / UNIT.name).write_text(UNIT.read_text().replace(INSTALLED, tunnel))
    for number, drop_in in enumerate(drop_ins):
        (units / f"{UNIT.name}.d" / f"{number}.conf").write_text(drop_in.replace(INSTALLED, tunnel))
    result = subprocess.run(
        [systemd_analyze, "verify", UNIT.name],
        env={"SYSTEMD_UNIT_PATH": f"{units}:", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    said = [line for line in (result.stdout + result.stderr).splitlines() if str(units) in line]
    assert result.returncode == 0, result.stdout + result.stderr
    assert said == [], result.stdout + result.stderr
