"""A task: labelled examples in three disjoint splits plus the label vocabulary; built from files
(`builtin`, `custom`) or from in-memory rows (`task_from_records`)."""

from __future__ import annotations

import difflib
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Literal, Mapping, Sequence

import numpy as np

from prompttune.core.config import Serve
from prompttune.core.errors import UserError
from prompttune.core.types import Example
from prompttune.tasks.user_prompt import UserPrompt

SplitName = Literal["train", "dev", "test"]


@dataclass
class Task:
    """Name, labels with verbalizer options, input fields and the train/dev/test splits.

    `verbalizers[i]` lists candidate words for label `i`; the first one is the default. `prompt` is the
    user's own prompt, the baseline of the space derived around it; `description` is the baseline instruction
    of the built-in space of a task that has none of its own. `split_note` says how the splits were drawn
    when no sizes were given (so a caller can state it); `warnings` are doubts about the data (a label
    seen once) that a run shows and reports rather than refuses.
    """

    name: str
    labels: list[str]
    verbalizers: list[list[str]]
    input_fields: list[str]
    splits: dict[str, list[Example]]
    description: str = ""
    kind: str = "classification"
    meta: dict[str, str] = field(default_factory=dict)
    prompt: UserPrompt | None = None
    serve: Serve | None = None  # the contract the task file declares (`serve:`); None: the run's, else logprobs
    split_note: str = ""
    warnings: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        """One line a notebook can show: labels, fields and the split it made (not thousands of examples)."""
        sizes = " / ".join(f"{name} {len(self.splits[name])}" for name in SPLITS if name in self.splits)
        note = f" ({self.split_note})" if self.split_note else ""
        doubts = "".join(f"; warning: {warning}" for warning in self.warnings)
        return (f"Task({self.name!r}: labels {', '.join(self.labels)}; input {', '.join(self.input_fields)}; "
                f"{sizes}{note}{doubts})")

    def split(self, name: SplitName) -> list[Example]:
        return self.splits[name]

    @classmethod
    def from_records(cls, records: Any = None, **options: Any) -> "Task":
        """A task from in-memory rows (lists of dicts or a pandas DataFrame): see `task_from_records`
        for the options (`label=` is required).

        >>> rows = [{"text": f"item {i}", "label": ["red", "blue"][i % 2]} for i in range(8)]
        >>> task = Task.from_records(rows, label="label")
        >>> task.labels, {name: len(split) for name, split in task.splits.items()}
        (['blue', 'red'], {'test': 2, 'dev': 2, 'train': 4})
        >>> task.split_note
        'drawn stratified from 8 rows: half train, a quarter dev, a quarter test; split seed 0'
        """
        return task_from_records(records, **options)

    def redraw(self, seed: int) -> "Task":
        """The same examples drawn again into splits of the same sizes with `seed` (stratified, disjoint):
        how a comparison gives each seed its own draw of in-memory data."""
        pool = list({ex.id: ex for split in self.splits.values() for ex in split}.values())
        sizes = SplitSizes(*(len(self.splits[name]) for name in ("train", "dev", "test")))
        return replace(self, splits=make_splits({name: pool for name in ("train", "dev", "test")}, sizes, seed,
                                                self.name), meta=dict(self.meta))

    def without_test(self) -> "Task":
        """The view an optimizer receives: the test split is physically absent."""
        visible = {k: v for k, v in self.splits.items() if k != "test"}
        return replace(self, splits=visible, meta=dict(self.meta))


