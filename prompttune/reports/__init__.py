"""What a run leaves for people: report.md, report.html and the summary tables, built from the
result types (`prompttune.results`) or from a run directory's files alone; nothing here imports the engine."""

from pathlib import Path
from typing import Mapping

from prompttune.core.run_files import PAGE, REPORT

PASSED_BACKEND = "backend object"  # the versions key of a Backend object passed to the API (engine.study)


def ci_text(ci: tuple[float, float]) -> str:
    """A 95% interval as every report prints it."""
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def model_name(model: str, versions: Mapping[str, str]) -> str:
    """The config's model, or the model of a Backend object passed to the API (`model_phrase`)."""
    return versions["model"] if PASSED_BACKEND in versions else model


def model_phrase(model: str, backend: str, dtype: str, versions: Mapping[str, str]) -> str:
    """The model that ran, as a report's first line names it: the config's model and backend, or, for a
    Backend object passed to the API, that object's model (the config's model is then a default no one ran)."""
    if PASSED_BACKEND in versions:
        return f"`{versions['model']}` ({versions[PASSED_BACKEND]}, passed in)"
    return f"`{model}` ({backend}, {dtype})"



def reports_of(run_dir: Path) -> str:
    """Both reports a finished run leaves, as the terminal's last line names them: report.md, and the
    report.html people look at (a user told only of report.md never finds the page)."""
    return f"{run_dir / REPORT} and {run_dir / PAGE}"
