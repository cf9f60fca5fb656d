"""Compared arms: what every arm shares (the bench), what one arm-seed run yields, and how a
prompttune optimizer runs as an arm (`prompttune.commands.compare`); DSPy arms in `dspy_arm`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, TypeAdapter
from rich.console import Console

from prompttune.compare.fairness import LeakWatch
from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.core.storage import write_atomic
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

    __pydantic_config__ = ConfigDict(ser_json_inf_nan="constants")  # a dev score never measured is NaN

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


ARM_FILE = "arm.json"
_ARM_RUN = TypeAdapter(ArmRun)


def save_arm_run(run: ArmRun) -> None:
    """arm.json beside the arm's own files, written last: the arm finished, and `compare --resume`
    reads it back instead of running the arm again."""
    write_atomic(run.run_dir / ARM_FILE, _ARM_RUN.dump_json(run, indent=2).decode())


def load_arm_run(run_dir: Path) -> ArmRun:
    """A finished arm read back from its directory (wherever the comparison now lies)."""
    return replace(_ARM_RUN.validate_json((run_dir / ARM_FILE).read_text(encoding="utf-8")), run_dir=run_dir)
