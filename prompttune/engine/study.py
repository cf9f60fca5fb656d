"""The run engine: one search and its held-out verdict, written to a run directory.

Every command and the Python API run searches here: `optimize`, each `compare` arm (prompttune's
and DSPy's strategies alike), resume, the test suite's oracle runs and the error-rate benchmark.
Data flows one way: task → space → strategy ⇄ evaluator (backend + cache view + ledger) → verdict
on the test split the strategy never saw → run record.

A library call prints nothing and leaves signals alone; `progress=True` shows a progress bar and
the summary, and `handle_signals=True` (the CLI) turns a first SIGINT/SIGTERM into "stop after the
trial in flight, test the best so far, write the report marked interrupted".
"""

from __future__ import annotations

import time
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Callable, Sequence

from rich.console import Console

from prompttune import __version__
from prompttune.backends.backend import Backend
from prompttune.backends.factory import build_backend
from prompttune.core.config import RunConfig
from prompttune.core.errors import BackendUnavailable, UserError
from prompttune.core.interrupt import StopRequest, interruption, resumable_outage, stop_on_signals
from prompttune.core.run_files import CACHE, FACTS, run_status, set_aside_trials
from prompttune.core.types import Example
from prompttune.engine.record_step import record_run
from prompttune.engine.run_dir import open_run, run_label
from prompttune.engine.run_steps import CacheView, Judged, OpenedRun, Searched, judge, search
from prompttune.engine.setup import (
    RUN_DIR,
    build_proposer_backend,
    check_paths,
    check_proposer_backend,
    load_space,
    require_dev_budget,
    run_contract,
    search_context,
)
from prompttune.engine.verdicts import next_look_alpha, recorded_looks
from prompttune.optimizers.registry import Setting, Strategy, lookup, strategies
from prompttune.optimizers.strategy_contract import SearchContext
from prompttune.reports import PASSED_BACKEND
from prompttune.reports.optimize_report import confirmable_gain
from prompttune.results.run import Resumption, RunResult
from prompttune.results.run_record import read_run_config
from prompttune.scoring import contract
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.evaluator import prompt_tokens
from prompttune.scoring.ledger import BudgetLedger
from prompttune.scoring.metered_cache import MeteredCache
from prompttune.scoring.per_class import per_class
from prompttune.search_spaces import Candidate, SearchSpace
from prompttune.search_spaces.prompt import select_demos
from prompttune.statistics import Objective, get_objective
from prompttune.tasks import load_run_task
from prompttune.tasks.task import Task


def tokens_of(backend: Backend, candidate: Candidate, train: dict[str, Example]) -> int:
    """The candidate's prompt tokens per request (`prompt_tokens`: around an empty input, demos included)."""
    return prompt_tokens(backend, candidate.spec, select_demos(candidate.spec, train))


def check_prompt_ceiling(config: RunConfig, backend: Backend, baseline: Candidate, train: dict[str, Example]) -> None:
    """A baseline over --max-prompt-tokens could never be searched around: one line before the run starts."""
    if config.max_prompt_tokens is not None and (tokens := tokens_of(backend, baseline, train)) > config.max_prompt_tokens:
        raise UserError(f"--max-prompt-tokens {config.max_prompt_tokens}: the baseline prompt alone is {tokens} "
                        f"tokens around an empty input ({backend.model_id}'s tokenizer); raise the ceiling or "
                        "shorten the prompt")


def checked_search(config: RunConfig, task: Task, space: SearchSpace, objective: Objective | None = None
                   ) -> tuple[Task, SearchContext, Callable[[Setting], Strategy]]:
    """The checks a search passes before any model loads (dev split and budget, the strategy and its
    options, the proposer backend), and what they give: the task without its test split, the search
    context and how to build the strategy. `optimize`, each `compare` arm at every seed's draw and both dry
    runs call it."""
    require_dev_budget(config, task)
    visible = task.without_test()
    context = search_context(config, visible, space, objective)
    build_strategy = lookup(config.optimizer).build(config, context)
    check_proposer_backend(config)
    return visible, context, build_strategy


def run_versions(config: RunConfig, backend: Backend, optimizers: Sequence[str] = (),
                 passed: bool = False) -> dict[str, str]:
    """What produced the run, so whoever ships its prompt can reproduce it: prompttune, the model and how it
    was served, and DSPy's release when a DSPy optimizer searched (the run's, or one of `optimizers`: a
    comparison's arms). A Backend object `passed` to the API is named by its own model and class: the
    config's model, dtype and backend are then defaults nothing ran."""
    served = ({"model": backend.model_id, PASSED_BACKEND: type(backend).__name__} if passed else
              {"model": config.model, "dtype": config.dtype, "backend": config.backend})
    versions = {"prompttune": __version__, **served, "backend description": backend.describe()}
    for name in (config.optimizer, *optimizers):
        versions.update(strategies()[name].versions() if name in strategies() else {})
    return versions


