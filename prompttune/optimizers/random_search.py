"""Random search: uniform valid candidates, each on the full dev split — the honest baseline."""

from __future__ import annotations

from typing import Any, Iterator

from prompttune.evaluation.evaluator import Record
from prompttune.objectives.stats import adjust_pvalues, paired_compare
from prompttune.optimizers.base import Optimizer, TrialRequest
from prompttune.search_spaces.space import Assignment, Candidate

ENUMERATE_LIMIT = 20_000


class RandomSearch(Optimizer):
    """Baseline first, then distinct valid candidates in random order.

    The winner is the best dev score among candidates that beat the baseline with a
    Holm-adjusted one-sided exact McNemar p < alpha across all candidates tried; without
    one, the baseline stays.
    """

    name = "random"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: Iterator[Assignment] = self._candidate_stream()
        self._seen = {self.baseline.id}
        self._scored: list[tuple[Candidate, float]] = []
        self._asked_baseline = False

    def _candidate_stream(self) -> Iterator[Assignment]:
        space = self.context.space
        if space.nominal_size() <= ENUMERATE_LIMIT:
            pool = list(space.enumerate())
            for i in self.rng.permutation(len(pool)):
                yield pool[i]
        else:
            while True:
                yield space.sample(self.rng)

    def ask(self) -> TrialRequest | None:
        dev = tuple(self.context.dev_ids)
        if not self._asked_baseline:
            self._asked_baseline = True
            return TrialRequest(self.baseline, dev, "baseline")
        for assignment in self._pending:
            candidate = self.context.space.build(assignment)
            if candidate.id not in self._seen:
                self._seen.add(candidate.id)
                return TrialRequest(candidate, dev)
        return None

    def tell(self, request: TrialRequest, records: list[Record]) -> dict[str, Any]:
        if request.candidate.id == self.baseline.id:
            return {}
        self._scored.append((request.candidate, self.context.score(records)))
        comparison = paired_compare(self.correct(request.candidate, self.context.dev_ids),
                                    self.correct(self.baseline, self.context.dev_ids))
        return {"b": comparison.b, "c": comparison.c, "p_vs_baseline": round(comparison.p_one_sided, 6)}

    def _accepted(self) -> list[tuple[Candidate, float, float]]:
        dev = self.context.dev_ids
        base = self.correct(self.baseline, dev)
        pvalues = [paired_compare(self.correct(c, dev), base).p_one_sided for c, _ in self._scored]
        if not pvalues:
            return []
        reject, adjusted = adjust_pvalues(pvalues, method="holm", alpha=self.context.accept_rule.alpha)
        return [(c, s, p) for (c, s), ok, p in zip(self._scored, reject, adjusted) if ok]

    def best(self) -> tuple[Candidate, float]:
        if self.baseline.id not in self.memo:
            raise RuntimeError("the baseline was not evaluated")
        accepted = self._accepted()
        if accepted:
            candidate, score, _ = max(accepted, key=lambda t: t[1])
            return candidate, score
        return self.baseline, self.score_on(self.baseline, self.context.dev_ids)

    def report_lines(self) -> list[str]:
        if not self._scored:
            return ["Random search: no candidate besides the baseline was evaluated."]
        top, top_score = max(self._scored, key=lambda t: t[1])
        accepted = self._accepted()
        return [f"Random search: {len(self._scored)} candidates on the full dev split; the top dev "
                f"score {top_score:.3f} (`{top.id}`); {len(accepted)} beat the baseline after Holm "
                f"correction across all {len(self._scored)} (α = {self.context.accept_rule.alpha})."]
