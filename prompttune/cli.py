"""Command line: `optimize ...`, `evaluate ...` and `prompttune <command> ...`.

Bad input ends in one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

import yaml
from pydantic import ValidationError

from prompttune.backends.factory import add_backend_arguments, backend_options
from prompttune.errors import UserError
from prompttune.search_spaces.commands import add_space_commands

EXIT_USAGE = 2


def _parse_option(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise UserError(f"--option expects KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), yaml.safe_load(value)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by every command that loads a task and a model."""
    parser.add_argument("--task", default="agnews", help="agnews, sst2, or a task YAML file")
    parser.add_argument("--data-dir", help="local data folder (else $PROMPTTUNE_DATA_DIR, else the hub)")
    parser.add_argument("--space", help="search-space YAML file (default: the task's built-in space)")
    parser.add_argument("--seed", type=int, default=0)
    add_backend_arguments(parser)
    parser.add_argument("--scoring", default="logit",
                        help="logit (default) or generate; evaluate also takes calibrated")
    parser.add_argument("--train-size", type=int, default=1000)
    parser.add_argument("--dev-size", type=int, default=300)
    parser.add_argument("--test-size", type=int, default=1000)
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("--cache", help="shared SQLite cache file (default: one per run)")


def _optimize(args: argparse.Namespace) -> int:
    from prompttune.config import RunConfig
    from prompttune.runner import run_optimization

    config = RunConfig(
        task=args.task, data_dir=args.data_dir, space=args.space, optimizer=args.optimizer,
        optimizer_options=dict(_parse_option(o) for o in args.option), budget=args.budget,
        budget_tokens=args.budget_tokens, seed=args.seed, split_seed=args.split_seed,
        scoring=args.scoring, objective=args.objective, alpha=args.alpha, confirm_top=args.confirm_top,
        dev_alpha=args.dev_alpha, proposer_model=args.proposer_model,
        train_size=args.train_size, dev_size=args.dev_size, test_size=args.test_size,
        runs_dir=args.runs_dir, cache=args.cache, **backend_options(args))
    result = run_optimization(config)
    leader = result.verdict.leader_confirmation
    print(f"baseline test accuracy {leader.baseline_accuracy:.3f}, dev winner {leader.best_accuracy:.3f}, "
          f"one-sided McNemar p {leader.comparison.p_one_sided:.4g}; {result.verdict.summary()}; "
          f"budget used {result.search_ledger.calls}/{config.budget}; report: {result.run_dir / 'report.md'}")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from prompttune.evaluation.prompt_set import EvaluateConfig, run_evaluation

    config = EvaluateConfig(
        task=args.task, data_dir=args.data_dir, prompts=args.prompts, space=args.space, sample=args.sample,
        split=args.split, scoring=args.scoring, calibrate=args.calibrate, ensemble=args.ensemble,
        posix=args.posix, posix_size=args.posix_size, top_k=args.top_k, budget=args.budget,
        max_new_tokens=args.max_new_tokens, seed=args.seed, train_size=args.train_size, dev_size=args.dev_size,
        test_size=args.test_size, runs_dir=args.runs_dir, cache=args.cache, **backend_options(args))
    result = run_evaluation(config)
    first = result.settings[0].summary
    print(f"{len(result.prompts)} prompts on {len(result.example_ids)} {config.split} examples: "
          f"{result.settings[0].scoring} accuracy {min(first.accuracies):.3f}–{first.max_p:.3f} "
          f"(AvgP {first.avg_p:.3f}, CPS {first.cps:.3f}), {result.ledger.calls} calls; "
          f"report: {result.run_dir / 'report.md'}")
    return 0


def add_evaluate_parser(commands: argparse._SubParsersAction) -> None:
    ev = commands.add_parser("evaluate", help="score a set of prompts on held-out data; measure "
                             "how much the wording matters")
    add_run_arguments(ev)
    ev.add_argument("--prompts", help="prompts file: YAML/JSON list of templates with {text} (and {labels})")
    ev.add_argument("--sample", type=int, metavar="N",
                    help="evaluate N distinct candidates drawn from --space (default: the built-in space)")
    ev.add_argument("--split", default="test", help="dev or test (default test: an evaluation, not a search)")
    ev.add_argument("--calibrate", action="store_true",
                    help="also score with contextual calibration and compare the rankings")
    ev.add_argument("--ensemble", type=int, metavar="K", help="template ensembles of K prompts each")
    ev.add_argument("--posix", action="store_true", help="POSIX prompt sensitivity (generates and re-scores)")
    ev.add_argument("--posix-size", type=int, default=10,
                    help="examples used for POSIX; costs prompts² scored responses each (default 10)")
    ev.add_argument("--top-k", type=int, default=3, help="k of the top-k IoU between two scorings")
    ev.add_argument("--budget", type=int, help="optional hard cap on model calls")
    ev.add_argument("--max-new-tokens", type=int, default=16, help="generation length (generate, POSIX)")
    ev.set_defaults(handler=_evaluate)


def build_parser() -> argparse.ArgumentParser:
    from prompttune.compare.commands import add_compare_commands
    from prompttune.export import add_export_command
    from prompttune.htmlreport import add_report_command

    parser = argparse.ArgumentParser(prog="prompttune", description="Automatic prompt optimization "
                                     "with honest, held-out verdicts.")
    commands = parser.add_subparsers(dest="command", required=True)
    opt = commands.add_parser("optimize", help="search a prompt space under a budget, confirm on test")
    add_run_arguments(opt)
    opt.add_argument("--optimizer", default="random")
    opt.add_argument("--budget", type=int, default=2000, help="hard cap on search-time model calls")
    opt.add_argument("--budget-tokens", type=int, help="optional hard cap on search-time tokens")
    opt.add_argument("--objective", default="accuracy",
                     help="accuracy, macro_f1, valid_rate or service_accuracy")
    opt.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                     help="optimizer option (repeatable)")
    opt.add_argument("--alpha", type=float, default=0.05,
                     help="level of the one held-out test that decides what ships (default 0.05)")
    opt.add_argument("--confirm-top", type=int, default=1, metavar="K",
                     help="test the top K dev candidates on test with Holm over K (default 1)")
    opt.add_argument("--dev-alpha", type=float, default=0.10,
                     help="family-wise false-accept level of each sweep of dev challenges (cople, p2g)")
    opt.add_argument("--proposer-model", help="model that writes instructions/critiques (default: the task model)")
    opt.add_argument("--split-seed", type=int, default=0, help="seed of the train/dev/test draw")
    opt.set_defaults(handler=_optimize)
    add_evaluate_parser(commands)
    add_space_commands(commands)
    add_compare_commands(commands)
    add_export_command(commands)
    add_report_command(commands)
    return parser


def _run(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        return handler(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
    except ValidationError as exc:
        err = exc.errors()[0]
        print(f"error: invalid option {'.'.join(map(str, err['loc']))}: {err['msg']}", file=sys.stderr)
    except KeyboardInterrupt:
        print("interrupted: trials so far are in the run directory", file=sys.stderr)
        return 130
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return _run(args.handler, args)


def optimize_main(argv: Sequence[str] | None = None) -> int:
    return main(["optimize", *(sys.argv[1:] if argv is None else argv)])


def evaluate_main(argv: Sequence[str] | None = None) -> int:
    return main(["evaluate", *(sys.argv[1:] if argv is None else argv)])


def compare_main(argv: Sequence[str] | None = None) -> int:
    return main(["compare", *(sys.argv[1:] if argv is None else argv)])
