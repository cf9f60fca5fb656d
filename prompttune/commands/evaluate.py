"""`evaluate`: parse the options, score the prompt set with progress, print the headline."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from prompttune.backends.factory import backend_options
from prompttune.commands.common import (
    add_class_loss_margin_argument,
    add_json_argument,
    add_run_arguments,
    print_json,
)
from prompttune.engine.evaluate import run_evaluation
from prompttune.reports import reports_of
from prompttune.results.evaluate import EvaluateConfig, EvaluationResult


def evaluation_json(result: EvaluationResult) -> dict[str, Any]:
    """`evaluate --json`: each prompt's scores under each scoring, the set's spread, the classes a prompt
    loses against the first beyond the margin, the spend."""
    return {"run_dir": str(result.run_dir), "split": result.config.split, "examples": len(result.example_ids),
            "calls": result.ledger.calls, "tokens": result.ledger.tokens,
            "settings": [{"scoring": setting.scoring,
                          "summary": {"min": min(setting.summary.accuracies), "max": setting.summary.max_p,
                                      "avg": setting.summary.avg_p, "cps": setting.summary.cps},
                          "prompts": [{"name": prompt.name, "accuracy": score.accuracy,
                                       "accuracy_ci": score.accuracy_ci, "valid_rate": score.valid_rate,
                                       "macro_f1": score.macro_f1}
                                      for prompt, score in zip(result.prompts, setting.scores)],
                          "class_losses": [asdict(loss) for loss in setting.per_class.losses]}
                         for setting in result.settings]}


def _contract(args: argparse.Namespace) -> dict[str, str]:
    """`--serve` sets the scoring it implies; `--scoring` alone is evaluate's own (logit, generate, calibrated)."""
    return {key: value for key, value in (("serve", args.serve), ("scoring", args.scoring)) if value}


def _evaluate(args: argparse.Namespace) -> int:
    config = EvaluateConfig(
        task=args.task, data_dir=args.data_dir, prompts=args.prompts, space=args.space, prompt=args.prompt,
        sample=args.sample, split=args.split, **_contract(args), calibrate=args.calibrate, ensemble=args.ensemble,
        posix=args.posix, posix_size=args.posix_size, top_k=args.top_k, class_loss_margin=args.class_loss_margin,
        budget=args.budget,
        max_new_tokens=args.max_new_tokens, seed=args.seed, split_seed=args.split_seed,
        train_size=args.train_size, dev_size=args.dev_size, test_size=args.test_size, runs_dir=args.runs_dir,
        cache=args.cache, **backend_options(args))
    result = run_evaluation(config, progress=True)
    if args.json:
        print_json(evaluation_json(result))
        return 0
    first = result.settings[0].summary
    print(f"{len(result.prompts)} prompts on {len(result.example_ids)} {config.split} examples: "
          f"{result.settings[0].scoring} accuracy {min(first.accuracies):.3f}–{first.max_p:.3f} "
          f"(AvgP {first.avg_p:.3f}, CPS {first.cps:.3f}), {result.ledger.calls} calls; "
          f"reports: {reports_of(result.run_dir)}")
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:
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
    add_class_loss_margin_argument(ev, "recall under a prompt", "the first prompt")
    add_json_argument(ev)
    ev.set_defaults(handler=_evaluate)
