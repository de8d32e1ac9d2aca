"""`check_agent`: an agent that cannot start is refused before anything starts or is recorded."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tunnel.agents import check_agent


@pytest.mark.parametrize(
    "spec", ["demo", f"acp:{sys.executable} -m agent", f"pty:{sys.executable}", "pty:sh -c true"]
)
def test_an_agent_that_can_start_passes(spec: str, tmp_path: Path) -> None:
    check_agent(spec, workspace=tmp_path)


def test_a_relative_program_is_looked_up_in_the_workspace(tmp_path: Path) -> None:
    program = tmp_path / "agent"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    check_agent("acp:./agent", workspace=tmp_path)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("acp:/nonexistent/binary", "/nonexistent/binary does not exist"),
        ("pty:/nonexistent", "/nonexistent does not exist"),
        ("pty:no-such-program-anywhere", "no program 'no-such-program-anywhere' on PATH"),
        ("acp:./notes.txt", "notes.txt is not executable"),
        ("pty:./", "is not a file"),
        ("gpt:x", "unknown agent 'gpt:x'"),
    ],
)
def test_an_agent_that_cannot_start_is_one_clear_error(
    spec: str, says: str, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("not a program\n")
    with pytest.raises(ValueError, match=re.escape(says)) as caught:
        check_agent(spec, workspace=tmp_path)
    assert "\n" not in str(caught.value)


def test_a_workspace_that_is_no_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is not a directory"):
        check_agent("demo", workspace=tmp_path / "missing")
