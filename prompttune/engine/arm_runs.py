"""One compare arm-seed run through the engine (`run_study`), in this process or as a worker's job (`--jobs`,
Ray: `prompttune.engine.arm_executors`), and each seed's data draw the arms run on.

A worker rebuilds its seed's draw and model from the job alone: an arm runs the same search in a worker as
in the comparison's own process.
"""

from __future__ import annotations

import json
import math
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple

from rich.console import Console

from prompttune.comparing.arms import Bench, arm_config
from prompttune.comparing.coverage import plan_coverage
from prompttune.comparing.fairness import ModelWatch
from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.core.interrupt import StopRequest
from prompttune.engine.run_dir import BackendFactory
from prompttune.engine.setup import load_space, require_dev_budget
from prompttune.engine.study import checked_search, run_study
from prompttune.optimizers import SearchContext
from prompttune.results.arms import ArmRun, save_arm_run
from prompttune.results.compare import Coverage
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.ledger import BudgetLedger
from prompttune.scoring.metered_cache import MeteredCache
from prompttune.search_spaces import SearchSpace
from prompttune.tasks import load_run_task
from prompttune.tasks.task import Task


def arm_key(config: RunConfig) -> tuple[str, str, int]:
    """What tells an arm-seed's run apart: its optimizer, its options (a named variant's differ) and its seed."""
    return config.optimizer, json.dumps(config.optimizer_options, sort_keys=True, default=str), config.seed


@dataclass(frozen=True)
class ArmSeed:
    """One arm at one seed, still to run: `resume_dir` is the directory an interrupted comparison left it, if any."""

    arm: str
    seed: int
    resume_dir: Path | None = None


def split_seeds(config: RunConfig, seeds: list[int]) -> dict[int, int]:
    """Each seed draws its own train/dev/test split: the k-th seed with `--split-seed` + k, so that
    seed-to-seed variation includes test sampling, not only the search's."""
    return {seed: config.split_seed + k for k, seed in enumerate(seeds)}


class Draw(NamedTuple):
    """One seed's data draw with what its arms were checked on before any model loads."""

    config: RunConfig  # the comparison's config with this seed's split seed
    task: Task
    space: SearchSpace  # the compared space, whole
    coverage: dict[str, Coverage]  # per arm
    contexts: dict[str, SearchContext]  # per arm: what its search sees (its space held to its coverage)


def draw_seed(config: RunConfig, arms: list[str], options: dict[str, dict[str, Any]], mode: str,
          split_seed: int, data: Task | None = None, check: bool = True) -> Draw:
    """One seed's data draw (of the task `config` names, or of in-memory `data`), its space and each
    arm's coverage; with `check`, every arm's run checked as `run_study` checks it before any model
    loads (a worker's one arm is checked again by `run_study` itself)."""
    drawn = config.model_copy(update={"split_seed": split_seed})
    task = data.redraw(split_seed) if data is not None else load_run_task(drawn)
    require_dev_budget(drawn, task)
    space = load_space(drawn, task).bind(task.splits["train"])
    coverage = plan_coverage(arms, space, mode, options)
    contexts = {}
    for arm in arms if check else ():
        arm_run_config = arm_config(drawn, arm, options, coverage)
        contexts[arm] = checked_search(arm_run_config, task, load_space(arm_run_config, task))[1]
    return Draw(drawn, task, space, coverage, contexts)


