"""A whole run under TUNNEL_REQUIRE_ALL=1 that collects no test of a required suite fails with
the suite's name, in one process and on parallel workers alike (scripts/test runs the suite on
pytest-xdist workers, whose `-n` value once passed for a path and let such a run through)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_whole_run_without_a_required_suite_fails_and_names_it(
    tmp_path: Path, workers: str
) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_alone.py").write_text("def test_alone() -> None:\n    pass\n")
    env = dict(os.environ, TUNNEL_REQUIRE_ALL="1", PYTHONPATH=str(ROOT))
    env.pop("PYTEST_XDIST_WORKER", None)  # this test's own worker is not the run's
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-n", workers],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = run.stdout + run.stderr
    assert run.returncode != 0, output
    assert "required suite 'browser' collected no test" in output, output
    assert "1 passed" not in output, output
