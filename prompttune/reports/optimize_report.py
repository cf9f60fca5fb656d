"""report.md for a run (its text: the record step writes it), and the summary table printed at the end."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Iterable

from rich.console import Console
from rich.table import Table

from prompttune.backends.capabilities import Capabilities
from prompttune.core.run_files import TOKENS_PLOT, prompt_text
from prompttune.reports import ci_text, model_phrase
from prompttune.reports.importance import FANOVA_NOTE, fanova_importances, scored_candidates, varying_dimensions
from prompttune.reports.serving_sections import (
    SERVER_COUNTS,
    finalists_section,
    generation_section,
    print_generation,
    scoring_line,
    searched_line,
    server_rows,
    servers_section,
)
from prompttune.scoring import contract
from prompttune.scoring.per_class import ClassLoss, PerClass
from prompttune.statistics.stats import (
    FLIP_SHARE,
    TARGET_POWER,
    accuracy_sigma,
    examples_for_gain,
    in_points,
    selection_bias_scale,
    smallest_confirmable_gain,
)

if TYPE_CHECKING:
    from prompttune.core.config import RunConfig
    from prompttune.results.run import RunResult
    from prompttune.search_spaces.space import Candidate, SearchSpace
    from prompttune.tasks.task import Task


TOKENS_COUNTED = ("the prompt rendered around an empty input (instruction, demos, field names, cue and chat template) "
                  "in the backend's tokens (its tokenizer's count, an upper bound where it has none); each request adds "
                  "its input's own")
REFUSALS = {"frozen": "dropped or changed a frozen text", "tokens": "over --max-prompt-tokens",
            "offsets": "carried label offsets the serving contract cannot apply",
            "chat": "used a chat template the target does not render"}


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


WARN_ABOVE_POINTS = 5.0  # a test split that cannot confirm this much is warned about


def confirmable_gain(n: int, alpha: float, top_k: int = 1, baseline_accuracy: float | None = None
                     ) -> tuple[str, str | None]:
    """What a test split of n examples can confirm, as `--dry-run`, a run's first lines and its report say
    it, and a warning where that is more than 5 points: a user should know before spending a budget that
    the verdict cannot see a smaller gain. With `--confirm-top K` the figure is at Holm's first step, α/K.
    `baseline_accuracy` (None before the run) only bounds the gain (`smallest_confirmable_gain`)."""
    level = alpha / top_k
    at = f"α = {alpha:.3g}" if top_k == 1 else f"α/K = {level:.3g}, Holm's first step over K = {top_k}"
    if level <= 0.0:  # an older release's interim look after a recorded final one, at α = 0: nothing left
        return f"the test split of {n} examples confirms no gain at {at}: this run's α is spent", None
    model = f"exact one-sided McNemar, {FLIP_SHARE:.0%} of the examples assumed to flip against the new prompt"
    with_power = f"{TARGET_POWER:.0%} power at {at} ({model})"
    gain = smallest_confirmable_gain(n, level, baseline_accuracy)
    points = None if gain is None else in_points(gain)
    if points is None:
        room = "none the baseline leaves room for" if baseline_accuracy is not None else "however large"
        statement = f"the test split of {n} examples confirms no gain with {with_power}, {room}"
    else:
        statement = f"the test split of {n} examples confirms a gain of ≥ {points:.1f} points with {with_power}"
        if points <= WARN_ABOVE_POINTS:
            return statement, None
    needed = (f"about {examples_for_gain(WARN_ABOVE_POINTS / 100, level)} test examples confirm "
              f"{WARN_ABOVE_POINTS:g} points with {TARGET_POWER:.0%} power (--test-size)")
    return statement, (needed if points is None else
                       f"a true gain under {points:.1f} points is confirmed with less than {TARGET_POWER:.0%} power; "
                       f"{needed}")


def _looks_line(looks: int) -> str:
    """How often this test split has decided (engine.verdicts), with a warning once it keeps deciding."""
    if looks <= 1:
        return "This is the first verdict recorded on this test split in the runs directory."
    return (f"**This test split has now served {looks} verdicts in the runs directory (this one included).** "
            f"Each run tested at α on the same split adds up to α to the family-wise error ({looks} decisions: up to "
            f"{looks}·α); draw a fresh test set with another `--split-seed` before the next decision.")


def _power_lines(n: int, alpha: float, top_k: int, baseline_accuracy: float) -> list[str]:
    """report.md's statement of the gain this test split confirms with 80% power, from the baseline's test accuracy."""
    statement, warning = confirmable_gain(n, alpha, top_k, baseline_accuracy)
    return [f"{statement[0].upper()}{statement[1:]}.", "", *([f"**Warning: {warning}.**", ""] if warning else [])]


def _tested_rows(result: "RunResult") -> list[str]:
    """One row per dev candidate tested on test (K of them with --confirm-top)."""
    v = result.verdict
    rows = ["| dev rank | candidate | test accuracy | 95% CI (Wilson) | gain [paired bootstrap 95% CI] | b / c "
            "| one-sided p | Holm p | confirmed |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for rank, t in enumerate(v.tested, 1):
        c = t.confirmation
        rows.append(f"| {rank} | `{t.candidate.id}` | {c.best_accuracy:.3f} | {ci_text(c.best_ci)} | {c.gain:+.3f} "
                    f"{ci_text(c.gain_ci)} | {c.comparison.b} / {c.comparison.c} | {c.comparison.p_one_sided:.3g} | "
                    f"{t.p_adjusted:.3g} | {'yes' if t.confirmed else 'no'} |")
    return rows


def per_class_note(margin: float) -> str:
    """What the per-class table shows and what it flags."""
    return ("Per class on test: recall (accuracy on the class's examples) and precision (share of the prompt's "
            "predictions of the class that are right; – where it never predicted it). Flagged: a class whose recall "
            f"under a prompt falls more than {margin} (`--class-loss-margin`) below the baseline's, even when the "
            "total wins.")


def per_class_header(figures: PerClass) -> list[str]:
    return (["class", "n"] + [f"{role} recall" for role in figures.prompts]
            + [f"{role} precision" for role in figures.prompts] + ["flag"])


def per_class_rows(figures: PerClass) -> list[list[str]]:
    """Per class: n, each prompt's recall (its change from the reference's beside it), precision, and the flag."""
    lost = {(loss.prompt, loss.label) for loss in figures.losses}
    rows = []
    for c in figures.classes:
        base = c.recall[figures.reference]
        recall = [f"{c.recall[role]:.3f}" + ("" if role == figures.reference else f" ({c.recall[role] - base:+.3f})")
                  for role in figures.prompts]
        precision = ["–" if c.precision[role] is None else f"{c.precision[role]:.3f}" for role in figures.prompts]
        flag = ", ".join(f"{role} loses it" for role in figures.prompts if (role, c.label) in lost)
        rows.append([c.label, str(c.n), *recall, *precision, f"⚠ {flag}" if flag else ""])
    return rows


def lost_classes(losses: Iterable[ClassLoss]) -> str:
    """Each class lost, with the reference's recall and the prompt's, as the compact flag tables show it."""
    return ", ".join(f"{loss.label} ({loss.baseline:.3f} → {loss.after:.3f})" for loss in losses)


def versions_lines(versions: dict[str, str]) -> list[str]:
    """The "Versions" section of report.md: what produced the run."""
    return ["## Versions", "", "| component | version |", "| --- | --- |",
            *[f"| {name} | `{value}` |" for name, value in versions.items()], ""]


def _per_class_section(figures: PerClass | None) -> list[str]:
    if figures is None:
        return []
    header = per_class_header(figures)
    warning = figures.warning()
    return ["### Per class", "", per_class_note(figures.margin), "",
            "| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
            *["| " + " | ".join(row) + " |" for row in per_class_rows(figures)], "",
            f"**Warning: {warning}.**" if warning else f"No class loses more than {figures.margin}.", ""]


def _importance_section(result: "RunResult") -> list[str]:
    """fANOVA importances of the search dimensions over the run's candidates (or why there are none)."""
    scored = scored_candidates(result.trials.load() if result.trials else [])
    importances = fanova_importances(scored, varying_dimensions(scored))
    if isinstance(importances, str):
        return ["## Search dimensions", "", importances, ""]
    return ["## Search dimensions", "", f"{len(scored)} candidates with dimension values, each scored by its mean "
            f"dev objective over every example it was evaluated on. {FANOVA_NOTE}", "", "| dimension | fANOVA importance |",
            "| --- | --- |", *[f"| {name} | {share:.3f} |" for name, share in importances.items()], ""]


