"""Reflective race — prompttune's flagship: every part of the prompt, reflective edits, raced on
paired examples with a dense confidence score.

Three stages, sized to the budget:

1. **Screen.** The baseline and as many distinct draws of the space as `screen_share` pays for (format,
   label words, listed instructions, few-shot k: every declared dimension) are scored on one block of
   dev examples, each also as its *calibrated twin*: by default batch calibration (Zhou et al. 2024),
   the prompt's mean normalised label log-probabilities over the block's inputs (labels unused)
   subtracted as fixed offsets that ship with it, at no call. On the embedded model demos can push one
   label onto almost every input (on an sst2 validation draw a baseline with four demos answered
   'positive' to 99% of the test inputs: 0.523), which the offsets undo (0.818), while content-free
   inputs (`calibration=contextual`, Zhao et al. 2021, 3 calls) misread the bias there (0.526; the
   baseline itself fell from 0.745 to 0.572). Ranking is by the run's objective with ties broken by the
   gold label's log-probability margin (`race_score`, default `tiebreak`): on split seeds that no
   reported comparison uses it shipped 3.9 points more than ranking by the gold label's probability on
   sst2 and 2.6 more on agnews (native, 2,000 calls), the probability's confidence having favoured sure
   prompts over right ones; the block is never smaller than `min_examples` or 4 examples per class.
   Where they outnumber the pool, the best `2 × pool` go on to a block twice as long and the pool is
   cut there; a twin that answers exactly as its raw prompt takes no slot.
2. **Evolve.** A pool of the best `pool` prompts. Each step picks a parent from the per-example
   Pareto front of the pool (as GEPA: a prompt best on some examples of the block, drawn in
   proportion to how many) and makes one child by one of four moves, each drawn in proportion to
   how often its children entered the pool so far: (a) *reflection*: the parent's
   errors on a train minibatch, with gold label, prediction and margin, false positives and false
   negatives of a class critiqued apart (as P2G), then an instruction edit; (b) a *grammar move*:
   one dimension of the space changed; (c) a *demo swap*: one demo replaced by a train example the
   parent answers right; (d) a *merge*: the instruction of one front prompt with the rest of
   another. The child (and its twin) is scored on the same block; it enters the pool when its
   race score beats the pool's worst. After `patience` rejected children the block grows by half, so the
   race spends its examples where the pool is hard to separate. With `sampled` above 0 a share of
   the screen's draws carry an instruction sampled at temperature 1.0 (as DSPy's MIPROv2 proposes)
   and (e) a *sample*, the parent under a fresh one, is a fifth move; off by default: on sst2's
   reported draws it shipped 0.800 against 0.808 (docs/results/reflect_sampled_demo_sets_batch_sst2.md).
   With `demo_sets` (default) each screen draw that shows demos gets its own class-balanced set (the
   grid's draws share one set per k): chosen on split seeds no reported comparison uses, where it
   shipped +0.9 points on sst2 and +0.1 on agnews over one set per k; on the reported draws +0.6 on sst2
   and -1.8 on agnews (docs/results/reflect_like_dev_demos.md). Demos (the screen's sets, k moves,
   swaps) come from the train examples as long as the middle half of the dev inputs (`demo_pool`,
   default `like-dev`; labels unused): sst2's train split is parse-tree phrases (median 7 words), its
   inputs whole sentences (19–20); reflect so shipped 0.827 against 0.808 on the reported sst2 draws,
   0.838 against 0.825 on split seeds 5–9, 0.753 against 0.746 on agnews, though demo sets drawn that
   way did not score better one by one (docs/results/reflect_like_dev_demos.md).
3. **Final.** A race over the pool on doubling dev prefixes (the better half by race score goes on),
   then the `finalists` (and as many more as the budget pays for) on the longest dev prefix it can
   afford, each beside its *refit* twin (`refit`, batch calibration): offsets measured on that whole
   prefix's inputs, not the 20–40 of the block where the race first decided calibration, at no call.
   Ranked by the run's objective there; the driver's verdict tests the leader. A refit twin shipped on 5
   of 15 seed-runs (agnews and sst2, native, 2,000 calls), +0.3 points on average: kept because it costs
   no call and measures offsets on 5–15 times the inputs, not as shown to pay
   (docs/results/reflect_refit_finalists.md).

Example, on the synthetic oracle (a test device, `prompttune.testing.OracleProblem`: a
prompt is better, 0.85 against 0.55, when its instruction says 'Pick' or it carries 2+ demos)::

    >>> from prompttune.testing import OracleProblem
    >>> import prompttune
    >>> problem = OracleProblem.colours()
    >>> run = prompttune.optimize(problem.task, optimizer="reflect", budget=800,
    ...                           space=problem.space, backend=problem.backend, record=False)
    >>> "Pick the colour" in run.outcome.leader.spec.instruction, run.ledger.calls <= 800
    (True, True)

On a real task (PROMPTTUNE_DATA_DIR=../shared/data; or from Python,
``prompttune.optimize("agnews", optimizer="reflect", budget=2000)``)::

    optimize --task agnews --optimizer reflect --budget 2000
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Literal, Sequence

import numpy as np
from pydantic import Field

from prompttune.core.errors import UserError
from prompttune.core.types import Record, input_words
from prompttune.evaluation.prediction import label_bias
from prompttune.optimizers.base import (
    Optimizer,
    OptimizerOptions,
    SearchContext,
    TrialRequest,
    spec_candidate,
    validate_options,
)
from prompttune.optimizers.proposer import clean_instruction
from prompttune.optimizers.search_helpers import (
    STYLE_TIPS,
    critique_request,
    edit_request,
    error_directions,
    instruction_request,
    rank_by_score,
    rotating_minibatch,
    shown_instruction,
)
from prompttune.search_spaces.demos import choose_demos
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.search_spaces.space import Candidate

MARGIN_CLIP = 10.0  # nats: one confidently wrong example may not outweigh many others
MOVES = ("reflect", "grammar", "demos", "merge", "sample")
# In the trial log, what a dimension shows where a move replaced the grid's value (for the fANOVA).
WRITTEN = "(instruction written by reflect)"
CHOSEN_DEMOS = "(demos chosen by reflect)"


class ReflectOptions(OptimizerOptions):
    pool: int = Field(8, ge=2, description="prompts kept in the evolving pool")
    screen_share: float = Field(0.3, gt=0, lt=1, description="share of the budget for the first screen")
    final_share: float = Field(0.4, gt=0, lt=1, description="share of the budget kept for the final race "
                               "(the pool on growing dev prefixes, then the finalists and the baseline); never more "
                               "than scoring the whole pool on the whole dev split costs")
    finalists: int = Field(2, ge=1, description="best prompts by race score scored on the dev split at the end")
    min_examples: int = Field(20, ge=4, description="smallest race block (at least 4 per class)")
    minibatch: int = Field(16, ge=4, description="train examples a reflection reads the parent's errors on")
    shown_errors: int = Field(3, ge=1, description="errors quoted to the critic per direction")
    patience: int = Field(4, ge=1, description="rejected children before the race block grows")
    write_instructions: bool = Field(True, description="reflect, merge and sample write instructions (off: the "
                                     "listed ones only)")
    sampled: float = Field(0.0, ge=0, le=1, description="share of the screen's draws whose instruction is a "
                           "proposal sampled at temperature 1.0; above 0 (with writing on) sampling is also a move")
    swap_demos: bool = Field(True, description="replace demos by train examples the parent answers right (where "
                             "the space searches few-shot k)")
    demo_sets: bool = Field(True, description="each screen draw that shows demos gets its own class-balanced set "
                            "of train examples (where the space searches few-shot k; off: the grid's one set per k)")
    demo_pool: Literal["like-dev", "train"] = Field(
        "like-dev", description="which train examples demos come from (screen sets, swaps, k moves): like-dev, those as "
        "long as the middle half of the dev inputs (labels unused); train, any")
    calibration: Literal["batch", "contextual", "off"] = Field(
        "batch", description="also race each prompt calibrated: batch (its mean label scores over the block's inputs "
        "subtracted, no call), contextual (divided by its bias on content-free inputs, 3 calls), or off")
    refit: bool = Field(True, description="with batch calibration, race each finalist once more with offsets "
                        "measured on the final dev prefix's inputs (no call: its own answers)")
    race_score: Literal["margin", "probability", "tiebreak", "objective", "staged"] = Field(
        "tiebreak", description="what the race ranks by on the block: the gold label's mean log-probability margin, "
        "its mean probability over the labels, the objective with ties broken by margin, the objective alone, or "
        "staged: the probability while the pool is screened and evolves, the objective with ties broken by margin "
        "in the final race")


@dataclass(frozen=True)
class Genome:
    """A pool member as its parts: the grid choices, and what moves wrote over them."""

    assignment: tuple[tuple[str, int], ...]
    instruction: str | None = None  # written over the grid's instruction
    demo_ids: tuple[str, ...] | None = None  # swapped over the grid's demos
    calibrate: bool = False
    label_bias: tuple[float, ...] = ()


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


class ReflectiveRace(Optimizer):
    name = "reflect"
    Options = ReflectOptions

    @classmethod
    def check(cls, context: SearchContext) -> None:
        options = validate_options(cls.name, cls.Options, context.options)
        if context.serve == "generate" and "calibration" in options.model_fields_set and options.calibration != "off":
            raise UserError(f"reflect: --option calibration={options.calibration} races calibrated prompts, whose "
                            "label offsets a model that generates its answer never applies (serve generate); drop "
                            "the option")
        block = cls.first_block(context, options)
        if context.budget and context.budget < 4 * block:
            raise UserError(f"reflect: the budget {context.budget} cannot race the baseline and three prompts "
                            f"on a block of {block} dev examples; raise --budget to at least {4 * block}")

    @staticmethod
    def first_block(context: SearchContext, options: ReflectOptions) -> int:
        return min(len(context.dev_ids), max(options.min_examples, 4 * context.n_classes))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        space = self.context.space
        self.instruction_dims = {d.name for d in space.dimensions
                                 if d.target == "instruction" or d.target.startswith("slot:")}
        self.demo_dims = {d.name for d in space.dimensions if d.kind == "few_shot"}
        self.demo_search = any(len(space.dimension(n).values) > 1 for n in self.demo_dims)
        self.swapping = self.options.swap_demos and self.demo_search
        self.demo_ids = self._demo_candidates()
        self.like_sets: dict[int, tuple[str, ...]] = {}  # like-dev: one set per k, as the grid has
        self.block = list(self.context.dev_ids[: self.first_block(self.context, self.options)])
        self.genomes: dict[str, Genome] = {}
        self.built: dict[Genome, Candidate] = {}
        self.candidates: dict[str, Candidate] = {}
        self.pool: list[str] = []
        self.echoes: set[str] = set()  # calibrated twins that answer exactly as their raw prompt: no slot
        self.calibrating = self.options.calibration != "off" and self.context.label_offsets
        self.final_ids: list[str] = []
        self.finalists: list[str] = []
        self.refits: set[str] = set()  # finalists' twins with offsets from the final prefix
        self.made = Counter[str]()
        self.entered = Counter[str]()
        self.critiques: list[str] = []
        self.written: set[str] = set()
        self.samples = 0  # instructions sampled so far: each sample's seed
        self.moves = MOVES if self.options.sampled > 0 else MOVES[:-1]
        self.steps = 0
        self.race_scores: dict[tuple[str, int, str], float] = {}  # (candidate, block length, kind): blocks only grow
        self.margin_memo: dict[str, dict[str, float]] = {}  # candidate -> example -> margin: parents are drawn each step
        self.lookahead: list[tuple[Candidate, Sequence[str]]] = []  # what the stage asks next whatever the answers
        self.final_stage = False
        self.plan = self._search()

    # -- the ask/tell surface ---------------------------------------------------------------
    def ask(self) -> TrialRequest | None:
        return next(self.plan, None)

    def tell(self, request: TrialRequest, records: list[Record]) -> dict[str, Any]:
        """A prompt built over a grid point (calibrated, with an instruction written or demos chosen over
        the grid's) is logged with that point's dimension values, each one a move replaced standing as
        that move's own value: the report's fANOVA then sees every raced prompt, not only the few
        untouched grid draws a default budget screens."""
        genome = self.genomes.get(request.candidate.id)
        if genome is None or request.candidate.assignment:
            return {}
        values = self.context.space.values_of(dict(genome.assignment))
        for name in values:
            if genome.instruction is not None and name in self.instruction_dims:
                values[name] = WRITTEN
            elif genome.demo_ids is not None and name in self.demo_dims and name != "few_shot.k":
                values[name] = CHOSEN_DEMOS  # which demos; a swap or a like-dev set keeps k
        return {"dimensions": values}

    def upcoming(self) -> list[TrialRequest]:
        """The rest of the screen's draws, or of a race step (the pool on a grown block, a final race round)."""
        return [TrialRequest(candidate, todo) for candidate, ids in self.lookahead
                if (todo := self.missing(candidate, ids))]

    def ranking(self) -> list[Candidate]:
        """Finalists by the objective on their dev examples, then the pool by race score on the block."""
        finals = [(self.candidates[i], self.score_on(self.candidates[i], self.final_ids)) for i in self.finalists
                  if self.final_ids and not self.missing(self.candidates[i], self.final_ids)]
        ranked = rank_by_score(finals, self.baseline)
        rest = [self.candidates[i] for i in self._by_score(self.pool) if self.candidates[i] not in ranked]
        return ranked + rest

    def family(self) -> int:
        return len(self.candidates)

    # -- the search, as a generator of trial requests -------------------------------------------
    def _search(self) -> Iterator[TrialRequest]:
        yield from self._screen()
        yield from self._evolve()
        yield from self._final()

    def _spent(self) -> int:
        left = self.remaining_budget()
        return self.context.budget - left if left is not None else 0

    def _final_reserve(self) -> int:
        """Calls kept for the final race: `final_share` of the budget, or what scoring the whole pool on the
        whole dev split costs where that is less. The final race can spend no more than that, so at a large
        budget, once the race block covers the dev split, the evolve stage goes on instead (the 40,000-call
        main job had left 16,000 calls of its reserve unspent)."""
        return min(int(self.options.final_share * self.context.budget),
                   self._final_cost(self.pool, self.context.dev_ids))

    def _final_cost(self, keys: Sequence[str], ids: Sequence[str]) -> int:
        """Model calls that score `keys` and the baseline (which the driver ranks beside them) on `ids`. A
        batch twin's answers are its raw prompt's, so one text pays once for each example that none of
        its scored variants (the raw prompt included) has answered."""
        unanswered: dict[str, set[str]] = {}  # by the raw prompt whose text the model answers
        for key in {*keys, self.baseline.id}:
            genome = self.genomes.get(key)
            raw = self._key(replace(genome, label_bias=())) if genome is not None and genome.label_bias else key
            for member in {key, raw}:
                todo = set(self.missing(self.candidates[member], ids)) if member in self.candidates else set(ids)
                unanswered[raw] = unanswered[raw] & todo if raw in unanswered else todo
        return sum(len(todo) for todo in unanswered.values())

    def _screen(self) -> Iterator[TrialRequest]:
        """Distinct draws on the first block; the best `2 × pool` go on to a block twice as long, and
        the pool is the best half of them there: a prompt is not dropped on one short block."""
        pool, sampled = self.options.pool, (self.options.sampled if self._writing() else 0.0)
        draws = self.context.space.distinct_candidates(self.rng, self._screen_width(sampled), first=[self.baseline])
        # Without sampled instructions a draw's genome takes no call, so all are built first (the random draws
        # in the same order) and the model answers the screen together; a proposal is asked where it was.
        genomes = [] if sampled else [self._screen_genome(n, c, sampled) for n, c in enumerate(draws)]
        for number, candidate in enumerate(draws):
            genome = genomes[number] if genomes else self._screen_genome(number, candidate, sampled)
            self.lookahead = [(self._build(g), self.block) for g in genomes[number + 1:]]
            yield from self._race(genome, "screen")
        self.lookahead = []
        alive = self._by_score([k for k in self.candidates if k not in self.echoes])
        if len(alive) > pool:
            alive = alive[: 2 * pool] + ([] if self.baseline.id in alive[: 2 * pool] else [self.baseline.id])
            self.block = list(self.context.dev_ids[: min(len(self.context.dev_ids), 2 * len(self.block))])
            yield from self._complete(alive, self.block, "screen, second block")
        self.pool = self._by_score(alive)[:pool]
        if self.baseline.id not in self.pool:  # the baseline stays a parent: edits start from it too
            self.pool[-1] = self.baseline.id

    def _screen_genome(self, number: int, candidate: Candidate, sampled: float) -> Genome:
        """The screen's `number`th draw as raced: a sampled instruction over it where its share says, its own demo
        set (`demo_sets`), or the like-dev demos of its k; the baseline as it is."""
        genome = Genome(candidate.assignment)
        if number and int(number * sampled) > int((number - 1) * sampled):
            text = self._sampled_instruction(candidate.spec)
            genome = genome if text is None else replace(genome, instruction=text)
        if number and self.demo_search and self.options.demo_sets and candidate.spec.demo_ids:
            genome = replace(genome, demo_ids=self._demo_set(len(candidate.spec.demo_ids)))
        return self._like_dev_demos(genome) if number else genome

    def _screen_width(self, sampled: float) -> int:
        """The most draws (at least 3) the screen's share pays for: each on the first block (plus the share
        `sampled` of a proposer call, and contextual calibration's 3 probes; a batch twin rides on its raw
        prompt's answers), then, where more than the pool are alive, the best `2 × pool` on a second block as
        long. Paying for a second block only where the draws outnumber the pool lets a small budget screen
        more (600 calls on a 4-class grid: 8 draws, where a fixed reserve left 3)."""
        share, pool, block = int(self.options.screen_share * self.context.budget), self.options.pool, len(self.block)
        per_draw = block + sampled + (3 if self.calibrating and self.options.calibration == "contextual" else 0)

        def cost(width: int) -> float:
            alive = width * (2 if self.calibrating else 1)
            return width * per_draw + (min(width, 2 * pool) * block if alive > pool else 0)
        width = 3
        while cost(width + 1) <= share:
            width += 1
        return width

    def _evolve(self) -> Iterator[TrialRequest]:
        rejected = idle = 0
        while idle < 20 * len(self.moves) and self._spent() + len(self.block) + self.options.minibatch + 2 < \
                self.context.budget - self._final_reserve():
            self.steps += 1
            move = self._move()
            parent = self._parent()
            child = None
            if move == "reflect":
                child = yield from self._reflect(parent)
            elif move == "grammar":
                child = self._grammar(parent)
            elif move == "demos":
                child = yield from self._swap_demo(parent)
            elif move == "sample":
                child = self._sample(parent)
            else:
                child = self._merge(parent)
            if child is None or self._key(child) in self.genomes:
                idle += 1  # nothing new from this move (a small space runs out of neighbours)
                continue
            idle = 0
            self.made[move] += 1
            ids = yield from self._race(child, move)
            worst, best_new = self._by_score(self.pool)[-1], self._by_score(ids)[0]
            if self._race_score(best_new) > self._race_score(worst):
                self.pool = [i for i in self.pool if i != worst] + [best_new]
                self.entered[move] += 1
                rejected = 0
            else:
                rejected += 1
            if rejected >= self.options.patience:
                yield from self._grow_block()
                rejected = 0

    def _move(self) -> str:
        """The next move, drawn in proportion to its children's success so far ((entered + 1) /
        (made + 2)): on a model whose reflections do not help, grammar moves and merges take over."""
        weights = np.array([(self.entered[m] + 1) / (self.made[m] + 2) for m in self.moves])
        return self.moves[int(self.rng.choice(len(self.moves), p=weights / weights.sum()))]

    def _final(self) -> Iterator[TrialRequest]:
        """A race over the pool: while more than `finalists` remain, the dev prefix doubles and the
        better half by race score goes on (a prompt that entered the pool on a lucky block leaves on more
        examples); then the finalists on the longest dev prefix the rest of the budget pays for, and
        as many more pool prompts there as the budget still pays for."""
        self.final_stage = True
        dev, alive = self.context.dev_ids, self._by_score(self.pool)
        while len(alive) > self.options.finalists and len(self.block) < len(dev):
            ids = dev[: min(len(dev), 2 * len(self.block))]
            left = self.remaining_budget()
            if left is not None and self._final_cost(alive, ids) > left:
                break
            self.block = list(ids)
            yield from self._complete(alive, self.block, "final race")
            alive = self._by_score(alive)[: max(self.options.finalists, (len(alive) + 1) // 2)]
        self.finalists = alive[: self.options.finalists]
        n, left = len(self.block), self.remaining_budget()
        while n < len(dev) and (left is None or self._final_cost(self.finalists, dev[: n + 1]) <= left):
            n += 1
        self.final_ids = list(dev[:n])
        for key in self._by_score(self.pool):  # what the budget still pays for: more finalists
            if key not in self.finalists and (left is None or
                                              self._final_cost([*self.finalists, key], self.final_ids) <= left):
                self.finalists.append(key)
        yield from self._complete(self.finalists, self.final_ids, "final")
        if self.options.refit and self.options.calibration == "batch" and self.context.label_offsets:
            yield from self._refit()

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

    # -- racing ------------------------------------------------------------------------------
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

    def _twin(self, genome: Genome, raw: Candidate) -> Genome | None:
        """The calibrated twin. Batch (Zhou et al. 2024): the raw prompt's mean normalised label
        log-probabilities over the block's inputs (labels unused) become fixed offsets that ship with
        it; no call. Contextual (Zhao et al. 2021): divided by its bias on content-free inputs."""
        if self.options.calibration == "contextual":
            return replace(genome, calibrate=True)
        offsets = label_bias(self.records(raw, self.block))
        return replace(genome, label_bias=tuple(round(x, 6) for x in offsets)) if offsets else None

    def _grow_block(self) -> Iterator[TrialRequest]:
        dev = self.context.dev_ids
        extra = max(len(self.block) // 2, 1)
        if len(self.block) >= len(dev) or self._spent() + extra * len(self.pool) > \
                self.context.budget - self._final_reserve():
            return
        self.block = list(dev[: len(self.block) + extra])
        yield from self._complete(self.pool, self.block, "race block grows")

    def _complete(self, keys: Sequence[str], ids: Sequence[str], purpose: str) -> Iterator[TrialRequest]:
        """Score each of `keys` on the examples of `ids` it has not been scored on (one race step: the
        model answers them together)."""
        for number, key in enumerate(keys):
            self.lookahead = [(self.candidates[k], ids) for k in keys[number + 1:]]
            if todo := self.missing(self.candidates[key], ids):
                yield TrialRequest(self.candidates[key], todo, purpose)
        self.lookahead = []

    def _answers_alike(self, twin: str, raw: str) -> bool:
        pairs = zip(self.records(self.candidates[twin], self.block), self.records(self.candidates[raw], self.block))
        return all(a.pred == b.pred and abs(margin(a) - margin(b)) < 1e-9 for a, b in pairs)

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

    # -- building candidates -------------------------------------------------------------------
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

    # -- moves ---------------------------------------------------------------------------------
    def _writing(self) -> bool:
        return self.options.write_instructions and self.proposer is not None

    def _sampled_instruction(self, spec: PromptSpec) -> str | None:
        """An instruction sampled at temperature 1.0 from four labelled train examples and a style tip.
        Why sample: on a small model text that means little to a person moves accuracy by tens of
        points, in the same order on dev as on test, so a wide spread of texts, cheap to race, is
        worth searching beside careful edits (docs/results/compare_sst2_native_dspy.md)."""
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
        """The train ids demos come from. like-dev: those whose input is as long as the middle half of the
        dev inputs (labels unused), so the demos look like what the prompt is asked about: sst2's train
        split holds the phrases of its parse trees (median 7 words), its dev and test whole sentences
        (median 19-20). Measured end to end, not per demo set (docs/results/reflect_like_dev_demos.md).
        All of train where too few of each class qualify to fill a set."""
        words = self.context.dev_input_words
        if self.options.demo_pool == "train" or not words:
            return list(self.context.train_ids)
        low, high = np.percentile(words, [25, 75])
        like = [e for e in self.context.space.demo_pool if low <= input_words(e) <= high]
        per_class = Counter(e.label for e in like)
        if len(per_class) < self.context.n_classes or min(per_class.values()) < 4:
            return list(self.context.train_ids)
        return [e.id for e in like]

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

    def _reflect(self, parent_key: str) -> Iterator[TrialRequest]:
        """(a) Critique the parent's false positives and false negatives of one class apart, on a
        train minibatch, with the margins; then write an edited instruction."""
        if not self._writing():
            return None
        parent, genome = self.candidates[parent_key], self.genomes[parent_key]
        demos = set(parent.spec.demo_ids)
        pool = [i for i in self.context.train_ids if i not in demos]
        batch = rotating_minibatch(pool, self.steps, self.options.minibatch)
        if todo := self.missing(parent, batch):
            yield TrialRequest(parent, todo, "reflection minibatch")
        records = self.records(parent, batch)
        directions = error_directions(records, self.context.n_classes, 1)
        if not directions:
            return None
        direction = directions[int(self.rng.integers(min(2, len(directions))))]
        spec, words = parent.spec, parent.spec.label_words
        shown = "\n".join(f"- {self.example_text(r.example_id)} (the model preferred "
                          f"'{words[r.pred] if r.pred is not None else 'no label'}' by {-margin(r):.1f} nats)"
                          for r in direction.errors[: self.options.shown_errors])
        instruction = shown_instruction(spec.instruction, words)
        feedback = self.proposer.critique(critique_request(direction, words, shown, instruction), instruction, words)
        self.critiques.append(f"{direction.kind.upper()} {words[direction.label]}: {feedback}")
        reply = self.proposer(edit_request(instruction, feedback, sorted(self.written)[-3:], words))
        self.written.add(clean_instruction(reply))
        text = self.usable_rewrite(reply, spec)
        return None if text is None else replace(genome, instruction=text)

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

    def _calibration_said(self) -> str:
        if not self.context.label_offsets:
            return f"off (serve {self.context.serve}: no label offsets)"
        return "off" if self.options.calibration == "off" else self.options.calibration + " raced"

    def report_lines(self) -> list[str]:
        made = ", ".join(f"{move} {self.made[move]} ({self.entered[move]} entered the pool)" for move in self.moves)
        leader = next(iter(self.ranking()), None)
        chosen = leader is not None and (leader.spec.calibrate or bool(leader.spec.label_bias))
        refit = leader is not None and leader.id in self.refits
        lines = [f"Reflective race: {len(self.candidates)} prompts scored ({self.steps} evolution steps; children by "
                 f"move: {made}); race block {len(self.block)} dev examples; finalists on "
                 f"{len(self.final_ids)} dev examples; calibration "
                 f"{self._calibration_said()}"
                 f"{', chosen by the leader' if chosen else ''}"
                 f"{f' (its offsets measured on those {len(self.final_ids)} inputs)' if refit else ''}."]
        if self.critiques:
            lines += ["Critiques (false positives and false negatives kept apart):",
                      *(f"- {c}" for c in self.critiques)]
        return lines
