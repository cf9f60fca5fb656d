"""reflect's calibrated twins: each prompt raced beside itself with label offsets (batch: measured on the
inputs' answers, no call; contextual: content-free inputs, 3 calls), and each finalist beside offsets refit on
the final dev prefix. Why: demos can push one label onto almost every input, which offsets undo."""

from __future__ import annotations

from dataclasses import replace
from typing import Iterator

from prompttune.optimizers.contract import Optimizer, TrialRequest
from prompttune.optimizers.reflect.genome import Genome
from prompttune.optimizers.reflect.race import margin
from prompttune.scoring.prediction import label_bias
from prompttune.search_spaces.space import Candidate


class Calibration(Optimizer):
    """Twins with label offsets, and the finalists' refit twins."""

    def _twin(self, genome: Genome, raw: Candidate) -> Genome | None:
        """The calibrated twin. Batch (Zhou et al. 2024): the raw prompt's mean normalised label
        log-probabilities over the block's inputs (labels unused) become fixed offsets that ship with
        it; no call. Contextual (Zhao et al. 2021): divided by its bias on content-free inputs."""
        if self.options.calibration == "contextual":
            return replace(genome, calibrate=True)
        offsets = label_bias(self.records(raw, self.block))
        return replace(genome, label_bias=tuple(round(x, 6) for x in offsets)) if offsets else None

    def _answers_alike(self, twin: str, raw: str) -> bool:
        pairs = zip(self.records(self.candidates[twin], self.block), self.records(self.candidates[raw], self.block))
        return all(a.pred == b.pred and abs(margin(a) - margin(b)) < 1e-9 for a, b in pairs)

    def _refit(self) -> Iterator[TrialRequest]:
        """Each finalist's raw prompt with batch offsets from its answers on the final dev prefix (labels
        unused): the race decided calibration on a block of 20-40 inputs, a prompt whose twin tied there
        stayed raw, and offsets from that few inputs are noisy. Its answers are the finalist's own, so
        this costs no call."""
        for key in list(self.finalists):
            genome = self.genomes.get(key)
            if genome is None or genome.calibrate:
                continue
            raw = replace(genome, label_bias=())
            raw_id = yield from self._score_genome(raw, "final (raw answers for offsets)")
            offsets = label_bias(self.records(self.candidates[raw_id], self.final_ids))
            if offsets:
                refit = yield from self._score_genome(replace(raw, label_bias=tuple(round(x, 6) for x in offsets)),
                                                      "final (offsets refit)")
                self.refits.add(refit)
                if refit not in self.finalists:
                    self.finalists.append(refit)

    def _score_genome(self, genome: Genome, purpose: str) -> Iterator[TrialRequest]:
        """Register `genome` and score it on the final dev prefix; its candidate id."""
        candidate = self._build(genome)
        self.genomes.setdefault(candidate.id, genome)
        self.candidates.setdefault(candidate.id, candidate)
        if todo := self.missing(candidate, self.final_ids):
            yield TrialRequest(candidate, todo, purpose)
        return candidate.id

    def _calibration_said(self) -> str:
        if not self.context.label_offsets:
            return f"off (serve {self.context.serve}: no label offsets)"
        return "off" if self.options.calibration == "off" else self.options.calibration + " raced"
