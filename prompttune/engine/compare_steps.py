"""The steps of one comparison (`run_compare`: open → run arms → judge → record), and what they hand each other.

Open holds the model, the run directory and the shared cache, and reads back the arm-seeds an interrupted
comparison finished; the rest run through one `ArmExecutor` (this process, worker processes or Ray tasks); the
judge re-scores every winner on its seed's test split and checks that the comparison was fair and what its
claims are; the record writes the plot and the reports.
"""

from __future__ import annotations

import json
import time
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from rich.console import Console

from prompttune.comparing.arms import Bench
from prompttune.comparing.coverage import coverage_check
from prompttune.comparing.fairness import ModelWatch, caps_of, fairness_checks, reporting_pool_check
from prompttune.comparing.plot import plot_anytime
from prompttune.comparing.summary import pairwise, seed_pairs, summarize
from prompttune.comparing.variants import optimizer_of
from prompttune.core.config import RunConfig
from prompttune.core.errors import BackendUnavailable
from prompttune.core.interrupt import RunInterrupted, resumable_outage
from prompttune.core.run_files import (
    ANYTIME_PLOT,
    ARM,
    ARMS,
    CACHE,
    CONFIG,
    run_status,
    write_compare_summary,
    write_page,
    write_report,
)
from prompttune.engine.arm_executors import ArmExecutor, InProcessArms, WorkerArms, make_executor
from prompttune.engine.arm_runs import ArmSeed, Draw, WorkerBench, arm_key
from prompttune.engine.compare_request import CompareRequest
from prompttune.engine.run_dir import BackendFactory, open_run
from prompttune.engine.setup import run_contract
from prompttune.engine.study import run_versions
from prompttune.reports.compare_report import print_summary, report_text, summary_facts
from prompttune.reports.html_report import html_page
from prompttune.results.arms import ArmRun, load_arm_run
from prompttune.results.compare import ArmSummary, Cap, Check, CompareResult, EqualSpend, PairTest, SeedPair
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.evaluator import build_evaluator
from prompttune.scoring.ledger import BudgetLedger
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.tasks.builtin import tuning_pool


@dataclass(frozen=True)
class OpenedCompare:
    """What the open step hands the others: the request, its config resolved (the model's capabilities
    recorded) and draws, how its models are built, the model behind its watch, the run directory, each seed's
    bench (with the shared cache), the caps every arm is matched on, and the arm-seeds an interrupted comparison
    finished or left to run."""

    request: CompareRequest
    config: RunConfig
    draws: dict[int, Draw]
    build: BackendFactory  # this process's model (unless the request passed one) and each worker's
    watch: ModelWatch
    run_dir: Path
    benches: dict[int, Bench]
    caps: list[Cap]
    finished: dict[tuple[str, int], ArmRun]  # read back: they finished before an interruption
    todo: list[ArmSeed]
    console: Console

    def announce(self, run: ArmRun) -> None:
        """One line per arm-seed as it finishes."""
        c, raw, cap = run.confirmation, run.raw_confirmation, self.caps[0]
        self.console.print(f"[bold]{run.arm} seed {run.seed}[/bold]: test {c.best_accuracy:.3f} guarded, "
                           f"{raw.best_accuracy:.3f} raw (baseline {c.baseline_accuracy:.3f}), "
                           f"{cap.charged(run)}/{cap.limit} {cap.unit}")


@contextmanager
def open_compare(request: CompareRequest, config: RunConfig, draws: dict[int, Draw], build: BackendFactory
                 ) -> Iterator[OpenedCompare]:
    """Hold the model (a contract the target cannot honour is one line, before the run directory exists), open
    the run directory (new, or the interrupted one taken back) and the shared cache for the block, and sort the
    arm-seeds into those an interrupted comparison finished (read back) and those to run."""
    console = request.console or Console(stderr=True, quiet=not request.progress)
    first = draws[request.seeds[0]]
    with open_run(config, request.backend, build=build, quietly=not request.progress) as model:
        capabilities = model.backend.capabilities()
        capabilities.require(config.contract, run_contract(request.config, first.task)[1])
        config = config.model_copy(update={"capabilities": capabilities.record()})
        watch = ModelWatch(model.backend, first.task)
        run_dir = model.directory(config.runs_dir, f"{first.task.name}-compare", _settings(request, config),
                                  request.resume_dir)
        with closing(ResultCache(config.cache or run_dir / CACHE)) as shared:
            benches = {seed: Bench(d.config, d.task, d.space, watch, shared, request.options, d.coverage,
                                   run_dir / ARMS, console, request.progress, in_memory=request.data is not None)
                       for seed, d in draws.items()}
            finished, todo = _finished_and_todo(request, benches, run_dir / ARMS, console)
            yield OpenedCompare(request, config, draws, build, watch, run_dir, benches,
                                caps_of(request.match, config.budget, config.budget_tokens), finished, todo,
                                console)


