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
from contextlib import ExitStack, closing, contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from prompttune import __version__
from prompttune.backends.base import Backend
from prompttune.backends.factory import build_backend
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
from prompttune.core.storage import InMemoryStorage, JsonlStorage, TrialStorage, set_aside_trials, write_atomic
from prompttune.core.types import Example
from prompttune.dspy_bridge import STRATEGIES, lookup
from prompttune.engine.results import Resumption, RunResult
from prompttune.engine.run_dir import OpenRun, open_run, run_label
from prompttune.engine.setup import (
    RUN_DIR,
    build_proposer_backend,
    check_paths,
    check_proposer_backend,
    load_run_task,
    load_space,
    read_run_config,
    require_dev_budget,
    run_contract,
    search_context,
)
from prompttune.engine.verdicts import (
    Look,
    final_look,
    new_look,
    next_look_alpha,
    record_look,
    recorded_looks,
    served_verdicts,
)
from prompttune.evaluation import contract
from prompttune.evaluation.cache import ResultCache
from prompttune.evaluation.confirmation import Verdict, held_out_verdict
from prompttune.evaluation.evaluator import Evaluator, build_evaluator, prompt_tokens
from prompttune.evaluation.ledger import BudgetLedger
from prompttune.evaluation.metered_cache import MeteredCache
from prompttune.evaluation.per_class import per_class
from prompttune.evaluation.serving import (
    FinalistRescoring,
    GenerationCheck,
    check_generation,
    rescore_finalists,
    served_by_verdict,
)
from prompttune.objectives import Objective, get_objective
from prompttune.optimizers.base import SearchContext, SearchOutcome
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


@dataclass
class OpenedRun:
    """What the open-run step hands the search, the judge and the record: the resolved config and task, the
    models, the run directory (None when unrecorded) with what an interrupted session left there, the stop."""

    config: RunConfig
    task: Task
    visible: Task  # the task without its test split: all the search may see
    context: SearchContext
    model: OpenRun
    console: Console
    stop: StopRequest
    started: float
    proposer_backend: Backend | None = None
    run_dir: Path | None = None
    looks: list[Look] = field(default_factory=list)
    cache_view: CacheView | None = None
    trials_before: int | None = None  # a resumed run's trials, set aside
    earlier: dict = field(default_factory=dict)  # what the interrupted session recorded
    counts_at_start: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def backend(self) -> Backend:
        return self.model.backend

    @property
    def train(self) -> dict[str, Example]:
        return {ex.id: ex for ex in self.visible.splits["train"]}

    def servers(self) -> dict[str, dict[str, int]]:
        return _server_counts(self.backend, self.counts_at_start, self.earlier.get("servers", {}))

    def evaluator(self, examples: Sequence[Example], view: ResultCache | MeteredCache, ledger: BudgetLedger,
                  scoring: str | None = None) -> Evaluator:
        """An evaluator of this run's model over `examples`, demos from the train split."""
        return build_evaluator(self.config, self.backend, examples, self.visible.splits["train"], view, ledger, scoring)

    @contextmanager
    def resumable(self) -> Iterator[None]:
        """Around the model's work: an outage or a signal marks the run directory resumable (the cache holds
        every answered call)."""
        try:
            yield
        except BackendUnavailable as exc:
            if self.run_dir:
                mark_interrupted(self.run_dir, str(exc), self.servers())
                exc.run_dir = self.run_dir
            raise
        except RunInterrupted as exc:
            if self.run_dir:
                mark_interrupted(self.run_dir, exc.reason, self.servers())
            raise


@dataclass(frozen=True)
class Searched:
    """The search step's outcome: the strategy, its evaluator and ledger, and the ranking the judge tests."""

    strategy: Strategy
    evaluator: Evaluator
    ledger: BudgetLedger
    storage: TrialStorage
    outcome: SearchOutcome
    ranking: list[Candidate]
    finalists: FinalistRescoring | None
    advice: list[str]
    started: float  # perf_counter at the search's start: the clock of the backend's use


@dataclass(frozen=True)
class Judged:
    """The held-out verdict, the evaluator and ledger that tested it, its alpha and the generation check."""

    verdict: Verdict
    evaluator: Evaluator
    ledger: BudgetLedger
    alpha: float
    generation: GenerationCheck | None


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
        return record_run(run, searched, judge(run, searched), progress)


def open_study(run: OpenedRun, resources: ExitStack, declared: bool, resume_dir: Path | None, record: bool,
               handle_signals: bool) -> None:
    """Open the run: a proposer model where one is named, the run's first lines, the checks that need the
    model, the run directory (new, or `resume_dir` taken back), signal handling and the cache."""
    config, task, console = run.config, run.task, run.console
    run.proposer_backend = (run.model.hold(build_proposer_backend, config) if config.proposer_model
                            else run.backend)
    run.counts_at_start = run.backend.server_counts()
    console.print(contract.contract_line(config.contract, declared))  # the run's first line, once the model answers
    console.print(run.backend.describe())
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
            config.cache or (run.run_dir / "cache.sqlite" if run.run_dir else ":memory:"))))
        run.cache_view = _private_view(cache, metered=bool(config.cache or resume_dir))


def _private_view(cache: ResultCache, metered: bool) -> CacheView:
    """The run's own cache for every ledger: through `MeteredCache` where it holds calls this run did not make
    (a shared --cache, an interrupted run's)."""
    def view(ledger: BudgetLedger) -> ResultCache | MeteredCache:
        return MeteredCache(cache) if metered else cache
    return view


