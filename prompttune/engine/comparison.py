"""`compare`: several strategies × seeds under one cap, on one model, judged on one test split.

A comparison is a `CompareRequest` run in four steps (`prompttune.engine.compare_steps`): open the run
directory and the model (reading back the arms an interrupted comparison finished), run the arms, judge
them, record the reports. Every arm runs through the run engine (`run_study`) like any run, prompttune's
optimizers and DSPy's alike, in this process on ONE loaded backend or in workers with a model each
(`prompttune.engine.arm_executors`). They share the SQLite cache (nothing is computed twice) but each run sees
it through its own `MeteredCache`, so a hit on another run's entry is charged as if the run had made the call
itself.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console

from prompttune.backends.backend import Backend
from prompttune.backends.factory import build_backend
from prompttune.comparing.coverage import plan_coverage
from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.core.run_files import CONFIG, SUMMARY, read_config
from prompttune.engine.arm_runs import draw_seed
from prompttune.engine.compare_request import CompareRequest, check_compare
from prompttune.engine.compare_steps import (
    compare_result,
    judge_compare,
    kept_for_resume,
    open_compare,
    record_compare,
    run_arms,
)
from prompttune.engine.run_dir import BackendFactory
from prompttune.engine.setup import RUN_DIR
from prompttune.results.compare import CompareResult
from prompttune.tasks.task import Task


def run_compare(request: CompareRequest) -> CompareResult:
    """Run `request` (see `CompareRequest`): checked before any model loads, then open → run arms → judge →
    record. A signal or an outage while the arms run or are judged keeps the finished arms for `compare --resume`."""
    started = time.time()
    config, draws = check_compare(request)
    with open_compare(request, config, draws, request.backend_factory or build_backend) as opened:
        with kept_for_resume(opened):
            judged = judge_compare(opened, run_arms(opened))
        return record_compare(opened, compare_result(opened, judged, started))


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
    if (run_dir / SUMMARY).is_file() and not add:
        raise UserError(f"{run_dir} finished already ({SUMMARY} exists); nothing to resume")
    saved = read_config(run_dir)
    if not isinstance(saved, dict) or not {"run", "optimizers", "seeds", "options", "mode", "match"} <= saved.keys():
        raise UserError(f"{run_dir} is not a compare run directory (its {CONFIG} is an optimize run's?)")
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
    return run_compare(CompareRequest(
        config, arms, saved["seeds"], options, mode=saved["mode"], match=saved["match"],
        allow_underspend=saved.get("allow_underspend", False), native_demos=config.native_demos,
        check_generation=config.check_generation, data=data, backend=backend, backend_factory=backend_factory,
        jobs=jobs, executor=executor, resume_dir=run_dir, progress=progress, console=console))


def _same_coverage(config: RunConfig, before: list[str], after: list[str], options: dict[str, dict[str, Any]],
                   mode: str, data: Task | None) -> None:
    """An added arm may not change what the others search (same-space mode shares the dimensions
    every arm can search): their runs would no longer be comparable with its."""
    space = draw_seed(config, after, options, mode, config.split_seed, data, check=False).space
    old, new = plan_coverage(before, space, mode, options), plan_coverage(after, space, mode, options)
    if changed := [arm for arm in before if old[arm].searched != new[arm].searched]:
        raise UserError(f"adding {', '.join(a for a in after if a not in before)} would change what "
                        f"{', '.join(changed)} search(es) in {mode} mode; start a new comparison instead")
