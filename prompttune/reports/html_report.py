"""report.html: the run report people look at, one self-contained file beside report.md, for
`optimize`, `compare` and `evaluate` run directories; `prompttune report RUN_DIR` rebuilds it."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from prompttune.core.errors import UserError
from prompttune.core.storage import write_atomic
from prompttune.reports import HTML_PAGE as PAGE


def run_kind(run_dir: Path) -> str:
    """optimize, compare or evaluate, told apart by the files each command writes."""
    if not run_dir.is_dir():
        raise UserError(f"{run_dir} is not a directory")
    if not (run_dir / "config.json").is_file():
        raise UserError(f"{run_dir} is not a run directory: config.json missing")
    if (run_dir / "prompts.jsonl").is_file():
        return "evaluate"
    if (run_dir / "trials.jsonl").is_file():
        return "optimize"
    if (run_dir / "summary.json").is_file():
        return "compare"
    if (run_dir / "arms").is_dir():
        raise UserError(f"{run_dir} is an unfinished comparison: `compare --resume {run_dir}` finishes it")
    raise UserError(f"{run_dir} holds no trials.jsonl, prompts.jsonl or summary.json: not a finished run of "
                    "optimize, evaluate or compare")


def write_html_report(run_dir: Path) -> Path:
    """Build report.html from the run directory's files alone; return its path."""
    from prompttune.reports.html.compare_page import compare_page
    from prompttune.reports.html.evaluate_page import evaluate_page
    from prompttune.reports.html.optimize_page import optimize_page

    pages: dict[str, Callable[[Path], str]] = {"optimize": optimize_page, "compare": compare_page,
                                               "evaluate": evaluate_page}
    run_dir = Path(run_dir)
    try:
        text = pages[run_kind(run_dir)](run_dir)
    except FileNotFoundError as exc:
        raise UserError(f"{run_dir} lacks {Path(exc.filename).name}: not a complete run directory") from None
    except KeyError as exc:
        raise UserError(f"{run_dir}: a run file lacks the field {exc}; was it written by an older prompttune?") from None
    path = run_dir / PAGE
    write_atomic(path, text)
    return path
