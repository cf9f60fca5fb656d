"""A task: labelled examples in three disjoint splits plus the label vocabulary."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from prompttune.core.errors import UserError
from prompttune.core.types import Example

SplitName = Literal["train", "dev", "test"]


@dataclass
class Task:
    """Name, labels with verbalizer options, input fields and the train/dev/test splits.

    `verbalizers[i]` lists candidate words for label `i`; the first one is the default.
    """

    name: str
    labels: list[str]
    verbalizers: list[list[str]]
    input_fields: list[str]
    splits: dict[str, list[Example]]
    description: str = ""
    kind: str = "classification"
    meta: dict[str, str] = field(default_factory=dict)

    def split(self, name: SplitName) -> list[Example]:
        return self.splits[name]

    def without_test(self) -> "Task":
        """The view an optimizer receives: the test split is physically absent."""
        visible = {k: v for k, v in self.splits.items() if k != "test"}
        return Task(self.name, self.labels, self.verbalizers, self.input_fields, visible,
                    self.description, self.kind, dict(self.meta))


@dataclass(frozen=True)
class SplitSizes:
    train: int = 1000
    dev: int = 300
    test: int = 1000


def stratified_sample(examples: list[Example], n: int, rng: np.random.Generator) -> list[Example]:
    """Sample n examples keeping class proportions, so small dev/test splits stay balanced."""
    if n >= len(examples):
        order = rng.permutation(len(examples))
        return [examples[i] for i in order]
    by_label: dict[int, list[int]] = {}
    for i, ex in enumerate(examples):
        by_label.setdefault(ex.label, []).append(i)
    labels = sorted(by_label)
    shares = np.array([len(by_label[c]) for c in labels], dtype=float) / len(examples)
    counts = np.floor(shares * n).astype(int)
    for j in np.argsort(-(shares * n - counts))[: n - counts.sum()]:
        counts[j] += 1
    chosen: list[int] = []
    for c, k in zip(labels, counts):
        chosen.extend(rng.choice(by_label[c], size=min(k, len(by_label[c])), replace=False).tolist())
    rng.shuffle(chosen)
    return [examples[i] for i in chosen]


def make_splits(
    pools: dict[str, list[Example]], sizes: SplitSizes, seed: int, name: str
) -> dict[str, list[Example]]:
    """Draw disjoint stratified splits; `pools` maps split name to its source pool.

    Pools may be shared between splits (e.g. dev and test both from an official test file);
    examples drawn for one split are removed before drawing the next, so splits never overlap.
    """
    rng = np.random.default_rng(seed)
    taken: set[str] = set()
    splits: dict[str, list[Example]] = {}
    order = ("test", "dev", "train")
    for position, split in enumerate(order):
        pool = [ex for ex in pools[split] if ex.id not in taken]
        want = getattr(sizes, split)
        if want <= 0 or not pool:
            raise UserError(f"task {name!r}: split {split!r} is empty (asked for {want} examples, "
                            f"{len(pool)} available)")
        sharing = [later for later in order[position + 1:] if pools[later] is pools[split]]
        if sharing and want + sum(getattr(sizes, s) for s in sharing) > len(pool):
            raise UserError(f"task {name!r}: {len(pool)} examples cannot fill {split} {want} + "
                            + " + ".join(f"{s} {getattr(sizes, s)}" for s in sharing)
                            + "; lower --train-size/--dev-size/--test-size")
        splits[split] = stratified_sample(pool, want, rng)
        taken.update(ex.id for ex in splits[split])
    return splits


def check_labels(name: str, labels: list[str], examples: list[Example]) -> None:
    """Every declared label must occur in the data, or accuracy on it means nothing."""
    present = {ex.label for ex in examples}
    missing = [labels[i] for i in range(len(labels)) if i not in present]
    if missing:
        raise UserError(f"task {name!r}: labels absent from the data: {', '.join(missing)}")
