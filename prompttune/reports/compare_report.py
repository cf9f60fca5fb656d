"""report.md and summary.json of a comparison (their text and facts: the record step writes them), and its
terminal tables."""

from __future__ import annotations

from dataclasses import asdict
from statistics import mean
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from prompttune.comparing.coverage import MODES
from prompttune.comparing.fairness import Spend, fingerprint
from prompttune.comparing.summary import CMH_LABEL, KEEP_RULES
from prompttune.comparing.variants import optimizer_of
from prompttune.optimizers.registry import lookup
from prompttune.reports import ci_text, model_name, reports_of
from prompttune.reports.optimize_report import lost_classes, versions_lines
from prompttune.results.arms import ArmRun
from prompttune.results.compare import ArmSummary, Cap, Coverage, Scores, SeedPair
from prompttune.scoring import contract
from prompttune.scoring.per_class import PerClass
from prompttune.statistics.seeds import P_FLOOR, p_text

if TYPE_CHECKING:
    from prompttune.results.compare import CompareResult

MODE_TEXT = {
    "same-space": "every arm searched the one space below and only what it declares: the dimensions an arm "
                  "cannot search, and whatever the space does not declare, stayed at the baseline value, so "
                  "the ranking compares search strategies on one problem.",
    "native": "every arm got the space below and also added what its tool brings itself (demos, its own "
              "instructions) where the space declares none, so the ranking compares tools as they come, "
              "spaces included.",
}



def _p_list(s: ArmSummary) -> str:
    return ", ".join(f"{r.confirmation.comparison.p_two_sided:.3g}→{p:.3g}" for r, p in zip(s.runs, s.p_bh))


def _scores(scores: Scores) -> list[str]:
    return [f"{scores.accuracy:.3f}", ci_text(scores.accuracy_ci), f"{scores.gain:+.3f}", ci_text(scores.gain_ci)]


MARK = {"ok": "✓", "failed": "✗ FAILED", "warning": "⚠ WARNING"}  # a check's status as the reports show it


def spend_cells(spend: dict) -> list[str]:
    """The spend columns from `asdict(Spend)` (also how summary.json stores it)."""
    return [f"{spend['calls_mean']:.0f} / {spend['calls_max']}", f"{spend['tokens_mean']:.0f} / {spend['tokens_max']}"]


def _row(s: ArmSummary, coverage: Coverage) -> list[str]:
    devs = [r.best_dev for r in s.runs if r.best_dev is not None]
    return [s.arm, *_scores(s.guarded), *_scores(s.raw), _p_list(s),
            f"{s.significant}/{len(s.runs)}", f"{mean(devs):.3f}" if devs else "–",
            *spend_cells(asdict(Spend.of(s.runs))), f"{mean(r.wall_seconds for r in s.runs):.0f}",
            *coverage_cells(coverage.to_dict())]


def coverage_cells(coverage: dict) -> list[str]:
    """The "searched" and "candidates from" columns, from `Coverage.to_dict()` (as summary.json stores it)."""
    return [", ".join(coverage["searched"]), ", ".join(coverage["sources"])]


HEADER = ["optimizer", "guarded: test acc (mean)", "95% CI", "gain vs baseline", "gain 95% CI",
          "raw pick: test acc (mean)", "95% CI", "gain vs baseline", "gain 95% CI",
          "McNemar p per seed (uncorrected→BH)", "seeds sig. better", "dev (selected)", "search calls mean / max",
          "search tokens mean / max", "wall s (mean)", "searched", "candidates from"]
TERMINAL = (0, 1, 2, 5, 6, 10, 12, 13, 14, 15, 16)  # the columns that fit a terminal; report.md has them all


def caps_text(caps: list[Cap]) -> str:
    """E.g. '2000 search calls' or '300000 search tokens (and a ceiling of 4000 search calls)'."""
    ceilings = "".join(f" (and a ceiling of {cap.limit} search {cap.unit})" for cap in caps[1:])
    return f"{caps[0].limit} search {caps[0].unit}{ceilings}"


VERDICTS = {"confirmed": "the raw pick ships", "not confirmed": "the baseline ships",
            "raw = baseline": "the raw pick is the baseline, nothing to test"}


def verdict_word(run: ArmRun) -> str:
    """What the verdict protocol did with the run's raw pick (a key of VERDICTS)."""
    if run.raw == run.baseline:
        return "raw = baseline"
    return "confirmed" if run.best == run.raw else "not confirmed"


