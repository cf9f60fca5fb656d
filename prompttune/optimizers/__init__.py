"""Optimizers: one file per strategy behind the ask/tell base class."""

from prompttune.errors import UserError
from prompttune.optimizers.base import Optimizer, SearchContext, TrialRequest, run_search
from prompttune.optimizers.random_search import RandomSearch

OPTIMIZERS: dict[str, type[Optimizer]] = {cls.name: cls for cls in (RandomSearch,)}


def get_optimizer(name: str) -> type[Optimizer]:
    try:
        return OPTIMIZERS[name]
    except KeyError:
        raise UserError(f"unknown optimizer {name!r}; choose from {', '.join(OPTIMIZERS)}") from None


__all__ = ["OPTIMIZERS", "Optimizer", "SearchContext", "TrialRequest", "get_optimizer", "run_search"]
