"""Multi-prompt evaluation: how much a result depends on the exact wording.

A single prompt's score mixes the task ability with that prompt's luck
(Mizrahi et al. 2024, "State of What Art?"); these helpers summarise a set of
paraphrased prompts instead, and measure per-example sensitivity (POSIX,
Chatterjee et al. 2024).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import friedmanchisquare, spearmanr


def cps(max_p: float, avg_p: float) -> float:
    """Combined Performance Score (Mizrahi et al. 2024): best score, discounted by its gap to the average.

    A model whose best prompt is far above its typical prompt is less
    dependable than one with the same best score and a small gap.
    """
    return (1.0 - (max_p - avg_p)) * max_p


@dataclass(frozen=True)
class PromptSetSummary:
    """Spread and consistency of one model's accuracy over a set of paraphrased prompts."""

    accuracies: tuple[float, ...]  # one per prompt
    spread: float  # max - min accuracy
    max_p: float
    avg_p: float
    cps: float
    std: float  # sample std (ddof=1) over prompts; nan for a single prompt
    kendall_w: float  # nan when undefined, see summarize_prompt_set
    friedman_stat: float
    friedman_p: float


def _friedman(correct: np.ndarray) -> tuple[float, float, float]:
    """Friedman chi-square, its p-value and Kendall's W; nan when the test is undefined.

    Undefined with fewer than 3 prompts (scipy's Friedman needs 3 treatments)
    and when no example separates the prompts (every prompt right, or every
    prompt wrong, on every example): then nothing ranks the prompts.
    """
    n_prompts, n_examples = correct.shape
    discriminating = correct.min(axis=0) != correct.max(axis=0)
    if n_prompts < 3 or not discriminating.any():
        return (math.nan, math.nan, math.nan)
    result = friedmanchisquare(*correct.astype(float))
    stat = float(result.statistic)
    return (stat, float(result.pvalue), stat / (n_examples * (n_prompts - 1)))


def summarize_prompt_set(correct: np.ndarray) -> PromptSetSummary:
    """Summarise a (n_prompts, n_examples) 0/1 correctness matrix.

    Kendall's W is taken from the tie-corrected Friedman chi-square as
    W = chi2 / (m (k - 1)) with treatments = the k prompts and blocks = the m
    examples. Each example "ranks" the prompts (right above wrong, ties
    shared), and W in [0, 1] measures how consistently the examples agree on
    that ranking: near 1 means the same prompts win on every example (a real
    wording effect), near 0 means prompt differences look like noise. Ranking
    examples by difficulty with prompts as judges would be degenerate for 0/1
    data, hence this orientation. Examples all prompts agree on count as
    blocks but add no ranking information, so they pull W towards 0.
    """
    matrix = np.asarray(correct, dtype=float)
    if matrix.ndim != 2 or matrix.size == 0:
        raise ValueError(f"correct must be a non-empty 2-D array, got shape {matrix.shape}")
    accuracies = matrix.mean(axis=1)
    max_p, avg_p = float(accuracies.max()), float(accuracies.mean())
    stat, p_value, w = _friedman(matrix)
    return PromptSetSummary(
        accuracies=tuple(float(a) for a in accuracies),
        spread=float(accuracies.max() - accuracies.min()),
        max_p=max_p,
        avg_p=avg_p,
        cps=cps(max_p, avg_p),
        std=float(np.std(accuracies, ddof=1)) if accuracies.size > 1 else math.nan,
        kendall_w=w,
        friedman_stat=stat,
        friedman_p=p_value,
    )


def _check_pair(scores_a: Sequence[float], scores_b: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(scores_a, dtype=float)
    b = np.asarray(scores_b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"score vectors must be 1-D and equally long, got {a.shape} and {b.shape}")
    return a, b


def top_k_iou(scores_a: Sequence[float], scores_b: Sequence[float], k: int) -> float:
    """Overlap of the k best prompts under two settings (models, splits, seeds): |A and B| / |A or B|.

    Answers "would I pick the same prompts elsewhere?"; ties are broken by
    prompt index so the result is deterministic.
    """
    a, b = _check_pair(scores_a, scores_b)
    if not 1 <= k <= a.size:
        raise ValueError(f"k must be in 1..{a.size}, got {k}")
    top_a = set(np.argsort(-a, kind="stable")[:k].tolist())
    top_b = set(np.argsort(-b, kind="stable")[:k].tolist())
    return len(top_a & top_b) / len(top_a | top_b)


def rank_agreement(scores_a: Sequence[float], scores_b: Sequence[float]) -> float:
    """Spearman rho between prompt scores under two settings; nan if either side is constant."""
    a, b = _check_pair(scores_a, scores_b)
    return float(spearmanr(a, b).statistic)


def posix(logp: np.ndarray, lengths: np.ndarray) -> float:
    """POSIX prompt sensitivity of ONE example (Chatterjee et al. 2024).

    `logp[i, j]` = log P(y_j | x_i): the log-likelihood, under prompt variant
    x_i, of the response y_j that variant x_j produced; `lengths[j]` = tokens
    in y_j. psi = 1/(N(N-1)) * sum_{i != j} |logp[i, j] - logp[j, j]| / L(y_j):
    the mean per-token change in a response's likelihood when only the prompt
    wording changes. 0 means the wording does not matter.
    """
    matrix = np.asarray(logp, dtype=float)
    lens = np.asarray(lengths, dtype=float)
    n = matrix.shape[0]
    if matrix.shape != (n, n) or n < 2 or lens.shape != (n,):
        raise ValueError(
            f"need an N x N logp (N >= 2) and N lengths, got {matrix.shape} and {lens.shape}"
        )
    if np.any(lens <= 0):
        raise ValueError("response lengths must be positive")
    # Diagonal terms are |logp[j, j] - logp[j, j]| = 0, so summing everything is the i != j sum.
    shifts = np.abs(matrix - np.diag(matrix)[None, :]) / lens[None, :]
    return float(shifts.sum() / (n * (n - 1)))


def posix_over_examples(examples: Sequence[tuple[np.ndarray, np.ndarray]]) -> float:
    """Dataset-level POSIX: the mean of per-example values."""
    if len(examples) == 0:
        raise ValueError("posix_over_examples needs at least one example")
    return float(np.mean([posix(logp, lengths) for logp, lengths in examples]))


def top_two_gap(label_logprobs: np.ndarray) -> np.ndarray:
    """Per example, how far the chosen label's score leads the runner-up.

    A small gap marks an answer that a minor wording change could flip.
    """
    scores = np.asarray(label_logprobs, dtype=float)
    if scores.ndim != 2 or scores.shape[1] < 2:
        raise ValueError(f"need (n_examples, n_labels >= 2) scores, got shape {scores.shape}")
    top_two = np.sort(scores, axis=1)[:, -2:]
    return top_two[:, 1] - top_two[:, 0]


def sensitivity_quantiles(
    values: Sequence[float], qs: Sequence[float] = (0.5, 0.9, 0.99)
) -> dict[float, float]:
    """Quantiles of a per-example sensitivity measure: the tail shows the fragile examples."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise ValueError("sensitivity_quantiles needs at least one value")
    return {float(q): float(np.quantile(data, q)) for q in qs}
