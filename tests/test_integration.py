"""End to end with the real embedded model on real data (about a minute on 2 cores)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from prompttune.backends.backend import Backend
from prompttune.core.config import RunConfig
from prompttune.engine.study import run_study
from tests.support import CountingBackend, model_calls

pytestmark = pytest.mark.integration


def test_optimize_agnews_real_model_ledger_matches_backend_calls(data_dir: Path, tmp_path: Path,
                                                                 embedded_model: Backend) -> None:
    config = RunConfig(task="agnews", optimizer="random", data_dir=str(data_dir), budget=100, train_size=30, dev_size=24,
                       test_size=30, runs_dir=str(tmp_path))
    backend = CountingBackend(embedded_model)
    result = run_study(config, backend=backend)
    run = result.run_dir
    for name in ("config.json", "trials.jsonl", "cache.sqlite", "best_prompt.json", "best_prompt.txt",
                 "report.md"):
        assert (run / name).is_file(), name
    trials = [json.loads(line) for line in (run / "trials.jsonl").read_text().splitlines()]
    assert trials[0]["purpose"] == "baseline" and len(trials) == 4  # 4 × 24 calls fit in 100
    assert result.search_ledger.calls == trials[-1]["budget_spent"] == 96 <= config.budget
    assert backend.calls == model_calls(result)
    # The baseline on 30 test examples, and the dev winner too unless the baseline won on dev.
    assert result.confirm_ledger.calls == (60 if result.verdict.tested else 30)
    report = (run / "report.md").read_text()
    assert "one-sided McNemar" in report and "selected on dev" in report
    assert json.loads((run / "best_prompt.json").read_text())["candidate_id"] == result.shipped.id
    assert json.loads((run / "config.json").read_text())["budget"] == 100


def test_cli_runs_a_custom_csv_task(data_dir: Path, tmp_path: Path) -> None:
    rows = (data_dir / "sst2" / "validation.tsv").read_text().splitlines()[1:201]
    with open(tmp_path / "reviews.csv", "w") as f:
        f.write("sentence,mood\n")
        for row in rows:
            text, label = row.rsplit("\t", 1)
            f.write('"{}",{}\n'.format(text.replace('"', "'"), "happy" if label == "1" else "sad"))
    (tmp_path / "reviews.yaml").write_text(
        "name: reviews\ndata: reviews.csv\ntext_columns: {text: sentence}\nlabel_column: mood\n"
        "labels:\n  sad: [negative, bad]\n  happy: [positive, good]\n")
    out = subprocess.run(
        [sys.executable, "-m", "prompttune", "optimize", "--task", str(tmp_path / "reviews.yaml"),
         "--optimizer", "sh", "--budget", "60", "--train-size", "20", "--dev-size", "20", "--test-size", "30",
         "--runs-dir", str(tmp_path / "runs")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "baseline test accuracy" in out.stdout and "budget used 60/60" in out.stdout
    assert len(list((tmp_path / "runs").glob("*-reviews-sh-s0/report.md"))) == 1
