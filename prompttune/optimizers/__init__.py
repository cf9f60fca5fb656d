"""Optimizers: one file per strategy behind the ask/tell base class."""

from prompttune.optimizers.bfrs import BootstrapFewShotRandomSearch
from prompttune.optimizers.cople import CoordinateWordSearch
from prompttune.optimizers.driver import run_search
from prompttune.optimizers.mipro import Mipro
from prompttune.optimizers.p2g import SplitErrorCritique
from prompttune.optimizers.random_search import RandomSearch
from prompttune.optimizers.reflect.strategy import ReflectiveRace
from prompttune.optimizers.spread import FormatSpread
from prompttune.optimizers.strategy_contract import Optimizer, SearchContext, TrialRequest
from prompttune.optimizers.successive_halving import SuccessiveHalving

OPTIMIZERS: dict[str, type[Optimizer]] = {
    cls.name: cls for cls in (RandomSearch, SuccessiveHalving, CoordinateWordSearch, SplitErrorCritique,
                              BootstrapFewShotRandomSearch, Mipro, FormatSpread, ReflectiveRace)
}


__all__ = ["OPTIMIZERS", "Optimizer", "SearchContext", "TrialRequest", "run_search"]
