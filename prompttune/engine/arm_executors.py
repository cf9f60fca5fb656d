"""Where a comparison's arm-seeds run, behind one interface (`ArmExecutor.run(arm_seeds) -> runs`).

With `--jobs 1` and `--executor process` the arms run one at a time in this process, on its loaded model and
shared cache (`InProcessArms`: a single worker, the comparison itself); otherwise `--jobs` at a time in worker
processes here or in Ray tasks (`WorkerArms` over `prompttune.engine.workers`), each worker with its own model.
Either way each arm-seed's run is saved (arm.json) as it finishes, announced, and handed back, with the same
results.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Callable, Sequence

from prompttune.comparing.arms import Bench
from prompttune.core.errors import UserError
from prompttune.engine.arm_runs import ArmJob, ArmSeed, WorkerBench, run_arm, run_job
from prompttune.engine.workers import Executor, ProcessExecutor
from prompttune.results.arms import ArmRun, load_arm_run, save_arm_run

Announce = Callable[[ArmRun], None]  # told of each arm-seed's run as it finishes (the comparison's progress line)


def make_executor(spec: str, jobs: int) -> Executor:
    """The executor `--executor` names: `process` (worker processes here) or `ray[:ADDRESS]` (Ray tasks: a local
    Ray, the cluster RAY_ADDRESS names, or the one at ADDRESS). Only checks; nothing starts before `run`."""
    kind, colon, address = spec.partition(":")
    if kind == "process" and not colon:
        return ProcessExecutor(jobs)
    if kind == "ray" and (address or not colon):
        from prompttune.engine.ray_executor import RayExecutor  # Ray is an optional extra

        return RayExecutor(jobs, address or None)
    raise UserError(f"--executor expects process, ray or ray:ADDRESS, got {spec!r}")


class ArmExecutor(ABC):
    """Runs arm-seeds; every run is saved (arm.json) as it finishes and then `announce`d, so that an
    interruption keeps the finished ones for `compare --resume`."""

    def __init__(self, announce: Announce) -> None:
        self.announce = announce

    @abstractmethod
    def run(self, arm_seeds: Sequence[ArmSeed]) -> list[ArmRun]:
        """Every arm-seed's run, in the order they finished."""


class InProcessArms(ArmExecutor):
    """One worker, this process: each arm-seed on its seed's bench (the loaded model behind its watch, the shared
    cache), one after another. The arm handles signals itself (`Bench.progress`), as a run alone does."""

    def __init__(self, benches: dict[int, Bench], announce: Announce) -> None:
        super().__init__(announce)
        self.benches = benches

    def run(self, arm_seeds: Sequence[ArmSeed]) -> list[ArmRun]:
        runs = []
        for arm_seed in arm_seeds:
            bench = self.benches[arm_seed.seed]
            bench.backend.watch(bench.task)
            run = run_arm(bench, arm_seed.arm, arm_seed.seed, arm_seed.resume_dir)
            save_arm_run(run)
            self.announce(run)
            runs.append(run)
        return runs


class WorkerArms(ArmExecutor):
    """`workers` run the arm-seeds (`run_job`), each rebuilding its seed's bench and model from the `WorkerBench`;
    the arm directory a job hands back is read here. This process passes its signals on to the workers when
    `handle_signals`, and names `resume_command` when they stop."""

    def __init__(self, workers: Executor, bench: WorkerBench, announce: Announce, handle_signals: bool,
                 resume_command: str) -> None:
        super().__init__(announce)
        self.workers, self.bench = workers, bench
        self.handle_signals, self.resume_command = handle_signals, resume_command

    def run(self, arm_seeds: Sequence[ArmSeed]) -> list[ArmRun]:
        runs: list[ArmRun] = []

        def finished(arm_dir: Path) -> None:
            runs.append(load_arm_run(arm_dir))
            self.announce(runs[-1])
        self.bench.arms_dir.mkdir(exist_ok=True)  # a worker that does not see it runs on another file system
        with self.workers:
            open_cache = self.workers.cache_opener(self.bench.cache)
            jobs = [ArmJob(self.bench, arm_seed, open_cache) for arm_seed in arm_seeds]
            self.workers.run(run_job, jobs, finished, self.handle_signals, self.resume_command)
        return runs
