"""report.md, summary.json and the terminal table of a comparison."""

from __future__ import annotations

import json
from dataclasses import asdict
from statistics import mean
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from prompttune.compare.arms import DSPY_ARMS
from prompttune.compare.fairness import Cap, Spend, fingerprint
from prompttune.compare.summary import ArmSummary

if TYPE_CHECKING:
    from prompttune.commands.compare import Comparison


def _ci(ci: tuple[float, float]) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _p_list(s: ArmSummary) -> str:
    return ", ".join(f"{r.confirmation.comparison.p_two_sided:.3g}→{p:.3g}" for r, p in zip(s.runs, s.p_bh))


MARK = {"ok": "✓", "failed": "✗ FAILED", "warning": "⚠ WARNING"}  # a check's status as the reports show it


def spend_cells(spend: dict) -> list[str]:
    """The spend columns from `asdict(Spend)` (also how summary.json stores it)."""
    return [f"{spend['calls_mean']:.0f} / {spend['calls_max']}", f"{spend['tokens_mean']:.0f} / {spend['tokens_max']}"]


def _row(s: ArmSummary) -> list[str]:
    devs = [r.best_dev for r in s.runs if r.best_dev is not None]
    return [s.arm, f"{s.accuracy:.3f}", _ci(s.accuracy_ci), f"{s.gain:+.3f}", _ci(s.gain_ci), _p_list(s),
            f"{s.significant}/{len(s.runs)}", f"{mean(devs):.3f}" if devs else "–",
            *spend_cells(asdict(Spend.of(s.runs))), f"{mean(r.wall_seconds for r in s.runs):.0f}"]


HEADER = ["optimizer", "test acc (mean)", "95% CI", "gain vs baseline", "gain 95% CI",
          "McNemar p per seed (raw→BH)", "seeds sig. better", "dev (selected)", "search calls mean / max",
          "search tokens mean / max", "wall s (mean)"]


def _caps_text(caps: list[Cap]) -> str:
    """E.g. '2000 search calls' or '300000 search tokens (and a ceiling of 4000 search calls)'."""
    ceilings = "".join(f" (and a ceiling of {cap.limit} search {cap.unit})" for cap in caps[1:])
    return f"{caps[0].limit} search {caps[0].unit}{ceilings}"


def _table(rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER),
            *("| " + " | ".join(row) + " |" for row in rows)]


def _dspy_section(comparison: "Comparison") -> list[str]:
    runs = [r for r in comparison.runs if r.arm in DSPY_ARMS]
    if not runs:
        return []
    lines = ["## How the DSPy arms ran", "",
             "DSPy 3.4's `dspy.LM` ran on a custom engine (`MeteredEngine`) over the shared model: every "
             "call DSPy made — bootstrapping, instruction proposals, evaluations — was charged to the "
             "arm's ledger, and the cap stopped DSPy with an exception that its optimizers do not "
             "swallow. Classification calls were rendered and label-scored by prompttune (the "
             "`PromptSpecAdapter`: the program's instruction and demos on the baseline's format), because "
             "a small model rarely follows DSPy's `[[ ## field ## ]]` reply protocol; the chosen program "
             "was converted to a PromptSpec and confirmed on test exactly like every other arm. DSPy has "
             "no call budget of its own, so its settings were derived from the cap:", ""]
    for run in runs:
        lines.append(f"- `{run.arm}` seed {run.seed}: " + " ".join(run.notes))
    return lines + [""]


