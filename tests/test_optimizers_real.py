"""One smoke run per optimizer with the real embedded model at a tiny budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prompttune.backends.backend import Backend
from prompttune.core.config import RunConfig
from prompttune.engine.study import run_study
from tests.support import CountingBackend, model_calls

pytestmark = pytest.mark.integration

OPTIONS = {
    "random": {},
    "sh": {"min_examples": 8, "eta": 3},
    "cople": {"m": 2, "C": 2, "proxy": 8},
    "p2g": {"minibatch": 24, "min_errors": 4, "directions": 1, "edits": 1, "max_depth": 1,
            "patience": 1},
    "bfrs": {"programs": 3, "bootstrap_pool": 12, "max_demos": 2},
    "mipro": {"instructions": 2, "demo_sets": 2, "minibatch": 8, "full_eval_every": 2, "trials": 4},
    "spread": {"formats": 4, "batch": 8},
}


@pytest.fixture(scope="module")
def backend(embedded_model: Backend) -> CountingBackend:
    return CountingBackend(embedded_model)


@pytest.mark.parametrize("name", list(OPTIONS))
def test_optimizer_smoke_with_the_embedded_model(name: str, backend: CountingBackend, data_dir: Path,
                                                 tmp_path: Path) -> None:
    config = RunConfig(task="agnews", data_dir=str(data_dir), optimizer=name, optimizer_options=OPTIONS[name],
                       budget=96, train_size=40, dev_size=16, test_size=16, runs_dir=str(tmp_path))
    before = backend.calls
    result = run_study(config, backend=backend)
    assert result.search_ledger.calls <= 96
    assert backend.calls - before == model_calls(result)
    trials = [json.loads(line) for line in (result.run_dir / "trials.jsonl").read_text().splitlines()]
    assert trials and all(t["budget_spent"] <= 96 for t in trials)
    report = (result.run_dir / "report.md").read_text()
    assert "Held-out test" in report and "## Optimizer" in report
