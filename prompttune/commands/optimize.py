"""`optimize`: task → space → optimizer ⇄ evaluator → held-out verdict → run directory."""

from __future__ import annotations

import argparse
import json
import time
from contextlib import ExitStack, closing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from prompttune.backends.base import Backend
from prompttune.backends.factory import backend_options, build_backend
from prompttune.commands.common import (
    RUN_DIR,
    add_run_arguments,
    build_proposer_backend,
    check_paths,
    check_proposer_backend,
    checked_search,
    load_run_task,
    load_space,
    make_run_dir,
    parse_option,
    read_run_config,
    require_dev_budget,
    search_context,
)
from prompttune.commands.html.facts import run_status, write_run_facts
from prompttune.commands.optimize_report import describe_change, print_summary, write_report
from prompttune.commands.report import write_html_report
from prompttune.core.config import RunConfig
from prompttune.core.errors import BackendUnavailable, UserError
from prompttune.core.interrupt import (
    RunInterrupted,
    clear_interruption,
    interruption,
    mark_interrupted,
    resumable_outage,
    stop_on_signals,
)
from prompttune.core.storage import JsonlStorage, set_aside_trials, write_atomic
from prompttune.evaluation.cache import ResultCache
from prompttune.evaluation.confirmation import Confirmation, Verdict, held_out_verdict
from prompttune.evaluation.evaluator import Evaluator
from prompttune.evaluation.ledger import BudgetLedger
from prompttune.evaluation.metered_cache import MeteredCache
from prompttune.objectives import get_objective
from prompttune.optimizers import run_search
from prompttune.optimizers.base import SearchOutcome
from prompttune.optimizers.proposer import Proposer
from prompttune.search_spaces import Candidate, SearchSpace
from prompttune.search_spaces.prompt import render, select_demos


@dataclass(frozen=True)
class Resumption:
    """Where a resumed run picked up: trials logged before the interruption, calls replayed from the
    cache, and what stopped it (an outage or a signal; None after a kill -9, which records nothing)."""

    trials_before: int
    calls_replayed: int
    reason: str | None = None