SEED_HEADER = ["optimizer", "seed", "raw pick: test acc", "verdict", "guarded: test acc", "search calls",
               "of which shared-cache hits", "tokens", "served by the model (requests / tokens)", "stopped by cap"]
SEED_TERMINAL = (0, 1, 2, 3, 4, 5)


def seed_row(run: ArmRun) -> list[str]:
    return [run.arm, str(run.seed), f"{run.raw_confirmation.best_accuracy:.3f}", verdict_word(run),
            f"{run.confirmation.best_accuracy:.3f}", str(run.search.calls), str(run.foreign_calls),
            str(run.search.tokens), f"{run.served.requests} / {run.served.tokens}",
            "yes" if run.stopped_by_budget else "no"]


CLASS_FLAG_HEADER = ["optimizer", "seeds flagged", "classes lost (seed: baseline recall → the pick's)"]
CLASS_FLAG_NOTE = ("Per seed, the arm's pick (raw: the dev winner or DSPy's program, shipped or not) against the "
                   "baseline on the seed's test split, class by class: flagged where its recall on a class falls "
                   "more than {margin} (`--class-loss-margin`) below the baseline's, even when the total wins. Each "
                   "run's report gives every class's recall and precision.")


def class_flag_cells(arm: str, figures: list[tuple[int, PerClass]]) -> list[str]:
    """One arm's row of the classes-lost table, from each seed's per-class figures (report.md, report.html and
    the terminal alike)."""
    flagged = [(seed, f.losses) for seed, f in figures if f.losses]
    return [arm, f"{len(flagged)}/{len(figures)}",
            "; ".join(f"seed {seed}: {lost_classes(losses)}" for seed, losses in flagged) or "–"]


def _class_figures(c: "CompareResult") -> dict[str, list[tuple[int, PerClass]]]:
    """Per arm, each seed's per-class figures (arms saved before they were recorded have none)."""
    return {arm: [(r.seed, r.per_class) for r in c.runs if r.arm == arm and r.per_class is not None]
            for arm in c.arms}


def _class_flag_section(c: "CompareResult") -> list[str]:
    figures = {arm: f for arm, f in _class_figures(c).items() if f}
    if not figures:
        return []
    return ["## Classes lost", "", CLASS_FLAG_NOTE.format(margin=c.config.class_loss_margin), "",
            *_table(CLASS_FLAG_HEADER, [class_flag_cells(arm, f) for arm, f in figures.items()]), ""]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]


def _dspy_section(comparison: "CompareResult") -> list[str]:
    runs = [r for r in comparison.runs if lookup(optimizer_of(r.arm, comparison.options)).is_dspy]
    if not runs:
        return []
    lines = ["## How the DSPy arms ran", "",
             "DSPy 3.4's `dspy.LM` ran on a custom engine (`MeteredEngine`) over the shared model: every "
             "call DSPy made — bootstrapping, proposals, reflections, evaluations — was charged to the "
             "arm's ledger, and the cap stopped DSPy with an exception that its optimizers do not "
             "swallow. Classification calls were rendered and label-scored by prompttune (the "
             "`PromptSpecAdapter`: the program's instruction and demos on the baseline's format), because "
             "a small model rarely follows DSPy's `[[ ## field ## ]]` reply protocol; the chosen program "
             "was converted to a PromptSpec and confirmed on test exactly like every other arm. DSPy has "
             "no call budget of its own, so each arm kept the settings DSPy recommends and sized the rest to "
             "the cap:", ""]
    for run in runs:
        lines.append(f"- `{run.arm}` seed {run.seed}: " + " ".join(run.notes))
    return lines + [""]


def _coverage_section(c: "CompareResult") -> list[str]:
    first = next(iter(c.coverage.values()))
    lines = ["## What each arm searched", "",
             f"**{MODES[c.mode].capitalize()}** (`--mode {c.mode}`): {MODE_TEXT[c.mode]} Space `{first.space}`, "
             f"hash {first.space_hash}.", "",
             "| optimizer | searched | held at the baseline | options that hold it |", "| --- | --- | --- | --- |"]
    for arm, cov in c.coverage.items():
        options = ", ".join(f"`{k}={v!r}`" for k, v in cov.options.items()) or "–"
        lines.append(f"| {arm} | {', '.join(cov.searched)} | {', '.join(cov.held) or '–'} | {options} |")
    return lines + [""]