def rejected_line(rejected: dict[str, int]) -> str:
    """How many candidates the search driver refused, and why."""
    if not rejected:
        return "No candidate was rejected."
    return (f"The search driver rejected {sum(rejected.values())} candidate(s) before scoring them (neither scored "
            "nor charged): " + ", ".join(f"{count} {REFUSALS[why]}" for why, count in rejected.items()) + ".")


def _tokens_section(result: "RunResult", space: "SearchSpace") -> list[str]:
    tokens, ceiling = result.prompt_tokens, result.config.max_prompt_tokens
    base, shipped = tokens["baseline"], tokens["shipped"]
    plotted = (result.run_dir / TOKENS_PLOT).is_file()
    return ["## Prompt tokens", "",
            f"Prompt tokens per request: baseline {base}, shipped {shipped} ({shipped - base:+d})"
            + (f", dev winner {tokens['dev winner']}" if result.verdict.dev_winner.id != result.verdict.shipped.id
               else "") + "."
            + (f" Ceiling `--max-prompt-tokens {ceiling}`." if ceiling is not None else "")
            + f" Each is {TOKENS_COUNTED}.", "",
            *(["Frozen texts, kept verbatim by every candidate scored: "
               + "; ".join(f"`{' '.join(text.split())}`" for text in space.frozen) + ".", ""] if space.frozen else []),
            rejected_line(result.outcome.rejected), "",
            *([f"![dev {result.config.objective} against prompt tokens per request]({TOKENS_PLOT})", ""]
              if plotted else []),
            ]


