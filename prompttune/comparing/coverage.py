"""Which dimensions of the compared space each arm searches, and which it holds at the baseline.

Two modes, one space (the `--space` file, else the task's default space) given to every arm:

- `same-space`, an optimizer comparison: the space is the problem. Each arm searches the declared
  dimensions it can — grid searchers pick among their listed values, instruction writers
  (proposals, word edits) write the instruction where the space declares one, demo optimizers
  choose demos where it declares few-shot — and holds every other dimension at the baseline value.
  Nothing the space does not declare is added: a demo optimizer on a space without few-shot stays
  zero-shot. An arm that would search nothing of the space is refused.
- `native`, a tool comparison: the same space, but each tool also adds what it brings itself
  (demos, its own instructions) where the space declares none.

`Coverage.keeps_held` checks an arm's picks against this plan after the fact.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Mapping

from prompttune.comparing.fairness import Check
from prompttune.core.errors import UserError
from prompttune.search_spaces import Dimension, PromptSpec, SearchSpace

if TYPE_CHECKING:
    from prompttune.comparing.arms import ArmRun

MODES = {"same-space": "optimizer comparison on one space", "native": "tool comparison, native spaces"}

INSTRUCTION, DEMOS = "instruction", "demos"
ASPECT_FIELDS = {INSTRUCTION: frozenset({"instruction"}), DEMOS: frozenset({"demo_ids"})}
WRITES = {INSTRUCTION: "writes its own instruction", DEMOS: "chooses its own demos"}
SPEC_FIELDS = frozenset(f.name for f in fields(PromptSpec))


@dataclass(frozen=True)
class Reach:
    """What an arm can change in a prompt.

    `lists`: it picks among the listed values of every declared dimension. `writes`: aspects it
    fills in itself (INSTRUCTION, DEMOS), declared by the space or not. `holds`: per written aspect,
    the options that keep it at the baseline, for a same-space run on a space that does not declare it.
    """

    lists: bool = False
    writes: tuple[str, ...] = ()
    holds: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


REACH: dict[str, Reach] = {
    "random": Reach(lists=True),
    "sh": Reach(lists=True),
    "spread": Reach(lists=True),
    "mipro": Reach(lists=True, writes=(INSTRUCTION, DEMOS),
                   holds={INSTRUCTION: {"instructions": 1}, DEMOS: {"demo_sets": 1}}),
    "bfrs": Reach(writes=(DEMOS,)),
    "cople": Reach(writes=(INSTRUCTION,)),
    "p2g": Reach(writes=(INSTRUCTION,)),
    "dspy-mipro": Reach(writes=(INSTRUCTION, DEMOS), holds={DEMOS: {"max_demos": 0}}),
    "dspy-bfrs": Reach(writes=(DEMOS,)),
    "dspy-gepa": Reach(writes=(INSTRUCTION,)),
    "dspy-copro": Reach(writes=(INSTRUCTION,)),
    "dspy-simba": Reach(writes=(INSTRUCTION, DEMOS), holds={DEMOS: {"max_demos": 0}}),
}


def aspect_of(dim: Dimension) -> str | None:
    """INSTRUCTION for the instruction list and its word slots, DEMOS for few-shot, else None."""
    if dim.target == "instruction" or dim.target.startswith("slot:"):
        return INSTRUCTION
    return DEMOS if dim.kind == "few_shot" else None


@dataclass(frozen=True)
class Coverage:
    """One arm on the compared space: what it searched, what it held, and how that was enforced."""

    arm: str
    space: str
    space_hash: str
    searched: tuple[str, ...]
    held: tuple[str, ...]
    held_fields: frozenset[str]  # PromptSpec fields every pick must share with the baseline
    options: dict[str, Any]  # the options that hold written aspects the space does not declare

    def keeps_held(self, pick: PromptSpec, baseline: PromptSpec) -> bool:
        return all(getattr(pick, name) == getattr(baseline, name) for name in self.held_fields)

    def to_dict(self) -> dict[str, Any]:
        return {"space": self.space, "space_hash": self.space_hash, "searched": list(self.searched),
                "held": list(self.held), "held_fields": sorted(self.held_fields), "options": self.options}


def plan_coverage(arms: list[str], space: SearchSpace, mode: str,
                  options: Mapping[str, Mapping[str, Any]]) -> dict[str, Coverage]:
    """Each arm's coverage of `space` in `mode`; a same-space arm that would search nothing, or
    could not be held to the space, is one UserError before any model is loaded."""
    if mode not in MODES:
        raise UserError(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
    declared = {aspect_of(d) for d in space.dimensions} - {None}
    return {arm: _coverage(arm, REACH[arm], space, declared, mode, options.get(arm, {})) for arm in arms}


def _coverage(arm: str, reach: Reach, space: SearchSpace, declared: set[str | None], mode: str,
              given: Mapping[str, Any]) -> Coverage:
    used = [a for a in reach.writes if mode == "native" or a in declared]
    held_aspects = [a for a in reach.writes if a not in used]
    searched, held = [], []
    for dim in space.dimensions:
        aspect = aspect_of(dim)
        if aspect in used:
            searched.append(f"{dim.name} ({WRITES[aspect]})")
        elif reach.lists:
            searched.append(dim.name)
        else:
            held.append(dim.name)
    searched += [f"{WRITES[a]} (the space declares no {a})" for a in used if a not in declared]
    held += [f"{a} (the space declares none)" for a in held_aspects]
    if not searched:
        raise UserError(f"{arm} only {' and '.join(WRITES[a] for a in reach.writes) or 'picks listed values'}, "
                        f"and space {space.name!r} declares no dimension for that: in same-space mode it would "
                        f"search nothing (give a --space that declares one, or use --mode native)")
    hold_options: dict[str, Any] = {}
    for aspect in held_aspects:
        if aspect not in reach.holds:
            raise UserError(f"{arm} always {WRITES[aspect]}, and space {space.name!r} declares no {aspect}: "
                            f"same-space mode cannot hold it at the baseline (use --mode native, or a --space "
                            f"that declares {aspect})")
        for key, value in reach.holds[aspect].items():
            if key in given and given[key] != value:
                raise UserError(f"--option {arm}.{key}={given[key]!r} would let {arm} add {aspect}, which space "
                                f"{space.name!r} does not declare (same-space mode holds it at the baseline: drop "
                                f"the option or use --mode native)")
            hold_options[key] = value
    free = SPEC_FIELDS if reach.lists else frozenset().union(*(ASPECT_FIELDS[a] for a in used))
    free -= frozenset().union(*(ASPECT_FIELDS[a] for a in held_aspects))
    return Coverage(arm, space.name, space.fingerprint(), tuple(searched), tuple(held), SPEC_FIELDS - free,
                    hold_options)


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