def _settings(request: CompareRequest, config: RunConfig) -> str:
    """The comparison's config.json: what `compare --resume` runs again."""
    return json.dumps({"run": config.model_dump(), "mode": request.mode, "optimizers": request.arms,
                       "seeds": request.seeds, "options": request.options, "match": request.match,
                       "allow_underspend": request.allow_underspend, "jobs": request.jobs}, indent=2)


def _finished_and_todo(request: CompareRequest, benches: dict[int, Bench], arms_dir: Path, console: Console
                       ) -> tuple[dict[tuple[str, int], ArmRun], list[ArmSeed]]:
    """On a resume, each arm-seed an interrupted comparison finished is read back; the others run (in the
    directory it left them, if any)."""
    earlier = _arms_to_reuse(arms_dir) if request.resume_dir else {}
    finished, todo = {}, []
    for arm in request.arms:
        for seed in request.seeds:
            left = earlier.get(arm_key(benches[seed].arm_config(arm, seed)))
            if left and (left / ARM).is_file():
                finished[(arm, seed)] = load_arm_run(left)
                console.print(f"{arm} seed {seed}: finished before the interruption, read back from {left}")
            else:
                todo.append(ArmSeed(arm, seed, left))
    return finished, todo


def _arms_to_reuse(arms_dir: Path) -> dict[tuple[str, str, int], Path]:
    """The directory of each arm × seed an interrupted comparison left (`arm_key`): a finished arm (arm.json),
    else one to resume. A run that finished but was not yet saved as an arm starts again elsewhere."""
    found: dict[tuple[str, str, int], Path] = {}
    for config_file in sorted(arms_dir.glob(f"*/{CONFIG}")):
        run_dir = config_file.parent
        key = arm_key(RunConfig.model_validate_json(config_file.read_text(encoding="utf-8")))
        if (run_dir / ARM).is_file() or (key not in found and run_status(run_dir) != "finished"):
            found[key] = run_dir
    return found


@contextmanager
def kept_for_resume(opened: OpenedCompare) -> Iterator[None]:
    """While arms run and are judged, a signal or an outage ends the comparison with the one line that says how
    to finish it: the arms finished so far are kept (their arm.json), and every paid call is in the cache."""
    try:
        yield
    except KeyboardInterrupt:
        raise RunInterrupted(f"comparison stopped; the arms finished so far are kept: finish it with "
                             f"`compare --resume {opened.run_dir}`") from None
    except BackendUnavailable as exc:
        raise resumable_outage(exc, f"compare --resume {opened.run_dir}") from None


def run_arms(opened: OpenedCompare) -> list[ArmRun]:
    """Every arm-seed not read back, through the request's executor; all of them, in arm × seed order."""
    done = dict(opened.finished)
    for run in arm_executor(opened).run(opened.todo):
        done[(run.arm, run.seed)] = run
    return [done[(arm, seed)] for arm in opened.request.arms for seed in opened.request.seeds]


def arm_executor(opened: OpenedCompare) -> ArmExecutor:
    """In this process on its model, unless the request asks for workers (`--jobs` > 1, Ray): then each
    worker rebuilds its seed's bench, with a model of its own, and reaches the shared cache."""
    request, config, run_dir = opened.request, opened.config, opened.run_dir
    if not request.in_workers:
        return InProcessArms(opened.benches, opened.announce)
    worker_bench = WorkerBench({seed: bench.config for seed, bench in opened.benches.items()}, request.arms,
                               request.options, request.mode, run_dir / ARMS,
                               Path(config.cache or run_dir / CACHE),
                               opened.build, request.data)
    return WorkerArms(make_executor(request.executor, request.jobs), worker_bench, opened.announce,
                      handle_signals=request.progress, resume_command=f"compare --resume {run_dir}")


@dataclass(frozen=True)
class JudgedCompare:
    """The judge's findings: every run (with its winner's per-example test correctness), each arm's summary
    and the claims made between arms, the view at equal spend, and the fairness and coverage checks."""

    runs: list[ArmRun]
    summaries: list[ArmSummary]
    pairs: list[PairTest]
    seed_pairs: list[SeedPair]
    equal_spend: EqualSpend
    checks: list[Check]


