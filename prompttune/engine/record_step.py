"""The record step of one run: its look at the test split, the prompts as the model sees them, the dev leader
at each spend, the reports and verdict.json, written last because it alone marks the run finished.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from prompttune.core.interrupt import RunInterrupted, clear_interruption, mark_interrupted
from prompttune.core.run_files import (
    REPORT,
    TOKENS_PLOT,
    write_facts,
    write_leaders,
    write_page,
    write_prompt,
    write_report,
    write_test_records,
)
from prompttune.engine.run_steps import OpenedRun
from prompttune.engine.verdicts import final_look, new_look, record_look, served_decisions
from prompttune.reports.html.tokens import marked_prompts, write_tokens_png
from prompttune.reports.html_report import html_page
from prompttune.reports.optimize_report import describe_change, print_summary, report_text
from prompttune.results.run import RunResult
from prompttune.results.run_record import run_facts, test_record_rows, token_facts
from prompttune.search_spaces import Candidate, SearchSpace
from prompttune.tasks.task import Task


def prompt_record(candidate: Candidate, space: SearchSpace, baseline: Candidate, **facts: object) -> dict[str, Any]:
    """A prompt file's record: its id, what the run says of it, its dimensions, spec and change from the baseline."""
    return {"candidate_id": candidate.id, **facts, "dimensions": candidate.values(space),
            "spec": asdict(candidate.spec), "diff_from_baseline": describe_change(space, baseline, candidate)}


def record_run(run: OpenedRun, result: RunResult, alpha: float, progress: bool) -> RunResult:
    """Record the run: its look at the test split (at `alpha`), the prompts, report.md and verdict.json (the last:
    it marks the run finished); a search a signal stopped is recorded with its interim verdict and then raises."""
    run_dir, interim, verdict = run.run_dir, result.outcome.interrupted, result.verdict
    if run_dir is None:
        return result
    stopped = f"stopped by {run.stop.signal} after the trial in flight" if interim else None
    if stopped:  # before verdict.json, which alone would say finished
        mark_interrupted(run_dir, stopped, run.servers())
    decided = final_look(run.looks)  # recorded by a session stopped while writing its report (never interim: judge)
    try:
        result.test_looks = (served_decisions(run_dir.parent, decided) if decided else record_look(
            run_dir.parent, run_dir, new_look(run_dir, run.task.name, run.config.split_seed,
                                              [ex.id for ex in run.task.splits["test"]], interim, alpha,
                                              verdict.summary(), verdict.shipped.id)))
        write_record(result, run.task, interim)
        if not stopped:
            clear_interruption(run_dir)
        write_page(run_dir, html_page(run_dir))
    except RunInterrupted as exc:  # a signal while the record is written: a resume writes it again
        mark_interrupted(run_dir, exc.reason, run.servers())
        raise
    if progress:
        print_summary(result, run.console)
    if stopped:
        raise RunInterrupted(f"{stopped}; the report of the best candidate so far, with its interim held-out "
                             f"verdict, is {run_dir / REPORT}; finish the run with "
                             f"`optimize --resume {run_dir}`", stopped)
    return result


def write_record(result: RunResult, task: Task, interim: bool) -> None:
    """The prompts as the model sees them, the dev leader at each spend, the prompt-tokens plot, report.md and
    verdict.json (last: it marks the run finished)."""
    run_dir, space, baseline, verdict = result.run_dir, result.space, result.baseline, result.verdict
    assert run_dir is not None
    example = task.splits["test"][0]
    shipped = verdict.shipped
    write_prompt(run_dir, "shipped", prompt_record(
        shipped, space, baseline, serve=result.config.contract, verdict=verdict.summary(),
        is_baseline=shipped.id == baseline.id, **({"interim": True} if interim else {})),
        result.prompt(shipped).render(example))
    write_prompt(run_dir, "dev_winner", prompt_record(
        verdict.dev_winner, space, baseline,
        label="dev winner: selected on dev; ships only if the held-out verdict confirms it"),
        result.prompt(verdict.dev_winner).render(example))
    write_prompt(run_dir, "baseline", prompt_record(
        baseline, space, baseline,
        label="baseline: the task's prompt (yours, or the default), the one every candidate must beat",
        **({"notes": list(space.notes)} if space.notes else {})),
        result.prompt(baseline).render(example))
    write_leaders(run_dir, ({"calls": calls, "tokens": tokens, "spec": asdict(spec)}
                            for calls, tokens, spec in result.outcome.leaders))  # the dev pick at each spend
    write_tokens_png(run_dir / TOKENS_PLOT, token_facts(result),
                     marked_prompts(baseline.id, verdict.dev_winner.id, shipped.id), result.config.objective)
    write_report(run_dir, report_text(result, result.config, task, space, baseline))
    write_test_records(run_dir, test_record_rows(result, task))
    write_facts(run_dir, run_facts(result, task))  # last: verdict.json alone marks the run finished
