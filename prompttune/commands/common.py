"""Command-line options every command shares (the set-up itself lives in `prompttune.engine.setup`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

import yaml

from prompttune.backends.factory import add_backend_arguments, backend_options
from prompttune.core.config import DEFAULT_SERVE, SCORING_ALIASES, SERVES, RunConfig
from prompttune.core.errors import UserError
from prompttune.scoring.ledger import BudgetLedger
from prompttune.statistics import OBJECTIVES

RUN_DEFAULTS = RunConfig()


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by every command that loads a task and a model."""
    # --task keeps a default (the README's first command runs without one); the help says which.
    parser.add_argument("--task", default=RUN_DEFAULTS.task, help="agnews, sst2, trec, or a task YAML file")
    parser.add_argument("--data-dir", help="local data folder (else $PROMPTTUNE_DATA_DIR, else the hub)")
    parser.add_argument("--space", help="search-space YAML file (default: the task's built-in space)")
    add_prompt_argument(parser)
    add_seed_arguments(parser)
    add_backend_arguments(parser)
    parser.add_argument("--serve", choices=SERVES,
                        help="the serving contract, how production gets the answer: logprobs (label log-probabilities "
                             "and the shipped label offsets), generate (the model answers; verdict by generation), "
                             "choice (constrained decoding over the labels); default: the task file's serve:, else "
                             f"{DEFAULT_SERVE}")
    parser.add_argument("--scoring",
                        help="older spelling of --serve: logit and calibrated mean logprobs, generate generate "
                             "(evaluate also scores calibrated)")
    add_split_arguments(parser)
    parser.add_argument("--runs-dir", default=RUN_DEFAULTS.runs_dir, help="folder that receives the run directory")
    parser.add_argument("--cache", help="shared SQLite cache file (default: one per run)")


def add_prompt_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompt", metavar="FILE",
                        help="your prompt, the baseline (replaces the task file's): a template with {field} per input "
                             "field and optional {labels}, or a YAML/JSON file with prompt: or messages:; without "
                             "--space the space is derived around it")


def seed_value(text: str) -> int:
    """A seed as numpy takes it: a whole number, 0 or more."""
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return int(text)


def add_seed_arguments(parser: argparse.ArgumentParser) -> None:
    """One meaning in every command: --seed drives the search, --split-seed the data."""
    parser.add_argument("--seed", type=seed_value, default=RUN_DEFAULTS.seed, help="search seed: sampling, proposals")
    parser.add_argument("--split-seed", type=seed_value, default=RUN_DEFAULTS.split_seed,
                        help="seed of the train/dev/test draw")


def add_split_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--train-size", type=int, default=RUN_DEFAULTS.train_size, metavar="N",
                        help="training examples drawn (demos, proposals)")
    parser.add_argument("--dev-size", type=int, default=RUN_DEFAULTS.dev_size, metavar="N",
                        help="dev examples drawn: what the search scores candidates on")
    parser.add_argument("--test-size", type=int, default=RUN_DEFAULTS.test_size, metavar="N",
                        help="held-out test examples drawn: the verdict's, never seen by the search")


def add_search_arguments(parser: argparse.ArgumentParser) -> None:
    """The cap, objective, verdict level and proposer: one meaning in optimize and in every compare arm."""
    parser.add_argument("--budget", type=int, default=RUN_DEFAULTS.budget, metavar="CALLS",
                        help="hard cap on search-time model calls per run")
    parser.add_argument("--budget-tokens", type=int, metavar="TOKENS",
                        help="optional hard cap on search-time tokens per run")
    parser.add_argument("--objective", default=RUN_DEFAULTS.objective,
                        help=f"what the search maximizes on dev: {', '.join(OBJECTIVES)}")
    parser.add_argument("--alpha", type=float, default=RUN_DEFAULTS.alpha,
                        help="level of the held-out test that decides what ships")
    parser.add_argument("--proposer-model", metavar="MODEL",
                        help="model that writes instructions/critiques (default: the task model)")
    parser.add_argument("--pool", choices=["all", "tuning", "reporting"], default=RUN_DEFAULTS.pool,
                        help="built-in tasks: draw from every example (all), from the tuning part only (tuning), or "
                             "test on the reporting part (reporting: the headline run; docs/tasks-and-spaces.md)")


