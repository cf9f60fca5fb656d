"""reflect's moves: how a child prompt is made from a pool parent (reflection on its train errors, a grammar
move, a demo swap, a merge, a sampled instruction), and how a genome (the grid choices plus what moves wrote
over them) becomes a candidate."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator, Sequence

import numpy as np

from prompttune.core.types import Record
from prompttune.optimizers.contract import Optimizer, TrialRequest, spec_candidate
from prompttune.optimizers.proposer import clean_instruction
from prompttune.optimizers.reflect.genome import Genome
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


class Moves(Optimizer):
    """Children of pool parents, one move at a time, and the candidates genomes stand for."""

    parents: int  # parents a reflection step draws, `parents` resolved by the strategy

    def _move(self) -> str:
        """The next move, drawn in proportion to its children's success so far ((entered + 1) /
        (made + 2)): on a model whose reflections do not help, grammar moves and merges take over."""
        weights = np.array([(self.entered[m] + 1) / (self.made[m] + 2) for m in self.moves])
        return self.moves[int(self.rng.choice(len(self.moves), p=weights / weights.sum()))]

    def _key(self, genome: Genome) -> str:
        return self._build(genome).id

    def _build(self, genome: Genome) -> Candidate:
        """The candidate a genome stands for (built once: a child is keyed, then raced)."""
        if genome not in self.built:
            self.built[genome] = self._assemble(genome)
        return self.built[genome]

    def _assemble(self, genome: Genome) -> Candidate:
        grid = self.context.space.build(dict(genome.assignment))
        if genome.instruction is None and genome.demo_ids is None and not genome.calibrate and not genome.label_bias:
            return grid
        spec = grid.spec.with_updates(calibrate=genome.calibrate, label_bias=genome.label_bias)
        if genome.instruction is not None:
            spec = spec.with_updates(instruction=genome.instruction)
        if genome.demo_ids is not None:
            spec = spec.with_updates(demo_ids=genome.demo_ids)
        return spec_candidate(spec, "reflect")

    def _writing(self) -> bool:
        return self.options.write_instructions and self.proposer is not None

    def _sampled_instruction(self, spec: PromptSpec) -> str | None:
        """An instruction sampled at temperature 1.0 from four labelled train examples and a style tip.
        Why sample: on a small model text that means little to a person moves accuracy a lot, in the same
        order on dev as on test, so a wide spread of texts, cheap to race, is worth searching beside careful
        edits (measured in docs/optimizers.md)."""
        self.samples += 1
        ids = rotating_minibatch(self.context.train_ids, self.samples, 4)
        gold = {e.id: e.label for e in self.context.space.demo_pool}
        shown = "\n".join(f"- {self.example_text(i, 200)} -> {spec.label_words[gold[i]]}" for i in ids)
        tip = STYLE_TIPS[int(self.rng.integers(len(STYLE_TIPS)))]
        reply = self.proposer(instruction_request(shown, spec.label_words, tip), temperature=1.0,
                             seed=self.context.seed * 100_000 + self.samples)  # each arm seed its own draws
        return self.usable_rewrite(reply, spec)

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

    def _sample(self, parent_key: str) -> Genome | None:
        """(e) The parent with a freshly sampled instruction over its own."""
        if not self._writing():
            return None
        text = self._sampled_instruction(self.candidates[parent_key].spec)
        return None if text is None else replace(self.genomes[parent_key], instruction=text)

    def _reflect(self, parent_keys: Sequence[str]) -> Iterator[TrialRequest]:
        """(a) For each parent: critique its false positives and false negatives of one class apart, on a train
        minibatch, with the margins; then write an edited instruction. The children, one per parent (None where
        nothing came of it). Several parents (`parents`) are scored on their minibatches together, and their
        critiques, then their edits, are written in one generate call each: vLLM or a pool of servers decodes
        them together."""
        if not self._writing():
            return [None] * len(parent_keys)
        batches = [self._reflection_batch(key, number) for number, key in enumerate(parent_keys)]
        for number, (key, batch) in enumerate(zip(parent_keys, batches)):
            self.lookahead = [(self.candidates[k], b) for k, b in zip(parent_keys[number + 1:], batches[number + 1:])]
            if todo := self.missing(self.candidates[key], batch):
                yield TrialRequest(self.candidates[key], todo, "reflection minibatch")
        self.lookahead = []
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
            text = self.usable_rewrite(reply, ask.spec)
            children[id(ask)] = None if text is None else replace(self.genomes[ask.parent], instruction=text)
        return [None if ask is None else children[id(ask)] for ask in asks]

    def _reflection_batch(self, parent_key: str, number: int) -> list[str]:
        """The train minibatch the `number`th parent of this step reads its errors on (never its own demos)."""
        demos = set(self.candidates[parent_key].spec.demo_ids)
        pool = [i for i in self.context.train_ids if i not in demos]
        return rotating_minibatch(pool, self.steps * self.parents + number, self.options.minibatch)

    def _critique_ask(self, parent_key: str, batch: Sequence[str]) -> CritiqueAsk | None:
        """What the critic is asked about the parent's errors on `batch`, one error direction drawn of the two
        largest; None when it made none."""
        spec = self.candidates[parent_key].spec
        directions = error_directions(self.records(self.candidates[parent_key], batch), self.context.n_classes, 1)
        if not directions:
            return None
        direction = directions[int(self.rng.integers(min(2, len(directions))))]
        words = spec.label_words

        def said(r: Record) -> str:  # a generated answer as the model wrote it (invalid ones included)
            if r.text is not None:
                return f"the model answered {' '.join(r.text.split())[:80]!r}"
            return f"the model preferred '{words[r.pred] if r.pred is not None else 'no label'}' by {-margin(r):.1f} nats"

        shown = "\n".join(f"- {self.example_text(r.example_id)} ({said(r)})"
                          for r in direction.errors[: self.options.shown_errors])
        instruction = shown_instruction(spec.instruction, words)
        return CritiqueAsk(parent_key, spec, instruction, critique_request(direction, words, shown, instruction),
                           f"{direction.kind.upper()} {words[direction.label]}")

    def _grammar(self, parent_key: str) -> Genome | None:
        """(b) One dimension of the space changed (not the parts a move wrote over)."""
        genome = self.genomes[parent_key]
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

    def _swap_demo(self, parent_key: str) -> Iterator[TrialRequest]:
        """(c) One demo replaced by a train example the parent answered right (a bootstrapped demo)."""
        parent, genome = self.candidates[parent_key], self.genomes[parent_key]
        demos = list(parent.spec.demo_ids)
        if not demos or not self.swapping:  # swaps refine a searched few-shot dimension, never add demos
            return None
        pool = [i for i in self.demo_ids if i not in demos]
        batch = rotating_minibatch(pool, self.steps, self.options.minibatch)
        if todo := self.missing(parent, batch):
            yield TrialRequest(parent, todo, "demo bootstrap")
        solved = [r.example_id for r in self.records(parent, batch) if r.correct]
        if not solved:
            return None
        demos[int(self.rng.integers(len(demos)))] = solved[int(self.rng.integers(len(solved)))]
        return replace(genome, demo_ids=tuple(demos))

    def _merge(self, parent_key: str) -> Genome | None:
        """(d) The instruction of one pool prompt with the rest of another that wins elsewhere."""
        others = [k for k in self.pool if k != parent_key]
        if not others:
            return None
        donor = self.genomes[self._parent() if len(others) > 1 else others[0]]
        genome = self.genomes[parent_key]
        if donor == genome:
            return None
        assignment = {**dict(genome.assignment),
                      **{n: i for n, i in donor.assignment if n in self.instruction_dims}}
        if not self.context.space.is_valid(assignment):
            return None
        return replace(genome, assignment=tuple(sorted(assignment.items())), instruction=donor.instruction)
