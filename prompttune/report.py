"""report.md for a run, and the summary table printed at the end."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from prompttune.objectives.stats import accuracy_sigma, selection_bias_scale

if TYPE_CHECKING:
    from prompttune.config import RunConfig
    from prompttune.runner import RunResult
    from prompttune.search_spaces.space import Candidate, SearchSpace
    from prompttune.tasks.base import Task

ALPHA = 0.05


def verdict(result: "RunResult") -> str:
    c = result.confirmation
    if result.outcome.best.id == result.baseline.id:
        return ("baseline kept: no candidate beat it on dev under the paired accept rule, "
                "so there is no gain to confirm")
    if c.comparison.b + c.comparison.c == 0:
        return "no change on test: the selected prompt behaves like the baseline"
    if c.gain > 0 and c.comparison.p_two_sided < ALPHA:
        return f"confirmed: the gain survives the held-out test (exact McNemar p < {ALPHA})"
    if c.gain < 0 and c.comparison.p_two_sided < ALPHA:
        return "worse on test: the dev winner is significantly worse than the baseline"
    return f"not confirmed: the test difference is not significant (p ≥ {ALPHA}); keep the baseline"


def describe_change(space: "SearchSpace", baseline: "Candidate", best: "Candidate") -> str:
    """Grid candidates diff by dimension; proposed ones (no assignment) by prompt-spec field."""
    if best.assignment:
        return space.diff(baseline, best)
    before, after = asdict(baseline.spec), asdict(best.spec)
    changed = [f"{name} {before[name]!r} → {after[name]!r}" for name in before if before[name] != after[name]]
    return ", ".join(changed) or "no change"


def _noise_phrase(gain: float, bias: float) -> str:
    if gain <= bias:
        return "a dev gain this small is within what selection among noisy scores produces"
    return "the dev gain exceeds that noise scale, but only the test split can confirm it"


def _ci(ci: tuple[float, float]) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def write_report(result: "RunResult", config: "RunConfig", task: "Task", space: "SearchSpace",
                 baseline: "Candidate") -> None:
    c, o = result.confirmation, result.outcome
    n_dev = len(task.splits["dev"])
    bias = selection_bias_scale(accuracy_sigma(o.best_dev_score, n_dev), max(o.n_candidates, 1))
    ledger = result.search_ledger
    lines = [
        f"# prompttune run: {task.name} · {config.optimizer} · seed {config.seed}",
        "",
        f"Model `{config.model}` ({config.backend}, {config.dtype}), scoring `{config.scoring}`, "
        f"objective `{config.objective}`; splits train {len(task.splits['train'])} / dev {n_dev} / "
        f"test {len(task.splits['test'])}.",
        "",
        f"**Verdict: {verdict(result)}.**",
        "",
        "## Held-out test (never seen by the optimizer)",
        "",
        "| prompt | test accuracy | 95% CI (Wilson) |",
        "| --- | --- | --- |",
        f"| baseline | {c.baseline_accuracy:.3f} | {_ci(c.baseline_ci)} |",
        f"| best | {c.best_accuracy:.3f} | {_ci(c.best_ci)} |",
        "",
        f"Gain {c.gain:+.3f}, paired bootstrap 95% CI {_ci(c.gain_ci)}. Discordant pairs on "
        f"{c.n} examples: b = {c.comparison.b} (best right, baseline wrong), c = {c.comparison.c} "
        f"(best wrong, baseline right). Exact McNemar p = {c.comparison.p_two_sided:.4g} "
        f"(one-sided, best better: {c.comparison.p_one_sided:.4g}).",
        "",
        "## Dev (selected on dev — optimistic by construction)",
        "",
        f"Baseline {result.baseline_dev_score:.3f}, best {o.best_dev_score:.3f} "
        f"(gain {o.best_dev_score - result.baseline_dev_score:+.3f}) after {o.n_candidates} candidates "
        f"in {o.n_trials} trials. Selection-bias scale σ·√(2 ln F) = {bias:.3f} for F = "
        f"{o.n_candidates}: {_noise_phrase(o.best_dev_score - result.baseline_dev_score, bias)}.",
        "",
        *([ "## Optimizer", "", *o.notes, ""] if o.notes else []),
        "## Budget",
        "",
        f"Search: {ledger.calls} of {ledger.cap_calls} calls "
        f"({', '.join(f'{k} {v}' for k, v in sorted(ledger.calls_by_kind.items())) or 'none'}), "
        f"{ledger.prompt_tokens} prompt + {ledger.completion_tokens} completion tokens"
        f"{'; stopped by the cap' if o.stopped_by_budget else ''}. Held-out confirmation (not charged "
        f"to the search budget): {result.confirm_ledger.calls} calls, {result.confirm_ledger.tokens} "
        f"tokens. Wall time {result.wall_seconds:.0f} s.",
        "",
        "## Best prompt",
        "",
        f"Candidate `{o.best.id}`; change from baseline: {describe_change(space, baseline, o.best)}.",
        "",
        "```text",
        (result.run_dir / "best_prompt.txt").read_text().rstrip("\n"),
        "```",
        "",
    ]
    (result.run_dir / "report.md").write_text("\n".join(lines), encoding="utf-8")


def print_summary(result: "RunResult", console: Console) -> None:
    c = result.confirmation
    table = Table(title=f"prompttune · {result.run_dir.name}")
    table.add_column("prompt")
    table.add_column("dev (selected)", justify="right")
    table.add_column("test accuracy", justify="right")
    table.add_column("95% CI", justify="right")
    table.add_row("baseline", f"{result.baseline_dev_score:.3f}", f"{c.baseline_accuracy:.3f}",
                  _ci(c.baseline_ci))
    table.add_row("best", f"{result.outcome.best_dev_score:.3f}", f"{c.best_accuracy:.3f}", _ci(c.best_ci))
    console.print(table)
    console.print(f"test gain {c.gain:+.3f}  b={c.comparison.b} c={c.comparison.c}  "
                  f"McNemar p={c.comparison.p_two_sided:.4g}  ·  budget used "
                  f"{result.search_ledger.calls}/{result.search_ledger.cap_calls} calls, "
                  f"{result.search_ledger.tokens} tokens")
    console.print(f"verdict: {verdict(result)}")
    console.print(f"run directory: {result.run_dir}")
