"""Search-space operations: ids, counting, uniform sampling, neighbours, diff, few-shot demos."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from scipy.stats import chisquare

from prompttune.core.types import Example
from prompttune.search_spaces import Dimension, PromptSpec, Rule, SearchSpace, build_space, render
from prompttune.search_spaces.demos import choose_demos
from prompttune.search_spaces.prompt import select_demos
from prompttune.tasks.task import Task


def fake_task(name: str = "colours", labels: tuple[str, ...] = ("red", "green", "blue"),
              fields: tuple[str, ...] = ("text",), per_class: int = 12) -> Task:
    """Small disjoint splits with readable texts; no data files needed."""
    splits = {split: [Example(f"{split}-{c}-{i}", {f: f"{f} {split} {c}.{i}" for f in fields}, c)
                      for i in range(per_class) for c in range(len(labels))]
              for split in ("train", "dev", "test")}
    return Task(name, list(labels), [[w, w.upper()] for w in labels], list(fields), splits)


SMALL = {
    "name": "small",
    "instructions": ["Name the colour using {only} one word.", ""],
    "slots": {"only": ["just", "solely"]},
    "label_words": "task",
    "choices": {"joiner": {"target": "intra_separator", "values": ["\n", " "]}},
    "few_shot": {"k": [0, 1, 3], "selection": ["balanced", "random"], "order": [0, 1]},
    "toggles": {"cot": True, "chat": True},
    "constraints": [{"when": {"cot": True}, "then": {"chat": True}}],
}


def small_space() -> SearchSpace:
    task = fake_task()
    return build_space(SMALL, task).bind(task.splits["train"])


def canon(assignments) -> list[tuple]:
    """Assignments as a sorted list of sorted item tuples, for order-free comparison."""
    return sorted(tuple(sorted(a.items())) for a in assignments)


def brute_force_valid(space: SearchSpace) -> list[dict[str, int]]:
    names = [d.name for d in space.dimensions]
    combos = itertools.product(*(range(len(d.values)) for d in space.dimensions))
    return [a for a in (dict(zip(names, c)) for c in combos) if space.is_valid(a)]


def test_exact_size_matches_brute_force_and_enumeration() -> None:
    space = small_space()
    valid = brute_force_valid(space)
    # instruction × slot 3 + 1, label words 2^3 (red/RED, ... stay distinct across classes),
    # joiner 2, few-shot 1 + 2×2×2 (k = 0 pins selection and order), cot/chat 3 (cot needs chat).
    assert len(valid) == 4 * 8 * 2 * 9 * 3
    size = space.size()
    assert size.exact and size.value == len(valid) and str(size) == f"{len(valid):,} (exact)"
    assert canon(space.enumerate()) == canon(valid)


def test_sampling_is_uniform_over_valid_candidates() -> None:
    dims = [Dimension("a", (0, 1, 2), "part:a"), Dimension("b", ("x", "y", "z"), "part:b"),
            Dimension("c", (False, True), "part:c")]
    rules = [Rule("a=0 forbids b=x", lambda v: not (v["a"] == 0 and v["b"] == "x"), ("a", "b")),
             Rule("c needs a>0", lambda v: not v["c"] or v["a"] > 0, ("a", "c"))]
    space = SearchSpace("uniform", PromptSpec(), dims, rules)
    valid = [tuple(sorted(a.items())) for a in brute_force_valid(space)]
    assert len(valid) == 14
    rng = np.random.default_rng(123)
    draws = Counter(tuple(sorted(space.sample(rng).items())) for _ in range(300 * len(valid)))
    assert set(draws) == set(valid)
    assert chisquare([draws[v] for v in valid]).pvalue > 0.01


def test_sampling_is_deterministic_under_seed() -> None:
    space = small_space()
    first = [space.sample(np.random.default_rng(7)) for _ in range(5)]
    again = [space.sample(np.random.default_rng(7)) for _ in range(5)]
    assert first == again and all(space.is_valid(a) for a in first)


def test_size_estimate_with_confidence_interval_for_a_big_constrained_space() -> None:
    dims = [Dimension(f"d{i}", tuple(range(10)), f"part:d{i}") for i in range(7)]
    rule = Rule("sum divisible by 3", lambda v: sum(v.values()) % 3 == 0)  # reads all dimensions
    space = SearchSpace("big", PromptSpec(), dims, [rule], enumerate_limit=10_000)
    counts = [1, 0, 0]  # number of digit strings by sum mod 3, one digit at a time
    for _ in range(7):
        counts = [sum(counts[(r - d) % 3] for d in range(10)) for r in range(3)]
    size = space.size()
    assert not size.exact and size.low <= counts[0] <= size.high
    assert abs(size.value - counts[0]) / counts[0] < 0.05
    assert "estimate" in str(size) and "95% CI" in str(size)


def test_neighbours_differ_in_exactly_one_dimension_and_are_all_found() -> None:
    space = small_space()
    start = space.assignment_of({"few_shot.k": 1, "chat": True})
    found = space.neighbours(start)
    expected = [a for a in brute_force_valid(space)
                if sum(a[n] != start[n] for n in start) == 1]
    assert canon(found) == canon(expected)
    assert all(space.is_valid(a) for a in found)


def test_diff_names_each_changed_dimension() -> None:
    space = small_space()
    a = space.default_candidate()
    b = space.build(space.assignment_of({"only": "solely", "joiner": " ", "few_shot.k": 3}))
    assert space.diff(a, b) == r"word 'only' → 'solely', joiner '\n' → ' ', k 0 → 3"
    assert space.diff(a, a) == "no change"


def test_ids_hash_names_and_values_not_positions() -> None:
    reordered = {**SMALL, "choices": {"joiner": {"target": "intra_separator", "values": [" ", "\n"]}},
                 "slots": {"only": ["solely", "just"]}}
    reordered = dict(reversed(list(reordered.items())))
    task = fake_task()
    one, two = (build_space(c, task).bind(task.splits["train"]) for c in (SMALL, reordered))
    values = {"only": "just", "joiner": " ", "cot": True, "chat": True}
    assert one.build(one.assignment_of(values)).id == two.build(two.assignment_of(values)).id
    ids = {one.build(a).id for a in one.enumerate()}
    assert ids == {two.build(a).id for a in two.enumerate()} and len(ids) == one.size().value


def test_demos_come_from_train_and_are_deterministic() -> None:
    task = fake_task()
    train_ids = {e.id for e in task.splits["train"]}
    shuffled = list(reversed(task.splits["train"]))
    balanced = choose_demos(task.splits["train"], 3, "balanced", 0)
    assert balanced == choose_demos(shuffled, 3, "balanced", 0)
    assert sorted(int(i.split("-")[1]) for i in balanced) == [0, 1, 2]
    assert choose_demos(task.splits["train"], 1, "random", 0) == \
        choose_demos(task.splits["train"], 3, "random", 0)[:1]
    reordered = choose_demos(task.splits["train"], 3, "balanced", 1)
    assert sorted(reordered) == sorted(balanced)
    space = small_space()
    rng = np.random.default_rng(0)
    for _ in range(50):
        assignment = space.sample(rng)
        spec = space.build(assignment).spec
        assert set(spec.demo_ids) <= train_ids
        assert len(spec.demo_ids) == space.values_of(assignment)["few_shot.k"]


def test_demos_render_in_the_live_format() -> None:
    space = small_space()
    task = fake_task()
    spec = space.build(space.assignment_of({"few_shot.k": 1, "instruction": "", "joiner": " "})).spec
    (demo,) = select_demos(spec, {e.id: e for e in task.splits["train"]})
    query = task.splits["dev"][0]
    alone = render(spec, demo, [])
    assert render(spec, query, [demo]).text.startswith(alone.text + alone.label_continuations[demo.label]
                                                       + spec.inter_separator)


def test_unbound_space_with_demos_says_how_to_bind() -> None:
    space = build_space(SMALL, fake_task())
    with pytest.raises(Exception, match="bind the space"):
        space.build(space.assignment_of({"few_shot.k": 1}))
