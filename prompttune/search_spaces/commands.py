"""`prompttune space show FILE` (dimensions and size) and `prompttune space sample FILE -n N`.

Both load the task with the same split options as `optimize`, so `sample` shows exactly the
prompts (demos included) that an optimize run with the same options would evaluate.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from prompttune.core.errors import UserError
from prompttune.core.types import Prompt
from prompttune.search_spaces.loader import load_space_file, parse_space_file
from prompttune.search_spaces.prompt import render, select_demos
from prompttune.search_spaces.space import SearchSpace
from prompttune.tasks import SplitSizes, Task, load_task
from prompttune.tasks.builtin import BUILTIN

_PREVIEW_CHARS = 70


def _add_task_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="search-space YAML file")
    parser.add_argument("--task", help="agnews, sst2, or a task YAML file (default: the file's `task`)")
    parser.add_argument("--data-dir", help="local data folder (else $PROMPTTUNE_DATA_DIR, else the hub)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--split-seed", type=int, default=0, help="seed of the train/dev/test draw, as in optimize")
    parser.add_argument("--train-size", type=int, default=1000)
    parser.add_argument("--dev-size", type=int, default=300)
    parser.add_argument("--test-size", type=int, default=1000)


def add_space_commands(subparsers: Any) -> None:
    """Register `space show` and `space sample` on the CLI's sub-command parsers."""
    space = subparsers.add_parser("space", help="inspect a search-space file")
    commands = space.add_subparsers(dest="space_command", required=True)
    show = commands.add_parser("show", help="dimension table, size and rules of a space")
    _add_task_options(show)
    show.set_defaults(handler=show_space)
    sample = commands.add_parser("sample", help="render uniformly sampled candidates on real examples")
    _add_task_options(sample)
    sample.add_argument("-n", type=int, default=3, help="number of candidates")
    sample.set_defaults(handler=sample_space)


def _load(args: argparse.Namespace) -> tuple[SearchSpace, Task]:
    name = args.task or parse_space_file(args.file).task
    if name is None or (args.task is None and name not in BUILTIN):
        raise UserError(f"{args.file}: pass --task (agnews, sst2 or a task YAML file)"
                        + (f"; the space was written for {name!r}" if name else ""))
    task = load_task(name, args.data_dir, SplitSizes(args.train_size, args.dev_size, args.test_size),
                     args.split_seed)
    return load_space_file(args.file, task), task


def _preview(space: SearchSpace, name: str) -> str:
    dim = space.dimension(name)
    baseline = space.default[name]
    shown = ", ".join(("*" if i == baseline else "") + dim.label(i) for i in range(len(dim.values)))
    return shown if len(shown) <= _PREVIEW_CHARS else shown[:_PREVIEW_CHARS - 1] + "…"


def show_space(args: argparse.Namespace) -> int:
    space, task = _load(args)
    table = Table(title=f"space {space.name} · task {task.name}  (* = baseline)")
    for column in ("dimension", "kind", "values", "choices"):
        table.add_column(column, justify="right" if column == "values" else "left")
    for dim in space.dimensions:
        table.add_row(Text(dim.name), dim.kind, str(len(dim.values)), Text(_preview(space, dim.name)))
    console = Console()
    console.print(table)
    console.print(Text(f"nominal size (product of values): {space.nominal_size():,}"))
    console.print(Text(f"valid candidates: {space.size()}"))
    for rule in space.constraints:
        console.print(Text(f"  rule: {rule.describe()}"))
    return 0


def _show_prompt(prompt: Prompt) -> str:
    if prompt.messages is None:
        return prompt.text or ""
    turns = [f"<{role}>\n{content}" for role, content in prompt.messages]
    return "\n".join([*turns, f"<assistant>\n{prompt.assistant_prefix}"])


def sample_space(args: argparse.Namespace) -> int:
    space, task = _load(args)
    rng = np.random.default_rng(args.seed)
    baseline = space.default_candidate()
    train = {e.id: e for e in task.splits["train"]}
    dev = task.splits["dev"]
    out = sys.stdout
    for i in range(args.n):
        candidate = space.build(space.sample(rng))
        example = dev[i % len(dev)]
        prompt = render(candidate.spec, example, select_demos(candidate.spec, train))
        out.write(f"=== sample {i + 1}/{args.n} · candidate {candidate.id} · example {example.id} "
                  f"(gold {task.labels[example.label]})\n")
        out.write(f"--- change from baseline: {space.diff(baseline, candidate)}\n")
        out.write(_show_prompt(prompt) + "\n")
        out.write(f"--- scored continuations: {', '.join(map(repr, prompt.label_continuations))}\n\n")
    return 0
