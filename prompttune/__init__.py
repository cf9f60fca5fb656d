"""prompttune: prompts as declared, searchable parameters, and only gains that survive a held-out test.

The Python API (`prompttune.api`): `optimize`, `evaluate`, `compare`, `resume`, `load_run`, `predict`,
`to_dspy`, with `Task` and `SearchSpace` for in-memory data and spaces built in Python, the result types, and
`Backend` for a model of your own. Imported on first use, so that `import prompttune.<module>` stays light.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

__version__ = importlib.metadata.version("prompttune")  # one source: pyproject.toml

_API = {"optimize": "prompttune.api", "evaluate": "prompttune.api", "compare": "prompttune.api",
        "resume": "prompttune.api", "load_run": "prompttune.api",
        "predict": "prompttune.api", "to_dspy": "prompttune.api", "FinishedRun": "prompttune.results.finished_run",
        "FinishedCompare": "prompttune.results.finished_run", "FinishedEvaluation": "prompttune.results.finished_run",
        "Task": "prompttune.tasks.task", "SearchSpace": "prompttune.search_spaces.space",
        "Dimension": "prompttune.search_spaces.space", "PromptSpec": "prompttune.search_spaces.prompt",
        "RunResult": "prompttune.results.run", "EvaluationResult": "prompttune.results.evaluate",
        "CompareResult": "prompttune.results.compare", "Backend": "prompttune.backends.backend"}

__all__ = sorted(_API)


def __dir__() -> list[str]:
    """The API is imported on first use, so `dir(prompttune)` (and tab completion) lists it by name."""
    return sorted({*globals(), *__all__})


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'prompttune' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_API[name]), name)
