"""Compared arms: what every arm shares (the bench) and each arm's config; each arm runs through the run
engine (`prompttune.engine.comparison`) and yields a `prompttune.results.arms.ArmRun`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from prompttune.comparing.fairness import ModelWatch
from prompttune.comparing.variants import arm_options, optimizer_of
from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.optimizers.registry import lookup
from prompttune.results.compare import Coverage
from prompttune.scoring.cache import ResultCache
from prompttune.search_spaces import SearchSpace
from prompttune.tasks.task import Task


def check_arms(arms: list[str], options: dict[str, dict[str, Any]], config: RunConfig, task: Task) -> None:
    """Unknown names, bad options and DSPy arms the cap cannot pay for fail before any model is
    loaded (a DSPy arm is sized with the task's split sizes at the configured split seed; each seed's draw is
    checked again)."""
    if len(set(arms)) != len(arms):
        raise UserError("an optimizer is listed twice in --optimizers")
    train, dev = len(task.splits["train"]), len(task.splits["dev"])
    runs: dict[str, str] = {}
    for arm in arms:
        optimizer = optimizer_of(arm, options)
        lookup(optimizer).check(arm_options(arm, options), config.budget, train, dev)
        same = runs.setdefault(f"{optimizer} {sorted(arm_options(arm, options).items())!r}", arm)
        if same != arm:
            raise UserError(f"arms {same} and {arm} run {optimizer} with the same options: give the variant "
                            f"other options (NAME=OPTIMIZER:KEY=VALUE)")


@dataclass
class Bench:
    """What every arm shares: one config (cap, splits, model, scoring), one task draw, one
    space, one loaded model behind the watch, and one cache; per arm, its coverage of the space."""

    config: RunConfig
    task: Task
    space: SearchSpace
    backend: ModelWatch
    shared: ResultCache
    options: dict[str, dict[str, Any]]
    coverage: dict[str, Coverage]
    arms_dir: Path
    console: Console
    progress: bool = False  # the CLI: progress bars, per-arm summaries, graceful stops on a signal
    in_memory: bool = False  # the task is in-memory data (handed to each arm), not a name or file it loads

    def arm_config(self, arm: str, seed: int) -> RunConfig:
        """The arm's run: the user's options plus those that hold what the mode holds."""
        return arm_config(self.config, arm, self.options, self.coverage).model_copy(
            update={"seed": seed, "cache": None, "runs_dir": str(self.arms_dir)})


def arm_config(config: RunConfig, arm: str, options: dict[str, dict[str, Any]],
               coverage: dict[str, Coverage]) -> RunConfig:
    """`config` for one arm: its optimizer, with the user's options plus those that hold what the mode holds."""
    return config.model_copy(update={"optimizer": optimizer_of(arm, options), "dimensions": coverage[arm].dimensions,
                                     "optimizer_options": {**arm_options(arm, options), **coverage[arm].options}})


