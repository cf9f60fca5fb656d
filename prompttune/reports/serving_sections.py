"""The report sections on serving: how the verdict scored under the run's contract, the prompts served by
generation (the verdict under `serve: generate`, or `--check-generation`), the finalists a generate run
rescored, and the per-server counts. report.md, the summary printed after a run and report.html share them."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from prompttune.core.config import Serve
from prompttune.scoring import contract
from prompttune.scoring.serving import FinalistRescoring, GenerationCheck

SERVER_COUNTS = ("requests", "retries", "failures", "quarantines", "readmissions")


SERVERS_NOTE = ("Per server over the whole run (search and verdict): HTTP requests answered, retries, calls given "
                "up (refused, or failing after every retry), quarantines and readmissions; a retried call is "
                "charged once.")


def server_rows(servers: dict[str, dict[str, int]]) -> list[list[object]]:
    """One row per server: its URL, then its counts in SERVER_COUNTS order."""
    return [[url, *(counts.get(name, 0) for name in SERVER_COUNTS)] for url, counts in servers.items()]


def servers_section(servers: dict[str, dict[str, int]]) -> list[str]:
    """report.md's table of per-server counts (none for a run that reached no server over HTTP)."""
    if not servers:
        return []
    rows = ["| server | " + " | ".join(SERVER_COUNTS) + " |", "| --- |" + " --- |" * len(SERVER_COUNTS)]
    rows += ["| " + " | ".join(map(str, row)) + " |" for row in server_rows(servers)]
    return ["## Servers", "", SERVERS_NOTE, "", *rows, ""]


def searched_line(serve: Serve) -> str:
    """How the search scored its candidates: in the contract itself, so its dev predictions agree with what
    production gets on every example (a run made before the search generated under `generate` ranked by a proxy,
    and says so through its finalists instead)."""
    return (f"The search scored every candidate by {contract.scored_by(serve)} too: its per-example dev predictions "
            "are what production gets (agreement 100%, no proxy).")


def scoring_line(serve: Serve) -> str:
    """The serving contract and how the verdict's figures were scored under it, said in every report."""
    return (f"Serving contract **`serve: {serve}`**: {contract.WORDS[serve]}. The verdict scored prompts by "
            f"**{contract.scored_by(serve)}**.")


GENERATION_NOTE = ("A model that generates freely may answer otherwise than its label scores say. Each prompt answered by "
                   "greedy decoding, its label taken when the answer holds exactly one label word (else invalid, and "
                   "wrong).")


def generation_header(check: GenerationCheck) -> list[str]:
    return ["prompt", "candidate", f"accuracy by {check.verdict_scored_by}", "valid responses (generation)",
            "accuracy (generation)"]


def generation_rows(check: GenerationCheck) -> list[list[str]]:
    """Per prompt: role, candidate, accuracy under the verdict's scoring, valid responses and accuracy by generation."""
    return [[p.role, p.candidate_id, f"{p.verdict_accuracy:.3f}", f"{p.valid_rate:.3f}", f"{p.accuracy:.3f}"]
            for p in check.prompts]


def answer_shown(text: str, limit: int = 80) -> str:
    """A generated answer on one line, shortened, with no backtick to break a code span."""
    return " ".join(text.replace("`", "'").split())[:limit]


def generation_warning(check: GenerationCheck) -> str | None:
    """A warning where a prompt the search picked answers worse than the baseline once it generates freely."""
    base = next(p for p in check.prompts if p.role == "baseline")
    worse = [p for p in check.prompts if p.role != "baseline" and p.accuracy < base.accuracy]
    return "; ".join(f"under generation the {p.role} prompt is less accurate than the baseline ({p.accuracy:.3f} vs "
                     f"{base.accuracy:.3f}, valid responses {p.valid_rate:.3f} vs {base.valid_rate:.3f})"
                     for p in worse) or None


