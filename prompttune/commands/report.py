"""`prompttune report RUN_DIR`: rebuild report.html of a run directory from its files."""

from __future__ import annotations

import argparse
from pathlib import Path

from prompttune.core.run_files import write_page
from prompttune.reports.html_report import html_page


def _report(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    print(write_page(run_dir, html_page(run_dir)))
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Register `report RUN_DIR` on the `prompttune` sub-command parser."""
    report = commands.add_parser("report", help="rebuild report.html of a run directory (optimize, compare or "
                                 "evaluate) from its files")
    report.add_argument("run_dir", help="a directory written by optimize, compare or evaluate")
    report.set_defaults(handler=_report)
