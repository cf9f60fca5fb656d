"""The search and judge steps of one run (`run_study`: open-run → search → judge → record), and what the
steps hand each other.

The search sees train and dev only, through an evaluator on its own capped ledger; the judge then tests the
search's ranking on the test split with a separate evaluator and ledger, so no strategy reaches a test
example and the verdict's calls never count against the search's cap.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar, Iterator, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from prompttune.backends.backend import Backend
from prompttune.core.config import RunConfig
from prompttune.core.errors import BackendUnavailable
from prompttune.core.interrupt import RunInterrupted, StopRequest, mark_interrupted
from prompttune.core.run_files import trial_log
from prompttune.core.storage import InMemoryStorage, TrialStorage
from prompttune.core.types import Example
from prompttune.engine.run_dir import HeldModel
from prompttune.engine.verdicts import Look, final_look, next_look_alpha
from prompttune.optimizers.proposer import Proposer
from prompttune.optimizers.registry import Setting, Strategy
from prompttune.optimizers.strategy_contract import SearchContext
from prompttune.results.search_outcome import SearchOutcome
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.confirmation import Verdict, held_out_verdict
from prompttune.scoring.evaluator import Evaluator, build_evaluator
from prompttune.scoring.ledger import BudgetLedger
from prompttune.scoring.metered_cache import MeteredCache
from prompttune.scoring.metering import BackendUse
from prompttune.scoring.serving import (
    GenerationCheck,
    check_generation,
    served_by_verdict,
)
from prompttune.search_spaces import Candidate
from prompttune.tasks.task import Task

CacheView = Callable[[BudgetLedger], ResultCache | MeteredCache]


def _server_counts(backend: Backend, at_start: dict[str, dict[str, int]],
                   earlier: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Per-server counts of this run: this session's (the backend may have served other runs before)
    plus those of the sessions an outage or a signal stopped."""
    return {url: {name: value - at_start.get(url, {}).get(name, 0) + earlier.get(url, {}).get(name, 0)
                  for name, value in counts.items()}
            for url, counts in backend.server_counts().items()}


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
class WallEstimate:
    """The run's wall-time estimate, timed on warm calls: the model's first answered calls load and warm it (a
    rate timed from the search's start once said 35 min for a 6-minute search). Timing starts at the end of the
    trial that brings the answered calls to `WARM_UP_CALLS`; the rate is read at the end of the trial that adds
    `TIMED_CALLS` more, or any more once `TIMED_SECONDS` have passed. Cache hits take no model time: only calls
    the model answered count."""

    WARM_UP_CALLS: ClassVar[int] = 20
    TIMED_CALLS: ClassVar[int] = 50
    TIMED_SECONDS: ClassVar[float] = 60.0

    budget: int
    test_size: int
    clock: Callable[[], float] = time.monotonic
    start: tuple[float, int] | None = None  # (clock, answered calls) where the timing began
    done: bool = False

    def line(self, answered: int, spent: int) -> str | None:
        """At a trial's end, with the calls the model has answered and those the search has spent: the estimate,
        once, when the timing is done."""
        if self.done or answered < self.WARM_UP_CALLS:
            return None
        now = self.clock()
        if self.start is None:
            self.start = (now, answered)
            return None
        timed, seconds = answered - self.start[1], now - self.start[0]
        if timed < self.TIMED_CALLS and not (timed and seconds >= self.TIMED_SECONDS):
            return None
        self.done = True
        rate, left = timed / max(seconds, 1e-9), self.budget - spent
        return (f"estimate at the measured rate, {rate:.1f} model calls/s once warm (timed after the first "
                f"{self.start[1]} calls): the search's remaining {left} calls about {left / rate / 60:.0f} min at most "
                f"(less where the cache answers), the verdict about {2 * self.test_size / rate / 60:.0f} min more")


def _trial_watch(config: RunConfig, bar_view: Progress | None, use: BackendUse, test_size: int,
                 console: Console, task_name: str) -> Callable[[dict], None] | None:
    """The progress bar's update and, once the model has answered enough calls warm, a wall-time estimate. The
    model's answered rows (`use`) are counted where it answered them, not where a trial was charged: answers fetched
    ahead in one batch are charged over many later trials, which timed on charges read as thousands of calls/s."""
    if bar_view is None:
        return None
    bar = bar_view.add_task(f"{config.optimizer} on {task_name}", total=config.budget, best="–")
    estimate = WallEstimate(config.budget, test_size)

    def on_trial(trial: dict) -> None:
        if (line := estimate.line(use.rows, trial["budget_spent"])) is not None:
            console.print(line)
        best = trial.get("best_so_far")
        bar_view.update(bar, completed=trial["budget_spent"],
                        best="–" if best is None or math.isnan(best) else f"{best:.3f}")
    return on_trial


@dataclass
class OpenedRun:
    """What the open-run step hands the search, the judge and the record: the resolved config and task, the
    models, the run directory (None when unrecorded) with what an interrupted session left there, the stop."""

    config: RunConfig
    task: Task
    visible: Task  # the task without its test split: all the search may see
    context: SearchContext
    model: HeldModel
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


def search(run: OpenedRun, build_strategy: Callable[[Setting], Strategy], progress: bool) -> Searched:
    """The strategy searches train+dev under the search's cap, every candidate scored in the run's contract (under
    serve generate by greedy generation itself, so the dev ranking is what generation will answer)."""
    config, console = run.config, run.console
    assert run.cache_view is not None and run.proposer_backend is not None
    seen = [ex for split in run.visible.splits.values() for ex in split]
    ledger = BudgetLedger(cap_calls=run.context.budget, cap_tokens=config.budget_tokens)
    evaluator = run.evaluator(seen, run.cache_view(ledger), ledger)
    advice: list[str] = []

    def advise(critique: str) -> None:
        advice.append(critique_advice(config, critique))
        console.print(f"note: {advice[-1]}", markup=False)

    strategy = build_strategy(Setting(config, run.context, run.visible, evaluator,
                                      Proposer(run.proposer_backend, evaluator.meter, on_unusable_critique=advise),
                                      run.run_dir))
    storage: TrialStorage = trial_log(run.run_dir) if run.run_dir else InMemoryStorage()
    started = time.perf_counter()
    with run.resumable():
        with _progress(console, progress) as bar_view:
            on_trial = _trial_watch(config, bar_view, evaluator.meter.use, len(run.task.splits["test"]), console,
                                    run.task.name)
            with run.stop.during_search():
                outcome = strategy.search(storage, on_trial, run.stop)
    return Searched(strategy, evaluator, ledger, storage, outcome, outcome.ranking, advice, started)


def judge(run: OpenedRun, searched: Searched) -> Judged:
    """The held-out verdict on the test split the search never saw (at the alpha this look may spend), and the
    generation check: the verdict's own under serve generate, else on the first `check_generation` examples.

    A resume of a run whose final look is recorded (it was stopped while its report was written) that a signal
    stopped mid-search looks no more: the run keeps its decision, its files stay those of that look, and the run
    stays resumable (an interim look here would log a second decision and ship the baseline at α = 0)."""
    config, test, interim = run.config, run.task.splits["test"], searched.outcome.interrupted
    assert run.cache_view is not None
    with run.resumable():
        if interim and final_look(run.looks):
            stopped = f"stopped by {run.stop.signal} after the trial in flight"
            raise RunInterrupted(f"{stopped}; this run's final held-out verdict is recorded and stands (no new look "
                                 f"at the test split); finish its report with `optimize --resume {run.run_dir}`",
                                 stopped)
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