def run_study(config: RunConfig, *, task: Task | None = None, space: SearchSpace | None = None,
              objective: Objective | None = None, backend: Backend | None = None,
              console: Console | None = None, progress: bool = False, handle_signals: bool = False,
              cache_view: CacheView | None = None, resume_dir: Path | None = None,
              record: bool = True, stop: StopRequest | None = None) -> RunResult:
    """One search and its held-out verdict, in four steps: open the run, search, judge on the test split, record.

    `task` and `space` default to what `config` names (files or built-ins); pass objects to run on
    in-memory data or a space built in Python. `objective` is a callable `(gold, pred, n_classes) ->
    float` that replaces the named `config.objective`. `record=False` writes no run directory (an
    in-memory trial log and cache: the oracle benchmarks run thousands of searches).

    `cache_view(ledger)` lets compare give each ledger its own metered view of its shared cache.
    Otherwise a private run-directory cache is used as is, while a `--cache` shared with other
    runs, and the cache an interrupted run filled (`resume_dir`), are seen through `MeteredCache`:
    a hit on an entry this run has not produced is charged like the call it replaces.

    `stop` (without `handle_signals`): a request made elsewhere that the search polls; a `compare
    --jobs` worker's follows its main process's signals (`prompttune.engine.workers`).
    """
    started = time.time()
    console = console or Console(stderr=True, quiet=not progress)
    task = task or load_run_task(config)
    serve, declared = run_contract(config, task)
    config = config.model_copy(update={"serve": serve})  # resolved: config.json and every reader see the contract
    space = space or load_space(config, task)
    if objective is None:
        get_objective(config.objective)
    if record:
        check_paths(config.runs_dir, config.cache)
    visible, context, build_strategy = checked_search(config, task, space, objective)
    # Backends, signal handlers and cache are released however the run ends: finished, stopped by a
    # signal or an outage, or failed.
    with open_run(config, backend, build=build_backend, quietly=not progress) as model, ExitStack() as resources:
        run = OpenedRun(config, task, visible, context, model, console, stop or StopRequest(""), started,
                        cache_view=cache_view)
        open_study(run, resources, declared, resume_dir, record, handle_signals)
        searched = search(run, build_strategy, progress)
        judged = judge(run, searched)
        return record_run(run, run_result(run, searched, judged), judged.alpha, progress)


def open_study(run: OpenedRun, resources: ExitStack, declared: bool, resume_dir: Path | None, record: bool,
               handle_signals: bool) -> None:
    """Open the run: what the target honours (a contract it cannot honour is one line here), a proposer model
    where one is named, the run's first lines, the checks that need the model, the run directory (new, or
    `resume_dir` taken back), signal handling and the cache."""
    capabilities = run.backend.capabilities()
    capabilities.require(run.config.contract, declared)  # one line before anything is printed or charged
    run.config = config = run.config.model_copy(update={"capabilities": capabilities.record()})
    task, console = run.task, run.console
    run.proposer_backend = (run.model.hold(build_proposer_backend, config) if config.proposer_model
                            else run.backend)
    run.counts_at_start = run.backend.server_counts()
    console.print(contract.contract_line(config.contract, declared))  # the run's first line, once the model answers
    console.print(run.backend.describe())
    console.print(capabilities.describe())
    if task.split_note:
        console.print(f"task {task.name}: splits train {len(task.splits['train'])} / dev {len(task.splits['dev'])} "
                      f"/ test {len(task.splits['test'])}, {task.split_note}", markup=False)
    for warning in task.warnings:
        console.print(f"warning: {warning}", markup=False)
    check_prompt_ceiling(config, run.backend, run.context.space.default_candidate(), run.train)
    check_contract(run.context, run.backend, console)
    if record:
        run.run_dir = run.model.directory(config.runs_dir, run_label(config, task.name),
                                          config.model_dump_json(indent=2), resume_dir)
        run.looks = recorded_looks(run.run_dir)
    if not console.quiet:  # worked out only where shown: the oracle benchmarks run thousands of quiet searches
        statement, warning = confirmable_gain(len(task.splits["test"]),
                                              next_look_alpha(run.looks, config.alpha, False), config.confirm_top)
        console.print(statement)
        if warning:
            console.print(f"warning: {warning}")
    if handle_signals:
        run.stop = resources.enter_context(stop_on_signals(f"optimize --resume {run.run_dir}"))
    if resume_dir:
        run.trials_before, run.earlier = set_aside_trials(resume_dir), interruption(resume_dir)
    if run.cache_view is None:
        cache = resources.enter_context(closing(ResultCache(
            config.cache or (run.run_dir / CACHE if run.run_dir else ":memory:"))))
        run.cache_view = _private_view(cache, metered=bool(config.cache or resume_dir))


