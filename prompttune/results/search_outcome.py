"""What a search hands to the verdict, as plain data: results/ holds it so a run's result can carry it
without depending on the strategies that produced it."""

from __future__ import annotations

from dataclasses import dataclass, field

from prompttune.search_spaces.prompt import PromptSpec
from prompttune.search_spaces.space import Candidate


@dataclass(frozen=True)
class ScoredPrompt:
    """A candidate scored on dev: prompt tokens per request and dev objective (the report's tokens plot)."""

    candidate_id: str
    prompt_tokens: int
    dev_score: float
    dev_n: int


@dataclass
class SearchOutcome:
    """What the search hands to the verdict: the dev ranking and how the leader compares on dev."""

    ranking: list[Candidate]  # the strategy's, with the baseline placed by paired dev score
    family: int
    leader_dev_score: float
    leader_dev_n: int
    baseline_dev_score: float  # on the leader's dev examples (paired)
    baseline_dev_n: int
    n_trials: int
    n_candidates: int
    stopped_by_budget: bool
    anytime: list[tuple[int, float]]
    notes: list[str]
    challenges: int = 0
    leaders: list[tuple[int, int, PromptSpec]] = field(default_factory=list)  # (calls, tokens, spec) at each change
    sweeps: int = 0
    challenge_accepts: int = 0
    sweeps_with_accept: int = 0
    interrupted: bool = False  # stopped on request (a signal) before the strategy or the budget ended it
    rejected: dict[str, int] = field(default_factory=dict)  # candidates the driver refused, by refusal
    scored: list[ScoredPrompt] = field(default_factory=list)

    @property
    def leader(self) -> Candidate:
        return self.ranking[0]
