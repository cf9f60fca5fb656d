"""Command line: `optimize ...`, `evaluate ...`, `compare ...` and `prompttune <command> ...`.

Only wiring: each command lives in `prompttune.commands` and registers its own parser. Bad input
ends in one line on stderr and exit code 2, never a traceback; an outage (no server answered in
time) in one line and exit code 75; a signal (Ctrl-C, SIGTERM) in one line naming the `--resume` that
finishes the run and exit code 130; an unexpected failure in one line naming the file that holds
its traceback (`error.log` in the run directory), exit code 1.
"""

from __future__ import annotations

import argparse
import contextvars
import signal
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, NoReturn, Sequence

from pydantic import ValidationError

from prompttune import __version__
from prompttune.commands import compare, evaluate, export, optimize, report, space
from prompttune.core.errors import BackendUnavailable, UserError
from prompttune.engine.setup import RUN_DIR

EXIT_USAGE = 2
EXIT_FAILURE = 1
EXIT_UNAVAILABLE = 75  # sysexits' EX_TEMPFAIL: no server answered; try again later (optimize --resume)
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, so `--help` alone says what a bare run does;
    a help that already explains its default is left as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        unset = action.default is None or action.default is argparse.SUPPRESS or action.default == []
        if unset or isinstance(action.default, bool) or not action.option_strings or "default" in text:
            return action.help
        return f"{text} (default: %(default)s)".lstrip()


class OneLineParser(argparse.ArgumentParser):
    """argparse answers a bad argument with its whole usage (17 lines for `optimize`); one line
    naming the problem, like every other bad input, is easier to act on. Sub-command parsers are
    of this class too, so every help shows the defaults (`DefaultsHelpFormatter`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message} (`{self.prog} --help` lists the options)")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="prompttune", description="Automatic prompt optimization "
                           "with honest, held-out verdicts.")
    commands = parser.add_subparsers(dest="command", required=True)
    for command in (optimize, evaluate, space, compare, export, report):
        command.add_parser(commands)
    for command_parser in (parser, *commands.choices.values()):  # `optimize --version` works as the alias is typed
        command_parser.add_argument("--version", action="version", version=f"prompttune {__version__}")
    return parser


def _dispatch(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


def _save_traceback(run_dir: Path | None) -> Path:
    """The traceback of an unexpected failure: in the run directory when there is one, else in a temp file."""
    text = traceback.format_exc()
    if run_dir is not None:
        try:
            with open(run_dir / "error.log", "a", encoding="utf-8") as log:
                log.write(text)
            return run_dir / "error.log"
        except OSError:
            pass
    with tempfile.NamedTemporaryFile("w", prefix="prompttune-error-", suffix=".log", delete=False) as log:
        log.write(text)
    return Path(log.name)


def _say(message: str) -> None:
    """One line on stderr, whatever the message holds."""
    print("error: " + " ".join(message.splitlines()), file=sys.stderr)


def _run(argv: Sequence[str] | None) -> int:
    """Run a command; whatever goes wrong ends in one line on stderr."""
    context = contextvars.copy_context()  # collects the run directory the command makes
    try:
        return context.run(_dispatch, argv)
    except BackendUnavailable as exc:
        _say(str(exc))
        return EXIT_UNAVAILABLE
    except UserError as exc:
        _say(str(exc))
    except ValidationError as exc:  # a command-line value its config refused
        err = exc.errors()[0]
        flag = "--" + str(err["loc"][0]).replace("_", "-") if err["loc"] else "an option"
        _say(f"{flag} {err['input']}: {err['msg']}")
    except KeyboardInterrupt as exc:  # a run's RunInterrupted carries the line that says how to finish it
        print(f"interrupted: {' '.join(str(exc).splitlines())}" if str(exc) else "interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        log = _save_traceback(context.get(RUN_DIR))
        what = str(exc).splitlines()[0] if str(exc) else ""
        _say(f"unexpected {type(exc).__name__}{': ' + what if what else ''}; the traceback is in {log}")
        return EXIT_FAILURE
    return EXIT_USAGE


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # a polite kill ends like Ctrl-C: one line, the run directory kept


def main(argv: Sequence[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    return _run(argv)


def optimize_main(argv: Sequence[str] | None = None) -> int:
    return main(["optimize", *(sys.argv[1:] if argv is None else argv)])


def evaluate_main(argv: Sequence[str] | None = None) -> int:
    return main(["evaluate", *(sys.argv[1:] if argv is None else argv)])


def compare_main(argv: Sequence[str] | None = None) -> int:
    return main(["compare", *(sys.argv[1:] if argv is None else argv)])
