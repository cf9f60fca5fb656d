"""`compare --executor ray`: arm-seeds as Ray tasks on a local Ray of 2 CPUs give the trials, verdicts and report
of `--jobs 1`; without Ray installed, `--executor ray` is one line naming the extra to install."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Iterator

import pytest

from prompttune.cli import main
from prompttune.core.storage import JsonlStorage
from prompttune.engine.comparison import CompareRequest, run_compare
from prompttune.results.compare import CompareResult
from tests.support import comparison_outcome, oracle_config, oracle_for

# Sections of report.md that say what the comparison found; "Per seed" and "Fairness" also say which arm's
# shared-cache hit came first and how long it all took, which depend on the order the workers finished in.
FINDINGS = ("What each arm searched", "Held-out test accuracy", "Classes lost", "Arms head to head across seeds",
            "Accuracy at equal spend", "Leading arms head to head", "Anytime performance")


@pytest.fixture
def local_ray() -> Iterator[None]:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        yield
    finally:
        ray.shutdown()


def _sections(report: str) -> dict[str, str]:
    """The report's sections by title, each table's measured wall-time column blanked (wall clock is no finding:
    on a loaded machine the two runs' arms take different seconds)."""
    return {title: _without_wall(body) for title, body in re.findall(r"^## (.+?)\n(.*?)(?=^## |\Z)", report, re.M | re.S)}


def _without_wall(body: str) -> str:
    lines, column = body.splitlines(), None
    for number, line in enumerate(lines):
        cells = line.split(" | ")
        if line.startswith("| ") and "wall s (mean)" in cells:
            column = cells.index("wall s (mean)")
        elif not line.startswith("| "):
            column = None
        if column is not None and line.startswith("| ") and len(cells) > column:
            lines[number] = " | ".join(cells[:column] + ["–"] + cells[column + 1:])
    return "\n".join(lines)


def _per_seed(report: str) -> list[list[str]]:
    """Per seed, what the arm found and spent: optimizer, seed, raw pick's test accuracy, verdict, guarded
    accuracy, search calls, tokens, stopped by cap (not the shared-cache hits, what the model served, the folder)."""
    rows = [line.split(" | ") for line in _sections(report)["Per seed"].splitlines() if line.startswith("| ")]
    return [[row[i] for i in (0, 1, 2, 3, 4, 5, 7, 9)] for row in rows[2:]]


def _trials(comparison: CompareResult) -> dict[tuple[str, int], list[dict]]:
    return {(r.arm, r.seed): JsonlStorage(r.run_dir / "trials.jsonl").load() for r in comparison.runs}


def test_ray_tasks_give_the_trials_verdicts_and_report_of_one_at_a_time(tmp_path: Path, local_ray: None) -> None:
    config = oracle_config(tmp_path, budget=150)  # half the usual cap, to keep the test short: the arms underspend it
    one = run_compare(CompareRequest(config, ["random", "sh"], [0, 1], {}, backend=oracle_for(config),
                                     allow_underspend=True))
    on_ray = run_compare(CompareRequest(config, ["random", "sh"], [0, 1], {}, backend_factory=oracle_for, jobs=2,
                                        executor="ray", allow_underspend=True))

    assert _trials(on_ray) == _trials(one)
    assert [(r.arm, r.seed, r.best, r.raw, r.confirmation, r.raw_confirmation, r.test_correct) for r in on_ray.runs] == [
        (r.arm, r.seed, r.best, r.raw, r.confirmation, r.raw_confirmation, r.test_correct) for r in one.runs]
    assert comparison_outcome(on_ray.run_dir) == comparison_outcome(one.run_dir)
    assert all(check.status != "failed" for check in on_ray.checks), [c for c in on_ray.checks if not c.ok]
    reports = [(c.run_dir / "report.md").read_text() for c in (one, on_ray)]
    assert [{t: s for t, s in _sections(r).items() if t in FINDINGS} for r in reports[1:]] == [
        {t: s for t, s in _sections(reports[0]).items() if t in FINDINGS}]
    assert set(_sections(reports[0])) >= set(FINDINGS)
    assert _per_seed(reports[1]) == _per_seed(reports[0])
    assert all((r.run_dir / "arm.json").is_file() and r.run_dir.parent == on_ray.run_dir / "arms" for r in on_ray.runs)


def test_executor_ray_without_ray_installed_is_one_line_naming_the_extra(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as where it is not installed
    monkeypatch.delitem(sys.modules, "prompttune.engine.ray_executor", raising=False)
    config = oracle_config(tmp_path)
    code = main(["compare", "--task", config.task, "--train-size", "60", "--dev-size", "60", "--test-size", "60",
                 "--optimizers", "random", "--seeds", "1", "--runs-dir", str(tmp_path / "runs"),
                 "--jobs", "2", "--executor", "ray:127.0.0.1:6379"])
    captured = capsys.readouterr()
    assert code == 2 and captured.err.strip().splitlines() == [
        "error: --executor ray needs Ray: pip install 'prompttune[ray]'"]
    assert not (tmp_path / "runs").exists()
