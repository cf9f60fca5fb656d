"""README stays a landing page and every link in README and docs/ lands on a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]  # results pages too


def test_readme_is_a_landing_page() -> None:
    assert len((REPO / "README.md").read_text().splitlines()) <= 200


def test_docs_hold_the_reference_pages() -> None:
    for name in ("running", "verdict", "budget", "resume", "tasks-and-spaces", "optimizers", "compare",
                 "backends", "speed", "api", "results"):
        assert (REPO / "docs" / f"{name}.md").is_file(), name


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path) -> None:
    text = page.read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    missing = [t for t in targets if not t.startswith(("http://", "https://")) and not (page.parent / t).exists()]
    assert not missing, missing


def test_no_page_prints_a_cmh_p_as_below_1e_300() -> None:
    """statsmodels' `1 - cdf` CMH p was 0 below ~1e-16 and was printed as "< 1e-300": the exact value is printed
    now (chi2.sf), so no page may keep that bound."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    assert not [page.name for page in pages if "< 1e-300" in page.read_text()]


def _readme_results() -> str:
    text = (REPO / "README.md").read_text()
    return text.split("\n## Results\n", 1)[1].split("\n## ", 1)[0]


def _headline_reports() -> list[Path]:
    return sorted(p for p in (REPO / "docs" / "results").glob("headline_*.md") if not p.name.startswith("headline_protocol"))


def test_readme_results_rows_name_command_commit_and_date() -> None:
    """Every row of a results table (one whose header names a commit) names its command, commit and date."""
    tables = [table.splitlines() for table in re.findall(r"(?m)(?:^\|.*\n?)+", _readme_results())]
    rows = [line for table in tables if "commit" in table[0] for line in table[2:]]
    assert rows, "README's Results holds no measured row"
    for row in rows:
        assert re.search(r"`[^`]+`", row) and re.search(r"\b[0-9a-f]{7,40}\b", row) and re.search(
            r"\b20\d\d-\d\d-\d\d\b", row), row


def test_readme_headline_figures_come_from_the_headline_reports() -> None:
    """Every figure README's Results shows beside a headline report's link is in that report; without a report,
    README says the headline has not run."""
    results, reports = _readme_results(), _headline_reports()
    if not reports:
        assert "has not been run yet" in results
        return
    for report in reports:
        assert f"docs/results/{report.name}" in results, f"README's Results does not show {report.name}"
    for line in results.splitlines():
        for name in re.findall(r"docs/results/(headline_[\w-]+\.md)", line):
            figures = set(re.findall(r"[+−-]?\d+\.\d+", (REPO / "docs" / "results" / name).read_text()))
            shown = [f for f in re.findall(r"[+−-]?\d+\.\d+", line) if f not in figures]
            assert not shown, f"{name} does not hold README's {shown}"


def test_readme_and_headline_reports_make_no_unmeasured_claims() -> None:
    for page in [REPO / "README.md", *_headline_reports()]:
        # A report's fairness checks are the run's own measured statements ("disjoint at every seed"), not claims.
        text = page.read_text().lower().split("\n## fairness checks\n", 1)[0]
        assert not [w for w in ("leads", "bars met", "every seed", "p = 0 ") if w in text], page.name


def test_pages_tell_users_to_pass_serve_generate() -> None:
    """`--serve` replaced `--scoring`: where a page tells users what to pass, or shows a command, it names
    `--serve generate` (running.md documents `--scoring` as the older spelling; export.md names a run a test made)."""
    told = re.compile(r"(?:use|add|needs?) `--scoring generate`|^\s*\w[\w-]* .*--scoring generate", re.MULTILINE)
    assert not [page.name for page in PAGES if told.search(page.read_text())]