def judge_compare(opened: OpenedCompare, runs: list[ArmRun]) -> JudgedCompare:
    """Re-score every winner for the pairwise tests, test each arm's pick at equal spend, summarize, and check
    that the comparison was fair (same data, caps and model use), covered what each arm searched and, on the
    reporting pool, kept clear of the tuning pool."""
    request, config, benches = opened.request, opened.config, opened.benches
    verdict_calls = _rescore_winners(benches, runs)
    equal_spend = _equal_spend(benches, runs, opened.caps[0])
    summaries = summarize(runs, request.arms, request.seeds)
    tasks = {seed: bench.task for seed, bench in benches.items()}
    checks = [*fairness_checks(tasks, runs, opened.caps, verdict_calls, opened.watch, request.allow_underspend),
              coverage_check(runs, {seed: bench.coverage for seed, bench in benches.items()})]
    if config.pool == "reporting" and request.data is None:
        checks.append(reporting_pool_check(tasks, tuning_pool(config.task, config.data_dir)))
    return JudgedCompare(runs, summaries, pairwise(summaries), seed_pairs(summaries), equal_spend, checks)


def _rescore_winners(benches: dict[int, Bench], runs: list[ArmRun]) -> int:
    """Per-example test correctness of every winner, for the pairwise tests. Each run's
    confirmation already scored its winner on these examples, so this reads the cache; the
    model calls it does make are returned (and expected to be none)."""
    ledger = BudgetLedger()
    for run in runs:
        bench = benches[run.seed]
        test = bench.task.splits["test"]
        evaluator = build_evaluator(bench.config, bench.backend, test, bench.task.splits["train"], bench.shared, ledger)
        run.test_correct = [r.correct for r in evaluator.evaluate(run.best, [ex.id for ex in test])]
    return ledger.calls


def pick_at(run: ArmRun, spend: int, unit: str) -> PromptSpec:
    """The arm's dev pick once it had spent `spend` (its leader then), else the baseline."""
    at = 0 if unit == "calls" else 1
    picks = [leader[2] for leader in run.leaders if leader[at] <= spend]
    return picks[-1] if picks else run.baseline


def _equal_spend(benches: dict[int, Bench], runs: list[ArmRun], cap: Cap) -> EqualSpend:
    """Every arm-seed's dev pick at the smallest spend any arm-seed reached, tested (raw, no verdict)
    on its seed's test split: what each arm would have shipped had they all stopped there."""
    spend = min(cap.charged(r) for r in runs)
    ledger = BudgetLedger()
    accuracy: dict[str, dict[int, float]] = {}
    for run in runs:
        bench = benches[run.seed]
        test = bench.task.splits["test"]
        evaluator = build_evaluator(bench.config, bench.backend, test, bench.task.splits["train"], bench.shared, ledger)
        records = evaluator.evaluate(pick_at(run, spend, cap.unit), [ex.id for ex in test])
        accuracy.setdefault(run.arm, {})[run.seed] = sum(r.correct for r in records) / len(records)
    return EqualSpend(cap.unit, spend, accuracy, ledger.calls)


def compare_result(opened: OpenedCompare, judged: JudgedCompare, started: float) -> CompareResult:
    """The comparison's result, in memory (its wall time from `started`): what the reports, `compare --json` and
    the API read."""
    request, config, draws = opened.request, opened.config, opened.draws
    versions = run_versions(config, opened.watch.inner, [optimizer_of(arm, request.options) for arm in request.arms],
                            passed=request.backend is not None or request.backend_factory is not None)
    return CompareResult(opened.run_dir, config, request.mode, request.arms, request.seeds,
                         {seed: draw.config.split_seed for seed, draw in draws.items()},
                         draws[request.seeds[0]].coverage, judged.runs, judged.summaries, judged.pairs,
                         judged.seed_pairs, opened.caps, judged.checks, time.time() - started,
                         judged.equal_spend, versions, request.options)


def record_compare(opened: OpenedCompare, comparison: CompareResult) -> CompareResult:
    """The anytime plot, summary.json with report.md, and report.html; the CLI also prints the summary."""
    run_dir = opened.run_dir
    plot_anytime(comparison.runs, comparison.arms, opened.config.budget, run_dir / ANYTIME_PLOT)
    write_report(run_dir, report_text(comparison))
    write_compare_summary(run_dir, summary_facts(comparison))
    write_page(run_dir, html_page(run_dir))
    if opened.request.progress:
        print_summary(comparison, opened.console)
    return comparison
