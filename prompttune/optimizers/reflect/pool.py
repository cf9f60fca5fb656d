"""reflect's pool: every genome built and the candidate it stands for, what each candidate answered, the prompts
that evolve, and what the running stage will ask next whatever the answers (so the model answers it together)."""

from __future__ import annotations

from dataclasses import replace
from typing import Iterator, Sequence

from prompttune.core.types import Record
from prompttune.optimizers.reflect.genome import Genome
from prompttune.optimizers.services import calls_to_score
from prompttune.optimizers.strategy_contract import TrialRequest, spec_candidate
from prompttune.search_spaces.space import Candidate, SearchSpace


class Pool:
    """Genomes -> candidates (each built once: a child is keyed, then raced), keys -> genomes and candidates,
    the answers the driver told of (`answers`: candidate -> example -> record, the strategy's memo, shared),
    the `members` parents come from, and the `echoes` (calibrated twins that answer exactly as their raw
    prompt: no slot). `offsets_decoded`: the contract applies label offsets while decoding (`choice`'s
    `logit_bias`), so a batch twin's answers take calls of their own; under `logprobs` they are its raw prompt's."""

    def __init__(self, space: SearchSpace, answers: dict[str, dict[str, Record]] | None = None,
                 offsets_decoded: bool = False) -> None:
        self.space, self.offsets_decoded = space, offsets_decoded
        self.answers: dict[str, dict[str, Record]] = {} if answers is None else answers
        self.built: dict[Genome, Candidate] = {}
        self.genomes: dict[str, Genome] = {}
        self.candidates: dict[str, Candidate] = {}
        self.members: list[str] = []
        self.echoes: set[str] = set()
        self.ahead: list[tuple[Candidate, Sequence[str]]] = []

    def build(self, genome: Genome) -> Candidate:
        """The candidate `genome` stands for: the grid's where nothing was written over it."""
        if genome not in self.built:
            self.built[genome] = self._assemble(genome)
        return self.built[genome]

    def key(self, genome: Genome) -> str:
        return self.build(genome).id

    def _assemble(self, genome: Genome) -> Candidate:
        grid = self.space.build(dict(genome.assignment))
        if genome.instruction is None and genome.demo_ids is None and not genome.calibrate and not genome.label_bias:
            return grid
        spec = grid.spec.with_updates(calibrate=genome.calibrate, label_bias=genome.label_bias)
        if genome.instruction is not None:
            spec = spec.with_updates(instruction=genome.instruction)
        if genome.demo_ids is not None:
            spec = spec.with_updates(demo_ids=genome.demo_ids)
        return spec_candidate(spec, "reflect")

    def enter(self, genome: Genome) -> Candidate:
        """`genome` raced under its key: it stands for that prompt from now on."""
        candidate = self.build(genome)
        self.genomes[candidate.id], self.candidates[candidate.id] = genome, candidate
        return candidate

    def register(self, genome: Genome) -> Candidate:
        """`genome` under its key unless a genome already stands for that prompt."""
        candidate = self.build(genome)
        self.genomes.setdefault(candidate.id, genome)
        self.candidates.setdefault(candidate.id, candidate)
        return candidate

    def scored(self) -> int:
        """Prompts answered on some example (a step cut by the cap may leave entered ones unanswered)."""
        return sum(1 for key in self.candidates if self.answers.get(key))

    def missing(self, candidate: Candidate, ids: Sequence[str]) -> tuple[str, ...]:
        seen = self.answers.get(candidate.id)
        return tuple([i for i in ids if i not in seen] if seen else ids)

    def records(self, candidate: Candidate, ids: Sequence[str]) -> list[Record]:
        seen = self.answers[candidate.id]
        return [seen[i] for i in ids]

    def lacks_label_scores(self, candidate: Candidate) -> bool:
        """Whether its answers were generated (no label scores): nothing to calibrate."""
        seen = self.answers.get(candidate.id, {})
        return bool(seen) and all(r.label_logprobs is None for r in seen.values())

    def ask(self, candidate: Candidate, ids: Sequence[str], purpose: str) -> Iterator[TrialRequest]:
        """The request that scores `candidate` on the examples of `ids` it has not answered, if any."""
        if todo := self.missing(candidate, ids):
            yield TrialRequest(candidate, todo, purpose)

    def ask_each(self, wanted: Sequence[tuple[Candidate, Sequence[str]]], purpose: str) -> Iterator[TrialRequest]:
        """Each candidate on its examples, the rest of `wanted` standing `ahead` meanwhile (one race step: the
        model answers them together)."""
        for number, (candidate, ids) in enumerate(wanted):
            self.ahead = list(wanted[number + 1:])
            yield from self.ask(candidate, ids, purpose)
        self.ahead = []

    def upcoming(self) -> list[TrialRequest]:
        """What stands `ahead`, less what is answered already."""
        return [TrialRequest(candidate, todo) for candidate, ids in self.ahead if (todo := self.missing(candidate, ids))]

    def cost(self, keys: Sequence[str], ids: Sequence[str]) -> int:
        """Model calls that score `keys` on `ids`, as the cache charges them (`calls_to_score`): a batch twin's
        answers are its raw prompt's where offsets are applied to label scores, so they go together."""
        texts: dict[str, set[str]] = {}  # the raw prompt whose text the model answers -> its scored variants
        for key in set(keys):
            genome = self.genomes.get(key)
            rides = genome is not None and genome.label_bias and not self.offsets_decoded
            raw = self.key(replace(genome, label_bias=())) if rides else key
            texts.setdefault(raw, set()).update({key, raw})
        return calls_to_score([[self.candidates[m] for m in members if m in self.candidates]
                               for members in texts.values()], ids, self.missing)
