"""`compare`: parse the options, run the comparison engine with progress, print the headline."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path
from typing import Any

from prompttune.commands.common import (
    add_class_loss_margin_argument,
    add_json_argument,
    add_run_arguments,
    add_search_arguments,
    option_value,
    print_json,
    run_config,
    spend_json,
)
from prompttune.comparing.coverage import MODES
from prompttune.comparing.variants import VARIANT_OF
from prompttune.core.errors import UserError
from prompttune.engine.comparison import CompareRequest, resume_compare, run_compare
from prompttune.engine.plan import plan_compare
from prompttune.optimizers.registry import strategies
from prompttune.reports import reports_of
from prompttune.results.compare import CompareResult


def parse_options(texts: list[str]) -> dict[str, dict[str, Any]]:
    """`OPTIMIZER.KEY=VALUE` settings (values read as YAML), grouped by optimizer."""
    options: dict[str, dict[str, Any]] = {}
    for text in texts:
        key, sep, value = text.partition("=")
        arm, dot, name = key.strip().partition(".")
        if not sep or not dot or not arm or not name:
            raise UserError(f"--option expects OPTIMIZER.KEY=VALUE (e.g. sh.eta=3), got {text!r}")
        options.setdefault(arm, {})[name.strip()] = option_value(text, value)
    return options


def parse_arms(text: str) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """`--optimizers` items: an optimizer's name, or a named variant `NAME=OPTIMIZER:KEY=VALUE:...` (values read as
    YAML, as --option's) that runs OPTIMIZER with those options under its own name; returns the arm names and the
    variants' options (with the optimizer under `VARIANT_OF`)."""
    arms, options = [], {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, spec = (part.strip() for part in item.partition("="))
        if sep:
            optimizer, *settings = (part.strip() for part in spec.split(":"))
            if not name or not optimizer or any("=" not in setting for setting in settings):
                raise UserError(f"--optimizers: a named variant is NAME=OPTIMIZER:KEY=VALUE:... (e.g. "
                                f"reflect-nocal=reflect:calibration=off), got {item!r}")
            if name in strategies() or "." in name:
                raise UserError(f"--optimizers: variant name {name!r} must differ from every optimizer's name and "
                                f"hold no '.' (--option {name}.KEY=VALUE sets its options)")
            options[name] = {VARIANT_OF: optimizer}
            for setting in settings:
                key, _, value = setting.partition("=")
                options[name][key.strip()] = option_value(f"{name}.{setting}", value)
        arms.append(name)
    return arms, options


def _with_variants(options: dict[str, dict[str, Any]], variants: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """--option settings over the variants' own, per arm."""
    return {arm: {**variants.get(arm, {}), **options.get(arm, {})} for arm in {*variants, *options}}


def comparison_json(result: CompareResult) -> dict[str, Any]:
    """`compare --json`: per arm its guarded (what ships after the verdict) and raw (its dev pick) mean test
    accuracies, per seed the classes its pick loses beyond the margin and its spend, the matched cap and
    every fairness check."""
    cap = result.caps[0]
    return {"run_dir": str(result.run_dir), "mode": result.mode, "seeds": result.seeds, "alpha": result.config.alpha,
            "cap": {"unit": cap.unit, "limit": cap.limit},
            "arms": [{"arm": s.arm, "guarded_test_accuracy": s.guarded.accuracy, "guarded_gain": s.guarded.gain,
                      "raw_test_accuracy": s.raw.accuracy, "raw_gain": s.raw.gain,
                      "runs": [{"seed": r.seed, "run_dir": str(r.run_dir),
                                "baseline_test_accuracy": r.confirmation.baseline_accuracy,
                                "shipped_test_accuracy": r.confirmation.best_accuracy,
                                "p_value": r.raw_confirmation.comparison.p_one_sided,
                                "class_losses": [asdict(loss) for loss in r.per_class.losses] if r.per_class else [],
                                "spend": spend_json(r.search)} for r in s.runs]}
                     for s in result.summaries],
            "checks": [{"claim": c.claim, "status": c.status, "detail": c.detail} for c in result.checks]}


def _compare(args: argparse.Namespace) -> int:
    added, added_variants = parse_arms(args.add_optimizers or "")
    if added and not args.resume:
        raise UserError("--add-optimizers adds arms to an earlier comparison: give its directory with --resume")
    if args.resume and args.dry_run:
        raise UserError("--dry-run plans a new comparison; a --resume finishes one with its own settings")
    if args.resume:
        result = resume_compare(Path(args.resume), progress=True, jobs=args.jobs, executor=args.executor, add=added,
                                add_options=_with_variants(parse_options(args.option), added_variants))
    else:
        if args.seeds < 1:
            raise UserError("--seeds must be at least 1")
        arms, variants = parse_arms(args.optimizers)
        options = _with_variants(parse_options(args.option), variants)
        if not arms:
            raise UserError("--optimizers names no optimizer")
        request = CompareRequest(run_config(args, class_loss_margin=args.class_loss_margin), arms,
                                 list(range(args.seed, args.seed + args.seeds)), options, mode=args.mode,
                                 match=args.match, allow_underspend=args.allow_underspend,
                                 native_demos=args.native_demos, check_generation=args.check_generation,
                                 jobs=args.jobs, executor=args.executor, progress=True)
        if args.dry_run:
            print("\n".join(plan_compare(request).lines()))
            return 0
        result = run_compare(request)
    failed = [check.claim for check in result.checks if check.status == "failed"]
    if args.json:
        print_json(comparison_json(result))
        return 1 if failed else 0
    if failed:
        print(f"fairness check failed: {'; '.join(failed)}; reports: {reports_of(result.run_dir)}")
        return 1
    best = max(result.summaries, key=lambda s: s.guarded.accuracy)
    cap = result.caps[0]
    baseline = sum(c.baseline_accuracy for c in result.baselines.values()) / len(result.seeds)
    print(f"{MODES[result.mode]}: {len(result.arms)} optimizers × {len(result.seeds)} seeds at {cap.limit} {cap.unit}: "
          f"best mean guarded test accuracy {best.guarded.accuracy:.3f} ({best.arm}), baseline (mean over seeds) "
          f"{baseline:.3f}; reports: {reports_of(result.run_dir)}")
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:
    compare = commands.add_parser("compare", help="run several optimizers under the same budget, model "
                                  "and splits; compare their held-out results")
    add_run_arguments(compare)
    compare.add_argument("--optimizers", default="random,sh",
                         help=f"comma-separated, of {', '.join(strategies())}; or a named variant "
                              "NAME=OPTIMIZER:KEY=VALUE:... (e.g. reflect-nocal=reflect:calibration=off), one "
                              "optimizer under other options beside itself")
    compare.add_argument("--seeds", type=int, default=5, help="optimizer seeds per arm: --seed, --seed+1, … "
                         "(the paired tests across seeds need a few)")
    compare.add_argument("--mode", choices=list(MODES), default="same-space",
                         help="same-space: an optimizer comparison, every arm searches only what the "
                         "space declares and holds the rest at the baseline; native: a tool comparison, each "
                         "tool also adds what it brings itself (demos, its own instructions)")
    add_search_arguments(compare)
    compare.add_argument("--match", choices=["calls", "tokens"], default="calls",
                         help="what every arm is matched on and the checks compare: search calls (--budget), or "
                              "search tokens (--budget-tokens, required; --budget is then what optimizers plan "
                              "with and a ceiling: set it above what the token cap buys)")
    compare.add_argument("--option", action="append", default=[], metavar="OPTIMIZER.KEY=VALUE",
                         help="optimizer option, e.g. sh.eta=3 or dspy-mipro.auto=medium (repeatable)")
    compare.add_argument("--native-demos", type=int, default=0, metavar="K",
                         help="native mode: add few-shot k in {0, 2, ..., K} to a space that declares no demos, so "
                              "every prompttune arm can try demos as DSPy's do (0: none)")
    compare.add_argument("--jobs", type=int, default=1, metavar="N",
                         help="arm-seeds run at once, in worker processes with a model each (with --backend openai "
                              "they share the servers); results equal --jobs 1")
    compare.add_argument("--executor", default="process", metavar="process|ray[:ADDRESS]",
                         help="where --jobs run: process (worker processes here) or ray (Ray tasks on a local Ray, the "
                              "cluster at ADDRESS or RAY_ADDRESS; needs pip install 'prompttune[ray]' and, across "
                              "machines, --runs-dir on a file system every node mounts at the same path)")
    compare.add_argument("--check-generation", type=int, default=0, metavar="N",
                         help="after each arm-seed's verdict, serve its shipped prompt and the baseline by generation "
                              "on the first N test examples (outside the budget; descriptive, in the report; "
                              "default 0: off)")
    compare.add_argument("--allow-underspend", action="store_true",
                         help="an arm that spends under 90%% of the cap is a warning, not a failed matched-budget check")
    compare.add_argument("--resume", metavar="RUN_DIR", help="finish an interrupted comparison from its directory "
                         "(its own settings; finished arms are read back, the others resumed, paid calls charged once)")
    compare.add_argument("--add-optimizers", metavar="NAMES", help="with --resume: run these optimizers too, on the "
                         "comparison's seeds, data draws and cap, and report all arms (finished comparisons too; "
                         "--option may set the added arms' options)")
    add_json_argument(compare)
    compare.add_argument("--dry-run", action="store_true",
                         help="check every arm at every seed as the comparison would, print the plan (each arm's cap, "
                              "coverage and schedule or DSPy sizing, the verdicts' calls, the total, a wall-time "
                              "estimate from one short probe of the model) and exit before any search call")
    add_class_loss_margin_argument(compare)
    compare.set_defaults(handler=_compare)
