"""What an `evaluate` run directory holds, as text, rows and facts for the record step to write (report.md,
prompts.jsonl, records.jsonl, posix.jsonl, summary.json), the accuracy plot, and the terminal summary."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from rich.console import Console
from rich.table import Table

from prompttune.reports import ci_text, model_name
from prompttune.reports.optimize_report import lost_classes, versions_lines
from prompttune.scoring import contract
from prompttune.scoring.per_class import PerClass
from prompttune.statistics.multiprompt import sensitivity_quantiles

if TYPE_CHECKING:
    from prompttune.results.evaluate import EvaluationResult, SettingResult

GAP_QUANTILES = (0.01, 0.1, 0.5)  # small gaps are the fragile answers
POSIX_QUANTILES = (0.5, 0.9, 0.99)  # large POSIX values are the sensitive examples
SCORING_NOTES = {
    "logit": "direct: argmax of the label log-probabilities",
    "generate": "greedy generation, then label extraction (invalid if no or several labels)",
    "calibrated": "contextual calibration: label probabilities divided by those for N/A, '' and [MASK]",
}


def _num(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _p(p: float) -> str:
    return "n/a" if math.isnan(p) else f"{p:.3g}"



def _quantiles(values: Iterable[float], qs: tuple[float, ...]) -> str:
    found = sensitivity_quantiles(list(values), qs)
    return ", ".join(f"{q:.0%}: {v:.3f}" for q, v in found.items())


def plot_accuracies(result: "EvaluationResult", path: Path) -> None:
    """Per-prompt accuracy with Wilson CIs, sorted by the first setting; shaded band = spread."""
    names = [p.name for p in result.prompts]
    order = np.argsort([-s.accuracy for s in result.settings[0].scores], kind="stable")
    fig = Figure(figsize=(max(6.0, 0.55 * len(names) + 2.5), 4.8))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    width = 0.25 if len(result.settings) > 1 else 0.0
    for s, setting in enumerate(result.settings):
        acc = np.array([setting.scores[i].accuracy for i in order])
        low = np.array([setting.scores[i].accuracy_ci[0] for i in order])
        high = np.array([setting.scores[i].accuracy_ci[1] for i in order])
        x = np.arange(len(names)) + (s - (len(result.settings) - 1) / 2) * width
        bars = ax.errorbar(x, acc, yerr=[acc - low, high - acc], fmt="o", capsize=3,
                           label=f"{setting.scoring} (spread {setting.summary.spread:.3f})")
        ax.axhspan(acc.min(), acc.max(), color=bars[0].get_color(), alpha=0.1)
    ax.axhline(1 / len(result.task.labels), color="grey", linestyle=":", label="chance")
    ax.set_xticks(range(len(names)), [names[i] for i in order], rotation=45, ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy (95% Wilson CI)")
    ax.set_title(f"{result.task.name}: {len(names)} prompts on {len(result.example_ids)} "
                 f"{result.config.split} examples")
    ax.legend(loc="lower left", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


CLASS_LOSS_HEADER = ["#", "prompt", "classes lost (the first prompt's recall → its own)"]
CLASS_LOSS_NOTE = ("Per class, each prompt's recall against the first prompt's ({reference}) on the same examples: "
                   "flagged where it falls more than {margin} (`--class-loss-margin`) below, even when its total is "
                   "higher. summary.json has every class's recall and precision per prompt.")


def class_loss_rows(figures: PerClass) -> list[list[object]]:
    """Per prompt after the first: the classes it loses against the first (report.md and report.html alike)."""
    return [[i, role, lost_classes(loss for loss in figures.losses if loss.prompt == role) or "–"]
            for i, role in enumerate(figures.prompts, start=1) if role != figures.reference]


def _class_loss_lines(figures: PerClass) -> list[str]:
    return ["### Classes lost against the first prompt", "",
            CLASS_LOSS_NOTE.format(reference=figures.reference, margin=figures.margin), "",
            "| " + " | ".join(CLASS_LOSS_HEADER) + " |", "|" + " --- |" * len(CLASS_LOSS_HEADER),
            *("| " + " | ".join(map(str, row)) + " |" for row in class_loss_rows(figures)), ""]


def _setting_section(result: "EvaluationResult", setting: "SettingResult") -> list[str]:
    s = setting.summary
    lines = [f"## Per prompt — {setting.scoring}", "", f"Scoring: {SCORING_NOTES[setting.scoring]}.", "",
             "| # | prompt | accuracy | 95% CI (Wilson) | v (valid rate) | 95% CI | a (accuracy of valid) "
             "| 95% CI | macro-F1 | median top-two gap |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for i, (prompt, sc) in enumerate(zip(result.prompts, setting.scores), start=1):
        lines.append(f"| {i} | {prompt.name} | {sc.accuracy:.3f} | {ci_text(sc.accuracy_ci)} | {sc.valid_rate:.3f} "
                     f"| {ci_text(sc.valid_ci)} | {_num(sc.valid_accuracy)} | {ci_text(sc.valid_accuracy_ci)} "
                     f"| {_num(sc.macro_f1)} | {_num(sc.median_gap)} |")
    lines += ["", f"Across prompts: spread (max − min) **{s.spread:.3f}**; MaxP {s.max_p:.3f}; "
              f"AvgP {s.avg_p:.3f}; CPS {s.cps:.3f}; std {_num(s.std)}; Kendall's W {_num(s.kendall_w)}; "
              f"Friedman χ² {_num(s.friedman_stat, 2)} (p = {_p(s.friedman_p)}) over "
              f"{len(result.example_ids)} examples. W near 1: the same prompts win on every example "
              f"(a real wording effect); near 0: prompt differences look like noise.", ""]
    return lines + _class_loss_lines(setting.per_class)


def _comparison_section(result: "EvaluationResult") -> list[str]:
    c = result.comparison
    if c is None:
        return []
    a, b = result.settings
    lines = [f"## {c.a} vs {c.b}", "",
             f"Top-{c.k} IoU = **{c.iou:.3f}** (overlap of the {c.k} best prompts under each scoring); "
             f"Spearman ρ = **{_num(c.spearman)}** between the per-prompt accuracies. A low value means the "
             f"scoring method alone changes which prompt looks best.", "",
             f"| # | prompt | {c.a} | {c.b} | Δ |", "| --- | --- | --- | --- | --- |"]
    for i, (prompt, sa, sb) in enumerate(zip(result.prompts, a.scores, b.scores), start=1):
        lines.append(f"| {i} | {prompt.name} | {sa.accuracy:.3f} | {sb.accuracy:.3f} | "
                     f"{sb.accuracy - sa.accuracy:+.3f} |")
    return lines + [""]


def _ensemble_section(result: "EvaluationResult") -> list[str]:
    if not result.ensembles:
        return []
    k = result.config.ensemble
    singles = next((s for s in result.settings if s.scoring == result.ensemble_base), None)
    lines = [f"## Template ensembles (K = {k}, mean {result.ensemble_base} label probabilities)", "",
             "Disjoint groups of K prompts (seeded shuffle); each ensemble predicts by the mean label "
             "probability of its members.", "",
             "| ensemble | members | accuracy | 95% CI (Wilson) | mean member | best member |",
             "| --- | --- | --- | --- | --- | --- |"]
    for g, ens in enumerate(result.ensembles, start=1):
        members = ", ".join(result.prompts[i].name for i in ens.members)
        lines.append(f"| E{g} | {members} | {ens.score.accuracy:.3f} | {ci_text(ens.score.accuracy_ci)} | "
                     f"{np.mean(ens.member_accuracies):.3f} | {max(ens.member_accuracies):.3f} |")
    accs = [e.score.accuracy for e in result.ensembles]
    spread = f"Spread over ensembles {max(accs) - min(accs):.3f}"
    if singles is not None:
        spread += f" vs {singles.summary.spread:.3f} over single prompts"
    return lines + ["", spread + ".", ""]


def _sensitivity_section(result: "EvaluationResult") -> list[str]:
    lines = ["## Sensitivity per example", ""]
    for setting in result.settings:
        gaps = setting.gaps()
        if gaps is not None:
            lines.append(f"- Top-two label log-probability gap ({setting.scoring}, all prompt × example "
                         f"pairs), quantiles {_quantiles(gaps, GAP_QUANTILES)}. A small gap marks an answer "
                         f"that a minor change could flip.")
    p = result.posix
    if p is not None:
        worst = int(np.argmax(p.per_example))
        lines.append(f"- POSIX (Chatterjee et al. 2024) over {len(result.prompts)} prompts and "
                     f"{len(p.example_ids)} examples: **ψ = {p.value:.3f}** (mean per-token change of a "
                     f"response's log-likelihood when only the prompt changes; 0 = insensitive). "
                     f"Per-example quantiles {_quantiles(p.per_example, POSIX_QUANTILES)}; most sensitive "
                     f"example `{p.example_ids[worst]}` (ψ = {p.per_example[worst]:.3f}). Responses: greedy, "
                     f"up to {result.config.max_new_tokens} tokens.")
    return lines + [""] if len(lines) > 2 else []


def report_text(result: "EvaluationResult") -> str:
    """report.md."""
    config, ledger = result.config, result.ledger
    source = (f"prompts file `{config.prompts}`" if config.prompts else
              f"{len(result.prompts)} candidates sampled from space "
              f"`{config.space or 'built-in'}`")
    words = ", ".join(result.prompts[0].spec.label_words)
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(ledger.calls_by_kind.items())) or "all cached"
    lines = [
        f"# prompttune evaluate: {result.task.name} · {len(result.prompts)} prompts · {config.split} split "
        f"· seed {config.seed}", "",
        f"Model `{model_name(config.model, result.versions)}` (`{result.model_id}`); {len(result.example_ids)} "
        f"{config.split} examples "
        f"(stratified, fixed by the seed); {source}; label words of the first prompt: {words}. Nothing was "
        f"selected on these examples, but the best of {len(result.prompts)} prompts (MaxP) is still an "
        f"optimistic number: read it next to AvgP and the spread.", "",
        *([f"Serving contract `serve: {config.serve}`: {contract.WORDS[config.serve]}; prompts scored by "
           f"{contract.scored_by(config.serve)} (`{config.scoring}`), as an optimize verdict under it scores them.",
           ""] if config.serve else []),
        "![per-prompt accuracy with Wilson 95% CIs, sorted](accuracy.png)", "",
    ]
    for setting in result.settings:
        lines += _setting_section(result, setting)
    lines += _comparison_section(result) + _ensemble_section(result) + _sensitivity_section(result)
    lines += ["## Budget", "",
              f"{ledger.calls} model calls ({kinds}) and {ledger.tokens} tokens ({ledger.prompt_tokens} prompt + "
              f"{ledger.completion_tokens} completion), cap {ledger.cap_calls or 'none'}; cache hits are free. "
              f"Wall time {result.wall_seconds:.0f} s.", "", *versions_lines(result.versions), "## Prompts", ""]
    for i, prompt in enumerate(result.prompts, start=1):
        lines += [f"{i}. **{prompt.name}**", "", "   ```text",
                  *(f"   {line}" for line in prompt.source.splitlines() or [""]), "   ```", ""]
    return "\n".join(lines)


def prompt_rows(result: "EvaluationResult") -> Iterator[dict]:
    """prompts.jsonl: each prompt with its results under every scoring."""
    return ({"index": i, "name": p.name, "source": p.source, "spec": asdict(p.spec),
             "results": {s.scoring: asdict(s.scores[i]) for s in result.settings}}
            for i, p in enumerate(result.prompts))


def record_rows(result: "EvaluationResult") -> Iterator[dict]:
    """records.jsonl: every scored example, per scoring and prompt."""
    return ({"scoring": s.scoring, "prompt": result.prompts[i].name, **asdict(r)}
            for s in result.settings for i, rows in enumerate(s.records) for r in rows)


def posix_rows(result: "EvaluationResult") -> Iterator[dict] | None:
    """posix.jsonl: POSIX per example with the responses it re-scored (None where POSIX was not measured)."""
    if (p := result.posix) is None:
        return None
    return ({"example_id": e, "posix": v, "responses": list(r)}
            for e, v, r in zip(p.example_ids, p.per_example, p.responses))


def summary_facts(result: "EvaluationResult") -> dict:
    """summary.json: each scoring's summary, the comparison, ensembles, POSIX, per-class figures and the ledger."""
    return {
        "settings": {s.scoring: asdict(s.summary) for s in result.settings},
        "comparison": None if result.comparison is None else asdict(result.comparison),
        "ensembles": None if result.ensembles is None else [asdict(e) for e in result.ensembles],
        "posix": None if result.posix is None else result.posix.value,
        "per_class": {s.scoring: s.per_class.to_dict() for s in result.settings},
        "ledger": result.ledger.summary(),
        "wall_seconds": result.wall_seconds,
        "versions": result.versions,
    }


