"""`compare`: several optimizers × seeds under one cap, on one model, judged on one test split.

Arms run one after another in this process on ONE loaded backend. They share the SQLite
cache (nothing is computed twice) but each run sees it through its own `ArmCache`, so a hit
on another run's entry is charged as if the run had made the call itself.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from prompttune.backends.base import Backend
from prompttune.compare.arms import ArmRun, Bench, check_arms, run_arm
from prompttune.compare.fairness import Check, LeakWatch, fairness_checks
from prompttune.compare.plot import plot_anytime
from prompttune.compare.report import print_summary, write_report
from prompttune.compare.summary import ArmSummary, PairTest, pairwise, summarize
from prompttune.config import RunConfig
from prompttune.errors import UserError
from prompttune.evaluation.cache import ResultCache
from prompttune.evaluation.evaluator import Evaluator
from prompttune.evaluation.ledger import BudgetLedger
from prompttune.htmlreport import write_html_report
from prompttune.runner import build_backend, load_run_task, load_space, new_run_dir, require_dev_budget


@dataclass
class Comparison:
    run_dir: Path
    config: RunConfig
    arms: list[str]
    seeds: list[int]
    runs: list[ArmRun]
    summaries: list[ArmSummary]
    pairs: list[PairTest]
    checks: list[Check]
    wall_seconds: float


def _rescore_winners(bench: Bench, runs: list[ArmRun]) -> int:
    """Per-example test correctness of every winner, for the pairwise tests. Each run's
    confirmation already scored its winner on these examples, so this reads the cache; the
    model calls it does make are returned (and expected to be none)."""
    test = bench.task.splits["test"]
    ledger = BudgetLedger()
    evaluator = Evaluator(bench.backend, {ex.id: ex for ex in test}, {ex.id: ex for ex in bench.task.splits["train"]},
                          bench.shared, ledger, scoring=bench.config.scoring)
    ids = [ex.id for ex in test]
    for run in runs:
        run.test_correct = [r.correct for r in evaluator.evaluate(run.best, ids)]
    return ledger.calls


def run_compare(config: RunConfig, arms: list[str], seeds: list[int], options: dict[str, dict[str, Any]],
                backend: Backend | None = None, console: Console | None = None) -> Comparison:
    started = time.time()
    console = console or Console(stderr=True)
    check_arms(arms)
    if stray := sorted(set(options) - set(arms)):
        raise UserError(f"--option names optimizers not compared: {', '.join(stray)}")
    task = load_run_task(config)
    require_dev_budget(config, task)
    space = load_space(config, task).bind(task.splits["train"])
    run_dir = new_run_dir(config.runs_dir, f"{task.name}-compare")
    (run_dir / "config.json").write_text(json.dumps(
        {"run": config.model_dump(), "optimizers": arms, "seeds": seeds, "options": options}, indent=2))
    shared = ResultCache(config.cache or run_dir / "cache.sqlite")
    watch = LeakWatch(backend or build_backend(config), task)
    bench = Bench(config, task, space, watch, shared, options, run_dir / "arms", console)
    try:
        runs = []
        for arm in arms:
            for seed in seeds:
                runs.append(run_arm(bench, arm, seed))
                c = runs[-1].confirmation
                console.print(f"[bold]{arm} seed {seed}[/bold]: test {c.best_accuracy:.3f} (baseline "
                              f"{c.baseline_accuracy:.3f}), {runs[-1].search.calls}/{config.budget} calls")
        verdict_calls = _rescore_winners(bench, runs)
    finally:
        shared.close()
    summaries = summarize(runs, arms, seeds)
    checks = fairness_checks(task, runs, config.budget, config.budget_tokens, verdict_calls, watch)
    comparison = Comparison(run_dir, config, arms, seeds, runs, summaries, pairwise(summaries), checks,
                            time.time() - started)
    plot_anytime(runs, arms, config.budget, run_dir / "anytime.png")
    write_report(comparison)
    write_html_report(run_dir)
    print_summary(comparison, console)
    return comparison