def generation_intro(check: GenerationCheck) -> str:
    """What the served-by-generation table holds: the verdict's own records, or a check on a ledger of its own."""
    if check.by_verdict:
        return (f"The verdict itself scored by generation (serve: generate). {GENERATION_NOTE} Valid responses per "
                f"prompt on the {check.n} test examples.")
    return (f"The verdict scored by {check.verdict_scored_by}. {GENERATION_NOTE} Charged to a ledger of its own, never "
            f"the search budget: {check.calls} calls, {check.tokens} tokens.")


def generation_title(check: GenerationCheck) -> str:
    return ("Served by generation (the verdict, `serve: generate`)" if check.by_verdict else
            f"Served by generation (`--check-generation`, first {check.n} test examples)")


def generation_warnings(check: GenerationCheck) -> list[str]:
    """The check's warnings: the shipped prompt's valid rate or accuracy gap, and picked prompts that generate
    worse than the baseline."""
    return [w for w in (check.serving_warning(), generation_warning(check)) if w]


def generation_section(check: GenerationCheck | None) -> list[str]:
    """report.md's section on the prompts served by generation (none without a check)."""
    if check is None:
        return []
    head = [f"## {generation_title(check)}", ""]
    if check.skipped:
        return [*head, f"Skipped: {check.skipped}.", ""]
    header = generation_header(check)
    headline = [] if check.by_verdict else [f"**{check.headline()}.**", ""]
    return [*head, *headline, generation_intro(check), "",
            "| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
            *["| " + " | ".join(row) + " |" for row in generation_rows(check)], "",
            *[line for warning in generation_warnings(check) for line in (f"**Warning: {warning}.**", "")],
            *[f"- Answers of the {p.role} without a label: "
              + "; ".join(f"`{answer_shown(text)}`" for text in p.invalid_answers) + "."
              for p in check.prompts if p.invalid_answers], ""]


FINALISTS_NOTE = ("The search ranked prompts by label log-probabilities, a fast proxy; its top prompts and the baseline "
                  "were then scored by generation on dev (charged to the search budget, which kept the calls back), "
                  "and the best of them by generation met the baseline on test.")


def finalist_header() -> list[str]:
    return ["candidate", "search rank", "valid responses (generation)", "dev objective (generation)"]


def finalist_rows(rescoring: FinalistRescoring) -> list[list[str]]:
    """Per finalist, in the order the verdict took them: id, place in the search's ranking, valid rate, score."""
    return [[f.candidate_id, "baseline" if f.search_rank is None else str(f.search_rank), f"{f.valid_rate:.3f}",
             f"{f.score:.3f}"] for f in rescoring.finalists]


def finalists_section(rescoring: FinalistRescoring | None) -> list[str]:
    """report.md's table of the finalists a generate run rescored (none for another contract)."""
    if rescoring is None:
        return []
    header = finalist_header()
    cut = " A token cap stopped the rescoring; the prompts it finished were ranked." if rescoring.cut_short else ""
    return [f"## Finalists rescored by generation (`serve: generate`, {rescoring.n} dev examples)", "",
            f"{FINALISTS_NOTE} {rescoring.calls} calls.{cut}", "",
            "| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
            *["| " + " | ".join(row) + " |" for row in finalist_rows(rescoring)], ""]


def print_generation(check: GenerationCheck, console: Console) -> None:
    """The summary's table of the prompts served by generation, and its warnings."""
    if check.skipped:
        console.print(f"generation check skipped: {check.skipped}")
        return
    if not check.by_verdict:
        console.print(check.headline())
    table = Table(title=(f"served by generation: the verdict's {check.n} test examples" if check.by_verdict else
                         f"served by generation: first {check.n} test examples"))
    for column in generation_header(check):
        table.add_column(column)
    for row in generation_rows(check):
        table.add_row(*row)
    console.print(table)
    for warning in generation_warnings(check):
        console.print(f"warning: {warning}")
