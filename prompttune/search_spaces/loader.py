"""`--space FILE`: read a search-space YAML file, validate it, build it for a task, bind its demos."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from prompttune.core.errors import UserError
from prompttune.core.yamlio import load_yaml
from prompttune.search_spaces.assemble import SpaceError, build_space
from prompttune.search_spaces.schema import SpaceFile
from prompttune.search_spaces.space import SearchSpace
from prompttune.tasks.base import Task


def validation_message(exc: ValidationError) -> str:
    """`key.path: what was expected` for the first error (union branch tags left out)."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"] if "[" not in str(p)) or "<top level>"
    message = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        message = "unknown key (not part of the schema)"
    return f"{where}: {message}"


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
    return space.bind(task.splits["train"])
