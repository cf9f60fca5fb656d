"""`--space FILE`: read a search-space YAML file, validate it, build it for a task, bind its demos."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import ValidationError

from prompttune.core.errors import UserError, validation_message
from prompttune.core.yamlio import load_yaml
from prompttune.search_spaces.assemble import SpaceError, build_space
from prompttune.search_spaces.schema import SpaceFile
from prompttune.search_spaces.space import SearchSpace
from prompttune.tasks.task import Task


def parse_space_file(path: str | Path) -> SpaceFile:
    if not Path(path).is_file():
        raise UserError(f"space file {path} not found")
    try:
        return SpaceFile.model_validate(load_yaml(path))
    except ValidationError as exc:
        raise UserError(f"{path}: {validation_message(exc)}") from None


def load_space_file(path: str | Path, task: Task) -> SearchSpace:
    """The space of `path` for `task`, drawing few-shot demos from the task's train split."""
    config = parse_space_file(path)
    try:
        space = build_space(config, task)
    except SpaceError as exc:
        raise UserError(f"{path}: {exc.where}: {exc.message}") from None
    check_space_fits(space, task, str(path))
    return space.bind(task.splits["train"])


def check_space_fits(space: SearchSpace, task: Task, where: str) -> None:
    """Placeholders the renderer knows and fields the task has: anything else would be used literally
    or do nothing, silently."""
    slots = {d.target.partition(":")[2] for d in space.dimensions if d.target.startswith("slot:")}
    texts = [space.base.instruction, *(str(v) for d in space.dimensions if d.target == "instruction" for v in d.values)]
    for text in texts:
        for name in re.findall(r"\{(\w+)\}", text):
            if name != "labels" and name not in slots:
                raise UserError(f"{where}: instruction {text!r} has the placeholder {{{name}}}, which is neither "
                                f"{{labels}} nor a word slot of the space ({', '.join(sorted(slots)) or 'none'})")
    for dim in space.dimensions:
        kind, _, field = dim.target.partition(":")
        if kind == "input" and field not in task.input_fields:
            raise UserError(f"{where}: dimension {dim.name!r} targets input field {field!r}, which task "
                            f"{task.name!r} lacks (it has {', '.join(task.input_fields)})")
