"""Every command line the docs show parses: the README and docs/*.md say only what the CLI accepts.

Each line of a ```sh block that starts with a command (backslash continuations joined, comments
dropped) goes through the CLI's own parser, without running it; placeholders such as RUN_DIR are
fine wherever argparse takes any value.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from prompttune.cli import build_parser

REPO = Path(__file__).resolve().parent.parent
COMMANDS = ("prompttune", "optimize", "evaluate", "compare")  # the console scripts
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _command_lines(markdown: str) -> list[str]:
    lines = []
    for block in SH_BLOCK.findall(markdown):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.strip()
            if line.split(" ", 1)[0] in COMMANDS:
                lines.append(line)
    return lines


def _argv(line: str) -> list[str]:
    """The line as argv of `prompttune`: a trailing comment dropped, an alias as its sub-command."""
    words = shlex.split(line, comments=True)
    return words[1:] if words[0] == "prompttune" else words


DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINES = [(doc.relative_to(REPO), line) for doc in DOCS for line in _command_lines(doc.read_text(encoding="utf-8"))]


def test_the_docs_show_commands() -> None:
    assert len(LINES) >= 10  # the extraction found the quickstart and the reference, not nothing


@pytest.mark.parametrize(("doc", "line"), LINES, ids=[f"{doc}:{line[:60]}" for doc, line in LINES])
def test_each_documented_command_parses(doc: Path, line: str) -> None:
    build_parser().parse_args(_argv(line))  # a bad option raises UserError (one line naming it)
