"""What a run hands back: the shipped prompt (renderable, exportable), the verdict, the ledgers.

Reports (`prompttune.reports`) and `compare` read these types; nothing here talks to a model.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from prompttune.backends.backend import Backend
from prompttune.core.config import RunConfig
from prompttune.core.run_files import EXPORT_JSON, EXPORT_TEXT
from prompttune.core.storage import TrialStorage
from prompttune.core.types import Example, Prompt
from prompttune.results.prompt_formats import as_json, as_text, template
from prompttune.results.search_outcome import SearchOutcome
from prompttune.scoring.confirmation import Confirmation, Verdict
from prompttune.scoring.contract import scored_by
from prompttune.scoring.ledger import BudgetLedger
from prompttune.scoring.per_class import PerClass
from prompttune.scoring.serving import FinalistRescoring, GenerationCheck
from prompttune.search_spaces import Candidate, SearchSpace
from prompttune.search_spaces.prompt import PromptSpec, render, select_demos


@dataclass(frozen=True)
class Resumption:
    """Where a resumed run picked up: trials logged before the interruption, calls replayed from the
    cache, and what stopped it (an outage or a signal; None after a kill -9, which records nothing)."""

    trials_before: int
    calls_replayed: int
    reason: str | None = None


@dataclass(frozen=True)
class TunedPrompt:
    """A prompt of the run (shipped, dev winner or baseline) with what it needs to be used elsewhere:
    its demos from the run's train split and the backend's final text step (chat template)."""

    candidate: Candidate
    demos: tuple[Example, ...]
    to_text: Callable[[Prompt], str]
    input_fields: tuple[str, ...]

    @property
    def id(self) -> str:
        return self.candidate.id

    @property
    def spec(self) -> PromptSpec:
        return self.candidate.spec

    def render(self, example: Example | Mapping[str, str]) -> str:
        """The exact text the model is given for `example` (an Example or a {field: text} mapping)."""
        if not isinstance(example, Example):
            missing = [name for name in self.input_fields if name not in example]
            if missing:
                raise ValueError(f"the example lacks the input field(s) {', '.join(missing)}")
            example = Example("query", {name: str(example[name]) for name in self.input_fields}, 0)
        return self.to_text(render(self.spec, example, list(self.demos)))

    def template(self) -> str:
        """The prompt with `{field}` where each input goes (as `export --to text` writes it)."""
        return as_text(template(self.spec, list(self.demos)))

@dataclass
class RunResult:
    """One search and its held-out verdict. `run_dir` is None for a run that wrote no directory."""

    run_dir: Path | None
    config: RunConfig
    baseline: Candidate
    space: SearchSpace
    outcome: SearchOutcome
    verdict: Verdict
    search_ledger: BudgetLedger
    confirm_ledger: BudgetLedger
    wall_seconds: float
    train: dict[str, Example]
    input_fields: tuple[str, ...]
    to_text: Callable[[Prompt], str]
    strategy: Any = None  # the search that ran, for inspection (an OptimizerStrategy's `.optimizer`)
    trials: TrialStorage | None = None  # the trial log (trials.jsonl, or in memory without a run directory)
    resumed: Resumption | None = None
    servers: dict[str, dict[str, int]] = field(default_factory=dict)  # per-server counts (openai backend)
    test_looks: int = 1  # decisions this run's test split has served, this one included (engine.verdicts)
    generation_check: GenerationCheck | None = None  # --check-generation: the prompts served by generation
    finalists: FinalistRescoring | None = None  # serve generate: the search's top prompts rescored by generation
    prompt_tokens: dict[str, int] = field(default_factory=dict)  # baseline, shipped, dev winner: tokens per request
    per_class: PerClass | None = None  # per-class test figures and the classes lost beyond --class-loss-margin
    versions: dict[str, str] = field(default_factory=dict)  # what produced the run (engine.study.run_versions)
    labels: tuple[str, ...] = ()  # the task's label names: what a record's prediction indexes
    split_sizes: dict[str, int] = field(default_factory=dict)  # train, dev, test examples
    split_note: str = ""  # how the splits were drawn when no sizes were given (Task.split_note)
    data_warnings: tuple[str, ...] = ()  # doubts about the data (a label seen once): shown, reported, not refused
    advice: tuple[str, ...] = ()  # one-line suggestions the run made (critique_advice: --proposer-model)
    backend: Backend | None = field(default=None, repr=False)  # a Backend object passed in: the caller's, still open
    rebuilt: Backend | None = field(default=None, init=False, repr=False)  # prompttune.predict's, after the run closed its

    backend_use: dict[str, float] = field(default_factory=dict)  # search and verdict: BackendUse.summary

    def __repr__(self) -> str:
        """One line (the dataclass's own would print every train example)."""
        c = self.confirmation
        return (f"<RunResult {self.config.task} · {self.config.optimizer}: baseline {c.baseline_accuracy:.3f}, "
                f"shipped {c.best_accuracy:.3f} on {c.n} test examples; {self.verdict.summary()}>")

    def prompt(self, candidate: Candidate) -> TunedPrompt:
        return TunedPrompt(candidate, tuple(select_demos(candidate.spec, self.train)), self.to_text,
                           self.input_fields)

    @property
    def shipped(self) -> TunedPrompt:
        """What the run recommends: the confirmed prompt, or the baseline."""
        return self.prompt(self.verdict.shipped)

    @property
    def dev_winner(self) -> TunedPrompt:
        """The search's pick on dev; it ships only if the held-out verdict confirmed it."""
        return self.prompt(self.verdict.dev_winner)

    @property
    def confirmation(self) -> Confirmation:
        """Test figures of what ships against the baseline."""
        return self.verdict.shipped_confirmation

    @property
    def ledger(self) -> BudgetLedger:
        """The budgeted search ledger (the verdict's calls are on `confirm_ledger`)."""
        return self.search_ledger

    @property
    def serving(self) -> str:
        """How production is to serve the shipped prompt, as the verdict scored it: the run's serving contract."""
        return f"serving contract {self.config.contract}, scored by {scored_by(self.config.contract)}"

    def close(self) -> None:
        """Release the backend `prompttune.predict` built (a backend passed to the run stays the caller's to close)."""
        if self.rebuilt is not None:
            self.rebuilt.close()
            self.rebuilt = None

    def _figures(self) -> list[tuple[str, str]]:
        """What `summary()` and the notebook display show, as (what, value) rows."""
        c = self.confirmation
        shipped = "the baseline" if self.verdict.shipped.id == self.baseline.id else f"candidate {self.verdict.shipped.id}"
        sizes = " / ".join(f"{name} {n}" for name, n in self.split_sizes.items())
        return [("task", f"{self.config.task} · optimizer {self.config.optimizer} · seed {self.config.seed}"),
                ("model", self.versions.get("model", self.config.model)),
                ("serving", self.serving),
                ("splits", sizes + (f" ({self.split_note})" if self.split_note else "")),
                ("baseline test accuracy", f"{c.baseline_accuracy:.3f}"),
                ("shipped test accuracy", f"{c.best_accuracy:.3f} ({shipped}, {c.n} test examples)"),
                ("verdict", self.verdict.summary()),
                ("budget", f"{self.search_ledger.calls}/{self.search_ledger.cap_calls} search calls"),
                *[("warning", warning) for warning in self.data_warnings],
                *[("note", note) for note in self.advice]]

    def summary(self) -> str:
        """The run in a few lines: model, serving, splits, the baseline's and the shipped prompt's test accuracy,
        the verdict and its budget."""
        return "\n".join(f"{what}: {value}" for what, value in self._figures())

    def _repr_markdown_(self) -> str:
        escaped_pipe = r"\|"  # a pipe inside a Markdown table cell
        rows = [f"| {what} | {value.replace('|', escaped_pipe)} |" for what, value in self._figures()]
        return "\n".join(["**prompttune run**", "", "| | |", "| --- | --- |", *rows])

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><th style='text-align:left'>{html.escape(what)}</th><td style='text-align:left'>"
                       f"{html.escape(value)}</td></tr>" for what, value in self._figures())
        return f"<table><caption>prompttune run</caption>{rows}</table>"

    def save(self, path: str | Path) -> Path:
        """Write the shipped prompt to the folder `path`: prompt.txt (the template as scored) and
        prompt.json (template, label words, demos, spec and verdict)."""
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        shipped = self.shipped
        (out / EXPORT_TEXT).write_text(shipped.template() + "\n", encoding="utf-8")
        facts: dict[str, Any] = as_json(shipped.spec, list(shipped.demos), self.config, self.run_dir)
        facts["verdict"] = self.verdict.summary()
        facts["serve"] = self.config.contract
        (out / EXPORT_JSON).write_text(json.dumps(facts, indent=2, ensure_ascii=False), encoding="utf-8")
        return out
