"""Trial storage, swappable like Optuna's: append-only records of every evaluated candidate."""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING

from prompttune.core.errors import UserError

if TYPE_CHECKING:
    import pandas


class TrialStorage(ABC):
    """The trial log: `load()` gives one dict per trial, `to_pandas()` the same as a table."""

    @abstractmethod
    def append(self, trial: dict) -> None: ...

    @abstractmethod
    def load(self) -> list[dict]: ...

    def to_pandas(self) -> "pandas.DataFrame":
        """One row per trial, nested fields (dimensions, spend) flattened into dotted columns."""
        try:
            import pandas
        except ImportError:
            raise UserError("trials.to_pandas() needs pandas (pip install pandas); trials.load() gives the same "
                            "trials as a list of dicts") from None
        return pandas.json_normalize(self.load())


class InMemoryStorage(TrialStorage):
    def __init__(self) -> None:
        self._trials: list[dict] = []

    def append(self, trial: dict) -> None:
        self._trials.append(trial)

    def load(self) -> list[dict]:
        return list(self._trials)


class JsonlStorage(TrialStorage):
    """One JSON line per trial, flushed at once so an interrupted run loses nothing."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch()

    def append(self, trial: dict) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(trial, ensure_ascii=False) + "\n")

    def load(self) -> list[dict]:
        return read_trial_log(self.path)


def read_trial_log(path: Path) -> list[dict]:
    """Every complete line of a trial log, which reading leaves untouched; a torn last line (the process was
    killed mid-write) is skipped."""
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f if line.strip()]
    trials = []
    for number, line in enumerate(lines):
        try:
            trials.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines) - 1:
                raise
    return trials


def write_atomic(path: str | Path, text: str) -> None:
    """Write to a temporary file beside `path`, then rename: a kill leaves the old file or the new, never half."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)