def _dev_paragraph(result: "RunResult", dev_alpha: float) -> str:
    v, o = result.verdict, result.outcome
    challenges = (f" Dev challenges: {o.challenges} in {o.sweeps} sweep(s), {o.challenge_accepts} accepted at a "
                  f"family-wise α = {dev_alpha} per sweep." if o.challenges else "")
    if not o.leader_dev_n:
        return "The search scored no dev example, so the baseline stands as the dev winner." + challenges
    gain = o.leader_dev_score - o.baseline_dev_score
    bias = selection_bias_scale(accuracy_sigma(o.leader_dev_score, o.leader_dev_n), max(o.family, 1))
    leader = (f"Search leader `{o.leader.id}` (by label log-probabilities, the search's proxy; the dev winner "
              f"tested is `{v.dev_winner.id}`, the finalists' best by generation)" if result.finalists
              else f"Dev winner `{v.dev_winner.id}`")
    return (f"{leader} {o.leader_dev_score:.3f} on {o.leader_dev_n} examples; baseline "
            f"{o.baseline_dev_score:.3f} on {o.baseline_dev_n} of them (gain {gain:+.3f}); selected from "
            f"F = {o.family} candidates ({o.n_candidates} evaluated in {o.n_trials} trials). Selection-bias scale "
            f"σ·√(2 ln F) = {bias:.3f} at n = {o.leader_dev_n}: {_noise_phrase(gain, bias)}." + challenges)


