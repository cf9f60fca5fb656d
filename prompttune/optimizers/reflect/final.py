"""reflect's final stage: the pool on doubling dev prefixes, the better half going on, then the finalists on the
longest dev prefix the budget pays for, each beside a twin with batch offsets refit there. It takes the search
context as the driver bound it (the budget left is read from its ledger), at each call."""

from __future__ import annotations

from dataclasses import replace
from typing import Iterator, Sequence

from prompttune.optimizers.reflect.calibration import batch_twin
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

    def final_cost(self, context: SearchContext, keys: Sequence[str], ids: Sequence[str],
                   refit: Sequence[str] | None = None) -> int:
        """`cost`, and where finalists are refit under a contract that decodes the offsets (`choice`), each refit
        one's raw prompt and its refit twin too (offsets not known yet: its examples all cost a call); `refit`: those
        of `keys` refit (all by default)."""
        if not (self.refitting(context) and self.pool.offsets_decoded):
            return self.cost(keys, ids)
        raws = {(raw := self.pool.build(replace(genome, label_bias=()))).id: raw.spec
                for key in (keys if refit is None else refit)
                if (genome := self.pool.genomes.get(key)) is not None and not genome.calibrate}
        return self.cost([*keys, *raws], ids) + len(set(raws.values())) * len(ids)  # one twin per distinct prompt

    def refitting(self, context: SearchContext) -> bool:
        return self.options.refit and self.options.calibration == "batch" and context.label_offsets

    def reserve(self, context: SearchContext) -> int:
        """Calls kept for the final race: `final_share` of the budget, or what scoring the whole pool on the
        whole dev split costs where that is less. The final race can spend no more than that, so at a large
        budget, once the race block covers the dev split, the evolve stage goes on instead of leaving the
        reserve unspent."""
        members = self.pool.members
        return stage_reserve(context, self.options.final_share, self.final_cost(context, members, context.dev_ids))

    def run(self, context: SearchContext) -> Iterator[TrialRequest]:
        """While more than `finalists` remain, the dev prefix doubles and the better half by race score goes on
        (a prompt that entered the pool on a lucky block leaves on more examples); then the finalists on the
        longest dev prefix the rest of the budget pays for, and as many more pool members there as the budget
        still pays for; then each finalist's refit twin (where its decoded answers take calls, `choice`, those of
        the best finalists that the calls left pay for)."""
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
        n = most_affordable(len(race.block), lambda size: self.final_cost(context, self.finalists, dev[:size]), left,
                            stop=len(dev))
        self.final_ids = list(dev[:n])
        for key in race.by_score(self.pool.members):  # what the budget still pays for: more finalists
            if key not in self.finalists and (left is None or
                                              self.final_cost(context, [*self.finalists, key], self.final_ids) <= left):
                self.finalists.append(key)
        refit = self.finalists if self.refitting(context) else []
        if self.pool.offsets_decoded and left is not None:  # refits decoded apart: the best the calls left pay for
            refit = refit[:most_affordable(0, lambda k: self.final_cost(context, self.finalists, self.final_ids,
                                                                        refit[:k]), left, stop=len(refit))]
        yield from self.pool.ask_each([(self.pool.candidates[k], self.final_ids) for k in self.finalists], "final")
        yield from self._refit(list(refit))

    def _refit(self, keys: Sequence[str]) -> Iterator[TrialRequest]:
        """Each finalist's raw prompt with batch offsets from its answers on the final dev prefix (labels
        unused): the race decided calibration on a block of 20-40 inputs, a prompt whose twin tied there
        stayed raw, and offsets from that few inputs are noisy. The raw prompts' answers are mostly the
        finalists' own; the twins are asked together (under `choice` their constrained answers take calls)."""
        genomes = [self.pool.genomes.get(key) for key in keys]
        raws = [replace(genome, label_bias=()) for genome in genomes if genome is not None and not genome.calibrate]
        answered = [self.pool.register(raw) for raw in raws]
        yield from self.pool.ask_each([(candidate, self.final_ids) for candidate in answered],
                                      "final (raw answers for offsets)")
        twins = [batch_twin(raw, self.pool.records(candidate, self.final_ids)) for raw, candidate in zip(raws, answered)]
        refits = [self.pool.register(twin) for twin in twins if twin is not None]
        yield from self.pool.ask_each([(refit, self.final_ids) for refit in refits], "final (offsets refit)")
        for refit in refits:
            self.refits.add(refit.id)
            if refit.id not in self.finalists:
                self.finalists.append(refit.id)

    def ranked(self) -> list[Candidate]:
        """The finalists scored on the whole final prefix, by the objective there; the baseline wins ties."""
        candidates, objective = self.pool.candidates, self.race.objective
        finals = [(candidates[k], objective(self.pool.records(candidates[k], self.final_ids))) for k in self.finalists
                  if self.final_ids and not self.pool.missing(candidates[k], self.final_ids)]
        return rank_by_score(finals, self.baseline)
