"""report.html: built beside report.md by every run, rebuilt by `prompttune report RUN_DIR` from
the directory alone, and checked in headless Chromium (every image decodes, no script error)."""

from __future__ import annotations

import json

import pytest

from prompttune.cli import main
from prompttune.engine.study import run_study
from prompttune.reports import PASSED_BACKEND
from prompttune.results.run import RunResult
from tests.browser import check_page, chromium_or_skip
from tests.support import oracle_config, oracle_for


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """Successive halving on the oracle: enough first-round grid candidates for fANOVA."""
    config = oracle_config(tmp_path_factory.mktemp("html"), optimizer="sh", dev_size=20, budget=400)
    return run_study(config, backend=oracle_for(config))


def test_optimize_report_renders_in_a_browser(oracle_run: RunResult) -> None:
    page = oracle_run.run_dir / "report.html"
    text = page.read_text()
    headings = ["Verdict", "Anytime curve", "Search dimensions", "Held-out test per class",
                "Discordant test examples", "The prompt (best_prompt.txt)", "Budget and tokens"]
    positions = [text.index(f"<h2>{h}") for h in headings]
    assert positions == sorted(positions)  # the verdict first
    assert "fANOVA importance" in text and "http" not in text.replace("http-equiv", "")  # self-contained
    browser = chromium_or_skip()
    shot = page.with_name("report.png")
    check = check_page(browser, page, shot)
    assert check.images >= 4 and check.images_ok == check.images, check
    assert check.errors == "" and check.console_errors == [], check
    assert shot.stat().st_size > 20_000


def test_run_directory_holds_what_the_page_needs(oracle_run: RunResult) -> None:
    run_dir, verdict = oracle_run.run_dir, oracle_run.verdict
    facts = json.loads((run_dir / "verdict.json").read_text())
    assert facts["verdict"]["summary"] == verdict.summary() and facts["verdict"]["shipped"] == verdict.shipped.id
    records = [json.loads(line) for line in (run_dir / "test_records.jsonl").read_text().splitlines()]
    assert len(records) == len(verdict.records[verdict.baseline.id])
    assert set(records[0]["pred"]) == {verdict.baseline.id, *(t.candidate.id for t in verdict.tested)}
    assert (run_dir / "baseline_prompt.txt").read_text().startswith("Classify the input")


def test_report_command_rebuilds_the_page_from_the_directory(oracle_run: RunResult,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    page = oracle_run.run_dir / "report.html"
    before = page.read_text()
    page.unlink()
    assert main(["report", str(oracle_run.run_dir)]) == 0
    assert capsys.readouterr().out.strip() == str(page)
    assert page.read_text() == before


def test_reports_show_importances_and_versions(oracle_run: RunResult) -> None:
    """A grid searcher (sh) scores enough first-round grid candidates for fANOVA in both reports."""
    run_dir = oracle_run.run_dir
    assert oracle_run.config.optimizer == "sh"
    report = (run_dir / "report.md").read_text()
    assert "| dimension | fANOVA importance |" in report and "fANOVA skipped" not in report
    assert "## Versions" in report and "| prompttune | `" in report and "| backend description | `" in report
    page = (run_dir / "report.html").read_text()
    assert "fANOVA importance" in page and "fANOVA skipped" not in page and "<h2>Versions" in page
    versions = json.loads((run_dir / "verdict.json").read_text())["versions"]
    assert versions["model"] == oracle_run.backend.model_id and "dspy" not in versions


def test_reports_name_a_backend_passed_in_not_the_default_model(oracle_run: RunResult) -> None:
    """The oracle was passed as a Backend object: the config's model (the embedded default) never ran."""
    run_dir, ran = oracle_run.run_dir, oracle_run.backend
    assert oracle_run.config.model.startswith("embedded:") and ran is not None
    report, page = (run_dir / "report.md").read_text(), (run_dir / "report.html").read_text()
    assert f"Model `{ran.model_id}` (CountingBackend, passed in)" in report
    assert f"Model {ran.model_id} (CountingBackend, passed in)" in page
    assert oracle_run.config.model not in report + page
    assert oracle_run.versions[PASSED_BACKEND] == "CountingBackend"
