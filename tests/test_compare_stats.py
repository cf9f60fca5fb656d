"""The statistics a comparison and a headline report print: exact small CMH p-values (never 0, never a floor
printed as a value), the CMH test labelled descriptive, and the pre-registered claims BH-corrected together."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import StratifiedTable

from prompttune.comparing.summary import cmh_p
from prompttune.reports.compare_report import SEED_PAIR_HEADER, seed_pair_cells
from prompttune.statistics import adjust_pvalues
from prompttune.statistics.seeds import P_FLOOR, Claim, judge_claims, one_sided_t, p_text


def _runs(rights: list[int], n: int) -> list[SimpleNamespace]:
    return [SimpleNamespace(seed=seed, test_correct=[True] * right + [False] * (n - right))
            for seed, right in enumerate(rights)]


def test_a_small_cmh_p_is_the_exact_survival_function_not_a_floor() -> None:
    # Five seeds of 1000 examples, 80% against 70% right: p far below 1e-16, where 1 - cdf is 0.
    first, second = _runs([800] * 5, 1000), _runs([700] * 5, 1000)
    tables = [np.array([[800, 200], [700, 300]])] * 5
    statistic = StratifiedTable(tables).test_null_odds(correction=True).statistic
    p = cmh_p(first, second)
    assert p == pytest.approx(stats.chi2.sf(statistic, 1), rel=1e-9)
    assert P_FLOOR < p < 1e-16
    assert StratifiedTable(tables).test_null_odds(correction=True).pvalue == 0.0  # what was printed before


def test_a_p_at_the_float_floor_is_printed_as_a_bound_and_never_as_zero() -> None:
    assert p_text(0.0123456) == "0.0123" and p_text(3e-22) == "3e-22"
    assert p_text(P_FLOOR) == "< 2.23e-308"
    row = {"first": "a", "second": "b", "keep": "guarded", "seeds": 5, "mean_diff": 0.1, "diff_ci": (0.05, 0.15),
           "p": 0.01, "p_bh": 0.02, "p_perm": 0.0625, "p_perm_bh": 0.0625, "p_cmh": P_FLOOR, "p_cmh_bh": 1.5 * P_FLOOR}
    cells = [str(cell) for cell in seed_pair_cells(row)]
    assert cells[-1] == "< 2.23e-308 (< 3.34e-308)" and cells[-3] == "0.01 (0.02)"
    assert SEED_PAIR_HEADER[-1] == "CMH p (BH; descriptive: pooled examples, prompts fixed)"
    assert not any("1e-300" in cell or cell.startswith("0 ") for cell in cells)


def test_headline_claims_are_one_sided_paired_t_over_seeds_bh_corrected_together() -> None:
    gains = [0.04, 0.02, 0.05, 0.03, 0.01]
    claims = judge_claims([Claim("sst2", "reflect", "dspy-gepa", 0.0, gains),
                           Claim("sst2", "reflect", "dspy-gepa", 0.03, gains),
                           Claim("agnews", "reflect", "dspy-gepa", 0.0, [-0.01, 0.02, -0.03, 0.0, -0.02]),
                           Claim("trec", "reflect", "dspy-gepa", 0.0, [0.02] * 5)])
    expected = [stats.ttest_1samp(gains, 0.0, alternative="greater").pvalue,
                stats.ttest_1samp(gains, 0.03, alternative="greater").pvalue,
                stats.ttest_1samp([-0.01, 0.02, -0.03, 0.0, -0.02], 0.0, alternative="greater").pvalue]
    assert [c.p for c in claims[:3]] == pytest.approx(expected)
    assert claims[0].p < 0.05 < claims[1].p and claims[2].p > 0.5  # one-sided: a loss is no evidence of a gain
    assert claims[3].p is None and claims[3].p_bh is None  # no spread: untested, not p = 0
    assert [c.p_bh for c in claims[:3]] == pytest.approx(list(adjust_pvalues(expected, method="fdr_bh")[1]))
    assert claims[1].name == "sst2: reflect − dspy-gepa > 0.03"
    assert one_sided_t([0.1]) is None