def report_text(result: "RunResult", config: "RunConfig", task: "Task", space: "SearchSpace",
                baseline: "Candidate") -> str:
    """report.md, quoting the prompt files the record step wrote before it."""
    v, o = result.verdict, result.outcome
    base = v.baseline_only
    n_dev = len(task.splits["dev"])
    ledger = result.search_ledger
    shipped = v.shipped
    lines = [
        f"# prompttune run: {task.name} · {config.optimizer} · seed {config.seed}",
        "",
        f"Model {model_phrase(config.model, config.backend, config.dtype, result.versions)}, "
        f"serve `{config.contract}`, "
        f"objective `{config.objective}`; splits train {len(task.splits['train'])} / dev {n_dev} / "
        f"test {len(task.splits['test'])}" + (f" ({task.split_note})" if task.split_note else "") + ".",
        "",
        *[line for warning in task.warnings for line in (f"**Warning: {warning}.**", "")],
        *[line for note in result.advice for line in (f"Note: {note}.", "")],
        *([f"**Interrupted and resumable: a signal stopped the search after {o.n_trials} trials and "
           f"{ledger.calls} of {ledger.cap_calls} calls. What follows is the interim held-out verdict of the "
           f"best candidate so far, tested at half the α the run had left; `optimize --resume {result.run_dir}` "
           "finishes the search, tests at the rest and replaces this report.**", ""] if o.interrupted else []),
        f"**{'Interim verdict' if o.interrupted else 'Verdict'}: {v.summary()}.**",
        "",
        scoring_line(config.contract) + ("" if result.finalists else " " + searched_line(config.contract)),
        "",
        *([f"Probed before the run: {Capabilities.from_record(config.capabilities).describe()}.", ""]
          if config.capabilities else []),
        f"Policy: dev selects; the test split, never seen by the optimizer, decides with one exact one-sided "
        f"McNemar test of the top {v.top_k} dev candidate(s) against the baseline at α = {v.alpha:.3g}"
        f"{' (Holm over K)' if v.top_k > 1 else ''}"
        f"{f' (of {config.alpha}: interim looks of this run spent the rest)' if v.alpha < config.alpha else ''}. "
        "What ships is the confirmed prompt, else the baseline.",
        "",
        *_power_lines(base.n, v.alpha, v.top_k, base.baseline_accuracy),
        _looks_line(result.test_looks),
        "",
        "## Held-out test (never seen by the optimizer)",
        "",
        f"Baseline test accuracy {base.baseline_accuracy:.3f} {ci_text(base.baseline_ci)} (Wilson 95%) on {base.n} "
        "examples.",
        "",
        *(_tested_rows(result) if v.tested else ["The dev winner is the baseline: nothing to test."]),
        "",
        *_per_class_section(result.per_class),
        *generation_section(result.generation_check),
        *finalists_section(result.finalists),
        "## Dev (selected on dev — optimistic by construction)",
        "",
        _dev_paragraph(result, config.dev_alpha),
        "",
        *_importance_section(result),
        *([ "## Optimizer", "", *o.notes, ""] if o.notes else []),
        *_tokens_section(result, space),
        "## Budget",
        "",
        f"Search: {ledger.calls} of {ledger.cap_calls} calls "
        f"({', '.join(f'{k} {v}' for k, v in sorted(ledger.calls_by_kind.items())) or 'none'}), "
        f"{ledger.prompt_tokens} prompt + {ledger.completion_tokens} completion tokens"
        f"{f' of the token cap {ledger.cap_tokens}' if ledger.cap_tokens else ''}"
        f"{'; stopped by the cap' if o.stopped_by_budget else ''}. Held-out verdict (not charged "
        f"to the search budget): {result.confirm_ledger.calls} calls, {result.confirm_ledger.tokens} "
        f"tokens. Wall time {result.wall_seconds:.0f} s.{_backend_use(result.backend_use)}"
        + (f" Resumed after an interruption{f' ({result.resumed.reason})' if result.resumed.reason else ''}: "
           f"{result.resumed.trials_before} trials had been logged "
           f"(kept in trials.interrupted.jsonl); {result.resumed.calls_replayed} search calls were served by "
           "the cache the interrupted run (in a comparison, also the other arms) had filled, each charged once, "
           "then the search went on live."
           if result.resumed else ""),
        "",
        *servers_section(result.servers),
        *versions_lines(result.versions),
        "## Baseline (`baseline_prompt.json`, `baseline_prompt.txt`)",
        "",
        *[line for note in space.notes for line in (note, "")],
        "```text",
        prompt_text(result.run_dir, "baseline"),
        "```",
        "",
        "## Shipped prompt (`best_prompt.json`, `best_prompt.txt`)",
        "",
        f"Candidate `{shipped.id}`"
        + (" — the baseline" if shipped.id == baseline.id else
           f"; change from baseline: {describe_change(space, baseline, shipped)}") + ".",
        "",
        "```text",
        prompt_text(result.run_dir, "shipped"),
        "```",
        "",
        *([] if v.dev_winner.id == shipped.id else [
            "## Dev winner, not shipped (`dev_winner.json`, `dev_winner.txt`)",
            "",
            f"Candidate `{v.dev_winner.id}`; change from baseline: {describe_change(space, baseline, v.dev_winner)}.",
            "",
            "```text",
            prompt_text(result.run_dir, "dev_winner"),
            "```",
            "",
        ]),
    ]
    return "\n".join(lines)


