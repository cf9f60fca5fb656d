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

import json
import math
import time
from contextlib import ExitStack, closing, nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from prompttune import __version__
from prompttune.backends.base import Backend
from prompttune.backends.factory import build_backend, loading
from prompttune.core.config import RunConfig
from prompttune.core.errors import BackendUnavailable, UserError
from prompttune.core.interrupt import (
    RunInterrupted,
    StopRequest,
    clear_interruption,
    interruption,
    mark_interrupted,
    resumable_outage,
    stop_on_signals,
)
from prompttune.core.provenance import record_code
from prompttune.core.storage import InMemoryStorage, JsonlStorage, TrialStorage, set_aside_trials, write_atomic
from prompttune.core.types import Example
from prompttune.dspy_bridge import STRATEGIES, lookup
from prompttune.engine.results import Resumption, RunResult
from prompttune.engine.setup import (
    RUN_DIR,
    build_proposer_backend,
    check_paths,
    check_proposer_backend,
    load_run_task,
    load_space,
    make_run_dir,
    read_run_config,
    require_dev_budget,
    run_contract,
    search_context,
)
from prompttune.engine.verdicts import final_look, new_look, next_look_alpha, record_look, recorded_looks, served_verdicts
from prompttune.evaluation import contract
from prompttune.evaluation.cache import ResultCache
from prompttune.evaluation.confirmation import held_out_verdict
from prompttune.evaluation.evaluator import build_evaluator, prompt_tokens
from prompttune.evaluation.ledger import BudgetLedger
from prompttune.evaluation.metered_cache import MeteredCache
from prompttune.evaluation.per_class import per_class
from prompttune.evaluation.serving import check_generation, rescore_finalists, served_by_verdict
from prompttune.objectives import Objective, get_objective
from prompttune.optimizers.base import SearchContext
from prompttune.optimizers.proposer import Proposer
from prompttune.optimizers.registry import Setting, Strategy
from prompttune.reports import PASSED_BACKEND
from prompttune.reports.html.facts import run_status, token_facts, write_run_facts
from prompttune.reports.html.tokens import marked_prompts, write_tokens_png
from prompttune.reports.html_report import write_html_report
from prompttune.reports.optimize_report import confirmable_gain, describe_change, print_summary, write_report
from prompttune.search_spaces import Candidate, SearchSpace
from prompttune.search_spaces.prompt import select_demos
from prompttune.tasks.base import Task

CacheView = Callable[[BudgetLedger], ResultCache | MeteredCache]