def search(run: OpenedRun, build_strategy: Callable[[Setting], Strategy], progress: bool) -> Searched:
    """The strategy searches train+dev under the search's cap; under serve generate its finalists are then
    rescored by generation, paid from the full cap the search's cap kept that back for."""
    config, console = run.config, run.console
    assert run.cache_view is not None and run.proposer_backend is not None
    seen = [ex for split in run.visible.splits.values() for ex in split]
    ledger = BudgetLedger(cap_calls=run.context.budget, cap_tokens=config.budget_tokens)
    evaluator = run.evaluator(seen, run.cache_view(ledger), ledger, search_scoring(config, run.backend))
    advice: list[str] = []

    def advise(critique: str) -> None:
        advice.append(critique_advice(config, critique))
        console.print(f"note: {advice[-1]}", markup=False)

    strategy = build_strategy(Setting(config, run.context, run.visible, evaluator,
                                      Proposer(run.proposer_backend, evaluator.meter, on_unusable_critique=advise),
                                      run.run_dir))
    storage: TrialStorage = JsonlStorage(run.run_dir / "trials.jsonl") if run.run_dir else InMemoryStorage()
    started = time.perf_counter()
    with run.resumable():
        with _progress(console, progress) as bar_view:
            on_trial = _trial_watch(config, bar_view, ledger, len(run.task.splits["test"]), console, run.task.name)
            with run.stop.during_search():
                outcome = strategy.search(storage, on_trial, run.stop)
        ranking, finalists = outcome.ranking, None
        if config.contract == "generate" and not outcome.interrupted:  # a stopped search makes no further call
            ledger.cap_calls = config.budget
            ranking, finalists = rescore_finalists(
                outcome.ranking, strategy.baseline, run.evaluator(seen, evaluator.cache, ledger, "generate"),
                run.context.dev_ids, run.context.score)
    return Searched(strategy, evaluator, ledger, storage, outcome, ranking, finalists, advice, started)


def judge(run: OpenedRun, searched: Searched) -> Judged:
    """The held-out verdict on the test split the search never saw (at the alpha this look may spend), and the
    generation check: the verdict's own under serve generate, else on the first `check_generation` examples."""
    config, test, interim = run.config, run.task.splits["test"], searched.outcome.interrupted
    assert run.cache_view is not None
    with run.resumable():
        alpha = next_look_alpha(run.looks, config.alpha, interim)
        ledger = BudgetLedger()
        evaluator = run.evaluator(test, run.cache_view(ledger), ledger)
        so_far = " (of the best candidate so far: the search was interrupted)" if interim else ""
        run.console.print(f"held-out verdict on {len(test)} test examples{so_far}…")
        verdict = held_out_verdict(searched.strategy.baseline, searched.ranking, evaluator, [ex.id for ex in test],
                                   alpha, config.confirm_top, config.seed)
        generation = None
        if config.contract == "generate":
            generation = served_by_verdict(verdict)
        elif config.check_generation:
            generation_ledger = BudgetLedger()
            run.console.print(f"generation check on the first {config.check_generation} test examples…")
            generation = check_generation(verdict, run.evaluator(test, run.cache_view(generation_ledger),
                                                                 generation_ledger, "generate"),
                                          config.check_generation, config.contract)
    return Judged(verdict, evaluator, ledger, alpha, generation)


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
                     generation_check=judged.generation, finalists=searched.finalists,
                     per_class=per_class(verdict, task.labels, config.class_loss_margin),
                     versions=run_versions(config, run.backend, passed=run.model.passed),
                     backend_use=backend_use, labels=tuple(task.labels), split_note=task.split_note,
                     split_sizes={name: len(task.splits[name]) for name in ("train", "dev", "test")},
                     data_warnings=tuple(task.warnings), backend=run.backend if run.model.passed else None,
                     advice=tuple(searched.advice),
                     prompt_tokens={role: tokens_of(run.backend, candidate, train) for role, candidate in
                                    (("baseline", baseline), ("shipped", verdict.shipped),
                                     ("dev winner", verdict.dev_winner))})


def record_run(run: OpenedRun, searched: Searched, judged: Judged, progress: bool) -> RunResult:
    """Record the run: its look at the test split, the prompts, report.md and verdict.json (the last: it marks
    the run finished); a search a signal stopped is recorded with its interim verdict and then raises."""
    result = run_result(run, searched, judged)
    run_dir, interim, verdict = run.run_dir, searched.outcome.interrupted, judged.verdict
    if run_dir is None:
        return result
    stopped = f"stopped by {run.stop.signal} after the trial in flight" if interim else None
    if stopped:  # before verdict.json, which alone would say finished
        mark_interrupted(run_dir, stopped, run.servers())
    decided = None if interim else final_look(run.looks)  # recorded by a session stopped while writing its report
    try:
        result.test_looks = (served_verdicts(run_dir.parent, decided) if decided else record_look(
            run_dir.parent, run_dir, new_look(run_dir, run.task.name, run.config.split_seed,
                                              [ex.id for ex in run.task.splits["test"]], interim, judged.alpha,
                                              verdict.summary(), verdict.shipped.id)))
        write_record(result, run.task, interim)
        if not stopped:
            clear_interruption(run_dir)
        write_html_report(run_dir)
    except RunInterrupted as exc:  # a signal while the record is written: a resume writes it again
        mark_interrupted(run_dir, exc.reason, run.servers())
        raise
    if progress:
        print_summary(result, run.console)
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


def write_record(result: RunResult, task: Task, interim: bool) -> None:
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
