"""Selection vs serving: a verdict reached on label log-probabilities says how a prompt ranks the labels, not
what the model writes when production lets it generate freely (a minimal prompt that scores well can answer
with anything but a label). `check_generation` scores the shipped prompt, the dev winner and the baseline by
generation (greedy decoding, then exactly-one-label extraction) on the first N test examples, on a ledger of
its own, beside what the verdict's scoring gave on the same examples."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from prompttune.evaluation.confirmation import Verdict
from prompttune.evaluation.evaluator import Evaluator

INVALID_SHOWN = 3  # generations without a label kept per prompt, so a reader sees what the model said


def scored_by(scoring: str) -> str:
    """How the run's verdict scored its prompts, in words."""
    return {"generate": "generation", "calibrated": "label log-probabilities (calibrated)"}.get(
        scoring, "label log-probabilities")


@dataclass(frozen=True)
class ServedPrompt:
    """One prompt generating freely: the share of answers holding exactly one label, the accuracy (an answer
    without one counts as wrong), and the verdict's accuracy on the same examples."""

    role: str
    candidate_id: str
    valid_rate: float
    accuracy: float
    verdict_accuracy: float
    invalid_answers: tuple[str, ...]


@dataclass(frozen=True)
class GenerationCheck:
    """`--check-generation N`: the prompts served by generation on the first `n` test examples, the calls and
    tokens it spent (never the search budget's), or why it was skipped."""

    n: int
    verdict_scored_by: str
    prompts: tuple[ServedPrompt, ...] = ()
    calls: int = 0
    tokens: int = 0
    skipped: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "GenerationCheck":
        """Read back from verdict.json (report.html is rebuilt from the run directory)."""
        prompts = tuple(ServedPrompt(**{**p, "invalid_answers": tuple(p["invalid_answers"])}) for p in data["prompts"])
        return cls(**{**data, "prompts": prompts})


def check_generation(verdict: Verdict, generator: Evaluator, n: int, scoring: str) -> GenerationCheck:
    """The baseline, the shipped prompt and the dev winner (each once) scored by `generator` (scoring
    "generate", over the test split) on the verdict's first `n` test examples."""
    verdict_by = scored_by(scoring)
    ids = list(verdict.test_ids[:n])
    if scoring == "generate":
        return GenerationCheck(len(ids), verdict_by, skipped="the verdict itself scored by generation, so the check "
                                                             "would repeat it")
    roles = {verdict.baseline.id: ("baseline", verdict.baseline)}
    for role, candidate in (("shipped", verdict.shipped), ("dev winner", verdict.dev_winner)):
        roles.setdefault(candidate.id, (role, candidate))
    served = []
    for candidate_id, (role, candidate) in roles.items():
        records = generator.evaluate(candidate.spec, ids)
        scored = verdict.records[candidate_id][:len(ids)]
        served.append(ServedPrompt(role, candidate_id, sum(r.valid for r in records) / len(ids),
                                   sum(r.correct for r in records) / len(ids),
                                   sum(r.correct for r in scored) / len(ids),
                                   tuple(r.text or "" for r in records if not r.valid)[:INVALID_SHOWN]))
    return GenerationCheck(len(ids), verdict_by, tuple(served), generator.ledger.calls, generator.ledger.tokens)