def print_summary(result: "RunResult", console: Console) -> None:
    v, o = result.verdict, result.outcome
    lead = v.leader_confirmation
    table = Table(title=f"prompttune · {result.run_dir.name}")
    table.add_column("prompt")
    table.add_column("dev (selected)", justify="right")
    table.add_column("test accuracy", justify="right")
    table.add_column("95% CI", justify="right")
    table.add_row("baseline", f"{o.baseline_dev_score:.3f}", f"{lead.baseline_accuracy:.3f}", ci_text(lead.baseline_ci))
    if v.tested:
        table.add_row("dev winner", f"{o.leader_dev_score:.3f}", f"{lead.best_accuracy:.3f}", ci_text(lead.best_ci))
    console.print(table)
    if v.tested:
        console.print(f"test gain {lead.gain:+.3f}  b={lead.comparison.b} c={lead.comparison.c}  "
                      f"one-sided McNemar p={lead.comparison.p_one_sided:.4g}")
    console.print(f"budget used {result.search_ledger.calls}/{result.search_ledger.cap_calls} calls, "
                  f"{result.search_ledger.tokens} tokens")
    console.print(f"serve {result.config.contract}: verdict scored by {contract.scored_by(result.config.contract)}")
    if (check := result.generation_check) is not None:
        print_generation(check, console)
    tokens = result.prompt_tokens
    console.print(f"prompt tokens per request: baseline {tokens['baseline']}, shipped {tokens['shipped']}"
                  + (f" (ceiling {result.config.max_prompt_tokens})" if result.config.max_prompt_tokens else "")
                  + (f"; {rejected_line(o.rejected)}" if o.rejected else ""))
    for url, *counts in server_rows(result.servers):
        console.print(f"server {url}: " + ", ".join(f"{n} {name}" for n, name in zip(counts, SERVER_COUNTS)))
    console.print(f"verdict: {v.summary()}")
    if result.per_class and (warning := result.per_class.warning()):
        console.print(f"warning: {warning}")
    console.print(f"shipped: {'the baseline' if v.shipped.id == result.baseline.id else v.shipped.id} "
                  f"(best_prompt.json)")
    console.print(f"run directory: {result.run_dir}")


def _backend_use(use: dict[str, float]) -> str:
    """How work reached the model in search and verdict: calls, rows per call, and where the seconds went."""
    if not use:
        return ""
    return (f" The model got {use['rows']:.0f} requests in {use['calls']:.0f} backend calls ({use['rows_per_call']:.1f} "
            f"per call; {use['generation_calls']:.0f} of them generating); search and verdict took "
            f"{use['scoring_seconds']:.1f} s scoring, {use['generation_seconds']:.1f} s generating and "
            f"{use['engine_seconds']:.1f} s in the engine.")