def _seed_pair_section(c: "CompareResult") -> list[str]:
    if not c.seed_pairs:
        return []
    lines = ["## Arms head to head across seeds", "",
             "Per pair of arms and keep rule: the mean over seeds of the difference in test accuracy (first − "
             "second; each seed is its own train/dev/test draw, both arms on its test split), its Student-t 95% "
             "interval, a two-sided paired t-test over the seeds (– when every seed differs by the same amount: "
             "no variance to test), an exact sign-flip permutation test (never below 2/2^seeds: 0.0625 with five "
             "seeds) and, for what ships, a Cochran-Mantel-Haenszel test on the pooled test examples stratified "
             "by seed; each Benjamini–Hochberg-corrected over the pairs of one keep rule. Which optimizer is "
             "better rests on the across-seed tests only: the CMH test holds each seed's shipped prompts fixed "
             f"and counts their answers as independent examples ({CMH_LABEL}).", "",
             "| " + " | ".join(SEED_PAIR_HEADER) + " |", "|" + " --- |" * len(SEED_PAIR_HEADER)]
    lines += ["| " + " | ".join(str(cell) for cell in seed_pair_cells(_seed_pair_json(t))) + " |" for t in c.seed_pairs]
    return lines + [""]


def _equal_spend_json(c: "CompareResult") -> dict | None:
    e = c.equal_spend
    if e is None:
        return None
    return {"unit": e.unit, "spend": e.spend, "calls": e.calls,
            "arms": [{"arm": arm, "mean": e.interval(arm)[0], "ci": e.interval(arm)[1],
                      "per_seed": {str(seed): acc for seed, acc in e.accuracy[arm].items()}} for arm in e.accuracy]}


EQUAL_SPEND_NOTE = ("Each arm-seed's dev pick once it had spent {spend} {unit} — the smallest spend of any arm-seed, "
                    "the point every arm reached — tested on its seed's test split without the verdict protocol "
                    "(raw): what each arm would have offered had all stopped there. Mean over seeds, Student-t 95% "
                    "interval; these tests asked the model {calls} calls the verdicts had not.")


def equal_spend_lines(e: dict | None) -> list[str]:
    """The "accuracy at equal spend" section of report.md, from its summary.json entry."""
    if e is None:
        return []
    lines = ["## Accuracy at equal spend", "", EQUAL_SPEND_NOTE.format(**e), "",
             "| optimizer | test acc of the pick (mean) | 95% CI | per seed |", "| --- | --- | --- | --- |"]
    lines += [f"| {a['arm']} | {a['mean']:.3f} | {ci_text(a['ci'])} | "
              f"{', '.join(f's{seed} {acc:.3f}' for seed, acc in a['per_seed'].items())} |" for a in e["arms"]]
    return lines + [""]


SEED_PAIR_HEADER = ["first", "second", "keep rule", "seeds", "mean difference", "95% CI", "t-test p (BH)",
                    "sign-flip p (BH)", f"CMH p (BH; {CMH_LABEL})"]


def _p_cell(p: float | None, p_bh: float | None) -> str:
    """p (BH): a p at the float floor is a bound, and so is what BH makes of it."""
    if p is None or p_bh is None:
        return "–"
    return f"{p_text(p)} ({'< ' if p <= P_FLOOR else ''}{p_bh:.3g})"


def seed_pair_cells(t: dict) -> list[object]:
    """One row of the head-to-head table, from its summary.json entry (report.md and report.html alike)."""
    return [t["first"], t["second"], t["keep"], t["seeds"], f"{t['mean_diff']:+.3f}", ci_text(t["diff_ci"]),
            _p_cell(t["p"], t["p_bh"]), _p_cell(t["p_perm"], t["p_perm_bh"]), _p_cell(t["p_cmh"], t["p_cmh_bh"])]


def _seed_pair_json(t: "SeedPair") -> dict:
    return {"first": t.first, "second": t.second, "keep": t.keep, "seeds": t.seeds, "mean_diff": t.mean_diff,
            "diff_ci": t.diff_ci, "p": t.p, "p_bh": t.p_bh, "p_perm": t.p_perm, "p_perm_bh": t.p_perm_bh,
            "p_cmh": t.p_cmh, "p_cmh_bh": t.p_cmh_bh}


def _baselines(c: "CompareResult") -> str:
    """The baseline's test accuracy at each seed (each seed tests on its own draw), with Wilson intervals."""
    baselines = c.baselines
    return "; ".join(f"s{seed} {baselines[seed].baseline_accuracy:.3f} {ci_text(baselines[seed].baseline_ci)}"
                     for seed in c.seeds)


