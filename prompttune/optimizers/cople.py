"""COPLE-style coordinate search over the instruction's words (after Zhan et al. 2024).

1. Leave-one-out influence: delete each content word of the incumbent instruction and measure
   the drop in the gold label's probability on a proxy batch of dev examples.
2. For the `m` most influential words, try up to `C` meaning-preserving alternatives — from the
   space's word-slot lists, a synonym source (WordNet), or the proposer — one word at a time.
3. A change is kept only when the driver accepts its challenge. A sweep's alternatives are all
   drawn when it starts, so the sweep is one family of that many challenges (false accepts
   bounded per sweep). Sweeps repeat until one accepts nothing (then, optionally, one free-form
   rewrite by the proposer is challenged and, if accepted, refinement resumes) or the budget ends.

Example, on the synthetic oracle (a test device, `prompttune.testing.OracleProblem`: a
prompt is better, 0.85 against 0.55, when its instruction says 'Pick' or it carries 2+ demos)::

    >>> from prompttune.testing import OracleProblem
    >>> import prompttune
    >>> problem = OracleProblem.colours()
    >>> run = prompttune.optimize(problem.task, optimizer="cople", budget=1000, options={"synonyms": ""},
    ...                           space=problem.space, backend=problem.backend, record=False)
    >>> run.outcome.leader.spec.instruction  # the slot's declared alternative 'Pick', accepted by the driver
    'Pick the colour of the item ({labels}).'
    >>> run.outcome.challenges, run.outcome.challenge_accepts, run.ledger.calls
    (9, 1, 994)

On a real task (PROMPTTUNE_DATA_DIR=../shared/data; or from Python,
``prompttune.optimize("agnews", optimizer="cople", budget=2000, options={"m": 5, "C": 4})``)::

    optimize --task agnews --optimizer cople --budget 2000 --option m=5 --option C=4
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np
from pydantic import Field

from prompttune.core.errors import UserError
from prompttune.core.types import Record
from prompttune.optimizers.strategy_contract import (
    Challenge,
    IncumbentSearch,
    OptimizerOptions,
    Sweep,
    TrialRequest,
    spec_candidate,
)
from prompttune.search_spaces.space import Candidate
from prompttune.search_spaces.synonyms import synonym_source

WORD = re.compile(r"[A-Za-z][A-Za-z'-]{2,}")
STOPWORDS = frozenset("the and for with this that are its into from one has have was were will you your "
                      "which what who whom whose then than them they their there these those".split())


def content_words(text: str, frozen: Sequence[str] = ()) -> list[re.Match]:
    """Editable words: alphabetic, 3+ letters, not stop words, not inside a `{placeholder}` or a frozen text
    (a variant that changes one would be rejected)."""
    fixed = [(m.start(), m.end()) for m in re.finditer(r"\{[^}]*\}", text)]
    fixed += [(m.start(), m.end()) for part in frozen for m in re.finditer(re.escape(part), text)]
    return [m for m in WORD.finditer(text) if m.group().lower() not in STOPWORDS
            and not any(a <= m.start() < b for a, b in fixed)]


def replace_word(text: str, ordinal: int, new: str, frozen: Sequence[str] = ()) -> str:
    """Replace (or, with new == "", delete) the ordinal-th content word."""
    m = content_words(text, frozen)[ordinal]
    if new:
        return text[: m.start()] + new + text[m.end():]
    return re.sub(r"\s{2,}", " ", text[: m.start()] + text[m.end():]).strip()


def gold_probability(records: list[Record]) -> float:
    """Mean normalised probability of the gold label (accuracy when no log-probs exist)."""
    if any(r.label_logprobs is None for r in records):
        return float(np.mean([r.correct for r in records]))
    values = []
    for r in records:
        lp = np.asarray(r.label_logprobs)
        values.append(float(np.exp(lp[r.gold] - np.logaddexp.reduce(lp))))
    return float(np.mean(values))


class CopleOptions(OptimizerOptions):
    m: int = Field(10, ge=1, description="most influential instruction words searched")
    C: int = Field(8, ge=1, description="alternatives tried per word")
    proxy: int = Field(40, ge=1, description="dev examples of the leave-one-out influence")
    rewrite: bool = Field(False, description="one free-form proposer rewrite when a sweep accepts nothing")
    synonyms: str = Field("wordnet", description="synonym source for undeclared words ('' for none)")



class CoordinateWordSearch(IncumbentSearch):
    name = "cople"
    Options = CopleOptions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.proxy = tuple(self.order[: self.options.proxy])
        self.ranked: list[int] | None = None
        self.queue: list[tuple[int, str]] = []
        self.sweep: Sweep | None = None
        self.sweep_accepts = 0
        self.accepted_slots: set[int] = set()
        self.challenge_slot = -1
        self.rewritten = False
        self.done = False
        self.evaluated: set[str] = {self.baseline.id}
        self.nominal = 1
        self._slot_lists = self._declared_alternatives()
        self.frozen = self.context.space.frozen

    # -- alternatives -------------------------------------------------------------------------
    def _declared_alternatives(self) -> dict[str, list[str]]:
        """Word-slot lists of the space: each listed word maps to its whole list."""
        lists: dict[str, list[str]] = {}
        for dim in self.context.space.dimensions:
            if dim.target.startswith("slot:"):
                for word in dim.values:
                    lists[str(word).lower()] = [str(v) for v in dim.values]
        return lists

    def _alternatives(self, word: str, context: str) -> list[str]:
        found = [w for w in self._slot_lists.get(word.lower(), []) if w.lower() != word.lower()]
        if not found and self.options.synonyms:
            try:
                found = synonym_source(self.options.synonyms).synonyms(word, context, limit=self.options.C)
            except UserError:
                found = []
        if not found and self.proposer is not None:
            reply = self.proposer(f"Instruction: {context}\nList {self.options.C} single words that "
                                  f"could replace '{word}' without changing the meaning, comma-separated.\nWords:")
            found = [w.strip(" .'\"") for w in re.split(r"[,\n]", reply)]
        keep = [w for w in dict.fromkeys(found) if w and w.lower() != word.lower() and len(w) < 40]
        return keep[: self.options.C]

    # -- candidates ----------------------------------------------------------------------------
    def _variant(self, ordinal: int, new: str) -> Candidate:
        spec = self.incumbent.spec
        return spec_candidate(spec.with_updates(instruction=replace_word(spec.instruction, ordinal, new, self.frozen)),
                              "cople")

    def _rank_slots(self) -> list[int]:
        base = gold_probability(self.records(self.incumbent, self.proxy))
        words = content_words(self.incumbent.spec.instruction, self.frozen)
        drops = [base - gold_probability(self.records(self._variant(k, ""), self.proxy)) for k in range(len(words))]
        return sorted(range(len(words)), key=lambda k: -drops[k])[: self.options.m]

    def _start_sweep(self) -> None:
        """Draw every alternative of every ranked slot now: the sweep's size is then known."""
        self.sweep_accepts = 0
        self.accepted_slots = set()
        instruction = self.incumbent.spec.instruction
        words = content_words(instruction, self.frozen)
        self.queue = []
        for slot in self.ranked or []:
            if slot < len(words):
                alternatives = self._alternatives(words[slot].group(), instruction)
                self.nominal *= 1 + len(alternatives)
                self.queue += [(slot, alt) for alt in alternatives]
        self.sweep = self.open_sweep(len(self.queue))

    def _next_challenge(self) -> Challenge | None:
        """The next alternative of this sweep that makes a new prompt; one accept per slot."""
        while self.queue:
            slot, word = self.queue.pop(0)
            words = len(content_words(self.incumbent.spec.instruction, self.frozen))
            if slot in self.accepted_slots or slot >= words:
                continue
            candidate = (self._variant(slot, word) if slot >= 0 else
                         spec_candidate(self.incumbent.spec.with_updates(instruction=word), "cople-rewrite"))
            if candidate.id in self.evaluated:
                continue
            self.evaluated.add(candidate.id)
            self.challenge_slot = slot
            return self.challenge(candidate, self.sweep)
        return None

    # -- ask / tell -------------------------------------------------------------------------
    def ask(self) -> TrialRequest | Challenge | None:
        while not self.done:
            if todo := self.missing(self.incumbent, self.proxy):
                return TrialRequest(self.incumbent, todo, "proxy")
            if self.ranked is None:
                for k in range(len(content_words(self.incumbent.spec.instruction, self.frozen))):
                    if todo := self.missing(self._variant(k, ""), self.proxy):
                        return TrialRequest(self._variant(k, ""), todo, f"leave-one-out {k}")
                self.ranked = self._rank_slots()
                self._start_sweep()
            if challenge := self._next_challenge():
                return challenge
            if self.sweep_accepts:
                self._start_sweep()
            elif self.options.rewrite and not self.rewritten and self.proposer is not None:
                self.rewritten = True
                self._queue_rewrite()
            else:
                self.done = True
        return None

    def _queue_rewrite(self) -> None:
        spec = self.incumbent.spec
        text = self.usable_rewrite(self.proposer(
            f"Instruction: {spec.instruction}\nRewrite this instruction in different words with the same "
            f"meaning. Keep the answer options {', '.join(spec.label_words)}.\nRewritten instruction:"), spec)
        if text is not None:
            self.queue = [(-1, text)]
            self.sweep = self.open_sweep(1)

    def on_accept(self, candidate: Candidate) -> None:
        self.sweep_accepts += 1
        self.accepted_slots.add(self.challenge_slot)  # one accepted change per slot
        if self.challenge_slot < 0:  # a free-form rewrite: rank its words afresh
            self.ranked = None
            self.queue = []

    def report_lines(self) -> list[str]:
        share = (len(self.evaluated) - 1) / max(self.nominal, 1)
        words = len(content_words(self.baseline.spec.instruction, self.frozen))
        return [f"COPLE: {self.sweeps} sweep(s) (each one family of challenges) over the "
                f"{min(self.options.m, words)} most influential of "
                f"{words} instruction words (leave-one-out "
                f"influence on {len(self.proxy)} dev examples); {len(self.evaluated) - 1} word variants "
                f"challenged, {len(self.accepted)} accepted; {share:.2%} of the nominal lexical space "
                f"({self.nominal:,} combinations of the alternatives tried) was evaluated."]
