"""`optimize --dry-run`: the plan, printed before any search call, and exit 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from prompttune.cli import main
from prompttune.core.config import RunConfig
from prompttune.engine import plan
from tests.support import CountingBackend, colours_task_file, oracle_for


def test_dry_run_prints_the_plan_and_charges_no_search_call(tmp_path: Path, capsys, monkeypatch) -> None:
    models: list[CountingBackend] = []

    def counted(config):
        models.append(oracle_for(config))
        return models[-1]

    monkeypatch.setattr(plan, "build_backend", counted)
    assert main(["optimize", "--task", str(colours_task_file(tmp_path)), "--optimizer", "sh", "--budget", "300",
                 "--train-size", "60", "--dev-size", "60", "--test-size", "90", "--runs-dir", str(tmp_path / "runs"),
                 "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "schedule (candidates × dev examples per round):" in out
    assert "search: at most 300 model calls (--budget)" in out
    assert "held-out verdict: at most 180 calls" in out
    assert "wall time, estimated from a probe of 8 calls" in out
    assert models[0].calls == plan.PROBE_EXAMPLES  # the probe only
    assert not (tmp_path / "runs").exists()  # no run was started


def test_dry_run_does_not_combine_with_resume(tmp_path: Path, capsys) -> None:
    assert main(["optimize", "--resume", str(tmp_path), "--dry-run"]) == 2
    assert capsys.readouterr().err.startswith("error: --dry-run plans a new run")


@pytest.mark.parametrize("token_cap", [None, 5000])
def test_the_plan_names_the_token_cap_or_an_estimate(tmp_path: Path, monkeypatch, token_cap: int | None) -> None:
    monkeypatch.setattr(plan, "build_backend", oracle_for)
    config = RunConfig(task=str(colours_task_file(tmp_path)), optimizer="random", budget=300, train_size=60,
                            dev_size=60, test_size=90, budget_tokens=token_cap)
    lines = plan.plan_run(config).lines()
    assert not any(line.startswith("schedule") for line in lines)  # random search plans no rounds
    assert ("at most 5000 tokens (--budget-tokens)" if token_cap else "per call (no token cap)") in "\n".join(lines)