def run_arm(bench: Bench, arm: str, seed: int, resume_dir: Path | None = None,
            stop: StopRequest | None = None) -> ArmRun:
    """One arm at one seed through the engine, on the shared model and a metered view of the shared
    cache; `resume_dir` finishes the arm an interrupted comparison left there. Either way the calls
    it paid for before are in the shared cache and its fresh metered view charges each of them once
    more, so its totals equal an uninterrupted arm's. `stop`: a worker's (`--jobs`), which follows the
    main process's signals."""
    views: list[tuple[BudgetLedger, MeteredCache, int]] = []  # per ledger: its view, and the request log mark at opening

    def view(ledger: BudgetLedger) -> MeteredCache:
        views.append((ledger, MeteredCache(bench.shared), bench.backend.mark()))
        return views[-1][1]

    # The arm loads its own task and space from its config, as a run alone would (in-memory data is
    # handed over): the fairness checks then verify that every arm saw the same baseline and test examples.
    result = run_study(bench.arm_config(arm, seed), task=bench.task if bench.in_memory else None,
                       backend=bench.backend, console=bench.console,
                       progress=bench.progress, handle_signals=bench.progress, cache_view=view,
                       resume_dir=resume_dir, stop=stop)
    search, start = next((v, mark) for ledger, v, mark in views if ledger is result.search_ledger)
    # The search's view opens just before the search, the verdict's once the search has ended.
    end = next(mark for ledger, _, mark in views if ledger is result.confirm_ledger)
    outcome, verdict = result.outcome, result.verdict
    # Some strategies (successive halving) name a leader only when a round finishes.
    anytime = outcome.anytime or [(result.search_ledger.calls, outcome.leader_dev_score)]
    best_dev = None if math.isnan(outcome.leader_dev_score) else outcome.leader_dev_score  # never scored on dev
    return ArmRun(arm=arm, seed=seed, run_dir=result.run_dir, baseline=result.baseline.spec,
                  best=result.shipped.spec, best_dev=best_dev, confirmation=result.confirmation,
                  raw=verdict.dev_winner.spec, raw_confirmation=verdict.leader_confirmation,
                  space_hash=result.space.fingerprint(), search=result.search_ledger,
                  confirm_calls=result.confirm_ledger.calls, foreign_calls=search.foreign_calls,
                  foreign_tokens=search.foreign_tokens, anytime=anytime, stopped_by_budget=outcome.stopped_by_budget,
                  wall_seconds=result.wall_seconds, notes=[*outcome.notes, f"Verdict: {verdict.summary()}."],
                  served=bench.backend.served(start, end), test_ids=verdict.test_ids, leaders=outcome.leaders,
                  per_class=result.per_class, generation_check=result.generation_check)


@dataclass(frozen=True)
class WorkerBench:
    """What a worker (`--jobs`, Ray) rebuilds its seed's `Bench` from: the same for every arm-seed of a comparison."""

    configs: dict[int, RunConfig]  # per seed, its draw (its split seed)
    arms: list[str]
    options: dict[str, dict[str, Any]]
    mode: str
    arms_dir: Path
    cache: Path  # the comparison's shared cache, reached through the executor's `cache_opener`
    backend_factory: BackendFactory
    data: Task | None  # in-memory data, drawn again per seed


@dataclass(frozen=True)
class ArmJob:
    """One arm-seed for a worker: the comparison's worker bench, and its shared cache as the worker reaches it."""

    bench: WorkerBench
    arm_seed: ArmSeed
    open_cache: Callable[[], ResultCache]


def run_job(job: ArmJob, stop: StopRequest) -> Path:
    """Run one arm-seed in a worker: its own model (from the factory), model watch and connection to
    the shared cache, and a first signal stops it as it stops an arm of --jobs 1; the arm's directory
    (with arm.json) is the result."""
    worker_bench, arm_seed = job.bench, job.arm_seed
    if not worker_bench.arms_dir.is_dir():
        raise UserError(f"{worker_bench.arms_dir} is not on {socket.gethostname()}'s file system: a worker on another "
                        f"machine needs the comparison's --runs-dir mounted at the same path")
    config = worker_bench.configs[arm_seed.seed]
    drawn, task, space, coverage, _ = draw_seed(config, worker_bench.arms, worker_bench.options, worker_bench.mode,
                                                config.split_seed, worker_bench.data, check=False)
    backend = worker_bench.backend_factory(drawn)
    shared = job.open_cache()
    try:
        bench = Bench(drawn, task, space, ModelWatch(backend, task), shared, worker_bench.options, coverage,
                      worker_bench.arms_dir, Console(quiet=True), in_memory=worker_bench.data is not None)
        run = run_arm(bench, arm_seed.arm, arm_seed.seed, arm_seed.resume_dir, stop)
        save_arm_run(run)
        return run.run_dir
    finally:
        shared.close()
        backend.close()
