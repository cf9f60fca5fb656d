"""The Python API example in README runs as written (the embedded model, SST-2 rows from the data folder)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def readme_api_example() -> str:
    section = (REPO / "README.md").read_text().split("## Python API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.integration
def test_the_readme_api_example_runs_as_written(data_dir: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PROMPTTUNE_DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", readme_api_example()], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    summary, *rendered = done.stdout.splitlines()
    assert summary.startswith(("confirmed", "not confirmed", "baseline kept"))
    assert "Great cast, thin plot." in "\n".join(rendered)
    saved = json.loads((tmp_path / "shipped" / "prompt.json").read_text())
    run_dir, = (tmp_path / "runs").glob("*-records-*")
    assert saved["verdict"] == summary and (run_dir / "verdict.json").is_file()
