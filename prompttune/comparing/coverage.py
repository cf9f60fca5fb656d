"""Which dimensions of the compared space each arm searches, and which it holds at the baseline.

Two modes, one space (the `--space` file, else the task's default space) given to every arm:

- `same-space`, an optimizer comparison: the space is the problem, and every arm searches exactly
  the same dimensions: those every arm in the mix can search (grid searchers pick among listed
  values, instruction writers — proposals, word edits — write the instruction where the space
  declares one, demo optimizers choose demos where it declares few-shot). Every other dimension
  stays at the baseline for every arm (the arm's config names the shared dimensions and its space
  holds the rest at one value): with an instruction writer in the mix, random and sh search the
  instruction only. Nothing the space does not declare is added: a demo optimizer on a space
  without few-shot stays zero-shot. An arm that would search nothing, or a mix that shares no
  dimension, is refused in one line.
- `native`, a tool comparison: the same space, but each tool also adds what it brings itself
  (demos, its own instructions) where the space declares none.

`Coverage.keeps_held` checks an arm's picks against this plan after the fact.
"""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from prompttune.comparing.variants import arm_options, optimizer_of
from prompttune.core.errors import UserError
from prompttune.optimizers.registry import CALIBRATION, DEMOS, INSTRUCTION, Reach, lookup
from prompttune.results.compare import Check, Coverage
from prompttune.search_spaces import Dimension, PromptSpec, SearchSpace

if TYPE_CHECKING:
    from prompttune.results.arms import ArmRun

MODES = {"same-space": "optimizer comparison on one space", "native": "tool comparison, native spaces"}

ASPECT_FIELDS = {INSTRUCTION: frozenset({"instruction"}), DEMOS: frozenset({"demo_ids"}),
                 CALIBRATION: frozenset({"calibrate", "label_bias"})}
WRITES = {INSTRUCTION: "writes its own instruction", DEMOS: "chooses its own demos",
          CALIBRATION: "calibrates its label scores"}
SPEC_FIELDS = frozenset(f.name for f in fields(PromptSpec))


def aspect_of(dim: Dimension) -> str | None:
    """INSTRUCTION for the instruction list and its word slots, DEMOS for few-shot, else None."""
    if dim.target == "instruction" or dim.target.startswith("slot:"):
        return INSTRUCTION
    return DEMOS if dim.kind == "few_shot" else None


