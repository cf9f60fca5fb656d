"""What a run hands back: the shipped prompt (renderable, exportable), the verdict, the ledgers.

Reports (`prompttune.reports`) and `compare` read these types; nothing here talks to a model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from prompttune.core.config import RunConfig
from prompttune.core.storage import TrialStorage
from prompttune.core.types import Example, Prompt
from prompttune.engine.export import as_json, as_text, template
from prompttune.evaluation.confirmation import Confirmation, Verdict
from prompttune.evaluation.ledger import BudgetLedger
from prompttune.evaluation.per_class import PerClass
from prompttune.evaluation.serving import FinalistRescoring, GenerationCheck
from prompttune.optimizers.base import SearchOutcome
from prompttune.search_spaces import Candidate, SearchSpace
from prompttune.search_spaces.prompt import PromptSpec, render, select_demos

if TYPE_CHECKING:
    import dspy


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

    def to_dspy(self) -> "dspy.Predict":
        """A `dspy.Predict` program carrying this prompt's instruction and demos (DSPy renders it with
        its own adapter: use `render`/`template` for the exact scored text)."""
        from prompttune.dspy_bridge import require_dspy

        require_dspy("to_dspy()")
        from prompttune.dspy_bridge.program import ProgramMapping

        mapping = ProgramMapping.build(self.spec, list(self.input_fields), list(self.demos), [])
        return mapping.program(self.spec, list(self.demos))


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
    test_looks: int = 1  # verdicts this run's test split has served, this one included (engine.verdicts)
    generation_check: GenerationCheck | None = None  # --check-generation: the prompts served by generation
    finalists: FinalistRescoring | None = None  # serve generate: the search's top prompts rescored by generation
    prompt_tokens: dict[str, int] = field(default_factory=dict)  # baseline, shipped, dev winner: tokens per request
    per_class: PerClass | None = None  # per-class test figures and the classes lost beyond --class-loss-margin
    versions: dict[str, str] = field(default_factory=dict)  # what produced the run (engine.study.run_versions)

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

    def to_dspy(self) -> "dspy.Predict":
        """The shipped prompt as a `dspy.Predict` program."""
        return self.shipped.to_dspy()

    def save(self, path: str | Path) -> Path:
        """Write the shipped prompt to the folder `path`: prompt.txt (the template as scored) and
        prompt.json (template, label words, demos, spec and verdict)."""
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        shipped = self.shipped
        (out / "prompt.txt").write_text(shipped.template() + "\n", encoding="utf-8")
        facts: dict[str, Any] = as_json(shipped.spec, list(shipped.demos), self.config, self.run_dir)
        facts["verdict"] = self.verdict.summary()
        facts["serve"] = self.config.contract
        (out / "prompt.json").write_text(json.dumps(facts, indent=2, ensure_ascii=False), encoding="utf-8")
        return out
