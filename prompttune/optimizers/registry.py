"""One registry of search strategies, so that validating, building, describing and recording a strategy is a
lookup by name rather than a branch on which family it belongs to: prompttune's optimizers are registered
here, and the modules named in `PLUGINS` (`prompttune.dspy_bridge`, above this layer) register theirs when the
first lookup imports them by name, so every caller sees the DSPy arms without importing the bridge."""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.core.storage import TrialStorage
from prompttune.optimizers import OPTIMIZERS, Optimizer, SearchContext, run_search
from prompttune.optimizers.proposer import Proposer
from prompttune.optimizers.strategy_contract import describe_options, validate_options
from prompttune.results.search_outcome import SearchOutcome
from prompttune.scoring.confirmation import Verdict
from prompttune.scoring.evaluator import Evaluator
from prompttune.search_spaces import Candidate
from prompttune.tasks.task import Task

INSTRUCTION, DEMOS, CALIBRATION = "instruction", "demos", "calibration"  # what a strategy may write
LISTED, WRITTEN, BOOTSTRAPPED, CALIBRATED = ("listed values", "written by a model", "bootstrapped demos",
                                             "calibration")


@dataclass(frozen=True)
class Reach:
    """What an arm can change in a prompt.

    `lists`: it picks among the listed values of every declared dimension. `writes`: aspects it
    fills in itself (INSTRUCTION, DEMOS), declared by the space or not. `holds`: per written aspect,
    the options that keep it at the baseline, for a same-space run on a space that does not declare it.
    """

    lists: bool = False
    writes: tuple[str, ...] = ()
    holds: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def sources(self, aspects: Sequence[str]) -> tuple[str, ...]:
        """Where its candidates come from, when it may change `aspects` (the "candidates from" column)."""
        return ((LISTED,) if self.lists else ()) + tuple(
            {INSTRUCTION: WRITTEN, DEMOS: BOOTSTRAPPED, CALIBRATION: CALIBRATED}[a] for a in self.writes if a in aspects)


class Strategy(Protocol):
    """One search: it starts from `baseline`, spends the evaluator's ledger, returns its dev ranking."""

    baseline: Candidate

    def search(self, storage: TrialStorage, on_trial: Callable[[dict], None] | None,
               should_stop: Callable[[], bool] | None) -> SearchOutcome: ...

    def after_verdict(self, verdict: Verdict, run_dir: Path | None) -> None: ...


@dataclass
class Setting:
    """What a strategy is built on: the run's search context (space bound to train, dev ids,
    objective), the visible task (no test split), evaluator, proposer and run directory."""

    config: RunConfig
    context: SearchContext
    task: Task
    evaluator: Evaluator
    proposer: Proposer
    run_dir: Path | None


@dataclass(frozen=True)
class StrategyEntry:
    """What the engine, compare, the plan and the report need of a strategy, each before any model loads
    except `build`'s result; every callable raises a one-line `UserError` on input it cannot run."""

    name: str
    check: Callable[[dict[str, Any], int, int, int], None]  # options, search call cap, train and dev sizes
    build: Callable[[RunConfig, SearchContext], Callable[[Setting], Strategy]]  # checks, then how to build it
    describe: Callable[[RunConfig, SearchContext], str | None]  # the plan's strategy line, where it has one
    options: Callable[[], list[str]]  # its options, one line each (`optimize --help-options`)
    reach: Reach  # what it can change in a prompt: compare's coverage (same-space holds, native spaces)
    versions: Callable[[], dict[str, str]] = dict  # releases beyond prompttune's that a run records
    is_dspy: bool = False  # compiled through DSPy: the compare report says how those arms ran


STRATEGIES: dict[str, StrategyEntry] = {}  # filled at import, and by `PLUGINS` on the first lookup
PLUGINS = ("prompttune.dspy_bridge",)  # modules that register strategies when imported (without importing dspy)


def register(entry: StrategyEntry) -> None:
    """Add a strategy; a name taken twice is a programming error, not the user's."""
    if entry.name in STRATEGIES:
        raise ValueError(f"strategy {entry.name!r} is registered twice")
    STRATEGIES[entry.name] = entry


@functools.cache
def _load_plugins() -> None:
    """Import the plugins once: they sit above this layer, so they are named here rather than imported."""
    for module in PLUGINS:
        importlib.import_module(module)


def strategies() -> dict[str, StrategyEntry]:
    """Every registered strategy by name, prompttune's optimizers first, then the plugins' (the DSPy arms)."""
    _load_plugins()
    return STRATEGIES


def lookup(name: str) -> StrategyEntry:
    """The registered strategy called `name`, a plugin's included."""
    try:
        return strategies()[name]
    except KeyError:
        raise UserError(f"unknown optimizer {name!r}; choose from {', '.join(STRATEGIES)}") from None


class OptimizerStrategy:
    """A prompttune optimizer under the search driver."""

    def __init__(self, optimizer: Optimizer, evaluator: Evaluator) -> None:
        self.optimizer, self.evaluator, self.baseline = optimizer, evaluator, optimizer.baseline

    def search(self, storage: TrialStorage, on_trial: Callable[[dict], None] | None,
               should_stop: Callable[[], bool] | None) -> SearchOutcome:
        return run_search(self.optimizer, self.evaluator, storage, on_trial, should_stop)

    def after_verdict(self, verdict: Verdict, run_dir: Path | None) -> None:
        """Nothing beyond the engine's own run record."""


REACH: dict[str, Reach] = {
    "random": Reach(lists=True),
    "sh": Reach(lists=True),
    "spread": Reach(lists=True),
    "mipro": Reach(lists=True, writes=(INSTRUCTION, DEMOS),
                   holds={INSTRUCTION: {"instructions": 1}, DEMOS: {"demo_sets": 1}}),
    "bfrs": Reach(writes=(DEMOS,)),
    "reflect": Reach(lists=True, writes=(INSTRUCTION, CALIBRATION),  # demo swaps stay within a few-shot dimension
                     holds={INSTRUCTION: {"write_instructions": False}, CALIBRATION: {"calibration": "off"}}),
    "cople": Reach(writes=(INSTRUCTION,)),
    "p2g": Reach(writes=(INSTRUCTION,)),
}


def optimizer_entry(optimizer: type[Optimizer], reach: Reach) -> StrategyEntry:
    """A prompttune optimizer as a registry entry: the options checked by its class, its schedule (if it plans one)."""
    name = optimizer.name

    def check(options: dict[str, Any], cap: int, train: int, dev: int) -> None:
        validate_options(name, optimizer.Options, options)

    def build(config: RunConfig, context: SearchContext) -> Callable[[Setting], Strategy]:
        validate_options(name, optimizer.Options, config.optimizer_options)
        optimizer.check(context)
        return lambda setting: OptimizerStrategy(optimizer(setting.context, setting.proposer), setting.evaluator)

    def describe(config: RunConfig, context: SearchContext) -> str | None:
        if not hasattr(optimizer, "plan"):
            return None
        schedule = optimizer.plan(context, validate_options(name, optimizer.Options, context.options))
        return (f"schedule (candidates × dev examples per round): {' → '.join(f'{k}×{n}' for k, n in schedule)} = "
                f"{sum(k * n for k, n in schedule)} calls")

    return StrategyEntry(name, check, build, describe, lambda: describe_options(optimizer.Options), reach)


for _optimizer in OPTIMIZERS.values():
    register(optimizer_entry(_optimizer, REACH[_optimizer.name]))
