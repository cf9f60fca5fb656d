"""Compared arms: what every arm shares (the bench), what one arm-seed run yields, and how a
prompttune optimizer runs as an arm. DSPy arms live in `prompttune.dspy_bridge.arms`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from prompttune.compare.arm_cache import ArmCache
from prompttune.compare.fairness import LeakWatch
from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.evaluation.cache import ResultCache
from prompttune.evaluation.confirmation import Confirmation
from prompttune.evaluation.ledger import BudgetLedger
from prompttune.optimizers import OPTIMIZERS, checked_optimizer
from prompttune.search_spaces import SearchSpace
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.tasks.base import Task

DSPY_ARMS = ("dspy-mipro", "dspy-bfrs")
DSPY_NOT_OFFERED = {
    "dspy-copro": "COPRO draws its candidate instructions as n samples at temperature 1.4, and prompttune's "
                  "backends decode greedily, so every candidate would be the same",
    "dspy-gepa": "GEPA needs a textual-feedback metric and a reflection model that follows its reply format; "
                 "that bridge is not built yet",
}


def check_arms(arms: list[str], options: dict[str, dict[str, Any]]) -> None:
    """Unknown or infeasible names, and bad options, fail before any model is loaded."""
    for arm in arms:
        if arm in OPTIMIZERS:
            checked_optimizer(arm, options.get(arm, {}))
        if arm in DSPY_NOT_OFFERED:
            raise UserError(f"{arm} is not offered: {DSPY_NOT_OFFERED[arm]}")
        if arm not in OPTIMIZERS and arm not in DSPY_ARMS:
            raise UserError(f"unknown optimizer {arm!r}; choose from "
                            f"{', '.join([*OPTIMIZERS, *DSPY_ARMS])}")
    if len(set(arms)) != len(arms):
        raise UserError("an optimizer is listed twice in --optimizers")
    if any(arm in DSPY_ARMS for arm in arms):
        from prompttune.dspy_bridge import require_dspy

        require_dspy(", ".join(arm for arm in arms if arm in DSPY_ARMS))


@dataclass
class Bench:
    """What every arm shares: one config (cap, splits, model, scoring), one task draw, one
    space, one loaded model behind the leak watch, and one cache."""

    config: RunConfig
    task: Task
    space: SearchSpace
    backend: LeakWatch
    shared: ResultCache
    options: dict[str, dict[str, Any]]
    arms_dir: Path
    console: Console

    def arm_config(self, arm: str, seed: int) -> RunConfig:
        return self.config.model_copy(update={"optimizer": arm, "seed": seed, "cache": None,
                                              "optimizer_options": self.options.get(arm, {}),
                                              "runs_dir": str(self.arms_dir)})


@dataclass
class ArmRun:
    """One arm at one seed: what it ships after the held-out verdict, and what it spent."""

    arm: str
    seed: int
    run_dir: Path
    baseline: PromptSpec
    best: PromptSpec
    best_dev: float | None
    confirmation: Confirmation
    search: BudgetLedger
    confirm_calls: int
    foreign_calls: int
    anytime: list[tuple[int, float]]
    stopped_by_budget: bool
    wall_seconds: float
    notes: list[str]
    search_requests: int
    test_leaks: int
    test_correct: list[bool] = field(default_factory=list)  # the winner on each test example


def run_prompttune_arm(bench: Bench, arm: str, seed: int) -> ArmRun:
    """A prompttune optimizer through the ordinary runner, on the shared model and cache view."""
    from prompttune.runner import run_optimization

    views: list[ArmCache] = []

    def view(ledger: BudgetLedger) -> ArmCache:
        views.append(ArmCache(bench.shared, ledger))
        return views[-1]

    start = len(bench.backend.flags)
    result = run_optimization(bench.arm_config(arm, seed), backend=bench.backend, console=bench.console,
                              cache_view=view)
    search = next(v for v in views if v.ledger is result.search_ledger)
    confirming = next(v for v in views if v.ledger is result.confirm_ledger)
    # Confirmation comes last, so the requests before its own are the search's.
    stop = len(bench.backend.flags) - confirming.computed
    outcome = result.outcome
    # Some strategies (successive halving) name a leader only when a round finishes.
    anytime = outcome.anytime or [(result.search_ledger.calls, outcome.leader_dev_score)]
    return ArmRun(arm, seed, result.run_dir, result.baseline.spec, result.shipped.spec, outcome.leader_dev_score,
                  result.confirmation, result.search_ledger, result.confirm_ledger.calls, search.foreign_calls,
                  anytime, outcome.stopped_by_budget, result.wall_seconds, outcome.notes,
                  stop - start, bench.backend.leaks(start, stop))


def run_arm(bench: Bench, arm: str, seed: int) -> ArmRun:
    if arm in DSPY_ARMS:
        from prompttune.dspy_bridge.arms import run_dspy_arm

        return run_dspy_arm(bench, arm, seed)
    return run_prompttune_arm(bench, arm, seed)
