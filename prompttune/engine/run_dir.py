"""The one run-directory opener behind `optimize`, `compare` and `evaluate`.

Each command holds its model and writes a directory the reports and `--resume` read back; opening both
here means every command writes its config.json the same way (atomically: a kill leaves the old file or
the new, never half of one, so a resume never reads a torn config) and releases every backend it built
however it ends, while a backend the caller passed stays the caller's to close.
"""

from __future__ import annotations

from contextlib import ExitStack, closing, contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

from prompttune.backends.backend import Backend
from prompttune.backends.factory import build_backend, loading
from prompttune.core.config import RunConfig
from prompttune.core.provenance import record_code
from prompttune.core.run_files import write_config
from prompttune.engine.setup import RUN_DIR

BackendFactory = Callable[[RunConfig], Backend]


def new_run_dir(runs_dir: str, label: str) -> Path:
    """`runs_dir/<UTC timestamp>-<label>`, suffixed when two runs start in the same second."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = Path(runs_dir) / f"{stamp}-{label}"
    suffix = 1
    while path.exists():
        path = path.with_name(f"{path.name}-{suffix}")
        suffix += 1
    path.mkdir(parents=True)
    RUN_DIR.set(path)
    return path


def run_label(config: RunConfig, task_name: str) -> str:
    """What names a single run's directory: its task, strategy and seed."""
    return f"{task_name}-{config.optimizer}-s{config.seed}"


class HeldModel:
    """The models a command holds and the opener of its run directory, released when its `open_run` block ends."""

    def __init__(self, backend: Backend, passed: bool, quietly: bool, resources: ExitStack) -> None:
        self.backend = backend
        self.passed = passed  # the caller's backend: reports name it, and it is left open
        self.quietly = quietly
        self._resources = resources

    def hold(self, build: BackendFactory, config: RunConfig) -> Backend:
        """A further backend the command builds (a proposer model), closed with the first."""
        with loading(config, quietly=self.quietly):
            return self._resources.enter_context(closing(build(config)))

    def directory(self, runs_dir: str, label: str, settings: str, resume_dir: Path | None = None) -> Path:
        """Create `runs_dir/<stamp>-<label>`, or take `resume_dir` back, and write `settings` to its config.json
        atomically, with this process's code provenance appended to code.jsonl."""
        path = resume_dir or new_run_dir(runs_dir, label)
        write_config(path, settings)
        record_code(path)
        return path


@contextmanager
def open_run(config: RunConfig, backend: Backend | None = None, *, build: BackendFactory = build_backend,
             quietly: bool = True) -> Iterator[HeldModel]:
    """Hold `backend`, or one `build` makes from `config` (its loading output hidden when `quietly`), for the
    block; a built one is closed when the block ends, finished or failed."""
    with ExitStack() as resources:
        passed = backend is not None
        if backend is None:
            with loading(config, quietly=quietly):
                backend = resources.enter_context(closing(build(config)))
        yield HeldModel(backend, passed, quietly, resources)
