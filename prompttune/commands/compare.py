"""`compare`: several optimizers × seeds under one cap, on one model, judged on one test split.

Arms run one after another in this process on ONE loaded backend. They share the SQLite
cache (nothing is computed twice) but each run sees it through its own `MeteredCache`, so a hit
on another run's entry is charged as if the run had made the call itself.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rich.console import Console

from prompttune.backends.base import Backend
from prompttune.backends.factory import backend_options
from prompttune.commands.common import (
    RUN_DIR,
    add_run_arguments,
    build_backend,
    check_paths,
    checked_search,
    load_run_task,
    load_space,
    new_run_dir,
    option_value,
    require_dev_budget,
)
from prompttune.commands.compare_report import print_summary, write_report
from prompttune.commands.html.facts import run_status
from prompttune.commands.optimize import run_optimization
from prompttune.commands.report import write_html_report
from prompttune.compare.arms import (
    ARM_FILE,
    DSPY_ARMS,
    ArmRun,
    Bench,
    arm_config,
    check_arms,
    load_arm_run,
    save_arm_run,
)
from prompttune.compare.coverage import MODES, Coverage, coverage_check, plan_coverage
from prompttune.compare.fairness import Cap, Check, ModelWatch, caps_of, fairness_checks
from prompttune.compare.plot import plot_anytime
from prompttune.compare.summary import ArmSummary, PairTest, SeedPair, pairwise, seed_pairs, summarize
from prompttune.core.config import RunConfig
from prompttune.core.errors import BackendUnavailable, UserError
from prompttune.core.interrupt import RunInterrupted, resumable_outage
from prompttune.core.storage import read_json, write_atomic
from prompttune.evaluation.cache import ResultCache
from prompttune.evaluation.evaluator import Evaluator
from prompttune.evaluation.ledger import BudgetLedger
from prompttune.evaluation.metered_cache import MeteredCache
from prompttune.optimizers import OPTIMIZERS


def run_prompttune_arm(bench: Bench, arm: str, seed: int, resume_dir: Path | None = None) -> ArmRun:
    """A prompttune optimizer through the ordinary runner, on the shared model and cache view;
    `resume_dir` finishes the arm an interrupted comparison left there."""
    views: list[tuple[BudgetLedger, MeteredCache, int]] = []  # per ledger: its view, and the request log mark at opening

    def view(ledger: BudgetLedger) -> MeteredCache:
        views.append((ledger, MeteredCache(bench.shared), bench.backend.mark()))
        return views[-1][1]

    result = run_optimization(bench.arm_config(arm, seed), backend=bench.backend, console=bench.console,
                              cache_view=view, resume_dir=resume_dir)
    search, start = next((v, mark) for ledger, v, mark in views if ledger is result.search_ledger)
    # The search's view opens just before the search, the verdict's once the search has ended.
    stop = next(mark for ledger, _, mark in views if ledger is result.confirm_ledger)
    outcome, verdict = result.outcome, result.verdict
    # Some strategies (successive halving) name a leader only when a round finishes.
    anytime = outcome.anytime or [(result.search_ledger.calls, outcome.leader_dev_score)]
    return ArmRun(arm, seed, result.run_dir, result.baseline.spec, result.shipped.spec, outcome.leader_dev_score,
                  result.confirmation, verdict.dev_winner.spec, verdict.leader_confirmation,
                  result.space.fingerprint(), result.search_ledger, result.confirm_ledger.calls, search.foreign_calls,
                  search.foreign_tokens, anytime, outcome.stopped_by_budget, result.wall_seconds, outcome.notes,
                  bench.backend.served(start, stop), verdict.test_ids)


def run_arm(bench: Bench, arm: str, seed: int, resume_dir: Path | None = None) -> ArmRun:
    """One arm at one seed. An unfinished prompttune arm resumes in `resume_dir`; a DSPy arm starts
    again in its own directory. Either way the calls it paid for before are in the shared cache and
    its fresh metered view charges each of them once more, so its totals equal an uninterrupted arm's."""
    if arm in DSPY_ARMS:
        from prompttune.compare.dspy_arm import run_dspy_arm

        return run_dspy_arm(bench, arm, seed)
    return run_prompttune_arm(bench, arm, seed, resume_dir)


def _arms_to_reuse(arms_dir: Path) -> dict[tuple[str, int], Path]:
    """The directory of each arm × seed an interrupted comparison left: a finished arm (arm.json),
    else one to resume. A run that finished but was not yet saved as an arm starts again elsewhere."""
    found: dict[tuple[str, int], Path] = {}
    for config_file in sorted(arms_dir.glob("*/config.json")):
        run_dir = config_file.parent
        config = RunConfig.model_validate_json(config_file.read_text(encoding="utf-8"))
        key = (config.optimizer, config.seed)
        if (run_dir / ARM_FILE).is_file() or (key not in found and run_status(run_dir) != "finished"):
            found[key] = run_dir
    return found


