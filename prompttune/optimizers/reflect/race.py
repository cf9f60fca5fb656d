"""How reflect races: a prompt's score on the race block (the objective, or the gold label's log-probability
margin or probability, dense where few examples separate prompts), scoring prompts on a block that grows, the
parent drawn from the pool's per-example Pareto front, and the final race over the pool."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterator, Sequence

import numpy as np

from prompttune.core.types import Record
from prompttune.optimizers.contract import Optimizer, TrialRequest
from prompttune.optimizers.reflect.genome import Genome
from prompttune.optimizers.search_helpers import rank_by_score
from prompttune.optimizers.services import calls_to_score, free_calls, most_affordable, stage_reserve
from prompttune.search_spaces.space import Candidate

MARGIN_CLIP = 10.0  # nats: one confidently wrong example may not outweigh many others


def margin(record: Record) -> float:
    """The gold label's log-probability margin over the best other label (the same renormalised over
    the labels, clipped); ±1 for an answer without label scores (generation, CoT)."""
    scores = record.label_logprobs
    if scores is None or record.gold is None or len(scores) < 2:
        return 1.0 if record.correct else -1.0
    other = max(score for label, score in enumerate(scores) if label != record.gold)
    return min(max(scores[record.gold] - other, -MARGIN_CLIP), MARGIN_CLIP)


def gold_probability(record: Record) -> float:
    """The gold label's probability renormalised over the labels (1 or 0 without label scores)."""
    scores = record.label_logprobs
    if scores is None or record.gold is None or len(scores) < 2:
        return 1.0 if record.correct else 0.0
    top = max(scores)
    weights = np.exp(np.asarray(scores, dtype=float) - top)
    return float(weights[record.gold] / weights.sum())


def race_score(kind: str, records: Sequence[Record], objective: Callable[[Sequence[Record]], float]) -> float:
    """A prompt's score on a block: dense (margin, probability), the objective, or the objective with
    ties broken by margin (the margin term is below one example's step in the objective)."""
    if kind == "margin":
        return float(np.mean([margin(r) for r in records]))
    if kind == "probability":
        return float(np.mean([gold_probability(r) for r in records]))
    if kind == "tiebreak":
        return objective(records) + float(np.mean([margin(r) for r in records])) / (2 * MARGIN_CLIP + 1) / len(records)
    return objective(records)



