"""`compare`: several strategies × seeds under one cap, on one model, judged on one test split.

Arms run one after another in this process on ONE loaded backend, each through the run engine
(`run_study`) like any run: prompttune's optimizers and DSPy's alike. They share the SQLite cache
(nothing is computed twice) but each run sees it through its own `MeteredCache`, so a hit on
another run's entry is charged as if the run had made the call itself.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Literal, Sequence

from rich.console import Console

from prompttune.backends.base import Backend
from prompttune.comparing.arms import Bench, arm_config, check_arms
from prompttune.comparing.coverage import coverage_check, plan_coverage
from prompttune.comparing.fairness import ModelWatch, caps_of, distinct_draws_check, fairness_checks, reporting_pool_check
from prompttune.comparing.plot import plot_anytime
from prompttune.comparing.summary import pairwise, seed_pairs, summarize
from prompttune.comparing.variants import optimizer_of
from prompttune.core.config import RunConfig
from prompttune.core.errors import BackendUnavailable, UserError
from prompttune.core.interrupt import RunInterrupted, resumable_outage
from prompttune.core.storage import read_json
from prompttune.engine.arm_runs import ArmJob, Draw, draw_seed, make_executor, run_arm, run_job, split_seeds
from prompttune.engine.run_dir import BackendFactory, open_run
from prompttune.engine.setup import RUN_DIR, build_backend, check_paths, load_run_task, run_contract
from prompttune.engine.study import run_versions
from prompttune.reports.compare_report import print_summary, write_report
from prompttune.reports.html_report import write_html_report
from prompttune.results.arms import ARM_FILE, ArmRun, load_arm_run, save_arm_run
from prompttune.results.compare import Cap, CompareResult, EqualSpend
from prompttune.results.run_record import run_status
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.evaluator import build_evaluator
from prompttune.scoring.ledger import BudgetLedger
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.tasks.base import Task
from prompttune.tasks.builtin import tuning_pool


def _arm_key(config: RunConfig) -> tuple[str, str, int]:
    """What tells an arm-seed's run apart: its optimizer, its options (a named variant's differ) and its seed."""
    return config.optimizer, json.dumps(config.optimizer_options, sort_keys=True, default=str), config.seed


def _arms_to_reuse(arms_dir: Path) -> dict[tuple[str, str, int], Path]:
    """The directory of each arm × seed an interrupted comparison left (`_arm_key`): a finished arm (arm.json),
    else one to resume. A run that finished but was not yet saved as an arm starts again elsewhere."""
    found: dict[tuple[str, str, int], Path] = {}
    for config_file in sorted(arms_dir.glob("*/config.json")):
        run_dir = config_file.parent
        config = RunConfig.model_validate_json(config_file.read_text(encoding="utf-8"))
        key = _arm_key(config)
        if (run_dir / ARM_FILE).is_file() or (key not in found and run_status(run_dir) != "finished"):
            found[key] = run_dir
    return found


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


def check_compare(config: RunConfig, arms: list[str], seeds: list[int], options: dict[str, dict[str, Any]],
                  mode: str = "same-space", match: Literal["calls", "tokens"] = "calls", native_demos: int = 0,
                  jobs: int = 1, data: Task | None = None, executor: str = "process",
                  check_generation: int = 0) -> tuple[RunConfig, dict[int, Draw]]:
    """Everything a comparison checks before any model loads, so that bad input is one line before
    anything is spent (`run_compare` and `compare --dry-run` alike): the config it runs (with
    `native_demos` and `check_generation`) and each seed's draw."""
    make_executor(executor, jobs)  # a bad --jobs or --executor, or Ray missing, is one line before any spend
    if match == "tokens" and config.budget_tokens is None:
        raise UserError("--match tokens needs --budget-tokens: the token cap every arm is matched on")
    if native_demos and mode != "native":
        raise UserError("--native-demos adds demos to the space for a tool comparison: it needs --mode native")
    if check_generation < 0:
        raise UserError(f"--check-generation {check_generation}: the test examples served by generation, 0 or more")
    # One contract for every arm (the task file's where the config sets none); `check_generation` (0 unless asked
    # for: `compare --check-generation N`) has each arm-seed's shipped prompt served by generation, descriptively.
    task = data if data is not None else load_run_task(config)
    config = config.model_copy(update={"native_demos": native_demos, "serve": run_contract(config, task)[0],
                                       "check_generation": check_generation})
    check_arms(arms, options, config, task)
    if stray := sorted(set(options) - set(arms)):
        raise UserError(f"--option names optimizers not compared: {', '.join(stray)}")
    draws = {seed: draw_seed(config, arms, options, mode, split_seed, data)
             for seed, split_seed in split_seeds(config, seeds).items()}
    _require_distinct_arms(next(iter(draws.values())), arms, options, mode)
    _require_distinct_tests(draws, config.test_size)
    check_paths(config.runs_dir, config.cache)
    return config, draws