@dataclass
class Comparison:
    run_dir: Path
    config: RunConfig
    mode: str
    arms: list[str]
    seeds: list[int]
    coverage: dict[str, Coverage]
    runs: list[ArmRun]
    summaries: list[ArmSummary]
    pairs: list[PairTest]
    seed_pairs: list[SeedPair]
    caps: list[Cap]  # the matched cap first
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
                backend: Backend | None = None, console: Console | None = None,
                mode: str = "same-space", match: Literal["calls", "tokens"] = "calls",
                resume_dir: Path | None = None) -> Comparison:
    """Every arm × seed on one bench. `mode` says what each arm may search of the one space
    (`prompttune.compare.coverage`). `match`: the budget every arm gets and the checks compare —
    search calls (`config.budget`), or search tokens (`config.budget_tokens`; the call budget then
    stays what the optimizers plan with, and a ceiling). With `resume_dir` (an interrupted
    comparison), finished arms are read back and the others resumed or restarted."""
    started = time.time()
    console = console or Console(stderr=True)
    if match == "tokens" and config.budget_tokens is None:
        raise UserError("--match tokens needs --budget-tokens: the token cap every arm is matched on")
    check_arms(arms, options, config)
    if stray := sorted(set(options) - set(arms)):
        raise UserError(f"--option names optimizers not compared: {', '.join(stray)}")
    task = load_run_task(config)
    require_dev_budget(config, task)
    space = load_space(config, task).bind(task.splits["train"])
    coverage = plan_coverage(arms, space, mode, options)
    for arm in (arm for arm in arms if arm in OPTIMIZERS):  # each arm's whole run, before the model loads
        checked_search(arm_config(config, arm, options, coverage), task, space)
    check_paths(config.runs_dir, config.cache)
    watch = ModelWatch(backend or build_backend(config), task)
    run_dir = resume_dir or new_run_dir(config.runs_dir, f"{task.name}-compare")
    write_atomic(run_dir / "config.json", json.dumps(
        {"run": config.model_dump(), "mode": mode, "optimizers": arms, "seeds": seeds, "options": options,
         "match": match}, indent=2))
    reuse = _arms_to_reuse(run_dir / "arms") if resume_dir else {}
    caps = caps_of(match, config.budget, config.budget_tokens)
    shared = ResultCache(config.cache or run_dir / "cache.sqlite")
    bench = Bench(config, task, space, watch, shared, options, coverage, run_dir / "arms", console)
    try:
        runs = []
        for arm in arms:
            for seed in seeds:
                earlier = reuse.get((arm, seed))
                if earlier and (earlier / ARM_FILE).is_file():
                    runs.append(load_arm_run(earlier))
                    console.print(f"{arm} seed {seed}: finished before the interruption, read back from {earlier}")
                else:
                    runs.append(run_arm(bench, arm, seed, earlier))
                    save_arm_run(runs[-1])
                c, raw = runs[-1].confirmation, runs[-1].raw_confirmation
                console.print(f"[bold]{arm} seed {seed}[/bold]: test {c.best_accuracy:.3f} guarded, "
                              f"{raw.best_accuracy:.3f} raw (baseline {c.baseline_accuracy:.3f}), "
                              f"{caps[0].charged(runs[-1])}/{caps[0].limit} {caps[0].unit}")
        verdict_calls = _rescore_winners(bench, runs)
    except KeyboardInterrupt:
        raise RunInterrupted(f"comparison stopped; the arms finished so far are kept: finish it with "
                             f"`compare --resume {run_dir}`") from None
    except BackendUnavailable as exc:
        raise resumable_outage(exc, f"compare --resume {run_dir}") from None
    finally:
        shared.close()
    summaries = summarize(runs, arms, seeds)
    checks = [*fairness_checks(task, runs, caps, verdict_calls, watch), coverage_check(runs, coverage)]
    comparison = Comparison(run_dir, config, mode, arms, seeds, coverage, runs, summaries, pairwise(summaries),
                            seed_pairs(summaries), caps, checks, time.time() - started)
    plot_anytime(runs, arms, config.budget, run_dir / "anytime.png")
    write_report(comparison)
    write_html_report(run_dir)
    print_summary(comparison, console)
    return comparison


