"""Compared arms: what every arm shares (the bench) and what one arm-seed run yields; each arm runs
through the run engine (`prompttune.engine.comparison`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, TypeAdapter
from rich.console import Console

from prompttune.comparing.coverage import Coverage
from prompttune.comparing.fairness import ModelWatch, Served
from prompttune.comparing.variants import arm_options, optimizer_of
from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.core.storage import write_atomic
from prompttune.dspy_bridge import lookup
from prompttune.evaluation.cache import ResultCache
from prompttune.evaluation.confirmation import Confirmation
from prompttune.evaluation.ledger import BudgetLedger
from prompttune.evaluation.per_class import PerClass
from prompttune.search_spaces import SearchSpace
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.tasks.base import Task


def check_arms(arms: list[str], options: dict[str, dict[str, Any]], config: RunConfig) -> None:
    """Unknown names, bad options and DSPy arms the cap cannot pay for fail before any model is
    loaded (a DSPy arm is sized with the configured split sizes; the drawn ones are checked again)."""
    if len(set(arms)) != len(arms):
        raise UserError("an optimizer is listed twice in --optimizers")
    runs: dict[str, str] = {}
    for arm in arms:
        optimizer = optimizer_of(arm, options)
        lookup(optimizer).check(arm_options(arm, options), config.budget, config.train_size, config.dev_size)
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


@dataclass
class ArmRun:
    """One arm at one seed: its own pick (raw), what it ships after the held-out verdict (guarded:
    `best`, `confirmation`), the space it searched, and what it spent."""

    __pydantic_config__ = ConfigDict(ser_json_inf_nan="constants")  # a dev score never measured is NaN

    arm: str
    seed: int
    run_dir: Path
    baseline: PromptSpec
    best: PromptSpec
    best_dev: float | None
    confirmation: Confirmation
    raw: PromptSpec  # the dev winner / DSPy's program, whatever the verdict
    raw_confirmation: Confirmation  # its test figures, from the verdict's own records
    space_hash: str
    search: BudgetLedger
    confirm_calls: int
    foreign_calls: int  # shared-cache hits charged to the search (they reached no model)
    foreign_tokens: int
    anytime: list[tuple[int, float]]
    stopped_by_budget: bool
    wall_seconds: float
    notes: list[str]
    served: Served  # what the model served to the search, counted at the model
    test_ids: tuple[str, ...]  # the test examples its verdict scored
    leaders: list[tuple[int, int, PromptSpec]] = field(default_factory=list)  # (calls, tokens, pick) at each change
    test_correct: list[bool] = field(default_factory=list)  # the winner on each test example
    per_class: PerClass | None = None  # per-class test figures of its verdict (None in arms saved before them)


ARM_FILE = "arm.json"
_ARM_RUN = TypeAdapter(ArmRun)


def save_arm_run(run: ArmRun) -> None:
    """arm.json beside the arm's own files, written last: the arm finished, and `compare --resume`
    reads it back instead of running the arm again."""
    write_atomic(run.run_dir / ARM_FILE, _ARM_RUN.dump_json(run, indent=2).decode())


def load_arm_run(run_dir: Path) -> ArmRun:
    """A finished arm read back from its directory (wherever the comparison now lies)."""
    return replace(_ARM_RUN.validate_json((run_dir / ARM_FILE).read_text(encoding="utf-8")), run_dir=run_dir)
