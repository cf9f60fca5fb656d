"""One optimization run: task → space → optimizer ⇄ evaluator → confirmation → run directory."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Callable
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from prompttune.backends.base import Backend
from prompttune.backends.factory import build_backend
from prompttune.config import RunConfig
from prompttune.errors import UserError
from prompttune.evaluation.cache import ResultCache
from prompttune.evaluation.confirmation import Confirmation, Verdict, held_out_verdict
from prompttune.evaluation.evaluator import Evaluator
from prompttune.evaluation.ledger import BudgetLedger
from prompttune.htmlreport import write_html_report
from prompttune.htmlreport.facts import write_run_facts
from prompttune.objectives.stats import AcceptRule
from prompttune.optimizers import SearchContext, get_optimizer, run_search
from prompttune.optimizers.proposer import Proposer
from prompttune.optimizers.base import SearchOutcome
from prompttune.report import describe_change, print_summary, write_report
from prompttune.search_spaces import Candidate, SearchSpace, default_space
from prompttune.search_spaces.prompt import render, select_demos
from prompttune.storage import JsonlStorage
from prompttune.tasks import SplitSizes, Task, load_task


def build_proposer_backend(config: RunConfig) -> Backend:
    return build_backend(config.model_copy(update={"model": config.proposer_model}))


def load_run_task(config: RunConfig) -> Task:
    """The task with the run's split sizes and split seed: the same splits for every reader."""
    return load_task(config.task, config.data_dir,
                     SplitSizes(config.train_size, config.dev_size, config.test_size), config.split_seed)


def require_dev_budget(config: RunConfig, task: Task) -> None:
    """A search must afford at least one full dev evaluation."""
    if config.budget < len(task.splits["dev"]):
        raise UserError(f"budget {config.budget} too small: one full dev evaluation needs "
                        f"{len(task.splits['dev'])} calls (lower --dev-size or raise --budget)")


def load_space(config: RunConfig, task: Task) -> SearchSpace:
    if config.space is None:
        return default_space(task)
    from prompttune.search_spaces.loader import load_space_file

    return load_space_file(config.space, task)


def make_run_dir(config: RunConfig, task_name: str) -> Path:
    return new_run_dir(config.runs_dir, f"{task_name}-{config.optimizer}-s{config.seed}")


def new_run_dir(runs_dir: str, label: str) -> Path:
    """`runs_dir/<UTC timestamp>-<label>`, suffixed when two runs start in the same second."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = Path(runs_dir) / f"{stamp}-{label}"
    suffix = 1
    while path.exists():
        path = path.with_name(f"{path.name}-{suffix}")
        suffix += 1
    path.mkdir(parents=True)
    return path


@dataclass
class RunResult:
    run_dir: Path
    baseline: Candidate
    outcome: SearchOutcome
    verdict: Verdict
    search_ledger: BudgetLedger
    confirm_ledger: BudgetLedger
    wall_seconds: float

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
    (run_dir / f"{name}.json").write_text(json.dumps({
        "candidate_id": candidate.id,
        **facts,
        "dimensions": candidate.values(space),
        "spec": asdict(candidate.spec),
        "diff_from_baseline": describe_change(space, baseline, candidate),
    }, indent=2, ensure_ascii=False))
    (run_dir / f"{name}.txt").write_text(text + "\n")


def run_optimization(config: RunConfig, backend: Backend | None = None, console: Console | None = None,
                     cache: ResultCache | None = None,
                     cache_view: Callable[[BudgetLedger], ResultCache] | None = None) -> RunResult:
    """One search and its held-out verdict. A given `cache` is used as is and left open (compare
    shares one across arms); otherwise `config.cache` or the run directory's cache is opened.
    `cache_view(ledger)` lets compare give each ledger its own metered view of a shared cache."""
    started = time.time()
    console = console or Console(stderr=True)
    task = load_run_task(config)
    space = load_space(config, task)
    optimizer_cls = get_optimizer(config.optimizer)
    require_dev_budget(config, task)
    own_backend = backend is None
    backend = backend or build_backend(config)
    if hasattr(backend, "describe"):
        console.print(backend.describe())
    run_dir = make_run_dir(config, task.name)
    (run_dir / "config.json").write_text(config.model_dump_json(indent=2))
    own_cache = cache is None
    cache = cache if cache is not None else ResultCache(config.cache or run_dir / "cache.sqlite")

    visible = task.without_test()
    train = {ex.id: ex for ex in visible.splits["train"]}
    space = space.bind(visible.splits["train"])
    seen_examples = {ex.id: ex for split in visible.splits.values() for ex in split}
    search_ledger = BudgetLedger(cap_calls=config.budget, cap_tokens=config.budget_tokens)
    def cache_for(ledger: BudgetLedger) -> ResultCache:
        return cache_view(ledger) if cache_view else cache

    evaluator = Evaluator(backend, seen_examples, train, cache_for(search_ledger), search_ledger,
                          scoring=config.scoring)
    context = SearchContext(space, list(train), [e.id for e in visible.splits["dev"]], len(task.labels),
                            config.objective, config.seed, config.budget, dict(config.optimizer_options),
                            AcceptRule(alpha=config.dev_alpha))
    proposer = Proposer(build_proposer_backend(config) if config.proposer_model else backend, search_ledger)
    optimizer = optimizer_cls(context, proposer)
    storage = JsonlStorage(run_dir / "trials.jsonl")
    baseline = optimizer.baseline

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("calls · best dev {task.fields[best]}"), TimeRemainingColumn(),
                  console=console, transient=False) as progress:
        bar = progress.add_task(f"{config.optimizer} on {task.name}", total=config.budget, best="–")

        def on_trial(trial: dict) -> None:
            best = trial.get("best_so_far")
            progress.update(bar, completed=trial["budget_spent"],
                            best="–" if best is None else f"{best:.3f}")

        outcome = run_search(optimizer, evaluator, storage, on_trial)

    test = task.splits["test"]
    confirm_ledger = BudgetLedger()
    test_evaluator = Evaluator(backend, {ex.id: ex for ex in test}, train, cache_for(confirm_ledger),
                               confirm_ledger,
                               scoring=config.scoring)
    console.print(f"held-out verdict on {len(test)} test examples…")
    verdict = held_out_verdict(baseline, outcome.ranking, test_evaluator, [e.id for e in test], config.alpha,
                               config.confirm_top, config.seed)

    def as_seen(candidate: Candidate) -> str:
        return backend.to_text(render(candidate.spec, test[0], select_demos(candidate.spec, train)))

    shipped = verdict.shipped
    write_prompt(run_dir, "best_prompt", shipped, space, baseline, as_seen(shipped),
                 verdict=verdict.summary(), is_baseline=shipped.id == baseline.id)
    write_prompt(run_dir, "dev_winner", verdict.dev_winner, space, baseline, as_seen(verdict.dev_winner),
                 label="dev winner: selected on dev; ships only if the held-out verdict confirms it")
    write_prompt(run_dir, "baseline_prompt", baseline, space, baseline, as_seen(baseline),
                 label="baseline: the task's default prompt, the one every candidate must beat")
    result = RunResult(run_dir, baseline, outcome, verdict, search_ledger, confirm_ledger, time.time() - started)
    write_report(result, config, task, space, baseline)
    write_run_facts(result, task)
    write_html_report(run_dir)
    print_summary(result, console)
    if own_cache:
        cache.close()
    if own_backend and hasattr(backend, "close"):
        backend.close()
    return result
