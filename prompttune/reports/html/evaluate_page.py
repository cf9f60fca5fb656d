"""report.html of an `evaluate` run, from its directory (prompts.jsonl, summary.json, accuracy.png)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from prompttune.core.run_files import ACCURACY_PLOT, POSIX, PROMPTS, RECORDS, read_config, read_jsonl, read_summary
from prompttune.reports import ci_text, model_name
from prompttune.reports.evaluate_report import (
    CLASS_LOSS_HEADER,
    CLASS_LOSS_NOTE,
    GAP_QUANTILES,
    POSIX_QUANTILES,
    SCORING_NOTES,
    _num,
    _p,
    _quantiles,
    class_loss_rows,
)
from prompttune.reports.html.page import Html, document, esc, para, png_img, section, table, versions_section
from prompttune.scoring.contract import scored_by
from prompttune.scoring.per_class import PerClass
from prompttune.statistics.multiprompt import top_two_gap


def _prompt_rows(prompts: list[dict], scoring: str) -> list[list[object]]:
    rows = []
    for p in prompts:
        s = p["results"][scoring]
        rows.append([p["index"] + 1, p["name"], f"{s['accuracy']:.3f}", ci_text(s["accuracy_ci"]),
                     f"{s['valid_rate']:.3f}", _num(s["valid_accuracy"]), ci_text(s["valid_accuracy_ci"]),
                     _num(s["macro_f1"]), _num(s["median_gap"])])
    return rows


def _class_losses(summary: dict, scoring: str) -> list[Html]:
    """The classes each prompt loses against the first (absent in runs written before they were recorded)."""
    if scoring not in summary.get("per_class", {}):
        return []
    figures = PerClass.from_dict(summary["per_class"][scoring])
    warning = figures.warning()
    return [Html(f'<p class="warn"><b>Warning: {esc(warning)}.</b></p>') if warning else
            para(f"No class loses more than {figures.margin} against the first prompt.", "ok"),
            table(CLASS_LOSS_HEADER, class_loss_rows(figures), (0,)),
            para(CLASS_LOSS_NOTE.format(reference=figures.reference, margin=figures.margin).replace("`", ""), "note")]


def _metrics(summary: dict) -> Html:
    rows = [[scoring, f"{s['spread']:.3f}", f"{s['max_p']:.3f}", f"{s['avg_p']:.3f}", f"{s['cps']:.3f}",
             _num(s["std"]), _num(s["kendall_w"]), f"{_num(s['friedman_stat'], 2)} (p = {_p(s['friedman_p'])})"]
            for scoring, s in summary["settings"].items()]
    parts = [table(["scoring", "spread", "MaxP", "AvgP", "CPS", "std", "Kendall's W", "Friedman χ²"], rows,
                   tuple(range(1, 8)))]
    if (c := summary["comparison"]) is not None:
        parts.append(para(f"{c['a']} vs {c['b']}: top-{c['k']} IoU {c['iou']:.3f}, Spearman ρ {_num(c['spearman'])}."))
    return Html("".join(parts))


def _sensitivity(run_dir: Path, records: list[dict], summary: dict) -> list[str]:
    parts = []
    for scoring in summary["settings"]:
        scores = [r["label_logprobs"] for r in records if r["scoring"] == scoring]
        if scores and all(s is not None for s in scores):
            gaps = top_two_gap(np.array(scores))
            parts.append(para(f"Top-two label log-probability gap ({scoring}), quantiles "
                              f"{_quantiles(gaps, GAP_QUANTILES)}: small gaps are answers a minor change could flip."))
    if summary["posix"] is not None:
        per_example = [row["posix"] for row in read_jsonl(run_dir / POSIX)]
        parts.append(para(f"POSIX ψ = {summary['posix']:.3f} over {len(per_example)} examples (mean per-token change "
                          f"of a response's log-likelihood when only the prompt changes; 0 = insensitive); "
                          f"per-example quantiles {_quantiles(per_example, POSIX_QUANTILES)}."))
    return parts


def evaluate_page(run_dir: Path) -> str:
    config, summary = read_config(run_dir), read_summary(run_dir)
    prompts, records = read_jsonl(run_dir / PROMPTS), read_jsonl(run_dir / RECORDS)
    n_examples = len({r["example_id"] for r in records})
    parts = [section("Per-prompt accuracy", png_img((run_dir / ACCURACY_PLOT).read_bytes(),
                                                     "per-prompt accuracy with Wilson 95% CIs, sorted"))]
    for scoring in summary["settings"]:
        parts.append(section(f"Per prompt — {scoring}", para(f"Scoring: {SCORING_NOTES[scoring]}.", "note"),
                             table(["#", "prompt", "accuracy", "95% CI (Wilson)", "v (valid rate)", "a (accuracy of "
                                    "valid)", "95% CI", "macro-F1", "median top-two gap"],
                                   _prompt_rows(prompts, scoring), (0, 2, 4, 5, 7, 8)),
                             *_class_losses(summary, scoring)))
    parts += [section("Sensitivity to the wording", _metrics(summary), *_sensitivity(run_dir, records, summary),
                      para("Spread: max − min accuracy over prompts; MaxP, AvgP: best and mean; CPS = MaxP·(1 − (MaxP − "
                           "AvgP)); Kendall's W near 1: the same prompts win on every example.", "note")),
              section("Budget", para(f"{summary['ledger']['calls']} model calls, "
                                     f"{summary['ledger']['prompt_tokens'] + summary['ledger']['completion_tokens']} "
                                     f"tokens; wall time {summary['wall_seconds']:.0f} s.")),
              *versions_section(summary),
              para("Generated from prompts.jsonl, records.jsonl and summary.json; prompt texts are in report.md.",
                   "note")]
    model = model_name(config["model"], summary.get("versions", {}))
    subtitle = (f"Model {model}; {len(prompts)} prompts on {n_examples} {config['split']} examples; "
                f"seed {config['seed']}"
                + (f"; serve {config['serve']}, scored by {scored_by(config['serve'])}." if config.get("serve") else "."))
    return document(f"prompttune evaluate: {Path(config['task']).stem} · {len(prompts)} prompts", subtitle, parts)
