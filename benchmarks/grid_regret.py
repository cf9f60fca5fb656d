"""Grid regret: how close each grid-searching optimizer gets to the optimum of a fully scored grid.

A grid space (default `benchmarks/grid_space.yaml`: 5 instructions x 6 label-word sets = 30
zero-shot AG News prompts) is scored once, every prompt on the whole dev and test splits, on the
real model; the results stay in `--cache` so a rerun only reads them. Then every optimizer that
searches a grid runs `--seeds` times at each `--fractions` of the grid's dev cost (prompts x dev
size calls), through the ordinary `optimize` runner with that cache as a shared `--cache`: each
result it reads is charged to its ledger as the call it stands for (MeteredCache), so the budget
is real, while the model is never called (a backend that refuses calls proves the search stayed
on the grid). mipro and bfrs are left out: they write instructions and bootstrap demos with model
calls the grid does not hold; `reflect` runs on grid moves only, its race ranked as by default
(accuracy, ties broken by margin); `reflect[margin]`, `reflect[accuracy]`, `reflect[tiebreak]`,
`reflect[probability]` and `reflect[staged]` rank it by each `race_score` (see docs/optimizers.md),
to measure what a dense score buys.

Per optimizer and fraction: the mean regret in accuracy points against the grid's dev optimum
(of the dev winner's full-dev score) and against the test optimum (of the dev winner and of what
ships after the held-out verdict), and the share of runs within one point of the test optimum.
Anchor: successive halving is reported to find a near-best prompt at 7.8% of a grid's cost.

Run: PROMPTTUNE_DATA_DIR=../shared/data python benchmarks/grid_regret.py [--seeds 20]
     [--fractions 0.05,0.1,0.2] [--optimizers random,sh,spread,reflect,reflect[accuracy]]
     [--cache runs/grid-regret.sqlite]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from prompttune.backends.backend import Backend
from prompttune.backends.factory import build_backend
from prompttune.core.config import RunConfig
from prompttune.engine.setup import load_space
from prompttune.engine.study import run_study
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.evaluator import Evaluator
from prompttune.scoring.ledger import BudgetLedger
from prompttune.search_spaces import Candidate
from prompttune.statistics import get_objective
from prompttune.tasks import load_run_task

HERE = Path(__file__).resolve().parent
# Arms beyond an optimizer's defaults: reflect on grid moves only (the grid holds no proposer or
# calibration calls), ranking its race as by default or, as ablations, by each race_score.
ARMS = {"reflect": ("reflect", {"write_instructions": False, "calibration": "off"}),
        **{f"reflect[{score}]": ("reflect", {"write_instructions": False, "calibration": "off",
                                             "race_score": race_score})
           for score, race_score in (("margin", "margin"), ("accuracy", "objective"), ("tiebreak", "tiebreak"),
                                     ("probability", "probability"), ("staged", "staged"))}}


class GridOnly:
    """The loaded backend for rendering and tokenizing; any model call means a search left the grid."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def score(self, requests: list) -> list:
        raise RuntimeError(f"{len(requests)} requests outside the scored grid")

    generate = score


@dataclass(frozen=True)
class GridPoint:
    candidate: Candidate
    dev: float
    test: float


