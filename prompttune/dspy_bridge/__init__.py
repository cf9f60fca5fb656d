"""DSPy as a peer on prompttune's model, budget and verdict (optional extra `prompttune[dspy]`).

Nothing here imports dspy at package import time: `require_dspy` turns a missing install into
one line for the user, and the submodules that need dspy are imported only after it. Importing
this package registers the DSPy arms in the strategy registry, which imports it on its first lookup
(`prompttune.optimizers.registry.PLUGINS`).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.core.run_files import DSPY_LOG, DSPY_PROGRAM
from prompttune.core.storage import TrialStorage
from prompttune.optimizers import OPTIMIZERS, SearchContext
from prompttune.optimizers.registry import (
    DEMOS,
    INSTRUCTION,
    Reach,
    Setting,
    Strategy,
    StrategyEntry,
    register,
)
from prompttune.optimizers.strategy_contract import describe_options
from prompttune.results.search_outcome import SearchOutcome
from prompttune.scoring.confirmation import Verdict

if TYPE_CHECKING:
    from prompttune.dspy_bridge.arm import DspyArm

DSPY_ARMS = ("dspy-mipro", "dspy-bfrs", "dspy-gepa", "dspy-copro", "dspy-simba")  # dspy_bridge.optimizers
REACH = {  # what each arm can change in a prompt (`Reach`)
    "dspy-mipro": Reach(writes=(INSTRUCTION, DEMOS), holds={DEMOS: {"max_demos": 0}}),
    "dspy-bfrs": Reach(writes=(DEMOS,)),
    "dspy-gepa": Reach(writes=(INSTRUCTION,)),
    "dspy-copro": Reach(writes=(INSTRUCTION,)),
    "dspy-simba": Reach(writes=(INSTRUCTION, DEMOS), holds={DEMOS: {"max_demos": 0}}),
}
DSPY_VERSION = "3.4.1"  # the adapter follows this release's engine and adapter interfaces


def require_dspy(what: str) -> None:
    """Fail in one line when dspy is absent or not the release the bridge was written against."""
    try:
        installed = importlib.metadata.version("dspy")
    except importlib.metadata.PackageNotFoundError:
        raise UserError(f"{what} needs DSPy: pip install 'prompttune[dspy]'") from None
    if installed != DSPY_VERSION:
        raise UserError(f"{what} needs dspy=={DSPY_VERSION} (found {installed}): "
                        f"pip install 'prompttune[dspy]'")


class DspyStrategy:
    """A DSPy optimizer compiled through the metered bridge; its program file joins the run record."""

    def __init__(self, setting: Setting) -> None:
        from prompttune.dspy_bridge.search import DspySearch

        config, task = setting.config, setting.task
        train, dev = task.splits["train"], task.splits["dev"]
        settings = dspy_arm(config, setting.context)
        self.baseline = setting.context.space.default_candidate()
        log = setting.run_dir / DSPY_LOG if setting.run_dir else None
        self.search_ = DspySearch(settings, self.baseline, setting.evaluator, task.input_fields, train, dev,
                                  config.seed, config.model, log, setting.proposer)

    def search(self, storage: TrialStorage, on_trial: Callable[[dict], None] | None,
               should_stop: Callable[[], bool] | None) -> SearchOutcome:
        return self.search_.search(storage)

    def after_verdict(self, verdict: Verdict, run_dir: Path | None) -> None:
        if run_dir is not None:
            self.search_.save_program(verdict.shipped.spec, run_dir / DSPY_PROGRAM)


def dspy_arm(config: RunConfig, context: SearchContext) -> DspyArm:
    """A DSPy arm's settings sized to the cap and the run's splits (a `UserError` where its smallest run does not
    fit): building the arm checks them, a dry run shows them."""
    require_dspy(config.optimizer)
    from prompttune.dspy_bridge.arm import Sizes
    from prompttune.dspy_bridge.search import dspy_settings

    return dspy_settings(config.optimizer, context.budget, Sizes(len(context.train_ids), len(context.dev_ids)),
                         config.optimizer_options)


def dspy_entry(name: str) -> StrategyEntry:
    """A DSPy arm as a registry entry; dspy is imported only when one of its callables runs."""

    def check(options: dict[str, Any], cap: int, train: int, dev: int) -> None:
        require_dspy(name)
        from prompttune.dspy_bridge.arm import Sizes
        from prompttune.dspy_bridge.optimizers import DSPY_OPTIMIZERS

        DSPY_OPTIMIZERS[name](cap, Sizes(train, dev), options)

    def build(config: RunConfig, context: SearchContext) -> Callable[[Setting], Strategy]:
        if context.space.frozen or config.max_prompt_tokens is not None:
            raise UserError(f"{name} compiles through DSPy, outside the search driver that holds every candidate to "
                            "the task's frozen texts and --max-prompt-tokens; use one of prompttune's optimizers "
                            f"({', '.join(OPTIMIZERS)})")
        dspy_arm(config, context)
        return DspyStrategy

    def options() -> list[str]:
        require_dspy(f"--optimizer {name}")
        from prompttune.dspy_bridge.optimizers import DSPY_OPTIMIZERS

        return describe_options(DSPY_OPTIMIZERS[name].Options)

    return StrategyEntry(name, check, build,
                         lambda config, context: f"DSPy settings: {dspy_arm(config, context).description}",
                         options, REACH[name], lambda: {"dspy": importlib.metadata.version("dspy")}, is_dspy=True)


for _arm in DSPY_ARMS:
    register(dspy_entry(_arm))

__all__ = ["DSPY_ARMS", "DSPY_VERSION", "require_dspy"]
