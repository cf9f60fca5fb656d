"""Reflective race — prompttune's flagship: propose prompts over every part of the space, rank them by a race
on paired dev examples. Read top to bottom: the stages, then what each hands the next.

1. **Screen** (propose widely). The baseline and as many distinct draws of the space as `screen_share` pays
   for, each also as its calibrated twin (`calibration.py`), race on one block of dev examples; where they
   outnumber the pool, the best `2 × pool` go on to a block twice as long before the pool is cut, so no prompt
   leaves on one short block. Draws that show demos get their own class-balanced set of train examples that
   look like the dev inputs (`prompttune.search_spaces.demo_pool`).
2. **Evolve** (propose from what wins). A parent drawn from the pool's per-example Pareto front makes one
   child by a move (`moves.py`: reflection on its train errors, a grammar move, a demo swap, a merge, a
   sampled instruction), each move drawn by how often its children entered the pool; a child enters when its
   race score (`race.py`) beats the pool's worst; after `patience` rejections the block grows.
3. **Final** (rank). The pool on doubling dev prefixes, the better half going on, then the finalists on the
   longest dev prefix the budget pays for (sized by the driver's services, `optimizers/services.py`), each
   beside a twin with offsets refit there; ranked by the objective, and the driver's verdict tests the leader.

Why these choices, and the accuracies that decided each default: docs/optimizers.md (reflect).

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
from dataclasses import replace
from typing import Any, Iterator, Sequence

from prompttune.core.errors import UserError
from prompttune.core.types import Record
from prompttune.optimizers.contract import SearchContext, TrialRequest, validate_options
from prompttune.optimizers.reflect.calibration import Calibration
from prompttune.optimizers.reflect.genome import Genome
from prompttune.optimizers.reflect.moves import MOVES, Moves
from prompttune.optimizers.reflect.options import ReflectOptions
from prompttune.optimizers.reflect.race import Racing
from prompttune.optimizers.search_helpers import rank_by_score
from prompttune.optimizers.services import free_calls, most_affordable
from prompttune.search_spaces.space import Candidate

# In the trial log, what a dimension shows where a move replaced the grid's value (for the fANOVA).
WRITTEN = "(instruction written by reflect)"
CHOSEN_DEMOS = "(demos chosen by reflect)"
SEVERAL_PARENTS = 4  # `parents` where texts are decoded together: its planned comparison (docs/results/tuning_log.md)


class ReflectiveRace(Racing, Calibration, Moves):
    """Screen, evolve, final race (the module docstring); ranks finalists by the objective, then the pool."""

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
            raise UserError(f"reflect: the budget {context.budget} cannot race the baseline and three prompts on a "
                            f"block of {block} dev examples; raise --budget to at least {context.budget_for(4 * block)}")

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
        self.parents = self._parents()
        self.steps = 0
        self.race_scores: dict[tuple[str, int, str], float] = {}  # (candidate, block length, kind): blocks only grow
        self.margin_memo: dict[str, dict[str, float]] = {}  # candidate -> example -> margin: parents are drawn each step
        self.lookahead: list[tuple[Candidate, Sequence[str]]] = []  # what the stage asks next whatever the answers
        self.final_stage = False
        self.plan = self._search()

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

    def _search(self) -> Iterator[TrialRequest]:
        yield from self._screen()
        yield from self._evolve()
        yield from self._final()

    def _parents(self) -> int:
        """`parents` as set, or by what the texts cost: several parents save time only where their critiques are
        decoded together (the backend that writes them does, or `decode_together`); one after another, four
        parents make the same budget slower (measured on CPU: docs/results/engine_overhead.md)."""
        if self.options.parents is not None:
            return self.options.parents
        together = self.options.decode_together or self.proposer is None or self.proposer.backend.decodes_together
        return SEVERAL_PARENTS if together else 1

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
        more draws than a fixed reserve for it would."""
        share, pool, block = int(self.options.screen_share * self.context.budget), self.options.pool, len(self.block)
        per_draw = block + sampled + (3 if self.calibrating and self.options.calibration == "contextual" else 0)

        def cost(width: int) -> float:
            alive = width * (2 if self.calibrating else 1)
            return width * per_draw + (min(width, 2 * pool) * block if alive > pool else 0)
        return most_affordable(3, cost, share)

    def _evolve(self) -> Iterator[TrialRequest]:
        rejected = idle = 0
        step_cost = len(self.block) + self.options.minibatch + 2
        while idle < 20 * len(self.moves) and step_cost < free_calls(self.context, self._final_reserve()):
            self.steps += 1
            move = self._move()
            if move == "reflect":
                affordable = free_calls(self.context, self._final_reserve()) // step_cost
                children = yield from self._reflect([self._parent() for _ in range(min(self.parents,
                                                                                        affordable))])
            else:
                children = [(yield from self._child(move, self._parent()))]
            for number, child in enumerate(children):
                if child is None or self._key(child) in self.genomes:
                    idle += 1  # nothing new from this move (a small space runs out of neighbours)
                    continue
                idle = 0
                self.made[move] += 1
                self.lookahead = [(self._build(replace(c, label_bias=())), self.block) for c in children[number + 1:]
                                  if c is not None and self._key(c) not in self.genomes]
                ids = yield from self._race(child, move)
                self.lookahead = []
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
            step_cost = len(self.block) + self.options.minibatch + 2

    def _child(self, move: str, parent: str) -> Iterator[TrialRequest]:
        """One child of `parent` by a move other than reflection (None: nothing new)."""
        if move == "grammar":
            return self._grammar(parent)
        if move == "demos":
            return (yield from self._swap_demo(parent))
        if move == "sample":
            return self._sample(parent)
        return self._merge(parent)

    def report_lines(self) -> list[str]:
        made = ", ".join(f"{move} {self.made[move]} ({self.entered[move]} entered the pool)" for move in self.moves)
        leader = next(iter(self.ranking()), None)
        chosen = leader is not None and (leader.spec.calibrate or bool(leader.spec.label_bias))
        refit = leader is not None and leader.id in self.refits
        lines = [f"Reflective race: {len(self.candidates)} prompts scored ({self.steps} evolution steps, "
                 f"{self.parents} parent{'s' if self.parents > 1 else ''} per reflection step; children by "
                 f"move: {made}); race block {len(self.block)} dev examples; finalists on "
                 f"{len(self.final_ids)} dev examples; calibration "
                 f"{self._calibration_said()}"
                 f"{', chosen by the leader' if chosen else ''}"
                 f"{f' (its offsets measured on those {len(self.final_ids)} inputs)' if refit else ''}."]
        if self.critiques:
            lines += ["Critiques (false positives and false negatives kept apart):",
                      *(f"- {c}" for c in self.critiques)]
        return lines
