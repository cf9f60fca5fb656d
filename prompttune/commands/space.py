"""`prompttune space show [FILE]` (dimensions and size) and `prompttune space sample [FILE] --sample N`.

Without FILE both show the space `optimize --task` searches without `--space`: the one derived around the
task's prompt (or `--prompt FILE`), else the built-in one. Both load the task with the same split options
as `optimize`, so `sample` shows exactly the prompts (demos included) that an optimize run with the same
options would evaluate. Given no split size, they need none: a task file's data too small for the default
sizes is drawn half, a quarter and a quarter (and the line under the table says so).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from prompttune.commands.common import RUN_DEFAULTS, add_prompt_argument, add_seed_arguments, add_split_arguments
from prompttune.commands.space_report import print_space, write_sample
from prompttune.core.errors import UserError
from prompttune.engine.setup import task_space
from prompttune.search_spaces.loader import parse_space_file
from prompttune.search_spaces.prompt import render, select_demos
from prompttune.search_spaces.space import SearchSpace
from prompttune.tasks import SplitSizes, Task, load_task
from prompttune.tasks.builtin import BUILTIN


def _add_task_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", help="search-space YAML file (default: the space optimize derives for "
                                                "--task, around its prompt where it has one)")
    parser.add_argument("--task", help="agnews, sst2, trec, or a task YAML file (default: the file's `task`)")
    parser.add_argument("--data-dir", help="local data folder (else $PROMPTTUNE_DATA_DIR, else the hub)")
    add_prompt_argument(parser)
    add_seed_arguments(parser)
    add_split_arguments(parser)
    parser.set_defaults(train_size=None, dev_size=None, test_size=None)  # none given: sizes that fit the data


def add_parser(subparsers: Any) -> None:
    """Register `space show` and `space sample` on the CLI's sub-command parsers."""
    space = subparsers.add_parser("space", help="inspect a search space: a space file, or the one derived for a task")
    commands = space.add_subparsers(dest="space_command", required=True)
    show = commands.add_parser("show", help="dimension table, size and rules of a space")
    _add_task_options(show)
    show.set_defaults(handler=show_space)
    sample = commands.add_parser("sample", help="render uniformly sampled candidates on real examples")
    _add_task_options(sample)
    sample.add_argument("--sample", "-n", type=int, default=3, metavar="N",
                        help="number of candidates (as `evaluate --sample N`)")
    sample.set_defaults(handler=sample_space)


def _load(args: argparse.Namespace) -> tuple[SearchSpace, Task]:
    if args.file is None and args.task is None:
        raise UserError("give a space FILE or --task (agnews, sst2, trec or a task YAML file) for the space derived for it")
    name = args.task or parse_space_file(args.file).task
    if name is None or (args.task is None and name not in BUILTIN):
        raise UserError(f"{args.file}: pass --task (agnews, sst2, trec or a task YAML file)"
                        + (f"; the space was written for {name!r}" if name else ""))
    given = {"train": args.train_size, "dev": args.dev_size, "test": args.test_size}
    sizes = (None if all(size is None for size in given.values()) else
             SplitSizes(**{split: size if size is not None else getattr(RUN_DEFAULTS, f"{split}_size")
                           for split, size in given.items()}))
    task = load_task(name, args.data_dir, sizes, args.split_seed)
    return task_space(task, args.file, args.prompt), task


def _print_task_notes(task: Task) -> None:
    """The split drawn without sizes, and doubts about the data (a label seen once), under the table."""
    if task.split_note:
        print(f"task {task.name}: splits train {len(task.splits['train'])} / dev {len(task.splits['dev'])} / "
              f"test {len(task.splits['test'])}, {task.split_note}")
    for warning in task.warnings:
        print(f"warning: {warning}", file=sys.stderr)


def show_space(args: argparse.Namespace) -> int:
    space, task = _load(args)
    print_space(space, task)
    _print_task_notes(task)
    return 0


def sample_space(args: argparse.Namespace) -> int:
    if args.sample < 1:
        raise UserError(f"--sample {args.sample}: sample at least one candidate")
    space, task = _load(args)
    rng = np.random.default_rng(args.seed)
    baseline = space.default_candidate()
    train = {e.id: e for e in task.splits["train"]}
    dev = task.splits["dev"]
    for i in range(args.sample):
        candidate = space.build(space.sample(rng))
        example = dev[i % len(dev)]
        prompt = render(candidate.spec, example, select_demos(candidate.spec, train))
        write_sample(sys.stdout, i + 1, args.sample, space, task, baseline, candidate, example, prompt)
    _print_task_notes(task)
    return 0