def _require_distinct_arms(draw: Draw, arms: list[str], options: dict[str, dict[str, Any]], mode: str) -> None:
    """Two arms that would run the same search (a variant whose options the mode holds anyway) are one arm twice,
    and would share one run directory on a resume: refused before any spend."""
    runs: dict[tuple[str, str, int], str] = {}
    for arm in arms:
        same = runs.setdefault(_arm_key(arm_config(draw.config, arm, options, draw.coverage)), arm)
        if same != arm:
            raise UserError(f"arms {same} and {arm} would run the same search in {mode} mode (the mode holds what "
                            f"their options change); drop one, or compare them with --mode native")


def _require_distinct_tests(draws: dict[int, Draw], test_size: int) -> None:
    """Each seed must test on its own draw (the fairness check says so after the run): a test pool no
    larger than --test-size hands every seed the same examples, so that is refused before any spend."""
    check = distinct_draws_check({seed: draw.task for seed, draw in draws.items()})
    if not check.ok:
        pool = len(next(iter(draws.values())).task.splits["test"])
        raise UserError(f"{check.detail} of {pool} examples: the task's test pool is too small for --test-size "
                        f"{test_size} to differ by seed; lower --test-size (below {pool}) so that each seed draws "
                        f"its own test split")


def run_compare(config: RunConfig, arms: list[str], seeds: list[int], options: dict[str, dict[str, Any]],
                backend: Backend | None = None, console: Console | None = None,
                mode: str = "same-space", match: Literal["calls", "tokens"] = "calls",
                resume_dir: Path | None = None, progress: bool = False, allow_underspend: bool = False,
                native_demos: int = 0, jobs: int = 1, backend_factory: BackendFactory | None = None,
                data: Task | None = None, executor: str = "process", check_generation: int = 0) -> CompareResult:
    """Every arm × seed, each seed on its own data draw (`split_seeds`) shared by all its arms.
    `mode` says what each arm may search of the one space (`prompttune.comparing.coverage`). `match`:
    the budget every arm gets and the checks compare — search calls (`config.budget`), or search
    tokens (`config.budget_tokens`; the call budget then stays what the optimizers plan with, and a
    ceiling). With `resume_dir` (an interrupted comparison), finished arms are read back and the
    others resumed or restarted. `progress` (the CLI) shows each arm's progress and summary, and lets
    a first SIGINT/SIGTERM finish the arm's trial in flight and write its interim report (every
    worker's arm with `jobs` > 1: `prompttune.engine.workers`); a library call prints nothing and
    leaves signals alone. An arm that spent under 90% of the matched cap fails
    the matched-budget check unless `allow_underspend`. `native_demos` K (native mode only) adds few-shot
    k ∈ {0, 2, …, K} to a space that declares no demos, so grid searchers can try demos too. `jobs` > 1
    runs that many arm-seeds at once in worker processes, each with its own model from
    `backend_factory` (default: built from the config; with `--backend openai` they share the servers),
    with the same results as one at a time. `executor`: where those workers run, `process` (on this machine;
    with `jobs` 1 the arms run in this process) or `ray[:ADDRESS]` (Ray tasks, even with `jobs` 1: a local Ray,
    or the cluster at ADDRESS or RAY_ADDRESS, which must see the run directory at the same path; see
    `prompttune.engine.ray_executor`). `data`: an in-memory task in place of the one `config`
    names; each seed draws its splits (of the same sizes) from all its examples. `check_generation` N > 0 serves each
    arm-seed's shipped prompt and the baseline by generation on N test examples after its verdict (descriptive)."""
    started = time.time()
    console = console or Console(stderr=True, quiet=not progress)
    in_workers = jobs > 1 or executor != "process"
    if in_workers and backend is not None and backend_factory is None:
        raise UserError("--jobs > 1 or --executor ray gives every worker its own model: pass backend_factory, not a backend")
    given = config
    config, draws = check_compare(config, arms, seeds, options, mode, match, native_demos, jobs, data, executor,
                                  check_generation)
    first = draws[seeds[0]]
    with open_run(config, backend, build=backend_factory or build_backend, quietly=not progress) as model:
        capabilities = model.backend.capabilities()
        capabilities.require(config.contract, run_contract(given, first.task)[1])  # before the run directory
        config = config.model_copy(update={"capabilities": capabilities.record()})
        watch = ModelWatch(model.backend, first.task)
        run_dir = model.directory(config.runs_dir, f"{first.task.name}-compare", json.dumps(
            {"run": config.model_dump(), "mode": mode, "optimizers": arms, "seeds": seeds, "options": options,
             "match": match, "allow_underspend": allow_underspend, "jobs": jobs}, indent=2), resume_dir)
        reuse = _arms_to_reuse(run_dir / "arms") if resume_dir else {}
        caps = caps_of(match, config.budget, config.budget_tokens)
        shared = ResultCache(config.cache or run_dir / "cache.sqlite")
        benches = {seed: Bench(d.config, d.task, d.space, watch, shared, options, d.coverage, run_dir / "arms", console,
                               progress, in_memory=data is not None)
                   for seed, d in draws.items()}
        try:
            done: dict[tuple[str, int], ArmRun] = {}
            todo = []
            for arm in arms:
                for seed in seeds:
                    earlier = reuse.get(_arm_key(benches[seed].arm_config(arm, seed)))
                    if earlier and (earlier / ARM_FILE).is_file():
                        done[(arm, seed)] = load_arm_run(earlier)
                        console.print(f"{arm} seed {seed}: finished before the interruption, read back from {earlier}")
                    else:
                        todo.append((arm, seed, earlier))

            def finished(run: ArmRun) -> None:
                done[(run.arm, run.seed)] = run
                c, raw = run.confirmation, run.raw_confirmation
                console.print(f"[bold]{run.arm} seed {run.seed}[/bold]: test {c.best_accuracy:.3f} guarded, "
                              f"{raw.best_accuracy:.3f} raw (baseline {c.baseline_accuracy:.3f}), "
                              f"{caps[0].charged(run)}/{caps[0].limit} {caps[0].unit}")
            if not in_workers:
                for arm, seed, earlier in todo:
                    watch.watch(benches[seed].task)
                    run = run_arm(benches[seed], arm, seed, earlier)
                    save_arm_run(run)
                    finished(run)
            else:
                (run_dir / "arms").mkdir(exist_ok=True)  # a worker that does not see it runs on another file system
                with make_executor(executor, jobs) as workers:
                    open_cache = workers.cache_opener(Path(config.cache or run_dir / "cache.sqlite"))
                    work = [ArmJob(benches[seed].config, arms, options, mode, arm, seed, run_dir / "arms", open_cache,
                                   earlier, backend_factory or build_backend, data)
                            for arm, seed, earlier in todo]
                    workers.run(run_job, work, lambda arm_dir: finished(load_arm_run(arm_dir)), progress,
                                f"compare --resume {run_dir}")
            runs = [done[(arm, seed)] for arm in arms for seed in seeds]
            verdict_calls = _rescore_winners(benches, runs)
            equal_spend = _equal_spend(benches, runs, caps[0])
        except KeyboardInterrupt:
            raise RunInterrupted(f"comparison stopped; the arms finished so far are kept: finish it with "
                                 f"`compare --resume {run_dir}`") from None
        except BackendUnavailable as exc:
            raise resumable_outage(exc, f"compare --resume {run_dir}") from None
        finally:
            shared.close()
        summaries = summarize(runs, arms, seeds)
        tasks = {seed: bench.task for seed, bench in benches.items()}
        checks = [*fairness_checks(tasks, runs, caps, verdict_calls, watch, allow_underspend),
                  coverage_check(runs, {seed: bench.coverage for seed, bench in benches.items()})]
        if config.pool == "reporting" and data is None:
            checks.append(reporting_pool_check(tasks, tuning_pool(config.task, config.data_dir)))
        comparison = CompareResult(run_dir, config, mode, arms, seeds, {s: d.config.split_seed for s, d in draws.items()},
                                   first.coverage, runs, summaries, pairwise(summaries), seed_pairs(summaries), caps, checks,
                                   time.time() - started, equal_spend,
                                   run_versions(config, watch.inner, [optimizer_of(arm, options) for arm in arms],
                                                passed=backend is not None or backend_factory is not None), options)
        plot_anytime(runs, arms, config.budget, run_dir / "anytime.png")
        write_report(comparison)
        write_html_report(run_dir)
        if progress:
            print_summary(comparison, console)
    return comparison


