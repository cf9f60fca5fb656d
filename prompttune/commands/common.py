"""What every command shares: its command-line options and its set-up (task, space, run directory)."""

from __future__ import annotations

import argparse
import os
import re
from datetime import datetime, timezone
from pathlib import Path

import yaml

from prompttune.backends.base import Backend
from prompttune.backends.factory import add_backend_arguments, build_backend
from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.search_spaces import SearchSpace, default_space
from prompttune.tasks import SplitSizes, Task, load_task


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by every command that loads a task and a model."""
    parser.add_argument("--task", default="agnews", help="agnews, sst2, or a task YAML file")
    parser.add_argument("--data-dir", help="local data folder (else $PROMPTTUNE_DATA_DIR, else the hub)")
    parser.add_argument("--space", help="search-space YAML file (default: the task's built-in space)")
    add_seed_arguments(parser)
    add_backend_arguments(parser)
    parser.add_argument("--scoring", default="logit",
                        help="logit (default) or generate; evaluate also takes calibrated")
    add_split_arguments(parser)
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("--cache", help="shared SQLite cache file (default: one per run)")


def add_seed_arguments(parser: argparse.ArgumentParser) -> None:
    """One meaning in every command: --seed drives the search, --split-seed the data."""
    parser.add_argument("--seed", type=int, default=0, help="search seed: sampling, proposals (default 0)")
    parser.add_argument("--split-seed", type=int, default=0, help="seed of the train/dev/test draw (default 0)")


def add_split_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--train-size", type=int, default=1000)
    parser.add_argument("--dev-size", type=int, default=300)
    parser.add_argument("--test-size", type=int, default=1000)


def parse_option(text: str) -> tuple[str, object]:
    """`KEY=VALUE` (the value read as YAML)."""
    if "=" not in text:
        raise UserError(f"--option expects KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), yaml.safe_load(value)


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

    space = load_space_file(config.space, task)
    check_space_fits(space, task, config.space)
    return space


def check_space_fits(space: SearchSpace, task: Task, where: str) -> None:
    """Placeholders the renderer knows and fields the task has: anything else would be used literally
    or do nothing, silently."""
    slots = {d.target.partition(":")[2] for d in space.dimensions if d.target.startswith("slot:")}
    texts = [space.base.instruction, *(str(v) for d in space.dimensions if d.target == "instruction" for v in d.values)]
    for text in texts:
        for name in re.findall(r"\{(\w+)\}", text):
            if name != "labels" and name not in slots:
                raise UserError(f"{where}: instruction {text!r} has the placeholder {{{name}}}, which is neither "
                                f"{{labels}} nor a word slot of the space ({', '.join(sorted(slots)) or 'none'})")
    for dim in space.dimensions:
        kind, _, field = dim.target.partition(":")
        if kind == "input" and field not in task.input_fields:
            raise UserError(f"{where}: dimension {dim.name!r} targets input field {field!r}, which task "
                            f"{task.name!r} lacks (it has {', '.join(task.input_fields)})")


def check_paths(config: RunConfig) -> None:
    """The cache file and the runs folder must be usable before any model loads or run directory appears."""
    if config.cache and Path(config.cache).is_dir():
        raise UserError(f"--cache {config.cache} is a directory; name a file (it is created if missing)")
    runs = Path(config.runs_dir)
    if runs.exists() and not runs.is_dir():
        raise UserError(f"--runs-dir {runs} is a file, not a folder")
    probe = next((p for p in (runs, *runs.parents) if p.exists()), Path("."))
    if not os.access(probe, os.W_OK):
        raise UserError(f"--runs-dir {runs}: cannot write in {probe}")


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


