"""Anytime curves: best-so-far dev score against calls spent, one colour per arm."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402

from prompttune.compare.arms import ArmRun  # noqa: E402


def _steps(anytime: list[tuple[int, float]], spent: int, grid: np.ndarray) -> np.ndarray:
    """Best-so-far value at each grid point; NaN before the first scored point and after the
    run's last call, so a curve ends where its arm stopped spending."""
    calls = np.array([c for c, _ in anytime])
    values = np.array([v for _, v in anytime])
    index = np.searchsorted(calls, grid, side="right") - 1
    return np.where((index >= 0) & (grid <= spent), values[np.clip(index, 0, None)], np.nan)


def plot_anytime(runs: list[ArmRun], arms: list[str], cap: int, path: Path) -> None:
    """Thin lines per seed, a thick line for the mean over seeds where every seed has a value,
    and a dot where each run last improved or named its final choice."""
    # Every run's own call counts join the grid, so a last-call update shows on the curves too.
    grid = np.unique(np.concatenate([np.linspace(0, cap, 400), [c for r in runs for c, _ in r.anytime]]))
    fig, ax = plt.subplots(figsize=(8, 4.8))
    styles = ("-", "--", "-.", ":")
    for i, (colour, arm) in enumerate(zip(plt.cm.tab10.colors, arms)):
        curves = [_steps(r.anytime, r.search.calls, grid) for r in runs if r.arm == arm and r.anytime]
        for curve in curves:
            ax.step(grid, curve, where="post", color=colour, alpha=0.25, linewidth=0.8)
        if curves:  # styles differ too, so arms with equal curves stay visible
            ax.step(grid, np.mean(curves, axis=0), where="post", color=colour, linewidth=2,
                    linestyle=styles[i % len(styles)], label=arm)
        ends = [r.anytime[-1] for r in runs if r.arm == arm and r.anytime]
        ax.scatter([c for c, _ in ends], [v for _, v in ends], color=colour, s=18, zorder=3)
    ax.axvline(cap, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("search calls spent")
    ax.set_ylabel("best-so-far dev score")
    ax.set_title("Anytime performance (mean over seeds; thin: single seeds; dots: last update)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
