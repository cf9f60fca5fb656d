"""Without the shared data the integration tests skip with one line naming PROMPTTUNE_DATA_DIR, and the run
still fails unless PROMPTTUNE_ALLOW_MISSING_DATA=1 says a machine without the data may pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

DATA_TEST = "tests/test_tasks.py::test_real_shared_data_loads"


def _pytest_without_data(tmp_path: Path, *options: str, **env: str) -> subprocess.CompletedProcess[str]:
    inherited = {key: value for key, value in os.environ.items() if key != "PROMPTTUNE_ALLOW_MISSING_DATA"}
    environ = {**inherited, "PROMPTTUNE_DATA_DIR": str(tmp_path / "no-data"), **env}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options, DATA_TEST],
                          cwd=REPO, env=environ, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist workers"])
def test_missing_data_skips_with_one_line_and_fails_the_run(tmp_path: Path, workers: list[str]) -> None:
    run = _pytest_without_data(tmp_path, *workers)
    assert run.returncode == 1, run.stdout
    assert "1 integration tests skipped, shared data not found at" in run.stdout
    assert "set PROMPTTUNE_DATA_DIR (the run fails)" in run.stdout
    assert "Error" not in run.stdout and "Traceback" not in run.stdout


def test_missing_data_may_pass_when_allowed(tmp_path: Path) -> None:
    run = _pytest_without_data(tmp_path, PROMPTTUNE_ALLOW_MISSING_DATA="1")
    assert run.returncode == 0, run.stdout
    assert "allowed by PROMPTTUNE_ALLOW_MISSING_DATA=1" in run.stdout