def write_report(comparison: "Comparison") -> None:
    c, config = comparison, comparison.config
    task_sizes = f"train {config.train_size} / dev {config.dev_size} / test {config.test_size}"
    first = c.runs[0].confirmation
    matched = c.caps[0]
    lines = [
        f"# prompttune compare: {config.task} · {matched.unit}-matched, cap {matched.limit} {matched.unit} · "
        f"{len(c.seeds)} seed(s)",
        "",
        f"Model `{config.model}`, scoring `{config.scoring}` for every arm's search and held-out verdict; "
        f"splits {task_sizes} drawn once with split seed {config.split_seed} and shared by all arms; "
        f"optimizer seeds {', '.join(map(str, c.seeds))}. Wall time {c.wall_seconds:.0f} s.",
        "",
        "## Held-out test accuracy",
        "",
        f"Baseline prompt: {first.baseline_accuracy:.3f} on {first.n} test examples (Wilson 95% CI "
        f"{_ci(first.baseline_ci)}). 95% intervals: {c.summaries[0].interval}; p-values are exact McNemar of "
        f"each seed's winner against the baseline on the same test examples, Benjamini–Hochberg-corrected "
        f"across arms within each seed. 'Seeds sig. better' counts seeds with a positive gain and "
        f"corrected p < 0.05.",
        "",
        *_table([_row(s) for s in c.summaries]),
        "",
    ]
    if c.pairs:
        lines += ["## Leading arms head to head", "",
                  "Exact McNemar between the winners of the leading arms at the same seed, on the same test "
                  "examples (b: first right and second wrong; c: the reverse), BH-corrected over these tests.",
                  "", "| first | second | seed | acc first | acc second | b | c | p | p (BH) |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for t in c.pairs:
            n = t.comparison.n
            first_acc = (t.comparison.both_right + t.comparison.b) / n
            second_acc = (t.comparison.both_right + t.comparison.c) / n
            lines.append(f"| {t.first} | {t.second} | {t.seed} | {first_acc:.3f} | {second_acc:.3f} | "
                         f"{t.comparison.b} | {t.comparison.c} | {t.comparison.p_two_sided:.3g} | {t.p_bh:.3g} |")
        lines.append("")
    lines += ["## Anytime performance", "",
              "Best-so-far dev score against search calls spent (each optimizer's own notion of its "
              "incumbent; DSPy arms: the best program scored on the whole dev split).", "",
              "![anytime curves](anytime.png)", ""]
    lines += ["## Fairness", "",
              f"Every arm was matched on {matched.unit}: a hard cap of {_caps_text(c.caps)} per run"
              + (", the call figure being what the optimizers plan with" if matched.unit == "tokens" else "")
              + "; held-out confirmation is not charged to the search. Every run shared one loaded model and "
              "one result cache, seen through a per-run view that charges a hit on another run's entry like "
              "a call, so sharing made no run cheaper. The test split is absent from every search evaluator "
              "(built over the task without its test split; a test id is refused). A watch on the model "
              "counted every request and token it served to each search, independently of the ledgers, and "
              "checked every such request for test texts. A warning does not fail the comparison.", ""]
    lines += [f"- {MARK[check.status]} {check.claim} ({check.detail})" for check in c.checks]
    lines += ["", *_dspy_section(c), "## Runs", "",
              "| optimizer | seed | search calls | of which shared-cache hits | tokens | served by the model "
              "(requests / tokens) | stopped by cap | test acc | run directory |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in c.runs:
        lines.append(f"| {r.arm} | {r.seed} | {r.search.calls} | {r.foreign_calls} | {r.search.tokens} | "
                     f"{r.served.requests} / {r.served.tokens} | "
                     f"{'yes' if r.stopped_by_budget else 'no'} | {r.confirmation.best_accuracy:.3f} | "
                     f"`{r.run_dir.relative_to(c.run_dir)}` |")
    (c.run_dir / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (c.run_dir / "summary.json").write_text(json.dumps(_summary_json(c), indent=2))


def _summary_json(c: "Comparison") -> dict:
    return {
        "caps": [asdict(cap) for cap in c.caps],  # the matched cap first
        "arms": [{"arm": s.arm, "test_accuracy": s.accuracy, "test_accuracy_ci": s.accuracy_ci,
                  "gain": s.gain, "gain_ci": s.gain_ci, "interval": s.interval, "p_bh": s.p_bh,
                  "spend": asdict(Spend.of(s.runs)),
                  "runs": [{"seed": r.seed, "run_dir": str(r.run_dir), "confirmation": r.confirmation.to_dict(),
                            "best_dev": r.best_dev, "search": r.search.summary(),
                            "shared_cache_hits_charged": r.foreign_calls,
                            "shared_cache_tokens_charged": r.foreign_tokens, "served_by_model": asdict(r.served),
                            "baseline_sha256": fingerprint(asdict(r.baseline)),
                            "test_ids_sha256": fingerprint(sorted(r.test_ids)), "stopped_by_budget": r.stopped_by_budget,
                            "wall_seconds": r.wall_seconds, "anytime": r.anytime} for r in s.runs]}
                 for s in c.summaries],
        "pairwise": [{"first": t.first, "second": t.second, "seed": t.seed, "b": t.comparison.b,
                      "c": t.comparison.c, "p": t.comparison.p_two_sided, "p_bh": t.p_bh} for t in c.pairs],
        "fairness": [{"claim": k.claim, "ok": k.ok, "status": k.status, "detail": k.detail} for k in c.checks],
    }


TERMINAL = (0, 1, 2, 3, 6, 8, 9, 10)  # the columns that fit a terminal; report.md has them all


def print_summary(comparison: "Comparison", console: Console) -> None:
    c = comparison
    table = Table(title=f"prompttune compare · {c.run_dir.name}")
    for i in TERMINAL:
        table.add_column(HEADER[i], justify="left" if i == 0 else "right")
    for s in c.summaries:
        row = _row(s)
        table.add_row(*(row[i] for i in TERMINAL))
    console.print(table)
    console.print(f"baseline test accuracy {c.runs[0].confirmation.baseline_accuracy:.3f}")
    colour = {"ok": "green", "failed": "red", "warning": "yellow"}
    for check in c.checks:
        console.print(f"[{colour[check.status]}]{MARK[check.status]}[/] {escape(check.claim)}"
                      + ("" if check.ok else f" ({escape(check.detail)})"), highlight=False)
    console.print(f"report: {c.run_dir / 'report.md'}")
