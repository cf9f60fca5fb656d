"""reflect's final stage: the pool on doubling dev prefixes, the better half going on, then the finalists on the
longest dev prefix the budget pays for, each beside a twin with batch offsets refit there. It takes the search
context as the driver bound it (the budget left is read from its ledger), at each call."""

from __future__ import annotations

from dataclasses import replace
from typing import Iterator, Sequence

from prompttune.optimizers.reflect.calibration import batch_twin
from prompttune.optimizers.reflect.genome import Genome
from prompttune.optimizers.reflect.options import ReflectOptions
from prompttune.optimizers.reflect.pool import Pool
from prompttune.optimizers.reflect.race import Race
from prompttune.optimizers.search_helpers import rank_by_score
from prompttune.optimizers.services import most_affordable, stage_reserve
from prompttune.optimizers.strategy_contract import SearchContext, TrialRequest
from prompttune.search_spaces.space import Candidate


class FinalRace:
    """The final race over the pool's members, and the finalists it leaves, scored on `final_ids`."""

    def __init__(self, pool: Pool, race: Race, options: ReflectOptions, baseline: Candidate) -> None:
        self.pool, self.race, self.options, self.baseline = pool, race, options, baseline
        self.finalists: list[str] = []
        self.final_ids: list[str] = []
        self.refits: set[str] = set()  # finalists' twins with offsets from the final prefix

    def cost(self, keys: Sequence[str], ids: Sequence[str]) -> int:
        """Model calls that score `keys` and the baseline (which the driver ranks beside them) on `ids`."""
        return self.pool.cost([*keys, self.baseline.id], ids)

    def reserve(self, context: SearchContext) -> int:
        """Calls kept for the final race: `final_share` of the budget, or what scoring the whole pool on the
        whole dev split costs where that is less. The final race can spend no more than that, so at a large
        budget, once the race block covers the dev split, the evolve stage goes on instead of leaving the
        reserve unspent."""
        return stage_reserve(context, self.options.final_share, self.cost(self.pool.members, context.dev_ids))

    def run(self, context: SearchContext) -> Iterator[TrialRequest]:
        """While more than `finalists` remain, the dev prefix doubles and the better half by race score goes on
        (a prompt that entered the pool on a lucky block leaves on more examples); then the finalists on the
        longest dev prefix the rest of the budget pays for, and as many more pool members there as the budget
        still pays for."""
        race, dev, wanted = self.race, context.dev_ids, self.options.finalists
        race.final_stage = True
        alive = race.by_score(self.pool.members)
        while len(alive) > wanted and len(race.block) < len(dev):
            ids = dev[: min(len(dev), 2 * len(race.block))]
            left = context.remaining()
            if left is not None and self.cost(alive, ids) > left:
                break
            yield from race.widen(len(ids), alive, "final race")
            alive = race.by_score(alive)[: max(wanted, (len(alive) + 1) // 2)]
        self.finalists = alive[:wanted]
        left = context.remaining()
        n = most_affordable(len(race.block), lambda size: self.cost(self.finalists, dev[:size]), left, stop=len(dev))
        self.final_ids = list(dev[:n])
        for key in race.by_score(self.pool.members):  # what the budget still pays for: more finalists
            if key not in self.finalists and (left is None or
                                              self.cost([*self.finalists, key], self.final_ids) <= left):
                self.finalists.append(key)
        yield from self.pool.ask_each([(self.pool.candidates[k], self.final_ids) for k in self.finalists], "final")
        if self.options.refit and self.options.calibration == "batch" and context.label_offsets:
            yield from self._refit()

    def _refit(self) -> Iterator[TrialRequest]:
        """Each finalist's raw prompt with batch offsets from its answers on the final dev prefix (labels
        unused): the race decided calibration on a block of 20-40 inputs, a prompt whose twin tied there
        stayed raw, and offsets from that few inputs are noisy. Its answers are the finalist's own, so
        this costs no call."""
        for key in list(self.finalists):
            genome = self.pool.genomes.get(key)
            if genome is None or genome.calibrate:
                continue
            raw = replace(genome, label_bias=())
            answered = yield from self._score(raw, "final (raw answers for offsets)")
            twin = batch_twin(raw, self.pool.records(answered, self.final_ids))
            if twin is not None:
                refit = yield from self._score(twin, "final (offsets refit)")
                self.refits.add(refit.id)
                if refit.id not in self.finalists:
                    self.finalists.append(refit.id)

    def _score(self, genome: Genome, purpose: str) -> Iterator[TrialRequest]:
        """`genome` in the pool (unless a genome already stands for its prompt), scored on the final dev prefix."""
        candidate = self.pool.register(genome)
        yield from self.pool.ask(candidate, self.final_ids, purpose)
        return candidate

    def ranked(self) -> list[Candidate]:
        """The finalists scored on the whole final prefix, by the objective there; the baseline wins ties."""
        candidates, objective = self.pool.candidates, self.race.objective
        finals = [(candidates[k], objective(self.pool.records(candidates[k], self.final_ids))) for k in self.finalists
                  if self.final_ids and not self.pool.missing(candidates[k], self.final_ids)]
        return rank_by_score(finals, self.baseline)
