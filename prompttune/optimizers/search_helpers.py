"""Search moves several strategies share: bootstrapped demo sets, rotating minibatches, ranking,
error directions for critiques.

(Distinct candidate draws live on the space itself: `SearchSpace.distinct_candidates`.)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Literal, Sequence

import numpy as np

from prompttune.core.types import Record
from prompttune.search_spaces.space import Candidate

STYLE_TIPS = ("Be concise.", "Be precise and formal.", "Describe each category briefly.",
              "Phrase it as a question.", "Ask for a one-word answer.", "Be creative.")


def shuffled_demo_sets(solved: Sequence[str], rng: np.random.Generator, count: int, max_demos: int,
                       taken: Sequence[tuple[str, ...]] = ()) -> list[tuple[str, ...]]:
    """Up to `count` new demo sets, each 1..max_demos train examples the prompt answered correctly
    (DSPy's bootstrap: a demo the model gets right is a demo it can imitate), in random order."""
    sets = list(taken)
    for _ in range(50 * max(count, 1)):
        if len(sets) - len(taken) >= count or not solved:
            break
        k = int(rng.integers(1, min(max_demos, len(solved)) + 1))
        demos = tuple(str(i) for i in rng.permutation(solved)[:k])
        if demos not in sets:
            sets.append(demos)
    return sets[len(taken):]


def rank_by_score(scored: Sequence[tuple[Candidate, float]], baseline: Candidate) -> list[Candidate]:
    """Best score first; the baseline wins ties (no change without evidence), then earlier first."""
    order = sorted(range(len(scored)), key=lambda i: (-scored[i][1], scored[i][0].id != baseline.id, i))
    return [scored[i][0] for i in order]


def place_baseline(ranking: Iterable[Candidate], baseline: Candidate,
                   paired: Callable[[Candidate], tuple[float, float] | None]) -> Iterator[Candidate]:
    """`ranking` with the baseline placed by paired score: the candidates that beat the baseline on
    the examples both were scored on, in `ranking`'s order; then the baseline; then the others, in
    `ranking`'s order. `paired(c)` gives (c's score, the baseline's score) on those examples, or None
    when there are none (no evidence: c does not beat the baseline). A tie goes to the baseline, by
    `rank_by_score`'s rule. Lazy: the leader costs only the comparisons up to it."""
    below = []
    for candidate in ranking:
        if candidate.id == baseline.id:
            continue
        scores = paired(candidate)
        if scores is not None and rank_by_score([(baseline, scores[1]), (candidate, scores[0])], baseline)[0] is candidate:
            yield candidate
        else:
            below.append(candidate)
    yield baseline
    yield from below


def rotating_minibatch(pool: Sequence[str], index: int, size: int) -> tuple[str, ...]:
    """The index-th window of `size` ids, wrapping so that every window is full when the pool allows."""
    start = (index * size) % max(1, len(pool) - size + 1)
    return tuple(pool[start:start + size])


@dataclass(frozen=True)
class Direction:
    """One error direction: FP or FN of one class, with the class it is most confused with."""

    kind: Literal["fp", "fn"]
    label: int
    other: int
    errors: tuple[Record, ...]


def error_directions(records: list[Record], n_classes: int, min_errors: int) -> list[Direction]:
    """FP and FN sets per class, largest first; sets under `min_errors` are skipped."""
    directions = []
    for c in range(n_classes):
        fp = [r for r in records if r.pred == c and r.gold != c]
        fn = [r for r in records if r.gold == c and r.pred != c]
        for kind, errors, other_of in (("fp", fp, lambda r: r.gold), ("fn", fn, lambda r: r.pred)):
            if len(errors) >= min_errors:
                # Multiclass: the largest off-diagonal cell names the confusion to fix.
                other = Counter(other_of(r) for r in errors).most_common(1)[0][0]
                directions.append(Direction(kind, c, -1 if other is None else other, tuple(errors)))
    return sorted(directions, key=lambda d: -len(d.errors))


def shown_instruction(spec_instruction: str, label_words: Sequence[str]) -> str:
    """The instruction as a critic reads it: label words written out, "(none)" when empty."""
    return spec_instruction.replace("{labels}", ", ".join(label_words)) or "(none)"


def critique_request(direction: Direction, label_words: Sequence[str], shown: str, instruction: str) -> str:
    """What the critic is asked about one error direction, never pooled (P2G): false positives of a
    class make the instruction stricter about it, false negatives more inclusive."""
    c = label_words[direction.label]
    other = label_words[direction.other] if direction.other >= 0 else "no label"
    if direction.kind == "fp":
        ask = (f"The instruction labels these texts as '{c}', but they are really '{other}':\n{shown}\n"
               f"In one sentence, say how to make the instruction stricter about '{c}'.")
    else:
        ask = (f"The instruction fails to label these '{c}' texts as '{c}' (it says '{other}'):\n{shown}\n"
               f"In one sentence, say how to make the instruction more inclusive for '{c}'.")
    return f"Instruction: {instruction}\n{ask}"


def edit_request(instruction: str, feedback: str, written: Sequence[str], label_words: Sequence[str]) -> str:
    """The edit call after a critique; the rewrites already written are listed, because greedy
    decoding would repeat itself."""
    return (f"Instruction: {instruction}\nFeedback: {feedback}\n"
            + "".join(f"Already proposed (write a different one): {w}\n" for w in written)
            + f"Rewrite the instruction following the feedback. The answer must stay one of: "
            f"{', '.join(label_words)}.\nImproved instruction:")


def instruction_request(shown: str, label_words: Sequence[str], tip: str, task: str | None = None) -> str:
    """The call for one proposed instruction: labelled train examples, a style tip, and the task summary
    where there is one (reflect's samples go without: one call less, and a sample at temperature 1.0
    strays from any summary anyway)."""
    return ("" if task is None else f"Task: {task}\n") + (
            f"Examples:\n{shown}\nThe answer must be one of: {', '.join(label_words)}.\n"
            f"Write one instruction that tells a model how to do this task. {tip}\nInstruction:")
