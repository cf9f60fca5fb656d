"""README stays a landing page and every link in README and docs/ lands on a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


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