def score_grid(config: RunConfig, backend: Backend, cache: ResultCache) -> tuple[list[GridPoint], int]:
    """Every grid prompt on the whole dev and test splits (cache hits are free); the model calls made."""
    task = load_run_task(config)
    space = load_space(config, task).bind(task.splits["train"])
    objective = get_objective(config.objective)
    train = {ex.id: ex for ex in task.splits["train"]}
    ledger = BudgetLedger()
    scores: dict[str, dict[str, float]] = {}
    candidates = [space.build(assignment) for assignment in space.enumerate()]
    for split in ("dev", "test"):
        examples = task.splits[split]
        evaluator = Evaluator(backend, {ex.id: ex for ex in examples}, train, cache, ledger, scoring=config.scoring)
        ids = [ex.id for ex in examples]
        for candidate in candidates:
            records = evaluator.evaluate(candidate.spec, ids)
            scores.setdefault(candidate.id, {})[split] = objective(
                [r.gold for r in records], [r.pred for r in records], len(task.labels))
    return [GridPoint(c, scores[c.id]["dev"], scores[c.id]["test"]) for c in candidates], ledger.calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="agnews")
    parser.add_argument("--space", default=str(HERE / "grid_space.yaml"))
    parser.add_argument("--train-size", type=int, default=50)
    parser.add_argument("--dev-size", type=int, default=200)
    parser.add_argument("--test-size", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--fractions", default="0.05,0.1,0.2", help="budgets as fractions of the grid's dev cost")
    parser.add_argument("--optimizers", default="random,sh,spread")
    parser.add_argument("--cache", default="runs/grid-regret.sqlite", help="the scored grid; kept for reruns")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--model", default=RunConfig().model)
    args = parser.parse_args()
    Path(args.cache).parent.mkdir(parents=True, exist_ok=True)
    base = RunConfig(task=args.task, space=args.space, train_size=args.train_size, dev_size=args.dev_size,
                     test_size=args.test_size, cache=args.cache, dtype=args.dtype, model=args.model)
    backend = build_backend(base)
    started = time.time()
    cache = ResultCache(args.cache)
    try:
        grid, calls = score_grid(base, backend, cache)
    finally:
        cache.close()
    dev_best = max(p.dev for p in grid)
    test_best = max(p.test for p in grid)
    by_id = {p.candidate.id: p for p in grid}
    grid_pick = max(grid, key=lambda p: p.dev)
    grid_cost = len(grid) * args.dev_size
    print(f"grid: {len(grid)} prompts on {args.dev_size} dev / {args.test_size} test examples of {args.task}, "
          f"{backend.describe()}; {calls} model calls to score it ({time.time() - started:.0f} s)")
    print(f"dev accuracy {min(p.dev for p in grid):.3f}–{dev_best:.3f}, test {min(p.test for p in grid):.3f}–"
          f"{test_best:.3f}; baseline test {grid[0].test:.3f}; the full grid's dev pick is "
          f"{100 * (test_best - grid_pick.test):.1f} points below the test optimum (cost {grid_cost} calls)\n")

    rows = []
    with tempfile.TemporaryDirectory() as runs_dir:
        for optimizer in args.optimizers.split(","):
            for fraction in (float(f) for f in args.fractions.split(",")):
                budget = round(fraction * grid_cost)
                runs = []
                for seed in range(args.seeds):
                    name, options = ARMS.get(optimizer, (optimizer, {}))
                    config = base.model_copy(update={"optimizer": name, "optimizer_options": options, "seed": seed,
                                                     "budget": budget, "runs_dir": runs_dir})
                    result = run_study(config, backend=GridOnly(backend), console=Console(quiet=True))
                    runs.append((by_id[result.verdict.dev_winner.id], by_id[result.shipped.id],
                                 result.search_ledger.calls))
                rows.append((optimizer, fraction, budget, runs))
    print(f"{args.seeds} seeds per row; regret in accuracy points, mean over seeds")
    print("| optimizer | budget (share of grid) | calls charged | dev regret, dev winner | test regret, dev winner "
          "| within 1 pt of test optimum, dev winner | test regret, shipped | within 1 pt, shipped |")
    print("| --- " * 8 + "|")
    for optimizer, fraction, budget, runs in rows:
        def regret(points: list[GridPoint], split: str) -> str:
            best = dev_best if split == "dev" else test_best
            return f"{100 * statistics.mean(best - getattr(p, split) for p in points):.1f}"

        def within(points: list[GridPoint]) -> str:
            return f"{sum(test_best - p.test <= 0.01 for p in points) / len(points):.0%}"

        picks, shipped = [r[0] for r in runs], [r[1] for r in runs]
        print(f"| `{optimizer}` | {budget} ({fraction:.0%}) | {statistics.mean(r[2] for r in runs):.0f} "
              f"| {regret(picks, 'dev')} | {regret(picks, 'test')} | {within(picks)} "
              f"| {regret(shipped, 'test')} | {within(shipped)} |", flush=True)
    print(f"\n{time.time() - started:.0f} s in all")


if __name__ == "__main__":
    main()
