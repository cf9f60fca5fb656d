"""What a comparison is asked to do (`CompareRequest`: the command line, the API and `compare --resume` build
one) and the checks it passes before any model loads (`check_compare`: `run_compare` and `compare --dry-run`
alike), so that bad input is one line before anything is spent.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any, Literal

from rich.console import Console

from prompttune.backends.backend import Backend
from prompttune.comparing.arms import arm_config, check_arms
from prompttune.comparing.fairness import distinct_draws_check
from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.engine.arm_executors import make_executor
from prompttune.engine.arm_runs import Draw, arm_key, draw_seed, split_seeds
from prompttune.engine.run_dir import BackendFactory
from prompttune.engine.setup import check_paths, run_contract
from prompttune.tasks import load_run_task
from prompttune.tasks.task import Task


@dataclass(frozen=True)
class CompareRequest:
    """Every arm of `arms` at every seed of `seeds` under one cap on one model, each seed on its own data draw
    (`split_seeds`) shared by all its arms, judged on that draw's test split."""

    config: RunConfig
    arms: list[str]  # optimizers, or named variants (`options` gives a variant its optimizer)
    seeds: list[int]
    options: dict[str, dict[str, Any]] = field(default_factory=dict)  # per arm, its optimizer's options
    _: KW_ONLY
    mode: str = "same-space"  # what each arm may search of the one space (`prompttune.comparing.coverage`)
    # The budget every arm gets and the checks compare: search calls (`config.budget`), or search tokens
    # (`config.budget_tokens`; the call budget then stays what the optimizers plan with, and a ceiling).
    match: Literal["calls", "tokens"] = "calls"
    allow_underspend: bool = False  # else an arm that spent under 90% of the matched cap fails the budget check
    native_demos: int = 0  # K (native mode only): few-shot k in {0, 2, ..., K} for a space that declares no demos
    check_generation: int = 0  # N > 0: each arm-seed's shipped prompt and baseline served by generation on N
    data: Task | None = None  # in-memory task in place of the config's; each seed draws splits of the same sizes
    backend: Backend | None = None  # the caller's model, left open; else one built from the config
    # `jobs` > 1 or a Ray `executor`: each worker's model, from the config (default: `build_backend`; with
    # `--backend openai` they share the servers), with the same results as one arm-seed at a time here.
    backend_factory: BackendFactory | None = None
    jobs: int = 1
    # `process` (workers on this machine; with `jobs` 1 the arms run in this process) or `ray[:ADDRESS]` (Ray
    # tasks, even with `jobs` 1: the run directory must be at the same path on every node; `engine.ray_executor`).
    executor: str = "process"
    resume_dir: Path | None = None  # an interrupted comparison: finished arms read back, the others resumed
    # The CLI: each arm's progress and summary, and a first SIGINT/SIGTERM finishes the arm's trial in flight and
    # writes its interim report (every worker's arm with `jobs` > 1); a library call prints nothing, leaves signals.
    progress: bool = False
    console: Console | None = None

    @property
    def in_workers(self) -> bool:
        """The arm-seeds run in workers, each with its own model, not on this process's."""
        return self.jobs > 1 or self.executor != "process"


def check_compare(request: CompareRequest) -> tuple[RunConfig, dict[int, Draw]]:
    """Everything a comparison checks before any model loads: the config it runs (with the request's
    `native_demos` and `check_generation`, and the contract resolved) and each seed's draw."""
    if request.in_workers and request.backend is not None and request.backend_factory is None:
        raise UserError("--jobs > 1 or --executor ray gives every worker its own model: pass backend_factory, "
                        "not a backend")
    make_executor(request.executor, request.jobs)  # a bad --jobs or --executor, or Ray missing, before any spend
    _check_settings(request)
    # One contract for every arm (the task file's where the config sets none); `check_generation` (0 unless asked
    # for: `compare --check-generation N`) has each arm-seed's shipped prompt served by generation, descriptively.
    arms, options, data = request.arms, request.options, request.data
    task = data if data is not None else load_run_task(request.config)
    config = request.config.model_copy(update={"native_demos": request.native_demos,
                                               "serve": run_contract(request.config, task)[0],
                                               "check_generation": request.check_generation})
    check_arms(arms, options, config, task)
    if stray := sorted(set(options) - set(arms)):
        raise UserError(f"--option names optimizers not compared: {', '.join(stray)}")
    draws = {seed: draw_seed(config, arms, options, request.mode, split_seed, data)
             for seed, split_seed in split_seeds(config, request.seeds).items()}
    _require_distinct_arms(next(iter(draws.values())), arms, options, request.mode)
    _require_distinct_tests(draws, config.test_size)
    check_paths(config.runs_dir, config.cache)
    return config, draws


def _check_settings(request: CompareRequest) -> None:
    """Settings that contradict each other or are out of range."""
    if request.match == "tokens" and request.config.budget_tokens is None:
        raise UserError("--match tokens needs --budget-tokens: the token cap every arm is matched on")
    if request.native_demos and request.mode != "native":
        raise UserError("--native-demos adds demos to the space for a tool comparison: it needs --mode native")
    if request.check_generation < 0:
        raise UserError(f"--check-generation {request.check_generation}: the test examples served by generation, "
                        f"0 or more")


def _require_distinct_arms(draw: Draw, arms: list[str], options: dict[str, dict[str, Any]], mode: str) -> None:
    """Two arms that would run the same search (a variant whose options the mode holds anyway) are one arm twice,
    and would share one run directory on a resume: refused before any spend."""
    runs: dict[tuple[str, str, int], str] = {}
    for arm in arms:
        same = runs.setdefault(arm_key(arm_config(draw.config, arm, options, draw.coverage)), arm)
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
