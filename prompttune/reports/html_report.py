"""report.html: the run report people look at, one self-contained file beside report.md, for
`optimize`, `compare` and `evaluate` run directories; `prompttune report RUN_DIR` rebuilds it."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from prompttune.core.errors import UserError
from prompttune.core.run_files import CONFIG, PROMPTS, SUMMARY, TRIALS, RunKind, run_kind


def page_kind(run_dir: Path) -> RunKind:
    """optimize, compare or evaluate: the page a finished run directory gets; anything else is one line."""
    if not run_dir.is_dir():
        raise UserError(f"{run_dir} is not a directory")
    if not (run_dir / CONFIG).is_file():
        raise UserError(f"{run_dir} is not a run directory: {CONFIG} missing")
    kind = run_kind(run_dir)
    if kind == "compare" and not (run_dir / SUMMARY).is_file():
        raise UserError(f"{run_dir} is an unfinished comparison: `compare --resume {run_dir}` finishes it")
    if kind is None:
        raise UserError(f"{run_dir} holds no {TRIALS}, {PROMPTS} or {SUMMARY}: not a finished run of "
                        "optimize, evaluate or compare")
    return kind


def html_page(run_dir: Path) -> str:
    """report.html of the run directory, built from its files alone."""
    from prompttune.reports.html.compare_page import compare_page
    from prompttune.reports.html.evaluate_page import evaluate_page
    from prompttune.reports.html.optimize_page import optimize_page

    pages: dict[RunKind, Callable[[Path], str]] = {"optimize": optimize_page, "compare": compare_page,
                                                   "evaluate": evaluate_page}
    run_dir = Path(run_dir)
    try:
        return pages[page_kind(run_dir)](run_dir)
    except FileNotFoundError as exc:
        raise UserError(f"{run_dir} lacks {Path(exc.filename).name}: not a complete run directory") from None
    except KeyError as exc:
        raise UserError(f"{run_dir}: a run file lacks the field {exc}; was it written by an older prompttune?") from None
