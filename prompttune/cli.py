"""Command line: `optimize ...`, `evaluate ...`, `compare ...` and `prompttune <command> ...`.

Only wiring: each command lives in `prompttune.commands` and registers its own parser. Bad input
ends in one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Callable, Sequence

from pydantic import ValidationError

from prompttune.commands import compare, evaluate, export, optimize, report, space
from prompttune.core.errors import UserError

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="prompttune", description="Automatic prompt optimization "
                                     "with honest, held-out verdicts.")
    commands = parser.add_subparsers(dest="command", required=True)
    for command in (optimize, evaluate, space, compare, export, report):
        command.add_parser(commands)
    return parser


def _run(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        return handler(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
    except ValidationError as exc:
        err = exc.errors()[0]
        print(f"error: invalid option {'.'.join(map(str, err['loc']))}: {err['msg']}", file=sys.stderr)
    except KeyboardInterrupt as exc:  # a run's RunInterrupted carries the line that says how to finish it
        print(f"interrupted: {exc}" if str(exc) else "interrupted", file=sys.stderr)
        return 130
    return EXIT_USAGE


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # a polite kill ends like Ctrl-C: one line, the run directory kept


def main(argv: Sequence[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    args = build_parser().parse_args(argv)
    return _run(args.handler, args)


def optimize_main(argv: Sequence[str] | None = None) -> int:
    return main(["optimize", *(sys.argv[1:] if argv is None else argv)])


def evaluate_main(argv: Sequence[str] | None = None) -> int:
    return main(["evaluate", *(sys.argv[1:] if argv is None else argv)])


def compare_main(argv: Sequence[str] | None = None) -> int:
    return main(["compare", *(sys.argv[1:] if argv is None else argv)])
