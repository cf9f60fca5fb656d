"""Reflective race — prompttune's flagship: propose prompts over every part of the space, rank them by a race
on paired dev examples. Read top to bottom: the stages, then what each hands the next.

1. **Screen** (propose widely). The baseline and as many distinct draws of the space as `screen_share` pays
   for, each also as its calibrated twin (`calibration.py`), race (`race.py`) on one block of dev examples;
   where they outnumber the pool (`pool.py`), the best `2 × pool` go on to a block twice as long before the
   pool is cut, so no prompt leaves on one short block. Draws that show demos get their own class-balanced set
   of train examples that look like the dev inputs (`prompttune.search_spaces.demo_pool`).
2. **Evolve** (propose from what wins). A parent drawn from the pool's per-example Pareto front makes one
   child by a move (`moves.py`: reflection on its train errors, a grammar move, a demo swap, a merge, a
   sampled instruction), each move drawn by how often its children entered the pool; a child enters when its
   race score beats the pool's worst; after `patience` rejections the block grows.
3. **Final** (rank, `final.py`). The pool on doubling dev prefixes, the better half going on, then the
   finalists on the longest dev prefix the budget pays for (sized by the driver's services,
   `optimizers/services.py`), each beside a twin with offsets refit there; ranked by the objective, and the
   driver's verdict tests the leader.

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

from typing import Any, Iterator

from prompttune.backends.decode_cost import CHEAP, TEXTS
from prompttune.core.errors import UserError
from prompttune.core.types import Record
from prompttune.optimizers.reflect.calibration import calibration_said
from prompttune.optimizers.reflect.final import FinalRace
from prompttune.optimizers.reflect.genome import Genome
from prompttune.optimizers.reflect.moves import Moves
from prompttune.optimizers.reflect.options import ReflectOptions
from prompttune.optimizers.reflect.pool import Pool
from prompttune.optimizers.reflect.race import Race
from prompttune.optimizers.services import free_calls, most_affordable
from prompttune.optimizers.strategy_contract import Optimizer, SearchContext, TrialRequest, validate_options
from prompttune.search_spaces.space import Candidate

# In the trial log, what a dimension shows where a move replaced the grid's value (for the fANOVA).
WRITTEN = "(instruction written by reflect)"
CHOSEN_DEMOS = "(demos chosen by reflect)"
SEVERAL_PARENTS = 4  # `parents` where texts are decoded together: its planned comparison (docs/results/tuning_log.md)


class ReflectiveRace(Optimizer):
    """Screen, evolve, final race (the module docstring) over its parts: the `pool` of genomes and candidates,
    the `race` on the dev block, the `moves` that make children, the `final` race; ranks finalists by the
    objective, then the pool by race score."""

    name = "reflect"
    Options = ReflectOptions
    options: ReflectOptions

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
        context, options = self.context, self.options
        self.pool = Pool(context.space, self.memo, offsets_decoded=context.serve == "choice")
        self.race = Race(self.pool, context.dev_ids, self.first_block(context, options), options.race_score,
                         context.score, self.baseline, options.calibration if context.label_offsets else "off")
        self.decode_ratio: float | None = None  # the writer's measured batch cost, where the default needed it
        self.parents, together = self._decoding()
        self.moves = Moves(context, options.model_copy(update={"decode_together": together}), self.pool, self.rng,
                           self.proposer)
        self.final = FinalRace(self.pool, self.race, options, self.baseline)
        self.steps = 0
        self.plan = self._search()

    def ask(self) -> TrialRequest | None:
        return next(self.plan, None)

    def observe(self, request: TrialRequest, records: list[Record]) -> None:
        super().observe(request, records)
        self.race.forget(request.candidate.id, [r.example_id for r in records])

    def tell(self, request: TrialRequest, records: list[Record]) -> dict[str, Any]:
        """A prompt built over a grid point (calibrated, with an instruction written or demos chosen over
        the grid's) is logged with that point's dimension values, each one a move replaced standing as
        that move's own value: the report's fANOVA then sees every raced prompt, not only the few
        untouched grid draws a default budget screens."""
        genome = self.pool.genomes.get(request.candidate.id)
        if genome is None or request.candidate.assignment:
            return {}
        values = self.context.space.values_of(dict(genome.assignment))
        for name in values:
            if genome.instruction is not None and name in self.moves.instruction_dims:
                values[name] = WRITTEN
            elif genome.demo_ids is not None and name in self.moves.demo_dims and name != "few_shot.k":
                values[name] = CHOSEN_DEMOS  # which demos; a swap or a like-dev set keeps k
        return {"dimensions": values}

    def upcoming(self) -> list[TrialRequest]:
        """The rest of the screen's draws, or of a race step (the pool on a grown block, a final race round)."""
        return self.pool.upcoming()

    def ranking(self) -> list[Candidate]:
        """Finalists by the objective on their dev examples, then the pool by race score on the block."""
        ranked = self.final.ranked()
        candidates = self.pool.candidates
        return ranked + [candidates[k] for k in self.race.by_score(self.pool.members) if candidates[k] not in ranked]

    def family(self) -> int:
        return self.pool.scored()

    def _search(self) -> Iterator[TrialRequest]:
        yield from self._screen()
        yield from self._evolve()
        yield from self.final.run(self.context)

    def _decoding(self) -> tuple[int, bool]:
        """(`parents`, whether a step's texts decode in one batch) as set, or by what texts cost the backend that
        writes them: several parents save time only where their texts decode together, on a backend that sends a
        call's texts at once (vLLM, servers) or a model in process whose four texts in one batch were measured
        under two texts' time (a GPU: `backends/decode_cost.py`); one after another (a CPU), four parents make
        the same budget slower (docs/results/engine_overhead.md)."""
        options = self.options
        if options.parents is not None or self.proposer is None:
            return options.parents or SEVERAL_PARENTS, options.decode_together
        backend = self.proposer.backend
        if options.decode_together or backend.decodes_together:
            return SEVERAL_PARENTS, options.decode_together
        self.decode_ratio = backend.batch_decode_ratio
        return (SEVERAL_PARENTS, True) if self.decode_ratio is not None and self.decode_ratio < CHEAP else (1, False)

    def _screen(self) -> Iterator[TrialRequest]:
        """Distinct draws on the first block; the best `2 × pool` go on to a block twice as long, and
        the pool is the best half of them there: a prompt is not dropped on one short block."""
        pool, race, moves, size = self.pool, self.race, self.moves, self.options.pool
        sampled = self.options.sampled if moves.writing else 0.0
        draws = self.context.space.distinct_candidates(self.rng, self._screen_width(sampled), first=[self.baseline])
        # Without sampled instructions a draw's genome takes no call, so all are built first (the random draws
        # in the same order) and the model answers the screen together; a proposal is asked where it was.
        if sampled:
            entered = []
            for number, candidate in enumerate(draws):
                entered += yield from race.enter([moves.screen_genome(number, candidate, sampled)], "screen")
        else:
            entered = yield from race.enter([moves.screen_genome(n, c, sampled) for n, c in enumerate(draws)], "screen")
        alive = race.by_score(list(dict.fromkeys(key for slots in entered for key in slots)))
        if len(alive) > size:
            alive = alive[: 2 * size] + ([] if self.baseline.id in alive[: 2 * size] else [self.baseline.id])
            yield from race.widen(2 * len(race.block), alive, "screen, second block")
        pool.members = race.by_score(alive)[:size]
        if self.baseline.id not in pool.members:  # the baseline stays a parent: edits start from it too
            pool.members[-1] = self.baseline.id

    def _screen_width(self, sampled: float) -> int:
        """The most draws (at least 3) the screen's share pays for: each entered on the first block (`entry_cost`,
        plus the share `sampled` of a proposer call), then, where more than the pool are alive, the best
        `2 × pool` on a second block as long. Paying for a second block only where the draws outnumber the pool
        lets a small budget screen more draws than a fixed reserve for it would. A twin's own calls under
        `choice` are not counted: the screen draws as widely as under `logprobs` and the evolve stage pays for
        its twins (counting them halved the draws, and on the synthetic oracle's rare-better problem reflect's
        power fell from 66.0% to 46.5%: docs/results/error_rates_reflect.md)."""
        share, pool, block = int(self.options.screen_share * self.context.budget), self.options.pool, len(self.race.block)
        twins = self.race.calibration != "off"
        per_draw = self.race.entry_cost(twin=False) + sampled

        def cost(width: int) -> float:
            alive = width * (2 if twins else 1)
            return width * per_draw + (min(width, 2 * pool) * block if alive > pool else 0)
        return most_affordable(3, cost, share)

    def _evolve(self) -> Iterator[TrialRequest]:
        pool, race, moves = self.pool, self.race, self.moves
        rejected = idle = 0
        step_cost = race.entry_cost() + self.options.minibatch + 2
        while idle < 20 * len(moves.names) and step_cost < self._free_calls():
            self.steps += 1
            move = moves.draw()
            if move == "reflect":
                affordable = self._free_calls() // step_cost
                children = yield from self._reflect([race.parent(self.rng) for _ in range(min(self.parents,
                                                                                             affordable))])
            else:
                children = [(yield from self._child(move, race.parent(self.rng)))]
            new: list[Genome] = []
            for child in children:
                if child is None or pool.key(child) in pool.genomes or pool.key(child) in map(pool.key, new):
                    idle += 1  # nothing new from this move (a small space runs out of neighbours)
                else:
                    idle, moves.made[move] = 0, moves.made[move] + 1
                    new.append(child)
            grow = False
            for ids in (yield from race.enter(new, move)):
                worst, best_new = race.by_score(pool.members)[-1], race.by_score(ids)[0]
                if race.score(best_new) > race.score(worst):
                    pool.members = [i for i in pool.members if i != worst] + [best_new]
                    moves.entered[move] += 1
                    rejected = 0
                else:
                    rejected += 1
                if rejected >= self.options.patience:  # the block grows after the step: its children race alike
                    grow, rejected = True, 0
            if grow:
                yield from race.grow(self._free_calls())
            step_cost = race.entry_cost() + self.options.minibatch + 2

    def _free_calls(self) -> int:
        """Calls the evolve stage may still spend before the final race's reserve."""
        return free_calls(self.context, self.final.reserve(self.context))

    def _child(self, move: str, parent: str) -> Iterator[TrialRequest]:
        """One child of `parent` by a move other than reflection (None: nothing new)."""
        if move == "grammar":
            return self.moves.grammar(parent)
        if move == "demos":
            return (yield from self._swap_demo(parent))
        if move == "sample":
            return self.moves.sample(parent)
        return self.moves.merge(parent, self._donor(parent))

    def _reflect(self, parent_keys: list[str]) -> Iterator[TrialRequest]:
        """Each parent scored on its reflection minibatch, the model answering them together; then its child."""
        if not self.moves.writing:
            return [None] * len(parent_keys)
        batches = [self.moves.reflection_batch(key, self.steps * self.parents + number)
                   for number, key in enumerate(parent_keys)]
        yield from self.pool.ask_each([(self.pool.candidates[k], b) for k, b in zip(parent_keys, batches)],
                                      "reflection minibatch")
        return self.moves.reflect(parent_keys, batches)

    def _swap_demo(self, parent: str) -> Iterator[TrialRequest]:
        """The parent scored on the examples a demo swap draws from; then its child."""
        batch = self.moves.swap_batch(parent, self.steps)
        if batch is None:
            return None
        yield from self.pool.ask(self.pool.candidates[parent], batch, "demo bootstrap")
        return self.moves.swap_demo(parent, batch)

    def _donor(self, parent: str) -> str | None:
        """The pool member a merge takes its instruction from: another drawn from the Pareto front."""
        others = [k for k in self.pool.members if k != parent]
        if not others:
            return None
        return self.race.parent(self.rng) if len(others) > 1 else others[0]

    def report_lines(self) -> list[str]:
        moves, final = self.moves, self.final
        made = ", ".join(f"{move} {moves.made[move]} ({moves.entered[move]} entered the pool)" for move in moves.names)
        leader = next(iter(self.ranking()), None)
        chosen = leader is not None and (leader.spec.calibrate or bool(leader.spec.label_bias))
        refit = leader is not None and leader.id in final.refits
        said = calibration_said(self.options.calibration, self.context.serve, self.context.label_offsets)
        measured = (f" (the writer decodes {TEXTS} texts in {self.decode_ratio:.2f}× one text's time)"
                    if self.decode_ratio is not None else "")
        lines = [f"Reflective race: {self.pool.scored()} prompts scored ({self.steps} evolution steps, "
                 f"{self.parents} parent{'s' if self.parents > 1 else ''} per reflection step{measured}; children by "
                 f"move: {made}); race block {len(self.race.block)} dev examples; finalists on "
                 f"{len(final.final_ids)} dev examples; calibration {said}"
                 f"{', chosen by the leader' if chosen else ''}"
                 f"{f' (its offsets measured on those {len(final.final_ids)} inputs)' if refit else ''}."]
        if moves.critiques:
            lines += ["Critiques (false positives and false negatives kept apart):",
                      *(f"- {c}" for c in moves.critiques)]
        return lines