def add_class_loss_margin_argument(parser: argparse.ArgumentParser,
                                   recall: str = "test recall under the shipped prompt (or the dev winner)",
                                   reference: str = "the baseline") -> None:
    """One default and one meaning in every report that flags the classes a prompt loses."""
    parser.add_argument("--class-loss-margin", type=float, default=RUN_DEFAULTS.class_loss_margin, metavar="M",
                        help=f"flag a class whose {recall} drops more than M below {reference}'s, even when the "
                             "total wins")


def contract_options(args: argparse.Namespace) -> dict[str, str]:
    """`--serve`, or the contract `--scoring` (its alias) means; nothing where neither is given (the task decides)."""
    if args.scoring and args.scoring not in SCORING_ALIASES:
        raise UserError(f"unknown --scoring {args.scoring!r}; choose from {', '.join(SCORING_ALIASES)}, or --serve "
                        f"{'|'.join(SERVES)}")
    if args.serve and args.scoring and SCORING_ALIASES[args.scoring] != args.serve:
        raise UserError(f"--scoring {args.scoring} means --serve {SCORING_ALIASES[args.scoring]}, not {args.serve}: "
                        "give --serve alone")
    if args.serve or args.scoring:
        return {"serve": args.serve or SCORING_ALIASES[args.scoring]}
    return {}


def run_config(args: argparse.Namespace, **fields: Any) -> RunConfig:
    """The run that `add_run_arguments` and `add_search_arguments` describe, with a command's own `fields`."""
    return RunConfig(
        task=args.task, data_dir=args.data_dir, space=args.space, prompt=args.prompt, seed=args.seed,
        split_seed=args.split_seed, **contract_options(args), train_size=args.train_size, dev_size=args.dev_size,
        test_size=args.test_size, runs_dir=args.runs_dir, cache=args.cache, budget=args.budget,
        budget_tokens=args.budget_tokens, objective=args.objective, alpha=args.alpha,
        proposer_model=args.proposer_model, pool=args.pool, **backend_options(args), **fields)


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object of the results on stdout, "
                                                            "nothing else (progress stays on stderr)")


def print_json(payload: dict[str, Any]) -> None:
    """The one object `--json` promises on stdout, for scripts: strict JSON (a NaN becomes null)."""
    print(json.dumps(_no_nan(payload), ensure_ascii=False))


def _no_nan(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {key: _no_nan(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_no_nan(item) for item in value]
    return value


def spend_json(ledger: BudgetLedger) -> dict[str, Any]:
    """What a search spent against its caps."""
    return {"calls": ledger.calls, "tokens": ledger.tokens, "cap_calls": ledger.cap_calls,
            "cap_tokens": ledger.cap_tokens}


def parse_option(text: str) -> tuple[str, object]:
    """`KEY=VALUE` (the value read as YAML)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise UserError(f"--option expects KEY=VALUE, got {text!r}")
    return key.strip(), option_value(text, value)


YAML11_WORDS = {"on", "off", "yes", "no", "y", "n"}
"""Words YAML 1.1 reads as booleans: kept as text, so `calibration=off` names the choice "off" (a bool option still
reads them as pydantic does: "off" is False)."""


def option_value(option: str, value: str) -> object:
    """An --option value read as YAML (`3`, `true`, `[a, b]`), but for the words in YAML11_WORDS."""
    if value.strip().lower() in YAML11_WORDS:
        return value.strip()
    try:
        return yaml.safe_load(value)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise UserError(f"--option {option}: the value {value!r} is not valid YAML ({problem})") from None
