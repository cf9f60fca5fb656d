"""`optimize`: parse the options, run the engine with progress and signal handling, print the result."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from prompttune.commands.common import (
    RUN_DEFAULTS,
    add_class_loss_margin_argument,
    add_json_argument,
    add_run_arguments,
    add_search_arguments,
    parse_option,
    print_json,
    run_config,
    spend_json,
)
from prompttune.core.errors import UserError
from prompttune.engine.plan import plan_run
from prompttune.engine.setup import point_latest
from prompttune.engine.study import resume_study, run_study, with_resume_hint
from prompttune.optimizers.registry import lookup, strategies
from prompttune.reports import reports_of
from prompttune.results.run import RunResult
from prompttune.scoring.contract import scored_by


def run_json(result: RunResult) -> dict[str, Any]:
    """`optimize --json`: the verdict, the test accuracies it rests on, the spend and where the run is."""
    verdict, leader = result.verdict, result.verdict.leader_confirmation
    return {"run_dir": str(result.run_dir), "optimizer": result.config.optimizer, "serve": result.config.contract,
            "verdict": verdict.summary(),
            "confirmed": verdict.confirmed is not None, "alpha": verdict.alpha, "test_size": leader.n,
            "baseline_test_accuracy": leader.baseline_accuracy, "dev_winner_test_accuracy": leader.best_accuracy,
            "shipped_test_accuracy": result.confirmation.best_accuracy, "p_value": leader.comparison.p_one_sided,
            "spend": spend_json(result.search_ledger), "verdict_calls": result.confirm_ledger.calls}


def _optimize(args: argparse.Namespace) -> int:
    if args.resume and args.dry_run:
        raise UserError("--dry-run plans a new run; a --resume finishes one with its own settings")
    if args.resume:
        result = with_resume_hint(lambda: resume_study(Path(args.resume), progress=True, handle_signals=True))
        point_latest(result.run_dir)
        if args.json:
            print_json(run_json(result))
            return 0
        print(f"resumed {args.resume}: {result.verdict.summary()}; budget used {result.search_ledger.calls}/"
              f"{result.search_ledger.cap_calls}; reports: {reports_of(result.run_dir)}")
        return 0
    if args.help_options:
        print(f"options of {args.optimizer} (--option KEY=VALUE):")
        print("\n".join(f"  {line}" for line in lookup(args.optimizer).options()))
        return 0
    config = run_config(args, optimizer=args.optimizer, optimizer_options=dict(parse_option(o) for o in args.option),
                        confirm_top=args.confirm_top, dev_alpha=args.dev_alpha, check_generation=args.check_generation,
                        max_prompt_tokens=args.max_prompt_tokens, class_loss_margin=args.class_loss_margin)
    if args.dry_run:
        print("\n".join(plan_run(config).lines()))
        return 0
    result = with_resume_hint(lambda: run_study(config, progress=True, handle_signals=True))
    point_latest(result.run_dir)
    if args.json:
        print_json(run_json(result))
        return 0
    leader = result.verdict.leader_confirmation
    serve = result.config.contract
    print(f"serve {serve}, verdict scored by {scored_by(serve)}: "
          f"baseline test accuracy {leader.baseline_accuracy:.3f}, dev winner {leader.best_accuracy:.3f}, "
          f"one-sided McNemar p {leader.comparison.p_one_sided:.4g}; {result.verdict.summary()}; "
          f"budget used {result.search_ledger.calls}/{config.budget}; reports: {reports_of(result.run_dir)}")
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:
    opt = commands.add_parser("optimize", help="search a prompt space under a budget, confirm on test")
    add_run_arguments(opt)
    opt.add_argument("--optimizer", default=RUN_DEFAULTS.optimizer, metavar="NAME",
                     help=f"search strategy: {', '.join(strategies())} (the dspy-* arms need "
                          "prompttune[dspy])")
    add_search_arguments(opt)
    opt.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                     help="optimizer option (repeatable); --help-options lists them")
    opt.add_argument("--help-options", action="store_true", help="list the options of --optimizer and exit")
    opt.add_argument("--resume", metavar="RUN_DIR", help="finish an interrupted run from its directory (its own "
                     "config; calls it paid for are replayed from its cache and charged once)")
    opt.add_argument("--confirm-top", type=int, default=RUN_DEFAULTS.confirm_top, metavar="K",
                     help="test the top K dev candidates on test with Holm over K")
    opt.add_argument("--dev-alpha", type=float, default=RUN_DEFAULTS.dev_alpha,
                     help="family-wise false-accept level of each sweep of dev challenges (cople, p2g)")
    opt.add_argument("--check-generation", type=int, default=RUN_DEFAULTS.check_generation, metavar="N",
                     help="after the verdict, score the shipped prompt and the baseline by generation (greedy "
                          "decoding, label extraction) on the first N test examples, outside the budget (default "
                          f"{RUN_DEFAULTS.check_generation}; 0: off; serve generate needs none: its verdict generates)")
    opt.add_argument("--max-prompt-tokens", type=int, metavar="N",
                     help="reject every candidate whose prompt around an empty input (demos included) passes N tokens")
    add_json_argument(opt)
    opt.add_argument("--dry-run", action="store_true",
                     help="print the plan (schedule, call and token bounds, a wall-time estimate from a short "
                          "probe of the model) and exit before any search call")
    add_class_loss_margin_argument(opt)
    opt.set_defaults(handler=_optimize)