def _private_view(cache: ResultCache, metered: bool) -> CacheView:
    """The run's own cache for every ledger: through `MeteredCache` where it holds calls this run did not make
    (a shared --cache, an interrupted run's)."""
    def view(ledger: BudgetLedger) -> ResultCache | MeteredCache:
        return MeteredCache(cache) if metered else cache
    return view


def run_result(run: OpenedRun, searched: Searched, judged: Judged) -> RunResult:
    """The run's result, in memory: what every report, export and the API read."""
    config, task, verdict, baseline, train = run.config, run.task, judged.verdict, searched.strategy.baseline, run.train
    backend_use = (searched.evaluator.meter.use + judged.evaluator.meter.use).summary(
        time.perf_counter() - searched.started)
    searched.strategy.after_verdict(verdict, run.run_dir)  # its last word, after the backend's use is read
    resumed = (Resumption(run.trials_before, searched.evaluator.cache.foreign_calls, run.earlier.get("reason"))
               if run.trials_before is not None else None)
    return RunResult(run.run_dir, config, baseline, run.context.space, searched.outcome, verdict, searched.ledger,
                     judged.ledger, time.time() - run.started, train, tuple(task.input_fields), run.backend.to_text,
                     searched.strategy, searched.storage, resumed, run.servers(),
                     generation_check=judged.generation,
                     per_class=per_class(verdict, task.labels, config.class_loss_margin),
                     versions=run_versions(config, run.backend, passed=run.model.passed),
                     backend_use=backend_use, labels=tuple(task.labels), split_note=task.split_note,
                     split_sizes={name: len(task.splits[name]) for name in ("train", "dev", "test")},
                     data_warnings=tuple(task.warnings), backend=run.backend if run.model.passed else None,
                     advice=tuple(searched.advice),
                     prompt_tokens={role: tokens_of(run.backend, candidate, train) for role, candidate in
                                    (("baseline", baseline), ("shipped", verdict.shipped),
                                     ("dev winner", verdict.dev_winner))})


def check_contract(context: SearchContext, backend: Backend, console: Console) -> None:
    """Before the search: a baseline whose label offsets the contract cannot apply is one line; under `choice`,
    whether the target's `logit_bias` can carry label offsets for the baseline's labels (said once when it
    cannot)."""
    baseline = context.space.default_candidate()
    if not contract.admits(context.serve, backend, baseline.spec):
        raise UserError(f"serve {context.serve}: the baseline prompt carries label offsets (calibrate or label_bias) "
                        "that production under this contract cannot apply; remove them from the space's base prompt")
    if context.serve == "choice":
        context.label_offsets = contract.offsets_fit("choice", backend, baseline.spec)
        if not context.label_offsets:
            why = ("two labels share a first token of the model's tokenizer (or the tokenizer is unknown)"
                   if backend.capabilities().logit_bias else
                   "the target is not known to honour logit_bias under its constraint")
            console.print(f"serve choice: {why}, so logit_bias cannot shift the labels apart: no calibrated "
                          "candidate is tried")


def resume_study(run_dir: Path, *, task: Task | None = None, space: SearchSpace | None = None,
                 objective: Objective | None = None, backend: Backend | None = None,
                 console: Console | None = None, progress: bool = False, handle_signals: bool = False,
                 cache_view: CacheView | None = None) -> RunResult:
    """Finish an interrupted run: the same search replays its asks through the cache the
    interrupted run filled (each replayed call charged once, so the cap holds), then goes on live.
    A run made on in-memory data or a Python-built space needs them passed again."""
    run_dir = Path(run_dir)
    config = read_run_config(run_dir)
    if run_status(run_dir) == "finished":  # found before the model loads
        raise UserError(f"{run_dir} finished already ({FACTS} exists); nothing to resume")
    RUN_DIR.set(run_dir)
    return run_study(config, task=task, space=space, objective=objective, backend=backend, console=console,
                     progress=progress, handle_signals=handle_signals, cache_view=cache_view, resume_dir=run_dir)


def with_resume_hint(run: Callable[[], RunResult]) -> RunResult:
    """Run; an outage's one line also says how to finish the run it stopped (`optimize --resume`). Not in
    `run_study` itself: a compare arm's outage names `compare --resume` instead."""
    try:
        return run()
    except BackendUnavailable as exc:
        if exc.run_dir is None:
            raise
        raise resumable_outage(exc, f"optimize --resume {exc.run_dir}") from None