def _server_counts(backend: Backend, at_start: dict[str, dict[str, int]],
                   earlier: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Per-server counts of this run: this session's (the backend may have served other runs before)
    plus those of the sessions an outage or a signal stopped."""
    return {url: {name: value - at_start.get(url, {}).get(name, 0) + earlier.get(url, {}).get(name, 0)
                  for name, value in counts.items()}
            for url, counts in backend.server_counts().items()}


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
        versions.update(STRATEGIES[name].versions() if name in STRATEGIES else {})
    return versions


def critique_advice(config: RunConfig, critique: str) -> str:
    """The one line a run says when its proposer's critiques are not usable (`Proposer.critique`): who wrote
    them, and the option that lets a stronger model write them."""
    shown = repr(critique[:60] + ("…" if len(critique) > 60 else "")) if critique else "an empty answer"
    if config.proposer_model:
        return (f"--proposer-model {config.proposer_model} wrote a critique that is not usable ({shown}); "
                "a stronger --proposer-model writes better ones")
    return (f"the proposer's critiques are not usable ({shown}): the task model {config.model} writes them; "
            "--proposer-model MODEL lets a stronger model write them (the task model still answers)")


def _progress(console: Console, shown: bool) -> Progress | nullcontext:
    if not shown:
        return nullcontext()
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("calls · best dev {task.fields[best]}"), TimeRemainingColumn(),
                    console=console, transient=False)


def run_study(config: RunConfig, *, task: Task | None = None, space: SearchSpace | None = None,
              objective: Objective | None = None, backend: Backend | None = None,
              console: Console | None = None, progress: bool = False, handle_signals: bool = False,
              cache_view: CacheView | None = None, resume_dir: Path | None = None,
              record: bool = True, stop: StopRequest | None = None) -> RunResult:
    """One search and its held-out verdict.

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
    passed_backend = backend  # the caller's, left open; one the run builds is closed when it ends
    with ExitStack() as resources:
        with loading(config, quietly=not progress and (backend is None or bool(config.proposer_model))):
            backend = backend or resources.enter_context(closing(build_backend(config)))
            proposer_backend = (resources.enter_context(closing(build_proposer_backend(config)))
                                if config.proposer_model else backend)
        counts_at_start = backend.server_counts()
        console.print(contract.contract_line(serve, declared))  # the run's first line, once the model answers
        console.print(backend.describe())
        if task.split_note:
            console.print(f"task {task.name}: splits train {len(task.splits['train'])} / dev {len(task.splits['dev'])} "
                          f"/ test {len(task.splits['test'])}, {task.split_note}", markup=False)
        for warning in task.warnings:
            console.print(f"warning: {warning}", markup=False)
        train = {ex.id: ex for ex in visible.splits["train"]}
        check_prompt_ceiling(config, backend, context.space.default_candidate(), train)
        check_contract(context, backend, console)
        run_dir = (resume_dir or make_run_dir(config, task.name)) if record else None
        looks = recorded_looks(run_dir) if run_dir else []
        if not console.quiet:  # worked out only where shown: the oracle benchmarks run thousands of quiet searches
            statement, warning = confirmable_gain(len(task.splits["test"]),
                                                  next_look_alpha(looks, config.alpha, False), config.confirm_top)
            console.print(statement)
            if warning:
                console.print(f"warning: {warning}")
        if handle_signals:
            stop = resources.enter_context(stop_on_signals(f"optimize --resume {run_dir}"))
        elif stop is None:
            stop = StopRequest("")  # a library call: no handler, so nothing ever asks the search to stop
        if run_dir:
            write_atomic(run_dir / "config.json", config.model_dump_json(indent=2))
            record_code(run_dir)
        trials_before = set_aside_trials(run_dir) if resume_dir else None
        earlier = interruption(resume_dir) if resume_dir else {}

        def servers() -> dict[str, dict[str, int]]:
            return _server_counts(backend, counts_at_start, earlier.get("servers", {}))

        if cache_view is None:
            cache = resources.enter_context(closing(ResultCache(
                config.cache or (run_dir / "cache.sqlite" if run_dir else ":memory:"))))
            metered = bool(config.cache or resume_dir)

            def cache_view(ledger: BudgetLedger) -> ResultCache | MeteredCache:
                return MeteredCache(cache) if metered else cache

        seen_examples = [ex for split in visible.splits.values() for ex in split]
        # Under serve generate the search's cap keeps back the finalists' rescoring, which the full cap then pays.
        search_ledger = BudgetLedger(cap_calls=context.budget, cap_tokens=config.budget_tokens)
        search_view = cache_view(search_ledger)
        evaluator = build_evaluator(config, backend, seen_examples, train.values(), search_view, search_ledger,
                                    scoring=search_scoring(config, backend))
        advice: list[str] = []

        def advise(critique: str) -> None:
            advice.append(critique_advice(config, critique))
            console.print(f"note: {advice[-1]}", markup=False)

        strategy = build_strategy(Setting(config, context, visible, evaluator,
                                          Proposer(proposer_backend, evaluator.meter, on_unusable_critique=advise),
                                          run_dir))
        storage: TrialStorage = JsonlStorage(run_dir / "trials.jsonl") if run_dir else InMemoryStorage()
        baseline = strategy.baseline
        test = task.splits["test"]
        test_ids = [ex.id for ex in test]
        searched_from = time.perf_counter()
        try:
            with _progress(console, progress) as bar_view:
                on_trial = _trial_watch(config, bar_view, search_ledger, len(test), console, task.name)
                with stop.during_search():
                    outcome = strategy.search(storage, on_trial, stop)
            interim = outcome.interrupted
            ranking, finalists = outcome.ranking, None
            if serve == "generate" and not interim:  # a stopped search makes no further call
                search_ledger.cap_calls = config.budget
                ranking, finalists = rescore_finalists(
                    outcome.ranking, baseline, build_evaluator(config, backend, seen_examples, train.values(),
                                                               search_view, search_ledger, scoring="generate"),
                    context.dev_ids, context.score)
            alpha = next_look_alpha(looks, config.alpha, interim)
            confirm_ledger = BudgetLedger()
            test_evaluator = build_evaluator(config, backend, test, train.values(), cache_view(confirm_ledger),
                                             confirm_ledger)
            so_far = " (of the best candidate so far: the search was interrupted)" if interim else ""
            console.print(f"held-out verdict on {len(test)} test examples{so_far}…")
            verdict = held_out_verdict(baseline, ranking, test_evaluator, test_ids, alpha,
                                       config.confirm_top, config.seed)
            generation = None
            if serve == "generate":
                generation = served_by_verdict(verdict)
            elif config.check_generation:
                generation_ledger = BudgetLedger()
                console.print(f"generation check on the first {config.check_generation} test examples…")
                generation = check_generation(verdict, build_evaluator(
                    config, backend, test, train.values(), cache_view(generation_ledger), generation_ledger,
                    scoring="generate"), config.check_generation, serve)
        except BackendUnavailable as exc:  # stop resumably: the cache holds every answered call
            if run_dir:
                mark_interrupted(run_dir, str(exc), servers())
                exc.run_dir = run_dir
            raise
        except RunInterrupted as exc:
            if run_dir:
                mark_interrupted(run_dir, exc.reason, servers())
            raise
        backend_use = (evaluator.meter.use + test_evaluator.meter.use).summary(time.perf_counter() - searched_from)
        strategy.after_verdict(verdict, run_dir)
        resumed = (Resumption(trials_before, evaluator.cache.foreign_calls, earlier.get("reason"))
                   if trials_before is not None else None)
        result = RunResult(run_dir, config, baseline, context.space, outcome, verdict, search_ledger,
                           confirm_ledger, time.time() - started, train, tuple(task.input_fields), backend.to_text,
                           strategy, storage, resumed, servers(), generation_check=generation, finalists=finalists,
                           per_class=per_class(verdict, task.labels, config.class_loss_margin),
                           versions=run_versions(config, backend, passed=passed_backend is not None),
                           backend_use=backend_use,
                           labels=tuple(task.labels), split_note=task.split_note,
                           split_sizes={name: len(task.splits[name]) for name in ("train", "dev", "test")},
                           data_warnings=tuple(task.warnings), backend=passed_backend, advice=tuple(advice),
                           prompt_tokens={role: tokens_of(backend, candidate, train) for role, candidate in
                                          (("baseline", baseline), ("shipped", verdict.shipped),
                                           ("dev winner", verdict.dev_winner))})
        if run_dir is None:
            return result
        stopped = f"stopped by {stop.signal} after the trial in flight" if interim else None
        if stopped:  # before verdict.json, which alone would say finished
            mark_interrupted(run_dir, stopped, servers())
        decided = None if interim else final_look(looks)  # recorded by a session stopped while writing its report
        try:
            result.test_looks = (served_verdicts(run_dir.parent, decided) if decided else record_look(
                run_dir.parent, run_dir, new_look(run_dir, task.name, config.split_seed, test_ids, interim, alpha,
                                                  verdict.summary(), verdict.shipped.id)))
            _write_record(result, task, interim)
            if not stopped:
                clear_interruption(run_dir)
            write_html_report(run_dir)
        except RunInterrupted as exc:  # a signal while the record is written: a resume writes it again
            mark_interrupted(run_dir, exc.reason, servers())
            raise
        if progress:
            print_summary(result, console)
        if stopped:
            raise RunInterrupted(f"{stopped}; the report of the best candidate so far, with its interim held-out "
                                 f"verdict, is {run_dir / 'report.md'}; finish the run with "
                                 f"`optimize --resume {run_dir}`", stopped)
        return result


def search_scoring(config: RunConfig, backend: Backend) -> str:
    """How the search scores candidates: the verdict's method, except that under serve generate label log-probs
    rank them as a fast proxy (where the backend has them; the finalists and the verdict generate)."""
    return "logit" if config.contract == "generate" and backend.scores_labels else config.scoring


def check_contract(context: SearchContext, backend: Backend, console: Console) -> None:
    """Before the search: a baseline whose label offsets the contract cannot apply is one line; under `choice`,
    whether `logit_bias` can carry label offsets for the baseline's labels (said once when it cannot)."""
    baseline = context.space.default_candidate()
    if not contract.admits(context.serve, backend, baseline.spec):
        raise UserError(f"serve {context.serve}: the baseline prompt carries label offsets (calibrate or label_bias) "
                        "that production under this contract cannot apply; remove them from the space's base prompt")
    if context.serve == "choice":
        context.label_offsets = contract.single_token_labels(backend, baseline.spec)
        if not context.label_offsets:
            console.print("serve choice: the labels are not one token each of the model's tokenizer, so logit_bias "
                          "cannot reproduce label offsets: no calibrated candidate is tried")


def _write_record(result: RunResult, task: Task, interim: bool) -> None:
    """The prompts as the model sees them, the dev leader at each spend, the prompt-tokens plot, report.md and
    verdict.json (last: it marks the run finished)."""
    run_dir, space, baseline, verdict = result.run_dir, result.space, result.baseline, result.verdict
    assert run_dir is not None
    example = task.splits["test"][0]
    shipped = verdict.shipped
    write_prompt(run_dir, "best_prompt", shipped, space, baseline, result.prompt(shipped).render(example),
                 serve=result.config.contract, verdict=verdict.summary(), is_baseline=shipped.id == baseline.id,
                 **({"interim": True} if interim else {}))
    write_prompt(run_dir, "dev_winner", verdict.dev_winner, space, baseline,
                 result.prompt(verdict.dev_winner).render(example),
                 label="dev winner: selected on dev; ships only if the held-out verdict confirms it")
    write_prompt(run_dir, "baseline_prompt", baseline, space, baseline, result.prompt(baseline).render(example),
                 label="baseline: the task's prompt (yours, or the default), the one every candidate must beat",
                 **({"notes": list(space.notes)} if space.notes else {}))
    write_atomic(run_dir / "leaders.jsonl", "".join(
        json.dumps({"calls": calls, "tokens": tokens, "spec": asdict(spec)}) + "\n"
        for calls, tokens, spec in result.outcome.leaders))  # the dev pick at each spend (budget_curve.py)
    write_tokens_png(run_dir, token_facts(result), marked_prompts(baseline.id, verdict.dev_winner.id, shipped.id),
                     result.config.objective)
    write_report(result, result.config, task, space, baseline)
    write_run_facts(result, task)


def _trial_watch(config: RunConfig, bar_view: Progress | None, ledger: BudgetLedger, test_size: int,
                 console: Console, task_name: str) -> Callable[[dict], None] | None:
    """The progress bar's update and, at the first trial the model answered, a wall-time estimate
    (cache hits take no model time)."""
    if bar_view is None:
        return None
    bar = bar_view.add_task(f"{config.optimizer} on {task_name}", total=config.budget, best="–")
    search_started = time.time()
    estimated: list[bool] = []

    def on_trial(trial: dict) -> None:
        if not estimated and ledger.computed_calls:
            estimated.append(True)
            rate = ledger.computed_calls / max(time.time() - search_started, 1e-9)
            left = config.budget - trial["budget_spent"]
            console.print(f"measured {rate:.1f} model calls/s: the search's remaining {left} calls should take at "
                          f"most about {left / rate / 60:.0f} min (less where the cache answers), the held-out "
                          f"verdict about {2 * test_size / rate / 60:.0f} min more")
        best = trial.get("best_so_far")
        bar_view.update(bar, completed=trial["budget_spent"],
                        best="–" if best is None or math.isnan(best) else f"{best:.3f}")
    return on_trial


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
        raise UserError(f"{run_dir} finished already (verdict.json exists); nothing to resume")
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