def plan_coverage(arms: list[str], space: SearchSpace, mode: str,
                  options: Mapping[str, Mapping[str, Any]]) -> dict[str, Coverage]:
    """Each arm's coverage of `space` in `mode`; a same-space arm that would search nothing, could
    not be held to the space, or shares no dimension with the others, is one UserError before any
    model is loaded."""
    if mode not in MODES:
        raise UserError(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "native":
        return {arm: _coverage(arm, space, mode, options, None) for arm in arms}
    alone = {arm: _coverage(arm, space, mode, options, None) for arm in arms}
    reach = {arm: {d.name for d in _searchable(lookup(optimizer_of(arm, options)).reach, space)} for arm in arms}
    shared = [d.name for d in space.dimensions if all(d.name in names for names in reach.values())]
    if not shared:
        each = "; ".join(f"{arm}: {', '.join(c.searched)}" for arm, c in alone.items())
        raise UserError(f"same-space mode: no dimension of space {space.name!r} can be searched by every arm ({each}); "
                        f"compare arms that share one, or use --mode native")
    return {arm: _coverage(arm, space, mode, options, shared) for arm in arms}


def _searchable(reach: Reach, space: SearchSpace) -> list[Dimension]:
    return [d for d in space.dimensions if reach.lists or aspect_of(d) in reach.writes]


def touched_fields(space: SearchSpace, names: Sequence[str]) -> frozenset[str]:
    """PromptSpec fields that some single change of a dimension in `names` changes (from the baseline);
    few-shot dimensions set the demos (built, they would need the train split bound)."""
    base = space.default_candidate().spec
    touched: set[str] = set()
    for name in names:
        if aspect_of(space.dimension(name)) == DEMOS:
            touched |= ASPECT_FIELDS[DEMOS]
            continue
        for index in range(len(space.dimension(name).values)):
            assignment = {**space.default, name: index}
            if space.is_valid(assignment):
                spec = space.build(assignment).spec
                touched |= {f for f in SPEC_FIELDS if getattr(spec, f) != getattr(base, f)}
    return frozenset(touched)


def _coverage(arm: str, space: SearchSpace, mode: str, options: Mapping[str, Mapping[str, Any]],
              shared: list[str] | None) -> Coverage:
    reach, given = lookup(optimizer_of(arm, options)).reach, arm_options(arm, options)
    dims = [d for d in _searchable(reach, space) if shared is None or d.name in shared]
    declared = {aspect_of(d) for d in dims} - {None}
    # An aspect the space does not declare and the arm's own options hold at the baseline (a variant such as
    # reflect with calibration=off): held, as same-space mode would hold it.
    by_options = [a for a in reach.holds if a not in declared
                  and all(given.get(key) == value for key, value in reach.holds[a].items())]
    used = [a for a in reach.writes if (mode == "native" or a in declared) and a not in by_options]
    held_aspects = [a for a in reach.writes if a not in used]
    searched = [f"{d.name} ({WRITES[aspect_of(d)]})" if aspect_of(d) in used else d.name for d in dims]
    held = [d.name for d in space.dimensions if d not in dims]
    searched += [f"{WRITES[a]} (the space declares no {a})" for a in used if a not in declared]
    held += [f"{a} ({'its options hold it' if a in by_options else 'the space declares none'})" for a in held_aspects
             if a not in {aspect_of(d) for d in space.dimensions}]
    if not searched:
        raise UserError(f"{arm} only {' and '.join(WRITES[a] for a in reach.writes) or 'picks listed values'}, "
                        f"and space {space.name!r} declares no dimension for that: in same-space mode it would "
                        f"search nothing (give a --space that declares one, or use --mode native)")
    hold_options: dict[str, Any] = {}
    for aspect in held_aspects:
        if aspect not in reach.holds:
            raise UserError(f"{arm} always {WRITES[aspect]}, and space {space.name!r} declares no {aspect}"
                            f"{' every arm can search' if aspect in {aspect_of(d) for d in space.dimensions} else ''}: "
                            f"same-space mode cannot hold it at the baseline (use --mode native, or a --space "
                            f"that declares {aspect})")
        for key, value in reach.holds[aspect].items():
            if key in given and given[key] != value:
                raise UserError(f"--option {arm}.{key}={given[key]!r} would let {arm} add {aspect}, which space "
                                f"{space.name!r} does not declare (same-space mode holds it at the baseline: drop "
                                f"the option or use --mode native)")
            hold_options[key] = value
    free = touched_fields(space, [d.name for d in dims]) if reach.lists else frozenset()
    free |= frozenset().union(*(ASPECT_FIELDS[a] for a in used))
    free -= frozenset().union(*(ASPECT_FIELDS[a] for a in held_aspects))
    given_space = space.searching_only(shared) if shared is not None else space
    return Coverage(arm, space.name, given_space.fingerprint(), tuple(searched), tuple(held), SPEC_FIELDS - free,
                    hold_options, shared, reach.sources(used))


def coverage_check(runs: list["ArmRun"], coverage: Mapping[int, Mapping[str, Coverage]]) -> Check:
    """Every run searched its seed's planned space (by the hash of the space it was given: each seed
    binds the space to its own train split) and both its raw pick and what it ships share every held
    field with the baseline."""
    off = [f"{r.arm} s{r.seed}" for r in runs
           if r.space_hash != coverage[r.seed][r.arm].space_hash
           or not all(coverage[r.seed][r.arm].keeps_held(spec, r.baseline) for spec in (r.raw, r.best))]
    first = next(iter(next(iter(coverage.values())).values()))
    return Check(f"every arm searched space {first.space!r} and left what it held at the baseline", not off,
                 ", ".join(off) or f"the space hash of its seed for all {len(runs)} runs; held fields equal to "
                 "the baseline's in every raw pick and every shipped prompt")
