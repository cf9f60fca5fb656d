"""`optimize --dry-run`: what a run would do and cost, said before it spends anything.

The run is checked as `run_study` checks it (task, space, options, schedule); the only model calls
are a short probe — the baseline prompt on a handful of dev examples, on a private ledger and an
in-memory cache — whose measured rate turns the call counts into a wall-time estimate.
"""

from __future__ import annotations

import time
from contextlib import closing
from dataclasses import dataclass

from prompttune.backends.factory import build_backend
from prompttune.core.config import RunConfig
from prompttune.engine.setup import load_run_task, load_space
from prompttune.engine.study import checked_search
from prompttune.evaluation.cache import ResultCache
from prompttune.evaluation.evaluator import Evaluator
from prompttune.evaluation.ledger import BudgetLedger
from prompttune.optimizers import OPTIMIZERS
from prompttune.optimizers.base import validate_options

PROBE_EXAMPLES = 8


@dataclass(frozen=True)
class RunPlan:
    """A run's schedule and bounds; the seconds per call are measured, so the times are estimates."""

    optimizer: str
    model: str
    schedule: list[tuple[int, int]] | None  # (candidates, dev examples) per round, for optimizers that plan them
    search_calls: int  # the cap: the search may spend up to this many
    search_tokens: int | None  # the token cap, if one was set
    tokens_per_call: float  # measured on the probe
    verdict_calls: int  # at most: baseline and winner on every test example
    probe_calls: int
    seconds_per_call: float

    def lines(self) -> list[str]:
        """The plan as `--dry-run` prints it."""
        lines = [f"dry run: {self.optimizer} on {self.model}; no search call made"]
        if self.schedule:
            rounds = " → ".join(f"{k}×{n}" for k, n in self.schedule)
            lines.append(f"schedule (candidates × dev examples per round): {rounds} = "
                         f"{sum(k * n for k, n in self.schedule)} calls")
        tokens = (f"at most {self.search_tokens} tokens (--budget-tokens)" if self.search_tokens is not None else
                  f"about {self.search_calls * self.tokens_per_call:,.0f} tokens at the probe's "
                  f"{self.tokens_per_call:.0f} per call (no token cap)")
        lines.append(f"search: at most {self.search_calls} model calls (--budget), {tokens}")
        lines.append(f"held-out verdict: at most {self.verdict_calls} calls (baseline and winner on every test "
                     "example), outside the budget")
        search_min, verdict_min = (calls * self.seconds_per_call / 60 for calls in (self.search_calls, self.verdict_calls))
        lines.append(f"wall time, estimated from a probe of {self.probe_calls} calls "
                     f"({self.seconds_per_call * 1000:.0f} ms per call): search at most about {search_min:.1f} min, "
                     f"verdict about {verdict_min:.1f} min (less where the cache answers)")
        return lines


def plan_run(config: RunConfig, probe_examples: int = PROBE_EXAMPLES) -> RunPlan:
    """Check the run as `run_study` would, then time the baseline on `probe_examples` dev examples."""
    task = load_run_task(config)
    space = load_space(config, task)
    visible, context, _ = checked_search(config, task, space)
    optimizer = OPTIMIZERS.get(config.optimizer)
    schedule = (optimizer.plan(context, validate_options(optimizer.name, optimizer.Options, context.options))
                if optimizer is not None and hasattr(optimizer, "plan") else None)
    probe_ids = context.dev_ids[:probe_examples]
    ledger = BudgetLedger()
    with closing(build_backend(config)) as model, closing(ResultCache(":memory:")) as cache:
        evaluator = Evaluator(model, {ex.id: ex for ex in visible.splits["dev"]},
                              {ex.id: ex for ex in visible.splits["train"]}, cache, ledger, scoring=config.scoring)
        started = time.perf_counter()
        evaluator.evaluate(context.space.default_candidate().spec, probe_ids)
        seconds = time.perf_counter() - started
        model_id = model.model_id
    return RunPlan(config.optimizer, model_id, schedule, config.budget, config.budget_tokens,
                   ledger.tokens / max(ledger.calls, 1), 2 * len(task.splits["test"]), ledger.calls,
                   seconds / max(ledger.calls, 1))