def _run_server_counts(backend: Backend, at_start: dict[str, dict[str, int]],
                       earlier: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Per-server counts of this run: this session's (the backend may have served other runs before)
    plus those of the sessions an outage or a signal stopped."""
    return {url: {name: value - at_start.get(url, {}).get(name, 0) + earlier.get(url, {}).get(name, 0)
                  for name, value in counts.items()}
            for url, counts in backend.server_counts().items()}


def resume_optimization(run_dir: Path, backend: Backend | None = None, console: Console | None = None) -> RunResult:
    """Finish an interrupted run: the same search replays its asks through the cache the
    interrupted run filled (each replayed call charged once, so the cap holds), then goes on live."""
    run_dir = Path(run_dir)
    config = read_run_config(run_dir)
    if run_status(run_dir) == "finished":  # found before the model loads
        raise UserError(f"{run_dir} finished already (verdict.json exists); nothing to resume")
    RUN_DIR.set(run_dir)
    return run_optimization(config, backend, console, resume_dir=run_dir)


@dataclass
class RunResult:
    run_dir: Path
    baseline: Candidate
    space: SearchSpace
    outcome: SearchOutcome
    verdict: Verdict
    search_ledger: BudgetLedger
    confirm_ledger: BudgetLedger
    wall_seconds: float
    resumed: Resumption | None = None
    servers: dict[str, dict[str, int]] = field(default_factory=dict)  # per-server counts (openai backend)

    @property
    def shipped(self) -> Candidate:
        """What the run recommends: the confirmed prompt, or the baseline."""
        return self.verdict.shipped

    @property
    def confirmation(self) -> Confirmation:
        """Test figures of what ships against the baseline."""
        return self.verdict.shipped_confirmation


def write_prompt(run_dir: Path, name: str, candidate: Candidate, space: SearchSpace, baseline: Candidate,
                 text: str, **facts: object) -> None:
    """`name`.json (spec, dimensions, diff) and `name`.txt (the prompt as the model sees it)."""
    write_atomic(run_dir / f"{name}.json", json.dumps({
        "candidate_id": candidate.id,
        **facts,
        "dimensions": candidate.values(space),
        "spec": asdict(candidate.spec),
        "diff_from_baseline": describe_change(space, baseline, candidate),
    }, indent=2, ensure_ascii=False))
    write_atomic(run_dir / f"{name}.txt", text + "\n")


def run_optimization(config: RunConfig, backend: Backend | None = None, console: Console | None = None,
                     cache_view: Callable[[BudgetLedger], ResultCache | MeteredCache] | None = None,
                     resume_dir: Path | None = None) -> RunResult:
    """One search and its held-out verdict.

    `cache_view(ledger)` lets compare give each ledger its own metered view of its shared cache.
    Otherwise a private run directory cache is used as is, while a `--cache` shared with other
    runs, and the cache an interrupted run filled (`resume_dir`), are seen through `MeteredCache`:
    a hit on an entry this run has not produced is charged like the call it replaces.

    A first SIGINT or SIGTERM during the search stops it after the trial in flight; the run then
    tests its best candidate so far on the held-out split, writes that report marked interrupted,
    and raises `RunInterrupted`, whose message says how to resume.
    """
    started = time.time()
    console = console or Console(stderr=True)
    task = load_run_task(config)
    space = load_space(config, task)
    get_objective(config.objective)
    check_paths(config.runs_dir, config.cache)
    require_dev_budget(config, task)
    optimizer_cls = checked_search(config, task, space)
    check_proposer_backend(config)
    # Backends, signal handlers and cache are released however the run ends: finished, stopped by a
    # signal or an outage, or failed.
    with ExitStack() as resources:
        backend = backend or resources.enter_context(closing(build_backend(config)))
        proposer_backend = (resources.enter_context(closing(build_proposer_backend(config)))
                            if config.proposer_model else backend)
        counts_at_start = backend.server_counts()
        console.print(backend.describe())
        run_dir = resume_dir or make_run_dir(config, task.name)
        stop = resources.enter_context(stop_on_signals(f"optimize --resume {run_dir}"))
        write_atomic(run_dir / "config.json", config.model_dump_json(indent=2))
        trials_before = set_aside_trials(run_dir) if resume_dir else None
        earlier = interruption(run_dir) if resume_dir else {}

        def servers() -> dict[str, dict[str, int]]:
            return _run_server_counts(backend, counts_at_start, earlier.get("servers", {}))

        if cache_view is None:
            cache = resources.enter_context(closing(ResultCache(config.cache or run_dir / "cache.sqlite")))
            metered = bool(config.cache or resume_dir)

            def cache_view(ledger: BudgetLedger) -> ResultCache | MeteredCache:
                return MeteredCache(cache) if metered else cache

        visible = task.without_test()
        train = {ex.id: ex for ex in visible.splits["train"]}
        context = search_context(config, visible, space)
        space = context.space
        seen_examples = {ex.id: ex for split in visible.splits.values() for ex in split}
        search_ledger = BudgetLedger(cap_calls=config.budget, cap_tokens=config.budget_tokens)
        evaluator = Evaluator(backend, seen_examples, train, cache_view(search_ledger), search_ledger,
                              scoring=config.scoring)
        proposer = Proposer(proposer_backend, evaluator.meter)
        optimizer = optimizer_cls(context, proposer)
        storage = JsonlStorage(run_dir / "trials.jsonl")
        baseline = optimizer.baseline

        test = task.splits["test"]
        try:
            with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TextColumn("calls · best dev {task.fields[best]}"), TimeRemainingColumn(),
                          console=console, transient=False) as progress:
                bar = progress.add_task(f"{config.optimizer} on {task.name}", total=config.budget, best="–")

                search_started = time.time()
                estimated: list[bool] = []

                def on_trial(trial: dict) -> None:
                    # Estimated once, at the first trial the model answered: cache hits take no model time.
                    if not estimated and search_ledger.computed_calls:
                        estimated.append(True)
                        rate = search_ledger.computed_calls / max(time.time() - search_started, 1e-9)
                        left = config.budget - trial["budget_spent"]
                        console.print(f"measured {rate:.1f} model calls/s: the search's remaining {left} calls "
                                      f"should take at most about {left / rate / 60:.0f} min (less where the "
                                      f"cache answers), the held-out verdict about "
                                      f"{2 * len(test) / rate / 60:.0f} min more")
                    best = trial.get("best_so_far")
                    progress.update(bar, completed=trial["budget_spent"],
                                    best="–" if best is None else f"{best:.3f}")

                with stop.during_search():
                    outcome = run_search(optimizer, evaluator, storage, on_trial, should_stop=stop)

            confirm_ledger = BudgetLedger()
            test_evaluator = Evaluator(backend, {ex.id: ex for ex in test}, train, cache_view(confirm_ledger),
                                       confirm_ledger,
                                       scoring=config.scoring)
            so_far = " (of the best candidate so far: the search was interrupted)" if outcome.interrupted else ""
            console.print(f"held-out verdict on {len(test)} test examples{so_far}…")
            verdict = held_out_verdict(baseline, outcome.ranking, test_evaluator, [e.id for e in test], config.alpha,
                                       config.confirm_top, config.seed)
        except BackendUnavailable as exc:  # stop resumably: the cache holds every answered call
            mark_interrupted(run_dir, str(exc), servers())
            exc.run_dir = run_dir
            raise
        except RunInterrupted as exc:
            mark_interrupted(run_dir, exc.reason, servers())
            raise

        def as_seen(candidate: Candidate) -> str:
            return backend.to_text(render(candidate.spec, test[0], select_demos(candidate.spec, train)))

        stopped = f"stopped by {stop.signal} after the trial in flight" if outcome.interrupted else None
        if stopped:  # before verdict.json, which alone would say finished
            mark_interrupted(run_dir, stopped, servers())
        shipped = verdict.shipped
        write_prompt(run_dir, "best_prompt", shipped, space, baseline, as_seen(shipped),
                     verdict=verdict.summary(), is_baseline=shipped.id == baseline.id)
        write_prompt(run_dir, "dev_winner", verdict.dev_winner, space, baseline, as_seen(verdict.dev_winner),
                     label="dev winner: selected on dev; ships only if the held-out verdict confirms it")
        write_prompt(run_dir, "baseline_prompt", baseline, space, baseline, as_seen(baseline),
                     label="baseline: the task's default prompt, the one every candidate must beat")
        resumed = (Resumption(trials_before, evaluator.cache.foreign_calls, earlier.get("reason"))
                   if trials_before is not None else None)
        result = RunResult(run_dir, baseline, space, outcome, verdict, search_ledger, confirm_ledger,
                           time.time() - started, resumed, servers())
        write_report(result, config, task, space, baseline)
        write_run_facts(result, task)
        if not stopped:
            clear_interruption(run_dir)
        write_html_report(run_dir)
        print_summary(result, console)
        if stopped:
            raise RunInterrupted(f"{stopped}; the report of the best candidate so far, with its held-out verdict, "
                                 f"is {run_dir / 'report.md'}; finish the run with `optimize --resume {run_dir}`",
                                 stopped)
        return result


def _with_resume_hint(run: Callable[[], RunResult]) -> RunResult:
    """Run; an outage's one line also says how to finish the run it stopped."""
    try:
        return run()
    except BackendUnavailable as exc:
        if exc.run_dir is None:
            raise
        raise resumable_outage(exc, f"optimize --resume {exc.run_dir}") from None


def _optimize(args: argparse.Namespace) -> int:
    from prompttune.optimizers import get_optimizer
    from prompttune.optimizers.base import describe_options

    if args.resume:
        result = _with_resume_hint(lambda: resume_optimization(Path(args.resume)))
        print(f"resumed {args.resume}: {result.verdict.summary()}; budget used {result.search_ledger.calls}/"
              f"{result.search_ledger.cap_calls}; report: {result.run_dir / 'report.md'}")
        return 0
    if args.help_options:
        print(f"options of {args.optimizer} (--option KEY=VALUE):")
        print("\n".join(f"  {line}" for line in describe_options(get_optimizer(args.optimizer).Options)))
        return 0
    config = RunConfig(
        task=args.task, data_dir=args.data_dir, space=args.space, optimizer=args.optimizer,
        optimizer_options=dict(parse_option(o) for o in args.option), budget=args.budget,
        budget_tokens=args.budget_tokens, seed=args.seed, split_seed=args.split_seed,
        scoring=args.scoring, objective=args.objective, alpha=args.alpha, confirm_top=args.confirm_top,
        dev_alpha=args.dev_alpha, proposer_model=args.proposer_model,
        train_size=args.train_size, dev_size=args.dev_size, test_size=args.test_size,
        runs_dir=args.runs_dir, cache=args.cache, **backend_options(args))
    result = _with_resume_hint(lambda: run_optimization(config))
    leader = result.verdict.leader_confirmation
    print(f"baseline test accuracy {leader.baseline_accuracy:.3f}, dev winner {leader.best_accuracy:.3f}, "
          f"one-sided McNemar p {leader.comparison.p_one_sided:.4g}; {result.verdict.summary()}; "
          f"budget used {result.search_ledger.calls}/{config.budget}; report: {result.run_dir / 'report.md'}")
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:
    opt = commands.add_parser("optimize", help="search a prompt space under a budget, confirm on test")
    add_run_arguments(opt)
    opt.add_argument("--optimizer", default=RunConfig.model_fields["optimizer"].default,
                     help="search strategy (default: %(default)s)")
    opt.add_argument("--budget", type=int, default=2000, help="hard cap on search-time model calls")
    opt.add_argument("--budget-tokens", type=int, help="optional hard cap on search-time tokens")
    opt.add_argument("--objective", default="accuracy",
                     help="accuracy, macro_f1, valid_rate or service_accuracy")
    opt.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                     help="optimizer option (repeatable); --help-options lists them")
    opt.add_argument("--help-options", action="store_true", help="list the options of --optimizer and exit")
    opt.add_argument("--resume", metavar="RUN_DIR", help="finish an interrupted run from its directory (its own "
                     "config; calls it paid for are replayed from its cache and charged once)")
    opt.add_argument("--alpha", type=float, default=0.05,
                     help="level of the one held-out test that decides what ships (default 0.05)")
    opt.add_argument("--confirm-top", type=int, default=1, metavar="K",
                     help="test the top K dev candidates on test with Holm over K (default 1)")
    opt.add_argument("--dev-alpha", type=float, default=0.10,
                     help="family-wise false-accept level of each sweep of dev challenges (cople, p2g)")
    opt.add_argument("--proposer-model", help="model that writes instructions/critiques (default: the task model)")
    opt.set_defaults(handler=_optimize)
