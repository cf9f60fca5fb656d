"""The searches the engine runs, each behind one small interface: prompttune's optimizers (driven
by `SearchDriver`, which owns the accept protocol) and DSPy's optimizers (compiled through the
metered bridge). A strategy is planned — options, schedule and cap checked — before any model loads,
then built on the run's evaluator and proposer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.core.storage import TrialStorage
from prompttune.dspy_bridge import DSPY_ARMS
from prompttune.evaluation.confirmation import Verdict
from prompttune.evaluation.evaluator import Evaluator
from prompttune.optimizers import OPTIMIZERS, Optimizer, SearchContext, checked_optimizer, get_optimizer, run_search
from prompttune.optimizers.base import SearchOutcome, describe_options
from prompttune.optimizers.proposer import Proposer
from prompttune.search_spaces import Candidate
from prompttune.tasks.base import Task

if TYPE_CHECKING:
    from prompttune.dspy_bridge.optimizers import DspyArm


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


class OptimizerStrategy:
    """A prompttune optimizer under the search driver."""

    def __init__(self, optimizer: Optimizer, evaluator: Evaluator) -> None:
        self.optimizer, self.evaluator, self.baseline = optimizer, evaluator, optimizer.baseline

    def search(self, storage: TrialStorage, on_trial: Callable[[dict], None] | None,
               should_stop: Callable[[], bool] | None) -> SearchOutcome:
        return run_search(self.optimizer, self.evaluator, storage, on_trial, should_stop)

    def after_verdict(self, verdict: Verdict, run_dir: Path | None) -> None:
        """Nothing beyond the engine's own run record."""


class DspyStrategy:
    """A DSPy optimizer compiled through the metered bridge; its program file joins the run record."""

    def __init__(self, setting: Setting) -> None:
        from prompttune.dspy_bridge.search import DspySearch

        config, task = setting.config, setting.task
        train, dev = task.splits["train"], task.splits["dev"]
        settings = dspy_arm(config, setting.context)
        self.baseline = setting.context.space.default_candidate()
        log = setting.run_dir / "dspy.log" if setting.run_dir else None
        self.search_ = DspySearch(settings, self.baseline, setting.evaluator, task.input_fields, train, dev,
                                  config.seed, config.model, log, setting.proposer)

    def search(self, storage: TrialStorage, on_trial: Callable[[dict], None] | None,
               should_stop: Callable[[], bool] | None) -> SearchOutcome:
        return self.search_.search(storage)

    def after_verdict(self, verdict: Verdict, run_dir: Path | None) -> None:
        if run_dir is not None:
            self.search_.save_program(verdict.shipped.spec, run_dir / "dspy_program.json")


def dspy_arm(config: RunConfig, context: SearchContext) -> DspyArm:
    """A DSPy arm's settings sized to the cap and the run's splits (a `UserError` where its smallest run does not
    fit): `plan_strategy` checks them, a dry run shows them."""
    from prompttune.dspy_bridge import require_dspy

    require_dspy(config.optimizer)
    from prompttune.dspy_bridge.optimizers import Sizes
    from prompttune.dspy_bridge.search import dspy_settings

    return dspy_settings(config.optimizer, context.budget, Sizes(len(context.train_ids), len(context.dev_ids)),
                         config.optimizer_options)


def plan_strategy(config: RunConfig, context: SearchContext) -> Callable[[Setting], Strategy]:
    """Check everything the strategy can check before a model loads; return how to build it."""
    name = config.optimizer
    if name in DSPY_ARMS and (context.space.frozen or config.max_prompt_tokens is not None):
        raise UserError(f"{name} compiles through DSPy, outside the search driver that holds every candidate to the "
                        "task's frozen texts and --max-prompt-tokens; use one of prompttune's optimizers "
                        f"({', '.join(OPTIMIZERS)})")
    if name in DSPY_ARMS:
        dspy_arm(config, context)
        return DspyStrategy
    if name not in OPTIMIZERS:
        raise UserError(f"unknown optimizer {name!r}; choose from {', '.join([*OPTIMIZERS, *DSPY_ARMS])}")
    optimizer_cls = checked_optimizer(name, config.optimizer_options)
    optimizer_cls.check(context)

    def build(setting: Setting) -> Strategy:
        return OptimizerStrategy(optimizer_cls(setting.context, setting.proposer), setting.evaluator)
    return build


def strategy_options(name: str) -> list[str]:
    """The options of a prompttune optimizer or a DSPy arm, one line each (`optimize --help-options`)."""
    if name in DSPY_ARMS:
        from prompttune.dspy_bridge import require_dspy

        require_dspy(f"--optimizer {name}")
        from prompttune.dspy_bridge.optimizers import DSPY_OPTIMIZERS

        return describe_options(DSPY_OPTIMIZERS[name].Options)
    return describe_options(get_optimizer(name).Options)
