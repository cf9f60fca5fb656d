"""How `space` shows what it loaded: the dimension table, and sampled prompts as the model sees them."""

from __future__ import annotations

from typing import TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from prompttune.core.types import Example, Prompt
from prompttune.search_spaces.space import Candidate, SearchSpace
from prompttune.tasks import Task

_PREVIEW_CHARS = 70


def _preview(space: SearchSpace, name: str) -> str:
    dim = space.dimension(name)
    baseline = space.default[name]
    shown = ", ".join(("*" if i == baseline else "") + dim.label(i) for i in range(len(dim.values)))
    return shown if len(shown) <= _PREVIEW_CHARS else shown[:_PREVIEW_CHARS - 1] + "…"


def print_space(space: SearchSpace, task: Task) -> None:
    """Dimension table (baseline starred), sizes and rules."""
    table = Table(title=f"space {space.name} · task {task.name}  (* = baseline)")
    for column in ("dimension", "kind", "values", "choices"):
        table.add_column(column, justify="right" if column == "values" else "left")
    for dim in space.dimensions:
        table.add_row(Text(dim.name), dim.kind, str(len(dim.values)), Text(_preview(space, dim.name)))
    console = Console()
    console.print(table)
    console.print(Text(f"nominal size (product of values): {space.nominal_size():,}"))
    console.print(Text(f"valid candidates: {space.size()}"))
    for rule in space.constraints:
        console.print(Text(f"  rule: {rule.describe()}"))
    for note in space.notes:
        console.print(Text(note))


def _show_prompt(prompt: Prompt) -> str:
    if prompt.messages is None:
        return prompt.text or ""
    turns = [f"<{role}>\n{content}" for role, content in prompt.messages]
    return "\n".join([*turns, f"<assistant>\n{prompt.assistant_prefix}"])


def write_sample(out: TextIO, number: int, total: int, space: SearchSpace, task: Task, baseline: Candidate,
                 candidate: Candidate, example: Example, prompt: Prompt) -> None:
    """One sampled candidate on one example, with its change from the baseline."""
    out.write(f"=== sample {number}/{total} · candidate {candidate.id} · example {example.id} "
              f"(gold {task.labels[example.label]})\n")
    out.write(f"--- change from baseline: {space.diff(baseline, candidate)}\n")
    out.write(_show_prompt(prompt) + "\n")
    out.write(f"--- scored continuations: {', '.join(map(repr, prompt.label_continuations))}\n\n")
