"""The strategy registry is the one place a strategy is known: a DSPy-like strategy registered here, and
nowhere else, is checked, planned, run, recorded and reported by compare like the DSPy arms."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from prompttune.cli import main
from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.engine import comparison, plan
from prompttune.engine.comparison import CompareRequest, run_compare
from prompttune.optimizers import SearchContext
from prompttune.optimizers.random_search import RandomSearch
from prompttune.optimizers.registry import (
    STRATEGIES,
    OptimizerStrategy,
    Reach,
    Setting,
    Strategy,
    StrategyEntry,
    lookup,
)
from prompttune.testing import colours_task_file
from tests.support import oracle_config, oracle_for

FAKE = "fake-dspy"


def _check(options: dict[str, Any], cap: int, train: int, dev: int) -> None:
    if options:
        raise UserError(f"{FAKE} takes no options (got {', '.join(options)})")


def _build(config: RunConfig, context: SearchContext) -> Callable[[Setting], Strategy]:
    return lambda setting: OptimizerStrategy(RandomSearch(setting.context, setting.proposer), setting.evaluator)


@pytest.fixture
def fake_dspy(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = StrategyEntry(FAKE, _check, _build, lambda config, context: f"fake settings: {context.budget} calls",
                          lambda: ["(none)"], Reach(lists=True), lambda: {"fakedspy": "9.9"}, is_dspy=True)
    monkeypatch.setitem(STRATEGIES, FAKE, entry)


def test_an_unknown_strategy_is_one_line_naming_every_registered_one() -> None:
    with pytest.raises(UserError, match="unknown optimizer 'nope'; choose from random, sh, .*dspy-mipro"):
        lookup("nope")


def test_the_registry_finds_the_dspy_arms_without_the_caller_importing_the_bridge() -> None:
    """In a fresh interpreter, so no earlier test has imported `prompttune.dspy_bridge` already."""
    code = ("import sys; from prompttune.optimizers import registry; "
            "assert 'prompttune.dspy_bridge' not in sys.modules; "
            "print(registry.lookup('dspy-gepa').is_dspy, *list(registry.strategies())[-5:])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "dspy-mipro", "dspy-bfrs", "dspy-gepa", "dspy-copro", "dspy-simba"]


def test_compare_runs_records_and_reports_a_registered_dspy_like_strategy(tmp_path: Path, fake_dspy: None) -> None:
    config = oracle_config(tmp_path, budget=120)
    result = run_compare(CompareRequest(config, ["random", FAKE], [0], {}, backend=oracle_for(config)))
    assert [(r.arm, r.seed) for r in result.runs] == [("random", 0), (FAKE, 0)]
    assert result.versions["fakedspy"] == "9.9" and "dspy" not in result.versions
    report = (result.run_dir / "report.md").read_text()
    section = report[report.index("## How the DSPy arms ran"):]
    assert f"- `{FAKE}` seed 0: " in section and "- `random`" not in section


def test_compare_dry_run_plans_a_registered_strategy_with_its_own_line(tmp_path: Path, capsys,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      fake_dspy: None) -> None:
    monkeypatch.setattr(plan, "build_backend", oracle_for)
    args = ["compare", "--task", str(colours_task_file(tmp_path)), "--optimizers", f"random,{FAKE}", "--seeds", "2",
            "--budget", "300", "--train-size", "60", "--dev-size", "60", "--test-size", "90",
            "--runs-dir", str(tmp_path / "runs")]
    assert main([*args, "--dry-run"]) == 0
    fake = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(f"arm {FAKE}:"))
    assert "at most 300 search calls per seed" in fake and "fake settings: 300 calls" in fake

    def no_model(config: RunConfig) -> None:
        raise AssertionError("the strategy's own check must fail before any model loads")

    monkeypatch.setattr(plan, "build_backend", no_model)
    monkeypatch.setattr(comparison, "build_backend", no_model)
    for dry_run in ([], ["--dry-run"]):
        assert main([*args, "--option", f"{FAKE}.depth=2", *dry_run]) == 2
        assert capsys.readouterr().err == f"error: {FAKE} takes no options (got depth)\n"