class Racing(Optimizer):
    """The race over a block of dev examples: reflect's scoring, pool ranking and final stage."""

    def _race(self, genome: Genome, purpose: str) -> Iterator[TrialRequest]:
        """Score `genome` on the block, and its calibrated twin while calibration can pay; the ids of
        those scored."""
        genome = replace(genome, label_bias=())  # offsets belong to the prompt they were measured on
        ids: list[str] = []
        member: Genome | None = genome
        while member is not None:
            candidate = self._build(member)
            if member is not genome and candidate.id in self.candidates:
                break
            self.genomes[candidate.id], self.candidates[candidate.id] = member, candidate
            if todo := self.missing(candidate, self.block):
                yield TrialRequest(candidate, todo, f"{purpose}{' (calibrated)' if member is not genome else ''}")
            if member is not genome:
                if self._answers_alike(candidate.id, ids[0]):
                    self.echoes.add(candidate.id)  # calibration changed nothing: no slot
                else:
                    ids.append(candidate.id)
                break
            ids.append(candidate.id)
            if not genome.calibrate and self._no_label_scores(candidate):
                self.calibrating = False  # generation answers: nothing to calibrate
            member = self._twin(genome, candidate) if self.calibrating and not genome.calibrate else None
        return ids

    def _complete(self, keys: Sequence[str], ids: Sequence[str], purpose: str) -> Iterator[TrialRequest]:
        """Score each of `keys` on the examples of `ids` it has not been scored on (one race step: the
        model answers them together)."""
        for number, key in enumerate(keys):
            self.lookahead = [(self.candidates[k], ids) for k in keys[number + 1:]]
            if todo := self.missing(self.candidates[key], ids):
                yield TrialRequest(self.candidates[key], todo, purpose)
        self.lookahead = []

    def _grow_block(self) -> Iterator[TrialRequest]:
        dev = self.context.dev_ids
        extra = max(len(self.block) // 2, 1)
        if len(self.block) >= len(dev) or extra * len(self.pool) > free_calls(self.context, self._final_reserve()):
            return
        self.block = list(dev[: len(self.block) + extra])
        yield from self._complete(self.pool, self.block, "race block grows")

    def _no_label_scores(self, candidate: Candidate) -> bool:
        seen = self.memo.get(candidate.id, {})
        return bool(seen) and all(r.label_logprobs is None for r in seen.values())

    def _race_score(self, key: str) -> float:
        kind = self.options.race_score
        if kind == "staged":
            kind = "tiebreak" if self.final_stage else "probability"
        if (key, len(self.block), kind) not in self.race_scores:
            records = self.records(self.candidates[key], self.block)
            mean = race_score(kind, records, self.context.score)
            self.race_scores[key, len(self.block), kind] = round(mean, 9)  # float noise is no evidence: ties
        return self.race_scores[key, len(self.block), kind]

    def _by_score(self, keys: Sequence[str]) -> list[str]:
        """Best race score on the block first; the baseline wins ties, then the earlier."""
        ranked = rank_by_score([(self.candidates[k], self._race_score(k)) for k in keys
                                if not self.missing(self.candidates[k], self.block)], self.baseline)
        return [c.id for c in ranked]

    def observe(self, request: TrialRequest, records: list[Record]) -> None:
        super().observe(request, records)
        known = self.margin_memo.get(request.candidate.id, {})
        for record in records:
            known.pop(record.example_id, None)

    def _margins(self, key: str, ids: Sequence[str]) -> list[float]:
        """`margin` of each of `ids` under `key`, computed once per answer."""
        known = self.margin_memo.setdefault(key, {})
        if new := [i for i in ids if i not in known]:
            known.update((r.example_id, margin(r)) for r in self.records(self.candidates[key], new))
        return [known[i] for i in ids]

    def _parent(self) -> str:
        """A pool prompt on the per-example Pareto front, drawn in proportion to the block examples
        on which it has the best margin (ties shared)."""
        margins = np.array([self._margins(k, self.block) for k in self.pool])
        best = margins >= margins.max(axis=0) - 1e-9
        wins = best.sum(axis=1).astype(float)
        return self.pool[int(self.rng.choice(len(self.pool), p=wins / wins.sum()))]

    def _final(self) -> Iterator[TrialRequest]:
        """A race over the pool: while more than `finalists` remain, the dev prefix doubles and the
        better half by race score goes on (a prompt that entered the pool on a lucky block leaves on more
        examples); then the finalists on the longest dev prefix the rest of the budget pays for, and
        as many more pool prompts there as the budget still pays for."""
        self.final_stage = True
        dev, alive = self.context.dev_ids, self._by_score(self.pool)
        while len(alive) > self.options.finalists and len(self.block) < len(dev):
            ids = dev[: min(len(dev), 2 * len(self.block))]
            left = self.context.remaining()
            if left is not None and self._final_cost(alive, ids) > left:
                break
            self.block = list(ids)
            yield from self._complete(alive, self.block, "final race")
            alive = self._by_score(alive)[: max(self.options.finalists, (len(alive) + 1) // 2)]
        self.finalists = alive[: self.options.finalists]
        left = self.context.remaining()
        n = most_affordable(len(self.block), lambda size: self._final_cost(self.finalists, dev[:size]), left,
                            stop=len(dev))
        self.final_ids = list(dev[:n])
        for key in self._by_score(self.pool):  # what the budget still pays for: more finalists
            if key not in self.finalists and (left is None or
                                              self._final_cost([*self.finalists, key], self.final_ids) <= left):
                self.finalists.append(key)
        yield from self._complete(self.finalists, self.final_ids, "final")
        if self.options.refit and self.options.calibration == "batch" and self.context.label_offsets:
            yield from self._refit()

    def _final_reserve(self) -> int:
        """Calls kept for the final race: `final_share` of the budget, or what scoring the whole pool on the
        whole dev split costs where that is less. The final race can spend no more than that, so at a large
        budget, once the race block covers the dev split, the evolve stage goes on instead of leaving the
        reserve unspent."""
        return stage_reserve(self.context, self.options.final_share, self._final_cost(self.pool, self.context.dev_ids))

    def _final_cost(self, keys: Sequence[str], ids: Sequence[str]) -> int:
        """Model calls that score `keys` and the baseline (which the driver ranks beside them) on `ids`, as the
        cache charges them (`calls_to_score`): a batch twin's answers are its raw prompt's, so they go together."""
        texts: dict[str, set[str]] = {}  # the raw prompt whose text the model answers -> its scored variants
        for key in {*keys, self.baseline.id}:
            genome = self.genomes.get(key)
            raw = self._key(replace(genome, label_bias=())) if genome is not None and genome.label_bias else key
            texts.setdefault(raw, set()).update({key, raw})
        return calls_to_score([[self.candidates[m] for m in members if m in self.candidates]
                               for members in texts.values()], ids, self.missing)
