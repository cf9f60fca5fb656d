"""Per-class changes: a shipped prompt that wins on total accuracy but loses a class is flagged in
report.md, report.html, verdict.json and the terminal summary; a comparison flags each arm's pick, an
evaluation each prompt against the first, and both give their versions."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import prompttune
from prompttune.cli import main
from prompttune.core.config import RunConfig
from prompttune.core.types import Record
from prompttune.engine import comparison, evaluate
from prompttune.engine.comparison import CompareRequest, run_compare
from prompttune.engine.study import run_study, run_versions
from prompttune.results.arms import load_arm_run
from prompttune.results.compare import CompareResult
from prompttune.results.run import RunResult
from prompttune.scoring.per_class import class_figures
from prompttune.testing import SyntheticOracleBackend, colours_task_file
from tests.support import oracle_config, oracle_for


def red_collapses(text: str) -> float:
    """'Label:' wins overall (0.73 against 0.6) while red, the query's colour, drops to 0.3."""
    if "Label:" not in text:
        return 0.6
    return 0.3 if re.findall(r"painted (\w+)", text)[-1] == "red" else 0.95


@pytest.fixture(scope="module")
def red_lost(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    config = oracle_config(tmp_path_factory.mktemp("per-class"), optimizer="sh", test_size=150)
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


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> CompareResult:
    config = oracle_config(tmp_path_factory.mktemp("per-class-compare"), test_size=150)
    return run_compare(CompareRequest(config, ["random", "sh"], [0], {}, backend=oracle_for(config, red_collapses)))


def test_a_comparison_flags_each_arms_lost_classes_and_gives_its_versions(compared: CompareResult) -> None:
    run_dir = compared.run_dir
    assert all(r.per_class is not None and [loss.label for loss in r.per_class.losses] == ["red"]
               for r in compared.runs)
    assert load_arm_run(compared.runs[0].run_dir).per_class == compared.runs[0].per_class  # arm.json keeps them
    report = (run_dir / "report.md").read_text()
    assert "## Classes lost" in report and "| random | 1/1 | seed 0: red (" in report and "| sh | 1/1 |" in report
    assert "## Versions" in report and f"| prompttune | `{prompttune.__version__}` |" in report
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["class_loss_margin"] == 0.05 and summary["versions"]["prompttune"] == prompttune.__version__
    assert summary["arms"][0]["runs"][0]["per_class"]["losses"][0]["label"] == "red"
    page = (run_dir / "report.html").read_text()
    assert "<h2>Classes lost" in page and "seed 0: red (" in page and "<h2>Versions" in page


def test_a_comparison_says_the_dspy_release_when_a_dspy_arm_ran() -> None:
    dspy = pytest.importorskip("dspy")
    backend = SyntheticOracleBackend([], lambda text: 0.5)
    config = RunConfig()
    assert "dspy" not in run_versions(config, backend, ["random", "sh"])
    assert run_versions(config, backend, ["random", "dspy-gepa"])["dspy"] == dspy.__version__


def test_evaluate_flags_the_classes_a_prompt_loses_against_the_first(tmp_path: Path) -> None:
    config = oracle_config(tmp_path, test_size=150)
    result = prompttune.evaluate(config.task, prompts=["Item: {text}\nAnswer:", "Item: {text}\nLabel:"],
                                 backend=oracle_for(config, red_collapses), runs_dir=str(tmp_path / "runs"),
                                 train_size=60, dev_size=60, test_size=150)
    figures = result.settings[0].per_class
    assert figures.reference == "p01" and [(loss.prompt, loss.label) for loss in figures.losses] == [("p02", "red")]
    report = (result.run_dir / "report.md").read_text()
    assert "### Classes lost against the first prompt" in report and "| 2 | p02 | red (" in report
    assert "## Versions" in report
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["per_class"]["logit"]["losses"][0]["label"] == "red" and summary["versions"]["model"] == result.model_id
    page = (result.run_dir / "report.html").read_text()
    assert "Warning: the p02 prompt loses red (" in page and "<h2>Versions" in page


def test_the_margin_reaches_evaluate_and_compare_from_the_command_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(comparison, "build_backend", lambda config: oracle_for(config, red_collapses))
    task = str(colours_task_file(tmp_path))
    assert main(["compare", "--task", task, "--optimizers", "random", "--seeds", "1", "--budget", "300",
                 "--train-size", "60", "--dev-size", "60", "--test-size", "150", "--class-loss-margin", "0.9",
                 "--runs-dir", str(tmp_path / "runs")]) == 0
    summary = json.loads(next((tmp_path / "runs").glob("*-compare/summary.json")).read_text())
    assert summary["class_loss_margin"] == 0.9 and summary["arms"][0]["runs"][0]["per_class"]["losses"] == []
    (tmp_path / "prompts.yaml").write_text('- "Item: {text}\\nAnswer:"\n- "Item: {text}\\nLabel:"\n')
    monkeypatch.setattr(evaluate, "build_backend",
                        lambda config: oracle_for(oracle_config(tmp_path, test_size=150), red_collapses))
    assert main(["evaluate", "--task", task, "--prompts", str(tmp_path / "prompts.yaml"), "--train-size", "60",
                 "--dev-size", "60", "--test-size", "150", "--class-loss-margin", "0.9",
                 "--runs-dir", str(tmp_path / "eval")]) == 0
    summary = json.loads(next((tmp_path / "eval").glob("*/summary.json")).read_text())
    assert summary["per_class"]["logit"]["margin"] == 0.9 and summary["per_class"]["logit"]["losses"] == []


def _records(golds: list[int], preds: list[int | None]) -> list[Record]:
    return [Record(f"e{i}", g, p, None, None, 0, 0, False) for i, (g, p) in enumerate(zip(golds, preds))]


def test_a_prompt_that_answers_one_label_is_flagged_with_the_majority_share() -> None:
    """Under generation a prompt can win by answering at all while answering one class every time (the
    reviewer-mood run: 0.000 → 0.558, every answer `1`): the warning says so beside the verdict."""
    golds = [0, 0, 1, 1, 1]
    figures = class_figures({"baseline": _records(golds, [None] * 5), "shipped": _records(golds, [1, 1, 1, None, 1])},
                            {"baseline": "b", "shipped": "s"}, ["unfavourable", "favourable"], 0.05)
    assert list(figures.one_label_prompts) == ["shipped"]
    assert figures.warning() == ("the shipped prompt answers favourable whenever it answers a label, so it scores at "
                                 "most that class's share (0.600; always answering the most frequent class, "
                                 "favourable, scores 0.600; `--objective macro_f1` searches for prompts that "
                                 "tell the classes apart)")
    varied = class_figures({"baseline": _records(golds, [None] * 5), "shipped": _records(golds, [0, 1, 1, 1, 1])},
                           {"baseline": "b", "shipped": "s"}, ["unfavourable", "favourable"], 0.05)
    assert varied.one_label_prompts == {} and "answers" not in (varied.warning() or "")
