"""Each fuzz target runs a bounded coverage-guided campaign from its seeds, with its dictionary;
a crash fails the test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .targets import SEEDS, TARGETS

ROOT = Path(__file__).resolve().parents[2]
RUNS = 100_000
# An export's inputs grow into many lines, each parsed and its signature checked: 100,000 of
# them took 47 s here against 2 to 18 s for the other targets, and 30,000 take 8.
RUNS_OF = {"export": 30_000}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_fuzz_target_survives_a_bounded_campaign(target: str, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"  # what this campaign finds; the committed seeds stay as they are
    corpus.mkdir()
    seeds = sorted((SEEDS / target).iterdir())
    runs = RUNS_OF.get(target, RUNS)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.fuzz.targets",
            target,
            f"-runs={runs}",
            "-seed=1",
            "-max_len=4096",
            f"-artifact_prefix={tmp_path}/",
            str(corpus),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    report = result.stderr[-3000:]
    assert result.returncode == 0, f"fuzz target {target!r} crashed:\n{report}"
    # libFuzzer reports how many inputs it executed; the campaign really ran, from the seeds.
    assert f"Done {runs} runs" in result.stderr, report
    assert f"INFO: seed corpus: files: {len(seeds)} " in result.stderr, report
    assert "Dictionary: " in result.stderr, report
    assert sorted((SEEDS / target).iterdir()) == seeds
