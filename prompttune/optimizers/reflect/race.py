"""How reflect races: a prompt's score on the race block (the objective, or the gold label's log-probability
margin or probability, dense where few examples separate prompts), prompts entered beside their calibrated
twins on a block that only grows, and the parent drawn from the pool's per-example Pareto front."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterator, Sequence

import numpy as np

from prompttune.core.types import Record
from prompttune.optimizers.reflect.calibration import batch_twin, contextual_twin
from prompttune.optimizers.reflect.genome import Genome
from prompttune.optimizers.reflect.pool import Pool
from prompttune.optimizers.search_helpers import rank_by_score
from prompttune.optimizers.strategy_contract import TrialRequest
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


def answers_alike(twin: Sequence[Record], raw: Sequence[Record]) -> bool:
    """Whether a calibrated twin answers exactly as its raw prompt (same labels, same margins): it adds nothing."""
    return all(a.pred == b.pred and abs(margin(a) - margin(b)) < 1e-9 for a, b in zip(twin, raw))


class Race:
    """Prompts raced on a block of dev examples that only grows: each entered beside its calibrated twin,
    ranked by race score on the block, parents drawn from the pool members' per-example Pareto front."""

    def __init__(self, pool: Pool, dev_ids: Sequence[str], block: int, kind: str,
                 objective: Callable[[Sequence[Record]], float], baseline: Candidate, calibration: str = "off") -> None:
        self.pool, self.dev_ids, self.kind, self.objective, self.baseline = pool, list(dev_ids), kind, objective, baseline
        self.block = self.dev_ids[:block]
        self.calibration = calibration  # the twin each prompt races beside; off too once answers are generated
        self.final_stage = False  # `staged` ranks by the objective from here on
        self.scores: dict[tuple[str, int, str], float] = {}  # (candidate, block length, kind): blocks only grow
        self.margins: dict[str, dict[str, float]] = {}  # candidate -> example -> margin: parents are drawn each step

    def enter(self, genomes: Sequence[Genome], purpose: str) -> Iterator[TrialRequest]:
        """Score each genome's raw prompt on the block, then each one's calibrated twin unless that prompt raced
        already; per genome, the keys that take a slot (a twin that answers exactly as its raw prompt takes none:
        an echo). The raw prompts go first, so the model answers a step's twins together as well (a twin's offsets
        need its raw prompt's answers, and under `choice` its constrained answers take calls of their own)."""
        raws = [replace(genome, label_bias=()) for genome in genomes]  # offsets belong to the prompt they came from
        candidates = [self.pool.enter(raw) for raw in raws]
        yield from self.pool.ask_each([(candidate, self.block) for candidate in candidates], purpose)
        twins: list[Candidate | None] = []
        for raw, candidate in zip(raws, candidates):
            if self.pool.lacks_label_scores(candidate):
                self.calibration = "off"  # generation answers: nothing to calibrate
            twin = None if raw.calibrate else self._twin(raw, candidate)
            new = twin is not None and self.pool.key(twin) not in self.pool.candidates
            twins.append(self.pool.enter(twin) if new else None)
        yield from self.pool.ask_each([(twin, self.block) for twin in twins if twin is not None], f"{purpose} (calibrated)")
        slots = []
        for candidate, twin in zip(candidates, twins):
            if twin is None:
                slots.append([candidate.id])
            elif answers_alike(self.pool.records(twin, self.block), self.pool.records(candidate, self.block)):
                self.pool.echoes.add(twin.id)
                slots.append([candidate.id])
            else:
                slots.append([candidate.id, twin.id])
        return slots

    def entry_cost(self, twin: bool = True) -> int:
        """Calls one prompt's entry on the block costs: its raw prompt's answers, contextual calibration's 3
        probes, and (with `twin`) its twin's answers where the contract decodes the offsets (`choice`)."""
        block, decoded = len(self.block), twin and self.pool.offsets_decoded and self.calibration != "off"
        return block + (3 if self.calibration == "contextual" else 0) + (block if decoded else 0)

    def _twin(self, raw: Genome, candidate: Candidate) -> Genome | None:
        if self.calibration == "contextual":
            return contextual_twin(raw)
        if self.calibration == "batch":
            return batch_twin(raw, self.pool.records(candidate, self.block))
        return None

    def widen(self, size: int, keys: Sequence[str], purpose: str) -> Iterator[TrialRequest]:
        """The block becomes the first `size` dev examples; each of `keys` is scored on it."""
        self.block = self.dev_ids[:size]
        yield from self.pool.ask_each([(self.pool.candidates[k], self.block) for k in keys], purpose)

    def grow(self, free: int) -> Iterator[TrialRequest]:
        """The block half as long again, with the pool members on it, where the `free` calls pay for that."""
        extra = max(len(self.block) // 2, 1)
        if len(self.block) >= len(self.dev_ids) or extra * len(self.pool.members) > free:
            return
        yield from self.widen(len(self.block) + extra, self.pool.members, "race block grows")

    def score(self, key: str) -> float:
        """`race_score` on the block (`staged`: probability, then in the final race tiebreak), rounded:
        float noise is no evidence, so equal answers tie."""
        kind = self.kind
        if kind == "staged":
            kind = "tiebreak" if self.final_stage else "probability"
        if (key, len(self.block), kind) not in self.scores:
            records = self.pool.records(self.pool.candidates[key], self.block)
            self.scores[key, len(self.block), kind] = round(race_score(kind, records, self.objective), 9)
        return self.scores[key, len(self.block), kind]

    def by_score(self, keys: Sequence[str]) -> list[str]:
        """Those of `keys` scored on the block, best race score first; the baseline wins ties, then the earlier."""
        candidates = self.pool.candidates
        ranked = rank_by_score([(candidates[k], self.score(k)) for k in keys
                                if not self.pool.missing(candidates[k], self.block)], self.baseline)
        return [c.id for c in ranked]

    def forget(self, key: str, example_ids: Sequence[str]) -> None:
        """New answers of `key` on these examples: their margins are computed again."""
        known = self.margins.get(key, {})
        for example_id in example_ids:
            known.pop(example_id, None)

    def _margins(self, key: str, ids: Sequence[str]) -> list[float]:
        """`margin` of each of `ids` under `key`, computed once per answer."""
        known = self.margins.setdefault(key, {})
        if new := [i for i in ids if i not in known]:
            known.update((r.example_id, margin(r)) for r in self.pool.records(self.pool.candidates[key], new))
        return [known[i] for i in ids]

    def parent(self, rng: np.random.Generator) -> str:
        """A pool member on the per-example Pareto front, drawn in proportion to the block examples on which
        it has the best margin (ties shared)."""
        members = self.pool.members
        margins = np.array([self._margins(k, self.block) for k in members])
        best = margins >= margins.max(axis=0) - 1e-9
        wins = best.sum(axis=1).astype(float)
        return members[int(rng.choice(len(members), p=wins / wins.sum()))]
