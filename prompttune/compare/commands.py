"""`prompttune compare …`: the command-line entry of a matched-budget comparison."""

from __future__ import annotations

import argparse
from typing import Any

import yaml

from prompttune.core.errors import UserError


def parse_options(texts: list[str]) -> dict[str, dict[str, Any]]:
    """`OPTIMIZER.KEY=VALUE` settings (values read as YAML), grouped by optimizer."""
    options: dict[str, dict[str, Any]] = {}
    for text in texts:
        key, sep, value = text.partition("=")
        arm, dot, name = key.strip().partition(".")
        if not sep or not dot or not arm or not name:
            raise UserError(f"--option expects OPTIMIZER.KEY=VALUE (e.g. sh.eta=3), got {text!r}")
        options.setdefault(arm, {})[name.strip()] = yaml.safe_load(value)
    return options


def _compare(args: argparse.Namespace) -> int:
    from prompttune.backends.factory import backend_options
    from prompttune.compare.run import run_compare
    from prompttune.core.config import RunConfig

    if args.seeds < 1:
        raise UserError("--seeds must be at least 1")
    arms = [name.strip() for name in args.optimizers.split(",") if name.strip()]
    if not arms:
        raise UserError("--optimizers names no optimizer")
    config = RunConfig(
        task=args.task, data_dir=args.data_dir, space=args.space, budget=args.budget,
        budget_tokens=args.budget_tokens, seed=args.seed, split_seed=args.split_seed, scoring=args.scoring,
        train_size=args.train_size, dev_size=args.dev_size, test_size=args.test_size,
        runs_dir=args.runs_dir, cache=args.cache, **backend_options(args))
    result = run_compare(config, arms, list(range(args.seed, args.seed + args.seeds)), parse_options(args.option))
    failed = [check.claim for check in result.checks if not check.ok]
    if failed:
        print(f"fairness check failed: {'; '.join(failed)}; report: {result.run_dir / 'report.md'}")
        return 1
    best = max(result.summaries, key=lambda s: s.accuracy)
    print(f"{len(arms)} optimizers × {args.seeds} seeds at {args.budget} calls: best mean test accuracy "
          f"{best.accuracy:.3f} ({best.arm}), baseline {result.runs[0].confirmation.baseline_accuracy:.3f}; "
          f"report: {result.run_dir / 'report.md'}")
    return 0


def add_compare_commands(commands: argparse._SubParsersAction) -> None:
    """Register `compare` on the `prompttune` sub-command parser."""
    from prompttune.cli import add_run_arguments  # here, not at import: cli imports this module

    compare = commands.add_parser("compare", help="run several optimizers under the same budget, model "
                                  "and splits; compare their held-out results")
    add_run_arguments(compare)
    compare.add_argument("--optimizers", default="random,sh",
                         help="comma-separated: prompttune optimizers and dspy-mipro, dspy-bfrs")
    compare.add_argument("--seeds", type=int, default=3, help="optimizer seeds per arm: --seed, --seed+1, …")
    compare.add_argument("--budget", type=int, default=2000, help="hard cap on search-time model calls per run")
    compare.add_argument("--budget-tokens", type=int, help="optional hard cap on search-time tokens per run")
    compare.add_argument("--option", action="append", default=[], metavar="OPTIMIZER.KEY=VALUE",
                         help="optimizer option, e.g. sh.eta=3 or dspy-mipro.num_trials=8 (repeatable)")
    compare.set_defaults(handler=_compare)
