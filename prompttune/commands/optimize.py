"""`optimize`: parse the options, run the engine with progress and signal handling, print the result."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

from prompttune.backends.factory import backend_options
from prompttune.commands.common import add_run_arguments, parse_option
from prompttune.core.config import RunConfig
from prompttune.core.errors import BackendUnavailable
from prompttune.core.interrupt import resumable_outage
from prompttune.dspy_bridge import DSPY_ARMS, require_dspy
from prompttune.engine.results import RunResult
from prompttune.engine.study import resume_study, run_study


def _with_resume_hint(run: Callable[[], RunResult]) -> RunResult:
    """Run; an outage's one line also says how to finish the run it stopped."""
    try:
        return run()
    except BackendUnavailable as exc:
        if exc.run_dir is None:
            raise
        raise resumable_outage(exc, f"optimize --resume {exc.run_dir}") from None


def _point_latest(run_dir: Path) -> None:
    """`RUNS_DIR/latest` names the run that finished last, so the next command can say `runs/latest`."""
    latest = run_dir.parent / "latest"
    staged = run_dir.parent / f".latest-{run_dir.name}"
    staged.unlink(missing_ok=True)
    staged.symlink_to(run_dir.name)
    staged.replace(latest)


def _optimize(args: argparse.Namespace) -> int:
    from prompttune.optimizers import get_optimizer
    from prompttune.optimizers.base import describe_options

    if args.resume:
        result = _with_resume_hint(lambda: resume_study(Path(args.resume), progress=True, handle_signals=True))
        _point_latest(result.run_dir)
        print(f"resumed {args.resume}: {result.verdict.summary()}; budget used {result.search_ledger.calls}/"
              f"{result.search_ledger.cap_calls}; report: {result.run_dir / 'report.md'}")
        return 0
    if args.help_options:
        if args.optimizer in DSPY_ARMS:
            require_dspy(f"--optimizer {args.optimizer}")
            from prompttune.dspy_bridge.optimizers import DSPY_OPTIMIZERS
            options = DSPY_OPTIMIZERS[args.optimizer].Options
        else:
            options = get_optimizer(args.optimizer).Options
        print(f"options of {args.optimizer} (--option KEY=VALUE):")
        print("\n".join(f"  {line}" for line in describe_options(options)))
        return 0
    config = RunConfig(
        task=args.task, data_dir=args.data_dir, space=args.space, prompt=args.prompt, optimizer=args.optimizer,
        optimizer_options=dict(parse_option(o) for o in args.option), budget=args.budget,
        budget_tokens=args.budget_tokens, seed=args.seed, split_seed=args.split_seed,
        scoring=args.scoring, objective=args.objective, alpha=args.alpha, confirm_top=args.confirm_top,
        dev_alpha=args.dev_alpha, check_generation=args.check_generation,
        max_prompt_tokens=args.max_prompt_tokens, class_loss_margin=args.class_loss_margin,
        proposer_model=args.proposer_model,
        train_size=args.train_size, dev_size=args.dev_size, test_size=args.test_size,
        runs_dir=args.runs_dir, cache=args.cache, **backend_options(args))
    result = _with_resume_hint(lambda: run_study(config, progress=True, handle_signals=True))
    _point_latest(result.run_dir)
    leader = result.verdict.leader_confirmation
    print(f"baseline test accuracy {leader.baseline_accuracy:.3f}, dev winner {leader.best_accuracy:.3f}, "
          f"one-sided McNemar p {leader.comparison.p_one_sided:.4g}; {result.verdict.summary()}; "
          f"budget used {result.search_ledger.calls}/{config.budget}; report: {result.run_dir / 'report.md'}")
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:
    opt = commands.add_parser("optimize", help="search a prompt space under a budget, confirm on test")
    add_run_arguments(opt)
    opt.add_argument("--optimizer", default=RunConfig.model_fields["optimizer"].default,
                     help="search strategy (default: %(default)s)")
    opt.add_argument("--budget", type=int, default=2000, help="hard cap on search-time model calls")
    opt.add_argument("--budget-tokens", type=int, help="optional hard cap on search-time tokens")
    opt.add_argument("--objective", default="accuracy",
                     help="accuracy, macro_f1, valid_rate or service_accuracy")
    opt.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                     help="optimizer option (repeatable); --help-options lists them")
    opt.add_argument("--help-options", action="store_true", help="list the options of --optimizer and exit")
    opt.add_argument("--resume", metavar="RUN_DIR", help="finish an interrupted run from its directory (its own "
                     "config; calls it paid for are replayed from its cache and charged once)")
    opt.add_argument("--alpha", type=float, default=0.05,
                     help="level of the one held-out test that decides what ships (default 0.05)")
    opt.add_argument("--confirm-top", type=int, default=1, metavar="K",
                     help="test the top K dev candidates on test with Holm over K (default 1)")
    opt.add_argument("--dev-alpha", type=float, default=0.10,
                     help="family-wise false-accept level of each sweep of dev challenges (cople, p2g)")
    opt.add_argument("--check-generation", type=int, default=0, metavar="N",
                     help="after the verdict, score the shipped prompt and the baseline by generation (greedy "
                          "decoding, label extraction) on the first N test examples, outside the budget (default 0: off)")
    opt.add_argument("--max-prompt-tokens", type=int, metavar="N",
                     help="reject every candidate whose prompt around an empty input (demos included) passes N tokens")
    opt.add_argument("--class-loss-margin", type=float, default=RunConfig.model_fields["class_loss_margin"].default,
                     metavar="M", help="flag a class whose test recall under the shipped prompt (or the dev winner) "
                                       "drops more than M below the baseline's, even when the total wins "
                                       "(default %(default)s)")
    opt.add_argument("--proposer-model", help="model that writes instructions/critiques (default: the task model)")
    opt.set_defaults(handler=_optimize)
