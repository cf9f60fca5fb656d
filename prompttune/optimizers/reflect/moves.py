"""reflect's moves: how a child genome is made from pool parents (reflection on its train errors, a grammar
move, a demo swap, a merge, a sampled instruction), and how a screen draw is dressed (its own demos, a sampled
instruction). Moves read their parents' answers from the pool and never score: where a move needs answers (a
reflection minibatch, a swap's candidates), it names the examples and the strategy has them scored first."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from prompttune.core.types import Record
from prompttune.optimizers.proposer import Proposer, clean_instruction
from prompttune.optimizers.reflect.genome import Genome
from prompttune.optimizers.reflect.options import ReflectOptions
from prompttune.optimizers.reflect.pool import Pool
from prompttune.optimizers.reflect.race import margin
from prompttune.optimizers.search_helpers import (
    STYLE_TIPS,
    critique_request,
    edit_request,
    error_directions,
    instruction_request,
    rotating_minibatch,
    shown_instruction,
)
from prompttune.optimizers.strategy_contract import SearchContext, checked_rewrite, example_input
from prompttune.search_spaces.demo_pool import demo_ids_like_dev
from prompttune.search_spaces.demos import choose_demos
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.search_spaces.space import Candidate

MOVES = ("reflect", "grammar", "demos", "merge", "sample")


@dataclass(frozen=True)
class CritiqueAsk:
    """One parent's critique request, and what its edit needs."""

    parent: str
    spec: PromptSpec
    instruction: str  # the parent's instruction as the critic and the editor are shown it
    request: str
    direction: str  # e.g. "FP Sports", as the report lists critiques


