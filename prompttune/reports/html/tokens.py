"""Dev score against prompt tokens per request, for every candidate the search scored: what the shipped prompt
costs on every request beside what it gains. One figure, written as prompt_tokens.png (linked from report.md)
and drawn again into report.html, both from verdict.json's `prompt_tokens`."""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib.figure import Figure

from prompttune.reports.html.page import figure

MARKS = {"baseline": ("*", "#d62728"), "dev winner": ("s", "#ff9800"), "shipped": ("D", "#2e7d32")}


def marked_prompts(baseline_id: str, dev_winner_id: str, shipped_id: str) -> dict[str, str]:
    """The prompts the plot marks, role -> candidate id (the dev winner only where it did not ship)."""
    return {"baseline": baseline_id, **({"dev winner": dev_winner_id} if dev_winner_id != shipped_id else {}),
            "shipped": shipped_id}


def tokens_figure(tokens: dict, marked: dict[str, str], objective: str) -> Figure | None:
    """The scatter of `tokens["scored"]` (marker area by dev examples), with the prompts of `marked` (role ->
    candidate id) and the ceiling drawn; None when the search scored no candidate on dev (a DSPy arm)."""
    scored = tokens.get("scored") or []
    if not scored:
        return None
    fig = figure(8.5, 4.4)
    ax = fig.subplots()
    ax.scatter([p["prompt_tokens"] for p in scored], [p["dev_score"] for p in scored],
               s=[8 + 40 * math.sqrt(p["dev_n"] / max(q["dev_n"] for q in scored)) for p in scored],
               color="#1f77b4", alpha=0.45, label=f"candidates scored ({len(scored)})")
    by_id = {p["candidate_id"]: p for p in scored}
    for role, candidate_id in marked.items():
        if (point := by_id.get(candidate_id)) is not None:
            marker, colour = MARKS[role]
            ax.scatter([point["prompt_tokens"]], [point["dev_score"]], marker=marker, s=140, color=colour,
                       edgecolor="black", zorder=3, label=f"{role} ({point['prompt_tokens']} tokens)")
    if (ceiling := tokens.get("max_prompt_tokens")) is not None:
        ax.axvline(ceiling, color="grey", linestyle="--", linewidth=1.2, label=f"--max-prompt-tokens {ceiling}")
    ax.set_xlabel("prompt tokens per request (around an empty input)")
    ax.set_ylabel(f"dev {objective} (selected on dev)")
    ax.set_title(f"Dev {objective} against prompt tokens; marker area: dev examples scored")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return fig


def write_tokens_png(path: Path, tokens: dict, marked: dict[str, str], objective: str) -> bool:
    """The plot as a PNG at `path` (the run directory's prompt_tokens.png); False when there is nothing to plot."""
    fig = tokens_figure(tokens, marked, objective)
    if fig is None:
        return False
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    return True