def generation_lines(runs: list[ArmRun], arms: list[str]) -> list[str]:
    """Descriptive: the baseline and each arm's shipped prompts served by generation (`--check-generation N`), means
    over the seeds checked (the baseline once per seed: every arm of a seed tests it on the same examples); nothing
    where no arm-seed ran the check."""
    checks = [r for r in runs if r.generation_check is not None]
    checked = {arm: [r.generation_check.shipped for r in checks if r.arm == arm and r.generation_check.shipped is not None]
               for arm in arms}
    if not any(checked.values()):
        return []
    baselines = list({r.seed: r.generation_check.baseline for r in checks if r.generation_check.baseline}.values())
    n = checks[0].generation_check.n
    rows = [[label, str(len(served)), f"{mean(s.valid_rate for s in served):.1%}",
             f"{mean(s.accuracy for s in served):.3f}", f"{mean(s.verdict_accuracy for s in served):.3f}"]
            for label, served in [("baseline", baselines), *checked.items()] if served]
    return ["## Served by generation (descriptive)", "",
            f"The baseline and each arm-seed's shipped prompt, answering freely on the first {n} test examples (an "
            "answer holding no single label counts as wrong), beside the verdict's accuracy for the same prompt on the "
            "same examples (the verdict's contract, not generation); means over seeds. Outside the budget, and no "
            "claim.", "",
            *_table(["prompt", "seeds", "valid answers", "accuracy by generation", "verdict's accuracy"], rows), ""]


