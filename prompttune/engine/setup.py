"""The set-up every run shares, checked before any model loads: task, space, optimizer, paths, run directory."""

from __future__ import annotations

import tempfile
from contextvars import ContextVar
from dataclasses import replace
from pathlib import Path

from prompttune.backends.backend import Backend
from prompttune.backends.factory import build_backend, check_backend
from prompttune.core.config import RunConfig, Serve
from prompttune.core.errors import UserError
from prompttune.core.types import input_words
from prompttune.optimizers import SearchContext
from prompttune.scoring import contract
from prompttune.search_spaces import SearchSpace, default_space
from prompttune.statistics import Objective
from prompttune.statistics.stats import AcceptRule
from prompttune.tasks import Task
from prompttune.tasks.user_prompt import read_prompt_file

RUN_DIR: ContextVar[Path | None] = ContextVar("run_dir", default=None)
"""The run directory the command is writing (the newest, when it makes several): where the CLI leaves the
traceback of a crash."""

SQLITE_HEADER = b"SQLite format 3\x00"


def proposer_config(config: RunConfig) -> RunConfig:
    return config.model_copy(update={"model": config.proposer_model})


def build_proposer_backend(config: RunConfig) -> Backend:
    return build_backend(proposer_config(config))


def check_proposer_backend(config: RunConfig) -> None:
    """A bad --proposer-model fails before the task model spends its load time."""
    if config.proposer_model:
        check_backend(proposer_config(config))


def run_contract(config: RunConfig, task: Task) -> tuple[Serve, bool]:
    """The run's serving contract (--serve/the API's, else the task file's, else the default) and whether one
    was declared."""
    return contract.resolve(config.serve, task.serve)


def require_dev_budget(config: RunConfig, task: Task) -> None:
    """A search must afford at least one full dev evaluation."""
    dev_n = len(task.splits["dev"])
    if config.budget < dev_n:
        raise UserError(f"budget {config.budget} too small: one full dev evaluation needs {dev_n} calls; raise "
                        f"--budget to at least {contract.least_budget(dev_n, dev_n)} or lower --dev-size")


def search_context(config: RunConfig, task: Task, space: SearchSpace, objective: Objective | None = None) -> SearchContext:
    """What the run's optimizer may see: the space bound to train, train and dev ids (never test),
    the objective (a callable replaces the named one), the ceiling on prompt tokens."""
    train, dev = task.splits["train"], task.splits["dev"]
    serve = run_contract(config, task)[0]
    return SearchContext(space.bind(train), [ex.id for ex in train], [ex.id for ex in dev],
                         len(task.labels), objective or config.objective, config.seed, config.budget,
                         dict(config.optimizer_options), AcceptRule(alpha=config.dev_alpha),
                         max_prompt_tokens=config.max_prompt_tokens,
                         dev_input_words=[input_words(ex) for ex in dev], serve=serve, label_offsets=serve != "generate")


def task_space(task: Task, space_file: str | None, prompt_file: str | None) -> SearchSpace:
    """The `--space` file, else the space prompttune builds for the task: around the user's prompt (`--prompt`
    file, else the task's own) where there is one, bound to the train split. `--prompt` and `--space` each set
    the baseline: one at a time. The task file's frozen texts hold whichever baseline is searched."""
    if space_file is not None and prompt_file is not None:
        raise UserError(f"--prompt {prompt_file} and --space {space_file} both set the baseline: give --prompt to "
                        f"search the space derived around your prompt, or --space for the space file's own baseline")
    frozen = task.prompt.frozen if task.prompt is not None else ()
    if space_file is None:
        if prompt_file is not None:
            given = read_prompt_file(prompt_file)
            task = replace(task, prompt=replace(given, frozen=tuple(dict.fromkeys([*frozen, *given.frozen]))))
        return default_space(task).bind(task.splits["train"])
    from prompttune.search_spaces.loader import load_space_file

    return load_space_file(space_file, task).freezing(frozen, f"the task's frozen texts, with --space {space_file}")


def load_space(config: RunConfig, task: Task) -> SearchSpace:
    """The space the run searches (`task_space`), with few-shot demos added up to `config.native_demos`
    where it declares none, the chat template on or off under `serve: generate` where prompttune built the
    space (a `--space` file says itself what is searched), and only `config.dimensions` searchable when it
    names some."""
    space = task_space(task, config.space, config.prompt).with_demos(config.native_demos)
    if config.space is None and run_contract(config, task)[0] == "generate":
        space = space.with_chat_toggle()
    return space.searching_only(config.dimensions) if config.dimensions is not None else space


def check_paths(runs_dir: str, cache: str | None) -> None:
    """The cache file and the runs folder must be usable before any model loads or run directory appears."""
    if cache:
        path = Path(cache)
        if path.is_dir():
            raise UserError(f"--cache {cache} is a directory; name a file (it is created if missing)")
        if not path.parent.exists():
            raise UserError(f"--cache {cache}: the folder {path.parent} does not exist")
        if not path.parent.is_dir():
            raise UserError(f"--cache {cache}: {path.parent} is not a folder")
        if path.is_file() and path.stat().st_size:
            with open(path, "rb") as f:
                if f.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
                    raise UserError(f"--cache {cache} is not an SQLite database (a cache written by prompttune)")
        _check_writable("--cache", cache, path.parent)
    runs = Path(runs_dir)
    if runs.exists() and not runs.is_dir():
        raise UserError(f"--runs-dir {runs} is a file, not a folder")
    existing = next((p for p in (runs, *runs.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        raise UserError(f"--runs-dir {runs}: {existing} is not a folder")
    _check_writable("--runs-dir", runs_dir, existing)


def _check_writable(option: str, value: str, folder: Path) -> None:
    """Create and remove a file in `folder`: the only test that holds for root, read-only mounts and /proc alike."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise UserError(f"{option} {value}: cannot write in {folder} ({exc.strerror or exc})") from None




def point_latest(run_dir: Path) -> None:
    """`RUNS_DIR/latest` names the run that finished last, so the next command can say `runs/latest`."""
    latest = run_dir.parent / "latest"
    staged = run_dir.parent / f".latest-{run_dir.name}"
    staged.unlink(missing_ok=True)
    staged.symlink_to(run_dir.name)
    staged.replace(latest)