def resume_compare(run_dir: Path, backend: Backend | None = None, console: Console | None = None,
                   progress: bool = False, jobs: int = 1, backend_factory: BackendFactory | None = None,
                   data: Task | None = None, add: Sequence[str] = (), executor: str = "process",
                   add_options: dict[str, dict[str, Any]] | None = None) -> CompareResult:
    """Finish an interrupted comparison with its own settings (see `run_compare`; in-memory `data` is
    passed again). `add` names optimizers to run beside the saved ones, on the same seeds, data draws
    and cap (`add_options` their options), finished comparison or not: the arms that ran are read back,
    and the report covers them all. Refused when an added arm would change what the others search."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"{run_dir} is not a compare run directory")
    if (run_dir / "summary.json").is_file() and not add:
        raise UserError(f"{run_dir} finished already (summary.json exists); nothing to resume")
    saved = read_json(run_dir / "config.json")
    if not isinstance(saved, dict) or not {"run", "optimizers", "seeds", "options", "mode", "match"} <= saved.keys():
        raise UserError(f"{run_dir} is not a compare run directory (its config.json is an optimize run's?)")
    RUN_DIR.set(run_dir)
    config = RunConfig.model_validate(saved["run"])
    arms, options = list(saved["optimizers"]), dict(saved["options"])
    if add:
        if again := [arm for arm in add if arm in arms]:
            raise UserError(f"--add-optimizers: {', '.join(again)} already in the comparison at {run_dir}")
        if stray := sorted(set(add_options or {}) - set(add)):
            raise UserError(f"--option names optimizers not added: {', '.join(stray)}")
        options.update(add_options or {})
        _same_coverage(config, arms, [*arms, *add], options, saved["mode"], data)
        arms += list(add)
    return run_compare(config, arms, saved["seeds"], options, backend, console,
                       mode=saved["mode"], match=saved["match"], resume_dir=run_dir,
                       allow_underspend=saved.get("allow_underspend", False), progress=progress,
                       native_demos=config.native_demos, jobs=jobs, backend_factory=backend_factory, data=data,
                       executor=executor, check_generation=config.check_generation)


def _same_coverage(config: RunConfig, before: list[str], after: list[str], options: dict[str, dict[str, Any]],
                   mode: str, data: Task | None) -> None:
    """An added arm may not change what the others search (same-space mode shares the dimensions
    every arm can search): their runs would no longer be comparable with its."""
    space = draw_seed(config, after, options, mode, config.split_seed, data, check=False).space
    old, new = plan_coverage(before, space, mode, options), plan_coverage(after, space, mode, options)
    if changed := [arm for arm in before if old[arm].searched != new[arm].searched]:
        raise UserError(f"adding {', '.join(a for a in after if a not in before)} would change what "
                        f"{', '.join(changed)} search(es) in {mode} mode; start a new comparison instead")