def report_text(comparison: "CompareResult") -> str:
    """report.md."""
    c, config = comparison, comparison.config
    task_sizes = f"train {config.train_size} / dev {config.dev_size} / test {config.test_size}"
    first = c.runs[0].confirmation
    matched = c.caps[0]
    lines = [
        f"# prompttune compare: {config.task} · {MODES[c.mode]} · {matched.unit}-matched, cap {matched.limit} "
        f"{matched.unit} · "
        f"{len(c.seeds)} seed(s)",
        "",
        f"Model `{model_name(config.model, c.versions)}`; serving contract `serve: {config.contract}` "
        f"({contract.WORDS[config.contract]}) for every arm, its held-out verdict scored by "
        f"{contract.scored_by(config.contract)}; "
        f"splits {task_sizes}, each seed on its own draw shared by all its arms (optimizer seed → split seed: "
        f"{', '.join(f'{seed} → {c.split_seeds[seed]}' for seed in c.seeds)}). Wall time {c.wall_seconds:.0f} s.",
        "",
        *_coverage_section(c),
        "## Held-out test accuracy",
        "",
        f"Baseline prompt, per seed's test split of {first.n} examples: "
        f"{_baselines(c)}. Every arm is shown under two keep rules, both from the calls its verdict "
        f"made: raw is {KEEP_RULES['raw']}; guarded is what it ships {KEEP_RULES['guarded']}. "
        f"95% intervals: {c.summaries[0].interval}; p-values are exact McNemar of what each seed ships against "
        f"the baseline on the same test examples, Benjamini–Hochberg-corrected across arms within each seed. "
        f"'Seeds sig. better' counts seeds with a positive gain and corrected p < 0.05.",
        "",
        *_table(HEADER, [_row(s, c.coverage[s.arm]) for s in c.summaries]),
        "",
        "## Per seed",
        "",
        "Verdict: " + "; ".join(f"{word} ({meaning})" for word, meaning in VERDICTS.items()) + ".",
        "",
        *_table([*SEED_HEADER, "run directory"],
                [[*seed_row(r), f"`{r.run_dir.relative_to(c.run_dir)}`"] for r in c.runs]),
        "",
        *_class_flag_section(c),
        *_seed_pair_section(c),
        *equal_spend_lines(_equal_spend_json(c)),
    ]
    if c.pairs:
        lines += ["## Leading arms head to head", "",
                  "Exact McNemar between what the leading arms ship at the same seed, on the same test "
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
    lines += generation_lines(c.runs, c.arms)
    lines += ["## Anytime performance", "",
              "Best-so-far dev score against search calls spent (each optimizer's own notion of its "
              "incumbent; DSPy arms: the best program scored on the whole dev split).", "",
              "![anytime curves](anytime.png)", ""]
    lines += ["## Fairness", "",
              f"Every arm was matched on {matched.unit}: a hard cap of {caps_text(c.caps)} per run"
              + (", the call figure being what the optimizers plan with" if matched.unit == "tokens" else "")
              + "; held-out confirmation is not charged to the search. Every run shared one loaded model and "
              "one result cache, seen through a per-run view that charges a hit on another run's entry like "
              "a call, so sharing made no run cheaper. The test split is absent from every search evaluator "
              "(built over the task without its test split; a test id is refused). A watch on the model "
              "counted every request and token it served to each search, independently of the ledgers, and "
              "checked every such request for test texts. A warning does not fail the comparison.", ""]
    lines += [f"- {MARK[check.status]} {check.claim} ({check.detail})" for check in c.checks]
    lines += ["", *versions_lines(c.versions), *_dspy_section(c)]
    return "\n".join(lines) + "\n"


def _scores_json(scores: Scores) -> dict:
    return {"test_accuracy": scores.accuracy, "test_accuracy_ci": scores.accuracy_ci, "gain": scores.gain,
            "gain_ci": scores.gain_ci}


def summary_facts(c: "CompareResult") -> dict:
    """summary.json: every arm's scores and runs, the claims between arms and the fairness checks."""
    return {
        "mode": c.mode, "headline": MODES[c.mode],
        "caps": [asdict(cap) for cap in c.caps],  # the matched cap first
        "arms": [{"arm": s.arm, "coverage": c.coverage[s.arm].to_dict(), "guarded": _scores_json(s.guarded),
                  "raw": _scores_json(s.raw), "interval": s.interval, "p_bh": s.p_bh,
                  "spend": asdict(Spend.of(s.runs)),
                  "runs": [{"seed": r.seed, "run_dir": str(r.run_dir), "confirmation": r.confirmation.to_dict(),
                            "raw_confirmation": r.raw_confirmation.to_dict(), "verdict": verdict_word(r),
                            "space_hash": r.space_hash, "best_dev": r.best_dev, "search": r.search.summary(),
                            "shared_cache_hits_charged": r.foreign_calls,
                            "shared_cache_tokens_charged": r.foreign_tokens, "served_by_model": asdict(r.served),
                            "baseline_sha256": fingerprint(asdict(r.baseline)),
                            "test_ids_sha256": fingerprint(sorted(r.test_ids)), "stopped_by_budget": r.stopped_by_budget,
                            "wall_seconds": r.wall_seconds, "anytime": r.anytime,
                            "per_class": r.per_class.to_dict() if r.per_class else None} for r in s.runs]}
                 for s in c.summaries],
        "class_loss_margin": c.config.class_loss_margin,
        "seed_pairs": [_seed_pair_json(t) for t in c.seed_pairs],
        "equal_spend": _equal_spend_json(c),
        "pairwise": [{"first": t.first, "second": t.second, "seed": t.seed, "b": t.comparison.b,
                      "c": t.comparison.c, "p": t.comparison.p_two_sided, "p_bh": t.p_bh} for t in c.pairs],
        "fairness": [{"claim": k.claim, "ok": k.ok, "status": k.status, "detail": k.detail} for k in c.checks],
        "versions": c.versions,
    }


def print_summary(comparison: "CompareResult", console: Console) -> None:
    c = comparison
    table = Table(title=f"prompttune compare · {MODES[c.mode]} · {c.run_dir.name}")
    for i in TERMINAL:
        table.add_column(HEADER[i], justify="left" if i == 0 else "right")
    for s in c.summaries:
        row = _row(s, c.coverage[s.arm])
        table.add_row(*(row[i] for i in TERMINAL))
    console.print(table)
    seeds = Table(title="per seed")
    for i in SEED_TERMINAL:
        seeds.add_column(SEED_HEADER[i], justify="left" if i in (0, 3) else "right")
    for run in c.runs:
        row = seed_row(run)
        seeds.add_row(*(row[i] for i in SEED_TERMINAL))
    console.print(seeds)
    console.print(f"baseline test accuracy per seed: {_baselines(c)}")
    for arm, figures in _class_figures(c).items():
        _, seeds, lost = class_flag_cells(arm, figures)
        if lost != "–":
            console.print(f"[yellow]⚠[/] {arm}'s pick loses a class beyond the margin {c.config.class_loss_margin} "
                          f"at {seeds} seeds: {escape(lost)}", highlight=False)
    for arm, cov in c.coverage.items():
        console.print(f"{arm} searched {', '.join(cov.searched)}; held {', '.join(cov.held) or 'nothing'}")
    colour = {"ok": "green", "failed": "red", "warning": "yellow"}
    for check in c.checks:
        console.print(f"[{colour[check.status]}]{MARK[check.status]}[/] {escape(check.claim)}"
                      + ("" if check.ok else f" ({escape(check.detail)})"), highlight=False)
    console.print(f"reports: {reports_of(c.run_dir)}")
