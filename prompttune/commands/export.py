"""`prompttune export RUN_DIR --to text|json|openai-chat|dspy|python`: the prompt a run ships, for use
elsewhere (the formats are described in `prompttune.export.writers`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from prompttune.export.writers import FORMATS, export


def _export(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    written = export(run_dir, args.to, Path(args.output) if args.output else run_dir / "export")
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Register `export` on the `prompttune` sub-command parser."""
    parser = commands.add_parser("export", help="write a run's winning prompt as text, JSON, chat messages, a "
                                                "DSPy program or a Python classifier module")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="an optimize run directory (or a compare arm's)")
    parser.add_argument("--to", required=True, choices=FORMATS,
                        help="output format: text, json, openai-chat (chat messages and the request that reads "
                             "them as the run did), dspy, or python (classifier.py: a stdlib-only module that "
                             "classifies through an OpenAI-compatible server exactly as the verdict scored)")
    parser.add_argument("--output", metavar="DIR", help="output folder (default: RUN_DIR/export)")
    parser.set_defaults(handler=_export)
