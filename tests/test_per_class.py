"""Per-class changes: a shipped prompt that wins on total accuracy but loses a class is flagged in
report.md, report.html, verdict.json and the terminal summary."""

from __future__ import annotations

import json
import re

import pytest

from prompttune.engine.results import RunResult
from prompttune.engine.study import run_study
from tests.support import oracle_config, oracle_for


def red_collapses(text: str) -> float:
    """'Label:' wins overall (0.73 against 0.6) while red, the query's colour, drops to 0.3."""
    if "Label:" not in text:
        return 0.6
    return 0.3 if re.findall(r"painted (\w+)", text)[-1] == "red" else 0.95


@pytest.fixture(scope="module")
def red_lost(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    config = oracle_config(tmp_path_factory.mktemp("per-class"), test_size=150)
    return run_study(config, backend=oracle_for(config, red_collapses))


def test_the_shipped_prompt_wins_overall_and_loses_red(red_lost: RunResult) -> None:
    verdict, figures = red_lost.verdict, red_lost.per_class
    assert verdict.confirmed and figures is not None
    assert list(figures.prompts) == ["baseline", "shipped"]
    assert [(loss.prompt, loss.label) for loss in figures.losses] == [("shipped", "red")]
    red = next(c for c in figures.classes if c.label == "red")
    assert red.recall["baseline"] - red.recall["shipped"] > 0.2 and red.n == 50


def test_every_report_flags_the_lost_class(red_lost: RunResult) -> None:
    run_dir = red_lost.run_dir
    report = (run_dir / "report.md").read_text()
    assert "| red | 50 |" in report and "⚠ shipped loses it |" in report
    assert "**Warning: the shipped prompt loses red (" in report and "beyond the margin 0.05" in report
    page = (run_dir / "report.html").read_text()
    assert "<h2>Per-class changes on test" in page and "Warning: the shipped prompt loses red (" in page
    facts = json.loads((run_dir / "verdict.json").read_text())["per_class"]
    assert facts["margin"] == 0.05 and [(loss["prompt"], loss["label"]) for loss in facts["losses"]] == [
        ("shipped", "red")]


def test_a_wider_margin_flags_nothing(red_lost: RunResult) -> None:
    figures = red_lost.per_class
    figures.margin = 0.9
    try:
        assert figures.losses == [] and figures.warning() is None
    finally:
        figures.margin = 0.05
