"""P2G — split-error critique (after PO2G, Lieander et al. 2025, and ProTeGi, Pryzant et al. 2023).

Score a train minibatch with the incumbent, then critique false positives (predicted c, gold
≠ c: "make it stricter about c") and false negatives (gold c, predicted ≠ c: "make it more
inclusive for c") separately — never pooled, because the two need opposite edits. Each critique
feeds edit calls that write candidate instructions; a candidate replaces the incumbent only
when the driver accepts its challenge on dev. The children of one expansion form one sweep
(false accepts bounded per expansion). Expansion is a tree: each accepted node is expanded
again, up to `max_depth` levels with at most `nodes_per_level` candidates each.

Example, on the synthetic oracle (a test device, `prompttune.testing.OracleProblem`: a
prompt is better, 0.85 against 0.55, when its instruction says 'Pick' or it carries 2+ demos)::

    >>> from prompttune.testing import OracleProblem
    >>> import prompttune
    >>> problem = OracleProblem.colours()
    >>> run = prompttune.optimize(problem.task, optimizer="p2g", budget=1000, options={"minibatch": 60, "min_errors": 3},
    ...                           space=problem.space, backend=problem.backend, record=False)
    >>> run.strategy.optimizer.critiques[0]  # the scripted critic's answer on the false positives of 'red'
    'FP red: Mention the colour list explicitly (note 165).'
    >>> run.outcome.leader.spec.instruction
    'Pick the colour of the item ({labels}).'
    >>> run.outcome.challenges, run.outcome.challenge_accepts, run.ledger.calls
    (3, 2, 647)

On a real task (PROMPTTUNE_DATA_DIR=../shared/data; or from Python,
``prompttune.optimize("agnews", optimizer="p2g", budget=2000, options={"directions": 2})``)::

    optimize --task agnews --optimizer p2g --budget 2000 --option directions=2
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from prompttune.core.types import Record
from prompttune.optimizers.proposer import clean_instruction
from prompttune.optimizers.search_helpers import (
    Direction,
    critique_request,
    edit_request,
    error_directions,
    rotating_minibatch,
    shown_instruction,
)
from prompttune.optimizers.strategy_contract import (
    Challenge,
    IncumbentSearch,
    OptimizerOptions,
    Sweep,
    TrialRequest,
    spec_candidate,
)
from prompttune.search_spaces.space import Candidate


class P2GOptions(OptimizerOptions):
    minibatch: int = Field(160, ge=1, description="train examples critiqued per expansion")
    min_errors: int = Field(20, ge=1, description="smallest FP or FN set worth a critique")
    directions: int = Field(2, ge=1, description="error directions critiqued per expansion")
    edits: int = Field(2, ge=1, description="edit calls per critique")
    shown_errors: int = Field(3, ge=1, description="errors shown to the critic")
    max_depth: int = Field(3, ge=1, description="accepted edits before stopping")
    patience: int = Field(3, ge=1, description="expansions without an accepted edit before stopping")
    nodes_per_level: int = Field(4, ge=1, description="children challenged per expansion")
    representatives: Literal["random", "kmeans"] = Field("random", description="how shown errors are picked")



class SplitErrorCritique(IncumbentSearch):
    name = "p2g"
    Options = P2GOptions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tried = {self.baseline.id}
        self.expansions = 0
        self.barren = 0  # expansions since the last accepted edit
        self.queue: list[Candidate] = []
        self.sweep: Sweep | None = None
        self.critiques: list[str] = []
        self.done = False

    def _minibatch(self) -> tuple[str, ...]:
        demos = set(self.incumbent.spec.demo_ids)
        pool = [i for i in self.context.train_ids if i not in demos]
        return rotating_minibatch(pool, self.expansions, self.options.minibatch)

    def _pick(self, errors: tuple[Record, ...]) -> list[Record]:
        """Representative errors: k-means on sentence embeddings, or a random sample."""
        if self.options.representatives == "kmeans" and len(errors) > self.options.shown_errors:
            from prompttune.optimizers.embeddings import embed, kmeans_representatives

            vectors = embed([self.example_text(r.example_id) for r in errors], self.proposer.meter)
            return [errors[i] for i in kmeans_representatives(vectors, self.options.shown_errors, self.context.seed)]
        picks = self.rng.choice(len(errors), size=min(self.options.shown_errors, len(errors)), replace=False)
        return [errors[int(i)] for i in np.sort(picks)]

    def _critique(self, direction: Direction) -> str:
        shown = "\n".join(f"- {self.example_text(r.example_id)}" for r in self._pick(direction.errors))
        words = self.incumbent.spec.label_words
        return self.proposer.critique(critique_request(direction, words, shown, self._instruction()), self._instruction(),
                                      words)

    def _instruction(self) -> str:
        return shown_instruction(self.incumbent.spec.instruction, self.incumbent.spec.label_words)

    def _expand(self) -> list[Candidate]:
        """Critique each error direction separately, then write edited instructions for it."""
        records = self.records(self.incumbent, self._minibatch())
        directions = error_directions(records, self.context.n_classes, self.options.min_errors)[: self.options.directions]
        spec = self.incumbent.spec
        children: dict[str, Candidate] = {}
        for direction in directions:
            feedback = " ".join(self._critique(direction).split())  # one line in the report
            self.critiques.append(f"{direction.kind.upper()} {spec.label_words[direction.label]}: {feedback}")
            written: list[str] = []  # listed in the next edit call: greedy decoding repeats itself
            for _ in range(self.options.edits):
                reply = self.proposer(edit_request(self._instruction(), feedback, written, spec.label_words))
                written.append(clean_instruction(reply))
                if (text := self.usable_rewrite(reply, spec)) is not None:
                    child = spec_candidate(spec.with_updates(instruction=text), "p2g")
                    if child.id not in self.tried:
                        self.tried.add(child.id)
                        children[child.id] = child
        return list(children.values())[: self.options.nodes_per_level]

    def ask(self) -> TrialRequest | Challenge | None:
        while not self.done:
            if self.queue:
                return self.challenge(self.queue.pop(0), self.sweep)
            # Depth: accepted edits on the path from the baseline (each expands the new node).
            if len(self.accepted) >= self.options.max_depth or self.barren >= self.options.patience:
                self.done = True
                break
            if todo := self.missing(self.incumbent, self._minibatch()):
                return TrialRequest(self.incumbent, todo, "train minibatch")
            # A barren expansion (no valid edit, or none accepted) tries the next minibatch.
            self.queue = self._expand()
            self.sweep = self.open_sweep(len(self.queue))
            self.expansions += 1
            self.barren += 1
        return None

    def on_accept(self, candidate: Candidate) -> None:
        self.queue = []  # expand the accepted node next (depth-first)
        self.barren = 0

    def report_lines(self) -> list[str]:
        return [f"P2G: depth {len(self.accepted)} after {self.expansions} expansions (stops at depth "
                f"{self.options.max_depth} or {self.options.patience} expansions without an accepted edit); critiques "
                f"(false positives and false negatives kept apart):",
                *(f"- {c}" for c in self.critiques)]
