"""Optimizers: one file per strategy behind the ask/tell base class."""

from prompttune.core.errors import UserError
from prompttune.optimizers.base import Optimizer, SearchContext, TrialRequest, run_search, validate_options
from prompttune.optimizers.bfrs import BootstrapFewShotRandomSearch
from prompttune.optimizers.cople import CoordinateWordSearch
from prompttune.optimizers.mipro import Mipro
from prompttune.optimizers.p2g import SplitErrorCritique
from prompttune.optimizers.random_search import RandomSearch
from prompttune.optimizers.reflect import ReflectiveRace
from prompttune.optimizers.spread import FormatSpread
from prompttune.optimizers.successive_halving import SuccessiveHalving

OPTIMIZERS: dict[str, type[Optimizer]] = {
    cls.name: cls for cls in (RandomSearch, SuccessiveHalving, CoordinateWordSearch, SplitErrorCritique,
                              BootstrapFewShotRandomSearch, Mipro, FormatSpread, ReflectiveRace)
}


def get_optimizer(name: str) -> type[Optimizer]:
    try:
        return OPTIMIZERS[name]
    except KeyError:
        raise UserError(f"unknown optimizer {name!r}; choose from {', '.join(OPTIMIZERS)}") from None


def checked_optimizer(name: str, options: dict) -> type[Optimizer]:
    """The optimizer class, after its options were validated: bad input fails before any cost."""
    optimizer = get_optimizer(name)
    validate_options(name, optimizer.Options, options)
    return optimizer


__all__ = ["OPTIMIZERS", "Optimizer", "SearchContext", "TrialRequest", "checked_optimizer", "get_optimizer",
           "run_search"]
