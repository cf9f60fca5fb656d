"""Anytime curves: best-so-far dev score against calls spent, one colour per arm."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402

from prompttune.results.arms import ArmRun  # noqa: E402

Curve = tuple[str, list[tuple[int, float]], int]  # arm, (calls, best-so-far) points, calls spent


def _steps(anytime: list[tuple[int, float]], spent: int, grid: np.ndarray) -> np.ndarray:
    """Best-so-far value at each grid point; NaN before the first scored point and after the
    run's last call, so a curve ends where its arm stopped spending."""
    calls = np.array([c for c, _ in anytime])
    values = np.array([v for _, v in anytime])
    index = np.searchsorted(calls, grid, side="right") - 1
    return np.where((index >= 0) & (grid <= spent), values[np.clip(index, 0, None)], np.nan)


def draw_anytime(ax: Axes, curves: Sequence[Curve], arms: Sequence[str], cap: int) -> None:
    """Per arm the mean over seeds where every seed has a value (thick), the range over seeds
    (band), and a dot where each run last improved or named its final choice."""
    # Every run's own call counts join the grid, so a last-call update shows on the curves too.
    grid = np.unique(np.concatenate([np.linspace(0, cap, 400), [c for _, points, _ in curves for c, _ in points]]))
    styles = ("-", "--", "-.", ":")
    for i, (colour, arm) in enumerate(zip(plt.cm.tab10.colors, arms)):
        mine = [(points, spent) for name, points, spent in curves if name == arm and points]
        steps = np.array([_steps(points, spent, grid) for points, spent in mine])
        if len(mine) > 1:
            ax.fill_between(grid, steps.min(axis=0), steps.max(axis=0), step="post", color=colour, alpha=0.18,
                            linewidth=0)
        if mine:  # styles differ too, so arms with equal curves stay visible
            ax.step(grid, steps.mean(axis=0), where="post", color=colour, linewidth=2,
                    linestyle=styles[i % len(styles)], label=arm)
        ends = [points[-1] for points, _ in mine]
        ax.scatter([c for c, _ in ends], [v for _, v in ends], color=colour, s=18, zorder=3)
    ax.axvline(cap, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("search calls spent")
    ax.set_ylabel("best-so-far dev score")
    ax.grid(alpha=0.3)


def plot_anytime(runs: list[ArmRun], arms: list[str], cap: int, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.8))
    draw_anytime(ax, [(r.arm, r.anytime, r.search.calls) for r in runs], arms, cap)
    ax.set_title("Anytime performance (mean over seeds; band: range over seeds; dots: last update)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