def parse_options(texts: list[str]) -> dict[str, dict[str, Any]]:
    """`OPTIMIZER.KEY=VALUE` settings (values read as YAML), grouped by optimizer."""
    options: dict[str, dict[str, Any]] = {}
    for text in texts:
        key, sep, value = text.partition("=")
        arm, dot, name = key.strip().partition(".")
        if not sep or not dot or not arm or not name:
            raise UserError(f"--option expects OPTIMIZER.KEY=VALUE (e.g. sh.eta=3), got {text!r}")
        options.setdefault(arm, {})[name.strip()] = option_value(text, value)
    return options


def resume_compare(run_dir: Path, backend: Backend | None = None, console: Console | None = None) -> Comparison:
    """Finish an interrupted comparison with its own settings (see `run_compare`)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"{run_dir} is not a compare run directory")
    if (run_dir / "summary.json").is_file():
        raise UserError(f"{run_dir} finished already (summary.json exists); nothing to resume")
    saved = read_json(run_dir / "config.json")
    if not isinstance(saved, dict) or not {"run", "optimizers", "seeds", "options", "mode", "match"} <= saved.keys():
        raise UserError(f"{run_dir} is not a compare run directory (its config.json is an optimize run's?)")
    RUN_DIR.set(run_dir)
    return run_compare(RunConfig.model_validate(saved["run"]), saved["optimizers"], saved["seeds"], saved["options"],
                       backend, console, mode=saved["mode"], match=saved["match"], resume_dir=run_dir)


def _compare(args: argparse.Namespace) -> int:
    if args.resume:
        result = resume_compare(Path(args.resume))
    else:
        if args.seeds < 1:
            raise UserError("--seeds must be at least 1")
        arms = [name.strip() for name in args.optimizers.split(",") if name.strip()]
        if not arms:
            raise UserError("--optimizers names no optimizer")
        config = RunConfig(
            task=args.task, data_dir=args.data_dir, space=args.space, budget=args.budget,
            budget_tokens=args.budget_tokens, seed=args.seed, split_seed=args.split_seed, scoring=args.scoring,
            train_size=args.train_size, dev_size=args.dev_size, test_size=args.test_size,
            runs_dir=args.runs_dir, cache=args.cache, **backend_options(args))
        result = run_compare(config, arms, list(range(args.seed, args.seed + args.seeds)),
                             parse_options(args.option), mode=args.mode, match=args.match)
    failed = [check.claim for check in result.checks if check.status == "failed"]
    if failed:
        print(f"fairness check failed: {'; '.join(failed)}; report: {result.run_dir / 'report.md'}")
        return 1
    best = max(result.summaries, key=lambda s: s.guarded.accuracy)
    cap = result.caps[0]
    print(f"{MODES[result.mode]}: {len(result.arms)} optimizers × {len(result.seeds)} seeds at {cap.limit} {cap.unit}: "
          f"best mean guarded test accuracy {best.guarded.accuracy:.3f} ({best.arm}), baseline "
          f"{result.runs[0].confirmation.baseline_accuracy:.3f}; report: {result.run_dir / 'report.md'}")
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:
    compare = commands.add_parser("compare", help="run several optimizers under the same budget, model "
                                  "and splits; compare their held-out results")
    add_run_arguments(compare)
    compare.add_argument("--optimizers", default="random,sh",
                         help=f"comma-separated: prompttune optimizers and {', '.join(DSPY_ARMS)}")
    compare.add_argument("--seeds", type=int, default=5, help="optimizer seeds per arm: --seed, --seed+1, … "
                         "(default 5: the paired tests across seeds need a few)")
    compare.add_argument("--mode", choices=list(MODES), default="same-space",
                         help="same-space (default): an optimizer comparison, every arm searches only what the "
                         "space declares and holds the rest at the baseline; native: a tool comparison, each "
                         "tool also adds what it brings itself (demos, its own instructions)")
    compare.add_argument("--budget", type=int, default=2000, help="hard cap on search-time model calls per run")
    compare.add_argument("--budget-tokens", type=int, help="optional hard cap on search-time tokens per run")
    compare.add_argument("--match", choices=["calls", "tokens"], default="calls",
                         help="what every arm is matched on and the checks compare: search calls (--budget), or "
                              "search tokens (--budget-tokens, required; --budget is then what optimizers plan "
                              "with and a ceiling: set it above what the token cap buys)")
    compare.add_argument("--option", action="append", default=[], metavar="OPTIMIZER.KEY=VALUE",
                         help="optimizer option, e.g. sh.eta=3 or dspy-mipro.auto=medium (repeatable)")
    compare.add_argument("--resume", metavar="RUN_DIR", help="finish an interrupted comparison from its directory "
                         "(its own settings; finished arms are read back, the others resumed, paid calls charged once)")
    compare.set_defaults(handler=_compare)
