"""The contract every DSPy arm keeps (`DspyArm`): settings sized from (cap, split sizes, options) before any
model loads, then `compile` on the arm's `Tools`; the options all arms share and the metric they score by.
The arms themselves: optimizers.py (the table by name, BootstrapFewShotWithRandomSearch, COPRO, SIMBA),
miprov2.py and gepa.py."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import dspy
from pydantic import Field

from prompttune.core.errors import UserError
from prompttune.dspy_bridge.engine import BudgetStop, MeteredEngine
from prompttune.dspy_bridge.program import OUTPUT_FIELD, ProgramMapping
from prompttune.optimizers.strategy_contract import OptimizerOptions, validate_options
from prompttune.scoring.contract import least_budget

DSPY_TRIES_PER_DEMO = 2  # bootstrapping keeps the traces the metric passes: about 2 tries per demo at 50%


def exact_label(example: dspy.Example, prediction: dspy.Prediction, trace: Any = None) -> bool:
    return getattr(prediction, OUTPUT_FIELD) == getattr(example, OUTPUT_FIELD)


@dataclass(frozen=True)
class Sizes:
    """The splits an arm draws from: the train split (demos, SIMBA's examples) and the dev split (valsets)."""

    train: int
    dev: int


@dataclass
class Tools:
    """What one arm-seed run hands DSPy: the metered LM and adapter, the arm seed, and its data —
    the train split in the arm seed's order and the valset drawn from dev with that seed."""

    lm: dspy.LM
    adapter: dspy.Adapter
    engine: MeteredEngine
    mapping: ProgramMapping
    seed: int
    trainset: list[dspy.Example]
    valset: list[dspy.Example]

    @property
    def threads(self) -> int:
        """DSPy's num_threads for this run: the metered engine gathers its threads' calls into batches."""
        return self.engine.threads


class DspyArm(ABC):
    """One DSPy optimizer's settings for one cap; `UserError` when its options are bad or its
    smallest run does not fit the cap."""

    name: ClassVar[str]
    Options: ClassVar[type[OptimizerOptions]]

    def __init__(self, cap: int, sizes: Sizes, options: dict[str, Any]) -> None:
        self.cap = cap
        self.sizes = sizes
        self.options: Any = validate_options(self.name, self.Options, options)
        # Arms that take no valset (SIMBA) have no valset_size and draw none.
        self.valset_size = min(getattr(self.options, "valset_size", 0), sizes.dev)
        self.description = self._settle()

    def _require(self, minimum: int, smallest_run: str) -> None:
        if minimum > self.cap:
            raise UserError(f"{self.name} needs at least {minimum} calls ({smallest_run}); the cap is {self.cap}: "
                            f"raise --budget to at least {least_budget(minimum, self.sizes.dev)}")

    @abstractmethod
    def _settle(self) -> str:
        """Fix the settings for the cap; returns what they are and why."""

    def compile(self, student: dspy.Predict, tools: Tools) -> dspy.Module:
        """Run DSPy's optimizer with `tools.threads` threads; its calls go through `tools.lm` (and so
        the ledger). On `BudgetStop` the engine is halted first: DSPy leaves the worker threads of a
        parallel evaluation running when one of them raises, and they must not reach the model
        after the arm has moved on."""
        with dspy.context(num_threads=tools.threads):
            try:
                return self._compile(student, tools)
            except BudgetStop:
                tools.engine.halt()
                raise

    @abstractmethod
    def _compile(self, student: dspy.Predict, tools: Tools) -> dspy.Module:
        """DSPy's optimizer, set up and compiled."""

    def selection(self, trainset: list[dspy.Example], valset: list[dspy.Example]) -> list[dspy.Example]:
        """The examples the optimizer scores whole programs on to choose one: its valset."""
        return valset


class DspyOptions(OptimizerOptions):
    threads: int = Field(32, ge=1, description="DSPy's num_threads; the metered engine gathers their calls into "
                                               "batches for the model (same answers and charges as one thread)")


class ValsetOptions(DspyOptions):
    valset_size: int = Field(100, ge=1, description="dev examples drawn with the arm seed as DSPy's valset")