def print_summary(result: "EvaluationResult", console: Console) -> None:
    table = Table(title=f"prompttune evaluate · {result.run_dir.name}")
    table.add_column("#", justify="right")
    table.add_column("prompt")
    for setting in result.settings:
        table.add_column(f"{setting.scoring} accuracy [95% CI]", justify="right", no_wrap=True)
    for i, prompt in enumerate(result.prompts):
        table.add_row(str(i + 1), prompt.name,
                      *(f"{s.scores[i].accuracy:.3f} {ci_text(s.scores[i].accuracy_ci)}" for s in result.settings))
    console.print(table)
    for s in result.settings:
        m = s.summary
        console.print(f"{s.scoring}: spread {m.spread:.3f}  MaxP {m.max_p:.3f}  AvgP {m.avg_p:.3f}  "
                      f"CPS {m.cps:.3f}  Kendall's W {_num(m.kendall_w)}  Friedman p {_p(m.friedman_p)}")
    if result.comparison is not None:
        c = result.comparison
        console.print(f"{c.a} vs {c.b}: top-{c.k} IoU {c.iou:.3f}  Spearman ρ {_num(c.spearman)}")
    if result.posix is not None:
        console.print(f"POSIX ψ {result.posix.value:.3f} over {len(result.posix.example_ids)} examples")
    for s in result.settings:
        if warning := s.per_class.warning():
            console.print(f"warning ({s.scoring}, against the first prompt {s.per_class.reference}): {warning}")
    console.print(f"{result.ledger.calls} calls, {result.ledger.tokens} tokens · run directory: {result.run_dir}")