class Moves:
    """Children of pool parents, one move at a time, drawn by how often each move's children entered the pool
    (`made`, `entered`: the strategy counts them); what reflection wrote and critiqued along the way. Of the
    context it reads the space, the splits and the seed, never the budget (the strategy's to spend)."""

    def __init__(self, context: SearchContext, options: ReflectOptions, pool: Pool, rng: np.random.Generator,
                 proposer: Proposer | None = None) -> None:
        self.context, self.options, self.pool, self.rng, self.proposer = context, options, pool, rng, proposer
        space = context.space
        self.instruction_dims = {d.name for d in space.dimensions
                                 if d.target == "instruction" or d.target.startswith("slot:")}
        self.demo_dims = {d.name for d in space.dimensions if d.kind == "few_shot"}
        self.demo_search = any(len(space.dimension(n).values) > 1 for n in self.demo_dims)
        self.swapping = options.swap_demos and self.demo_search
        self.demo_ids = self._demo_candidates()
        self.like_sets: dict[int, tuple[str, ...]] = {}  # like-dev: one set per k, as the grid has
        self.names = MOVES if options.sampled > 0 else MOVES[:-1]
        self.made = Counter[str]()
        self.entered = Counter[str]()
        self.critiques: list[str] = []
        self.written: set[str] = set()
        self.samples = 0  # instructions sampled so far: each sample's seed

    @property
    def writing(self) -> bool:
        return self.options.write_instructions and self.proposer is not None

    def draw(self) -> str:
        """The next move, drawn in proportion to its children's success so far ((entered + 1) /
        (made + 2)): on a model whose reflections do not help, grammar moves and merges take over."""
        weights = np.array([(self.entered[m] + 1) / (self.made[m] + 2) for m in self.names])
        return self.names[int(self.rng.choice(len(self.names), p=weights / weights.sum()))]

    def screen_genome(self, number: int, candidate: Candidate, sampled: float) -> Genome:
        """The screen's `number`th draw as raced: a sampled instruction over it where its share says, its own demo
        set (`demo_sets`), or the like-dev demos of its k; the baseline (number 0) as it is."""
        genome = Genome(candidate.assignment)
        if number and int(number * sampled) > int((number - 1) * sampled):
            text = self._sampled_instruction(candidate.spec)
            genome = genome if text is None else replace(genome, instruction=text)
        if number and self.demo_search and self.options.demo_sets and candidate.spec.demo_ids:
            genome = replace(genome, demo_ids=self._demo_set(len(candidate.spec.demo_ids)))
        return self._like_dev_demos(genome) if number else genome

    def _sampled_instruction(self, spec: PromptSpec) -> str | None:
        """An instruction sampled at temperature 1.0 from four labelled train examples and a style tip.
        Why sample: on a small model text that means little to a person moves accuracy a lot, in the same
        order on dev as on test, so a wide spread of texts, cheap to race, is worth searching beside careful
        edits (measured in docs/optimizers.md)."""
        self.samples += 1
        space = self.context.space
        ids = rotating_minibatch(self.context.train_ids, self.samples, 4)
        gold = {e.id: e.label for e in space.demo_pool}
        shown = "\n".join(f"- {example_input(space, i, 200)} -> {spec.label_words[gold[i]]}" for i in ids)
        tip = STYLE_TIPS[int(self.rng.integers(len(STYLE_TIPS)))]
        reply = self.proposer(instruction_request(shown, spec.label_words, tip), temperature=1.0,
                              seed=self.context.seed * 100_000 + self.samples)  # each arm seed its own draws
        return checked_rewrite(reply, spec, space)

    def _demo_set(self, k: int) -> tuple[str, ...]:
        """k train examples, every class in turn, for one screen draw: which demos show can move a small
        model's answers as much as the format, and the grid's draws all share one set per k."""
        allowed = set(self.demo_ids)
        pool = [e for e in self.context.space.demo_pool if e.id in allowed]
        return choose_demos(pool, k, "balanced", 0, int(self.rng.integers(2**31)))

    def _demo_candidates(self) -> list[str]:
        """The train ids demos come from: with `demo_pool=like-dev` those that look like the dev inputs
        (`demo_ids_like_dev`), else all of train."""
        context = self.context
        if self.options.demo_pool == "train":
            return list(context.train_ids)
        return demo_ids_like_dev(context.space.demo_pool, context.train_ids, context.dev_input_words, context.n_classes)

    def _like_dev_demos(self, genome: Genome) -> Genome:
        """like-dev: a genome that would show the grid's demos shows the like-dev set of that k instead."""
        if self.options.demo_pool != "like-dev" or genome.demo_ids is not None:
            return genome
        k = len(self.context.space.build(dict(genome.assignment)).spec.demo_ids)
        if not k:
            return genome
        if k not in self.like_sets:
            self.like_sets[k] = self._demo_set(k)
        return replace(genome, demo_ids=self.like_sets[k])

    def sample(self, parent_key: str) -> Genome | None:
        """(e) The parent with a freshly sampled instruction over its own."""
        if not self.writing:
            return None
        text = self._sampled_instruction(self.pool.candidates[parent_key].spec)
        return None if text is None else replace(self.pool.genomes[parent_key], instruction=text)

    def reflection_batch(self, parent_key: str, index: int) -> tuple[str, ...]:
        """The `index`th train minibatch, which the parent reads its errors on (never its own demos)."""
        demos = set(self.pool.candidates[parent_key].spec.demo_ids)
        pool = [i for i in self.context.train_ids if i not in demos]
        return rotating_minibatch(pool, index, self.options.minibatch)

    def reflect(self, parent_keys: Sequence[str], batches: Sequence[Sequence[str]]) -> list[Genome | None]:
        """(a) For each parent, scored on its minibatch: critique its false positives and false negatives of one
        class apart, with the margins; then write an edited instruction. The children, one per parent (None where
        nothing came of it). Several parents' critiques, then their edits, are written in one generate call each:
        vLLM or a pool of servers decodes them together."""
        if not self.writing:
            return [None] * len(parent_keys)
        asks = [self._critique_ask(key, batch) for key, batch in zip(parent_keys, batches)]
        live = [ask for ask in asks if ask is not None]
        if len(live) > 1:
            self.proposer.prefetch([ask.request for ask in live], self.options.decode_together)
        edits = []
        for ask in live:
            feedback = self.proposer.critique(ask.request, ask.instruction, ask.spec.label_words)
            self.critiques.append(f"{ask.direction}: {feedback}")
            edits.append(edit_request(ask.instruction, feedback, sorted(self.written)[-3:], ask.spec.label_words))
        if len(edits) > 1:
            self.proposer.prefetch(edits, self.options.decode_together)
        children: dict[int, Genome | None] = {}
        for ask, edit in zip(live, edits):
            reply = self.proposer(edit)
            self.written.add(clean_instruction(reply))
            text = checked_rewrite(reply, ask.spec, self.context.space)
            children[id(ask)] = None if text is None else replace(self.pool.genomes[ask.parent], instruction=text)
        return [None if ask is None else children[id(ask)] for ask in asks]

    def _critique_ask(self, parent_key: str, batch: Sequence[str]) -> CritiqueAsk | None:
        """What the critic is asked about the parent's errors on `batch`, one error direction drawn of the two
        largest; None when it made none."""
        parent = self.pool.candidates[parent_key]
        spec, space = parent.spec, self.context.space
        directions = error_directions(self.pool.records(parent, batch), self.context.n_classes, 1)
        if not directions:
            return None
        direction = directions[int(self.rng.integers(min(2, len(directions))))]
        words = spec.label_words

        def said(r: Record) -> str:  # a generated answer as the model wrote it (invalid ones included)
            if r.text is not None:
                return f"the model answered {' '.join(r.text.split())[:80]!r}"
            return f"the model preferred '{words[r.pred] if r.pred is not None else 'no label'}' by {-margin(r):.1f} nats"

        shown = "\n".join(f"- {example_input(space, r.example_id)} ({said(r)})"
                          for r in direction.errors[: self.options.shown_errors])
        instruction = shown_instruction(spec.instruction, words)
        return CritiqueAsk(parent_key, spec, instruction, critique_request(direction, words, shown, instruction),
                           f"{direction.kind.upper()} {words[direction.label]}")

    def grammar(self, parent_key: str) -> Genome | None:
        """(b) One dimension of the space changed (not the parts a move wrote over)."""
        genome = self.pool.genomes[parent_key]
        if genome.demo_ids is not None and genome.demo_ids in self.like_sets.values():
            genome = replace(genome, demo_ids=None)  # its k's like-dev set, not a swap: a k move takes the new k's
        fixed = (self.instruction_dims if genome.instruction is not None else set()) | \
                (self.demo_dims if genome.demo_ids is not None else set())
        assignment = dict(genome.assignment)
        moves = [n for n in self.context.space.neighbours(assignment)
                 if not any(n[d] != assignment[d] for d in fixed)]
        if not moves:
            return None
        chosen = moves[int(self.rng.integers(len(moves)))]
        return self._like_dev_demos(replace(genome, assignment=tuple(sorted(chosen.items()))))

    def swap_batch(self, parent_key: str, index: int) -> tuple[str, ...] | None:
        """(c) The `index`th train minibatch a demo swap draws its demo from, among the examples the parent does
        not show; None where the parent shows no demos or the space searches no few-shot dimension (swaps
        refine one, never add demos)."""
        demos = self.pool.candidates[parent_key].spec.demo_ids
        if not demos or not self.swapping:
            return None
        return rotating_minibatch([i for i in self.demo_ids if i not in demos], index, self.options.minibatch)

    def swap_demo(self, parent_key: str, batch: Sequence[str]) -> Genome | None:
        """(c) One demo replaced by an example of `batch` the parent answered right (a bootstrapped demo)."""
        parent = self.pool.candidates[parent_key]
        demos = list(parent.spec.demo_ids)
        solved = [r.example_id for r in self.pool.records(parent, batch) if r.correct]
        if not solved:
            return None
        demos[int(self.rng.integers(len(demos)))] = solved[int(self.rng.integers(len(solved)))]
        return replace(self.pool.genomes[parent_key], demo_ids=tuple(demos))

    def merge(self, parent_key: str, donor_key: str | None) -> Genome | None:
        """(d) The instruction of one pool prompt (the donor, which wins elsewhere) with the rest of the parent."""
        if donor_key is None:
            return None
        donor, genome = self.pool.genomes[donor_key], self.pool.genomes[parent_key]
        if donor == genome:
            return None
        assignment = {**dict(genome.assignment),
                      **{n: i for n, i in donor.assignment if n in self.instruction_dims}}
        if not self.context.space.is_valid(assignment):
            return None
        return replace(genome, assignment=tuple(sorted(assignment.items())), instruction=donor.instruction)
