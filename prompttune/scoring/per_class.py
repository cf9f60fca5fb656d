"""Per-class test figures of the prompts the verdict scored, and the classes a prompt loses.

A prompt can win on total accuracy while one class collapses (on agnews a shipped prompt took
World from 0.884 to 0.712): whoever ships it must see that class flagged, not only the total.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from prompttune.core.types import Record
from prompttune.scoring.confirmation import Verdict


@dataclass
class ClassFigures:
    """One class on test: per prompt, its recall (accuracy on the class's examples) and its precision
    (share of its predictions of the class that are right; None when it never predicted the class)."""

    label: str
    n: int
    recall: dict[str, float]
    precision: dict[str, float | None]


@dataclass
class ClassLoss:
    """A class on which a prompt's recall is below the baseline's by more than the margin."""

    prompt: str
    label: str
    baseline: float
    after: float


@dataclass
class PerClass:
    """Per-class test figures of prompts scored on the same examples, the first the reference the others are
    measured against: a run's baseline, shipped prompt and dev winner (each once), or an evaluated set."""

    margin: float
    prompts: dict[str, str]  # role (baseline, shipped, dev winner; an evaluated prompt's name) -> candidate id
    classes: list[ClassFigures]

    @property
    def reference(self) -> str:
        """The role every other prompt is measured against: the first (a run's baseline)."""
        return next(iter(self.prompts))

    @property
    def losses(self) -> list[ClassLoss]:
        """Every (prompt, class) whose recall drops more than `margin` below the reference's."""
        ref = self.reference
        return [ClassLoss(role, c.label, c.recall[ref], c.recall[role])
                for role in self.prompts if role != ref for c in self.classes
                if c.recall[ref] - c.recall[role] > self.margin]

    @property
    def one_label_prompts(self) -> dict[str, ClassFigures]:
        """Each prompt (the reference aside) whose every labelled answer is one class, with that class: its
        accuracy is at most the class's share, which a constant answer gets with no prompt at all."""
        single = {}
        for role in self.prompts:
            predicted = [c for c in self.classes if c.precision[role] is not None]
            if role != self.reference and len(self.classes) > 1 and len(predicted) == 1:
                single[role] = predicted[0]
        return single

    def warning(self) -> str | None:
        """One line naming each lost class and each prompt that answers a single class, or None."""
        total = sum(c.n for c in self.classes)
        top = max(self.classes, key=lambda c: c.n)
        losses = [f"the {loss.prompt} prompt loses {loss.label} ({loss.baseline:.3f} → {loss.after:.3f}, "
                  f"{loss.after - loss.baseline:+.3f}, beyond the margin {self.margin})" for loss in self.losses]
        constant = [f"the {role} prompt answers {c.label} whenever it answers a label, so it scores at most that "
                    f"class's share ({c.n / total:.3f}; always answering the most frequent class, {top.label}, "
                    f"scores {top.n / total:.3f}; `--objective macro_f1` searches for prompts that tell the "
                    "classes apart)" for role, c in self.one_label_prompts.items()]
        return "; ".join(losses + constant) or None

    def to_dict(self) -> dict:
        return {**asdict(self), "losses": [asdict(loss) for loss in self.losses]}

    @classmethod
    def from_dict(cls, data: dict) -> "PerClass":
        return cls(data["margin"], data["prompts"], [ClassFigures(**c) for c in data["classes"]])


def _figures(label: int, name: str, records: dict[str, list[Record]]) -> ClassFigures:
    recall, precision = {}, {}
    n = sum(r.gold == label for r in next(iter(records.values())))
    for role, rows in records.items():
        predicted = [r for r in rows if r.pred == label]
        recall[role] = sum(r.correct for r in rows if r.gold == label) / n if n else float("nan")
        precision[role] = sum(r.correct for r in predicted) / len(predicted) if predicted else None
    return ClassFigures(name, n, recall, precision)


def class_figures(records: dict[str, list[Record]], prompts: dict[str, str], labels: list[str],
                  margin: float) -> PerClass:
    """Per-class figures of each role's records (all on the same examples); the first role is the reference."""
    return PerClass(margin, prompts, [_figures(k, name, records) for k, name in enumerate(labels)])


def per_class(verdict: Verdict, labels: list[str], margin: float) -> PerClass:
    """The baseline, then the shipped prompt and the dev winner where they differ from it (and the
    dev winner only where it was scored on test)."""
    roles = {"baseline": verdict.baseline.id}
    for role, candidate in (("shipped", verdict.shipped), ("dev winner", verdict.dev_winner)):
        if candidate.id not in roles.values() and candidate.id in verdict.records:
            roles[role] = candidate.id
    return class_figures({role: verdict.records[cid] for role, cid in roles.items()}, roles, labels, margin)
