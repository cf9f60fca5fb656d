"""Selection vs serving: a verdict reached on label log-probabilities says how a prompt ranks the labels, not
what the model writes when production lets it generate freely (a minimal prompt that scores well can answer
with anything but a label). `check_generation` scores the shipped prompt, the dev winner and the baseline by
generation (greedy decoding, then exactly-one-label extraction) on the first N test examples, on a ledger of
its own, beside what the verdict's scoring gave on the same examples. Under `serve: generate` the verdict itself
generates: `served_by_verdict` reads the same figures from its records."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

from prompttune.core.config import Serve
from prompttune.core.types import Record
from prompttune.scoring.confirmation import Verdict
from prompttune.scoring.contract import scored_by
from prompttune.scoring.evaluator import Evaluator
from prompttune.search_spaces.space import Candidate

INVALID_SHOWN = 3  # generations without a label kept per prompt, so a reader sees what the model said
MIN_VALID_RATE = 0.90  # below this share of answers holding one label, the check warns
MAX_ACCURACY_GAP = 0.05  # a larger gap between the verdict's accuracy and generation's, the check warns


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
    skipped: str | None = None  # why a check was skipped (runs written before serve: generate replaced the check)
    by_verdict: bool = False  # the verdict's own records (serve: generate), not a check of its own

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def shipped(self) -> ServedPrompt | None:
        """The shipped prompt's figures (the baseline's when it ships)."""
        return next((p for p in self.prompts if p.role == "shipped"), self.baseline)

    @property
    def baseline(self) -> ServedPrompt | None:
        return next((p for p in self.prompts if p.role == "baseline"), None)

    def headline(self) -> str | None:
        """One line on the shipped prompt served by generation; None when the check was skipped."""
        shipped = self.shipped
        if shipped is None:
            return None
        return (f"if served by generation: valid {shipped.valid_rate:.0%}, accuracy {shipped.accuracy:.0%} "
                f"(the verdict's {self.verdict_scored_by}: {shipped.verdict_accuracy:.0%} on the same "
                f"{self.n} test examples)")

    def serving_warning(self) -> str | None:
        """Why the shipped prompt's verdict may not hold once production lets the model answer: too few valid
        answers (`MIN_VALID_RATE`), or too large a gap to the verdict's accuracy (`MAX_ACCURACY_GAP`)."""
        shipped = self.shipped
        if shipped is None or self.by_verdict:
            return None
        problems = []
        if shipped.valid_rate < MIN_VALID_RATE:
            problems.append(f"only {shipped.valid_rate:.0%} of its generated answers hold exactly one label "
                            f"(under {MIN_VALID_RATE:.0%})")
        if abs(shipped.accuracy - shipped.verdict_accuracy) > MAX_ACCURACY_GAP:
            problems.append(f"its accuracy by generation ({shipped.accuracy:.0%}) is "
                            f"{abs(shipped.accuracy - shipped.verdict_accuracy) * 100:.0f} points off the "
                            f"verdict's ({shipped.verdict_accuracy:.0%})")
        if not problems:
            return None
        return ("the shipped prompt served by generation: " + " and ".join(problems)
                + "; declare `serve: generate` if production lets the model answer")

    @classmethod
    def from_dict(cls, data: dict) -> "GenerationCheck":
        """Read back from verdict.json (report.html is rebuilt from the run directory)."""
        prompts = tuple(ServedPrompt(**{**p, "invalid_answers": tuple(p["invalid_answers"])}) for p in data["prompts"])
        return cls(**{**data, "prompts": prompts})


def check_generation(verdict: Verdict, generator: Evaluator, n: int, serve: Serve) -> GenerationCheck:
    """The baseline, the shipped prompt and the dev winner (each once) scored by `generator` (scoring
    "generate", over the test split) on the verdict's first `n` test examples, beside the verdict's figures under
    `serve` (never "generate": that verdict's own records give the figures, `served_by_verdict`)."""
    ids = list(verdict.test_ids[:n])
    served = [_served(role, candidate.id, generator.evaluate(candidate.spec, ids),
                      verdict.records[candidate.id][:len(ids)])
              for role, candidate in _roles(verdict)]
    return GenerationCheck(len(ids), scored_by(serve), tuple(served), generator.ledger.calls, generator.ledger.tokens)


def served_by_verdict(verdict: Verdict) -> GenerationCheck:
    """Under `serve: generate`: each prompt's valid-answer rate and accuracy from the verdict's own generated test
    records (no call of its own)."""
    served = [_served(role, candidate.id, verdict.records[candidate.id], verdict.records[candidate.id])
              for role, candidate in _roles(verdict) if candidate.id in verdict.records]
    return GenerationCheck(len(verdict.test_ids), "generation", tuple(served), by_verdict=True)


def _roles(verdict: Verdict) -> list[tuple[str, Candidate]]:
    """The baseline, the shipped prompt and the dev winner, each once (first role kept)."""
    roles = {verdict.baseline.id: ("baseline", verdict.baseline)}
    for role, candidate in (("shipped", verdict.shipped), ("dev winner", verdict.dev_winner)):
        roles.setdefault(candidate.id, (role, candidate))
    return list(roles.values())


def _served(role: str, candidate_id: str, generated: Sequence[Record], scored: Sequence[Record]) -> ServedPrompt:
    n = len(generated)
    return ServedPrompt(role, candidate_id, sum(r.valid for r in generated) / n, sum(r.correct for r in generated) / n,
                        sum(r.correct for r in scored) / n,
                        tuple(r.text or "" for r in generated if not r.valid)[:INVALID_SHOWN])


@dataclass(frozen=True)
class Finalist:
    """A prompt rescored by generation on dev, as runs made before the search itself generated under `serve:
    generate` recorded it (their reports still show it)."""

    candidate_id: str
    search_rank: int | None  # its place in the search's ranking (1 = leader); None: the baseline
    valid_rate: float
    score: float  # the run's objective by generation


@dataclass(frozen=True)
class FinalistRescoring:
    """An older `serve: generate` run's finalists: the search's top prompts by label log-probs and the baseline,
    rescored by generation on `n` dev examples (read back for its reports)."""

    n: int
    finalists: tuple[Finalist, ...]
    calls: int
    cut_short: bool = False  # a token cap stopped the rescoring; the prompts it finished were ranked

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "FinalistRescoring":
        return cls(**{**data, "finalists": tuple(Finalist(**f) for f in data["finalists"])})