@dataclass(frozen=True)
class SplitSizes:
    train: int = 1000
    dev: int = 300
    test: int = 1000

    @classmethod
    def shares_of(cls, rows: int) -> "SplitSizes":
        """Half train, a quarter dev, a quarter test of `rows`: the split of data given without sizes."""
        return cls(rows - 2 * (rows // 4), rows // 4, rows // 4)

    @classmethod
    def fitting(cls, rows: int) -> "SplitSizes":
        """The default sizes where one pool of `rows` holds them all, else `shares_of(rows)`."""
        default = cls()
        return default if default.train + default.dev + default.test <= rows else cls.shares_of(rows)


def shares_note(rows: int, seed: int) -> str:
    """How `SplitSizes.shares_of` drew the splits, in words a run can print."""
    return f"drawn stratified from {rows} rows: half train, a quarter dev, a quarter test; split seed {seed}"


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


def rare_label_warnings(name: str, values: Sequence[str]) -> list[str]:
    """A label value seen in one row only is most often a typo (`biling` beside `billing`): it becomes a
    class of its own that no split can teach or test, so name it, and the label it looks like."""
    counts = Counter(values)
    warnings = []
    for value, n in sorted(counts.items()):
        if n != 1:
            continue
        others = [other for other in counts if other != value and counts[other] > 1]
        like = difflib.get_close_matches(value, others, n=1, cutoff=0.6)
        hint = f"; a typo of {like[0]!r} ({counts[like[0]]} rows)?" if like else ""
        warnings.append(f"task {name!r}: label {value!r} occurs in one row only{hint}")
    return warnings


Records = Iterable[Mapping[str, Any]] | Any  # a pandas DataFrame counts too

SPLITS = ("train", "dev", "test")


def _rows(records: Records, what: str) -> list[Mapping[str, Any]]:
    rows = records.to_dict("records") if hasattr(records, "to_dict") else list(records)
    if not all(isinstance(row, Mapping) for row in rows):
        raise UserError(f"{what}: expected a list of dicts (column -> value) or a pandas DataFrame")
    return rows


def label_words(values: Iterable[str], labels: Sequence[str] | Mapping[str, Sequence[str]] | None) -> dict[str, list[str]]:
    """label value -> verbalizer words: given, or the data's own label values (sorted, each its own word)."""
    if labels is None:
        return {value: [value] for value in sorted(set(values))}
    if isinstance(labels, Mapping):
        return {str(k): [str(w) for w in words] for k, words in labels.items()}
    return {str(k): [str(k)] for k in labels}


def check_verbalizers(where: str, words: Mapping[str, Sequence[str]]) -> None:
    """A word may name one label only: a shared one cannot tell them apart (and drops out of every word set)."""
    owner: dict[str, str] = {}
    for label, listed in words.items():
        for word in listed:
            if owner.setdefault(word, label) != label:
                raise UserError(f"{where}: labels {owner[word]!r} and {label!r} share the verbalizer word {word!r}; "
                                f"give each label its own words")


def task_from_records(records: Records | None = None, *, label: str, text: str | Sequence[str] | None = None,
                      labels: Sequence[str] | Mapping[str, Sequence[str]] | None = None,
                      train: Records | None = None, dev: Records | None = None, test: Records | None = None,
                      split: str | None = None, name: str = "records", description: str = "",
                      sizes: SplitSizes | None = None, seed: int = 0) -> Task:
    """A task from rows. Give either `records` (one pool, drawn into stratified train/dev/test by
    `sizes` — by default half, a quarter and a quarter — or divided by its `split` column) or the
    three splits as `train`, `dev` and `test` (used whole). `text` names the input columns (default:
    every column but the label and split); `labels` lists the label values in order, or maps each to
    its verbalizer words (default: the data's distinct values, each its own word)."""
    given = {"train": train, "dev": dev, "test": test}
    if (records is None) == all(v is None for v in given.values()):
        raise UserError(f"task {name!r}: give either records or all of train, dev and test")
    if records is None and any(v is None for v in given.values()):
        raise UserError(f"task {name!r}: give all of train, dev and test (missing: "
                        f"{', '.join(k for k, v in given.items() if v is None)})")
    pools_rows = ({"all": _rows(records, f"task {name!r}")} if records is not None
                  else {k: _rows(v, f"task {name!r}: {k}") for k, v in given.items()})
    every = [row for rows in pools_rows.values() for row in rows]
    if not every:
        raise UserError(f"task {name!r}: no rows")
    columns = [text] if isinstance(text, str) else list(text or [c for c in every[0] if c not in (label, split)])
    needed = {*columns, label, *([split] if split else [])}
    for i, row in enumerate(every):
        if missing := needed - row.keys():
            raise UserError(f"task {name!r}: row {i} lacks {', '.join(sorted(missing))}")
    words = label_words([str(row[label]) for row in every], labels)
    check_verbalizers(f"task {name!r}", words)
    label_names = list(words)
    if unknown := sorted({str(row[label]) for row in every} - set(label_names)):
        raise UserError(f"task {name!r}: the data has labels not listed in labels: {', '.join(unknown)}")
    if len(label_names) < 2:
        raise UserError(f"task {name!r}: a classification task needs at least two labels, found {label_names}")

    def example(row: Mapping[str, Any], i: int, pool: str) -> Example:
        return Example(f"{name}-{pool}-{i}", {c: str(row[c]) for c in columns}, label_names.index(str(row[label])))

    pools = {pool: [example(row, i, pool) for i, row in enumerate(rows)] for pool, rows in pools_rows.items()}
    check_labels(name, label_names, [ex for exs in pools.values() for ex in exs])
    note = ""
    if records is None:
        splits = pools
    elif split:
        splits = {s: [] for s in SPLITS}
        for row, ex in zip(pools_rows["all"], pools["all"]):
            if str(row[split]) not in SPLITS:
                raise UserError(f"task {name!r}: unknown split value {row[split]!r} (use train, dev, test)")
            splits[str(row[split])].append(ex)
    else:
        n = len(pools["all"])
        note = "" if sizes else shares_note(n, seed)  # the API states the split it made
        splits = make_splits({s: pools["all"] for s in SPLITS}, sizes or SplitSizes.shares_of(n), seed, name)
    if empty := [s for s in SPLITS if not splits[s]]:
        raise UserError(f"task {name!r}: split {empty[0]!r} is empty")
    return Task(name, label_names, [words[k] for k in label_names], columns, splits, description,
                split_note=note,
                warnings=rare_label_warnings(name, [str(row[label]) for row in every]))
